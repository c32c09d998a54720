"""How far the transformers reference moves on this CPU when its threads or SIMD width change.

The float32 claims' margin "other x86 CPU" stands for a CI machine whose SIMD width or thread
count differs from the one that recorded ``references/``. This script measures what such a change
does here: it runs the reference (transformers float32, torch eager) on the gate's cases under
``ATEN_CPU_CAPABILITY`` = avx512 / avx2 / default (torch's kernels for narrower SIMD, with
``MKL_ENABLE_INSTRUCTIONS`` and ``ONEDNN_MAX_CPU_ISA`` limited to match) and 1 or 2 threads,
each in a fresh process, and compares the teacher-forced logits with the recorded reference
(max-abs, KL max through paritygate.sequence). Writes ``calibration/cpu-spread.json``.

    python examples/lm_port/cpu_spread.py [--cases N]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CONFIGS = [(cap, threads) for cap in ("avx512", "avx2", "default") for threads in (2, 1)]


def child(capability: str, threads: int, limit: int) -> None:
    import numpy as np
    import torch
    from safetensors.numpy import load_file

    sys.path.insert(0, str(HERE))
    import runners

    from paritygate import load_spec
    from paritygate.sequence import compare_teacher_forced

    runners.THREADS = threads
    spec = load_spec(HERE / "parity.toml")
    manifest = json.loads((HERE / "references" / "manifest.json").read_text())
    run = runners.make("transformers")
    worst = {"max_abs": 0.0, "kl_max": 0.0, "greedy_differs": 0}
    for name in list(spec.cases)[:limit]:
        case = json.loads((HERE / manifest["cases"][name]["input"]).read_text())
        ref = load_file(str(HERE / "references" / manifest["cases"][name]["file"]))
        out = run(case)
        res = compare_teacher_forced(ref["logits"], out["logits"])
        worst["max_abs"] = max(worst["max_abs"], res.max_abs)
        worst["kl_max"] = max(worst["kl_max"], res.kl_max)
        worst["greedy_differs"] += int(not np.array_equal(ref["greedy_ids"], out["greedy_ids"]))
    worst.update(capability=torch.backends.cpu.get_cpu_capability(), threads=threads)
    print(json.dumps(worst))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=16)
    parser.add_argument("--child", nargs=2)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]), args.cases)
        return 0
    rows = []
    for cap, threads in CONFIGS:
        # torch's own kernels, and the BLAS (MKL) and oneDNN under it, limited to the same width
        isa = {"avx512": "AVX512", "avx2": "AVX2", "default": "SSE4_2"}[cap]
        env = dict(
            os.environ,
            ATEN_CPU_CAPABILITY=cap,
            MKL_ENABLE_INSTRUCTIONS=isa,
            ONEDNN_MAX_CPU_ISA={"SSE4_2": "SSE41"}.get(isa, isa if isa == "AVX2" else "ALL"),
        )
        cmd = [sys.executable, __file__, "--cases", str(args.cases), "--child", cap, str(threads)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        row = json.loads(done.stdout.strip().splitlines()[-1]) | {"requested": cap}
        print(row)
        rows.append(row)
    (HERE / "calibration" / "cpu-spread.json").write_text(json.dumps(rows, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
