#!/usr/bin/env bash
# Run PyG's own loader tests with torch_geometric.loader.NeighborLoader/LinkNeighborLoader
# swapped for gnnsys's (see scripts/pyg_contract/pyg_contract_plugin.py for exactly what is
# patched and what is skipped as out of scope).
#
# usage: scripts/pyg_contract.sh PATH [PATH...] [-- PYTEST_ARGS...]
#   PATH: PyG test files or folders, e.g. ~/pytorch_geometric/test/loader/test_neighbor_loader.py
#   env:  PYTHON (default: python), GNNSYS_DATASETS (offline Planetoid copies, default
#         /work/shared/datasets)
# PyG's conftest.py files are not loaded (--noconftest): the plugin provides get_dataset
# offline instead of PyG's downloading one.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
paths=()
while [[ $# -gt 0 && "$1" != "--" ]]; do paths+=("$1"); shift; done
[[ $# -gt 0 ]] && shift
if [[ ${#paths[@]} -eq 0 ]]; then
  echo "usage: $0 PYG_TEST_PATH [...] [-- PYTEST_ARGS...]" >&2
  exit 2
fi
export PYTHONPATH="$root:$root/scripts/pyg_contract${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python}" -m pytest -p pyg_contract_plugin --noconftest -p no:cacheprovider \
  -rs "${paths[@]}" "$@"
