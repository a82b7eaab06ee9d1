"""`coworker eval ablate`: every ranking rule that stays, measured with and without it.

Owns the list of rules (`RULES`: each one the module attributes that switch it, patched at run
time by `switched`, a context manager that restores them however it is left), the run (the
work set and the paraphrase set asked with every rule as shipped and with each rule switched,
on a home built once per set and channel, rebuilt only for a rule that acts when reflect runs;
the LoCoMo development set when its file is given, through the same channels: hybrid embeds
each turn once for all the runs, `_Remembering`), the figures of one report
(`Figures`) and the verdict of issue 39: a rule STAYS only if it improves a work-shaped set, or
improves LoCoMo dev turn recall@10 by at least 0.01 without lowering either work-shaped set;
otherwise DELETE.

A work-shaped set's figures, per half: how many of its questions the recall block carries the
answer for, search's top 5 holds it, the walk finds it; the walk's wrong answers; the
unanswerable questions where the block is noise. Over both halves, a rule lowers a set when it
answers fewer (block + search + walk found) or adds a wrong answer or noise; it improves a set
when it lowers nothing and answers more, answers wrongly less often, or is less often noise.

The rules issue 39 measured and deleted (the date rules of ADR-0025 and ADR-0027..0029 and the
date weight, ADR-0031's unseen names, offline keywords) have no switch here: their code is
gone; their figures are in docs/benchmarks.md and in git. `in_their_words` was deleted with
them before LoCoMo was measured hybrid; measured so (+0.018) it came back.

It never edits the product: a switched rule lives only inside `switched`, and the product's
modules are as they were when it returns. It reads; it never calls a chat model.
"""

from __future__ import annotations

import importlib
import tempfile
import types
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from .eval_paraphrase import (
    Build,
    ParaphraseReport,
    Question,
    ask_all,
    build_paraphrase_home,
    paraphrase_questions,
)
from .eval_work import build_work_home, work_questions
from .evaluate import checked_model, eval_embedder

if TYPE_CHECKING:
    from ..memory.embed import Embedder

STAYS, DELETE = "STAYS", "DELETE"
LOCOMO_MARGIN = 0.01  # LoCoMo dev turn recall@10 a rule must add to stay on LoCoMo's account


# --- switching a rule --------------------------------------------------------------------------

def _no_one(_real: Any) -> Callable[..., Any]:
    return lambda *_a, **_k: None


def _no_names(_real: Any) -> Callable[..., Any]:
    return lambda *_a, **_k: ()


def _never(_real: Any) -> Callable[..., bool]:
    return lambda *_a, **_k: False


def _zero(_real: Any) -> float:
    return 0.0


def _as_said(_real: Any) -> Callable[..., str]:
    return lambda text, *_a, **_k: text


def _kept_off(real: Any) -> Any:
    """A stand-in for `memory.rung_bm25` in recall: no kept counts, FTS5's bm25 instead."""
    off = types.SimpleNamespace(**vars(real))
    off.handles = lambda *_a, **_k: False
    return off


@dataclass(frozen=True)
class Patch:
    module: str
    attr: str
    make: Callable[[Any], Any]  # the stand-in, made from the attribute's real value


@dataclass(frozen=True)
class Rule:
    key: str
    name: str
    patches: tuple[Patch, ...]
    at_build: bool = False  # acts when reflect or the embedder runs: the home is rebuilt
    hybrid_only: bool = False  # acts only with the semantic channel
    shipped_on: bool = True  # False: the product ships without it, the switch turns it on


R, M = "runtime.memory.recall", "runtime.memory"
RULES: tuple[Rule, ...] = (
    Rule("kept-counts", "ADR-0023 episodes scored with kept counts",
         (Patch(R, "rung_bm25", _kept_off),)),
    Rule("embed-window", "ADR-0024 the newest events embedded",
         (Patch(f"{M}.embed", "WINDOW", lambda _r: 10**12),), at_build=True, hybrid_only=True),
    Rule("reply-inherits", "ADR-0026 a reply inherits its question's score",
         (Patch(R, "_asks", _never), Patch(R, "ANSWER_WEIGHT", _zero))),
    Rule("person", "ADR-0030 widening to the named person (and the person channel)",
         (Patch(R, "_named_speaker", _no_names), Patch(R, "named_person_or_none", _no_one),
          Patch(f"{M}.search", "named_person_or_none", _no_one))),
    Rule("their-words", "in_their_words: the person channel asks in the person's own words",
         (Patch(R, "in_their_words", _as_said),), hybrid_only=True),
)


