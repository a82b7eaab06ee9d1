"""One running loop per coworker across every host, on PostgreSQL: the runner's lock, its
fencing token, and the wake-up a tell sends (issue 42 item 4, ADR-0044).

Owns three things of one coworker's schema:
- **the claim**: a loop holds a session-level advisory lock keyed on its schema (never a
  pidfile: the lock lives as long as the loop's connection, so a host killed mid-tick loses
  it when the server drops that connection) and, taken with it in one write transaction, the
  next **fencing token** in the one-row table `runner` (with the host, pid and time, which
  `status` and `stop` show). A second loop, on any host, finds the lock held and is told who
  holds it;
- **the fence**: a claim sets the store's `fence` to its token, and PgStore checks it
  (`check`) inside each write transaction after the write lock, refusing (`Deposed`) when
  another loop has claimed since: a loop whose connection was lost and came back (with its
  token set on its new store) can never commit over the new one's writes;
- **the wake-up**: `notify(store)` sends NOTIFY on the coworker's channel (its schema's name)
  in the writer's transaction, so a `tell` on any host wakes the loop that `listen`s, wherever
  it runs, as soon as the message is committed.
It never decides when a loop runs or stops; the loop does, from what these say.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..errors import Deposed, StoreError
from . import pg_schema

DDL = """
CREATE TABLE IF NOT EXISTS runner (
    one BOOLEAN PRIMARY KEY DEFAULT TRUE CHECK (one),
    token BIGINT NOT NULL,
    host TEXT COLLATE "C" NOT NULL,
    pid BIGINT NOT NULL,
    since TEXT COLLATE "C" NOT NULL
)
"""


@dataclass(frozen=True)
class Runner:
    """Who holds (or last held) the claim: its fencing token, host, pid and since when."""

    token: int
    host: str
    pid: int
    since: str
    holding: bool = True  # False: the row of a loop whose lock is gone (it stopped, or died)


# A host that vanishes without closing its connection (power lost, network cut) keeps its
# session, and so the claim, until the server's TCP keepalive gives up on it: two hours and
# more with the kernel's defaults. The loop's own session asks the server to probe sooner, so
# another host can take over within about a minute (no effect over a Unix socket).
KEEPALIVE = ("SET tcp_keepalives_idle = 30", "SET tcp_keepalives_interval = 10",
             "SET tcp_keepalives_count = 3", "SET tcp_user_timeout = 60000")


def _keepalive(store: Any) -> None:
    for statement in KEEPALIVE:
        store.raw.execute(statement.encode())


RESTORING = "restore:"  # the runner row's host while a restore holds the claim (restore_unfinished)


def _key(store: Any) -> int:
    return pg_schema.lock_key("loop", store.schema)


__all__ = ["Deposed", "Runner", "claim", "check", "reclaim", "release", "current", "notify",
           "listen", "woken"]


def create(conn: Any) -> None:
    """The `runner` table (part of the schema's baseline)."""
    conn.execute(DDL)


def claim(store: Any, host: str | None = None, pid: int | None = None,
          restoring: bool = False) -> Runner:
    """Take this coworker's claim for this connection's life, with the next fencing token;
    StoreError naming who holds it when another loop does, or when a restore stopped half-way
    (`restoring`: the restore's own claim, which may settle one; its host is marked RESTORING
    until `restored`)."""
    _keepalive(store)
    if not store.scalar("SELECT pg_try_advisory_lock(?)", (_key(store),)):
        held = current(store)
        where = f"{held.host} (pid {held.pid}, since {held.since})" if held else "another host"
        raise StoreError(f"this coworker already runs on {where}: one loop a coworker; stop "
                         "that one first (`coworker stop` there)")
    if not restoring and (cut := restore_unfinished(store)):
        store.scalar("SELECT pg_advisory_unlock(?)", (_key(store),))
        raise StoreError(cut)
    name = host or socket.gethostname()
    me = Runner(0, RESTORING + name if restoring else name, pid or os.getpid(),
                datetime.now(UTC).isoformat(timespec="seconds"))
    store.fence = None  # the claim's own write is the one that moves the token on
    try:
        with store.transaction():
            token = int(store.scalar(
                "INSERT INTO runner(one, token, host, pid, since) VALUES (TRUE, 1, ?, ?, ?) "
                "ON CONFLICT (one) DO UPDATE SET token = runner.token + 1, host = excluded.host, "
                "pid = excluded.pid, since = excluded.since RETURNING token",
                (me.host, me.pid, me.since)))
    except BaseException:
        store.scalar("SELECT pg_advisory_unlock(?)", (_key(store),))
        raise
    store.fence = token  # from now on each write of this store checks it
    return Runner(token, me.host, me.pid, me.since)


def restore_unfinished(store: Any) -> str | None:
    """The line to refuse with while a restore into this schema stopped half-way (its rows are
    neither the old ones nor the backup's): nothing but that restore's --finish or --rollback
    may write then. None when none did."""
    host = store.scalar("SELECT host FROM runner")
    if not host or not str(host).startswith(RESTORING):
        return None
    return (f"a restore-backup into this coworker stopped half-way on {host[len(RESTORING):]}: "
            "settle it there first (`coworker restore-backup --finish` or `--rollback`)")


def restored(store: Any) -> None:
    """The restore holding the claim is done: the runner row names its host plainly again."""
    with store.transaction():
        store.execute("UPDATE runner SET host = substr(host, ?) WHERE host LIKE ?",
                      (len(RESTORING) + 1, RESTORING + "%"))


def check(store: Any, token: int) -> None:
    """Inside a write transaction (after the write lock): Deposed unless `token` is still the
    claim's. A claim takes the write lock too, so no claim slips in between."""
    now = store.scalar("SELECT token FROM runner")
    if now is None or int(now) != token:
        raise Deposed(f"this loop's claim (token {token}) was taken over by another loop "
                      f"(token {now}); it stops before writing")


def reclaim(store: Any, token: int) -> None:
    """After `store.reconnect()`: take the lock again for the claim `token` was, or Deposed
    when another loop holds it, or claimed since (the token moved on). The store's fence
    stays `token` whatever happens: a deposed loop's writes are refused."""
    store.fence = token
    _keepalive(store)
    if not store.scalar("SELECT pg_try_advisory_lock(?)", (_key(store),)):
        held = current(store)
        if held and held.token == token and (held.host, held.pid) == (socket.gethostname(),
                                                                      os.getpid()):
            raise StoreError("the server still holds this loop's old session (its connection "
                             "broke on this side only); taking the claim back at the next tick")
        raise Deposed(f"this loop lost its connection and another loop took the coworker over "
                      f"({held.host if held else 'another host'}); it stops before writing")
    now = store.scalar("SELECT token FROM runner")
    if now is None or int(now) != token:
        store.scalar("SELECT pg_advisory_unlock(?)", (_key(store),))
        raise Deposed(f"this loop's claim (token {token}) was taken over while its connection "
                      f"was down (token {now}); it stops before writing")


def release(store: Any) -> None:
    """Give the claim up (a clean stop); the row stays, saying who ran last."""
    store.scalar("SELECT pg_advisory_unlock(?)", (_key(store),))
    store.fence = None


def current(store: Any) -> Runner | None:
    """Who holds the claim now (or held it last, `holding` False), or None: never run here."""
    row = store.query("SELECT token, host, pid, since FROM runner")
    if not row:
        return None
    key = _key(store) & (2**64 - 1)  # pg_locks shows a bigint key as two unsigned halves
    held = store.scalar(
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND "
        "objsubid = 1 AND CAST(classid AS BIGINT) = ? AND CAST(objid AS BIGINT) = ?",
        (key >> 32, key & 0xFFFFFFFF))
    r = row[0]
    return Runner(int(r[0]), r[1], int(r[2]), r[3], bool(held))


def channel(store: Any) -> str:
    return str(store.schema)


def notify(store: Any) -> None:
    """Wake the loop listening for this coworker, on whichever host (sent at commit)."""
    store.execute(f"NOTIFY {channel(store)}")


def listen(store: Any) -> None:
    """This connection hears `notify` from now on (`woken`)."""
    store.raw.execute(f"LISTEN {channel(store)}")


def woken(store: Any, timeout_s: float, stop_after: int | None = None) -> Iterator[str]:
    """The wake-ups heard within `timeout_s` (their payloads), as they come; at most
    `stop_after` of them when given."""
    for n in store.raw.notifies(timeout=timeout_s, stop_after=stop_after):
        yield n.payload
