#!/usr/bin/env bash
# The GPU session's work for examples/encoder_mlx, on one H200 (MLX CUDA), in one or two calls.
# Not run in CI. Every figure it writes is labelled MLX GPU (H200) with its TF32 setting.
#
#   bash gpu/run_gpu.sh calibrate   # ~5 min: exact claims over the sweep + held-out quantization,
#                                   #   under MLX_ENABLE_TF32=0 and under the default (TF32 on)
#   bash gpu/run_gpu.sh bench       # ~8 min: the six optimizations on the five workload classes
#
# Writes into $OUT (or ./gpu-out): calib-tf32-off.json, calib-tf32-default.json,
# bench-gpu-tf32-default.json, bench-gpu-tf32-off.json, env.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu-out}"
mkdir -p "$OUT"
PY="${PYTHON:-python3}"
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  "$PY" -c "import mlx.core as mx; print('mlx', mx.__version__, mx.default_device(), mx.metal.is_available() if hasattr(mx, 'metal') else '')"
} >"$OUT/env.txt" 2>&1 || true

case "${1:-calibrate}" in
  calibrate)
    MLX_ENABLE_TF32=0 "$PY" gpu_calibrate.py --out "$OUT/calib-tf32-off.json"
    "$PY" gpu_calibrate.py --out "$OUT/calib-tf32-default.json"
    ;;
  bench)
    "$PY" bench_encoder.py --device gpu --budget 8 --p95-candidates compiled token-batching q4 \
      --out "$OUT/bench-gpu-tf32-default.json"
    MLX_ENABLE_TF32=0 "$PY" bench_encoder.py --device gpu --budget 4 --p95-calls 0 \
      --workloads fixed variable --out "$OUT/bench-gpu-tf32-off.json"
    ;;
  *)
    echo "usage: bash gpu/run_gpu.sh calibrate|bench" >&2
    exit 2
    ;;
esac
