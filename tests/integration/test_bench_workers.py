"""The worker-process layer (paritygate.workers) and the benchmark sides that run in it."""

from __future__ import annotations

import bench_workloads
import pytest

from paritygate.bench import Verdict, run_bench
from paritygate.errors import InputError
from paritygate.workers import Worker, WorkerError, WorkerPool, importable_name


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITYGATE_CACHE_DIR", str(tmp_path / "cache"))


def test_a_worker_runs_named_functions_with_json_in_and_out():
    with Worker() as worker:
        assert worker.call("bench_workloads:chatty", 21) == {"twice": 42}  # print did not corrupt
        with pytest.raises(WorkerError, match="raised RuntimeError .*: planted failure") as err:
            worker.call("bench_workloads:fails")
        assert "bench_workloads.py" in err.value.remote_traceback
        assert worker.call("bench_workloads:chatty", 1) == {"twice": 2}  # still up after an error
        assert worker.call("bench_workloads:pid") == worker.pid
    assert worker.process.poll() is not None  # closed on exit


def test_a_pool_spreads_calls_over_fresh_processes():
    with WorkerPool(2) as pool:
        pids = pool.map("bench_workloads:pid", [()] * 4)
    assert len(set(pids)) == 2 and pids[0] == pids[2]


def test_importable_names():
    assert importable_name(bench_workloads.work_1x) == "bench_workloads:work_1x"
    assert importable_name("pkg.mod:fn") == "pkg.mod:fn"
    assert importable_name(lambda: 1) is None

    def local():
        return 1

    assert importable_name(local) is None


def test_sides_run_in_worker_processes_by_default_when_importable():
    result = run_bench(
        bench_workloads.work_1x,
        "bench_workloads:work_3x",
        workload="w",
        blocks=12,  # the interval then ignores the most extreme pairs a busy machine makes
        threshold=0.3,
        processes=2,
    )
    assert result.verdict is Verdict.SLOWER
    assert result.provenance["design"]["processes"].startswith("2 worker processes per side")
    assert result.provenance["mode"] == "2 processes"
    # closures stay in process; asking for workers with them is refused
    inproc = run_bench(lambda: None, lambda: None, workload="w", blocks=6, threshold=0.5)
    assert inproc.provenance["mode"] == "in-process"
    with pytest.raises(InputError, match="the candidate cannot be imported by name"):
        run_bench(bench_workloads.work_1x, lambda: None, workload="w", blocks=6, processes=2)


def test_outputs_are_checked_across_the_process_boundary():
    import numpy as np

    seen = []

    def check(a, b):
        seen.append((a, b))
        return all(np.array_equal(a[k], b[k]) for k in a)

    result = run_bench(
        "bench_workloads:work_1x",
        "bench_workloads:work_1x",
        workload="w",
        blocks=6,
        threshold=0.5,
        processes=1,
        check_outputs=check,
    )
    assert result.output_check.startswith("checked on the first call and after each of 6")
    assert np.array_equal(seen[0][0]["output"], np.ones(3))


# ---------------------------------------------------------------- the CPU clock


@pytest.mark.parametrize("processes", [0, 1])
def test_the_cpu_clock_leaves_out_time_the_process_does_not_run(processes):
    # a 50 ms sleep is invisible to the CPU clock and dominates the wall clock; the two sides
    # do the same CPU work (about 2 ms), so only the CPU clock can call them equivalent. Each
    # clock gets a threshold far from what the other one sees (about 1x against about 25x): on
    # a busy machine the work stretches (10 ms of sleep beside 2 ms of work stretched to 10 ms
    # gave 1.8x on the wall clock; here it went down to 3.3x), and waking up from the sleep
    # costs CPU time of its own (1 ms of work after a 30 ms sleep took 2x the CPU time of the
    # same work in a tight loop; here the CPU interval's top went up to 1.5x)
    kwargs = dict(workload="w", blocks=12, processes=processes, noise=False)
    sides = ("bench_workloads:works", "bench_workloads:sleeps_then_works")
    cpu = run_bench(*sides, clock="cpu", threshold=3.0, **kwargs)  # equivalent: within 4x
    wall = run_bench(*sides, clock="wall", threshold=0.5, **kwargs)  # slower: beyond 1.5x
    assert cpu.provenance["design"]["clock"] == "cpu"
    assert "cpu clock" in cpu.provenance["mode"]
    assert cpu.verdict is Verdict.EQUIVALENT, cpu.pair_ratios
    assert wall.verdict is Verdict.SLOWER, wall.pair_ratios
    shares = cpu.provenance["design"]["cpu_over_wall"]
    assert set(shares) == {"baseline", "candidate"}
    assert shares["candidate"] < 0.9  # it sleeps most of its wall time


def test_the_cpu_clock_is_refused_where_it_would_measure_nothing():
    import mlx.core as mx

    with pytest.raises(InputError, match="clock='cpu' cannot time .*mx.eval"):
        run_bench(
            lambda: mx.ones(3) * 2,
            lambda: mx.ones(3),
            workload="w",
            blocks=6,
            threshold=0.5,
            clock="cpu",
            noise=False,
        )
    with pytest.raises(InputError, match="clock must be one of"):
        run_bench(lambda: 1, lambda: 1, workload="w", blocks=6, threshold=0.5, clock="gpu")


def test_the_cpu_clock_flags_work_spread_over_threads():
    import hashlib
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(2)
    data = b"x" * (1 << 20)

    def two_threads():
        # two threads hashing (which releases the GIL): CPU time up to twice the wall time
        list(pool.map(lambda _: hashlib.sha256(data).digest(), range(2)))

    result = run_bench(
        two_threads,
        two_threads,
        workload="w",
        blocks=6,
        threshold=0.5,
        clock="cpu",
        noise=False,
        processes=0,
    )
    pool.shutdown()
    # on a machine whose other core is busy the share may stay near 1; the warning then must
    # be absent, and present whenever the measured share says several threads worked
    share = result.provenance["design"]["cpu_over_wall"]["baseline"]
    flagged = any("several threads" in w for w in result.warnings)
    assert flagged == (share > 1.1)


def test_an_interrupted_pool_ends_its_workers_at_once_even_mid_call():
    """Ctrl-C (or SIGTERM, which the command line turns into the same unwinding) inside a pool
    kills every worker, one in the middle of a 60-second call included, instead of waiting for
    it; a pool left normally closes its workers and leaves none registered."""
    import threading
    import time

    from paritygate import children

    with WorkerPool(2) as pool:
        assert len(children.live()) == 2
    assert children.live() == [] and all(w.process.returncode == 0 for w in pool.workers)

    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with WorkerPool(2) as pool:
            pids = [w.pid for w in pool.workers]
            assert sorted(children.live()) == sorted(pids)
            busy = threading.Thread(
                target=lambda: pytest.raises(WorkerError, pool.workers[0].call, "time:sleep", 60),
                daemon=True,
            )
            busy.start()
            time.sleep(0.5)
            raise KeyboardInterrupt
    assert time.monotonic() - started < 10
    assert all(w.process.returncode is not None for w in pool.workers)
    assert children.live() == []
