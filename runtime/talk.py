"""The conversation with the owner in the terminal: `coworker replies`, `ask` and `chat`.

Owns what the three commands do with the store and the clock: the replies listed and marked
read (`store.replies`), the wait for the reply to one message, and the chat session (the recent
conversation shown on entry, each line typed told as the owner, the replies printed as they are
written). Telling goes through the owner's door (`Actions.tell`), as `coworker tell` does. It
prints through the functions it is given and never colours anything, so it works over ssh and
in a pipe; cli.py turns its results into exit codes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from .actions import Actions, Door
from .home import Home
from .process import running_pid
from .store import Event, Store
from .store import events as ev
from .store import replies as rp

POLL_S = 0.25  # how often a wait looks for a new reply
RECENT = 10  # messages and replies shown when a chat opens


def _open(home: Home) -> Store:
    return home.open_store(readonly=True)


def when(e: Event) -> str:
    """An event's time as a chat shows it: its UTC minute."""
    return e.ts[:16].replace("T", " ")


def reply_text(e: Event) -> str:
    """A reply as the owner reads it: its time, what it answers, then its text."""
    to = e.meta.get("in_reply_to") or []
    head = f"[{when(e)}] coworker" + (f" (to #{', #'.join(map(str, to))})" if to else "")
    subject = e.meta.get("subject")
    return f"{head}: " + (f"{subject}\n" if subject else "") + e.body


def replies(home: Home, every: bool = False) -> list[tuple[Event, bool]]:
    """The replies to list (`store.replies.listed`); the unread ones among them are marked
    read, since they are shown now."""
    if not home.has_store():
        return []
    with home.open_store() as store:
        got = rp.listed(store, every)
        rp.mark_read(store, [int(e.id) for e, read in got if not read and e.id is not None])
    return got


def wait_for_reply(home: Home, message_id: int, timeout_s: float,
                   clock: Callable[[], float] = time.monotonic) -> Event | None:
    """The reply to `message_id` once it is written, or None after `timeout_s`; marked read
    when found (it is shown)."""
    deadline = clock() + timeout_s
    while True:
        with home.open_store() as store:
            found = rp.answering(store, message_id)
            if found is not None and found.id is not None:
                rp.mark_read(store, [found.id])
                return found
        if clock() >= deadline:
            return None
        time.sleep(POLL_S)


def recent(home: Home, n: int = RECENT) -> list[Event]:
    """The last `n` messages and replies, oldest first."""
    if not home.has_store():
        return []
    with _open(home) as store:
        said = ev.tail(store, n, kind="message") + ev.tail(store, n, kind="outbox")
    return sorted(said, key=lambda e: (e.ts, e.id or 0))[-n:]


SHOWN_CHARS = 500  # of a message in the opening history (a webhook's payload may be 64,000)


def line_of(e: Event) -> str:
    if e.kind == "outbox":
        return reply_text(e)
    body = " ".join(e.body.split())
    if len(body) > SHOWN_CHARS:
        body = (f"{body[:SHOWN_CHARS]}... ({len(e.body):,} characters; "
                f"`coworker log` shows event {e.id} whole)")
    return f"[{when(e)}] #{e.id} {e.actor}: {body}"


@dataclass
class Chat:
    """One chat session: `read` gives the owner's next line (EOFError or KeyboardInterrupt
    ends it), `show` prints; replies written after `since` are shown as they come."""
    home: Home
    read: Callable[[], str]
    show: Callable[[str], None]

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._since = 0

    def running(self) -> bool:
        return running_pid(self.home) is not None

    def run(self) -> None:
        past = recent(self.home)
        for e in past:
            self.show(line_of(e))
        if self.home.has_store():  # replies from now on are new
            with _open(self.home) as store:
                self._since = ev.max_id(store)
        watcher = threading.Thread(target=self._watch, name="chat-replies", daemon=True)
        watcher.start()
        try:
            self._talk()
        finally:
            self._stop.set()
            watcher.join(timeout=2)

    def _talk(self) -> None:
        owner = Actions(self.home, Door.CLI)
        while True:
            try:
                text = self.read().strip()
            except (EOFError, KeyboardInterrupt):
                return
            if text:
                told = owner.tell(text)
                where = (f"#{told.event_id}" if told.event_id is not None
                         else f"saved in {told.inbox_path}")
                self.show(f"(told {where}; the answer appears here)")

    def _watch(self) -> None:
        while not self._stop.wait(POLL_S):
            try:
                self._show_new()
            except Exception as e:  # noqa: BLE001 - a busy or missing store: try again
                self.show(f"(cannot read replies now: {type(e).__name__}: {e})")
                self._stop.wait(2.0)

    def _show_new(self) -> None:
        if not self.home.has_store():
            return
        with self.home.open_store() as store:
            new = [e for e in rp.listed(store) if e[0].id is not None and e[0].id > self._since]
            for e, _ in new:
                self.show(reply_text(e))
            if new:
                self._since = max(int(e.id or 0) for e, _ in new)
                rp.mark_read(store, [int(e.id or 0) for e, _ in new])
