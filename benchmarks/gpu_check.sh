#!/usr/bin/env bash
# One short, prepared GPU check for the kernels (issue 5); run it on a lent CUDA machine:
#   bash benchmarks/gpu_check.sh            # writes to $OUT (or /tmp/gnnsys-gpu-check)
# Budget: about 5 minutes. Steps, each under its own timeout so one hang cannot eat the rest:
#   1. environment: torch / triton versions, device name (a CUDA torch build is required);
#   2. the Triton kernel tests compiled for CUDA (TRITON_INTERPRET=0): every reduce x dtype,
#      bf16 included, autotuning on, gradients against the reference and the torch path;
#   3. the kernel benchmark on CUDA: Triton vs torch.sparse.mm (CSR), embedding_bag and PyG
#      scatter on R-MAT scale 20 (1 M nodes, ~20 M edges), F = 128, fp32 and int8, as JSON lines
#      with GB/s against a device copy timed in the same rounds.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
out="${OUT:-/tmp/gnnsys-gpu-check}"
mkdir -p "$out"
status=0

echo "== env" | tee "$out/env.txt"
timeout 60 "$PY" -c "
import torch, triton
assert torch.cuda.is_available(), 'no CUDA device visible to torch ' + torch.__version__
print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())
" 2>&1 | tee -a "$out/env.txt" || exit 1

echo "== triton kernel tests (compiled)"
TRITON_INTERPRET=0 timeout 180 "$PY" -m pytest -q -p no:cacheprovider \
  tests/kernels/test_triton_aggregate.py tests/kernels/test_torch_path.py 2>&1 \
  | tee "$out/tests.txt" | tail -15 || status=1

echo "== kernel benchmark (cuda)"
timeout 240 "$PY" benchmarks/kernels.py --device cuda --scale 20 --repeats 5 \
  --pyg-edges 20000000 2>"$out/bench.err" | tee "$out/kernels_cuda.jsonl" || status=1
tail -5 "$out/bench.err"
exit "$status"
