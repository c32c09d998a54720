#!/usr/bin/env bash
# The vlm_port gate with mlx-vlm on MLX CUDA (the candidate) against the recorded transformers
# float32 CPU reference (references/), TF32 on and off, and the calibration of the two float
# claims, on a GPU machine. Usage, from the repository root:
#   examples/vlm_port/gpu/run_gpu.sh OUT_DIR
# Expects python3.12 with mlx and mlx-cuda importable from /tmp/site (PYTHONPATH), torch 2.11
# CUDA installed. Wheels to carry into /tmp/site when the machine lacks them (pip install
# --no-deps --target /tmp/site ...): mlx-vlm==0.7.10, transformers==5.23.0, tokenizers,
# huggingface_hub, safetensors, jinja2, pillow, requests, numpy, regex, pyyaml, tqdm, filelock,
# packaging, typer/click (paritygate's command line) and paritygate's own requirements. The
# transformers reference is not run: the gate reads references/ (recorded on the CPU).
# Under 5 minutes: two gates of 16 cases (150 s limit each) and four calibrations (75 s limit
# each; on 2 CPU cores the gate takes 17-36 s).
set -euo pipefail
out=${1:?usage: run_gpu.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "$0")/../../.." && pwd)
py=${PYTHON:-python3.12}
export PYTHONPATH="/tmp/site:$root/src${PYTHONPATH:+:$PYTHONPATH}"
export VLM_PORT_MLX_DEVICE=gpu
cd "$root/examples/vlm_port"
{
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
  "$py" -c "import mlx.core as mx, mlx_vlm, transformers; print('mlx', mx.__version__, mx.default_device(), 'mlx-vlm', mlx_vlm.__version__, 'transformers', transformers.__version__)"
} > "$out/versions.txt" 2>&1
for tf32 in 1 0; do
  export MLX_ENABLE_TF32=$tf32
  start=$SECONDS
  set +e
  timeout 150 "$py" -m paritygate gate parity.toml --out "$out/gate-tf32-$tf32" \
    > "$out/gate-tf32-$tf32.txt" 2>&1
  echo "exit $? seconds $((SECONDS - start))" >> "$out/gate-tf32-$tf32.txt"
  set -e
  for claim in vision-embeds mlx-logits; do
    timeout 75 "$py" -m paritygate calibrate parity.toml --claim "$claim" \
      --json "$out/calibrate-$claim-tf32-$tf32.json" \
      > "$out/calibrate-$claim-tf32-$tf32.txt" 2>&1 || echo "exit $?" >> "$out/calibrate-$claim-tf32-$tf32.txt"
  done
done
