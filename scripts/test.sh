#!/usr/bin/env bash
# The README's test command: lint, type-check, then every test except those marked gpu.
# Extra arguments go to pytest (e.g. -m "not ray and not slow" for a quick local run).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/mypy gnnsys
set +e
.venv/bin/python -m pytest -m "not gpu" "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
