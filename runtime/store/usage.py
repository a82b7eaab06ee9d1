"""Model usage per day: calls (every attempt, retries included) and tokens, read back from
the events the loop wrote (`model_response` with its usage and attempts, `tick_failed` with the
attempts a failed call spent) and from `model_calls` telemetry rows, which record the calls
made outside a turn (reflect's summaries, lessons and keywords, doctor's probe): telemetry, not
events, so counting a call never adds to the history reflect is sealing. What the spending cap
compares against (`cap_reason`); its one write is `record_calls`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..settings import ModelSection
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
    since = day_start(now)
    rows = store.query(
        "SELECT meta FROM events WHERE ts >= ? AND kind IN ('model_response', "
        "'tick_failed') AND meta IS NOT NULL AND json_valid(meta) "
        "AND json_extract(meta, '$.imported') IS NULL "
        "UNION ALL SELECT data FROM telemetry WHERE kind = 'model_calls' AND ts >= ? "
        "AND data IS NOT NULL AND json_valid(data)", (since, since))
    calls = tokens = 0
    for r in rows:
        meta = json.loads(r[0])
        attempts = meta.get("attempts")
        calls += int(attempts) if isinstance(attempts, int) else 0
        use = meta.get("usage")
        if isinstance(use, dict):
            tokens += sum(int(use.get(k) or 0) for k in ("input_tokens", "output_tokens")
                          if isinstance(use.get(k) or 0, int))
    return Usage(calls, tokens)


def watch_calls_today(store: Store, now: datetime | None = None) -> int:
    """Model calls spent today by turns that only watches' changes woke (`watch_only` ticks)."""
    rows = store.query(
        "SELECT e.meta FROM events AS e JOIN events AS t ON t.id = e.tick_id AND t.kind = 'tick' "
        "WHERE e.ts >= ? AND e.kind IN ('model_response', 'tick_failed') AND json_valid(e.meta) "
        "AND json_valid(t.meta) AND CAST(json_extract(t.meta, '$.watch_only') AS INTEGER) = 1 "
        "AND json_extract(t.meta, '$.imported') IS NULL", (day_start(now),))
    return sum(int(a) for r in rows
               if isinstance(a := json.loads(r[0]).get("attempts"), int))


def cap_reason(store: Store, cfg: ModelSection) -> str | None:
    """Which daily cap ([model] daily_tokens, daily_calls) today's usage reached, or None."""
    if not (cfg.daily_tokens or cfg.daily_calls):
        return None
    used = today(store)
    if cfg.daily_tokens and used.tokens >= cfg.daily_tokens:
        return f"daily_tokens {cfg.daily_tokens} reached ({used.tokens} used today)"
    if cfg.daily_calls and used.calls >= cfg.daily_calls:
        return f"daily_calls {cfg.daily_calls} reached ({used.calls} calls today)"
    return None


def record_calls(store: Store, purpose: str, attempts: int,
                 used: dict[str, Any] | None = None) -> None:
    """A `model_calls` telemetry row: `attempts` model calls made outside a turn, for
    `purpose`, so they count against the daily caps as a turn's calls do."""
    from .telemetry import record

    record(store, "model_calls", {"attempts": attempts, "usage": used or {}, "purpose": purpose})
