"""The actions a person or another agent can take on a coworker, and the door each comes through.

Owns what each action does and who may do it: one API under the CLI and the MCP server, so an
action is written once and its authority is checked in one place. Every `Actions` is made for
one door (`Door`): the owner's terminal (`Door.CLI`) may do everything; another agent over MCP
(`Door.MCP`) may only read (walk, search, recall, pins) and `tell` as an agent, never as the
owner (docs/safety.md, the doors table; ADR-0013); a Hermes agent's memory provider
(`Door.HERMES`) may read and record its conversation (`record_hermes`), and never tell. An
owner's action asked through another door is refused with `NotOwnersDoor` before anything is
read or written.

Owner's actions: tell, retry, redact, pin, unpin, strike, unstrike, supersede, restore (what it
would change first: `restore_plan`), tag, the review of promotions (approve, reject) and the
approval queue of MCP tool calls (approve_action, reject_action). Each writes its change and
its event in one transaction, or snapshots MEMORY.md first where it rewrites that file.

It never parses command lines, never prints and never exits: it returns typed results and
raises the errors of runtime/errors.py, which the doors turn into a line of text (the CLI) or
a tool error (MCP). It never calls a model and never imports the loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any

from . import process
from .errors import Refused, StoreBusy, StoreError, UsageError
from .home import Home
from .store import Event, Store
from .store import events as ev
from .store import inputs as inputs_store

log = logging.getLogger(__name__)

# An id a user types: what SQLite's INTEGER holds.
MAX_ID = 2**63 - 1
PINS_CHARS = 2000  # all pins together: every tick's context carries them (was [memory] pins_max_chars)

# How long `tell` waits for a busy database before it saves the message in the inbox instead.
TELL_BUSY_MS = 2000


class Door(StrEnum):
    """Where an action comes from. The value is what telemetry and events record."""

    CLI = "cli"    # the owner at a terminal: the owner's own words and authority
    MCP = "mcp"    # another agent over MCP: reads, and tells as an agent
    PAGE = "page"  # the owner's page in a browser (signed in with the owner's token, a CSRF
    #                token on every change): the owner's own words and authority, as the CLI
    HERMES = "hermes"  # a Hermes agent's memory provider (`coworker serve`'s /hermes/, its own
    #                    token): reads, and records its conversation, never as the owner


OWNERS_DOORS = frozenset({Door.CLI, Door.PAGE})


class NotOwnersDoor(Refused):
    """An owner's action asked for through a door that does not carry the owner's authority."""


def runner_elsewhere(store: Store) -> str | None:
    """A shared database's loop for this coworker, as "HOST (pid N, since T)" while it holds
    the claim; None on SQLite or when no loop holds it."""
    if store.dialect != "postgres":
        return None
    from .store import pg_runner

    held = pg_runner.current(store)
    return f"{held.host} (pid {held.pid}, since {held.since})" if held and held.holding else None


@dataclass(frozen=True)
class Told:
    """A recorded message. `event_id` is None when the database was busy and the message was
    saved as `inbox_path` instead (the loop reads it at its next tick)."""

    event_id: int | None
    woke_pid: int | None
    inbox_path: Path | None = None
    busy: str | None = None  # why the database could not take it, when it went to the inbox
    runs_on: str | None = None  # a shared database: the host whose loop a NOTIFY woke


@dataclass(frozen=True)
class Changed:
    """An owner's change to MEMORY.md: the entry, the snapshot kept before it, and a warning
    when the memory map could not be re-rendered (the change itself stands)."""

    entry_id: str
    text: str
    snapshot: int
    map_warning: str | None = None


@dataclass(frozen=True)
class Replaced:
    """An entry of MEMORY.md the owner superseded (ADR-0018): the old entry, the new one that
    names it, the snapshot kept before and the promotion that records it."""

    old_id: str
    old_text: str
    entry_id: str
    text: str
    snapshot: int
    promotion_id: int
    map_warning: str | None = None


@dataclass(frozen=True)
class Restored:
    number: int
    reason: str
    before: int
    map_warning: str | None = None


@dataclass(frozen=True)
class RestorePlan:
    """What restoring MEMORY.md version `number` would change (`memorymd.Difference`: entries
    added, removed, changed), and the digest of MEMORY.md as it was read for it: a restore
    given that digest refuses when the file changed since (`Actions.restore`)."""

    number: int
    reason: str
    date: str
    change: Any
    digest: str


@dataclass(frozen=True)
class Tagged:
    kind: str       # "event" or "rollup"
    item_id: int
    added: list[str]


@dataclass(frozen=True)
class Reviewed:
    promotion_id: int
    entry_id: str | None  # the MEMORY.md entry an approval wrote
    map_warning: str | None = None


@dataclass(frozen=True)
class Decided:
    """The owner's decision on a queued MCP tool call: the approval as it now stands, the
    owner's event that records the decision, and the pid of the loop woken to act on it."""

    approval: Any  # store.approvals.Approval
    event_id: int
    woke_pid: int | None


