"""The delivery pass and the thread that runs it beside the loop, so a delivery never blocks a
tick.

What a target is sent (`KINDS`): `reply` = `outbox` events; `approval` = `action_queued` (an MCP
action waiting for the owner); `failure` = the failures the owner must see (`FAILURE_KINDS`: a
crash, a failed tick (the model gave up after its retries, or a bug), an input set aside after
three failed turns, a failed ritual, an invalid config.toml or role file, a spending cap
reached). Only the coworker's own events (actor `coworker`), never imported ones.

A pass: the targets configured now are noted (a new one is owed nothing from before it), the
new events each wants become pending rows (runtime/store/deliveries.py), then each target's
rows are sent oldest first, by a sender thread of its own (a target that hangs holds neither
the others nor the scan): none while its quiet hours last (in the owner's time zone) or once
it sent `max_per_hour` in the last hour; a row is marked delivered only after its send
succeeded (at least once: a kill in between sends it again after the restart, with the same
idempotency key). A failed attempt waits tenacity's `wait_exponential` (2 s, doubling, at most
an hour; longer when the receiver says Retry-After) and holds the target's later rows behind
it; after MAX_ATTEMPTS (about 4 hours) or an answer a retry cannot change, the row is given up
(`failed`) with one WARNING, and the rows behind it go on. A target whose secret is missing is
skipped (one WARNING a distinct problem) and owes everything when it is fixed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass
from datetime import UTC, datetime, time, timedelta
from secrets import token_hex
from time import monotonic
from typing import Any
from zoneinfo import ZoneInfo

from tenacity import RetryCallState, Retrying, wait_exponential

from ..errors import ConfigError, UsageError
from ..home import Home
from ..secrecy import redact
from ..settings import Settings
from ..settings_talk import NotifyTarget
from ..store import Store, iso_z
from ..store import deliveries as dl
from ..store import events as ev
from .presets import Message
from .senders import SendError, resolve, send, where

log = logging.getLogger("runtime.notify")

FAILURE_KINDS = ("crash", "tick_failed", "input_set_aside", "ritual_failed", "config_error",
                 "spending_cap")
KINDS: dict[str, tuple[str, ...]] = {"reply": ("outbox",), "approval": ("action_queued",),
                                     "failure": FAILURE_KINDS}
ACTOR = "coworker"  # only the coworker's own events are sent
MAX_ATTEMPTS = 15  # 2 s doubling to an hour: given up about 4 hours after the first failure
WAIT = wait_exponential(multiplier=2, min=2, max=3600)
POLL_S = 1.0  # how often the thread looks for new events
RATE_WINDOW = timedelta(hours=1)
SENDERS = 4  # targets sending at once (the others wait for a free sender)
PER_PASS = 50  # rows one target sends at most in one pass, so the others get their turn
FAILED_SHOWN = timedelta(days=7)  # `status` counts rows given up this recently


def wanted(targets: Sequence[NotifyTarget]) -> dict[str, dict[str, str]]:
    """target name -> {event kind: what} for the events it asked for."""
    return {t.name: {kind: what for what in t.events for kind in KINDS[what]}
            for t in targets}


def message_of(e: ev.Event, what: str, key: str, coworker: str) -> Message:
    """The notification an event makes."""
    meta = e.meta
    if what == "reply":
        subject = str(meta.get("subject") or "")
        text = e.body
    elif what == "approval":
        aid = meta.get("approval_id")
        subject = f"Waiting for your approval: action {aid}"
        text = (f"{e.body}.\nApprove: coworker actions approve {aid}\n"
                f"Reject: coworker actions reject {aid} --why \"...\"")
    else:
        subject = f"{coworker}: {e.kind.replace('_', ' ')}"
        text = e.body
    answering = meta.get("in_reply_to")
    in_reply_to = [int(i) for i in answering if isinstance(i, int)] \
        if isinstance(answering, list) else []
    return Message(what, subject, text, key, e.id, e.ts, coworker, in_reply_to)


def quiet_until(now: datetime, spec: str | None, zone: ZoneInfo) -> datetime | None:
    """When the quiet hours `spec` ("22:00-07:00", in `zone`) that hold `now` end, or None."""
    if not spec:
        return None
    start, end = (time(int(p[:2]), int(p[3:])) for p in spec.split("-"))
    local = now.astimezone(zone)
    t = local.time().replace(second=0, microsecond=0, tzinfo=None)
    if start == end:
        return None
    inside = start <= t < end if start < end else (t >= start or t < end)
    if not inside:
        return None
    day = local.date() + timedelta(days=1 if start > end and t >= start else 0)
    return datetime.combine(day, end, zone).astimezone(UTC)


def backoff(attempt: int, wait: Any = WAIT) -> float:
    """Seconds before the next attempt after `attempt` failed ones (tenacity's schedule)."""
    state = RetryCallState(Retrying(), None, (), {})
    state.attempt_number = attempt
    return float(wait(state))


@dataclass
class PassReport:
    made: int = 0       # rows made from new events
    sent: int = 0
    failed: int = 0     # attempts that failed
    given_up: int = 0


class Notifier:
    """The deliveries of one home: `start()` (a thread of its own, its own connection, and a
    sender thread a target at most), `wake()`, `stop()`. Without `start()`, `run_pass()` is
    one pass that sends in the caller's thread."""

    def __init__(self, home: Home, settings: Callable[[], Settings], *, wait: Any = WAIT,
                 max_attempts: int = MAX_ATTEMPTS, poll_s: float = POLL_S) -> None:
        self.home = home
        self.settings = settings
        self.wait = wait
        self.max_attempts = max_attempts
        self.poll_s = poll_s
        self.store: Store | None = None
        self._none_marked = False  # with no targets: `deliveries.begin` was told so already
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._busy: dict[str, Future[None]] = {}  # a target's sends in flight
        self._said: set[str] = set()

    # the threads ---------------------------------------------------------------------------
    def start(self) -> None:
        """Note the targets configured now (before the first tick can reply), then run passes
        in a thread until `stop()`; each target sends in a thread of the pool, so one that
        hangs holds neither the others nor the scan."""
        self._begin(self.settings().notify)
        self._pool = ThreadPoolExecutor(SENDERS, thread_name_prefix="coworker-notify-send")
        self._thread = threading.Thread(target=self._run, name="coworker-notify", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def stop(self, timeout: float) -> None:
        """One last pass (a reply of the last tick goes out now), waiting at most `timeout`
        for the sends in flight; one still sending then is left to end with the process (its
        row stays pending and goes out at the next start, under the same key)."""
        self._stopping.set()
        self._wake.set()
        deadline = monotonic() + timeout
        if self._thread is not None:
            self._thread.join(timeout)
        busy = [f for f in self._busy.values() if not f.done()]
        if (self._thread is not None and self._thread.is_alive()) or \
                wait_futures(busy, timeout=max(0.0, deadline - monotonic()))[1]:
            log.warning("notify: a delivery was still being sent at the stop; it goes out "
                        "again at the next start (same idempotency key)")
            return
        if self._pool is not None:
            self._pool.shutdown(wait=False)
        self.close()

    def close(self) -> None:
        if self.store is not None:
            self.store.close()
            self.store = None

    def _run(self) -> None:
        while True:
            last = self._stopping.is_set()
            self._guarded_pass()
            if last:
                return
            self._wake.wait(self.poll_s)
            self._wake.clear()

    def _guarded_pass(self) -> None:
        try:
            self.run_pass()
        except Exception as e:  # never ends the thread: the next pass tries again
            self._say(f"notify: a delivery pass failed ({type(e).__name__}: {e}); the next "
                      "one tries again", exc_info=True)

    def _say(self, line: str, exc_info: bool = False) -> None:
        """A WARNING once a distinct problem (a pass each second would repeat it)."""
        if line not in self._said:
            self._said.add(line)
            log.warning("%s", redact(line), exc_info=exc_info)

    # one pass ------------------------------------------------------------------------------
    def _open(self) -> Store:
        """The notifier's own connection; made again when it broke (PostgreSQL's server
        restarted, the network cut): a pass after that goes on, never stuck on a dead one."""
        if self.store is not None and getattr(self.store, "broken", False):
            self.close()
        if self.store is None:
            self.store = self.home.open_store()
        return self.store

    def _begin(self, targets: Sequence[NotifyTarget]) -> None:
        """The targets configured now (`deliveries.begin`). With none, once per process (and
        again after targets came and went): a target removed while no coworker ran must be
        marked gone, so that when it comes back it is owed nothing from the gap."""
        if targets:
            self._none_marked = False
        elif self._none_marked or not (self.store is not None or self.home.has_store()):
            return
        else:
            self._none_marked = True
        dl.begin(self._open(), [t.name for t in targets])

    def run_pass(self, now: datetime | None = None) -> PassReport:
        settings = self.settings()
        targets = list(settings.notify)
        report = PassReport()
        self._begin(targets)
        if not targets:
            return report
        store = self._open()
        report.made = dl.scan(store, wanted(targets), ACTOR)
        for t in targets:
            self._dispatch(store, t, settings, now, report)
        return report

    def _dispatch(self, store: Store, t: NotifyTarget, settings: Settings,
                  now: datetime | None, report: PassReport) -> None:
        """The target's due rows, sent here (no pool) or by a sender thread when it has none
        in flight."""
        if self._pool is None:
            self._guarded_send(store, t, settings, now or datetime.now(UTC), report)
            return
        busy = self._busy.get(t.name)
        if busy is not None and not busy.done():
            return
        self._busy[t.name] = self._pool.submit(self._guarded_send, store, t, settings,
                                               now or datetime.now(UTC), report)

    def _guarded_send(self, store: Store, t: NotifyTarget, settings: Settings, now: datetime,
                      report: PassReport) -> None:
        try:
            self._send_due(store, t, settings, now, report)
        except Exception as e:  # a sender thread never dies: the next pass tries again
            self._say(f"notify {t.name}: sending failed ({type(e).__name__}: {e}); the next "
                      "pass tries again", exc_info=True)

    def _held(self, store: Store, t: NotifyTarget, settings: Settings, now: datetime) -> bool:
        if quiet_until(now, t.quiet_hours, settings.coworker.zone) is not None:
            return True
        return dl.sent_since(store, t.name, iso_z(now - RATE_WINDOW)) >= t.max_per_hour

    def _send_due(self, store: Store, t: NotifyTarget, settings: Settings, now: datetime,
                  report: PassReport) -> None:
        try:
            target = resolve(t, settings.secrets)
        except ConfigError as e:
            self._say(f"notify {t.name}: not sent ({e}); its messages wait")
            return
        for _ in range(PER_PASS):
            if self._held(store, t, settings, now):
                return
            row = dl.head(store, t.name)
            if row is None or row.next_at > iso_z(now):
                return
            event = ev.get(store, row.event_id)
            if event is None:  # cannot happen (events are never deleted); never loops on it
                dl.attempt_failed(store, row.id, "its event is gone", iso_z(now), True)
                continue
            m = message_of(event, row.what, row.idempotency_key, settings.coworker.name)
            try:
                send(target, m)
            except SendError as e:
                if not self._failed(store, t, row, e, now, report):
                    return  # the target's later rows wait behind this one
                continue
            dl.delivered(store, row.id)
            report.sent += 1
            log.info("notify %s: event %d delivered (%s)", t.name, row.event_id, row.what)

    def _failed(self, store: Store, t: NotifyTarget, row: dl.Delivery, e: SendError,
                now: datetime, report: PassReport) -> bool:
        """Record a failed attempt; whether the row was given up."""
        attempts = row.attempts + 1
        give_up = e.permanent or attempts >= self.max_attempts
        wait = max(backoff(attempts, self.wait), e.retry_after or 0.0)
        dl.attempt_failed(store, row.id, str(e), iso_z(now + timedelta(seconds=wait)), give_up)
        report.failed += 1
        if give_up:
            report.given_up += 1
            log.warning("notify %s: GAVE UP delivering event %d (%s) after %d attempt(s): %s; "
                        "`coworker status` counts it, `coworker notify --test %s` tries the "
                        "target", t.name, row.event_id, row.what, attempts, e, t.name)
        else:
            log.info("notify %s: event %d not delivered (attempt %d: %s); again in %.0f s",
                     t.name, row.event_id, attempts, e, wait)
        return give_up


def send_test(settings: Settings, name: str, home: str) -> str:
    """Send a test message through the target `name`; what was reached. UsageError for an
    unknown name, ConfigError for a missing secret, SendError when the attempt failed."""
    target = next((t for t in settings.notify if t.name == name), None)
    if target is None:
        known = ", ".join(t.name for t in settings.notify) or "none is configured"
        raise UsageError(f"no [[notify]] target named {name!r} (configured: {known})")
    r = resolve(target, settings.secrets)
    now = datetime.now(UTC)
    m = Message("test", f"{settings.coworker.name}: test message",
                f"A test message from {settings.coworker.name} ({home}) at "
                f"{now:%Y-%m-%d %H:%M} UTC: [[notify]] {name} reaches you.",
                f"coworker-test-{token_hex(8)}", None, iso_z(now), settings.coworker.name)
    send(r, m)
    return " ".join(target.command[:1]) if target.kind == "command" else where(r.url)


def status(store: Store, settings: Settings) -> dict[str, Any]:
    """`coworker status`'s deliveries: pending, retrying, given up this week, the last error."""
    names = [t.name for t in settings.notify]
    counts: dict[str, Any] = dict(dl.counts(store, names, iso_z(datetime.now(UTC)
                                                                  - FAILED_SHOWN)))
    last = dl.last_error(store, names) if counts["retrying"] or counts["failed"] else None
    counts["last_error"] = None if last is None else f"{last[0]}: {last[1]}"
    counts["targets"] = len(names)
    return counts
