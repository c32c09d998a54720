"""GPU calibration of the encoder example's claims (MLX CUDA on an H200; never in CI).

    MLX_ENABLE_TF32=0 python gpu_calibrate.py --out calib-tf32-off.json
    python gpu_calibrate.py --out calib-tf32-default.json      # MLX's default: TF32 on
    python gpu_calibrate.py --device cpu --smoke --out /tmp/calib-smoke.json   # a CPU dry run

``gpu/run_gpu.py calibrate`` runs both settings, each in its own process (MLX reads
``MLX_ENABLE_TF32`` once). Measures, on the MLX GPU device, what calibrate_claims.py measures on
the CPU, and what the GPU adds:

* ``exact``: the five exact claims of parity-gpu.toml (the correctness sweep, every runner on the
  GPU) through ``paritygate.calibration.calibrate_claim``: the noise of each optimization against
  the GPU baseline in one process, with the built-in output mutations and the optimization's
  planted bug. Byte equality is not expected on the GPU for compile / pruning / block-local /
  batching (other kernels and reduction orders for other shapes): the result proposes a
  calibrated max-abs bound, or refuses when the planted bug falls inside the noise;
* ``sweep``: every path over every sweep case (and the workload cases of parity.toml), three
  calls each: finite outputs, byte-identical repeated calls (deterministic), max-abs difference
  and argmax agreement against the baseline; the compiled closure is run over every shape in
  turn (shape changes after compilation);
* ``heldout``: fp32 / q8 / q4 and the 2-bit bug over the 600 held-out items (accuracy with
  Clopper-Pearson intervals, McNemar against fp32, agreement, probability drift, ECE);
* MLX's peak memory of the whole run.

It writes nothing into the specs: the JSON becomes GPU claims (class h200) with their bases,
kept apart from the CPU claims. ``--deadline`` bounds the run: parts that do not fit are skipped
and listed under ``skipped``, and the JSON is rewritten after each part.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

PATHS = ("compiled", "token-batching", "pruned", "prefix-cache", "block-local", "q8", "q4")
SMOKE_CASES = ["len-64", "len-129", "batch-17", "options-1-to-5"]


def _write(path: Path, result: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def sweep_checks(
    spec_paths: list[Path], repeats: int = 3, case_names=None, progress=None, paths=None
) -> dict:
    """Finite, deterministic outputs over repeated calls; each path against the baseline."""
    import data
    import gate_runners

    from paritygate import load_spec

    cases = []
    for path in spec_paths:
        for name, case in load_spec(path).cases.items():
            if case_names is None or name in case_names:
                cases.append((name, data.read_items(case.load())))
    out: dict = {"cases": [name for name, _ in cases], "repeats": repeats, "paths": {}}
    base = {name: gate_runners.run_items("baseline", items) for name, items in cases}
    for path in paths or ("baseline", *PATHS):
        try:
            out["paths"][path] = _check_path(path, cases, base, repeats)
        except Exception as exc:  # one path's failure must not lose the others' evidence
            out["paths"][path] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"sweep {path}: {out['paths'][path]}", flush=True)
        if progress is not None:
            progress(out)
    return out


def quantized_matmul_check(bits_list=(8, 4), rows=(1, 8, 45, 64, 130, 512), repeats=3) -> dict:
    """``nn.QuantizedLinear`` on the default device against the same packed weights dequantized
    and multiplied on the CPU (``mx.dequantize``), for the model's Linear shapes: finite,
    deterministic over repeated calls, max-abs difference. Isolates the quantized kernel from
    the model."""
    import mlx.core as mx
    import mlx.nn as nn
    import model

    cfg = model.load_config()
    shapes = sorted(
        {
            (cfg.dim, 3 * cfg.dim),
            (cfg.dim, 2 * cfg.enc_hidden),
            (cfg.enc_hidden, cfg.dim),
            (cfg.dim, cfg.head_hidden),
            (cfg.head_hidden, cfg.dim),
        }
    )
    device = mx.default_device()
    rng = np.random.default_rng(0)
    out: dict = {"device": str(device), "rows": list(rows), "results": []}
    for bits in bits_list:
        for fan_in, fan_out in shapes:
            layer = nn.Linear(fan_in, fan_out)
            layer.weight = mx.array(rng.standard_normal((fan_out, fan_in)).astype(np.float32) / 8)
            q = nn.QuantizedLinear.from_linear(layer, group_size=model.GROUP_SIZE, bits=bits)
            with mx.stream(mx.cpu):
                w = mx.dequantize(
                    q.weight, q.scales, q.biases, group_size=model.GROUP_SIZE, bits=bits
                )
            for m in rows:
                x = mx.array(rng.standard_normal((m, fan_in)).astype(np.float32))
                runs = [np.array(q(x)) for _ in range(repeats)]
                with mx.stream(mx.cpu):
                    ref = np.array(x @ w.T + q.bias)
                finite = all(np.isfinite(r).all() for r in runs)
                row = {
                    "bits": bits,
                    "in": fan_in,
                    "out": fan_out,
                    "rows": m,
                    "finite": bool(finite),
                    "deterministic": all(np.array_equal(r, runs[0]) for r in runs),
                    "max_abs_vs_cpu_dequantized": float(np.nanmax(np.abs(runs[0] - ref)))
                    if finite
                    else None,
                }
                out["results"].append(row)
                print(f"quantized matmul: {row}", flush=True)
    bad = [r for r in out["results"] if not r["finite"] or not r["deterministic"]]
    worst = max((r["max_abs_vs_cpu_dequantized"] or 0.0 for r in out["results"]), default=0.0)
    out["summary"] = {"cases": len(out["results"]), "bad": len(bad), "worst_max_abs": worst}
    print(f"quantized matmul check: {out['summary']}", flush=True)
    for r in bad[:12]:
        print(f"  bad: {r}", flush=True)
    return out


def _check_path(path: str, cases, base, repeats: int) -> dict:
    """One path over every case, ``repeats`` calls each, against the baseline's outputs."""
    import gate_runners

    finite = deterministic = True
    max_abs = 0.0
    agree = {"action": [], "choice": []}
    worst_case = None
    for name, items in cases:
        runs = [gate_runners.run_items(path, items) for _ in range(repeats)]
        for run in runs:
            for key in ("action", "choice"):
                finite &= bool(np.isfinite(run[key]).all())
                deterministic &= bool(np.array_equal(run[key], runs[0][key]))
        for key in ("action", "choice"):
            diff = float(np.abs(runs[0][key].astype(np.float64) - base[name][key]).max())
            if diff > max_abs:
                max_abs, worst_case = diff, name
            agree[key] += (runs[0][key].argmax(1) == base[name][key].argmax(1)).tolist()
    return {
        "finite": finite,
        "deterministic": deterministic,
        "max_abs_vs_baseline": max_abs,
        "worst_case": worst_case,
        "agreement": {k: float(np.mean(v)) for k, v in agree.items()},
        "items": len(agree["action"]),
    }


