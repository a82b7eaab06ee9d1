"""`coworker eval locomo`: the LoCoMo evidence-retrieval task, through the loop's recall path.

Owns loading the file, giving each conversation its own fresh, isolated home (turns imported as
events with their session dates and `meta.dia_id`, then reflect as in life, so old turns sit in
the archive under the ladder), asking every question of categories 1-4, and the metrics:
turn recall@k, hit@k, MRR@10, session recall@k, overall and per category, with explicit
denominators (questions whose evidence does not resolve are counted and left out), the
invariant hit@1 <= MRR@10 <= hit@1 + (hit@10 - hit@1)/2 checked on every run, and latency.
"""

from __future__ import annotations

import json
import re
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from .errors import CoworkerError, UsageError
from .home import Home
from .memory.cards import Distinctive
from .memory.recall import recall
from .memory.walk import query_tokens
from .store import Event, Store
from .store import events as ev

CATEGORIES = (1, 2, 3, 4)
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}
CHANNELS = ("lexical", "hybrid", "bm25")
_DT = re.compile(r"(\d{1,2}):(\d{2})\s*(am|pm)\s+on\s+(\d{1,2})\s+(\w+),?\s+(\d{4})", re.I)


class InvariantViolated(CoworkerError):
    """The metrics contradict each other: a bug in the metric code, not in memory."""


def session_time(text: str) -> datetime:
    m = _DT.search(text or "")
    if not m:
        raise ValueError(f"unreadable session date {text!r}")
    hour, minute, ampm, day, month, year = m.groups()
    h = int(hour) % 12 + (12 if ampm.lower() == "pm" else 0)
    when = datetime.strptime(f"{day} {month} {year}", "%d %B %Y")
    return when.replace(hour=h, minute=int(minute), tzinfo=UTC)


def turns(sample: dict[str, Any]) -> list[tuple[str, datetime, str, str]]:
    """(dia_id, time, speaker, text) for every turn, in order; a shared photo is described."""
    conv = sample["conversation"]
    out = []
    n = 1
    while f"session_{n}" in conv:
        start = session_time(conv.get(f"session_{n}_date_time", ""))
        for i, t in enumerate(conv[f"session_{n}"]):
            text = t.get("text", "")
            if t.get("blip_caption"):
                text += f" [shares a photo: {t['blip_caption']}]"
            out.append((t["dia_id"], start + timedelta(seconds=30 * i), t["speaker"], text))
        n += 1
    return out


# --- metrics ---------------------------------------------------------------------------------

def session_of(dia_id: str) -> str:
    return dia_id.split(":")[0]


def question_metrics(ranked: Sequence[str], evidence: Sequence[str], k: int) -> dict[str, float]:
    ev_set = set(evidence)
    top = list(ranked[:k])
    first = next((i for i, d in enumerate(ranked[:10]) if d in ev_set), None)
    sessions = {session_of(d) for d in ev_set}
    return {
        "turn_recall": len(ev_set & set(top)) / len(ev_set),
        "hit": 1.0 if ev_set & set(top) else 0.0,
        "mrr10": 0.0 if first is None else 1.0 / (first + 1),
        "session_recall": len(sessions & {session_of(d) for d in top}) / len(sessions),
        "hit1": 1.0 if ranked[:1] and ranked[0] in ev_set else 0.0,
        "hit10": 1.0 if ev_set & set(ranked[:10]) else 0.0,
    }


def aggregate(rows: Iterable[dict[str, float]]) -> dict[str, float]:
    rows = list(rows)
    if not rows:
        return {"n": 0}
    keys = rows[0].keys()
    return {"n": len(rows), **{key: round(sum(r[key] for r in rows) / len(rows), 4)
                               for key in keys}}


def check_invariant(agg: dict[str, float], where: str = "overall") -> None:
    """hit@1 <= MRR@10 <= hit@1 + (hit@10 - hit@1)/2, which any correct MRR satisfies."""
    if not agg.get("n"):
        return
    h1, mrr, h10 = agg["hit1"], agg["mrr10"], agg["hit10"]
    eps = 1e-4  # the aggregates are rounded to 4 places
    if not (h1 - eps <= mrr <= h1 + (h10 - h1) / 2 + eps):
        raise InvariantViolated(
            f"metric invariant violated ({where}): hit@1 {h1} <= MRR@10 {mrr} <= hit@1 + "
            f"(hit@10 - hit@1)/2 = {h1 + (h10 - h1) / 2:.4f} does not hold; the metric code "
            "is wrong")


# --- channels ---------------------------------------------------------------------------------

def _bm25_ranker(store: Store) -> Callable[[str, int], list[Event]]:
    """The baseline: plain FTS5 bm25 over the turns, same tokenizer, same query words."""
    def rank(question: str, n: int) -> list[Event]:
        match = ev.fts_query(query_tokens(question))
        return [e for e, _, _ in ev.fts_search(store, match, n)] if match else []
    return rank


def _lexical_ranker(store: Store) -> Callable[[str, int], list[Event]]:
    scorer = Distinctive(store)

    def rank(question: str, n: int) -> list[Event]:
        return [h.event for h in recall(store, question, k=n, scorer=scorer).hits]
    return rank


