"""GPU calibration of the encoder example's claims (MLX CUDA on an H200; not run in CI).

    MLX_ENABLE_TF32=0 python gpu_calibrate.py --out calib-tf32-off.json
    python gpu_calibrate.py --out calib-tf32-default.json      # MLX's default: TF32 on

Measures, on the MLX GPU device, what calibrate_claims.py measures on the CPU:

* the five exact claims of parity-gpu.toml (the correctness sweep, every runner on the GPU) with
  ``paritygate.calibration.calibrate_claim``: the noise distribution of each optimization against
  the GPU baseline in one process, with the built-in output mutations and the planted bug.
  On the GPU byte equality is not expected for compile / pruning / block-local (other kernels,
  other reduction orders): the result proposes a calibrated max-abs bound, or refuses when the
  planted bug falls inside the noise;
* the held-out metrics of fp32 / q8 / q4 and the 2-bit bug (accuracy with Clopper-Pearson
  intervals, McNemar against fp32, agreement, probability drift, ECE), on the GPU.

It writes nothing into the specs: a later commit turns the JSON into GPU claims (class h200)
with their bases, kept apart from the CPU claims.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--skip-heldout", action="store_true")
    args = ap.parse_args()

    import mlx.core as mx

    mx.set_default_device(mx.gpu)
    import calibrate_claims as cc

    result = {
        "platform": f"MLX {mx.__version__} GPU",
        "tf32": os.environ.get("MLX_ENABLE_TF32", "default (on)"),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hardware": cc._hardware().replace("MLX CPU", "MLX GPU"),
    }
    t0 = time.time()
    result["exact"] = cc.exact(spec=HERE / "parity-gpu.toml", write=False)
    result["exact_seconds"] = time.time() - t0
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    if not args.skip_heldout:
        t0 = time.time()
        run = cc.heldout_outputs()
        result["heldout"] = cc.heldout_metrics(run["items"], run["outputs"])
        result["heldout_seconds"] = time.time() - t0
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k not in ("exact", "heldout")}, indent=2))


if __name__ == "__main__":
    main()
