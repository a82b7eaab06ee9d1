"""The `coworker` console script: the smallest possible door in front of runtime.cli.

Owns only the first second of a process: a Ctrl-C while the CLI's modules are still importing
exits 130 without a traceback, as it does later. While they import (and, for `run` and `mcp`,
the modules those import before installing their own handlers), a Ctrl-C is noted, not
raised, and the process exits 130 once the import is done: raised inside a library's own
machinery (pydantic building a model class calls back into Python where an exception cannot
propagate), a KeyboardInterrupt was printed as "Exception ignored" and lost, and `coworker
run` went on running. Everything else is runtime.cli's.
"""

from __future__ import annotations

import importlib
import signal
import sys

# the commands that run until stopped, and the module each imports first (the model client,
# the scheduler, the MCP server: pydantic models all), imported here while a Ctrl-C is noted
LONG_RUNNING = {"run": "runtime.loop", "mcp": "runtime.mcp_server"}


def main() -> int:
    noted: list[int] = []
    # only a Ctrl-C that would have raised: a runner that ignores SIGINT keeps ignoring it
    defer = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if defer:
        signal.signal(signal.SIGINT, lambda signum, _frame: noted.append(signum))
    try:
        from .cli import main as cli_main

        command = next((a for a in sys.argv[1:] if not a.startswith("-")), None)
        if command in LONG_RUNNING:  # what they import before their own handlers exist
            importlib.import_module(LONG_RUNNING[command])
    except KeyboardInterrupt:
        return 130
    finally:
        if defer:
            signal.signal(signal.SIGINT, signal.default_int_handler)
    if noted:
        return 130
    try:
        return cli_main()
    except KeyboardInterrupt:  # between the CLI's own handlers
        return 130


if __name__ == "__main__":
    sys.exit(main())
