"""The `coworker` console script: the smallest possible door in front of runtime.cli.

Owns only the first second of a process: a Ctrl-C while the CLI's modules are still importing
exits 130 without a traceback, as it does later. Everything else is runtime.cli's.
"""

from __future__ import annotations

import sys


def main() -> int:
    try:
        from .cli import main as cli_main
    except KeyboardInterrupt:
        return 130
    try:
        return cli_main()
    except KeyboardInterrupt:  # between the CLI's own handlers
        return 130


if __name__ == "__main__":
    sys.exit(main())
