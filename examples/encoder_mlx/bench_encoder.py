"""Benchmarks of the six optimizations with paritygate.bench (offline; never in CI).

    python bench_encoder.py --device cpu --plan small --workloads fixed --blocks 12 \
        --block-size 1 --p95-candidates baseline compiled --sweep-calls 10 \
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

Phases, in this order, inside an optional time budget (``--deadline``; later phases shrink or
are skipped and listed under ``skipped``):

0. before any path other than the baseline is timed (latency or comparison), one untimed call
   of it is checked against the baseline's outputs by the rule below (``check_before_timing``):
   a path whose outputs are wrong (a quantized model on a faulty kernel) is refused, not timed;
1. latency on the first ``--p95-workloads`` class: ``time_side`` with 200 single calls per path
   for p95, the first call of each path in the process timed apart as its cold call, the model's
   load time, and MLX's allocator memory (active, peak, cache) and weight bytes (at most a
   quarter of the budget);
2. comparisons: ``run_bench`` per optimization and workload (interleaved blocks analysed as
   pairs, A/A-calibrated threshold per workload, device and TF32 setting, a time budget each,
   outputs checked while timing: byte-equal for the exact optimizations on MLX CPU; finite with
   argmax agreement >= 0.9 on the GPU and for quantization, the largest max-abs difference kept);
   stages (prepare, build, compute, postprocess) from the same iterations; the Amdahl bound
   ``1 / (1 - f + f / s)`` from the baseline's measured fraction ``f`` of the stage the
   optimization targets and that stage's own measured speedup ``s`` (``stage_amdahl``; an
   end-to-end speedup above it means another stage changed too); padding waste and computed
   tokens; every comparison's raw samples in ``<out>.samples.json.gz`` (gzip JSON, no pickle:
   ``paritygate.bench.load_samples`` recomputes each interval from them);
3. latency on the other ``--p95-workloads`` classes (the baseline and the paths built for each);
4. the block-local break-even sweep over lengths (random ids, one item).

Figures are labelled with the device they ran on; a CPU figure says nothing about the GPU.
``--blocks`` below the harness's minimum for a verdict (``min_decisive_pairs``: 12 at 95 %) is
refused: such a comparison could only come out undecided.
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
    # --plan study: each class with the optimizations seed 003 names it for (fixed shapes for
    # kernels, variable lengths for scheduling and compilation, distinct questions for
    # throughput, a repeated rubric for preparation reuse, duplicates reported apart)
    "study": {
        "fixed": ALL,
        "variable": ["compiled", "token-batching", "pruned", "block-local"],
        "distinct50": ["compiled", "token-batching", "q8", "q4"],
        "rubric50": ["prefix-cache"],
        "duplicated50": ["prefix-cache", "token-batching"],
    },
    "full": {w: ALL for w in ("fixed", "variable", "distinct50", "rubric50", "duplicated50")},
}
AA_SECONDS = 20.0  # an A/A calibration of paritygate.bench runs at least this long per workload


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
    """The commit this code is (``-dirty`` when the example's folder has changes); a bundle made
    by gpu/bundle.sh (no .git) carries it in SOURCE_REVISION, written from a clean tree."""
    stamp = HERE / "SOURCE_REVISION"
    if stamp.is_file():
        return stamp.read_text().strip()
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


def _agreement(a, b) -> float:
    return min(float(np.mean(a[k].argmax(1) == b[k].argmax(1))) for k in ("action", "choice"))


def _max_abs(a, b) -> float:
    return max(
        float(np.abs(a[k].astype(np.float64) - b[k].astype(np.float64)).max())
        for k in ("action", "choice")
    )


class OutputCheck:
    """The outputs checked while timing (run_bench's ``check_outputs``).

    Exact optimizations on MLX CPU: byte equality (a property of that backend). On the GPU, and
    for quantization everywhere, outputs must be finite with argmax agreement >= 0.9 (a real bug,
    such as a lost order, fails that); the largest max-abs difference and the lowest agreement
    seen are kept as evidence (the GPU's exact bounds come from gpu_calibrate.py, not from here).
    """

    def __init__(self, exact: bool):
        self.exact = exact
        self.max_abs = 0.0
        self.agreement = 1.0

    def __call__(self, base, cand) -> bool:
        if not all(np.isfinite(cand[k]).all() for k in ("action", "choice")):
            return False
        self.max_abs = max(self.max_abs, _max_abs(base, cand))
        self.agreement = min(self.agreement, _agreement(base, cand))
        if self.exact:
            return _equal(base, cand)
        return self.agreement >= 0.9


class WrongOutputs(RuntimeError):
    """A candidate whose outputs fail the output check before any timing: it is not timed."""


def check_before_timing(name: str, enc, items, reference: dict, exact: bool) -> dict:
    """One untimed call of ``enc`` on ``items`` judged against the baseline's outputs
    (``reference``) by the rule used while timing (``OutputCheck``). A candidate whose outputs are
    wrong (not finite, argmax agreement under 0.9, or not byte-equal where ``exact``) is refused
    with ``WrongOutputs`` before anything of it is timed; otherwise the check's evidence."""
    check = OutputCheck(exact=exact)
    ok = check(reference, enc(items))
    evidence = {
        "rule": "byte-equal" if exact else "finite, argmax agreement >= 0.9",
        "max_abs_vs_baseline": check.max_abs,
        "argmax_agreement": check.agreement,
    }
    if not ok:
        raise WrongOutputs(
            f"{name}: outputs fail the check before timing ({evidence['rule']}: max-abs "
            f"{check.max_abs:.3g}, argmax agreement {check.agreement:.3f}); not timed"
        )
    return evidence


def memory_probe() -> dict[str, float]:
    """MLX's allocator: active, peak (since the last reset) and cache memory, in MiB."""
    import mlx.core as mx

    mib = 1024.0**2
    return {
        "active_mib": mx.get_active_memory() / mib,
        "peak_mib": mx.get_peak_memory() / mib,
        "cache_mib": mx.get_cache_memory() / mib,
    }


def weights_mib(enc) -> float:
    from mlx.utils import tree_flatten

    return sum(v.nbytes for _, v in tree_flatten(enc.model.parameters())) / 1024.0**2


class Clock:
    """The process's time budget: every phase asks what is left before it starts."""

    def __init__(self, seconds: float | None):
        self.start = time.monotonic()
        self.seconds = seconds

    def left(self) -> float:
        if self.seconds is None:
            return float("inf")
        return self.seconds - (time.monotonic() - self.start)


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


# p95 of single calls, by workload: every path on ``fixed``; on the other classes the baseline
# and the optimizations that class is built for.
P95_SIDES = {
    "fixed": ["baseline", *ALL],
    "variable": ["baseline", "compiled", "token-batching", "block-local"],
    "distinct50": ["baseline", "token-batching"],
    "rubric50": ["baseline", "prefix-cache"],
    "duplicated50": ["baseline", "prefix-cache"],
}


def _write(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def samples_path(out: Path) -> Path:
    """The raw samples of ``out``'s comparisons: ``cpu.json`` -> ``cpu.samples.json.gz``."""
    return out.with_name(out.stem + ".samples.json.gz")


def latency(gate_runners, loads, wname, names, calls, label, seconds, per_call=None):
    """p95 from ``calls`` single calls per path (cold call apart, 5 warm-up calls), with the
    model's load time and MLX's memory after the calls, within ``seconds``: a path whose
    estimated time (``per_call`` seconds a call, then the baseline's median here) does not fit
    what is left is skipped."""
    import mlx.core as mx

    from paritygate.bench import time_side

    items = loads[wname]
    out = {}
    clock = Clock(seconds)
    for name in names:
        if clock.left() <= 0 or (per_call is not None and per_call * (calls + 7) > clock.left()):
            out[name] = {"skipped": f"time budget (about {per_call * (calls + 7):.0f} s)"}
            print(f"[{label}] latency {wname} {name}: skipped (time budget)", flush=True)
            continue
        t0 = time.perf_counter()
        try:
            enc = gate_runners.encoder_for(name)
            load_s = time.perf_counter() - t0
            precheck = None
            if name != "baseline":  # its outputs are checked before it is timed
                reference = gate_runners.encoder_for("baseline")(items)
                precheck = check_before_timing(name, enc, items, reference, exact=False)
            mx.reset_peak_memory()
            side = time_side(_side(enc, items), name=name, iterations=calls, warmup=5).summary()
        except Exception as exc:  # one path's failure must not lose the others' figures
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"[{label}] latency {wname} {name}: {out[name]['error']}", flush=True)
            continue
        side["load_s"] = load_s
        if precheck is not None:
            side["output_check_before_timing"] = precheck
        for key in ("cold_s", "p50_s", "p90_s", "p95_s", "p99_s"):
            if key in side:  # the same figures in milliseconds, as tables print them
                side[key[:-2] + "_ms"] = 1e3 * side[key]
        if name == "baseline":
            per_call = side.get("p50_s") or side["cold_s"]
        side["memory"] = memory_probe()
        side["weights_mib"] = weights_mib(enc)
        out[name] = side
        p95 = side.get("p95_s")
        p95_text = f"{1e3 * p95:.2f} ms" if p95 is not None else "n/a"
        print(
            f"[{label}] latency {wname} {name}: cold {1e3 * side['cold_s']:.1f} ms, "
            f"p50 {1e3 * side.get('p50_s', float('nan')):.2f} ms, p95 {p95_text}, "
            f"peak {side['memory']['peak_mib']:.1f} MiB",
            flush=True,
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--budget", type=float, default=20.0, help="seconds per comparison (at most)")
    ap.add_argument("--deadline", type=float, help="seconds for the whole run (phases shrink)")
    ap.add_argument(
        "--threshold",
        type=float,
        help="a stated effect threshold instead of the A/A calibration (smoke runs only)",
    )
    ap.add_argument("--p95-calls", type=int, default=200)
    ap.add_argument(
        "--p95-workloads", nargs="*", default=["fixed"], help="workload classes timed for p95"
    )
    ap.add_argument("--p95-candidates", nargs="*", help="paths timed for p95 (default: per class)")
    ap.add_argument("--plan", choices=tuple(PLANS), default="full")
    ap.add_argument("--only", nargs="*", help="candidates to run (default: the plan's)")
    ap.add_argument(
        "--exclude", nargs="*", default=[], help="paths left out everywhere (comparisons, p95)"
    )
    ap.add_argument("--workloads", nargs="*", help="workload classes (default: the plan's)")
    ap.add_argument("--blocks", type=int, help="block pairs per comparison (instead of budget)")
    ap.add_argument("--block-size", type=int, help="samples per side per block")
    ap.add_argument(
        "--extras-only",
        action="store_true",
        help="only the p95 latencies and the block-local sweep (merged into --out if it exists)",
    )
    ap.add_argument("--sweep-calls", type=int, default=20)
    ap.add_argument("--sweep-lengths", type=int, nargs="*", default=[64, 128, 256, 512, 1024])
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    clock = Clock(args.deadline)

    import mlx.core as mx

    from paritygate.bench import (
        HARNESS_VERSION,
        input_fingerprint,
        min_decisive_pairs,
        run_bench,
        save_samples,
        stage_amdahl,
    )

    if args.blocks is not None and args.blocks < min_decisive_pairs(0.05):
        print(
            f"bench_encoder.py: --blocks {args.blocks}: a verdict needs at least "
            f"{min_decisive_pairs(0.05)} block pairs (min_decisive_pairs at 95 %)",
            file=sys.stderr,
        )
        raise SystemExit(2)

    mx.set_default_device(mx.cpu if args.device == "cpu" else mx.gpu)
    import gate_runners

    tf32 = os.environ.get("MLX_ENABLE_TF32", "default (on)")
    label = f"MLX {mx.__version__} {args.device.upper()}"
    if args.device == "gpu":
        label += f" (MLX_ENABLE_TF32={tf32})"
    label += f", {platform.machine()}"
    loads = workloads()
    plan = PLANS[args.plan]
    chosen = args.workloads or list(plan)
    candidates = [c for c in (args.only or ALL) if c not in args.exclude]
    tok = data.load_tokenizer()
    result = {
        "platform": label,
        "device": args.device,
        "tf32": tf32 if args.device == "gpu" else None,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "source_revision": _source_revision(),
        "harness_version": HARNESS_VERSION,
        "command": " ".join(sys.argv),
        "samples": samples_path(args.out).name,
        "workloads": {},
        "skipped": [],
    }
    if args.extras_only and args.out.exists():
        result = {**json.loads(args.out.read_text()), "extras_command": " ".join(sys.argv)}
    sweep_reserve = 0.0 if args.extras_only or not args.sweep_calls else 15.0

    # 1. p95 from single calls on the first class (every path), cold call apart (the first
    # call of each path in this process), within a quarter of the budget; 3. the other classes
    # after the comparisons, with what is left
    p95_loads = [w for w in args.p95_workloads if args.extras_only or w in chosen]
    lat = result.setdefault("latency", {})
    p50_fixed = {}

    def p95_phase(wnames, share):
        for wname in wnames:
            names = [n for n in args.p95_candidates or P95_SIDES[wname] if n not in args.exclude]
            estimate = None
            if "baseline" in p50_fixed and names and names[0] == "baseline":
                ratio = sum(len(p.ids) for p in data.prepare_items(tok, loads[wname]))
                ratio /= max(1, p50_fixed["tokens"])
                estimate = p50_fixed["baseline"] * max(1.0, ratio)
            seconds = min(clock.left(), share) if args.deadline else None
            lat[wname] = latency(
                gate_runners, loads, wname, names, args.p95_calls, label, seconds, estimate
            )
            measured = lat[wname].get("baseline", {})
            if "cold_s" in measured and "baseline" not in p50_fixed:
                p50_fixed["baseline"] = measured.get("p50_s") or measured["cold_s"]
                p50_fixed["tokens"] = sum(len(p.ids) for p in data.prepare_items(tok, loads[wname]))
            _write(args.out, result)

    if args.p95_calls and p95_loads:
        p95_phase(p95_loads[:1], 0.25 * clock.left())
    reserve = 0.0 if args.deadline is None else 0.15 * clock.left()

    # 2. paired comparisons, one optimization at a time, workload by workload
    runs = [] if args.extras_only else chosen
    todo = [(w, c) for w in runs for c in candidates if c in plan.get(w, ALL)]
    base = gate_runners.encoder_for("baseline")
    raw: dict = {}  # every comparison's BenchResult, saved with its samples
    for wname in runs:
        items = loads[wname]
        prepared = data.prepare_items(tok, items)
        ids = [p.ids for p in prepared]
        unique = len({(it.image, it.options, it.rubric, it.words) for it in items})
        wres = {
            "questions": len(items),
            "unique_inputs": unique,
            "unique_images": len({it.image for it in items}),
            "tokens": int(sum(len(i) for i in ids)),
            "input_sha256": input_fingerprint([np.concatenate(ids)]),
            "comparisons": {},
        }
        result["workloads"][wname] = wres
        ref_out = None  # the baseline's outputs, at the first comparison that runs
        for cand in [c for c in candidates if c in plan.get(wname, ALL)]:
            todo.remove((wname, cand))
            fresh_aa = args.threshold is None and not wres["comparisons"]
            # A/A calibrations still to come: this workload's (if new) and every later one's
            later = {w for w, _ in todo if w != wname}
            aa_left = AA_SECONDS * (len(later) + (1 if fresh_aa else 0))
            if args.threshold is not None:
                aa_left = 0.0
            left = clock.left() - sweep_reserve - reserve - aa_left
            budget = None
            if args.blocks is None:
                budget = min(args.budget, left / (1 + len(todo)))
            if left < 1.0 or (budget is not None and budget < 1.0):
                result["skipped"].append(f"{wname} {cand}: time budget")
                print(f"[{label}] {wname} {cand}: skipped (time budget)", flush=True)
                continue
            if ref_out is None:
                ref_out = base(items)
                wres["padding_waste_baseline"] = base.last.padding_waste
            try:
                enc = gate_runners.encoder_for(cand)
            except Exception as exc:
                wres["comparisons"][cand] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            check = OutputCheck(exact=cand in EXACT and args.device == "cpu")
            try:  # a candidate with wrong outputs is refused before any timing
                check_before_timing(cand, enc, items, ref_out, check.exact)
            except WrongOutputs as exc:
                wres["comparisons"][cand] = {"refused": str(exc)}
                print(f"[{label}] {wname} {cand}: {exc}", flush=True)
                _write(args.out, result)
                continue
            prov = {
                "workload": wname,
                "device": args.device,
                "tf32": result["tf32"],
                "dtype": "float32",
                "input_sha256": wres["input_sha256"],
                "source_revision": result["source_revision"],
                "model_revision": data.sha256_file(HERE / "weights" / "encoder_digits.safetensors"),
                "compile_flags": "mx.compile (shape-specialized)" if cand == "compiled" else "",
                "batching": "tokens<=384,max 4" if cand == "token-batching" else "insertion,16",
            }
            t0 = time.time()
            try:
                res = run_bench(
                    _side(base, items),
                    _side(enc, items),
                    # one A/A threshold per workload, device and TF32 setting
                    workload=f"encoder_mlx {wname} {args.device} tf32={result['tf32']}",
                    budget=budget,
                    blocks=args.blocks,
                    block_size=args.block_size,
                    threshold=args.threshold,
                    check_outputs=check,
                    memory_probe=memory_probe,
                    names=("baseline", cand),
                    provenance=prov,
                )
            except Exception as exc:  # recorded; the other comparisons still run
                wres["comparisons"][cand] = {
                    "error": f"{type(exc).__name__}: {exc}",
                    "output_check": {"max_abs_vs_baseline": check.max_abs},
                }
                print(f"[{label}] {wname} {cand}: {type(exc).__name__}: {exc}", flush=True)
                _write(args.out, result)
                continue
            stats = enc.last
            amdahl = stage_amdahl(res.baseline, res.candidate, TARGET_STAGE[cand])
            raw[f"{wname}/{cand}"] = res
            save_samples(raw, samples_path(args.out))
            final = enc(items)
            entry = {
                "verdict": str(res.verdict),
                "describe": res.describe(),
                "speedup": res.speedup,
                "speedup_ci": [1 / res.ratio_ci[1], 1 / res.ratio_ci[0]]
                if res.ratio_ci[0] > 0
                else None,
                "threshold": res.threshold,
                "threshold_source": res.threshold_source,
                "blocks": res.blocks,
                "budget_s": budget,
                "baseline": res.baseline.summary(),
                "candidate": res.candidate.summary(),
                "memory_after_warmup": {
                    "baseline": res.baseline.memory_after_warmup,
                    cand: res.candidate.memory_after_warmup,
                },
                "weights_mib": {"baseline": weights_mib(base), cand: weights_mib(enc)},
                "padding_waste": {"baseline": base.last.padding_waste, cand: stats.padding_waste},
                "computed_tokens": {"baseline": base.last.padded_tokens, cand: stats.padded_tokens},
                "target_stage": TARGET_STAGE[cand],
                "target_fraction": amdahl["fraction"],
                "stage_speedup": amdahl["stage_speedup"],
                "amdahl_bound": amdahl["bound"],
                "output_check": {
                    "rule": "byte-equal" if check.exact else "finite, argmax agreement >= 0.9",
                    "max_abs_vs_baseline": max(check.max_abs, _max_abs(ref_out, final)),
                    "argmax_agreement": min(check.agreement, _agreement(ref_out, final)),
                },
                "warnings": list(res.warnings),
                "seconds": time.time() - t0,
            }
            if check.exact and not _equal(ref_out, final):
                raise SystemExit(f"{cand} changed the answer on {wname}")
            wres["comparisons"][cand] = entry
            print(f"[{label}] {wname} {cand}: {res.describe()}", flush=True)
            _write(args.out, result)
        _write(args.out, result)

    if args.p95_calls and len(p95_loads) > 1:
        p95_phase(p95_loads[1:], clock.left() - sweep_reserve)

    # 4. the block-local break-even sweep (one item of L tokens)
    if args.sweep_calls and clock.left() > 5.0:
        try:
            result["block_local_sweep"] = block_local_sweep(
                label, lengths=tuple(args.sweep_lengths), calls=args.sweep_calls
            )
        except Exception as exc:
            result["block_local_sweep"] = {"error": f"{type(exc).__name__}: {exc}"}
    elif args.sweep_calls:
        result["skipped"].append("block-local sweep: time budget")
    result["seconds"] = time.monotonic() - clock.start
    _write(args.out, result)


if __name__ == "__main__":
    main()
