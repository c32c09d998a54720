#!/usr/bin/env python3
"""The GPU runs of the encoder example: MLX CUDA on one H200, one call each (never in CI).

Run it from anywhere with its tree (a checkout, or the folder ``gpu/bundle.sh`` makes: ``src/``,
``examples/encoder_mlx``, ``wheels/``) and MLX CUDA installed into a ``pip install --target``
folder (``--mlx``, relative to the working directory; default ``.mlx``)::

    python3 .gpu-encoder/examples/encoder_mlx/gpu/run_gpu.py calibrate --mlx .mlx --out "$OUT"
    python3 .gpu-encoder/examples/encoder_mlx/gpu/run_gpu.py bench --mlx .mlx --out "$OUT"
    python3 examples/encoder_mlx/gpu/run_gpu.py calibrate --device cpu --smoke --out /tmp/g

(about 5 and 7 minutes on the GPU; the dry run on MLX's CPU takes about a minute per call).

Each call

1. makes importable what the machine lacks: for every package the example needs that does not
   import, the wheels of ``--wheels`` (default ``wheels/`` at the root; cp312 manylinux x86-64,
   see ``gpu/bundle.sh``) are unpacked into ``.site-encoder/`` (a wheel is a zip archive: no pip,
   no network), then everything is imported once more and a missing package stops the call with
   one line naming it;
2. records the environment (``env.json``: Python, packages, MLX device, ``nvidia-smi``);
3. runs its parts, each in its own process (MLX reads ``MLX_ENABLE_TF32`` once per process) with
   a share of the time budget (``--minutes``); a part that overruns is stopped, and what it wrote
   so far stays;
4. prints a short text table and writes it to ``summary.txt``.

``calibrate``: ``gpu_calibrate.py`` under ``MLX_ENABLE_TF32=0`` and under MLX's default (TF32
on). ``bench``: ``bench_encoder.py --plan study`` with TF32 at its default (each workload class
with the optimizations seed 003 names it for, p95, the block-local sweep), then ``fixed`` and
``variable`` with ``MLX_ENABLE_TF32=0``. ``--smoke`` shrinks every part to seconds for a dry run
on MLX's CPU. Everything is written under ``--out``; A/A thresholds are cached in
``--out/aa-cache``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[1]
ROOT = EXAMPLE.parents[1]

# import name -> wheel name prefixes that provide it (and what it imports)
NEEDED = {
    "numpy": [],
    "scipy": [],
    "mlx.core": [],
    "tokenizers": ["tokenizers"],
    "safetensors": ["safetensors"],
    "tomlkit": ["tomlkit"],
    "click": ["click"],
    "rich": ["rich", "markdown_it_py", "mdurl", "pygments"],
    "packaging": ["packaging"],
    "ml_dtypes": ["ml_dtypes"],
    "threadpoolctl": ["threadpoolctl"],
}
OPTIONAL = ("numba", "torch", "jax", "onnxruntime", "sklearn")


def _env(mlx: Path | None, site: Path) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(p) for p in (mlx, site, ROOT / "src") if p is not None and p.exists()]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _missing(env: dict[str, str], names) -> list[str]:
    code = (
        "import importlib, json\n"
        "bad = []\n"
        f"for n in {list(names)!r}:\n"
        "    try:\n"
        "        importlib.import_module(n)\n"
        "    except Exception:\n"
        "        bad.append(n)\n"
        "print(json.dumps(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    if out.returncode != 0:
        return list(names)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _unpack(wheels: Path, prefixes: list[str], site: Path) -> list[str]:
    done = []
    for prefix in prefixes:
        found = sorted(wheels.glob(f"{prefix}-*.whl")) if wheels.is_dir() else []
        if not found:
            continue
        with zipfile.ZipFile(found[-1]) as archive:
            archive.extractall(site)
        done.append(found[-1].name)
    return done


def bootstrap(mlx: Path | None, wheels: Path, site: Path) -> tuple[dict[str, str], dict]:
    """The environment the parts run in; exits with one line when a package cannot be had."""
    site.mkdir(parents=True, exist_ok=True)
    env = _env(mlx, site)
    missing = _missing(env, NEEDED)
    unpacked = []
    for name in missing:
        unpacked += _unpack(wheels, NEEDED[name], site)
    still = _missing(env, NEEDED) if missing else []
    if still:
        hint = f"no wheel for it in {wheels}" if wheels.is_dir() else f"{wheels} does not exist"
        if "mlx.core" in still:
            hint = f"MLX is installed into {mlx} (pip install --target) before this call"
        raise SystemExit(f"run_gpu.py: cannot import {', '.join(still)} ({hint})")
    info = {"missing_before": missing, "unpacked": unpacked}
    return env, info


def environment(env: dict[str, str], out: Path, info: dict) -> dict:
    code = (
        "import json, sys, platform\n"
        "import mlx.core as mx\n"
        "from importlib.metadata import version, PackageNotFoundError\n"
        "v = {}\n"
        f"for p in {['mlx', 'mlx-cuda-13', 'mlx-cpu', *NEEDED, *OPTIONAL]!r}:\n"
        "    p = p.split('.')[0]\n"
        "    try:\n"
        "        v[p] = version(p.replace('_', '-'))\n"
        "    except PackageNotFoundError:\n"
        "        v[p] = None\n"
        "dev = {}\n"
        "try:\n"
        "    dev = {k: str(x) for k, x in mx.device_info().items()}\n"
        "except Exception as e:\n"
        "    dev = {'error': str(e)}\n"
        "cuda = getattr(mx, 'cuda', None)\n"
        "print(json.dumps({'python': sys.version, 'platform': platform.platform(),\n"
        "    'mlx': mx.__version__, 'default_device': str(mx.default_device()),\n"
        "    'cuda_available': bool(cuda.is_available()) if cuda else None,\n"
        "    'device_info': dev, 'versions': v}))\n"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    facts: dict = {"bootstrap": info, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if res.returncode == 0:
        facts.update(json.loads(res.stdout.strip().splitlines()[-1]))
    else:
        facts["error"] = res.stderr[-2000:]
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
                "--format=csv",
            ],
            capture_output=True,
            text=True,
        )
        facts["nvidia_smi"] = smi.stdout.strip()
    facts["machine"] = platform.machine()
    (out / "env.json").write_text(json.dumps(facts, indent=2) + "\n")
    return facts


def run_part(name: str, argv: list[str], env: dict[str, str], seconds: float, out: Path) -> dict:
    """One part in its own process, output streamed and logged, stopped after ``seconds``."""
    start = time.monotonic()
    log = (out / f"{name}.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, *argv],
        cwd=EXAMPLE,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    )

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            log.flush()
            print(f"  {name}| {line.rstrip()[:220]}", flush=True)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=max(seconds, 1.0))
        status = "ok" if rc == 0 else f"exit {rc}"
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        status = f"stopped after {seconds:.0f} s (time share spent)"
    reader.join(timeout=5)
    log.close()
    took = time.monotonic() - start
    print(f"[{name}] {status} in {took:.0f} s", flush=True)
    return {"status": status, "seconds": took}


def _load(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _fmt(x, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


def summary_calibrate(out: Path, names: list[str]) -> list[str]:
    lines = []
    for name in names:
        res = _load(out / f"{name}.json")
        if not res:
            lines.append(f"{name}: no result")
            continue
        lines.append(f"{name}: {res.get('platform')} TF32={res.get('tf32')} {res.get('hardware')}")
        lines.append(
            "  claim                  proposal  bound      noise max   planted bug (smallest)"
        )
        for claim, r in res.get("exact", {}).items():
            if "error" in r:
                lines.append(f"  {claim:22s} error: {r['error'][:80]}")
                continue
            noise = (r.get("by_metric") or {}).get(r.get("metric"), {}).get("noise") or [None]
            model = [m for m in r.get("mutations", []) if m.get("kind") == "model"]
            bug = model[0].get("smallest_signal") if model else None
            proposal = "refused" if r.get("refused") else str(r.get("proposal"))
            lines.append(
                f"  {claim:22s} {proposal:9s} {_fmt(r.get('bound')):10s} "
                f"{_fmt(max(noise, key=lambda x: x or 0)):11s} {_fmt(bug)}"
            )
        sweep = res.get("sweep", {}).get("paths", {})
        if sweep:
            lines.append("  path            finite determ.  max-abs vs base  agreement a/c")
            for path, r in sweep.items():
                if "error" in r:
                    lines.append(f"  {path:15s} error: {r['error'][:80]}")
                    continue
                ag = r["agreement"]
                lines.append(
                    f"  {path:15s} {str(r['finite']):6s} {str(r['deterministic']):8s} "
                    f"{r['max_abs_vs_baseline']:<16.3g} {ag['action']:.3f}/{ag['choice']:.3f}"
                )
        quant = res.get("quantized_matmul", {})
        if quant:
            lines.append(f"  quantized matmul vs CPU dequantized: {quant.get('summary', quant)}")
        held = res.get("heldout", {}).get("variants", {})
        if held:
            lines.append("  held-out        acc a/c        agree a/c      drift    ECE")
            for variant, r in held.items():
                lines.append(
                    f"  {variant:15s} {r['action_accuracy']:.3f}/{r['choice_accuracy']:.3f}    "
                    f"{r['action_agreement']:.3f}/{r['choice_agreement']:.3f}    "
                    f"{r['prob_drift']:<8.3g} {r.get('action_ece', float('nan')):.3f}"
                )
        if res.get("skipped"):
            lines.append(f"  skipped: {'; '.join(res['skipped'])}")
    return lines


def summary_bench(out: Path, names: list[str]) -> list[str]:
    lines = []
    for name in names:
        res = _load(out / f"{name}.json")
        if not res:
            lines.append(f"{name}: no result")
            continue
        lines.append(f"{name}: {res.get('platform')}")
        for wname, lat in res.get("latency", {}).items():
            for path, r in lat.items():
                if "cold_s" not in r:
                    lines.append(f"  latency {wname:12s} {path:15s} {r}")
                    continue
                lines.append(
                    f"  latency {wname:12s} {path:15s} cold {1e3 * r['cold_s']:8.2f} ms  "
                    f"p50 {1e3 * r.get('p50_s', float('nan')):7.3f} ms  "
                    f"p95 {1e3 * r.get('p95_s', float('nan')):7.3f} ms  "
                    f"peak {r['memory']['peak_mib']:.1f} MiB"
                )
        for wname, w in res.get("workloads", {}).items():
            for cand, c in w.get("comparisons", {}).items():
                if "speedup" not in c:
                    lines.append(f"  {wname:12s} {cand:15s} {c.get('error', '?')[:90]}")
                    continue
                ci = c.get("speedup_ci") or [None, None]
                lines.append(
                    f"  {wname:12s} {cand:15s} {_fmt(c['speedup'], '.3f')}x "
                    f"[{_fmt(ci[0], '.3f')}, {_fmt(ci[1], '.3f')}] "
                    f"thr {_fmt(c['threshold'], '.3f')} "
                    f"{c['verdict']:12s} f={_fmt(c['target_fraction'], '.2f')} "
                    f"amdahl {_fmt(c['amdahl_bound'], '.3f')} "
                    f"maxabs {_fmt(c['output_check']['max_abs_vs_baseline'], '.2g')}"
                )
        sweep = res.get("block_local_sweep", {})
        if "error" in sweep:
            lines.append(f"  block-local sweep: {sweep['error']}")
        for row in sweep.get("rows", []):
            lines.append(
                f"  block-local L={row['length']:5d} dense {row['dense_ms']:.3f} ms "
                f"block-local {row['block_local_ms']:.3f} ms  x{row['speedup']:.2f}"
            )
        if res.get("skipped"):
            lines.append(f"  skipped: {'; '.join(res['skipped'])}")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("calibrate", "bench", "env"))
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-out")))
    ap.add_argument("--mlx", type=Path, default=Path(".mlx"), help="MLX's pip --target folder")
    ap.add_argument("--wheels", type=Path, default=ROOT / "wheels")
    ap.add_argument("--device", choices=("gpu", "cpu"), default="gpu")
    ap.add_argument("--minutes", type=float, help="time budget of the call (default 5 / 7)")
    ap.add_argument("--smoke", action="store_true", help="every part shrunk to seconds")
    ap.add_argument(
        "--parts", help="calibrate: gpu_calibrate.py's parts (default exact,sweep,heldout)"
    )
    ap.add_argument(
        "--bench-parts",
        default="default,off",
        help="bench: default (TF32 at its default), off (MLX_ENABLE_TF32=0), checks "
        "(gpu_calibrate.py --parts heldout,quant with TF32 at its default)",
    )
    ap.add_argument("--exclude", nargs="*", default=[], help="bench: paths left out (q8 q4)")
    ap.add_argument("--workloads", nargs="*", help="bench default: workload classes compared")
    ap.add_argument(
        "--checks-variants", default="baseline,q8", help="bench checks: held-out variants"
    )
    args = ap.parse_args()
    started = time.monotonic()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    mlx = args.mlx.resolve() if args.mlx.exists() else None
    env, info = bootstrap(mlx, args.wheels.resolve(), ROOT / ".site-encoder")
    env["PARITYGATE_CACHE_DIR"] = str(out / "aa-cache")
    facts = environment(env, out, info)
    print(
        f"python {facts.get('python', '?').split()[0]}, mlx {facts.get('mlx')} "
        f"({facts.get('default_device')}), cuda {facts.get('cuda_available')}, "
        f"unpacked {info['unpacked'] or 'nothing'}; {facts.get('nvidia_smi', 'no nvidia-smi')}",
        flush=True,
    )
    if args.what == "env":
        return
    minutes = args.minutes or (5.0 if args.what == "calibrate" else 7.0)
    budget = 60 * minutes - (time.monotonic() - started) - 10  # 10 s for the summary
    dev = ["--device", args.device]
    tf32_off = {**env, "MLX_ENABLE_TF32": "0"}
    tf32_default = {k: v for k, v in env.items() if k != "MLX_ENABLE_TF32"}
    parts: list[tuple[str, list[str], dict, float]] = []
    if args.what == "calibrate":
        smoke = ["--smoke"] if args.smoke else []
        if args.parts:
            smoke += ["--parts", args.parts]
        for name, part_env in (("calib-tf32-off", tf32_off), ("calib-tf32-default", tf32_default)):
            share = budget / 2
            argv = ["gpu_calibrate.py", *dev, *smoke, "--deadline", f"{share - 15:.0f}"]
            parts.append((name, [*argv, "--out", str(out / f"{name}.json")], part_env, share))
    else:
        if args.smoke:
            common = ["--threshold", "0.05", "--budget", "1", "--p95-calls", "3"]
            common += ["--sweep-calls", "2", "--sweep-lengths", "64", "130"]
            first = [*common, "--workloads", "fixed", "--only", "compiled", "q8"]
            second = [*common, "--workloads", "fixed", "--only", "pruned"]
            second += ["--p95-candidates", "baseline", "--sweep-calls", "0"]
        else:
            first = ["--plan", "study", "--budget", "6", "--p95-workloads", *P95_ALL]
            second = ["--plan", "study", "--budget", "4", "--workloads", "fixed", "variable"]
            second += ["--sweep-calls", "0", "--p95-candidates", "baseline", "compiled", "q8", "q4"]
        exclude = ["--exclude", *args.exclude] if args.exclude else []
        chosen = [x.strip() for x in args.bench_parts.split(",") if x.strip()]
        weights = {"default": 0.68, "off": 0.32, "checks": 0.3}
        if args.workloads:
            first = [*first, "--workloads", *args.workloads]
        if set(chosen) - set(weights):
            raise SystemExit(f"run_gpu.py: unknown bench part(s) in {args.bench_parts!r}")
        total = sum(weights[c] for c in chosen)
        for part in chosen:
            share = weights[part] / total * budget
            if part == "checks":
                name = "checks-tf32-default"
                argv = ["gpu_calibrate.py", *dev, "--parts", "heldout,quant"]
                argv += ["--heldout-variants", args.checks_variants]
                argv += ["--smoke"] if args.smoke else []
                argv += ["--deadline", f"{share - 15:.0f}", "--out", str(out / f"{name}.json")]
                parts.append((name, argv, tf32_default, share))
                continue
            name, part_env, extra = {
                "default": ("bench-tf32-default", tf32_default, first),
                "off": ("bench-tf32-off", tf32_off, second),
            }[part]
            argv = ["bench_encoder.py", *dev, *extra, *exclude, "--deadline", f"{share - 15:.0f}"]
            parts.append((name, [*argv, "--out", str(out / f"{name}.json")], part_env, share))
    status = {}
    for name, argv, part_env, share in parts:
        print(f"[{name}] python {' '.join(argv)} (share {share:.0f} s)", flush=True)
        status[name] = run_part(name, argv, part_env, share, out)
    names = [name for name, *_ in parts]
    if args.what == "calibrate":
        lines = summary_calibrate(out, names)
    else:
        bench_names = [n for n in names if n.startswith("bench")]
        lines = summary_bench(out, bench_names)
        lines += summary_calibrate(out, [n for n in names if n not in bench_names])
    lines.append(f"parts: {json.dumps(status)}; total {time.monotonic() - started:.0f} s")
    (out / "summary.txt").write_text("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)


P95_ALL = ["fixed", "variable", "distinct50", "rubric50", "duplicated50"]

if __name__ == "__main__":
    main()
