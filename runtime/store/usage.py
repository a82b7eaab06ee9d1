"""Model usage per day: calls (every attempt, retries included) and tokens, read back from
the events the loop wrote (`model_response` with its usage and attempts, `tick_failed` with the
attempts a failed call spent). What the spending cap compares against; it never writes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from .db import Store


@dataclass(frozen=True)
class Usage:
    calls: int = 0
    tokens: int = 0


def day_start(now: datetime | None = None) -> str:
    now = (now or datetime.now(UTC)).astimezone(UTC)
    return now.strftime("%Y-%m-%dT00:00:00.000Z")


def today(store: Store, now: datetime | None = None) -> Usage:
    """Calls and input+output tokens spent since 00:00 UTC today."""
    rows = store.query(
        "SELECT kind, meta FROM events WHERE ts >= ? AND kind IN ('model_response', "
        "'tick_failed') AND meta IS NOT NULL AND json_valid(meta) "
        "AND json_extract(meta, '$.imported') IS NULL", (day_start(now),))
    calls = tokens = 0
    for r in rows:
        meta = json.loads(r["meta"])
        attempts = meta.get("attempts")
        calls += int(attempts) if isinstance(attempts, int) else 0
        use = meta.get("usage")
        if isinstance(use, dict):
            tokens += sum(int(use.get(k) or 0) for k in ("input_tokens", "output_tokens")
                          if isinstance(use.get(k) or 0, int))
    return Usage(calls, tokens)