# Why an action that is not waiting cannot be decided, and what to do instead.
_NOT_WAITING = {
    "approved": "is already approved: it runs at the next tick of a coworker running live "
                "(`coworker status`)",
    "rejected": "was rejected and never runs; if you want it after all, ask the coworker "
                "again (`coworker tell`)",
    "expired": "expired without a decision ([mcp] approval_ttl) and never runs; if you still "
               "want it, ask the coworker again (`coworker tell`)",
    "running": "is running, or was cut off while it ran; it is never run again (`coworker "
               "actions --all` shows how it ended)",
    "done": "already ran; it is never run again (`coworker actions --all` shows its result "
            "event)",
    "failed": "already ran and failed; it is never run again (`coworker actions --all` shows "
              "its result event; ask the coworker again with `coworker tell`)",
}


def parse_item(item: str) -> tuple[str, int]:
    """An item a user names for `tag`: `117` or `e.117` (an event), `r.12` (a rollup)."""
    prefix, _, num = item.rpartition(".")
    kind = {"": "event", "e": "event", "r": "rollup"}.get(prefix)
    if kind is None or not (num.isascii() and num.isdigit()) or not 1 <= int(num) <= MAX_ID:
        raise UsageError(f"{item!r} is not an item: give an event id (117 or e.117) or a rollup "
                         "id (r.12)")
    return kind, int(num)


MAX_TAGS, MAX_TAG_CHARS = 50, 64  # the owner's `tag`: search words, not documents


