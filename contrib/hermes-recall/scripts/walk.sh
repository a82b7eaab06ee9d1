#!/usr/bin/env bash
# Walk a coworker's memory and print the JSON result. Usage: walk.sh WORDS...
# The coworker's home is COWORKER_HOME, else the current folder. Exit: 0 found, 1 refused, 2 usage.
set -euo pipefail
if [ "$#" -eq 0 ]; then
  echo "usage: walk.sh WORDS..." >&2
  exit 2
fi
exec coworker walk "$@" --json