def exact_claims(result: dict, claims, spec: Path, cases, left, out: Path) -> None:
    """The exact claims, paired, with the planted bugs; the JSON rewritten after each."""
    import calibrate_claims as cc

    for claim_id in claims:
        if left() < 30:
            result["skipped"].append(f"exact {claim_id}: time budget")
            continue
        t0 = time.monotonic()
        try:
            result["exact"].update(cc.exact([claim_id], spec=spec, write=False, cases=cases))
        except Exception as exc:  # one claim's failure must not lose the others' evidence
            result["exact"][claim_id] = {"error": f"{type(exc).__name__}: {exc}"}
            print(f"exact {claim_id}: {type(exc).__name__}: {exc}", flush=True)
        result.setdefault("exact_seconds", {})[claim_id] = time.monotonic() - t0
        _write(out, result)


MARGIN = 0.03  # parity-heldout.toml's stated non-inferiority margin (QUALITY.md)


def noninferiority(items, outs, margin: float = MARGIN) -> dict:
    """Each variant against the float32 baseline of the same run, paired, through the claim
    metric the gate uses (``accuracy_noninferiority``): the difference, its one-sided 95 % lower
    bound, McNemar's exact p, and whether it clears minus the margin."""
    from paritygate import claim_metrics

    entry = claim_metrics.get("accuracy_noninferiority")
    labels = {
        "action": np.array([i.digit for i in items]),
        "choice": np.array([i.answer for i in items]),
    }
    result: dict = {"margin": margin, "variants": {}}
    for name, out in outs.items():
        if name == "baseline":
            continue
        row = {}
        for head, label in labels.items():
            rows = claim_metrics.Rows(
                [out[head]], [label], [outs["baseline"][head]], [], {}, (head,), bound=-margin
            )
            lower = entry.measure(rows)
            keep = ("difference", "candidate_accuracy", "reference_accuracy", "mcnemar_exact_p")
            row[head] = {k: rows.evidence.get(k) for k in keep}
            row[head]["lower_bound"] = lower
            row[head]["holds"] = lower is not None and lower >= -margin
            row[head]["summary"] = rows.evidence.get("summary")
            print(f"non-inferiority {name} {head}: {row[head]['summary']}", flush=True)
        result["variants"][name] = row
    return result


