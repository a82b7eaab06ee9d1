"""The `coworker` console script: the smallest possible door in front of runtime.cli.

Owns only the first second of a process: a Ctrl-C while the CLI's modules are still importing
exits 130 without a traceback, as it does later. While they import, a Ctrl-C is noted, not
raised, and the process exits 130 once the import is done: raised inside a library's own
machinery (pydantic building a model class calls back into Python where an exception cannot
propagate), a KeyboardInterrupt was printed as "Exception ignored" and lost, and `coworker
run` went on running. Everything else is runtime.cli's.
"""

from __future__ import annotations

import signal
import sys


def main() -> int:
    noted: list[int] = []
    # only a Ctrl-C that would have raised: a runner that ignores SIGINT keeps ignoring it
    defer = signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if defer:
        signal.signal(signal.SIGINT, lambda signum, _frame: noted.append(signum))
    try:
        from .cli import main as cli_main
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