class _Remembering:
    """An embedder that embeds each text once for all the runs of an ablation: LoCoMo's
    turns are the same with and without a rule, so only a rule's new queries are embedded."""

    def __init__(self, inner: Embedder) -> None:
        self.inner, self.seen = inner, dict[str, Any]()

    @property
    def name(self) -> str:
        return self.inner.name

    def embed(self, texts: Sequence[str]) -> Any:
        import numpy as np

        todo = [t for t in dict.fromkeys(texts) if t not in self.seen]
        if todo:
            self.seen.update(zip(todo, self.inner.embed(todo), strict=True))
        if not texts:
            return self.inner.embed(texts)
        return np.stack([self.seen[t] for t in texts])


class RuleMissing(UsageError):
    """A rule's switch names an attribute the product no longer has."""


@contextmanager
def switched(rule: Rule) -> Iterator[None]:
    """The product with `rule` switched (off, or on for a rule it ships without); every
    attribute restored on the way out, in reverse order, whatever happens inside."""
    with ExitStack() as stack:
        for p in rule.patches:
            mod = importlib.import_module(p.module)
            if not hasattr(mod, p.attr):
                raise RuleMissing(f"rule {rule.key}: {p.module}.{p.attr} no longer exists")
            real = getattr(mod, p.attr)
            stack.callback(setattr, mod, p.attr, real)
            setattr(mod, p.attr, p.make(real))
        yield


# --- figures -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Figures:
    """One work-shaped set's figures on one half (see the module docstring)."""
    block: int = 0
    search: int = 0
    walk: int = 0
    wrong: int = 0
    noise: int = 0
    of: int = 0

    @property
    def answered(self) -> int:
        return self.block + self.search + self.walk

    def __add__(self, other: Figures) -> Figures:
        return Figures(*(a + b for a, b in zip(self.as_tuple(), other.as_tuple(), strict=True)))

    def as_tuple(self) -> tuple[int, ...]:
        return (self.block, self.search, self.walk, self.wrong, self.noise, self.of)

    def cell(self) -> str:
        return f"{self.block}/{self.search}/{self.walk}·{self.wrong}·{self.noise}"


def figures(rows: list[dict[str, Any]], half: str) -> Figures:
    mine = [r for r in rows if r["half"] == half]
    asked = [r for r in mine if r["kind"] != "unanswerable"]
    return Figures(sum(r["recall_block"] for r in asked), sum(r["search_top5"] for r in asked),
                   sum(r["walk"] == "found" for r in asked),
                   sum(r["walk"] == "wrong" for r in asked),
                   sum(r["noise"] for r in mine if r["kind"] == "unanswerable"), len(asked))


def compare(with_rule: Figures, without: Figures) -> int:
    """+1 when the rule improves the set, -1 when it lowers it, 0 otherwise (module docstring)."""
    if (with_rule.answered < without.answered or with_rule.wrong > without.wrong
            or with_rule.noise > without.noise):
        return -1
    better = (with_rule.answered > without.answered or with_rule.wrong < without.wrong
              or with_rule.noise < without.noise)
    return 1 if better else 0


# --- the run ------------------------------------------------------------------------------------

SETS: dict[str, tuple[Callable[[str], list[Question]], Build]] = {
    "paraphrase": (paraphrase_questions, build_paraphrase_home),
    "work": (work_questions, build_work_home),
}


@dataclass
class Measured:
    """Per set: the figures of each half; LoCoMo's turn recall@10 and MRR@10 (None: not run)."""
    sets: dict[str, dict[str, Figures]] = field(default_factory=dict)
    locomo: tuple[float, float] | None = None


class _Sets:
    """Each set's home for one channel, built once (and again for a rule acting at build)."""

    def __init__(self, root: Path, channels: str, embedder: Embedder | None, gate: float) -> None:
        self.root, self.channels, self.embedder, self.gate = root, channels, embedder, gate
        self.homes: dict[str, tuple[Any, dict[str, set[int]]]] = {}
        self.builds = 0

    def _built(self, name: str, fresh: bool) -> tuple[Any, dict[str, set[int]]]:
        if fresh or name not in self.homes:
            self.builds += 1
            home, answers, _ = SETS[name][1](self.root / f"{name}-{self.builds}", self.embedder)
            if fresh:
                return home, answers
            self.homes[name] = (home, answers)
        return self.homes[name]

    def measure(self, name: str, fresh: bool = False) -> dict[str, Figures]:
        home, answers = self._built(name, fresh)
        report = ParaphraseReport(self.channels, "all")
        ask_all(report, home, answers, SETS[name][0]("all"), self.embedder, self.gate)
        return {h: figures(report.questions, h) for h in ("tuning", "held")}


def _locomo(path: Path | None, sets: _Sets) -> tuple[float, float] | None:
    if path is None:
        return None
    from .evaluate import run

    made = None if sets.embedder is None else (sets.embedder, sets.gate)
    o = run(path, 10, sets.channels, made=made).overall
    return float(o["turn_recall"]), float(o["mrr10"])


