"""MLX's CUDA backend against its CPU backend, on a machine with an NVIDIA GPU (offline).

    python gpu_equivalence.py --out calibration/gpu.json

Everything runs in one process, on the spec's 16 cases:

* paired no-op checks on the GPU (the three no-op claims of parity.toml, measured there): the
  proxy at threshold 0 against the uncompiled GPU pipeline, the eager closure at threshold 0 against
  the compiled GPU pipeline, compiled against uncompiled;
* the GPU pipeline against the CPU pipeline of the same process: paritygate.calibration with the
  built-in output mutations and body block 3 of the model scaled by 1.01 / zeroed on the GPU;
* where the eager closure is not byte-equal to the compiled pipeline on the GPU: calibration of
  that difference (the seed's "changed numerical path", measured);
* the cache at the default threshold on the GPU: skipped steps and SSIM against the GPU's vanilla
  image, next to the CPU's skipped steps.

Needs ``mlx[cuda13]`` (or cuda12) and paritygate importable.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform
from pathlib import Path

import mlx.core as mx
import numpy as np

HERE = Path(__file__).resolve().parent


def main() -> None:
    import gate_runners
    import teacache
    from common import decode
    from model import Pipeline, load_model, mutate_block

    from paritygate import load_spec, paired
    from paritygate.calibration import DEFAULT_MUTATIONS, calibrate
    from paritygate.structured import compare_images

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=HERE / "calibration" / "gpu.json")
    parser.add_argument("--device", default="gpu", help="'cpu' for a dry run of this script")
    parser.add_argument("--cases", type=int, default=16)
    args = parser.parse_args()

    spec = load_spec(HERE / "parity.toml")
    cases = list(spec.cases.values())[: args.cases]
    model = load_model()
    plain, compiled = Pipeline(model), Pipeline(model, compiled=True)

    def run(device, pipeline, case):
        with mx.stream(device):
            out = pipeline.sample(*gate_runners.case_inputs(case))
            mx.eval(out)
        return np.array(out)[0]

    gpu, cpu = (mx.gpu if args.device == "gpu" else mx.cpu), mx.cpu
    report: dict = {
        "platform": f"MLX {mx.__version__} CUDA, {platform.system()} {platform.machine()}",
        "device": str(mx.default_device()),
        "date": datetime.date.today().isoformat(),
    }
    try:
        import subprocess

        report["gpu"] = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except Exception as exc:  # noqa: BLE001 - informational only
        report["gpu"] = f"unknown ({exc})"

    # -- no-op checks on the GPU --------------------------------------------------------------
    def with_cache(pipeline, variant, case, threshold=0.0):
        cache = teacache.install(pipeline, variant, rel_l1_thresh=threshold)
        try:
            return {"sample": run(gpu, pipeline, case)}, cache
        finally:
            teacache.uninstall(pipeline)

    noop = {}
    for name, base, cand in (
        (
            "proxy-noop",
            lambda c: {"sample": run(gpu, plain, c)},
            lambda c: with_cache(plain, "proxy", c)[0],
        ),
        (
            "eager-noop",
            lambda c: {"sample": run(gpu, compiled, c)},
            lambda c: with_cache(compiled, "eager", c)[0],
        ),
        (
            "compiled-noop",
            lambda c: {"sample": run(gpu, plain, c)},
            lambda c: {"sample": run(gpu, compiled, c)},
        ),
    ):
        results = [
            paired(
                lambda base=base, c=c: base(c),
                lambda cand=cand, c=c: cand(c),
                label=f"{name} {c.name}",
            )
            for c in cases
        ]
        noop[name] = {
            "cases": len(results),
            "passed": sum(bool(r) for r in results),
            "max_abs": max(
                (d.max_abs or 0.0) for r in results for ch in r.checks for d in ch.differences
            )
            if any(not r for r in results)
            else 0.0,
            "failing_checks": sorted(
                {f"{ch.order} ({ch.check})" for r in results for ch in r.failing()}
            ),
            "messages": [m for r in results for m in r.messages()][:6],
        }
        print(name, noop[name]["passed"], "/", len(results), noop[name]["max_abs"])
    report["noop_on_gpu"] = noop

    # -- GPU against CPU ----------------------------------------------------------------------
    cpu_samples = {c.name: run(cpu, plain, c) for c in cases}

    def mutated(factor):
        def make(case):
            restore = mutate_block(model, 3, factor)
            try:
                return {"sample": run(gpu, plain, case)}
            finally:
                restore()

        return make

    result = calibrate(
        lambda c: ({"sample": cpu_samples[c.name]}, {"sample": run(gpu, plain, c)}),
        cases,
        metric="max_abs",
        mutations=DEFAULT_MUTATIONS,
        model_mutations={
            "gpu-block3-scaled-1.01": mutated(1.01),
            "gpu-block3-zeroed": mutated(0.0),
        },
        margin_for={"another GPU or CUDA library version": 4.0},
        min_cases=min(16, len(cases)),
        claim_id="gpu-max-abs",
        label="MLX CUDA against MLX CPU",
    )
    print(result.summary())
    report["gpu_vs_cpu"] = result.to_dict()

    # -- the eager closure against the compiled pipeline, both on the GPU ------------------------
    if not (noop["eager-noop"]["passed"] == len(cases)):
        eager = calibrate(
            lambda c: ({"sample": run(gpu, compiled, c)}, with_cache(compiled, "eager", c)[0]),
            cases,
            metric="max_abs",
            mutations=DEFAULT_MUTATIONS,
            model_mutations={"gpu-block3-scaled-1.01": mutated(1.01)},
            margin_for={"another GPU or CUDA library version": 4.0},
            min_cases=min(16, len(cases)),
            claim_id="gpu-eager-max-abs",
            label="EagerTeaCache at threshold 0 against the compiled pipeline, both on the GPU",
        )
        print(eager.summary())
        report["gpu_eager_vs_compiled"] = eager.to_dict()

    # -- the cache on the GPU -----------------------------------------------------------------
    cached = []
    for case in cases:
        vanilla = decode(run(gpu, plain, case))
        out, cache = with_cache(plain, "proxy", case, teacache.DEFAULT_THRESHOLD)
        ssim = compare_images(decode(out["sample"]), vanilla, data_range=1.0).ssim
        with mx.stream(cpu):
            from paritygate import count_calls

            with count_calls(["model:DiT.body"]) as counter:
                gate_runners.proxy_cached(case)
            steps = gate_runners.shared_pipeline().steps
            cpu_skips = steps - counter.counts["model:DiT.body"]
        cached.append(
            {
                "case": case.name,
                "skipped_gpu": cache.skips_per_run[0],
                "skipped_cpu": cpu_skips,
                "ssim_gpu": ssim,
            }
        )
    report["cache_on_gpu"] = cached
    report["cache_on_gpu_summary"] = {
        "skipped_min": min(r["skipped_gpu"] for r in cached),
        "skipped_max": max(r["skipped_gpu"] for r in cached),
        "same_skips_as_cpu": sum(r["skipped_gpu"] == r["skipped_cpu"] for r in cached),
        "ssim_min": min(r["ssim_gpu"] for r in cached),
    }
    print(report["cache_on_gpu_summary"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2, default=str) + "\n")


if __name__ == "__main__":
    main()
