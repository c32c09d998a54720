"""Scale-out: a CPU-bound 40-case gate serially, at --jobs 2 and on a local Ray cluster.

Every process runs one BLAS / OpenMP thread (set here before numpy loads; the pool and the Ray
actors get the runner's ``threads = 1``). The three engines run side by side, interleaved, in
each round, and the script prints the ratios against the serial gate of the same round. A second
workload of tiny units (no compute) gives each engine's overhead per unit.

    python benchmarks/bench_execution.py --rounds 3 --cases 40 --work 60
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ[_name] = "1"

import argparse  # noqa: E402
import hashlib  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import textwrap  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

MODEL = """
import numpy as np


def run(case):
    inputs = case.load()
    x = inputs["x"]
    a = x.copy()
    for _ in range(int(inputs["work"])):  # CPU-bound: WORK matrix products of 192 x 192 float64
        a = np.tanh(a @ x)
    return {"y": a[:4]}
"""

SPEC = """
format_version = 8
outputs = ["y"]

{cases}
[runners.reference]
role = "reference"
callable = "model:run"

[runners.cand]
role = "candidate"
callable = "model:run"

[claims.y-exact]
outputs = ["y"]
metric = "max_abs"
bound = 0
oracle = "equivalence"
status = "provisional"
"""


def project(root: Path, cases: int, work: int) -> Path:
    rng = np.random.default_rng(0)
    (root / "cases").mkdir(parents=True)
    blocks = []
    for i in range(cases):
        path = root / "cases" / f"c{i:02d}.npz"
        np.savez(path, x=rng.standard_normal((192, 192)) / 14, work=np.int64(work))
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        blocks.append(f'[cases.c{i:02d}]\npath = "cases/c{i:02d}.npz"\nsha256 = "{digest}"\n')
    (root / "model.py").write_text(textwrap.dedent(MODEL))
    spec = root / "parity.toml"
    spec.write_text(SPEC.format(cases="\n".join(blocks)))
    return spec


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--work", type=int, default=60, help="matrix products per case")
    parser.add_argument("--no-ray", action="store_true")
    args = parser.parse_args()

    from paritygate.execution import plan
    from paritygate.gate import run_gate
    from paritygate.references import record
    from paritygate.spec import load_spec

    engines = {"serial": plan(jobs=1), "pool --jobs 2": plan(jobs=2)}
    if not args.no_ray:
        import ray

        started = time.perf_counter()
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        print(f"ray.init (local cluster, 2 CPUs): {time.perf_counter() - started:.1f} s")
        engines["ray (local, 2 CPUs)"] = plan(ray="local")

    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workload, work in (("cpu-bound", args.work), ("tiny units", 0)):
            spec = load_spec(project(Path(tmp) / workload.replace(" ", "-"), args.cases, work))
            record(spec)
            walls: dict[str, list[float]] = {name: [] for name in engines}
            for _ in range(args.rounds):
                for name, chosen in engines.items():
                    started = time.perf_counter()
                    result = run_gate(spec, execution=chosen)
                    walls[name].append(time.perf_counter() - started)
                    assert result.passed, result.errors
            rows[workload] = walls

    load = os.getloadavg()
    print(
        f"\n{args.cases} cases, {args.rounds} rounds, one BLAS thread per process, "
        f"load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}, python {sys.version.split()[0]}"
    )
    for workload, walls in rows.items():
        print(f"\n{workload}")
        print("| engine | median s | per round s | x serial (median of per-round ratios) |")
        print("| --- | ---: | --- | ---: |")
        serial = walls["serial"]
        for name, times in walls.items():
            ratio = statistics.median(s / t for s, t in zip(serial, times, strict=True))
            shown = ", ".join(f"{t:.2f}" for t in times)
            print(f"| {name} | {statistics.median(times):.2f} | {shown} | {ratio:.2f} |")
        if workload == "tiny units":
            for name, times in walls.items():
                extra = (statistics.median(times) - statistics.median(serial)) / args.cases
                print(f"overhead per unit against serial, {name}: {extra * 1000:.1f} ms")


if __name__ == "__main__":
    main()
