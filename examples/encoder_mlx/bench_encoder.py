"""Benchmarks of the six optimizations with paritygate.bench (offline; never in CI).

    python bench_encoder.py --device cpu --plan small --blocks 8 --block-size 1 \
        --out bench-results/cpu.json                                         # shared 2-core CPU
    python bench_encoder.py --device gpu --budget 8 --out $OUT/gpu.json      # on the GPU machine

Each optimization is compared with the baseline (every switch off) one at a time, on the
workload classes of seed 003, kept apart:

* ``fixed``: 8 questions of one shape (no rubric, 3 options: 45 tokens): kernel comparisons;
* ``variable``: 16 questions of real mixed lengths (45 to ~180 tokens, one long among short);
* ``distinct50``: 50 different questions about 50 different images (throughput);
* ``rubric50``: 50 questions about 10 images sharing one rubric (legitimate preparation reuse);
* ``duplicated50``: 50 questions with 5 unique inputs, deliberately duplicated (reported apart,
  with ``unique_inputs``; no cross-call result cache is benchmarked).

Per comparison: ``run_bench`` (interleaved blocks analysed as pairs, A/A-calibrated threshold,
time budget, outputs checked while timing: byte-equal for the exact optimizations, argmax
agreement >= 0.9 for quantization); stages (prepare, build, compute, postprocess) from the same
iterations; cold call apart. Then ``time_side`` with 200 calls for p95 of the baseline and each
candidate on ``fixed``, and the Amdahl bound ``1 / (1 - f + f / s)`` of every candidate from the
baseline's measured fraction ``f`` of the stage it targets and the measured speedup ``s``.
Block-local attention is also swept over lengths (random ids, 1 item) for its break-even.

Figures are labelled with the device they ran on; a CPU figure says nothing about the GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data  # noqa: E402

# which stage each optimization targets (for the Amdahl bound)
TARGET_STAGE = {
    "compiled": "compute",
    "token-batching": "compute",
    "q8": "compute",
    "q4": "compute",
    "pruned": "compute",
    "prefix-cache": "prepare",
    "block-local": "compute",
}
EXACT = {"compiled", "token-batching", "pruned", "prefix-cache", "block-local"}
ALL = ["compiled", "token-batching", "pruned", "prefix-cache", "block-local", "q8", "q4"]
# --plan small: the comparisons that fit a shared 2-core CPU (each call there takes 0.1-3 s);
# --plan full: every candidate on every workload class (the GPU session).
PLANS = {
    "small": {
        "fixed": ALL,
        "variable": ["compiled", "token-batching", "block-local"],
        "distinct50": ["token-batching"],
        "rubric50": ["prefix-cache"],
        "duplicated50": ["prefix-cache"],
    },
    "full": {w: ALL for w in ("fixed", "variable", "distinct50", "rubric50", "duplicated50")},
}


def workloads() -> dict[str, list[data.Item]]:
    images, digits = data.digits()
    _, held = data.split()
    rng = np.random.default_rng(3)
    order = [int(i) for i in rng.permutation(held)]

    def q(i, k, rubric):
        return data.make_item(images[i], digits[i], rng, k, rubric)

    fixed = [q(order[j], 3, 0) for j in range(8)]
    variable = [q(order[16 + j], 1 + j % 5, 3 if j == 7 else j % 3) for j in range(16)]
    distinct = [q(order[40 + j], 2 + j % 4, j % 2) for j in range(50)]
    rubric = [q(order[100 + j // 5], 2 + j % 4, 2) for j in range(50)]
    unique = [q(order[160 + j], 3, 1) for j in range(5)]
    duplicated = [unique[j % 5] for j in range(50)]
    return {
        "fixed": fixed,
        "variable": variable,
        "distinct50": distinct,
        "rubric50": rubric,
        "duplicated50": duplicated,
    }


def _source_revision() -> str:
    try:
        rev = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "."], cwd=HERE, capture_output=True, text=True
        ).stdout.strip()
        return rev + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _side(enc, items):
    def run(it):
        return enc(items, timer=it.stage)

    return run


def _equal(a, b):
    return all(np.array_equal(a[k], b[k]) for k in ("action", "choice"))


def _agree(a, b):
    return all(np.mean(a[k].argmax(1) == b[k].argmax(1)) >= 0.9 for k in ("action", "choice"))


def block_local_sweep(device_label: str, lengths=(64, 128, 256, 512, 1024), calls=20):
    """Dense L x L local mask vs block-local, one item of length L (random ids), medians."""
    import mlx.core as mx
    import model

    m, _ = model.load_model()
    rng = np.random.default_rng(5)
    rows = []
    for length in lengths:
        ids = mx.array(rng.integers(5, 60, (1, length)).astype(np.int32))
        args = (
            ids,
            mx.array([length]),
            mx.array([[1, 2, 3, 0, 0]], dtype=mx.int32),
            mx.array([[True, True, True, False, False]]),
            mx.zeros((1, 4)),
        )
        times = {}
        for name, sw in (
            ("dense", model.Switches()),
            ("block-local", model.Switches(block_local=True)),
        ):
            mx.eval(m(*args, sw=sw))
            samples = []
            for _ in range(calls):
                t = time.perf_counter()
                mx.eval(m(*args, sw=sw))
                samples.append(time.perf_counter() - t)
            times[name] = float(np.median(samples))
        rows.append(
            {
                "length": length,
                "dense_ms": 1e3 * times["dense"],
                "block_local_ms": 1e3 * times["block-local"],
                "speedup": times["dense"] / times["block-local"],
            }
        )
        print(f"[{device_label}] block-local L={length}: {rows[-1]}", flush=True)
    wins = [r["length"] for r in rows if r["speedup"] > 1.0]
    return {"rows": rows, "first_length_faster": wins[0] if wins else None, "calls": calls}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--budget", type=float, default=20.0, help="seconds per comparison")
    ap.add_argument("--p95-calls", type=int, default=200)
    ap.add_argument(
        "--p95-candidates", nargs="*", default=["compiled"], help="candidates timed for p95"
    )
    ap.add_argument("--plan", choices=tuple(PLANS), default="full")
    ap.add_argument("--only", nargs="*", help="candidates to run (default: the plan's)")
    ap.add_argument("--workloads", nargs="*", help="workload classes (default: the plan's)")
    ap.add_argument("--blocks", type=int, help="block pairs per comparison (instead of budget)")
    ap.add_argument("--block-size", type=int, help="samples per side per block")
    ap.add_argument(
        "--extras-only",
        action="store_true",
        help="only the p95 latencies and the block-local sweep (merged into --out if it exists)",
    )
    ap.add_argument("--sweep-calls", type=int, default=20)
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()

    import mlx.core as mx

    from paritygate.bench import amdahl_bound, input_fingerprint, run_bench, time_side

    mx.set_default_device(mx.cpu if args.device == "cpu" else mx.gpu)
    import gate_runners

    label = f"MLX {mx.__version__} {args.device.upper()}"
    if args.device == "gpu":
        label += f" (MLX_ENABLE_TF32={os.environ.get('MLX_ENABLE_TF32', 'default')})"
    label += f", {platform.machine()}"
    loads = workloads()
    plan = PLANS[args.plan]
    chosen = args.workloads or list(plan)
    candidates = args.only or ALL
    tok = data.load_tokenizer()
    result = {
        "platform": label,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source_revision": _source_revision(),
        "command": " ".join(sys.argv),
        "workloads": {},
    }
    base = gate_runners.encoder_for("baseline")
    if args.extras_only:
        if args.out.exists():
            result = {**json.loads(args.out.read_text()), "extras_command": " ".join(sys.argv)}
        chosen_runs = []
    else:
        chosen_runs = chosen
    for wname in chosen_runs:
        items = loads[wname]
        prepared = data.prepare_items(tok, items)
        ids = [p.ids for p in prepared]
        unique = len({(it.image, it.options, it.rubric) for it in items})
        wres = {
            "questions": len(items),
            "unique_inputs": unique,
            "tokens": int(sum(len(i) for i in ids)),
            "input_sha256": input_fingerprint([np.concatenate(ids)]),
            "comparisons": {},
        }
        ref_out = base(items)
        for cand in [c for c in candidates if c in plan.get(wname, ALL)]:
            enc = gate_runners.encoder_for(cand)
            check = _equal if cand in EXACT else _agree
            prov = {
                "workload": wname,
                "device": args.device,
                "dtype": "float32",
                "input_sha256": wres["input_sha256"],
                "source_revision": result["source_revision"],
                "model_revision": data.sha256_file(HERE / "weights" / "encoder_digits.safetensors"),
                "compile_flags": "mx.compile (shape-specialized)" if cand == "compiled" else "",
                "batching": "tokens<=384,max 4" if cand == "token-batching" else "insertion,16",
            }
            t0 = time.time()
            res = run_bench(
                _side(base, items),
                _side(enc, items),
                workload=f"encoder_mlx {wname} {args.device}",  # one A/A threshold per workload
                budget=None if args.blocks else args.budget,
                blocks=args.blocks,
                block_size=args.block_size,
                check_outputs=check,
                names=("baseline", cand),
                provenance=prov,
            )
            stats = enc.last
            f = res.baseline.stage_fractions().get(TARGET_STAGE[cand])
            entry = {
                "verdict": str(res.verdict),
                "describe": res.describe(),
                "speedup": res.speedup,
                "speedup_ci": [1 / res.ratio_ci[1], 1 / res.ratio_ci[0]],
                "threshold": res.threshold,
                "blocks": res.blocks,
                "baseline": res.baseline.summary(),
                "candidate": res.candidate.summary(),
                "padding_waste": {"baseline": base.last.padding_waste, cand: stats.padding_waste},
                "target_stage": TARGET_STAGE[cand],
                "target_fraction": f,
                "amdahl_bound": amdahl_bound(f, res.speedup) if f and res.speedup > 0 else None,
                "warnings": list(res.warnings),
                "seconds": time.time() - t0,
            }
            if not _equal(ref_out, enc(items)) and cand in EXACT:
                raise SystemExit(f"{cand} changed the answer on {wname}")
            wres["comparisons"][cand] = entry
            print(f"[{label}] {wname} {cand}: {res.describe()}", flush=True)
        result["workloads"][wname] = wres
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")

    # p95 from >= 200 single calls on the fixed-shape workload
    if ("fixed" in chosen or args.extras_only) and args.p95_calls:
        items = loads["fixed"]
        lat = {}
        for name in ["baseline", *args.p95_candidates]:
            enc = gate_runners.encoder_for(name)
            side = time_side(
                _side(enc, items), name=name, iterations=args.p95_calls, warmup=5
            ).summary()
            lat[name] = side
            print(f"[{label}] latency fixed {name}: {side}", flush=True)
        result["latency_fixed"] = lat
    result["block_local_sweep"] = block_local_sweep(label, calls=args.sweep_calls)
    args.out.write_text(json.dumps(result, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
