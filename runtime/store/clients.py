"""The team's MCP clients: who may use `coworker serve`'s `/mcp`, and what each has called.

Owns the `clients` and `client_calls` tables (m020). `add` makes a client: a name (NAME_RULE),
what it may do (`read`, or `tell` too) and a new random token, returned once and kept only as
its SHA-256; a name is held by one active client at a time. `revoke` sets `revoked_at` and
keeps the row (nothing is deleted; the database refuses any other change). `verify` finds the
client a presented token belongs to, revoked or not (the caller refuses a revoked one), by its
digest. `count` adds one call of a tool or resource to a client's tally; `listing` is every
client with its tallies. It never logs and never decides what a client may do over MCP
(runtime/mcp_server.py and runtime/serve/team.py do).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass, field

from ..errors import Refused, StoreRefused, UsageError
from .db import Store, new_id
from .events import now_iso

TOKEN_BYTES = 32  # 256 random bits, as the owner's token
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,39}")
NAME_RULE = ("1 to 40 characters: letters, digits, '.', '_' and '-', beginning with a letter "
             "or a digit (no spaces, no colons)")
CAN = ("read", "tell")


@dataclass(frozen=True)
class Client:
    id: int
    name: str
    can: str  # "read" or "tell" (which reads too)
    created_at: str
    revoked_at: str | None = None
    calls: dict[str, int] = field(default_factory=dict)  # what it called -> how many times
    last_call_at: str | None = None

    @property
    def may_tell(self) -> bool:
        return self.can == "tell"


def digest(token: str) -> str:
    """How a token is kept: its SHA-256, in hex (a random token needs no slow hash)."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def check_name(name: str) -> str:
    """`name` when it is a client's name; UsageError (one line, the rule) when not."""
    if NAME.fullmatch(name) is None:
        raise UsageError(f"{name[:60]!r} is not a client name: {NAME_RULE}")
    return name


def add(store: Store, name: str, can: str = "read") -> tuple[Client, str]:
    """A new client and its token (the only time the token is seen). UsageError for a bad
    name; Refused when an active client holds the name."""
    check_name(name)
    if can not in CAN:
        raise UsageError(f"--can {can!r}: a client can only be given 'tell'")
    token = secrets.token_urlsafe(TOKEN_BYTES)
    now = now_iso()
    try:
        with store.transaction() as db:
            cur = db.execute("INSERT INTO clients(name, token_sha256, can, created_at) "
                             "VALUES (?, ?, ?, ?)", (name, digest(token), can, now))
            client = Client(new_id(cur), name, can, now)
    except StoreRefused as e:
        if "token_sha256" in str(e):  # two random 256-bit tokens alike: never, but not silent
            raise
        raise Refused(f"a client named {name!r} exists already: `coworker clients revoke "
                      f"{name}` first (its token stops working), then add it again") from e
    return client, token


def revoke(store: Store, name: str) -> Client:
    """Revoke the active client `name` (its token is refused from now on); Refused when none
    is active by that name."""
    now = now_iso()
    with store.transaction() as db:
        cur = db.execute("UPDATE clients SET revoked_at = ? WHERE name = ? AND revoked_at IS "
                         "NULL", (now, name))
        if cur.rowcount != 1:
            raise Refused(f"no active client named {name[:60]!r}: `coworker clients list` "
                          "shows them")
    found = _clients(store, "WHERE name = ? AND revoked_at = ?", (name, now))
    return found[0]


def verify(store: Store, token: str) -> Client | None:
    """The client whose token this is (revoked too), or None (a database from before m020,
    opened read-only, has no clients)."""
    if not store.has_table("clients"):
        return None
    found = _clients(store, "WHERE token_sha256 = ?", (digest(token),), with_calls=False)
    return found[0] if found else None


def count(store: Store, client_id: int, what: str) -> None:
    """One more call of `what` (a tool's or a resource's name) by the client."""
    with store.transaction() as db:
        db.execute("INSERT INTO client_calls(client_id, what, calls, last_at) VALUES "
                   "(?, ?, 1, ?) ON CONFLICT(client_id, what) DO UPDATE SET "
                   "calls = client_calls.calls + 1, last_at = excluded.last_at",
                   (client_id, what, now_iso()))


def listing(store: Store) -> list[Client]:
    """Every client, oldest first, with its calls counted by what it called."""
    return _clients(store, "", ())


def _clients(store: Store, where: str, params: tuple, with_calls: bool = True
             ) -> list[Client]:
    rows = store.query(f"SELECT id, name, can, created_at, revoked_at FROM clients {where} "
                       "ORDER BY id", params)
    calls: dict[int, dict[str, int]] = {}
    last: dict[int, str] = {}
    for c in store.query(f"SELECT client_id, what, calls, last_at FROM client_calls WHERE "
                         f"client_id IN (SELECT id FROM clients {where}) ORDER BY what",
                         params) if rows and with_calls else ():
        calls.setdefault(c["client_id"], {})[c["what"]] = c["calls"]
        last[c["client_id"]] = max(last.get(c["client_id"], ""), c["last_at"])
    return [Client(r["id"], r["name"], r["can"], r["created_at"], r["revoked_at"],
                   calls.get(r["id"], {}), last.get(r["id"])) for r in rows]
