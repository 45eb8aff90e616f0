#!/usr/bin/env bash
# Create or reuse ./.venv with gnnsys installed (editable) plus the dev tools.
# Sourced by scripts/main.sh and scripts/test.sh. Torch is pinned through .ci/constraints.txt,
# never in pyproject.toml: a looser spec would pull a multi-GB CUDA build.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.gnnsys-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ .ci/constraints.txt -nt "$stamp" ]; then
  .venv/bin/python -m pip install --quiet --upgrade pip
  .venv/bin/python -m pip install --quiet -c .ci/constraints.txt -e ".[dev]"
  touch "$stamp"
fi