def quantization_report(variants) -> dict:
    """Which layers each quantized variant quantized on this device and which stayed float, why."""
    import gate_runners

    report = {}
    for name in variants:
        if name in ("q8", "q4"):
            info = gate_runners.encoder_for(name).quant_info
            report[name] = info
            print(
                f"quantization {name} ({info.get('backend')}): {len(info['quantized'])} "
                f"quantized, skipped: {info.get('reasons')}",
                flush=True,
            )
    return report


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--smoke", action="store_true", help="a dry run in seconds (CPU)")
    ap.add_argument("--deadline", type=float, help="seconds for the whole run")
    ap.add_argument("--skip-heldout", action="store_true")
    ap.add_argument(
        "--heldout-variants",
        default="baseline,q8,q4,two-bit-weights",
        help="held-out variants (the 2-bit bug is 'two-bit-weights')",
    )
    ap.add_argument(
        "--parts",
        default="exact,sweep,heldout",
        help="comma-separated, in this order: exact, sweep, heldout, quant (a check of the "
        "quantized matmul alone)",
    )
    args = ap.parse_args()
    parts = [x.strip() for x in args.parts.split(",") if x.strip()]
    unknown = set(parts) - {"exact", "sweep", "heldout", "quant"}
    if unknown:
        raise SystemExit(f"gpu_calibrate.py: unknown part(s) {', '.join(sorted(unknown))}")
    start = time.monotonic()

    def left() -> float:
        return float("inf") if args.deadline is None else args.deadline - (time.monotonic() - start)

    import mlx.core as mx

    mx.set_default_device(mx.gpu if args.device == "gpu" else mx.cpu)
    import calibrate_claims as cc

    spec = HERE / ("parity-gpu.toml" if args.device == "gpu" else "parity-sweep.toml")
    claims = ["block-local-exact"] if args.smoke else list(cc.EXACT_PLANS)
    cases = SMOKE_CASES if args.smoke else None
    hardware = cc._hardware()
    if args.device == "gpu":
        hardware = hardware.replace("MLX CPU", "MLX GPU")
    result: dict = {
        "platform": f"MLX {mx.__version__} {args.device.upper()}",
        "tf32": os.environ.get("MLX_ENABLE_TF32", "default (on)") if args.device == "gpu" else None,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "hardware": hardware,
        "spec": spec.name,
        "smoke": args.smoke,
        "exact": {},
        "skipped": [],
    }
    mx.reset_peak_memory()
    for part in parts:
        if part == "exact":
            exact_claims(result, claims, spec, cases, left, args.out)
        elif part == "sweep":
            if left() > 30:
                t0 = time.monotonic()
                specs = [spec] if args.smoke else [spec, HERE / "parity.toml"]

                def progress(sweep: dict) -> None:
                    result["sweep"] = sweep
                    _write(args.out, result)

                result["sweep"] = sweep_checks(
                    specs, repeats=2 if args.smoke else 3, case_names=cases, progress=progress
                )
                result["sweep_seconds"] = time.monotonic() - t0
            else:
                result["skipped"].append("sweep checks: time budget")
        elif part == "heldout" and not args.skip_heldout:
            if left() > 20:
                t0 = time.monotonic()
                try:
                    chosen = args.heldout_variants.split(",")
                    run = cc.heldout_outputs(
                        names=tuple(v for v in chosen if v != "two-bit-weights"),
                        bug="two-bit-weights" if "two-bit-weights" in chosen else None,
                        limit=60 if args.smoke else None,
                    )
                    result["heldout"] = cc.heldout_metrics(run["items"], run["outputs"])
                    result["noninferiority"] = noninferiority(run["items"], run["outputs"])
                    result["quantization"] = quantization_report(chosen)
                except Exception as exc:
                    result["heldout"] = {"error": f"{type(exc).__name__}: {exc}"}
                    print(f"held-out: {result['heldout']['error']}", flush=True)
                result["heldout_seconds"] = time.monotonic() - t0
            else:
                result["skipped"].append("held-out metrics: time budget")
        elif part == "quant":
            try:
                result["quantized_matmul"] = quantized_matmul_check()
            except Exception as exc:
                result["quantized_matmul"] = {"error": f"{type(exc).__name__}: {exc}"}
        _write(args.out, result)
    result["peak_memory_mib"] = mx.get_peak_memory() / 1024.0**2
    result["seconds"] = time.monotonic() - start
    _write(args.out, result)
    print(json.dumps({k: v for k, v in result.items() if k in ("platform", "tf32", "skipped")}))


if __name__ == "__main__":
    main()
