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
        blocks=10,  # the interval then ignores the most extreme pairs a busy machine makes
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
