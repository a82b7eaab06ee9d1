"""The loop's hands and eyes: MCP tool calls from a turn, approved actions, and watches.

Owns what the loop does with the servers of runtime/hands:
- a model's call to `<server>__<tool>`: checked against the tool's schema, then, by its
  disposition (runtime/hands/classify.py), run, recorded as a `dry_run` event, or queued for
  the owner (`coworker actions`); a live side effect is written to the side-effect ledger under
  its turn and tool_use id before it runs (a replayed turn never repeats it; a new turn handed
  an old id still acts, ADR-0034) and counts against `[mcp] daily_live_calls`;
- the owner's approved actions, run at the start of a tick, each at most once (the queue's
  `start` is the only way to running), their results an input of that tick;
- watches (`[[mcp.watch]]`): a read-only tool called on schedule, its result hashed; a change is
  an input ("watch ... changed" with what is new), an unchanged result writes nothing and costs
  no model call.
Every result is a tool's output (author_kind `tool`): data for the model, never the owner's
words. No call reaches a server whose arguments name the coworker's own state (state/, where
the inbox is the owner's door, MEMORY.md, config.toml): `Hands` refuses it (runtime/hands/
own_state.py), told the home of the store at each entry here. It never classifies a tool itself
and never speaks SQL.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..hands import Disposition, McpSection, McpWatch, SideEffect, ToolResult, full_name
from ..store import Event, Store, approvals, iso_z, now_iso, side_effects, usage, watches
from ..store import events as ev
from ..store import inputs as inputs_store
from ..tools.registry import ToolResult as Result
from .record import record

log = logging.getLogger("runtime.loop")

WATCH_DAILY_CALLS = 100  # model calls a day of turns only watches woke (was [mcp] watch_daily_calls)
WATCH_CHARS = 4_000  # characters of what changed a watch may report (was [mcp] watch_chars)
MCP_TOOLS = "%\\_\\_%"  # side_effects.tool LIKE: a full MCP name holds "__"


@dataclass
class Call:
    """One model call to an MCP tool, as the turn hands it over."""

    name: str
    arguments: Any
    tool_use_id: str | None
    tick_id: int
    reason: str | None  # the model's own text beside the call: why it asks
    sources: list[int]  # the tick's inputs


def _protect(hands: Any, store: Store) -> None:
    """Tell `hands` whose state to keep tools out of: the home of this store's database
    (`<home>/state/coworker.db`). A store on PostgreSQL lives in no home (its path names a
    database): there the loop told its Hands their home when it made them (`Hands(section,
    home=...)`), and nothing is told here."""
    protect = getattr(hands, "protect", None)
    if protect is not None and getattr(store, "dialect", "sqlite") == "sqlite":
        protect(Path(store.path).parent.parent)


def _result(r: ToolResult, note: str = "") -> Result:
    text = r.text
    if r.truncated:
        text += (f"\n[cut at {len(r.text)} of {len(r.full_text or '')} characters; the stored "
                 "text (at most 1,000,000 characters) is kept with this result's event]")
    return Result(note + text, r.is_error, full_text=r.full_text)


async def call(hands: Any, store: Store, section: McpSection, live: bool, c: Call) -> Result:
    """What a model's call to an MCP tool does now; never raises for what a server does."""
    if not isinstance(c.arguments, dict):
        return Result(f"tool {c.name}: input must be a JSON object matching its schema", True)
    _protect(hands, store)
    if (problem := hands.validate(c.name, c.arguments)) is not None:
        return Result(f"tool {c.name}: {problem}", True)
    disposition = hands.disposition(c.name, live)
    info = hands.tool(c.name)
    if disposition is Disposition.REFUSE or info is None:
        return Result(f"tool {c.name} is not offered (disabled by the owner)", True)
    if disposition is Disposition.DRY_RUN:
        args = json.dumps(c.arguments, ensure_ascii=False, sort_keys=True)
        event_id = record(store, "dry_run", f"would run {c.name}: {args}", tick_id=c.tick_id,
                          author_kind="agent", tool=c.name, input=c.arguments,
                          tool_use_id=c.tool_use_id)
        return Result(f"dry-run: {c.name} was not carried out; recorded what it would have done "
                      f"as event {event_id} (its server and the coworker must both run live)")
    if disposition is Disposition.QUEUE:
        return _queue(store, section, info, c)
    if info.side_effect is SideEffect.READ:
        return _result(await hands.call(c.name, c.arguments))
    return await _live(hands, store, section, c)