class Actions:
    """The actions of one home, as taken through one door (and, for MCP, by one client)."""

    def __init__(self, home: Home, door: Door, client: str | None = None,
                 semantic: Any = None) -> None:
        self.home = home
        self.door = door
        self.client = client
        # the semantic channel's embedder and vectors (`memory.embed.SemanticCache`), kept by
        # the caller for as long as it lives (the MCP server's process); None: this call's own
        self.semantic = semantic

    # -- doors -------------------------------------------------------------------------------

    def _owner(self, action: str) -> None:
        if self.door not in OWNERS_DOORS:
            raise NotOwnersDoor(f"{action} is the owner's action; the {self.door} door may only "
                                "read and tell (as an agent)")

    def _store(self, readonly: bool = False, busy_timeout_ms: int | None = None) -> Store:
        """A connection for one action. Read-only when it only reads, except that a home with no
        database yet gets an empty, migrated one (as `init` makes)."""
        return self.home.open_store(readonly=readonly, busy_timeout_ms=busy_timeout_ms)

    def _owner_event(self, store: Store, kind: str, body: str, **meta: Any) -> int:
        return ev.append(store, Event(kind=kind, body=body, actor="owner", author_kind="user",
                                      meta=meta))

    def _rerender_map(self, store: Store) -> str | None:
        """Rewrite the memory map after a change to what it shows. The map is for reading: its
        failure is logged loudly and returned, never undoes the change."""
        from .memory import memmap

        try:
            memmap.write(store, self.home.memory_map, self.home.settings().coworker.name,
                         self.home.memory_md)
        except Exception as e:  # noqa: BLE001 - any failure of the map leaves the change whole
            why = f"memory map not re-rendered ({type(e).__name__}: {e})"
            log.warning(why)
            return why
        return None

    # -- reads: every door ---------------------------------------------------------------------

    def walk(self, query: str) -> Any:
        """memory.walk for `query` (`memory.walk.WalkResult`: a refusal is a code; the door's
        words are `render.walk_json`), recorded in telemetry under this door."""
        with self._store() as rw, self._store(readonly=True) as ro:
            return self._memory(ro).walk(query, door=str(self.door), log_to=rw)

    def search(self, query: str, limit: int = 10, after: str | None = None,
               exhaustive: bool = False) -> Any:
        """Search, best first: `memory.search.Hits`, a list of `Hit` with `next_cursor` (pass
        it back as `after` for the next page; hybrid on the first page when the semantic
        channel is on and lexical covers too little of the query). `exhaustive`: the flat
        ranking of every match, one page."""
        if not 1 <= limit <= 200:
            raise UsageError(f"limit must be between 1 and 200, not {limit}")
        with self._store(readonly=True) as store:
            return self._memory(store).search(query, limit, after=after, exhaustive=exhaustive)

    def _memory(self, store: Store) -> Any:
        """The memory service over `store` (`memory.service.Memory`), with this home's settings
        and the semantic channel this `Actions` was given (a local model loads once for the
        MCP server's life; a CLI call loads it only when lexical falls short)."""
        from .memory.embed import SemanticCache
        from .memory.service import Memory

        if self.semantic is None:
            self.semantic = SemanticCache()
        return Memory(store, self.home.settings(), self.semantic)

    def recall(self, text: str) -> dict[str, Any]:
        """What the loop would recall before answering `text`: terms, the items the block holds
        (best first, whole, marked stale or imported in the words walk and search use), the
        exact block, and the decision (why there is none). Hybrid when the channel is on, as
        in the loop."""
        from .render import recall_decision

        with self._store(readonly=True) as store:
            memory = self._memory(store)
            budget = memory.budget()
            found = memory.recall(text)
        shown = {int(h.event.id or 0) for h, _ in found.chosen(budget)}
        items = [_recalled(h) for h in found.hits[: budget.max_items]
                 if int(h.event.id or 0) in shown]
        result: dict[str, Any] = {"terms": found.terms, "items": items,
                                  "block": found.block(budget),
                                  "decision": recall_decision(found)}
        if found.query_truncated:
            result["query_truncated"] = True
        return result

    def record_hermes(self, session: str, platform: str, messages: Sequence[Any]) -> Any:
        """A Hermes conversation's messages as events of actor `hermes`, each once
        (`store.hermes_turns`): never an input, never the owner's words. Only the Hermes door
        records; `tell` stays the owner's (and, as an agent, MCP's)."""
        from .store import hermes_turns

        if self.door is not Door.HERMES:
            raise Refused(f"only the Hermes provider's door records a Hermes conversation, not "
                          f"the {self.door} door")
        with self._store() as store:
            return hermes_turns.record(store, session, platform, messages)

    def status(self) -> dict[str, Any]:
        """What `coworker status` shows: the process (from its pidfile and run.json), the
        event and input counts, what was set aside, the last failure, the week's walks and
        the MCP tool calls in the approval queue, by status."""
        from datetime import timedelta

        from .store import approvals, telemetry

        home = self.home
        pid = process.running_pid(home)
        run = process.read_runfile(home) if pid else {}
        if run.get("pid") != pid:  # the last process's run.json, before this one writes its own
            run = {}
        week_ago = ev.iso_z(datetime.now(UTC) - timedelta(days=7))
        with self._store(readonly=True) as store:
            data: dict[str, Any] = {
                "events": ev.counts(store),
                "events_by_kind": ev.counts_by_kind(store),
                "walks_7d": telemetry.walk_stats(store, week_ago),
                "inputs": inputs_store.counts(store),
                "set_aside": [{"id": i.id, "kind": i.kind, "body": i.event.body[:200],
                               "failures": i.failures, "error": i.last_error}
                              for i in inputs_store.listing(store, "set_aside")],
                "last_failure": inputs_store.last_failure(store),
                "actions": approvals.counts(store),
                "inbox": _inbox_state(home.inbox),
                "deliveries": _deliveries(store, home),
                "serve": _serve_state(home),
                "store": {"backend": store.dialect, "where": home.store_where(),
                          "runs_on": runner_elsewhere(store) if pid is None else None},
            }
        return {
            "home": str(home.root),
            "running": pid is not None,
            "pid": pid,
            "uptime_s": process.uptime_s(run) if pid else None,
            "last_tick_at": run.get("last_tick_at"),
            "last_outcome": run.get("last_outcome"),
            "next_tick_at": run.get("next_tick_at"),
            "interval_s": run.get("interval_s"),
            "config_in_use": process.config_in_use(home, run) if pid else None,
            "config_rejected": bool(pid) and process.config_rejected(home, run),
            "model": run.get("model"),
            "writes": run.get("writes") if pid else None,
            "capped": run.get("capped") if pid else None,
            **data,
        }

    def pins(self) -> list[Any]:
        """The active pins, oldest first (`store.pins.Pin`)."""
        from .store import pins as pins_store

        with self._store(readonly=True) as store:
            return pins_store.active(store)

    def promotions(self, show_all: bool = False) -> list[Any]:
        """Queued promotions (or every one), as `store.promotions` rows."""
        from .store import promotions as pr

        with self._store() as store:
            return pr.listing(store, None if show_all else "queued")

    def waiting_actions(self, show_all: bool = False) -> list[Any]:
        """The MCP tool calls waiting for the owner's approval (or every one, with
        `show_all`), newest first, as `store.approvals.Approval` rows. Those past their expiry
        are marked expired first, so what is listed as waiting can still be approved."""
        from .store import approvals

        with self._store() as store:
            self._expire_actions(store)
            return approvals.listing(store, None if show_all else approvals.Status.WAITING)

    def _expire_actions(self, store: Store) -> None:
        """Mark the waiting actions past their time expired, each with the `action_expired`
        event the loop writes when it finds them first, in one transaction."""
        from .store import approvals

        with store.transaction():
            for n in approvals.expire(store, ev.now_iso()):
                ev.append(store, Event(kind="action_expired", body=f"action {n} expired "
                                       "unapproved", actor="coworker", author_kind="system",
                                       meta={"approval_id": n}))

    def mcp_tools(self) -> tuple[list[Any], bool]:
        """Start each configured MCP server once and report it (`hands.survey.ServerReport`),
        with whether the coworker runs live: the running process's own mode when one runs,
        else `[writes] mode`. It calls no tool and writes nothing."""
        from .hands.survey import survey

        settings = self.home.settings()
        pid = process.running_pid(self.home)
        writes = process.read_runfile(self.home).get("writes") if pid else settings.writes.mode
        live = writes == "live"
        return asyncio.run(survey(settings.mcp, live)), live

    def snapshots(self) -> list[Any]:
        from .memory.memorymd import snapshots

        return snapshots(self.home.snapshots)

    def snapshots_with_changes(self) -> list[tuple[Any, Any]]:
        """Every version of MEMORY.md kept, each with what restoring it would change now
        (`memorymd.Difference`), or None where a file cannot be read to say."""
        from .memory.memorymd import MemoryFileError, difference

        rows: list[tuple[Any, Any]] = []
        for snap in self.snapshots():
            try:
                rows.append((snap, difference(self.home.memory_md, snap.path)))
            except MemoryFileError:
                rows.append((snap, None))
        return rows

    # -- tell: every door, with the door's authority ------------------------------------------

    def tell(self, text: str) -> Told:
        """Record a message as an input of the loop and wake a running loop. Through the owner's
        door it is the owner's message; through MCP, an agent's (actor `mcp:<client>`). When
        the database stays busy past TELL_BUSY_MS, the owner's message is saved in the inbox
        (never lost); an agent's is refused, and the agent may try again."""
        message = text.strip()
        if not message:
            raise UsageError("nothing to tell: give the message text")
        limit = inputs_store.MESSAGE_MAX_BYTES  # one message, whichever way it comes in
        # + 1: the inbox file `tell` falls back to ends with a line break
        if (size := len(message.encode("utf-8", "surrogatepass"))) + 1 > limit:
            raise UsageError(f"the message is {size:,} bytes, over the {limit >> 20} MiB "
                             "limit of one message: split it, or bring past history in with "
                             "`coworker import`")
        event = self._told(message)
        try:
            with self._store(busy_timeout_ms=TELL_BUSY_MS) as store:
                event_id = inputs_store.add_message(store, event)
                runs_on = runner_elsewhere(store)
        except StoreBusy as e:
            if self.door not in OWNERS_DOORS:
                raise
            path = to_inbox(self.home, message)
            return Told(None, process.wake(self.home), path, str(e).split(" (")[0])
        except StoreError as e:  # damaged, unreadable: the owner's message is kept all the same
            if self.door not in OWNERS_DOORS:
                raise
            try:
                path = to_inbox(self.home, message)
            except OSError as saving:
                raise StoreError(f"{e}; your message could not be saved in the inbox either "
                                 f"({saving.strerror or saving}): keep it yourself") from e
            raise StoreError(f"{e}; your message was saved in {path} and is read once the "
                             "database works again") from e
        pid = process.wake(self.home)
        if self.door not in OWNERS_DOORS:
            log.info("tell from %s: recorded event %d; %s", self.client or "an unnamed client",
                     event_id, f"woke pid {pid}" if pid is not None else
                     f"woke the loop on {runs_on}" if runs_on else "no coworker running")
        return Told(event_id, pid, runs_on=None if pid is not None else runs_on)

    def _told(self, message: str) -> Event:
        """The event a tell through this door records: the owner's message through the owner's
        doors, an agent's through MCP; the Hermes door never tells."""
        if self.door is Door.HERMES:
            raise Refused("the Hermes provider's door reads and records; it never tells")
        if self.door in OWNERS_DOORS:
            return Event.owner_message(message, "tell")
        return Event.agent_message(message, self.client)

    def runs_elsewhere(self) -> str | None:
        """On a shared database: "HOST (pid N, since T)" of the loop that holds this coworker
        when it is not this host's; None on SQLite or when none runs."""
        if self.home.store_url() is None:
            return None
        with self._store(readonly=True) as store:
            return runner_elsewhere(store)

    # -- the owner's actions -------------------------------------------------------------------

    def retry(self, ids: Sequence[int] = ()) -> tuple[list[int], int | None]:
        """Put set-aside inputs back in line (all of them when `ids` is empty); returns the ids
        put back and the pid woken. Refused when none of them was set aside."""
        self._owner("retry")
        with self._store() as store, store.transaction():  # the retry and its event: both or neither
            back = inputs_store.retry(store, list(ids) or None)
            if back:
                self._owner_event(store, "input_retry", "owner put back input(s) "
                                  f"{', '.join(map(str, back))}", inputs=back)
        if not back:
            raise Refused("nothing to retry: " + (
                f"input(s) {', '.join(map(str, ids))} are not set aside" if ids else
                "no input is set aside") + " (`coworker status`)")
        return back, process.wake(self.home)

    def redact(self, event_id: int, why: str) -> Any:
        """Take an event's text out of the history (runtime/redaction.py); a RedactionReport."""
        from .memory import memmap
        from .redaction import redact_event

        self._owner("redact")
        with self._store() as store:
            report = redact_event(store, event_id, why)
            if self.home.memory_map.exists():  # it quotes rollup titles: rewrite it
                memmap.write(store, self.home.memory_map, self.home.settings().coworker.name,
                             self.home.memory_md)
        return report

    def pin(self, text: str) -> int:
        """Pin text into every tick's context, within PINS_CHARS in all; the pin's id."""
        from .store import pins as pins_store

        self._owner("pin")
        body = " ".join(text.split())
        if not body:
            raise UsageError('nothing to pin: coworker pin "text"')
        limit = PINS_CHARS
        with self._store() as store, store.transaction():  # the pin and its event: both or neither
            used = sum(len(p.text) for p in pins_store.active(store))
            if used + len(body) > limit:
                raise Refused(f"pins would hold {used + len(body)} characters, over their budget "
                              f"of {limit}: unpin something first (`coworker pins`)")
            p = pins_store.add(store, body)
            self._owner_event(store, "pin", body, pin_id=p.id)
        return p.id

    def unpin(self, pin_id: int) -> None:
        from .store import pins as pins_store

        self._owner("unpin")
        with self._store() as store, store.transaction():  # the unpin and its event
            if not pins_store.unpin(store, pin_id):
                raise Refused(f"no active pin {pin_id}; `coworker pins` lists them")
            self._owner_event(store, "unpin", f"unpinned {pin_id}", pin_id=pin_id)

    def strike(self, key: str) -> Changed:
        """Remove exactly one MEMORY.md entry, by id (m12) or by text it contains; a snapshot
        of the file is written first. No match, or several, is a refusal that lists them."""
        from .memory.memorymd import MemoryFile, snapshot

        self._owner("strike")
        text = key.strip()
        if not text:
            raise UsageError("nothing to strike: coworker strike ID|TEXT (see MEMORY.md)")
        self._one_entry(MemoryFile.load(self.home.memory_md), text)  # refused at once
        with self._store() as store:
            # then the write lock: the file is read again, snapshotted, recorded and written
            # by one strike at a time (two at once would each save the other's entry back),
            # and a store that cannot take the event leaves MEMORY.md as it was
            with store.transaction():
                memory = MemoryFile.load(self.home.memory_md)
                entry = self._one_entry(memory, text)
                snap = snapshot(self.home.memory_md, self.home.snapshots,
                                f"before striking [{entry.id}]")
                self._owner_event(store, "memory_strike", f"struck [{entry.id}] {entry.text}",
                                  entry_id=entry.id, snapshot=snap.number)
                memory.without(str(entry.id)).save()
            warning = self._rerender_map(store)
        return Changed(str(entry.id), entry.text, snap.number, warning)

    def unstrike(self, entry_id: str) -> Changed:
        """Put back MEMORY.md entry `entry_id` (m3), which the owner struck: the same id, with
        the text, sources and date the snapshot written before the strike kept, where it
        stood. A snapshot first, as for every change, and a `memory_restore` event naming the
        strike, in one transaction with the write. Refused for an id never struck (by the
        coworker: an imported strike is not this MEMORY.md's), one in MEMORY.md now, or one
        whose text another entry holds now."""
        from .memory.memorymd import MemoryFile, snapshot

        self._owner("unstrike")
        key = entry_id.strip()
        key = f"m{key}" if key.isascii() and key.isdigit() else key
        if not re.fullmatch(r"m[0-9]{1,18}", key):
            raise UsageError(f"{entry_id!r} is not an entry id: coworker unstrike ID, e.g. "
                             "`coworker unstrike m3` (`coworker log --kind memory_strike` "
                             "lists what was struck)")
        with self._store(readonly=True) as store:
            self._struck_entry(store, key, MemoryFile.load(self.home.memory_md))  # refused now
        with self._store() as store:
            with store.transaction():  # as strike: read again, snapshot, record, write
                memory = MemoryFile.load(self.home.memory_md)
                entry, then, strike_id = self._struck_entry(store, key, memory)
                snap = snapshot(self.home.memory_md, self.home.snapshots,
                                f"before unstriking [{key}]")
                self._owner_event(store, "memory_restore", f"put back [{key}] {entry.text}",
                                  entry_id=key, unstruck=strike_id, snapshot=snap.number)
                memory.returning(entry, then).save()
            warning = self._rerender_map(store)
        return Changed(key, entry.text, snap.number, warning)

    def _struck_entry(self, store: Store, key: str, memory: Any) -> tuple[Any, Any, int]:
        """The entry `key` as the snapshot before its latest strike kept it, that snapshot's
        file and the strike's event id; a refusal when it cannot be put back."""
        from .store import strikes

        if any(e.id == key for e in memory.numbered().entries):
            raise Refused(f"[{key}] is in MEMORY.md now; there is nothing to unstrike")
        strike = strikes.latest(store, key)
        if strike is None:
            raise Refused(f"[{key}] was never struck; `coworker log --kind memory_strike` "
                          "lists what was")
        entry, then = self._kept_before(key, strike.snapshot)
        same = " ".join(entry.text.lower().split())
        twin = next((e for e in memory.numbered().entries
                     if " ".join(e.text.lower().split()) == same), None)
        if twin is not None:
            raise Refused(f"[{twin.id}] holds the same text as [{key}] now; nothing put back")
        return entry, then, strike.event_id

    def _kept_before(self, key: str, number: int | None) -> tuple[Any, Any]:
        """Entry `key` as snapshot `number` holds it, and that snapshot's file; a refusal
        when the snapshot is gone, unreadable or without it."""
        from .memory.memorymd import MemoryFile, MemoryFileError

        path = self.home.snapshots / f"v{number:04d}.md" if number is not None else None
        try:
            then = MemoryFile.load(path) if path is not None and path.exists() else None
        except MemoryFileError:
            then = None
        entry = next((e for e in then.entries if e.id == key), None) if then else None
        if then is None or entry is None:
            raise Refused(f"the snapshot kept before [{key}] was struck (v{number}) is gone "
                          "or no longer holds it; nothing put back")
        return entry, then

    @staticmethod
    def _one_entry(memory: Any, text: str) -> Any:
        """The one MEMORY.md entry `text` names (an id, or words it holds); a refusal that
        lists them when none or several do."""
        hits = memory.find(text)
        if not hits:
            raise Refused(f"no MEMORY.md entry matches {text!r}; entries: " + (
                ", ".join(f"[{e.id}] {e.text[:40]}" for e in memory.numbered().entries)
                or "none"))
        if len(hits) > 1:
            raise Refused(f"{len(hits)} entries match {text!r}, strike one by id: " +
                          "; ".join(f"[{e.id}] {e.text[:50]}" for e in hits))
        return hits[0]

    def supersede(self, entry_id: str, text: str) -> Replaced:
        """Replace MEMORY.md entry `entry_id` (m12) with `text`, the owner's own words: a
        snapshot first, then the new entry in the old one's place, naming it; the old one
        leaves the file (ADR-0018). The owner's `memory_supersede` event (the new entry's
        source) and the applied promotion that records it are one transaction with the
        write. An unknown entry, a duplicate or a MEMORY.md over budget is refused."""
        from .memory import gate

        self._owner("supersede")
        body = " ".join(text.split())
        if not entry_id.strip() or not body:
            raise UsageError('coworker supersede ID "new text" (ids are in MEMORY.md)')
        settings = self.home.settings()
        with self._store() as store:
            with store.transaction():  # the event, the promotion and the file: all or none
                old = gate.entry_to_supersede(gate.load_memory(store, self.home), entry_id,
                                              otherwise=" (MEMORY.md shows them)")
                event_id = self._owner_event(store, "memory_supersede", body,
                                             supersedes=old.id)
                done = gate.supersede(store, self.home, settings, str(old.id), body, event_id)
            warning = self._rerender_map(store)
        return Replaced(str(done.old.id), done.old.text, str(done.new.id), done.new.text,
                        done.snapshot, done.promotion_id, warning)

    def restore_plan(self, number: int) -> RestorePlan:
        """What `restore(number)` would change, read now; nothing is written. An unknown
        version is refused, listing those kept."""
        from .memory.memorymd import chosen_snapshot, difference, read_bytes

        self._owner("restore")
        chosen = chosen_snapshot(self.home.snapshots, number)
        digest = _digest(read_bytes(self.home.memory_md))
        return RestorePlan(chosen.number, chosen.reason, chosen.date,
                           difference(self.home.memory_md, chosen.path), digest)

    def restore(self, number: int, expect: str | None = None) -> Restored:
        """Bring back MEMORY.md version `number`; the current file is snapshotted first. With
        `expect` (a `RestorePlan.digest`), refused when MEMORY.md is no longer the file that
        plan was read from, so what was shown is what is done."""
        from .memory.memorymd import chosen_snapshot, put_back, read_bytes, restorable, snapshot

        self._owner("restore")
        restorable(chosen_snapshot(self.home.snapshots, number))  # unknown or unreadable: refused
        with self._store() as store:
            with store.transaction():  # as strike: the file changes only with its event
                chosen = chosen_snapshot(self.home.snapshots, number)
                if expect is not None and _digest(read_bytes(self.home.memory_md)) != expect:
                    raise Refused(f"MEMORY.md changed since the change above was read; nothing "
                                  f"restored: run `coworker restore {number}` again to see "
                                  "what it would change now")
                before = snapshot(self.home.memory_md, self.home.snapshots,
                                  f"before restoring v{number}")
                self._owner_event(store, "memory_restore", f"restored MEMORY.md v{number}",
                                  restored=number, snapshot=before.number)
                put_back(self.home.memory_md, chosen)
            warning = self._rerender_map(store)
        return Restored(chosen.number, chosen.reason, before.number, warning)

    def tag(self, item: str, words: Sequence[str]) -> Tagged:
        """Add search words to an event or a rollup (`parse_item` reads the item)."""
        from .store import tags as tags_store

        self._owner("tag")
        kind, num = parse_item(item)
        given = [w for w in (w.strip() for w in words) if w]
        if not given:
            raise UsageError("no words to tag with: coworker tag ID WORD... (e.g. "
                             "`coworker tag 117 outage`)")
        if len(given) > MAX_TAGS or any(len(w) > MAX_TAG_CHARS for w in given):
            raise UsageError(f"a tag is a search word: at most {MAX_TAGS} of them, each at most "
                             f"{MAX_TAG_CHARS} characters")
        unsearchable = [w for w in given if not any(c.isalnum() for c in w)]
        if unsearchable:  # the index keeps letters and digits only: such a tag finds nothing
            raise UsageError(f"a tag is a search word, with a letter or a digit: "
                             f"{unsearchable[0]!r} has none")
        with self._store() as store:
            try:
                added = tags_store.add(store, kind, num, given)
            except LookupError as e:
                raise Refused(f"{e}; `coworker search` shows ids") from e
        return Tagged(kind, num, added)

    def import_history(self, path: Path, *, skip_bad: bool = False, mine: str | None = None,
                       progress: Any = None) -> Any:
        """`importer.import_file` of `path` (an ImportReport), timestamps without an offset read
        in [coworker] timezone. `mine`: the owner vouches for that actor's lines as the
        owner's own (ADR-0033), an owner's action like the import itself."""
        from .importer import import_file

        self._owner("import")
        zone = self.home.settings().coworker.timezone
        with self._store() as store:
            return import_file(store, path, skip_bad=skip_bad, progress=progress,
                               timezone=zone, mine=mine)

    def unmine(self, batch: str) -> list[str]:
        """Withdraw the owner's vouching for import `batch` (ADR-0033): its lines are imported
        history again, never the owner's words. The actors it covered; Refused when the owner
        does not vouch for that batch."""
        from .store import import_keys

        self._owner("unmine")
        key = batch.strip()
        if not key:
            raise UsageError("which batch? coworker import --unmine BATCH (`coworker import "
                             "--mine` printed it)")
        with self._store() as store, store.transaction():
            return import_keys.unvouch(store, key)

    def approve(self, promotion_id: int) -> Reviewed:
        """Approve a queued promotion: snapshot MEMORY.md, then apply it."""
        from .memory import gate

        self._owner("approve")
        with self._store() as store:
            entry = gate.approve(store, self.home, self.home.settings(), promotion_id)
            warning = self._rerender_map(store)
        return Reviewed(promotion_id, entry, warning)

    def reject(self, promotion_id: int, why: str | None) -> Reviewed:
        from .memory import gate

        self._owner("reject")
        with self._store() as store:
            gate.reject(store, promotion_id, why)
            warning = self._rerender_map(store)
        return Reviewed(promotion_id, None, warning)


    def approve_action(self, approval_id: int) -> Decided:
        """Approve a waiting MCP tool call: it runs once, at the next tick where its server
        and the coworker run live, and its result is an event the model sees."""
        self._owner("approve_action")
        return self._decide_action(approval_id, "approved", None)

    def reject_action(self, approval_id: int, why: str) -> Decided:
        """Reject a waiting MCP tool call: it never runs; `why` is kept with it."""
        self._owner("reject_action")
        reason = " ".join((why or "").split())
        if not reason:
            raise UsageError(f'say why: coworker actions reject {approval_id} --why "TEXT"')
        return self._decide_action(approval_id, "rejected", reason)

    def _decide_action(self, approval_id: int, status: str, why: str | None) -> Decided:
        from .store import approvals

        with self._store() as store:
            self._expire_actions(store)
            with store.transaction():  # the decision and its event: both or neither
                try:
                    done = approvals.decide(store, approval_id, status, why)
                except LookupError as e:
                    raise Refused(f"no action {approval_id}; `coworker actions --all` lists "
                                  "every one") from e
                except approvals.WrongStatus as e:
                    raise Refused(f"action {approval_id} "
                                  f"{_NOT_WAITING.get(e.status, f'is {e.status}')}") from e
                # The body names the call, never its arguments: an owner's event carries the
                # owner's authority, and the arguments are the model's text.
                verb = "approved" if status == "approved" else "rejected"
                body = f"owner {verb} action {approval_id}: {done.name}" + (
                    f" ({why})" if why else "")
                event_id = self._owner_event(store, f"action_{verb}", body,
                                             approval_id=approval_id, name=done.name,
                                             tool_use_id=done.tool_use_id)
        return Decided(done, event_id, process.wake(self.home))


