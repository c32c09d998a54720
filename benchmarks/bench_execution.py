"""Scale-out: a CPU-bound 40-case gate serially, at --jobs 2 and on a local Ray cluster; the
language-model example's gate on the same three engines; a simulated cluster of 64 hardware
classes running 10,000 tiny units.

Every process runs one BLAS / OpenMP thread (set here before numpy loads; the pool and the Ray
actors get the runner's ``threads = 1``). The three engines run side by side, interleaved, in
each round, and the script prints the ratios against the serial gate of the same round. A second
workload of tiny units (no compute) gives each engine's overhead per unit. The load average
before and after is printed: on a shared machine it says what else ran.

    python benchmarks/bench_execution.py --rounds 3 --cases 40 --work 60
    python benchmarks/bench_execution.py --lm --rounds 3         # examples/lm_port/parity.toml
    python benchmarks/bench_execution.py --cluster --units 10000 --classes 64
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


def _kernel(work: int) -> None:
    x = np.random.default_rng(0).standard_normal((192, 192)) / 14
    a = x.copy()
    for _ in range(work):
        a = np.tanh(a @ x)


def ceiling(work: int) -> float:
    """The machine's own two-process speedup at this moment, without paritygate: two
    processes each running one case's kernel against the same two run one after the other (on
    a shared machine other people's work moves it from second to second)."""
    import multiprocessing

    def timed(count: int) -> float:
        processes = [multiprocessing.Process(target=_kernel, args=(work,)) for _ in range(count)]
        started = time.perf_counter()
        for process in processes:
            process.start()
        for process in processes:
            process.join()
        return time.perf_counter() - started

    return 2 * timed(1) / timed(2)


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


CLUSTER_SPEC = """
format_version = 8
outputs = ["y"]

{cases}
[runners.reference]
role = "reference"
callable = "model:run"
{runners}
[claims.y-exact]
outputs = ["y"]
metric = "max_abs"
bound = 0
oracle = "equivalence"
status = "provisional"
"""

CLUSTER_RUNNER = """
[runners.{name}]
role = "candidate"
callable = "model:run"
resources = {{ num_cpus = {cpus}, "{node}" = 1 }}
"""


