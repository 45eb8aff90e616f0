#!/usr/bin/env bash
# Pure-Python wheels the GPU check needs beyond the device image (torch, triton, torch_geometric):
# pytest and pytest-timeout with their dependencies, into .gpu-wheels/ (ignored by git; the device
# tool carries it: carry [".gpu-wheels"]). benchmarks/gpu_check.sh installs them when the image
# lacks pytest. Ray, pymetis and zstandard are not needed: the check trains with --executor local.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
PY="${PY:-.venv/bin/python}"
rm -rf .gpu-wheels && mkdir -p .gpu-wheels
"$PY" -m pip download -q --no-deps --only-binary=:all: -d .gpu-wheels \
  pytest pytest-timeout pluggy iniconfig packaging exceptiongroup typing_extensions pygments
# tomli (pytest's config reader below Python 3.11): the pure-Python wheel, for any interpreter
"$PY" -m pip download -q --no-deps --only-binary=:all: -d .gpu-wheels \
  --platform any --python-version 3.10 --implementation py tomli
ls .gpu-wheels
