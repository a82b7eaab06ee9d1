"""Percentiles as the benches report them, shared by `lab.bench` and `lab.bench_semantic` so that
neither imports the other for them.

Owns the nearest-rank percentile of a list of timings. Nothing else.
"""

from __future__ import annotations


def pct(xs: list[float], p: float) -> float:
    """The `p` (0..1) nearest-rank percentile of `xs` (rounded half to even, as ever)."""
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]
