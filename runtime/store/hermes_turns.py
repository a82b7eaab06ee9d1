"""What a Hermes agent's memory provider records: the messages of its conversations, each once.

Owns writing the messages `coworker serve`'s Hermes door takes (runtime/serve/hermes.py) as
events: kind `hermes_user`, `hermes_assistant` or `hermes_tool` (who said it in the Hermes
conversation), or `hermes_memory` (what Hermes' own memory tool wrote), actor `hermes`,
author_kind `agent` (`tool` for a tool's output), meta `via = "hermes"`, the session, the
platform and the role. Never an input of the loop (no row in
`inputs`: nothing wakes for it) and never the owner's words, whoever typed them into Hermes:
the gate reads them as another agent's (docs/safety.md).

Each message has a key: its conversation (the `session` the provider sends: the session a
compression continued from), role and text (`key`). The keys are kept in `import_keys`
(source `hermes`), written in the same transaction as their events, and a message whose key is
there already is not written again: `sync_turn`, a later `on_pre_compress` and
`on_session_end` may each send the same message, and it is one event. The same words said twice
by the same side of one session are therefore one event (the first time). It never logs and
never decides who may record (the door does).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from . import events as ev
from . import import_keys
from .db import Store

# role -> author_kind; "memory": a write of Hermes' own memory tool, mirrored
ROLES = {"user": "agent", "assistant": "agent", "tool": "tool", "memory": "agent"}
ACTOR = "hermes"
SOURCE = "hermes"  # import_keys.source of the keys written here
TEXT_CHARS = 64_000  # of one message in its event's body; a longer one is cut, and says so
MAX_MESSAGES = 500  # in one request


@dataclass(frozen=True)
class Message:
    role: str  # one of ROLES
    text: str


@dataclass(frozen=True)
class Recorded:
    event_ids: list[int]  # the messages written now, in order
    duplicates: int  # the messages written before (or twice in this request), not again


def key(session: str, role: str, text: str) -> str:
    """A message's key: its session, its role and its text (outer blank space aside)."""
    raw = json.dumps([session, role, text.strip()], ensure_ascii=False)
    return "hermes:" + hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()


def kind_of(role: str) -> str:
    return f"hermes_{role}"


def body_of(text: str) -> str:
    text = text.strip()
    if len(text) <= TEXT_CHARS:
        return text
    return (f"{text[:TEXT_CHARS]}\n[cut: the first {TEXT_CHARS:,} of {len(text):,} characters "
            "of this Hermes message]")


def record(store: Store, session: str, platform: str, messages: Sequence[Message]) -> Recorded:
    """Write the messages not yet written (by their keys), in order, in one transaction."""
    keyed = [(key(session, m.role, m.text), m) for m in messages]
    with store.transaction() as db:
        have = import_keys.present(store, list(dict.fromkeys(k for k, _ in keyed)))
        ids: list[int] = []
        for k, m in keyed:
            if k in have:
                continue
            have.add(k)
            event_id = ev.append(store, ev.Event(
                kind=kind_of(m.role), body=body_of(m.text), actor=ACTOR,
                author_kind=ROLES[m.role],
                meta={"via": "hermes", "session": session, "platform": platform,
                      "role": m.role}))
            db.execute("INSERT INTO import_keys (key, event_id, source) VALUES (?, ?, ?)",
                       (k, event_id, SOURCE))
            ids.append(event_id)
    return Recorded(ids, len(messages) - len(ids))
