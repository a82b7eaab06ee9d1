"""The error hierarchy: every error a user can cause, and every message says how to fix it.

Errors are raised as these types anywhere in the package and turned into one line of text and
an exit code only at the doors' edges (runtime/cli.py prints one line and exits; the MCP server
returns a tool error). Nothing here prints. Every error a user can cause is a `CoworkerError`:
a `UsageError` (exit 2: malformed arguments, files or config) or a refusal (exit 1: the request
is well formed but cannot be carried out). Modules may define narrower kinds (MEMORY.md's
`MemoryFileError`, the gate's `ReviewError`, backup's `BackupRefused`) as subclasses of these.
"""

from __future__ import annotations


class CoworkerError(Exception):
    """Base for errors a user can act on. `exit_code` is what the CLI returns."""

    exit_code = 1


class UsageError(CoworkerError):
    """The user asked for something malformed (bad argument, bad file)."""

    exit_code = 2


class ConfigError(UsageError):
    """config.toml does not parse or holds a bad value; the message names the key and the fix."""


class NotInitialised(UsageError):
    """The folder is not a coworker home."""


class Refused(CoworkerError):
    """A well-formed request that cannot be carried out as asked: nothing matches, several do,
    a budget would be exceeded, or the door lacks the owner's authority. Exit 1."""


class AlreadyRunning(CoworkerError):
    """A second instance was asked to start while one holds the pidfile."""


class NotRunning(CoworkerError):
    """A command needed the running process and there is none."""


class StoreError(CoworkerError):
    """The database cannot be opened or written (locked past the busy timeout, corrupt, read-only)."""


class StoreBusy(StoreError):
    """Another process held the write lock past the busy timeout (an import, a reflect)."""


class StoreRefused(StoreError):
    """The database refused a write that breaks one of its rules (a trigger such as
    append-only, a unique key, a check constraint), whichever backend holds the store."""


class SchemaNewer(StoreError):
    """The store's schema is at a version newer than this code knows: upgrade coworker."""


class Deposed(StoreError):
    """This loop's claim on its coworker in a shared database was taken over by another loop:
    it must stop before its next write (runtime/store/pg_runner.py)."""


class ModelError(CoworkerError):
    """The model endpoint failed after retries, or answered something we cannot use.

    `blames_input` is true when the request itself was refused (a 400 such as "prompt too
    long"): retrying the same inputs will fail again, so the loop counts it against them. An
    outage, a timeout, garbage or a bad key is not the inputs' fault."""

    def __init__(self, message: str, *, blames_input: bool = False, attempts: int = 0) -> None:
        super().__init__(message)
        self.blames_input = blames_input
        self.attempts = attempts  # calls spent (they count against [model] daily_calls)
