"""Validation of the benchmark harness against pyperf and pytest-benchmark, side by side.

Each *cell* is (tool, workload, change, budget, condition). A *trial* runs one comparison of a
baseline against a candidate and records what the tool called it (faster / slower / no call).
Rounds run one trial of every selected cell in a shuffled order, so the tools' trials are
interleaved in time and meet the same machine. Results are appended as JSON lines; ``--report``
prints the table with one-sided 95 % Clopper–Pearson bounds.

Workloads (module-level, so worker processes import them by name):

- ``numpy_1ms``  elementwise ``exp`` + ``sqrt`` over ~150k floats (about 1 ms quiet);
- ``py_20us``    a pure-Python loop (about 20 us);
- ``silero``     one chunk through the Silero VAD ONNX model (ONNX Runtime, 1 thread; ~0.2 ms);
- ``mlx``        a 96x96 MLX matmul chain with ``mx.eval`` (MLX CPU).

Changes are a true fraction of extra work, never a busy-wait (which inflates under preemption):
``+10%`` and ``+3%`` process 1.10x and 1.03x as many elements (numpy; elementwise, so time is
linear in the elements) or iterations (Python). A/A uses two separately built instances of the
same workload (separately allocated arrays). ``--verify`` times every variant in isolation.

Conditions: ``ambient`` (whatever else the machine runs) and ``busy`` (plus one process that
keeps a core busy for the whole trial). Load averages are recorded with every trial.

The competitors run from this interpreter: ``pip install pyperf pytest-benchmark`` first (they
are not test dependencies); a selected tool that is missing stops the script before any trial.

    python benchmarks/bench_harness_validation.py --minutes 40 --out DIR
    python benchmarks/bench_harness_validation.py --report DIR
    python benchmarks/bench_harness_validation.py --verify
    python benchmarks/bench_harness_validation.py --overhead
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

# ----------------------------------------------------------------------------- workloads

_SIZES = {"numpy_1ms": 150_000, "py_20us": 400}
_FACTOR = {"base": 1.0, "same": 1.0, "plus10": 1.10, "plus3": 1.03}
_cache: dict[tuple[str, str], object] = {}


def _build(workload: str, variant: str):
    """A zero-argument callable for (workload, variant); 'same' is a separately built A."""
    factor = _FACTOR[variant]
    if workload == "numpy_1ms":
        import numpy as np

        n = round(_SIZES[workload] * factor)
        # 'same' holds the same values in separately allocated arrays (values change exp's time)
        x = np.array(np.random.default_rng(0).random(n) + 0.5, copy=True)
        out = np.empty_like(x)

        def numpy_1ms():
            np.exp(x, out=out)
            np.sqrt(out, out=out)
            return out

        return numpy_1ms
    if workload == "py_20us":
        k = round(_SIZES[workload] * factor)
        values = list(range(k))

        def py_20us():
            total = 0
            for v in values:
                total += v * v
            return total

        return py_20us
    if workload == "silero":
        sys.path.insert(0, str(ROOT / "examples" / "silero_vad_mlx"))
        import numpy as np
        import runners

        session = runners.onnx_session() if variant != "same" else _fresh_silero_session()
        chunk = np.random.default_rng(0).standard_normal((1, 576)).astype(np.float32) * 0.1
        state = np.zeros((2, 1, 128), dtype=np.float32)
        sr = np.array(16000, dtype=np.int64)

        def silero():
            return session.run(None, {"input": chunk, "state": state, "sr": sr})[0]

        return silero
    if workload == "mlx":
        import mlx.core as mx

        a = mx.random.normal((96, 96), key=mx.random.key(1))
        mx.eval(a)

        def mlx_chain():
            y = a
            for _ in range(4):
                y = mx.tanh(y @ a)
            return y

        return mlx_chain
    raise SystemExit(f"unknown workload {workload!r}")


def _fresh_silero_session():
    import importlib.util

    import onnxruntime

    path = Path(importlib.util.find_spec("silero_vad").origin).parent / "data" / "silero_vad.onnx"
    opts = onnxruntime.SessionOptions()
    opts.inter_op_num_threads = opts.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(
        str(path), providers=["CPUExecutionProvider"], sess_options=opts
    )


def call(workload: str, variant: str):
    """The callable a worker imports by name: ``bench_harness_validation:call_<w>__<v>``."""
    key = (workload, variant)
    if key not in _cache:
        _cache[key] = _build(workload, variant)
    return _cache[key]()


def _named(workload: str, variant: str) -> str:
    return f"bench_harness_validation:fn_{workload}__{variant}"


def __getattr__(name: str):
    # fn_<workload>__<variant>: a module-level name for every (workload, variant)
    match = re.fullmatch(r"fn_(\w+?)__(\w+)", name)
    if not match:
        raise AttributeError(name)
    workload, variant = match.groups()

    def fn():
        return call(workload, variant)

    fn.__qualname__ = fn.__name__ = name
    globals()[name] = fn
    return fn


# ----------------------------------------------------------------------------- tools


def _trial_paritygate(workload, change, budget, processes=None, clock="wall"):
    from paritygate.bench import run_bench

    result = run_bench(
        _named(workload, "base"),
        _named(workload, "same" if change == "aa" else change),
        workload=f"validation {workload}",
        budget=budget,
        processes=processes,
        clock=clock,
    )
    return {
        "call": result.verdict.value,
        "ratio": result.ratio,
        "ci": list(result.ratio_ci),
        "blocks": result.blocks,
        "stop": result.stop_reason,
        "threshold": result.threshold,
        "mode": result.provenance.get("mode"),
        "cpu_over_wall": result.provenance["design"].get("cpu_over_wall"),
    }


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT / "src"), env.get("PYTHONPATH", "")])
    return env


def _trial_pyperf(workload, change, budget, fast=False):
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for side, variant in (("a", "base"), ("b", "same" if change == "aa" else change)):
            out = Path(tmp) / f"{side}.json"
            cmd = [
                sys.executable,
                "-m",
                "pyperf",
                "timeit",
                "--quiet",
                "-s",
                f"from bench_harness_validation import call; call({workload!r}, {variant!r})",
                f"call({workload!r}, {variant!r})",
                "-o",
                str(out),
            ]
            if fast:
                cmd.insert(4, "--fast")
            subprocess.run(cmd, env=_env(), check=True, capture_output=True, timeout=600)
            files.append(str(out))
        text = subprocess.run(
            [sys.executable, "-m", "pyperf", "compare_to", *files],
            env=_env(),
            capture_output=True,
            text=True,
            timeout=120,
        ).stdout
    call_ = "none"
    if "Not significant" not in text:
        if "slower" in text:
            call_ = "slower"
        elif "faster" in text:
            call_ = "faster"
    return {"call": call_, "output": text.strip()[-300:]}


_PTB_TEST = """
from bench_harness_validation import call