def _queue(store: Store, section: McpSection, info: Any, c: Call) -> Result:
    a = approvals.add(store, tick_id=c.tick_id, server=info.server, tool=info.tool,
                      name=c.name, arguments=c.arguments, reason=c.reason, sources=c.sources,
                      tool_use_id=c.tool_use_id, ttl_s=section.approval_ttl_s)
    record(store, "action_queued", f"{c.name} waits for the owner's approval as action {a.id}",
           tick_id=c.tick_id, author_kind="agent", approval_id=a.id, tool=c.name)
    log.info("action %d (%s) waits for the owner's approval: coworker actions approve %d",
             a.id, c.name, a.id)
    return Result(f"queued: {c.name} waits for your owner's approval as action {a.id}; it runs "
                  f"at a later tick only if they approve it (it expires after "
                  f"{section.approval_ttl}), and you will see its result then")


def _cap_reached(store: Store, section: McpSection, tick_id: int | None, what: str) -> bool:
    if not section.daily_live_calls:
        return False
    today = iso_z(datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0))
    used = side_effects.count_since(store, today, MCP_TOOLS)
    if used < section.daily_live_calls:
        return False
    record(store, "spending_cap", f"daily cap of {section.daily_live_calls} live MCP side "
           f"effects reached; {what} was not run", tick_id=tick_id, cap="mcp.daily_live_calls")
    log.warning("[mcp] daily_live_calls (%d) reached: %s not run", section.daily_live_calls,
                what)
    return True


async def _live(hands: Any, store: Store, section: McpSection, c: Call) -> Result:
    """A live side effect: keyed in the ledger before it runs, so it runs at most once."""
    if c.tool_use_id is None:
        return Result(f"tool {c.name}: a live side effect needs a tool_use id; not run", True)
    if _cap_reached(store, section, c.tick_id, c.name):
        return Result(f"not run: the owner's daily cap on live side effects "
                      f"([mcp] daily_live_calls = {section.daily_live_calls}) is reached", True)
    r = await _keyed(hands, store, c.tool_use_id, c.name, c.arguments, c.tick_id)
    if r is None:
        return Result(f"not repeated: {c.name} (tool_use {c.tool_use_id}) was begun by an "
                      "earlier attempt; it is not run a second time")
    return _result(r)


async def _keyed(hands: Any, store: Store, key: str, name: str, arguments: dict[str, Any],
                 tick_id: int | None) -> ToolResult | None:
    """A live call written to the side-effect ledger under `key` in the turn of `tick_id`
    before it runs; None (and not run) when that turn began that key before."""
    earlier = side_effects.begin(store, key, name, tick_id, arguments)
    if earlier is not None:
        log.warning("side effect %s (%s) was already begun by tick %s (%s); not running it "
                    "again", name, key, earlier.tick_id, earlier.status)
        return None
    r = await hands.call(name, arguments)
    side_effects.finish(store, key, not r.is_error, r.text, tick_id=tick_id)
    log.info("LIVE side effect: %s (%s, tick %s): %s", name, key, tick_id, r.text[:300])
    return r


async def run_approved(hands: Any, store: Store, section: McpSection, live: bool) -> int:
    """Expire what waited too long, then run each approved action once; its result becomes an
    input of this tick. An action whose server is not live now waits (it says so once)."""
    for expired in approvals.expire(store, now_iso()):
        record(store, "action_expired", f"action {expired} expired unapproved", approval_id=expired)
    _protect(hands, store)
    ran = 0
    for a in approvals.approved(store):
        if hands is None or hands.disposition(a.name, live) not in (Disposition.QUEUE,
                                                                     Disposition.RUN):
            continue  # approved, but its server or the coworker runs dry now: it waits
        if not approvals.start(store, a.id):
            continue
        if _cap_reached(store, section, None, f"approved action {a.id}"):
            approvals.finish(store, a.id, False, None)
            continue
        r = await _keyed(hands, store, f"approval:{a.id}", a.name, a.arguments, a.tick_id)
        if r is None:  # started once already: never twice
            approvals.finish(store, a.id, False, None)
            continue
        event_id = inputs_store.add(store, Event(
            kind="action_result", body=f"approved action {a.id} ({a.name}) "
            f"{'failed' if r.is_error else 'ran'}: {_result(r).text}", actor=a.name,
            author_kind="tool", meta={"approval_id": a.id, "status": str(r.status),
                                      "full_text": r.full_text}), "action")
        approvals.finish(store, a.id, not r.is_error, event_id)
        ran += 1
    return ran


