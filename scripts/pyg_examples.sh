#!/usr/bin/env bash
# Run PyG's examples ogbn_train.py and graph_sage_unsup.py on an offline Cora copy with gnnsys's
# loaders. Only two lines of each file change, by sed:
#   * the loader import: torch_geometric.loader -> gnnsys.loader;
#   * the dataset line: ogbn_train.py's `from ogb.nodeproppred import PygNodePropPredDataset`
#     -> examples/offline_datasets.py's stand-in (Cora, public split); graph_sage_unsup.py's
#     `path = osp.join(..., 'data', dataset)` -> an offline Planetoid root.
#
# usage: scripts/pyg_examples.sh PYG_EXAMPLES_DIR OUT_DIR [ogbn_train.py ARGS...]
#   env: PYTHON (default: python), GNNSYS_DATASETS (default /work/shared/datasets)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
src="${1:?usage: $0 PYG_EXAMPLES_DIR OUT_DIR [ogbn_train.py ARGS...]}"
out="${2:?usage: $0 PYG_EXAMPLES_DIR OUT_DIR [ogbn_train.py ARGS...]}"
shift 2
mkdir -p "$out"
sed -e 's/^from torch_geometric.loader import NeighborLoader$/from gnnsys.loader import NeighborLoader/' \
    -e 's/^from ogb.nodeproppred import PygNodePropPredDataset$/from offline_datasets import PygNodePropPredDataset/' \
    "$src/ogbn_train.py" > "$out/ogbn_train.py"
sed -e 's/^from torch_geometric.loader import LinkNeighborLoader$/from gnnsys.loader import LinkNeighborLoader/' \
    -e "s/^path = osp.join(osp.dirname(osp.realpath(__file__)), '..', 'data', dataset)$/from offline_datasets import planetoid_root; path = planetoid_root(dataset)/" \
    "$src/graph_sage_unsup.py" > "$out/graph_sage_unsup.py"
for f in ogbn_train.py graph_sage_unsup.py; do
  echo "== $f: lines changed"; diff "$src/$f" "$out/$f" | grep '^[<>]' || true
done
export PYTHONPATH="$root:$root/examples${PYTHONPATH:+:$PYTHONPATH}"
echo "== ogbn_train.py $*"; "${PYTHON:-python}" "$out/ogbn_train.py" "$@"
echo "== graph_sage_unsup.py"; "${PYTHON:-python}" "$out/graph_sage_unsup.py"
