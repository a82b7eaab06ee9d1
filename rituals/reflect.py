"""The weekly reflect ritual, composed from memory's parts.

In order: move events older than `archive_after_days` to the archive (one transaction, then a
WAL checkpoint); seal the ladder level by level (model-written summaries within a per-run budget
when a model is configured, extractive otherwise); pass promotion candidates through the gate
(until the gate exists, the step records that it did nothing); record the run and its figures in
`ritual_runs`; regenerate `state/memory-map.md` from the database (so the map shows this run).
`dry_run` reports what it would archive and seal and writes nothing.

This module is where a model meets memory: it builds the `summarize` callable and hands it to
the ladder, which never imports the model.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import resource
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from runtime.home import Home
from runtime.memory import ladder, memmap
from runtime.settings import Settings
from runtime.store import Store
from runtime.store import archive as arch
from runtime.store import rituals as rr

log = logging.getLogger(__name__)

NAME = "reflect"


@dataclass
class ReflectReport:
    dry_run: bool = False
    archived: int = 0
    sealed: dict[int, int] = field(default_factory=dict)
    methods: dict[str, int] = field(default_factory=dict)
    summary_calls: int = 0
    summary_fallbacks: int = 0
    null_spans: int = 0
    promotions: str = "not run: the promotion gate does not exist yet"
    seconds: float = 0.0
    peak_rss_mb: float = 0.0
    map_bytes: int = 0

    def as_stats(self) -> dict[str, Any]:
        d = asdict(self)
        d["sealed"] = {str(k): v for k, v in self.sealed.items()}
        return d


def cutoff(settings: Settings, now: datetime | None = None) -> str:
    now = now or datetime.now(UTC)
    when = now - timedelta(days=settings.memory.archive_after_days)
    return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def reflect(home: Home, settings: Settings, store: Store, *, dry_run: bool = False,
            summarize: ladder.Summarize | None = None, summarizer_name: str = "model",
            now: datetime | None = None,
            progress: Callable[[int], None] | None = None) -> ReflectReport:
    t0 = time.monotonic()
    report = ReflectReport(dry_run=dry_run)
    limit = cutoff(settings, now)
    fanout = settings.memory.ladder_fanout
    if dry_run:
        report.archived = arch.count_older_than(store, limit)
        report.sealed = ladder.plan(store, fanout)
        report.promotions = "dry run: nothing gathered"
        report.seconds = round(time.monotonic() - t0, 3)
        return report

    run_id = rr.start(store, NAME)
    try:
        report.archived = arch.move_older_than(store, limit)
        if report.archived:
            log.info("reflect: archived %d events older than %s", report.archived, limit)
        summarizer = ladder.Summarizer(summarize, summarizer_name,
                                       settings.memory.summary_calls_per_run)
        sealed = ladder.seal(store, fanout, summarizer, progress)
        report.sealed = dict(sorted(sealed.sealed.items()))
        report.methods = dict(sealed.methods)
        report.summary_calls = summarizer.used
        report.summary_fallbacks = sealed.summary_fallbacks
        report.null_spans = sealed.null_spans
        report.seconds = round(time.monotonic() - t0, 3)
        report.peak_rss_mb = round(_peak_rss_mb(), 1)
        rr.finish(store, run_id, "ok", report.as_stats())
    except BaseException as e:
        log.error("reflect failed: %s: %s", type(e).__name__, e)
        try:
            rr.finish(store, run_id, "failed", {"error": f"{type(e).__name__}: {e}"})
        except Exception:
            log.exception("could not record the failed reflect run")
        raise
    report.map_bytes = memmap.write(store, home.memory_map, settings.coworker.name)
    log.info("reflect: sealed %s, %.1f s, map %d bytes", report.sealed or "nothing",
             report.seconds, report.map_bytes)
    return report


# --- the model-written summary path ------------------------------------------------------

PROMPT = (
    "Summarise this stretch of a coworker's history for its long-term memory. Answer with JSON "
    'only: {{"title": "at most 8 words", "summary": "1 to 3 sentences that cite the ids in '
    'square brackets, like [#12]"}}. Use only facts present below.\n\nLevel {level} items:\n{items}'
)
_JSON = re.compile(r"\{.*\}", re.S)


def model_summarizer(settings: Settings) -> ladder.Summarize | None:
    """A `summarize` callable backed by the configured model, or None when there is none.

    Each call runs its own short event loop, so it works from the CLI and from the worker
    thread the running loop hands reflect to."""
    if not settings.model_enabled():
        return None
    from runtime.model import Model

    def summarize(level: int, items: Sequence[tuple[int, str]]) -> tuple[str, str] | None:
        text = "\n".join(f"[#{i}] {' '.join(t.split())[:500]}" for i, t in items)
        prompt = PROMPT.format(level=level, items=text[:12000])

        async def call() -> str:
            model = Model(settings.model)
            try:
                reply = await model.create(system=[], tools=[], messages=[
                    {"role": "user", "content": prompt}])
                return reply.text
            finally:
                await model.close()

        answer = asyncio.run(call())
        match = _JSON.search(answer)
        if not match:
            raise ValueError("the summary answer holds no JSON object")
        data = json.loads(match.group(0))
        return str(data.get("title", "")), str(data.get("summary", ""))

    return summarize


def run(home: Home, settings: Settings, *, dry_run: bool = False,
        progress: Callable[[int], None] | None = None) -> ReflectReport:
    """Open the store, run reflect with the configured summarizer, close the store."""
    with Store.open(home.db_path) as store:
        return reflect(home, settings, store, dry_run=dry_run,
                       summarize=model_summarizer(settings),
                       summarizer_name=settings.model.name, progress=progress)