def to_inbox(home: Home, message: str) -> Path:
    """Write a told message into state/inbox/ atomically (a dot-file the loop ignores, then a
    rename), so the loop never reads half of it."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    name = f"tell-{stamp}-{os.getpid()}-{secrets.token_hex(3)}.txt"
    home.inbox.mkdir(parents=True, exist_ok=True)
    tmp = home.inbox / f".{name}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(message + "\n")
        f.flush()
        os.fsync(f.fileno())
    target = home.inbox / name
    os.replace(tmp, target)
    return target


def _deliveries(store: Store, home: Home) -> dict[str, Any] | None:
    """What `status` says of the [[notify]] deliveries (runtime/notify), or None when
    config.toml does not parse (said after the status)."""
    from .errors import ConfigError
    from .notify.deliver import status as delivery_status

    try:
        return delivery_status(store, home.settings())
    except ConfigError:
        return None


def _serve_state(home: Home) -> dict[str, Any] | None:
    """What `status` says of the local HTTP server: None when `[serve]` is off (or config.toml
    does not parse), else its URL and whether something answers there now."""
    import socket

    from .errors import ConfigError

    try:
        cfg = home.settings().serve
    except ConfigError:
        return None
    if not cfg.enabled:
        return None
    try:
        with socket.create_connection((cfg.host, cfg.port), timeout=0.2):
            listening = True
    except OSError:
        listening = False
    host = f"[{cfg.host}]" if ":" in cfg.host else cfg.host  # an IPv6 address in a URL
    return {"url": f"http://{host}:{cfg.port}", "listening": listening}


def _inbox_state(inbox: Path, shown: int = 3) -> dict[str, Any]:
    """What `status` says of the inbox: the files waiting in it (an empty one waits for its
    writer), and how many were moved to rejected/, the newest first (why is in the log)."""
    def entries(folder: Path) -> list[os.DirEntry[str]]:
        try:
            return list(os.scandir(folder))
        except OSError:
            return []

    waiting = sorted(e.name for e in entries(inbox)
                     if not e.name.startswith(".") and e.name not in ("done", "rejected"))
    rejected = entries(inbox / "rejected")
    rejected.sort(key=lambda e: (-e.stat(follow_symlinks=False).st_mtime, e.name))
    return {"waiting": waiting, "rejected": len(rejected),
            "newest_rejected": [e.name for e in rejected[:shown]]}


def _recalled(h: Any) -> dict[str, Any]:
    """A recalled item as the MCP and the tools show it: whole, marked as the block marks it."""
    from .memory.recall import STRUCK_NOTE, struck_record

    e = h.event
    item = {"id": e.id, "ts": e.ts, "kind": e.kind, "actor": e.actor, "body": e.body,
            "source": e.source}
    if h.stale_by is not None:
        item["stale"] = f"superseded by {h.stale_by}"
    if e.imported:
        item["imported"] = "not your owner's words"
    if struck_record(e):
        item["struck"] = STRUCK_NOTE
    return item


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
