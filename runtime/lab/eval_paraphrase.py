"""`coworker eval paraphrase`: the hand-written paraphrase set (issue 14), asked of every door.

Owns the run: a fresh temporary home holds the synthetic history of `lab.history`
(imported, then reflected offline and extractive, as in life); every question of the chosen half
is asked of search, recall and the walk, and unanswerable ones measure the walk's refusals and
the recall block's noise. The questions are `lab.paraphrase_set`'s (read from
`lab/data/paraphrase.json`); the channels (rankers and the embedder) are `lab.evaluate`'s. It
reads; it never calls a chat model.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ..home import Home
from ..memory.cards import Distinctive
from ..store import Event, Store
from ..store import events as ev
from . import PARAPHRASE_HALVES
from .evaluate import (
    RANKERS,
    _bm25_ranker,
    _hybrid_ranker,
    checked_model,
    eval_embedder,
    eval_home,
    loop_recall,
)

if TYPE_CHECKING:
    from ..memory.embed import Embedder

# --- `coworker eval paraphrase`: the hand-written paraphrase set (issue 14) -------------------
#
# A fresh temporary home holds the synthetic history (imported, then reflected offline and
# extractive, as in life); every question of the chosen half is asked of search, recall and the
# walk, and unanswerable ones measure the walk's refusals and the recall block's noise.

HALVES = PARAPHRASE_HALVES
TOP = 5  # search and recall hits that count


@dataclass(frozen=True)
class Question:
    id: str  # fact id + ":exact" / ":paraphrase", or the unanswerable question's id
    kind: str  # exact, paraphrase, unanswerable
    half: str
    text: str
    fact: str | None  # the fact it asks about; None when nothing answers it


def set_questions(facts: Sequence[Any], unanswerable: Sequence[Any], half: str
                  ) -> list[Question]:
    """A set's questions of `half`: each fact's exact and paraphrase, then the unanswerable."""
    if half not in HALVES:
        raise UsageError(f"unknown half {half!r}: use one of {', '.join(HALVES)}")
    qs = [Question(f"{f.id}:{kind}", kind, f.half, getattr(f, kind), f.id)
          for f in facts for kind in ("exact", "paraphrase")]
    qs += [Question(u.id, "unanswerable", u.half, u.question, None) for u in unanswerable]
    return [q for q in qs if half == "all" or q.half == half]


def paraphrase_questions(half: str = "all") -> list[Question]:
    from .paraphrase_set import FACTS, UNANSWERABLE

    return set_questions(FACTS, UNANSWERABLE, half)


def build_history_home(root: Path, rows: list[dict[str, Any]], tag: str,
                       embedder: Embedder | None = None
                       ) -> tuple[Home, dict[str, set[int]], int]:
    """A fresh home holding `rows` (a set's history), written in order and reflected offline
    (and embedded, for hybrid); the event ids of each value of `meta[tag]`, and how many events
    there are. A home `evaluate.new_home` already made at `root` keeps its store."""
    from rituals.reflect import reflect

    home = Home(root)
    home.init()
    cfg = home.config_path.read_text(encoding="utf-8")
    home.config_path.write_text(cfg.replace('provider = "anthropic"', 'provider = "none"'),
                                encoding="utf-8")
    with home.open_store() as store:
        # Appended as the loop would have written them (the importer refuses `tick_end`, the
        # loop's own bookkeeping), in order, with their timestamps.
        ids = ev.append_many(store, [
            Event(kind=r["kind"], body=r["body"], actor=r["actor"], author_kind=r["author_kind"],
                  ts=r["ts"].replace("Z", ".000Z"), meta={**r["meta"], "imported": True})
            for r in rows])
        reflect(home, home.settings(), store)
        if embedder is not None:
            from ..memory.embed import backfill, backfill_rollups

            backfill(store, embedder)
            backfill_rollups(store, embedder)
    tagged: dict[str, set[int]] = {}
    for r, i in zip(rows, ids, strict=True):
        if tag in r["meta"]:
            tagged.setdefault(r["meta"][tag], set()).add(int(i))
    return home, tagged, len(rows)


def build_paraphrase_home(root: Path, embedder: Embedder | None = None
                          ) -> tuple[Home, dict[str, set[int]], int]:
    """A fresh home holding the synthetic history of `lab.history`; the event ids of every
    fact, and how many events there are."""
    from .history import events as history_events

    return build_history_home(root, history_events(), "fact", embedder)


def _share(hits: int, of: int) -> dict[str, Any]:
    return {"hits": hits, "of": of, "rate": round(hits / of, 4) if of else None}


@dataclass
class ParaphraseReport:
    channels: str
    half: str
    events: int = 0
    facts: int = 0
    kinds: dict[str, dict[str, Any]] = field(default_factory=dict)
    questions: list[dict[str, Any]] = field(default_factory=list)
    latency_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    calibration: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class _Asker:
    """The doors a question goes through, on one read-only store."""

    def __init__(self, store: Store, home: Home, channels: str, embedder: Embedder | None,
                 gate: float) -> None:
        from ..memory.recall import BUDGET

        self.store, self.channels = store, channels
        self.cfg = home.settings().recall
        self.budget = BUDGET
        self.scorer = Distinctive(store)
        self.rank = (_hybrid_ranker(store, embedder, gate) if embedder is not None
                     else RANKERS[channels](store))
        self.embedder, self.gate = embedder, gate
        self.matrix = None
        if embedder is not None:
            from ..memory.embed import Matrix

            self.matrix = Matrix.load(store, embedder.name)
        self.ms: dict[str, list[float]] = {"search": [], "recall": [], "walk": [], "embed": []}
        self._vectors: dict[str, Any] = {}

    def _timed(self, what: str, fn: Callable[[], Any]) -> Any:
        t0 = time.perf_counter()
        got = fn()
        self.ms[what].append((time.perf_counter() - t0) * 1000)
        return got

    def search_ids(self, text: str) -> tuple[set[int], list[tuple[int, int]]]:
        """The event ids among the top hits, and the (first, last) spans of the rollups."""
        from ..memory.search import search
        from ..store import rollups as rl

        if self.channels == "bm25":
            hits = self._timed("search", lambda: _bm25_ranker(self.store)(text, TOP))
            return {int(e.id or 0) for e in hits}, []
        semantic = ((lambda other=None: (self.vector(other or text), self.matrix))
                    if self.embedder is not None else None)
        found = self._timed("search", lambda: search(self.store, text, limit=TOP,
                                                     semantic=semantic, gate=self.gate))
        spans = []
        for h in found:
            r = rl.get(self.store, h.id) if h.kind == "rollup" else None
            if r is not None and r.first_event is not None and r.last_event is not None:
                spans.append((r.first_event, r.last_event))
        return {h.id for h in found if h.kind == "event"}, spans

    def recall_ids(self, text: str) -> list[int]:
        return [int(e.id or 0) for e in self._timed("recall", lambda: self.rank(text, TOP))]

    def block(self, text: str) -> str | None:
        """The recall block the loop would inject for `text`, with the loop's budget."""
        return loop_recall(self.store, text, self.embedder, self.matrix, self.gate,
                           self.scorer).block(self.budget)

    def vector(self, text: str) -> Any:
        """The query's vector, embedded once per question (and timed as the query's cost)."""
        embedder = self.embedder
        if text not in self._vectors and embedder is not None:
            self._vectors[text] = self._timed("embed", lambda: embedder.embed([text])[0])
        return self._vectors[text]

    def walk(self, text: str) -> tuple[bool, set[int], str | None]:
        from ..memory.walk import walk_result

        semantic = ((lambda other=None: (self.vector(other or text), self.matrix))
                    if self.embedder is not None else None)
        got = self._timed("walk", lambda: walk_result(self.store, text, semantic=semantic))
        return got.refused, {int(f.event.id or 0) for f in got.events}, got.entry

    def probe(self, text: str) -> dict[str, Any] | None:
        """The semantic probe's figures for `text`, whatever the walk did (for calibration)."""
        from ..memory.nearest import probe

        if self.embedder is None:
            return None
        pr = probe(self.store, self.vector(text), self.matrix)
        return None if pr is None else {**pr.as_dict(), "events": [i for i, _ in pr.events]}

    def ask(self, q: Question, facts: dict[str, set[int]]) -> dict[str, Any]:
        refused, walked, entry = self.walk(q.text)
        block = self.block(q.text)
        row: dict[str, Any] = {"id": q.id, "kind": q.kind, "half": q.half, "question": q.text,
                               "entry": entry}
        pr = self.probe(q.text)
        if pr is not None:
            pr["holds_answer"] = bool(facts.get(q.fact or "", set()) & set(pr.pop("events")))
            row["probe"] = pr
        if q.fact is None:
            return {**row, "walk": "refused" if refused else "entered",
                    "noise": block is not None}
        want = facts[q.fact]
        events, spans = self.search_ids(q.text)
        in_span = any(a <= i <= b for i in want for a, b in spans)
        in_block = any(f"[event {i} " in (block or "") for i in want)
        return {**row, "search_top5": bool(want & events) or in_span,
                "search_top5_event": bool(want & events),
                "recall_top5": bool(want & set(self.recall_ids(q.text))),
                "recall_block": in_block,
                "walk": "refused" if refused else ("found" if want & walked else "wrong")}


def _summary(rows: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    mine = [r for r in rows if r["kind"] == kind]
    n = len(mine)

    def count(key: str, value: Any = True) -> int:
        return sum(1 for r in mine if r[key] == value)

    if kind == "unanswerable":
        return {"questions": n, "walk_refused": _share(count("walk", "refused"), n),
                "noise": _share(count("noise"), n)}
    return {"questions": n, "search_top5": _share(count("search_top5"), n),
            "search_top5_event": _share(count("search_top5_event"), n),
            "recall_top5": _share(count("recall_top5"), n),
            "recall_block": _share(count("recall_block"), n),
            "walk_found": _share(count("walk", "found"), n),
            "walk_refused": _share(count("walk", "refused"), n),
            "walk_wrong": _share(count("walk", "wrong"), n)}


def _percentiles(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}
    xs = sorted(xs)
    return {"p50": round(statistics.median(xs), 3),
            "p95": round(xs[min(len(xs) - 1, int(0.95 * (len(xs) - 1) + 0.5))], 3)}


Build = Callable[[Path, "Embedder | None"], tuple[Home, dict[str, set[int]], int]]


def ask_all(report: ParaphraseReport, home: Home, answers: dict[str, set[int]],
            questions: list[Question], embedder: Embedder | None, gate: float) -> None:
    """Ask every question of a built home through the report's channels; fill the report."""
    with home.open_store(readonly=True) as store:
        asker = _Asker(store, home, report.channels, embedder, gate)
        report.questions = [asker.ask(q, answers) for q in questions]
    report.kinds = {k: _summary(report.questions, k)
                    for k in ("exact", "paraphrase", "unanswerable")}
    report.latency_ms = {what: _percentiles(xs) for what, xs in asker.ms.items() if xs}
    if embedder is not None:
        report.calibration = calibration(report.questions,
                                         str(getattr(embedder, "name", "")))


def run_set(questions: list[Question], build: Build, channels: str, half: str,
            progress: Callable[[str], None] | None, model: str | None,
            store_url: str | None = None) -> ParaphraseReport:
    """Ask `questions` of the home `build` makes, through `channels` (see the section note);
    `store_url`: the home's store on that PostgreSQL database, in a schema of its own dropped
    afterwards (`evaluate.eval_home`), instead of a SQLite file."""
    checked_model(channels, model)
    embedder, gate = eval_embedder(model) if channels == "hybrid" else (None, 0.0)
    report = ParaphraseReport(channels, half)
    with tempfile.TemporaryDirectory() as tmp, eval_home(Path(tmp) / "home", store_url) as made:
        if progress:
            progress("building the history's home (import, reflect"
                     + (", embed)" if embedder is not None else ")"))
        home, answers, report.events = build(made.root, embedder)
        report.facts = len({q.fact for q in questions if q.fact})
        ask_all(report, home, answers, questions, embedder, gate)
    return report


def run_paraphrase(channels: str = "lexical", half: str = "all",
                   progress: Callable[[str], None] | None = None,
                   model: str | None = None, store_url: str | None = None) -> ParaphraseReport:
    """Ask the paraphrase set's questions of `half` through `channels` (see the section note);
    `model`: with hybrid, the packaged local model to embed with (`eval_embedder`);
    `store_url`: on that PostgreSQL database (`run_set`)."""
    checked_model(channels, model)
    return run_set(paraphrase_questions(half), build_paraphrase_home, channels, half, progress,
                   model, store_url)


# --- the semantic entry's calibration (ADR-0020) ----------------------------------------------

def _probed(rows: list[dict[str, Any]], half: str) -> tuple[Any, Any]:
    import numpy as np

    # a probe below a line set aside as routine has no margin by rule, not by measure: it is
    # left out of the fit (memory.nearest). One for a query naming what no event holds keeps
    # its measured figures and stays in: the fit is of the vectors; the names are a rule
    # applied after it, and such questions are most of the negatives a fit must see.
    mine = [r for r in rows if "probe" in r and (half == "all" or r["half"] == half)
            and not r["probe"].get("behind_routine")]
    x = np.asarray([[r["probe"]["best"], r["probe"]["margin"]] for r in mine], dtype=float)
    y = np.asarray([1.0 if r["probe"]["holds_answer"] else 0.0 for r in mine])
    return x.reshape(-1, 2), y


def fit(rows: list[dict[str, Any]], half: str = "tuning", l2: float = 1.0) -> dict[str, float]:
    """Logistic regression of "the probe's events hold the answer" on (best cosine, margin),
    over the questions of `half` (every kind: exact, paraphrase, unanswerable): Newton steps on
    standardised features with an L2 penalty of `l2` (few questions, nearly separable: without
    it the weights run off to infinity), deterministic. The coefficients go to
    `memory.nearest.CALIBRATIONS`, under the model's name."""
    import numpy as np

    x, y = _probed(rows, half)
    if not len(y):
        raise UsageError("no probed questions to calibrate on: run with --channels hybrid")
    mu, sd = x.mean(axis=0), x.std(axis=0) + 1e-9
    z = np.hstack([np.ones((len(y), 1)), (x - mu) / sd])
    w = np.zeros(3)
    penalty = np.diag([0.0, l2, l2])
    for _ in range(50):
        p = 1 / (1 + np.exp(-(z @ w)))
        grad = z.T @ (p - y) + penalty @ w
        hess = z.T @ (z * (p * (1 - p))[:, None]) + penalty + 1e-9 * np.eye(3)
        w -= np.linalg.solve(hess, grad)
    best, margin = w[1] / sd[0], w[2] / sd[1]
    bias = w[0] - best * mu[0] - margin * mu[1]
    return {"bias": round(float(bias), 3), "best": round(float(best), 3),
            "margin": round(float(margin), 3)}


def recalibrated(rows: list[dict[str, Any]], cal: dict[str, float]) -> list[dict[str, Any]]:
    """The rows with each probe's confidence recomputed under `cal`, with the probe's rules
    applied after (`memory.nearest.ruled`: a probe behind a routine line has none)."""
    from ..memory.nearest import confidence, ruled

    return [{**r, "probe": {**r["probe"], "confidence": ruled(
        confidence(r["probe"]["best"], r["probe"]["margin"], cal),
        bool(r["probe"].get("behind_routine")))}}
            if "probe" in r else r for r in rows]


def reliability(rows: list[dict[str, Any]], half: str) -> dict[str, Any]:
    """How the confidences of `half` hold: Brier score, and per side of the 0.5 threshold the
    questions, the mean confidence and the share whose probe held the answer."""
    mine = [r["probe"] for r in rows if "probe" in r and (half == "all" or r["half"] == half)]
    if not mine:
        return {}
    out: dict[str, Any] = {"questions": len(mine), "brier": round(sum(
        (p["confidence"] - (1.0 if p["holds_answer"] else 0.0)) ** 2 for p in mine)
        / len(mine), 4)}
    for side, keep in (("confident", lambda c: c >= 0.5), ("not_confident", lambda c: c < 0.5)):
        got = [p for p in mine if keep(p["confidence"])]
        out[side] = {"questions": len(got),
                     "mean_confidence": round(sum(p["confidence"] for p in got) / len(got), 4)
                     if got else None,
                     "held_answer": sum(1 for p in got if p["holds_answer"])}
    return out


def calibration(rows: list[dict[str, Any]], model: str = "") -> dict[str, Any]:
    """How the probe's confidences hold, per half, under the coefficients in use for `model`."""
    from ..memory.nearest import calibration_for

    halves = sorted({r["half"] for r in rows})
    return {"model": model, "coefficients": calibration_for(model),
            "reliability": {h: reliability(rows, h) for h in halves}}


def refit(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """`--calibrate`: coefficients fitted on the tuning half, and how they hold on each half."""
    halves = {r["half"] for r in rows}
    if halves != {"tuning", "held"}:
        raise UsageError("--calibrate needs both halves: --half all")
    cal = fit(rows, "tuning")
    again = recalibrated(rows, cal)
    return {"coefficients": cal,
            "reliability": {h: reliability(again, h) for h in ("tuning", "held")}}
