"""The semantic probe: which episode a query vector points at, and how sure that is.

Owns the arithmetic the walk, recall and search share when the semantic channel is on: cosine
of a query vector the caller embedded against event vectors the caller loaded (an
`embed.Matrix`: ids and unit rows), grouped by the level-1 episode that covers each event, and
a calibrated confidence on the walk's 0..1 scale (ADR-0020). Confidence is a logistic function
of two figures: the best cosine, and its margin over the best event of any *other* episode. A
fact said in other words tends to stand out from the rest of the history by a clear margin; a
question nothing answers lands among many near-equal strangers. The coefficients are each
model's own, fitted on the tuning half of the paraphrase set (`coworker eval paraphrase
--calibrate`) for all-MiniLM-L6-v2 and all-mpnet-base-v2; the held half reports how well they
hold (docs/benchmarks.md).

Routine lines are left out of both figures: an event said three times or more in nearly the same
words (a reminder, a ticket template, a status line) tells nothing about any one episode, so it
neither chooses the entry nor stands as the competitor that shrinks a real answer's margin. It
stays in the store and in every other ranking; only the probe looks past it. But a line set
aside that ranks *above* the entry may be the answer itself, said three times (the owner
repeating a rule): then the entry has no margin and no confidence, however near it is.

Pure: it reads the store (episode spans) and numpy arrays it is handed; it never embeds, never
loads a model and never writes.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..store import Store
from ..store import rollups as rl

log = logging.getLogger(__name__)

# Fitted on the tuning half of the paraphrase set, one model each (`coworker eval paraphrase
# --calibrate`): a model's cosines have their own scale, so its coefficients are its own.
CALIBRATIONS = {
    "all-minilm-l6-v2": {"bias": -2.939, "best": 4.542, "margin": 9.842},
    "all-mpnet-base-v2": {"bias": -3.288, "best": 7.283, "margin": 7.758},
}
CALIBRATION = CALIBRATIONS["all-minilm-l6-v2"]  # the packaged model's, the default
# The packaged models whose confident probe may not answer a walk: on the work set's held half
# (issue 39; docs/benchmarks.md) MiniLM's semantic entry answered 3 and was never wrong, mpnet's
# answered 8 and was wrong once; with mpnet the walk enters lexically only and its refusal says a
# search may find more. Recall and search still use every model.
NO_WALK_ENTRY = frozenset({"all-mpnet-base-v2"})
_ALIASES = {"all-minilm": "all-minilm-l6-v2", "all-mpnet": "all-mpnet-base-v2"}


def _calibration_key(model: str) -> str:
    name = model.split(":", 1)[1] if model.startswith(("local:", "http:")) else model
    name = name.rstrip("/").rsplit("/", 1)[-1].lower()
    base, _, tag = name.partition(":")  # Ollama's "all-minilm:latest", ":22m" (L6), ":33m" (L12)
    if tag in ("", "latest") or tag.startswith(("22m", "l6")):  # ":l6-v2-fp16" too
        name = base
    return _ALIASES.get(name, name)


def calibrated(model: str) -> bool:
    """Whether `model` (an embedder's name) has coefficients of its own."""
    return _calibration_key(model) in CALIBRATIONS


def calibration_for(model: str) -> dict[str, float]:
    """The coefficients fitted for `model` (an embedder's name: "local:all-minilm",
    "http:all-minilm", a model folder's name); MiniLM's for a model never calibrated (the
    semantic channel says so when it loads the model: `warn_uncalibrated`)."""
    return CALIBRATIONS.get(_calibration_key(model), CALIBRATION)


def warn_uncalibrated(model: str) -> None:
    """One WARNING when `model` has no coefficients of its own: said by whoever loads it."""
    if model and not calibrated(model):
        log.warning("the semantic entry has no calibration for %s: it uses all-MiniLM-L6-v2's, "
                    "which may enter too often or too rarely; fit one with `coworker eval "
                    "paraphrase --channels hybrid --half all --calibrate`", model)


NEAR = 0.08  # events of the entry episode within this cosine of the best are returned with it
RETURNED = 5  # at most this many events come back from a semantic entry
SCAN = 50  # nearest events read to find the entry and the best other episode
# Routine: among the READ nearest events, one with at least REPEATS others this close to it
# (cosine between the events) was said in nearly the same words three times or more.
READ = 500
SAME = 0.92
REPEATS = 2

# What a door hands the walk and search for the semantic channel: called only when lexical
# falls short, it returns (the query's unit vector, the event vectors as an `embed.Matrix`), or
# None when the channel cannot answer (a WARNING was logged; the caller goes on lexical only).
Semantic = Callable[..., "tuple[Any, Any] | None"]


@dataclass(frozen=True)
class Probe:
    """What the vectors say about one query: the entry episode (None: an event no episode
    covers yet), the best cosine, the margin over the best other episode, the confidence, and
    the entry's nearest events (id, cosine), best first."""

    episode: int | None
    best: float
    margin: float
    confidence: float
    events: tuple[tuple[int, float], ...]
    episode_cos: float | None = None  # the entry episode's own vector (title and summary)
    behind_routine: bool = False  # a line set aside as routine ranks above the entry
    may_enter: bool = True  # the model's probe may answer a walk (not in NO_WALK_ENTRY)

    def why(self) -> str:
        where = f"episode {self.episode}" if self.episode is not None else "an event no episode covers yet"
        behind = (", below a line said three times or more, so no margin and no confidence"
                  if self.behind_routine else "")
        return (f"semantic match in {where} (cosine {self.best:.2f}, margin {self.margin:.2f} "
                f"over any other episode{behind}; confidence {self.confidence:.2f})")

    def as_dict(self) -> dict[str, Any]:
        return {"episode": self.episode, "best": round(self.best, 4),
                "margin": round(self.margin, 4), "confidence": self.confidence,
                "episode_cos": None if self.episode_cos is None else round(self.episode_cos, 4),
                "behind_routine": self.behind_routine}


def confidence(best: float, margin: float, cal: dict[str, float] | None = None) -> float:
    """P(the entry holds the answer), from the best cosine and its margin (logistic)."""
    c = cal or CALIBRATION
    z = c["bias"] + c["best"] * best + c["margin"] * margin
    return round(1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, z)))), 4)


