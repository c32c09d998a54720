#!/usr/bin/env bash
# The lm_port gate with the mlx-lm candidate on the GPU (MLX CUDA), TF32 on and off, and the
# calibration of the mlx-lm claims on the GPU (first 32 cases); every output goes to folder $1.
# On 2 CPU cores the gate takes about 50 s and a calibration about 40 s, so under 5 minutes in all.
#
#   bash examples/lm_port/gpu/run_gpu.sh OUT        (from the repository root)
#
# Needs python3.12 with torch (CUDA build, 2.11; the reference runs on the CPU as recorded),
# and on PYTHONPATH through /tmp/site the wheels carried to the machine:
#   mlx, mlx-cuda (MLX's CUDA backend), mlx-lm, transformers, tokenizers, safetensors,
#   huggingface-hub, jinja2, numba, llvmlite, click, tomli-w (and paritygate's own
#   dependencies from pyproject.toml), plus llama-cpp-python if the llama.cpp candidates
#   should run. Without llama_cpp the llama.cpp candidates and their claims are left out of the
#   spec copy, and the script says so.
set -euo pipefail
OUT=${1:?usage: run_gpu.sh OUT_FOLDER}
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
PY=${PYTHON:-python3.12}
export PYTHONPATH="$ROOT/src:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
WORK=$(mktemp -d)
cp -r "$ROOT/examples/lm_port/." "$WORK/"
rm -rf "$WORK/tests" "$WORK/parity-reports"

"$PY" - "$WORK" "$OUT" <<'PY'
import importlib.util, json, pathlib, re, sys
work, out = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
spec = (work / "parity.toml").read_text()
faithful = 'options = { runtime = "mlx-lm" }'
assert faithful in spec, "parity.toml no longer names the mlx-lm runner as expected"
spec = spec.replace(faithful, 'options = { runtime = "mlx-lm", device = "gpu" }')
note = {"llama_cpp": importlib.util.find_spec("llama_cpp") is not None}
if not note["llama_cpp"]:
    # drop the llama.cpp runners and every claim that names only them
    spec = re.sub(r'\n\[runners\.llama-[a-z0-9]+\]\n(?:(?!\n\[).)*', "\n", spec, flags=re.S)
    sections = re.split(r"(?=^\[)", spec, flags=re.M)  # one per table header
    def claim_of(section):
        m = re.match(r"\[claims\.([A-Za-z0-9_-]+)", section)
        return m.group(1) if m else None
    dropped = set()
    for section in sections:
        names = re.search(r"^candidates = \[(.*?)\]", section, flags=re.M)
        if claim_of(section) and names:
            ids = [n.strip().strip('"') for n in names.group(1).split(",")]
            if all(i.startswith("llama-") for i in ids):
                dropped.add(claim_of(section))
    kept = []
    for section in sections:
        if claim_of(section) in dropped:
            continue
        names = re.search(r"^candidates = \[(.*?)\]", section, flags=re.M)
        if claim_of(section) and names:
            keep = [n.strip() for n in names.group(1).split(",")
                    if not n.strip().strip('"').startswith("llama-")]
            section = section.replace(names.group(0), "candidates = [" + ", ".join(keep) + "]")
        kept.append(section)
    spec = "".join(kept)
    note["dropped_claims"] = sorted(dropped)
    print("llama_cpp is not installed: the llama.cpp candidates (f32, Q8_0, Q4_0) and the claims "
          "naming only them are SKIPPED:", ", ".join(note["dropped_claims"]))
(work / "parity-gpu.toml").write_text(spec)
(out / "skipped.json").write_text(json.dumps(note, indent=2))
PY

cd "$WORK"
"$PY" -c "import mlx.core as mx; print('mlx', mx.__version__, mx.default_device(), mx.metal.is_available() if hasattr(mx, 'metal') else '')" | tee "$OUT/mlx.txt"
nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt" 2>&1 || true
for TF32 in 1 0; do
  export MLX_ENABLE_TF32=$TF32
  echo "== gate, MLX_ENABLE_TF32=$TF32"
  set +e
  START=$(date +%s.%N)
  "$PY" -m paritygate gate parity-gpu.toml --out "$OUT/gate-tf32-$TF32" \
    > "$OUT/gate-tf32-$TF32.txt" 2>&1
  echo "exit $? after $("$PY" -c "import time; print(round(time.time() - $START, 1))") s wall" >> "$OUT/gate-tf32-$TF32.txt"
  for CLAIM in mlx-logits mlx-kl; do
    "$PY" -m paritygate calibrate parity-gpu.toml --claim "$CLAIM" --candidate mlx-lm \
      --cases 32 --mutations noise,shift,swap,float16 --json "$OUT/calibrate-$CLAIM-tf32-$TF32.json" \
      > "$OUT/calibrate-$CLAIM-tf32-$TF32.txt" 2>&1
    echo "exit $?" >> "$OUT/calibrate-$CLAIM-tf32-$TF32.txt"
  done
  set -e
  tail -3 "$OUT/gate-tf32-$TF32.txt"
done
cp parity-gpu.toml "$OUT/"
echo "outputs in $OUT"