class Watches:
    """The `[[mcp.watch]]` entries and when each is next due. A watch is due at once when the
    loop starts (its first result is the baseline), then every `interval_s` or at its cron."""

    def __init__(self, section: McpSection, tz: str = "UTC",
                 clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.tz = tz
        self._next: dict[str, float] = {}
        self._seen: dict[str, watches.Seen] = {}  # key -> the last result, read back once
        self._said: set[str] = set()  # watches whose trouble was said (once, not every interval)
        self._budget_said: str | None = None  # the UTC day the spent budget was said at WARNING
        self.entries: list[McpWatch] = []
        self.configure(section)

    def configure(self, section: McpSection) -> None:
        self.entries = list(section.watch)
        keys = {key(w) for w in self.entries}
        # an edit is a new chance: a watch skipped as not read-only is looked at again
        self._next = {k: v for k, v in self._next.items() if k in keys and v != float("inf")}
        self._said.clear()

    def _after(self, w: McpWatch, now: float) -> float:
        if w.interval_s is not None:
            return now + w.interval_s
        from ..cron import parse_cron

        fire = parse_cron(str(w.cron), self.tz).get_next_fire_time(
            None, datetime.fromtimestamp(now, UTC))
        return fire.timestamp() if fire is not None else now + 86400

    def misfits(self, hands: Any) -> list[str]:
        """One line for each watch whose server offers its tool as not read-only: a config
        error (a watch only reads). A tool not offered (yet) is not judged here."""
        out = []
        for w in self.entries:
            info = hands.tool(full_name(w.server, w.tool))
            if info is not None and info.side_effect is not SideEffect.READ:
                out.append(f"[[mcp.watch]] {key(w)}: {w.server} offers {w.tool} as a tool with "
                           "side effects, and a watch only reads; watch a read-only tool, or "
                           "list it in that server's read_only if it only reads")
        return out

    def due(self) -> list[McpWatch]:
        now = self.clock()
        return [w for w in self.entries if self._next.get(key(w), 0.0) <= now]

    def seconds_to_next(self) -> float | None:
        if not self.entries:
            return None
        now = self.clock()
        return max(0.0, min(self._next.get(key(w), 0.0) for w in self.entries) - now)

    async def poll(self, hands: Any, store: Store, section: McpSection) -> int:
        """Call every due watch; return how many changed (each an input)."""
        changed = 0
        _protect(hands, store)
        for w in self.due():
            self._next[key(w)] = self._after(w, self.clock())
            changed += await self._look(hands, store, section, w)
        return changed

    async def _look(self, hands: Any, store: Store, section: McpSection, w: McpWatch) -> int:
        name, k = full_name(w.server, w.tool), key(w)
        info = hands.tool(name) if hands is not None else None
        if info is None or info.side_effect is not SideEffect.READ:
            if k not in self._said:  # once, not every interval
                self._said.add(k)
                log.warning("watch %s: %s", k, "its server offers no such tool (yet)"
                            if info is None else "not a read-only tool; a watch only reads, so "
                            "it is skipped until config.toml changes")
            if info is not None:
                self._next[k] = float("inf")
            return 0
        r = await hands.call(name, w.arguments)
        if r.is_error:
            log.warning("watch %s: the call failed (%s): %s", k, r.status, r.text[:200])
            return 0
        text = r.full_text or r.text
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
        last = self._seen.get(k) or watches.last_seen(store, k)
        if last is None:
            event_id = record(store, "watch_baseline", f"watch {name}: first look (not an input)",
                              author_kind="tool", actor=f"watch:{name}", watch=k, hash=digest,
                              text=text)
            self._seen[k] = watches.Seen(digest, text, event_id)
            return 0
        self._seen[k] = last
        if digest == last.hash:
            return 0  # unchanged: nothing written, no model call
        change = Event(
            kind="watch_change", body=f"watch {name} changed; what is new:\n"
            + what_is_new(last.text, text, WATCH_CHARS), actor=f"watch:{name}",
            author_kind="tool", meta={"watch": k, "hash": digest, "text": text})
        if usage.watch_calls_today(store) >= WATCH_DAILY_CALLS:
            # the day's budget is spent: the change is history, not an input (none pile up)
            change.meta["not_an_input"] = "watch_daily_calls"  # the budget's name, kept in old rows
            self._seen[k] = watches.Seen(digest, text, ev.append(store, change))
            day = usage.day_start()
            log.log(logging.INFO if self._budget_said == day else logging.WARNING,
                    "watch %s changed; recorded, not an input: the %d model calls a day that "
                    "watches alone may wake are spent (it goes on tomorrow)", k,
                    WATCH_DAILY_CALLS)
            self._budget_said = day  # the WARNING once a day, then INFO
            return 0
        event_id = inputs_store.add(store, change, "watch")
        self._seen[k] = watches.Seen(digest, text, event_id)
        log.info("watch %s changed: an input for the next turn", k)
        return 1


def key(w: McpWatch) -> str:
    """A watch's identity: its tool and the hash of its arguments."""
    args = json.dumps(w.arguments, sort_keys=True, ensure_ascii=False)
    return f"{full_name(w.server, w.tool)}:{hashlib.sha256(args.encode()).hexdigest()[:8]}"


def what_is_new(before: str, after: str, limit: int) -> str:
    """The lines of `after` that `before` did not have, in order, within `limit` characters
    (all of `after` when no line is new: something was removed or reordered)."""
    old = set(before.splitlines())
    new = [line for line in after.splitlines() if line not in old] or after.splitlines()
    text = "\n".join(new)
    if len(text) > limit:
        text = text[:limit] + f"\n[... {len(text) - limit} more characters]"
    return text