def _group(store: Store, ids: np.ndarray) -> list[int | None]:
    """The level-1 episode covering each event id (None: no episode covers it yet), one
    indexed look-up per id (`rollups.episode_covering`), so a probe costs what it reads, not the
    number of episodes in the history."""
    return [rl.episode_covering(store, int(i)) for i in ids]


def _nearest(vector: np.ndarray, matrix: Any, before_id: int | None
             ) -> tuple[np.ndarray, np.ndarray, bool] | None:
    """(each row's cosine, the READ nearest rows below `before_id`, best first, and whether
    rows below the last of them remain unread); None when the matrix cannot be compared."""
    ids, rows = matrix.ids, matrix.rows
    if not len(ids) or rows.shape[1] != vector.shape[0]:
        return None
    sims = matrix.similarities(vector) if hasattr(matrix, "similarities") else rows @ vector
    if before_id is not None:
        sims = np.where(ids < before_id, sims, -np.inf)
    k = min(READ, len(ids))
    top = np.argpartition(-sims, k - 1)[:k]
    top = top[np.argsort(-sims[top], kind="stable")]
    top = top[np.isfinite(sims[top])]
    return sims, top, k < len(ids) and len(top) == k


def _bound(sims: np.ndarray, top: np.ndarray, kept: int, floor: float, unread: bool) -> float:
    """The best another episode may have when none is among the events looked at: below the
    last of them (a bound, so the margin is never overstated); 0.0 when every event was."""
    if kept > SCAN:
        return float(sims[top[-1]])
    return floor if unread else 0.0


def _entry_events(sims: np.ndarray, top: np.ndarray, top_ids: np.ndarray, keys: list[int]
                  ) -> tuple[tuple[int, float], ...]:
    """(id, cosine) of the entry episode's events (`keys[0]`'s) within NEAR of the best, best
    first, at most RETURNED."""
    best = float(sims[top[0]])
    return tuple((int(i), round(float(sims[j]), 4))
                 for j, i, key in zip(top, top_ids, keys, strict=True)
                 if key == keys[0] and sims[j] >= best - NEAR)[:RETURNED]


def probe(store: Store, vector: np.ndarray, matrix: Any, before_id: int | None = None,
          cal: dict[str, float] | None = None) -> Probe | None:
    """The semantic probe for `vector` over `matrix` (ids below `before_id` only); None when
    there is nothing to compare (no vectors, or none before `before_id`). `cal`: the
    coefficients (default: those of the matrix's model)."""
    got = _nearest(vector, matrix, before_id)
    if got is None:
        return None
    sims, top, unread = got
    floor = float(sims[top[-1]]) if len(top) else 0.0
    set_aside = routine(np.asarray(matrix.rows)[top])
    behind = bool(len(set_aside) and set_aside[0])
    kept = top[~set_aside]
    top = kept[:SCAN]
    if not len(top):
        return None
    bound = _bound(sims, top, len(kept), floor, unread)
    top_ids = matrix.ids[top]
    groups = _group(store, top_ids)
    # an event no episode covers is its own group: two near-equal fresh events are ambiguous
    keys = [g if g is not None else -int(i) for g, i in zip(groups, top_ids, strict=True)]
    best = float(sims[top[0]])
    other = next((float(sims[j]) for j, key in zip(top, keys, strict=True) if key != keys[0]),
                 bound)
    events = _entry_events(sims, top, top_ids, keys)
    # a line set aside above the entry may be the answer said thrice: the entry does not stand
    # out from it, so it has no margin and no confidence, however near it is (a rule, not a
    # measure: the calibration is fitted without such probes)
    margin = 0.0 if behind else best - other
    model = getattr(matrix, "model", "")
    sure = ruled(confidence(best, margin, cal or calibration_for(model)), behind)
    return Probe(groups[0], best, margin, sure, events,
                 _episode_cos(matrix, vector, groups[0]), behind,
                 _calibration_key(model) not in NO_WALK_ENTRY)


def ruled(sure: float, behind_routine: bool) -> float:
    """The calibrated confidence after the rule: none below a line said three times."""
    return 0.0 if behind_routine else sure


def routine(vectors: np.ndarray) -> np.ndarray:
    """Which of these unit rows have at least REPEATS others within cosine SAME of them: the
    lines said three times or more in nearly the same words (see the module docstring)."""
    if not len(vectors):
        return np.zeros(0, dtype=bool)
    close = (vectors @ vectors.T) >= SAME
    return close.sum(axis=1) - 1 >= REPEATS


def _episode_cos(matrix: Any, vector: np.ndarray, episode: int | None) -> float | None:
    rollups = getattr(matrix, "rollups", None)
    if episode is None or rollups is None or not len(rollups.ids):
        return None
    at = np.nonzero(rollups.ids == episode)[0]
    return float(rollups.rows[at[0]] @ vector) if len(at) else None
