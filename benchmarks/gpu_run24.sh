#!/usr/bin/env bash
# One GPU-machine run for the comparison engine's speed targets (issue 24), within 8 minutes:
# the torch backend tests on the GPU, the torch GPU benchmark, the host-kernel memory and screen
# tests on every core, and the CPU benchmark on every core. Each step writes <step>.txt (its
# output) and <step>.rc (its exit status) under the folder given as $1; a step that runs past
# its time limit is stopped (rc 124) and what it printed is kept.
#
#   bash benchmarks/gpu_run24.sh OUT_DIR      (from the repository root; python3 = the GPU Python)
set -u
out=${1:?usage: bash benchmarks/gpu_run24.sh OUT_DIR}
mkdir -p "$out"
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1
PY=${PY:-python3}
start=$(date +%s)

step() {  # step NAME LIMIT_SECONDS COMMAND...
    local name=$1 limit=$2
    shift 2
    local t0=$(date +%s)
    timeout --kill-after=10 "$limit" "$@" >"$out/$name.txt" 2>&1
    local rc=$?
    echo "$rc" >"$out/$name.rc"
    echo "$name: rc $rc in $(( $(date +%s) - t0 )) s (limit $limit s)" | tee -a "$out/summary.txt"
}

{
    date -u
    nproc
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
    "$PY" -c 'import sys, numpy, numba; print(sys.version.split()[0], "numpy", numpy.__version__, "numba", numba.__version__)'
    "$PY" -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "cuda", torch.cuda.is_available())'
    git log --oneline -1 2>/dev/null || true
} >"$out/machine.txt" 2>&1

step torch-tests 140 "$PY" -m pytest -q -p no:cacheprovider tests/backends/test_backend_torch.py \
    --durations=10
step host-kernel-tests 60 "$PY" -m pytest -q -p no:cacheprovider tests/backends/test_host_kernel.py \
    -k "memory or screen" --durations=5
step bench-gpu-torch 150 "$PY" benchmarks/bench_compare_gpu.py torch --reps 5 --json "$out/bench-gpu-torch.json"
step bench-cpu 150 "$PY" benchmarks/bench_compare_cpu.py --rounds 3
echo "total: $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
