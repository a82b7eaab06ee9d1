"""`coworker demo`: a newcomer's first five minutes, offline, with no key.

Owns seeding a fresh temporary home with two weeks of generated triage work (deterministic
text from runtime.synth, dated to end today), running reflect, and choosing one query the
memory holds and one it does not. Printing is the CLI's; this module returns what to show.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from .home import Home
from .importer import import_file
from .synth import write_jsonl

EVENTS = 840  # about two weeks of working days at the synthetic pace
UNKNOWN_QUERY = "kubernetes helm upgrade"


@dataclass
class Demo:
    home: Home
    imported: int
    reflect: dict
    found_query: str
    refused_query: str = UNKNOWN_QUERY


def build(root: Path) -> Demo:
    from rituals.reflect import reflect

    home = Home(root)
    home.init()
    # A week's archive window, so the first week moves to the archive as it would in life.
    cfg = home.config_path.read_text(encoding="utf-8")
    cfg = cfg.replace("archive_after_days = 30", "archive_after_days = 7")
    cfg = cfg.replace('provider = "anthropic"', 'provider = "none"')
    home.config_path.write_text(cfg, encoding="utf-8")
    start = (datetime.now(UTC) - timedelta(days=14)).replace(hour=9, minute=0, second=0,
                                                            microsecond=0)
    src = write_jsonl(root / "two-weeks.jsonl", EVENTS, seed=7, start=start)
    first = json.loads(src.read_text(encoding="utf-8").splitlines()[0])
    # "Ticket #101: the parser crashes on unicode input. Can you look?" -> a query from it
    words = first["body"].split(": ", 1)[1].replace("the ", "").removesuffix(" Can you look?")
    words = words.rstrip(".")
    with home.open_store() as store:
        report = import_file(store, src)
        reflected = reflect(home, home.settings(), store)
    return Demo(home, report.imported, reflected.as_stats(), " ".join(words.split()[:4]))
