#!/usr/bin/env bash
# The README's test command: lint, type-check, then every test except those marked slow or gpu
# (CI runs this). `bash scripts/test.sh --all` adds the slow ones. Other arguments go to pytest
# (e.g. -m "not ray and not slow" for a quick local run; a later -m replaces the default).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
.venv/bin/ruff format --check .
.venv/bin/ruff check .
.venv/bin/mypy gnnsys
set +e
markers="not gpu and not slow"
if [ "${1:-}" = "--all" ]; then
  markers="not gpu"
  shift
fi
.venv/bin/python -m pytest -m "$markers" --durations=15 "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "error: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
