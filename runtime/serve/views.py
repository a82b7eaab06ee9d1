"""What each part of the owner's page shows, read from the home: plain dicts for the templates.

Owns gathering, never deciding: the conversation (messages and replies), the status (the same
figures as `coworker status`, today's spending against the caps, the hands' servers as the
running loop last reported them), the two queues with what led to each item, MEMORY.md with
what was struck, the pins, the memory map, and search and walk. Every read goes through the
actions API (`Door.PAGE`) or the store's own functions; every text is handed on as text (the
templates escape it). Blocking: the page runs these in a worker thread.
"""

from __future__ import annotations

import json
from datetime import UTC, tzinfo
from typing import Any

from .. import process, render
from ..actions import Actions, Door
from ..home import Home
from ..store import Event, Store
from ..store import events as ev

SHOWN_CHARS = 4000  # of one message in the conversation (a hook's payload may be 64,000)
RECENT = 40  # messages and replies on the page
SAID_KINDS = ("message", "outbox")
SOURCE_CHARS = 300  # of an event that led to a queued item


def _open(home: Home) -> Store:
    return home.open_store(readonly=True)


def said(e: Event, zone: tzinfo = UTC) -> dict[str, Any]:
    """One line of the conversation: who, when, and the text (cut, with where the rest is)."""
    text = e.body
    if len(text) > SHOWN_CHARS:
        text = (f"{text[:SHOWN_CHARS]}\n[... {len(e.body):,} characters in all; "
                f"`coworker log` shows event {e.id} whole]")
    if e.kind == "outbox":
        who, side = "coworker", "reply"
    elif e.actor == "owner":
        who, side = "you", "owner"
    else:
        who, side = e.actor, "other"
    return {"id": e.id, "ts": e.ts, "when": render.when(e.ts, zone), "who": who,
            "side": side, "text": text, "subject": e.meta.get("subject") or None,
            "in_reply_to": [int(i) for i in e.meta.get("in_reply_to") or []
                            if isinstance(i, int)]}


def conversation(home: Home, after: int = 0, n: int = RECENT) -> list[dict[str, Any]]:
    """The last `n` messages and replies (oldest first), or those after event `after`."""
    if not home.has_store():
        return []
    zone = home.settings().coworker.zone
    with _open(home) as store:
        if after:
            got = ev.since(store, after, SAID_KINDS, limit=n)
        else:
            got = ev.tail(store, n, kind="message") + ev.tail(store, n, kind="outbox")
            got = sorted(got, key=lambda e: int(e.id or 0))[-n:]
    return [said(e, zone) for e in got]


def status(home: Home) -> dict[str, Any]:
    """`coworker status`'s figures, the mode, today's spending and the hands."""
    from ..store import usage

    settings = home.settings()
    data = Actions(home, Door.PAGE).status()
    run = process.read_runfile(home) if data["running"] else {}
    with _open(home) as store:
        used = usage.today(store)
    model = settings.model
    zone = settings.coworker.zone
    data["mode"] = data.get("writes") or settings.writes.mode
    data["last_tick"] = render.when(data.get("last_tick_at"), zone) or None
    data["next_tick"] = render.when(data.get("next_tick_at"), zone) or None
    data["promotions_queued"] = len(Actions(home, Door.PAGE).promotions())
    data["spending"] = {"calls": used.calls, "tokens": used.tokens,
                        "daily_calls": model.daily_calls, "daily_tokens": model.daily_tokens}
    data["hands"] = run.get("hands") if isinstance(run.get("hands"), list) else [
        {"name": s.name, "state": "not started (the coworker is not running)" if not
         data["running"] else "not reported yet", "reason": None, "tools": None}
        for s in settings.mcp.servers]
    return data


def _sources(store: Store, ids: list[int], zone: tzinfo) -> list[dict[str, Any]]:
    found = ev.history_of(store, ids)
    rows = []
    for i in ids:
        e = found.get(i)
        rows.append({"id": i, "missing": e is None} if e is None else
                    {"id": i, "missing": False, "kind": e.kind, "actor": e.actor,
                     "when": render.when(e.ts, zone),
                     "text": render.one_line(e.body, SOURCE_CHARS)})
    return rows


def queues(home: Home) -> dict[str, Any]:
    """The MCP actions waiting for approval and the promotions queued for MEMORY.md, each with
    the events that led to it."""
    owner = Actions(home, Door.PAGE)
    actions, promotions = owner.waiting_actions(), owner.promotions()
    zone = home.settings().coworker.zone
    with _open(home) as store:
        return {
            "actions": [{"id": a.id, "when": render.when(a.ts, zone), "name": a.name,
                         "server": a.server, "arguments": json.dumps(
                             a.arguments, indent=2, ensure_ascii=False, sort_keys=True),
                         "reason": a.reason, "expires": render.when(a.expires_at, zone),
                         "sources": _sources(store, list(a.sources), zone)} for a in actions],
            "promotions": [{"id": p.id, "when": render.when(p.ts, zone), "text": p.text,
                            "origin": p.origin, "why": p.reason, "supersedes": p.supersedes,
                            "confidence": p.confidence,
                            "sources": _sources(store, list(p.source_events or []), zone)}
                           for p in promotions],
        }


def memory(home: Home) -> dict[str, Any]:
    """MEMORY.md's entries, those struck that may be put back, the pins and the map."""
    from ..memory.memorymd import MemoryFile

    entries = MemoryFile.load(home.memory_md).numbered().entries \
        if home.memory_md.exists() else []
    present = {e.id for e in entries}
    zone = home.settings().coworker.zone
    struck: dict[str, dict[str, Any]] = {}
    if home.has_store():
        with _open(home) as store:
            for e in reversed(ev.tail(store, 50, kind="memory_strike")):
                key = e.meta.get("entry_id")
                if isinstance(key, str) and key not in present and key not in struck:
                    struck[key] = {"id": key, "when": render.when(e.ts, zone),
                                   "text": e.body}
    return {
        "entries": [{"id": e.id, "text": e.text, "sources": list(e.sources), "date": e.date}
                    for e in entries],
        "struck": list(struck.values()),
        "pins": [{"id": p.id, "when": render.when(p.ts, zone), "text": p.text}
                 for p in Actions(home, Door.PAGE).pins()],
        "map": home.memory_map.read_text(encoding="utf-8", errors="replace")
        if home.memory_map.exists() else None,
    }


def look(home: Home, query: str, how: str) -> dict[str, Any]:
    """A search (hits) or a walk (its trace, events or refusal) for `query`."""
    owner = Actions(home, Door.PAGE)
    zone = home.settings().coworker.zone
    if how == "walk":
        walk = render.walk_json(owner.walk(query))
        for e in walk.get("events") or []:
            e["when"] = render.when(e.get("ts"), zone)
        return {"walk": walk}
    return {"hits": [{**h.as_dict(), "when": render.when(h.ts, zone)}
                     for h in owner.search(query, 20)]}
