#!/usr/bin/env bash
# The one prepared GPU script (issues 5 and 24); run it on a lent CUDA machine from the repo root:
#   bash scripts/gpu_wheels.sh                          # here, once: pytest wheels into .gpu-wheels
#   device run: bash benchmarks/gpu_check.sh            carry: [".gpu-wheels"]   timeout_s: 560
# Everything lands in $OUT (or /tmp/gnnsys-gpu-check). Budget: at most 8 minutes; each step runs
# under its own timeout, so one hang cannot eat the rest (the steps run in the order 1, 3, 2, 4):
#   1. environment: torch / triton versions, device name (a CUDA build of torch is required);
#   2. GPU tests: the Triton kernels compiled for CUDA (TRITON_INTERPRET=0), and the cuda
#      case of every device-parametrised test (transfer-stage stream ordering, trainer and
#      pipeline, fused layer 0, rows and cache on the device, evaluation, typed runs,
#      device-independent state and resume);
#   3. training (benchmarks/gpu_train.py): synthetic:rmat 2**20 nodes, F = 100, SAGE 2 x 128,
#      with 1 rank (prefetch 0 and 2: GPU busy fraction without and with the pipeline; rows on
#      the host, then held on the GPU) and 4 ranks sharing the GPU (fp32; int8 with rows and a
#      halo cache on the GPU, summed from their codes there) (--executor local: Ray, pymetis
#      and zstandard are not needed);
#      epoch time, stages, stall, GPU busy, peak device memory and test accuracy against the
#      CPU run of the same seeds (docs/results/gpu-cpu-reference.jsonl);
#   4. the kernel benchmark on CUDA: Triton vs torch.sparse.mm (CSR), embedding_bag and PyG
#      scatter on R-MAT scale 20 (1 M nodes, ~20 M edges), F = 128, fp32 and int8, as JSON lines
#      with GB/s against a device copy timed in the same rounds.
# GPU_CHECK_DRY=1 runs every step on the CPU at a small scale (to test this script without a GPU).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
out="${OUT:-/tmp/gnnsys-gpu-check}"
mkdir -p "$out"
dry="${GPU_CHECK_DRY:-0}"
status=0
start=$SECONDS

echo "== env" | tee "$out/env.txt"
timeout 60 "$PY" -c "
import os, torch, triton
dry = os.environ.get('GPU_CHECK_DRY') == '1'
assert dry or torch.cuda.is_available(), 'no CUDA device visible to torch ' + torch.__version__
name = torch.cuda.get_device_name() if torch.cuda.is_available() else 'cpu (dry run)'
print('torch', torch.__version__, 'triton', triton.__version__, name, 'cpus', os.cpu_count())
" 2>&1 | tee -a "$out/env.txt" || exit 1

if ! "$PY" -c "import pytest, pytest_timeout" 2>/dev/null; then
  echo "== installing pytest from .gpu-wheels (the image has none)"
  lib=/tmp/gnnsys-gpu-pylib
  timeout 60 "$PY" -m pip install -q --no-index --find-links .gpu-wheels --target "$lib" \
    pytest pytest-timeout 2>&1 | tail -3
  export PYTHONPATH="$lib${PYTHONPATH:+:$PYTHONPATH}"
fi

# Each step's timeout is its cap or what is left of the 480 s budget (at least 30 s), in the
# order of what the open figures need most: training, then the tests, then the kernel numbers.
budget() {  # budget CAP: seconds this step may take
  local left=$((480 - (SECONDS - start)))
  [ "$left" -gt "$1" ] && left=$1
  [ "$left" -lt 30 ] && left=30
  echo "$left"
}
interpret=0; [ "$dry" = 1 ] && interpret=1

echo "== training on the device (benchmarks/gpu_train.py)"
if [ "$dry" = 1 ]; then
  train_args=(--device cpu --num-nodes 20000 --epochs 2 --threads 2)
else
  train_args=(--device cuda --epochs 3)
fi
timeout "$(budget 240)" "$PY" benchmarks/gpu_train.py "${train_args[@]}" \
  --work /tmp/gnnsys-gpu-train --reference docs/results/gpu-cpu-reference.jsonl \
  --out "$out/gpu-train.jsonl" 2>"$out/train.err" | tail -6 || status=1
tail -3 "$out/train.err"
for run in /tmp/gnnsys-gpu-train/run-*/; do
  cp "$run/train.log" "$out/$(basename "$run").log" 2>/dev/null
done
echo "   ($((SECONDS - start)) s so far)"

echo "== GPU tests: every device-parametrised test, its cuda case (the cpu one in a dry run)"
param=cuda; [ "$dry" = 1 ] && param=cpu
TRITON_INTERPRET=$interpret timeout "$(budget 120)" "$PY" -m pytest -q -p no:cacheprovider \
  -m "not ray and not slow" tests/train tests/cache -k "$param" 2>&1 \
  | tee "$out/tests-device.txt" | tail -8 || status=1
echo "   ($((SECONDS - start)) s so far)"

echo "== GPU tests: compiled Triton kernels"
TRITON_INTERPRET=$interpret timeout "$(budget 90)" "$PY" -m pytest -q -p no:cacheprovider \
  -m "not ray" tests/kernels/test_triton_aggregate.py tests/kernels/test_torch_path.py 2>&1 \
  | tee "$out/tests-kernels.txt" | tail -5 || status=1
echo "   ($((SECONDS - start)) s so far)"

echo "== kernel benchmark"
if [ "$dry" = 1 ]; then
  kernel_args=(--device cpu --scale 12 --repeats 1 --pyg-edges 100000)
else
  kernel_args=(--device cuda --scale 20 --repeats 5 --pyg-edges 20000000)
fi
timeout "$(budget 150)" "$PY" benchmarks/kernels.py "${kernel_args[@]}" 2>"$out/bench.err" \
  | tee "$out/kernels.jsonl" | tail -3 || status=1
tail -3 "$out/bench.err"
echo "== done in $((SECONDS - start)) s, status $status"
exit "$status"
