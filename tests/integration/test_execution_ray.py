"""The Ray engine on a local cluster started inside the tests: the serial answer, a runner's
resources, an actor that dies, a hung unit."""

from __future__ import annotations

import json

import pytest
import ray  # the test extra installs it: these tests never skip
from spec_helpers import copy_box_port, plant_scale_bug
from test_execution import CASES, comparable, faulty_project

from paritygate.cli import main
from paritygate.execution import plan
from paritygate.gate import run_gate
from paritygate.references import load_reference, record
from paritygate.spec import load_spec


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, resources={"gpu-x": 1})
    yield
    ray.shutdown()


def test_ray_gives_the_serial_answer_both_ways(cluster, tmp_path):
    project = copy_box_port(tmp_path)
    spec = load_spec(project / "parity.toml")
    record(spec)
    serial = run_gate(spec)
    on_ray = run_gate(spec, execution=plan(ray="local"))
    assert serial.passed and on_ray.passed
    assert on_ray.provenance["execution"]["engine"] == "ray"
    assert json.dumps(comparable(on_ray.to_dict())) == json.dumps(comparable(serial.to_dict()))
    plant_scale_bug(project)
    serial = run_gate(load_spec(project / "parity.toml"))
    on_ray = run_gate(load_spec(project / "parity.toml"), execution=plan(ray="local"))
    assert not serial.passed and not on_ray.passed
    assert comparable(on_ray.to_dict()) == comparable(serial.to_dict())


def test_ray_records_what_a_serial_record_records(cluster, tmp_path):
    a_spec = load_spec(copy_box_port(tmp_path / "a") / "parity.toml")
    b_spec = load_spec(copy_box_port(tmp_path / "b") / "parity.toml")
    record(a_spec)
    record(b_spec, execution=plan(ray="local"))
    a, b = load_reference(a_spec), load_reference(b_spec)
    for case in a.cases:
        assert {k: v.tobytes() for k, v in a.outputs(case).items()} == {
            k: v.tobytes() for k, v in b.outputs(case).items()
        }


def test_a_runner_asks_ray_for_its_resources(cluster, tmp_path):
    path = faulty_project(
        tmp_path,
        candidate='factory = "tiny:loaded_once"\nresources = { num_cpus = 1, "gpu-x" = 1 }',
    )
    result = run_gate(load_spec(path), execution=plan(ray="local"))
    assert result.passed, result.errors
    # one slot of "gpu-x" on the cluster: one actor, the model loaded once for six cases
    assert len((tmp_path / "activations.txt").read_text().split()) == 1


def test_an_actor_that_dies_is_a_failure_and_is_retried_when_allowed(cluster, tmp_path):
    path = faulty_project(tmp_path, execution="[execution]\nretries = 1\n")
    (tmp_path / "faults.json").write_text(json.dumps({"c2": "kill"}))
    result = run_gate(load_spec(path), execution=plan(load_spec(path), ray="local"))
    assert not result.passed
    (error,) = result.errors
    assert error.startswith("runner cand, case c2: crash: ray actor ")
    assert "died while running it: the Ray actor died" in error and "(tried 2 times)" in error
    assert all(v.passed for v in result.verdicts if v.case != "c2")
    (tmp_path / "faults.json").write_text(json.dumps({"c2": "kill-once"}))
    result = run_gate(load_spec(path), execution=plan(load_spec(path), ray="local"))
    assert result.passed, result.errors
    assert result.provenance["execution"]["retried"] == ["cand/c2"]


def test_a_hung_unit_on_ray_is_cancelled_at_its_timeout(cluster, tmp_path):
    path = faulty_project(tmp_path, candidate='callable = "tiny:faulty"\ntimeout = 2')
    (tmp_path / "faults.json").write_text(json.dumps({"c4": "hang"}))
    result = run_gate(load_spec(path), execution=plan(ray="local"))
    assert not result.passed
    (error,) = result.errors
    assert error.startswith("runner cand, case c4: timeout: no result within 2 s")
    assert {v.case for v in result.verdicts if v.passed} == set(CASES) - {"c4"}


def test_ray_from_the_command_line(cluster, tmp_path, capsys, monkeypatch):
    path = faulty_project(tmp_path)
    assert main(["gate", str(path), "--ray", "local"]) == 0
    assert main(["record", str(path), "--ray", "local", "-y"]) == 0
    capsys.readouterr()
    monkeypatch.setitem(__import__("sys").modules, "ray", None)  # Ray not installed
    assert main(["gate", str(path), "--ray", "local"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "paritygate: error: the Ray engine needs Ray, which is not installed: "
        "pip install 'paritygate[ray]'"
    )


def test_a_runner_no_node_can_place_fails_the_gate_instead_of_waiting(cluster, tmp_path):
    path = faulty_project(
        tmp_path, candidate='callable = "tiny:faulty"\nresources = { "gpu-h100" = 1 }'
    )
    result = run_gate(load_spec(path), execution=plan(ray="local"))
    assert not result.passed
    (error,) = result.errors
    assert error.startswith("runner cand: import: the Ray cluster cannot place it: it asks for")
    assert "gpu-h100 1" in error


BENCH_TABLE = """
[benchmarks.loop]
baseline = "work_mod:one"
candidate = "work_mod:one"
workload = "loop, alone on a node"
blocks = 6
threshold = 0.5
processes = 0
"""


def test_a_benchmark_gets_a_ray_node_alone_or_is_refused_saying_why(cluster, tmp_path, capsys):
    import time

    (tmp_path / "work_mod.py").write_text("def one():\n    return sum(range(2000))\n")
    table = tmp_path / "bench.toml"
    table.write_text(BENCH_TABLE)
    args = ["bench", "run", str(table), "--ray", "local", "--json", str(tmp_path / "out")]

    @ray.remote(num_cpus=1)
    class Busy:  # another unit holding a CPU of the only node
        def ping(self) -> int:
            return 1

    busy = Busy.remote()
    ray.get(busy.ping.remote())
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "benchmark loop refused: no node of the Ray cluster is idle (" in err
    assert "1 of 2 CPU taken); timing needs a node alone" in err
    ray.kill(busy)
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    assert main(args) in (0, 1)  # the verdict is the benchmark's; it ran, alone
    data = json.loads((tmp_path / "out" / "loop.json").read_text())
    assert data["workload"] == "loop, alone on a node" and data["baseline"]["end_to_end_s"]


def test_ray_calibrates_what_a_serial_run_calibrates(cluster, tmp_path, capsys):
    import numpy as np
    from spec_helpers import make_project
    from test_cli_calibrate import CACHE_CLAIM, CASES, MODEL, SPEC, _calibration_json

    rng = np.random.default_rng(3)
    cases = {c: {"x": rng.standard_normal((6, 8))} for c in CASES}
    project = make_project(tmp_path, SPEC + CACHE_CLAIM, modules={"calib.py": MODEL}, cases=cases)
    args = ["calibrate", str(project), "--claim", "y-cache", "--mutations", "shift"]
    args += ["--model-mutation", "never skips=calib:never_skips"]
    serial, on_ray = tmp_path / "serial.json", tmp_path / "ray.json"
    assert main([*args, "--json", str(serial)]) == 0
    assert main([*args, "--ray", "local", "--json", str(on_ray)]) == 0
    assert _calibration_json(on_ray) == _calibration_json(serial)
    assert "caught in 16/16 cases by the activity band" in capsys.readouterr().out