def test_side(benchmark):
    call({workload!r}, {variant!r})
    benchmark(call, {workload!r}, {variant!r})
"""


def _trial_pytest_benchmark(workload, change, budget, percent=5.0):
    """pytest-benchmark at the same budget (max time per side = budget / 2), then its compare
    rule ``--benchmark-compare-fail=median:5%`` applied both ways."""
    medians = []
    with tempfile.TemporaryDirectory() as tmp:
        for side, variant in (("a", "base"), ("b", "same" if change == "aa" else change)):
            test = Path(tmp) / f"test_{side}.py"
            test.write_text(_PTB_TEST.format(workload=workload, variant=variant))
            out = Path(tmp) / f"{side}.json"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pytest",
                    "-q",
                    "-p",
                    "no:cacheprovider",
                    "-p",
                    "no:paritygate",
                    str(test),
                    f"--benchmark-max-time={budget / 2}",
                    f"--benchmark-json={out}",
                    f"--rootdir={tmp}",
                ],
                env=_env(),
                check=True,
                capture_output=True,
                timeout=600,
                cwd=tmp,
            )
            medians.append(json.loads(out.read_text())["benchmarks"][0]["stats"]["median"])
    ratio = medians[1] / medians[0]
    call_ = (
        "slower"
        if ratio > 1 + percent / 100
        else "faster"
        if ratio < 1 / (1 + percent / 100)
        else "none"
    )
    return {"call": call_, "ratio": ratio}


TOOLS = {
    "paritygate": _trial_paritygate,
    "paritygate-inprocess": lambda w, c, b: _trial_paritygate(w, c, b, processes=0),
    "paritygate-cpu": lambda w, c, b: _trial_paritygate(w, c, b, clock="cpu"),
    "pyperf": _trial_pyperf,
    "pyperf-fast": lambda w, c, b: _trial_pyperf(w, c, b, fast=True),
    "pytest-benchmark": _trial_pytest_benchmark,
}

# (tool, workload, change, budget): the cells of the table, most important first
CELLS = [
    ("paritygate", "numpy_1ms", "aa", 10),
    ("paritygate", "numpy_1ms", "plus10", 30),
    ("paritygate", "numpy_1ms", "plus3", 30),
    ("pyperf", "numpy_1ms", "aa", 30),
    ("pyperf", "numpy_1ms", "plus10", 30),
    ("pyperf", "numpy_1ms", "plus3", 30),
    ("pyperf-fast", "numpy_1ms", "aa", 30),
    ("pyperf-fast", "numpy_1ms", "plus10", 30),
    ("pyperf-fast", "numpy_1ms", "plus3", 30),
    ("pytest-benchmark", "numpy_1ms", "aa", 30),
    ("pytest-benchmark", "numpy_1ms", "plus10", 30),
    ("pytest-benchmark", "numpy_1ms", "plus3", 30),
    ("paritygate", "py_20us", "aa", 10),
    ("paritygate", "silero", "aa", 10),
    ("paritygate", "mlx", "aa", 10),
    ("paritygate-inprocess", "numpy_1ms", "aa", 10),
    # the CPU clock (time spent preempted left out); MLX outputs need the wall clock
    ("paritygate-cpu", "numpy_1ms", "aa", 10),
    ("paritygate-cpu", "numpy_1ms", "plus10", 30),
    ("paritygate-cpu", "numpy_1ms", "plus3", 30),
    ("paritygate-cpu", "py_20us", "aa", 10),
    ("paritygate-cpu", "silero", "aa", 10),
]


def _busy_core():
    return subprocess.Popen([sys.executable, "-c", "while True: pass"])


def run(
    minutes: float,
    out_dir: Path,
    condition: str,
    cells: list[tuple],
    rotating: list[tuple] = (),
    per_round: int = 0,
) -> None:
    """Rounds of ``cells`` (repeats allowed) plus ``per_round`` of the ``rotating`` cells, taken
    in turn, all shuffled together so that every tool meets the same machine."""
    from paritygate.bench._run import HARNESS_VERSION

    out_dir.mkdir(parents=True, exist_ok=True)
    log = out_dir / "trials.jsonl"
    deadline = time.time() + 60 * minutes
    rng = random.Random(int(time.time()))
    round_ = 0
    turn = 0
    while time.time() < deadline:
        order = list(cells)
        for _ in range(per_round if rotating else 0):
            order.append(rotating[turn % len(rotating)])
            turn += 1
        rng.shuffle(order)
        for cell in order:
            if time.time() >= deadline:
                break
            tool, workload, change, budget = cell
            busy = _busy_core() if condition == "busy" else None
            start = time.time()
            load_before = os.getloadavg()
            try:
                outcome = TOOLS[tool](workload, change, budget)
            except Exception as exc:  # a failed trial is recorded, not hidden
                outcome = {"call": "error", "error": f"{type(exc).__name__}: {exc}"[:400]}
            finally:
                if busy is not None:
                    busy.kill()
                    busy.wait()
            record = {
                "tool": tool,
                "workload": workload,
                "change": change,
                "budget_s": budget,
                "condition": condition,
                "round": round_,
                "harness_version": HARNESS_VERSION,
                "wall_s": round(time.time() - start, 2),
                "load_before": [round(x, 2) for x in load_before],
                "load_after": [round(x, 2) for x in os.getloadavg()],
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(start)),
                **outcome,
            }
            with log.open("a") as handle:
                handle.write(json.dumps(record) + "\n")
            print(json.dumps(record), flush=True)
        round_ += 1


# ----------------------------------------------------------------------------- report


def clopper_pearson_upper(k: int, n: int, level: float = 0.95) -> float:
    from scipy.stats import beta

    return 1.0 if k == n else float(beta.ppf(level, k + 1, n - k))


def clopper_pearson_lower(k: int, n: int, level: float = 0.95) -> float:
    from scipy.stats import beta

    return 0.0 if k == 0 else float(beta.ppf(1 - level, k, n - k + 1))


def report(out_dir: Path) -> str:
    rows: dict[tuple, list[dict]] = {}
    for line in (out_dir / "trials.jsonl").read_text().splitlines():
        r = json.loads(line)
        rows.setdefault(
            (r["tool"], r["workload"], r["change"], r["budget_s"], r["condition"]), []
        ).append(r)
    lines = [
        "| tool | workload | change | budget | condition | trials | result | 95% CP bound "
        "| load (1 min) | wall s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key in sorted(rows):
        tool, workload, change, budget, condition = key
        trials = [r for r in rows[key] if r["call"] != "error"]
        errors = len(rows[key]) - len(trials)
        n = len(trials)
        if not n:
            lines.append(
                f"| {tool} | {workload} | {change} | {budget} s | {condition} "
                f"| 0 ({errors} errors) | | | | |"
            )
            continue
        if change == "aa":
            k = sum(r["call"] in ("faster", "slower") for r in trials)
            result = f"false call {k}/{n}"
            bound = f"upper {clopper_pearson_upper(k, n):.1%}"
        else:
            k = sum(r["call"] == "slower" for r in trials)
            wrong = sum(r["call"] == "faster" for r in trials)
            result = f"detected {k}/{n}" + (f" ({wrong} called faster)" if wrong else "")
            bound = f"lower {clopper_pearson_lower(k, n):.1%}"
        load = statistics.median(r["load_before"][0] for r in trials)
        wall = statistics.median(r["wall_s"] for r in trials)
        extra = f" ({errors} errors)" if errors else ""
        lines.append(
            f"| {tool} | {workload} | {change} | {budget} s | {condition} | {n}{extra} "
            f"| {result} | "
            f"{bound} | {load:.1f} | {wall:.0f} |"
        )
    ratios = {}
    for key, trials in rows.items():
        if key[0].startswith("paritygate") and key[2] == "aa" and key[1] == "numpy_1ms":
            ratios[key[0]] = [r["ratio"] for r in trials if "ratio" in r]
    text = "\n".join(lines)
    for tool, values in sorted(ratios.items()):
        if values:
            text += (
                f"\n\nA/A ratio (two separately allocated instances), {tool}: median "
                f"{statistics.median(values):.4f}, range {min(values):.4f}..{max(values):.4f}, "
                f"n={len(values)}"
            )
    return text


# ----------------------------------------------------------------------------- checks


def verify() -> None:
    """Each change in isolation, in CPU time of this thread (insensitive to preemption, which
    a shared machine has plenty of): per-call medians of every variant, interleaved, ratios."""
    for workload in ("numpy_1ms", "py_20us"):
        fns = {v: _build(workload, v) for v in ("base", "same", "plus10", "plus3")}
        times = {v: [] for v in fns}
        number = 50 if workload == "numpy_1ms" else 2000
        for _ in range(15):
            for v, fn in fns.items():
                start = time.thread_time()
                for _ in range(number):
                    fn()
                times[v].append((time.thread_time() - start) / number)
        base = statistics.median(times["base"])
        print(
            f"{workload}: base {base * 1e6:.1f} us; "
            + ", ".join(f"{v} {statistics.median(t) / base:.4f}x" for v, t in times.items())
        )


def overhead() -> None:
    """Harness overhead per sample with numpy outputs, side by side with the v1 timed region.

    A sample of one call to a function that returns a numpy array costs the call plus the
    harness; the median over 1.4 M samples (interleaved with the anchors) bounds the harness's
    share from above. Anchors: a no-op through the same loop, and the v1 default sync (imports
    and flattening inside the timed region), emulated here."""
    import numpy as np

    from paritygate.bench import _timing

    out = np.ones(1000)

    def returns_numpy():
        return out

    def noop():
        return None

    def v1_sync(value):
        from paritygate.backends import synchronize
        from paritygate.outputs import flatten_outputs

        for leaf in flatten_outputs(value).values():
            synchronize(leaf)

    sync, how = _timing.plan_sync(returns_numpy(), None)
    rows = {
        "no-op, v2 loop": [],
        "numpy output, v2 loop (sync: " + how + ")": [],
        "numpy output, v1 sync": [],
    }
    for _ in range(7):
        rows["no-op, v2 loop"].extend(_timing.sample(noop, None, 1, 200_000))
        rows["numpy output, v2 loop (sync: " + how + ")"].extend(
            _timing.sample(returns_numpy, sync, 1, 200_000)
        )
        rows["numpy output, v1 sync"].extend(_timing.sample(returns_numpy, v1_sync, 1, 20_000))
    base = statistics.median(rows["no-op, v2 loop"])
    for name, values in rows.items():
        med = statistics.median(values)
        print(f"{name:<60} median per sample {med * 1e9:7.0f} ns  ({med / base:.2f}x the no-op)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--out", type=Path, default=HERE / "validation")
    parser.add_argument("--condition", choices=("ambient", "busy"), default="busy")
    parser.add_argument(
        "--cells", default="all", help="comma-separated cell indices (repeats allowed) or 'all'"
    )
    parser.add_argument("--rotate", default="", help="cell indices taken in turn, a few per round")
    parser.add_argument("--per-round", type=int, default=2, help="rotating cells per round")
    parser.add_argument("--report", type=Path)
    parser.add_argument("--verify", action="store_true")
    parser.add_argument("--overhead", action="store_true")
    args = parser.parse_args(argv)
    if args.report:
        print(report(args.report))
        return 0
    if args.verify:
        verify()
        return 0
    if args.overhead:
        overhead()
        return 0
    cells = CELLS if args.cells == "all" else [CELLS[int(i)] for i in args.cells.split(",")]
    rotating = [CELLS[int(i)] for i in args.rotate.split(",") if i]
    import importlib.util

    modules = {"pyperf": "pyperf", "pyperf-fast": "pyperf", "pytest-benchmark": "pytest-benchmark"}
    for tool, *_ in cells + rotating:
        module = modules.get(tool)
        if module and importlib.util.find_spec(module.replace("-", "_")) is None:
            parser.error(f"cell {tool!r} needs {module} in this interpreter (pip install {module})")
    run(args.minutes, args.out, args.condition, cells, rotating, args.per_round)
    return 0


if __name__ == "__main__":
    sys.exit(main())
