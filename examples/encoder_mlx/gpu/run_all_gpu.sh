#!/usr/bin/env bash
# Every GPU run of the encoder example's issue-25 work, in one call (about 6 minutes):
#
#   PYTHONPATH=/tmp/site:$PYTHONPATH bash examples/encoder_mlx/gpu/run_all_gpu.sh OUTDIR
#
# Needs python3.12 with mlx and mlx-cuda installed into /tmp/site (pip install --target) and the
# example's own packages (tokenizers, numpy, scipy, scikit-learn; paritygate comes from src/).
# Everything is written under OUTDIR (created): one log per section, the JSON results,
# summary.txt. A failing section is logged and the next one runs (no `set -e`); every section has
# a time limit so that the whole call stays well under 8 minutes.
#
#   1. environment            env.txt (nvidia-smi, versions)
#   2. repro, TF32 default/0  repro-tf32-{default,off}.log (exit 1 = bad shapes found)
#   3. calibration            calib-tf32-{on,off}.json: gpu_calibrate.py --parts exact,heldout,quant
#                             (exact claims of parity-gpu.toml over the correctness sweep; q8/q4
#                             held-out figures, non-inferiority, quantization report)
#   4. references             paritygate record parity-gpu.toml (references-gpu/), then the gate
#                             with its provisional bounds (expected to fail where the GPU is not
#                             byte-exact: calib-*.json holds the proposed bounds)
set -x
OUT=${1:?usage: run_all_gpu.sh OUTDIR}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)   # examples/encoder_mlx
ROOT=$(cd "$HERE/../.." && pwd)
PY=${PYTHON:-python3.12}
command -v "$PY" >/dev/null || PY=python3
export PYTHONPATH="$ROOT/src:${PYTHONPATH:-}"
export PARITYGATE_CACHE_DIR="$OUT/aa-cache"
START=$(date +%s)
section() { set +x; echo; echo "===== $* ($(( $(date +%s) - START )) s) ====="; set -x; }
status() { echo "$1: exit $2" | tee -a "$OUT/sections.txt"; }

section "1. environment"
{
  date -u; uname -a; nvidia-smi || true
  "$PY" -c 'import sys, mlx.core as mx; print(sys.version); print("mlx", mx.__version__, mx.default_device(), "cuda", getattr(mx, "cuda", None) and mx.cuda.is_available())'
  "$PY" -m pip list 2>/dev/null | grep -i -E "mlx|numpy|scipy|tokenizers|scikit" || true
  git -C "$ROOT" rev-parse HEAD 2>/dev/null; git -C "$ROOT" status --short 2>/dev/null | head -20
} > "$OUT/env.txt" 2>&1
status env $?

cd "$HERE" || exit 2

section "2. quantized_matmul reproduction (TF32 default, then MLX_ENABLE_TF32=0)"
timeout 60 "$PY" gpu/repro_quantized_matmul.py --device gpu --dtypes float32,float16,bfloat16 \
  > "$OUT/repro-tf32-default.log" 2>&1
status repro-tf32-default $?
MLX_ENABLE_TF32=0 timeout 60 "$PY" gpu/repro_quantized_matmul.py --device gpu \
  > "$OUT/repro-tf32-off.log" 2>&1
status repro-tf32-off $?
"$PY" gpu/repro_quantized_matmul.py --device cpu --rows 8,16 > "$OUT/repro-cpu.log" 2>&1
status repro-cpu $?

section "3. calibration of parity-gpu.toml and held-out q8/q4 (TF32 on, then off)"
for tf in 1 0; do
  name=calib-tf32-$([ "$tf" = 1 ] && echo on || echo off)
  MLX_ENABLE_TF32=$tf timeout 170 "$PY" gpu_calibrate.py --device gpu --deadline 150 \
    --parts heldout,quant,exact --heldout-variants baseline,q8,q4,two-bit-weights \
    --out "$OUT/$name.json" > "$OUT/$name.log" 2>&1
  status "$name" $?
done

section "4. GPU references (record) and the gate with the provisional bounds"
timeout 60 "$PY" -m paritygate record parity-gpu.toml -y > "$OUT/record-gpu.log" 2>&1
status record-gpu $?
cp -r references-gpu "$OUT/references-gpu" 2>/dev/null
timeout 60 "$PY" -m paritygate gate parity-gpu.toml --out "$OUT/gate-gpu" > "$OUT/gate-gpu.log" 2>&1
status gate-gpu $?

section "summary"
set +x
{
  cat "$OUT/sections.txt"
  for f in "$OUT"/repro-*.log; do echo "--- $f"; tail -n 12 "$f"; done
  "$PY" - "$OUT" <<'PYEOF'
import json, sys
from pathlib import Path
for path in sorted(Path(sys.argv[1]).glob("calib-tf32-*.json")):
    res = json.loads(path.read_text())
    print(f"--- {path.name}: {res.get('platform')} TF32={res.get('tf32')} {res.get('hardware')}")
    for name, row in (res.get("heldout") or {}).get("variants", {}).items():
        print(f"  {name:16s} acc {row['action_accuracy']:.4f}/{row['choice_accuracy']:.4f} "
              f"agree {row['action_agreement']:.4f}/{row['choice_agreement']:.4f} "
              f"drift {row['prob_drift']:.3g}")
    for name, row in (res.get("noninferiority") or {}).get("variants", {}).items():
        for head, r in row.items():
            print(f"  non-inferiority {name} {head}: diff {r['difference']:+.4f} "
                  f"lower {r['lower_bound']:+.4f} holds {r['holds']}")
    for name, info in (res.get("quantization") or {}).items():
        print(f"  {name}: {len(info['quantized'])} quantized, {len(info['skipped'])} kept float")
    for claim, r in res.get("exact", {}).items():
        print(f"  exact {claim}: proposal {r.get('proposal')} bound {r.get('bound')} "
              f"refused {r.get('refused')} {r.get('error', '')}")
    print(f"  quantized matmul: {(res.get('quantized_matmul') or {}).get('summary')}")
    print(f"  skipped: {res.get('skipped')}")
PYEOF
  echo "total $(( $(date +%s) - START )) s"
} > "$OUT/summary.txt" 2>&1
cat "$OUT/summary.txt"
exit 0
