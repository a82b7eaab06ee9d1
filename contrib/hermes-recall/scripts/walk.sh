#!/usr/bin/env bash
# Walk a coworker's memory and print the JSON result. Usage: walk.sh WORDS...
# The coworker's home is COWORKER_HOME, else the current folder. Exit: 0 found, 1 refused, 2 usage.
# Needs `coworker` on the PATH: ln -s /path/to/clone/coworker ~/.local/bin/coworker
set -euo pipefail
if [ "$#" -eq 0 ]; then
  echo "usage: walk.sh WORDS..." >&2
  exit 2
fi
if ! command -v coworker >/dev/null; then
  echo "walk.sh: coworker is not on the PATH; link it: ln -s /path/to/clone/coworker ~/.local/bin/coworker" >&2
  exit 2
fi
exec coworker walk "$@" --json