def _hybrid_ranker(store: Store, embedder: object, gate: float) -> Callable[[str, int], list[Event]]:
    from .memory.embed import Matrix
    from .memory.recall import recall_hybrid

    scorer = Distinctive(store)
    matrix = Matrix.load(store, embedder.name)  # type: ignore[attr-defined]

    def rank(question: str, n: int) -> list[Event]:
        return [h.event for h in recall_hybrid(store, question, embedder=embedder,
                                               matrix=matrix, gate=gate, k=n,
                                               scorer=scorer).hits]
    return rank


RANKERS = {"lexical": _lexical_ranker, "bm25": _bm25_ranker, "hybrid": _hybrid_ranker}


def eval_embedder() -> tuple[object, float]:
    """The embedder for `--channels hybrid`: the [semantic] settings of the coworker home in
    COWORKER_HOME or the current folder when it enables one, else all-MiniLM in process."""
    from .memory.embed import LocalEmbedder, make_embedder

    home = Home.locate()
    if home.is_initialised():
        cfg = home.settings().semantic
        embedder = make_embedder(cfg)
        if embedder is not None:
            return embedder, cfg.gate
    from .settings import SemanticSection

    return LocalEmbedder("all-minilm"), SemanticSection().gate


# --- the run ----------------------------------------------------------------------------------

@dataclass
class Report:
    channels: str
    k: int
    conversations: int = 0
    questions_total: int = 0
    questions_valid: int = 0
    questions_invalid: int = 0
    overall: dict[str, float] = field(default_factory=dict)
    per_category: dict[str, dict[str, float]] = field(default_factory=dict)
    latency_ms: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def load(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise UsageError(f"no such file: {path}; give a LoCoMo data file: data/locomo10.json "
                         "from https://github.com/snap-research/LoCoMo (CC BY-NC 4.0; see "
                         "docs/benchmarks.md)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise UsageError(f"{path.name} is not JSON ({e}); give a LoCoMo file") from e
    if not isinstance(data, list) or not all("qa" in s and "conversation" in s for s in data):
        raise UsageError(f"{path.name} is not a LoCoMo file (a list of samples with "
                         "'conversation' and 'qa')")
    return data


def build_home(root: Path, sample: dict[str, Any],
               embedder: object | None = None) -> tuple[Home, set[str]]:
    """A fresh coworker home holding one conversation, reflected as in life (and embedded,
    for the hybrid channel)."""
    from rituals.reflect import reflect

    home = Home(root)
    home.init()
    rows = turns(sample)
    with Store.open(home.db_path) as store:
        ev.append_many(store, [
            Event(kind="message", body=text, actor=speaker, author_kind="third_party",
                  ts=when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
                  meta={"dia_id": dia, "imported": True})
            for dia, when, speaker, text in rows])
        reflect(home, home.settings(), store)
        if embedder is not None:
            from .memory.embed import backfill

            backfill(store, embedder)  # type: ignore[arg-type]
    return home, {r[0] for r in rows}


def run(path: Path, k: int = 10, channels: str = "lexical", out: Path | None = None,
        progress: Callable[[str], None] | None = None) -> Report:
    if channels not in RANKERS:
        raise UsageError(f"unknown channels {channels!r}: use one of {', '.join(RANKERS)}")
    samples = load(path)
    report = Report(channels, k)
    embedder, gate = eval_embedder() if channels == "hybrid" else (None, 0.0)
    per_q: list[tuple[int, dict[str, float]]] = []
    latencies: list[float] = []
    out_f = out.open("w", encoding="utf-8") if out else None
    try:
        for sample in samples:
            report.conversations += 1
            if progress:
                progress(sample.get("sample_id", "?"))
            with tempfile.TemporaryDirectory() as tmp:
                home, dia_ids = build_home(Path(tmp) / "home", sample, embedder)
                with Store.open(home.db_path, readonly=True) as store:
                    rank = (_hybrid_ranker(store, embedder, gate) if embedder is not None
                            else RANKERS[channels](store))
                    for qi, qa in enumerate(sample["qa"]):
                        if qa.get("category") not in CATEGORIES:
                            continue
                        report.questions_total += 1
                        evidence = [d for d in qa.get("evidence", []) if isinstance(d, str)]
                        valid = [d for d in evidence if d in dia_ids]
                        t0 = time.perf_counter()
                        ranked_events = rank(str(qa["question"]), max(k, 10))
                        latencies.append((time.perf_counter() - t0) * 1000)
                        ranked = list(dict.fromkeys(
                            e.meta.get("dia_id") for e in ranked_events if e.meta.get("dia_id")))
                        if out_f:
                            out_f.write(json.dumps({"sample_id": sample.get("sample_id"),
                                                    "qa_index": qi, "ranked": ranked[:k]}) + "\n")
                        if not valid or len(valid) != len(evidence):
                            report.questions_invalid += 1
                            continue
                        report.questions_valid += 1
                        per_q.append((int(qa["category"]), question_metrics(ranked, valid, k)))
    finally:
        if out_f:
            out_f.close()
    report.overall = aggregate(m for _, m in per_q)
    check_invariant(report.overall)
    for c in CATEGORIES:
        agg = aggregate(m for cat, m in per_q if cat == c)
        check_invariant(agg, f"category {c}")
        report.per_category[f"{c} {CATEGORY_NAMES[c]}"] = agg
    if latencies:
        xs = sorted(latencies)
        report.latency_ms = {"p50": round(statistics.median(xs), 3),
                             "p95": round(xs[min(len(xs) - 1, int(0.95 * (len(xs) - 1) + 0.5))], 3)}
    return report
