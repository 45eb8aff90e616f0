#!/usr/bin/env bash
# The README's main job: set up .venv if needed, then train GraphSAGE with 2 Ray workers on the embedded synthetic graph.
# Extra arguments are passed to the command.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/venv.sh"
exec .venv/bin/gnnsys train "$@"