def cluster(units: int, classes: int, actors: int) -> None:
    """One local Ray node declaring ``classes`` custom resources ("node-00" ...), one candidate
    runner per hardware class asking for its own, and ``units`` tiny units (no compute) over
    them: the throughput of the execution layer and its overhead per unit. Each runner's actor
    asks for 2 / ``actors`` CPUs, so that at most ``actors`` actors live at once on the 2 CPUs
    (memory: one Python process each)."""
    import ray

    from paritygate.execution import execute, plan
    from paritygate.spec import load_spec

    per_class = max(1, units // classes)
    nodes = [f"node-{i:02d}" for i in range(classes)]
    started = time.perf_counter()
    ray.init(
        num_cpus=2,
        resources={node: 1 for node in nodes},
        include_dashboard=False,
        log_to_driver=False,
    )
    took = time.perf_counter() - started
    print(f"ray.init (1 node, 2 CPUs, {classes} node resources): {took:.1f} s")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        spec_path = project(root, per_class, 0)
        cases = spec_path.read_text().split("[runners.reference]")[0].split("\n", 3)[3]
        runners = "".join(
            CLUSTER_RUNNER.format(name=f"on-{node}", node=node, cpus=2 / actors) for node in nodes
        )
        spec_path.write_text(CLUSTER_SPEC.format(cases=cases, runners=runners))
        spec = load_spec(spec_path)
        names = [f"on-{node}" for node in nodes]
        case_names = list(spec.cases)
        total = len(names) * len(case_names)
        done_at: list[float] = []

        def progress(stage: str, done: int, all_units: int) -> None:
            done_at.append(time.perf_counter())

        started = time.perf_counter()
        executed = execute(spec, names, case_names, plan(ray="local"), progress=progress)
        wall = time.perf_counter() - started
    failed = [o for o in executed.outcomes.values() if o.failure is not None]
    assert not failed and not executed.activation, (failed[:3], executed.activation)
    assert len(executed.outcomes) == total
    ran = sum(o.seconds for o in executed.outcomes.values())
    load_after = os.getloadavg()
    print(
        f"{total} units ({len(names)} runners x {len(case_names)} cases) over {classes} "
        f"node resources: {wall:.1f} s wall, {total / wall:.0f} units/s, "
        f"{wall / total * 1000:.2f} ms per unit end to end; the units themselves ran "
        f"{ran:.1f} s in all ({ran / total * 1000:.2f} ms each), overhead "
        f"{(wall - ran) / total * 1000:.2f} ms per unit; {len(executed.workers)} actors; "
        f"load average {load_before[0]:.1f} before, {load_after[0]:.1f} after"
    )
    ray.shutdown()


def lm_gate(rounds: int, with_ray: bool) -> None:
    """The language-model example's gate (examples/lm_port/parity.toml) serially, at --jobs 2
    and on a local Ray cluster, interleaved per round, on a copy of the example."""
    import shutil

    from paritygate.execution import plan
    from paritygate.gate import run_gate
    from paritygate.spec import load_spec

    example = Path(__file__).resolve().parents[1] / "examples" / "lm_port"
    engines = {"serial": plan(jobs=1), "pool --jobs 2": plan(jobs=2)}
    if with_ray:
        import ray

        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
        engines["ray (local, 2 CPUs)"] = plan(ray="local")
    walls: dict[str, list[float]] = {name: [] for name in engines}
    load_before = os.getloadavg()
    verdicts = {}
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "lm_port"
        shutil.copytree(example, copy, ignore=shutil.ignore_patterns("parity-reports"))
        spec = load_spec(copy / "parity.toml")
        for _ in range(rounds):
            for name, chosen in engines.items():
                started = time.perf_counter()
                result = run_gate(spec, execution=chosen)
                walls[name].append(time.perf_counter() - started)
                verdicts[name] = [(v.claim_id, v.case, v.passed) for v in result.verdicts]
    load_after = os.getloadavg()
    same = all(v == verdicts["serial"] for v in verdicts.values())
    print(
        f"\nlanguage-model gate ({len(spec.cases)} cases, {len(spec.runners) - 1} candidates), "
        f"{rounds} rounds, load average {load_before[0]:.1f} before, {load_after[0]:.1f} after; "
        f"same verdicts on every engine: {same}"
    )
    print("| engine | median s | per round s | x serial (median of per-round ratios) |")
    print("| --- | ---: | --- | ---: |")
    serial = walls["serial"]
    for name, times in walls.items():
        ratio = statistics.median(s / t for s, t in zip(serial, times, strict=True))
        shown = ", ".join(f"{t:.1f}" for t in times)
        print(f"| {name} | {statistics.median(times):.1f} | {shown} | {ratio:.2f} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", type=int, default=40)
    parser.add_argument("--work", type=int, default=60, help="matrix products per case")
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--lm", action="store_true", help="the language-model example's gate")
    parser.add_argument("--cluster", action="store_true", help="the simulated cluster")
    parser.add_argument("--units", type=int, default=10_000)
    parser.add_argument("--classes", type=int, default=64)
    parser.add_argument("--actors", type=int, default=16, help="actors alive at once (cluster)")
    args = parser.parse_args()
    if args.cluster:
        return cluster(args.units, args.classes, args.actors)
    if args.lm:
        return lm_gate(args.rounds, not args.no_ray)

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
    ceilings: list[float] = []
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        for workload, work in (("cpu-bound", args.work), ("tiny units", 0)):
            spec = load_spec(project(Path(tmp) / workload.replace(" ", "-"), args.cases, work))
            record(spec)
            walls: dict[str, list[float]] = {name: [] for name in engines}
            for _ in range(args.rounds):
                if work:
                    ceilings.append(ceiling(4 * work))
                for name, chosen in engines.items():
                    started = time.perf_counter()
                    result = run_gate(spec, execution=chosen)
                    walls[name].append(time.perf_counter() - started)
                    assert result.passed, result.errors
            rows[workload] = walls

    load = os.getloadavg()
    print(
        f"\n{args.cases} cases, {args.rounds} rounds, one BLAS thread per process, "
        f"load average {load_before[0]:.1f} before, {load[0]:.1f} {load[1]:.1f} {load[2]:.1f} "
        f"after (1, 5, 15 min), python {sys.version.split()[0]}"
    )
    shown = ", ".join(f"{c:.2f}" for c in ceilings)
    print(
        f"the machine's own 2-process ceiling per round (two kernels of 4 cases at once against "
        f"one after the other, no paritygate): {shown}"
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