def _measure(sets: _Sets, locomo: Path | None, rule: Rule | None) -> Measured:
    fresh = rule is not None and rule.at_build
    got = Measured({name: sets.measure(name, fresh) for name in SETS})
    if not (rule is not None and rule.at_build and sets.channels == "hybrid"):
        got.locomo = _locomo(locomo, sets)  # (a rule acting at build would embed anew)
    return got


def verdict(with_rule: Measured, without: Measured) -> str:
    """The issue's rule: STAYS if it improves a work-shaped set, or adds at least
    LOCOMO_MARGIN of LoCoMo dev turn recall@10 without lowering either work-shaped set."""
    moves = [compare(sum(with_rule.sets[s].values(), Figures()),
                     sum(without.sets[s].values(), Figures())) for s in SETS]
    if 1 in moves:
        return STAYS
    gain = (with_rule.locomo[0] - without.locomo[0]
            if with_rule.locomo is not None and without.locomo is not None else 0.0)
    return STAYS if gain >= LOCOMO_MARGIN - 1e-9 and -1 not in moves else DELETE


@dataclass
class Row:
    rule: Rule
    with_rule: Measured
    without: Measured
    verdict: str

    def as_dict(self) -> dict[str, Any]:
        def side(m: Measured) -> dict[str, Any]:
            return {"locomo": m.locomo,
                    "sets": {s: {h: f.__dict__ for h, f in halves.items()}
                             for s, halves in m.sets.items()}}
        return {"rule": self.rule.key, "name": self.rule.name, "with": side(self.with_rule),
                "without": side(self.without), "verdict": self.verdict}


def _row(rule: Rule, shipped: Measured, switched_run: Measured) -> Row:
    with_rule, without = ((shipped, switched_run) if rule.shipped_on
                          else (switched_run, shipped))
    return Row(rule, with_rule, without, verdict(with_rule, without))


def rules_named(keys: tuple[str, ...]) -> list[Rule]:
    known = {r.key: r for r in RULES}
    unknown = [k for k in keys if k not in known]
    if unknown:
        raise UsageError(f"unknown rule {', '.join(unknown)}: use one of {', '.join(known)}")
    return [known[k] for k in keys] if keys else list(RULES)


@dataclass
class Ablation:
    channels: str
    baseline: Measured
    rows: list[Row]
    builds: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {"channels": self.channels, "builds": self.builds,
                "rows": [r.as_dict() for r in self.rows]}


def run(channels: str = "lexical", locomo: Path | None = None, keys: tuple[str, ...] = (),
        model: str | None = None, progress: Callable[[str], None] | None = None) -> Ablation:
    """Every rule of `keys` (all when empty) that acts on `channels`, measured switched and as
    shipped; LoCoMo through the same channels when `locomo` names its file."""
    checked_model(channels, model)
    if locomo is not None and not locomo.is_file():
        raise UsageError(f"no LoCoMo file at {locomo}: give --locomo the development set")
    rules = [r for r in rules_named(keys) if channels == "hybrid" or not r.hybrid_only]
    embedder, gate = eval_embedder(model) if channels == "hybrid" else (None, 0.0)
    if embedder is not None:
        embedder = _Remembering(embedder)
    with tempfile.TemporaryDirectory() as tmp:
        sets = _Sets(Path(tmp), channels, embedder, gate)
        if progress:
            progress("as shipped")
        shipped = _measure(sets, locomo, None)
        rows = []
        for rule in rules:
            if progress:
                progress(rule.key)
            with switched(rule):
                rows.append(_row(rule, shipped, _measure(sets, locomo, rule)))
    return Ablation(channels, shipped, rows, sets.builds)


# --- the table ------------------------------------------------------------------------------------

LEGEND = ("A set's cell, per half: recall block / search top 5 / walk found · walk wrong · "
          "noise (of its unanswerable questions); with → without the rule.")


def _locomo_cell(m: Measured) -> str:
    return "-" if m.locomo is None else f"{m.locomo[0]:.4f} / {m.locomo[1]:.4f}"


def markdown(result: Ablation) -> str:
    """The table of issue 39: rule | LoCoMo | paraphrase tuning/held | work tuning/held |
    verdict, each set with → without."""
    head = ["rule", "LoCoMo turn R@10 / MRR", "paraphrase tuning", "paraphrase held",
            "work tuning", "work held", "verdict"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result.rows:
        cells = [r.rule.name, f"{_locomo_cell(r.with_rule)} → {_locomo_cell(r.without)}"]
        cells += [f"{r.with_rule.sets[s][h].cell()} → {r.without.sets[s][h].cell()}"
                  for s in SETS for h in ("tuning", "held")]
        lines.append("| " + " | ".join([*cells, r.verdict]) + " |")
    return "\n".join([*lines, "", LEGEND])
