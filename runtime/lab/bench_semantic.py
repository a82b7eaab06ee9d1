"""`coworker bench --semantic`: what the semantic channel costs on a long history.

Owns one measurement, run on the bench's own temporary home after the lexical figures: the
query embedding alone (the real embedder: the packaged all-MiniLM-L6-v2 in process), and
hybrid recall with the channel always asked (gate 1.0), p50 and p95, beside the size of the
vectors it keeps loaded. The history's vectors are placeholders: seeded random unit vectors of
the model's dimension for what `embed.WINDOW` embeds (the newest events) and every
rollup, written under the embedder's name, because embedding a million-event history here
takes hours (about 100 texts a second). Their answers mean nothing; what a query costs does not
depend on what they say. Quality is measured elsewhere (`coworker eval paraphrase`, `eval
locomo --channels hybrid`). It reports figures and never fails on speed.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..memory import embed as em
from ..memory.cards import Distinctive
from ..memory.recall import recall_hybrid
from ..store import Store, lab_queries
from ..store import vectors as vs
from ..store.events import BOOKKEEPING_KINDS
from .figures import pct

CHUNK = 20_000  # placeholder vectors written per transaction


def _stats(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(statistics.median(xs), 3), "p95_ms": round(pct(xs, 0.95), 3)}


def placeholders(db: Path, model: str, dim: int, window: int, seed: int = 0) -> dict[str, int]:
    """Seeded random unit vectors for the newest `window` content events and every rollup."""
    rng = np.random.default_rng(seed)
    written = {"event": 0, "rollup": 0}
    with Store.open(db) as store:
        start = vs.window_start(store, window)
        events = lab_queries.content_ids_after(store, start, sorted(BOOKKEEPING_KINDS))
        rollups = lab_queries.rollup_ids(store)
        for kind, ids in (("event", events), ("rollup", rollups)):
            for i in range(0, len(ids), CHUNK):
                part = ids[i:i + CHUNK]
                rows = rng.standard_normal((len(part), dim)).astype(np.float32)
                rows /= np.linalg.norm(rows, axis=1, keepdims=True)
                vs.write(store, model, [(j, dim, r.tobytes(), "placeholder")
                                        for j, r in zip(part, rows, strict=True)], kind)
                written[kind] += len(part)
    return written


MODELS = {"all-minilm": "semantic", "all-mpnet": "semantic-large"}  # model -> its extra


def measure(db: Path, queries: list[str], window: int = em.WINDOW,
            model: str = "all-minilm") -> dict[str, Any]:
    """The semantic channel's cost on the database at `db` (see the module docstring) with one
    of the packaged local models; a "skipped" figure, with how to install what it needs, when
    that model is not there."""
    try:
        t0 = time.perf_counter()
        embedder = em.LocalEmbedder(model)
        dim = int(embedder.embed(["warm up"])[0].shape[0])
        load_s = time.perf_counter() - t0
    except Exception as e:  # no extra: the lexical figures stand alone
        return {"skipped": f"no local model ({type(e).__name__}: {e}); "
                           f"pip install -e '.[{MODELS.get(model, 'semantic')}]' to measure it"}
    written = placeholders(db, embedder.name, dim, window)
    with Store.open(db, readonly=True) as store:
        t0 = time.perf_counter()
        matrix = em.Matrix.load(store, embedder.name, window=window)
        matrix_s = time.perf_counter() - t0
        rollups = matrix.rollups.rows.nbytes if matrix.rollups is not None else 0
        embed_ms, rest_ms = [], []
        scorer = Distinctive(store)
        for q in queries[:10]:  # warm the model and the page cache
            recall_hybrid(store, q, embedder=embedder, matrix=matrix, gate=1.0, k=3,
                          scorer=scorer)
        for q in queries:
            t0 = time.perf_counter()
            vec = embedder.embed([q])[0]
            embed_ms.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            recall_hybrid(store, q, embedder=_Ready(embedder.name, vec), matrix=matrix,
                          gate=1.0, k=3, scorer=scorer)
            rest_ms.append((time.perf_counter() - t0) * 1000)
    return {"model": embedder.name, "model_load_s": round(load_s, 2),
            "placeholder_vectors": written, "window_events": window,
            "vectors_mb": round((matrix.rows.nbytes + rollups) / 2**20, 1),
            "vectors_load_s": round(matrix_s, 2),
            "query_embed": _stats(embed_ms),
            "recall_hybrid_after_embed": _stats(rest_ms),
            "recall_hybrid": _stats([e + r for e, r in zip(embed_ms, rest_ms, strict=True)])}


class _Ready:
    """An embedder that hands back the query's vector, already made: what the rest of hybrid
    recall costs, measured apart from the model."""

    def __init__(self, name: str, vector: np.ndarray) -> None:
        self.name = name
        self.vector = vector

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        return np.stack([self.vector for _ in texts])
