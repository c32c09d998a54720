"""The execution layer: the same answer serially and on a pool of workers, one activation per
worker, workers that die or hang, and bad input."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest
from spec_helpers import TINY_MODEL, copy_box_port, make_project, plant_scale_bug

from paritygate.cli import main
from paritygate.errors import SpecError, UserError
from paritygate.execution import RUN_SPECIFIC_FIELDS, plan
from paritygate.gate import run_gate
from paritygate.references import load_reference, record
from paritygate.spec import load_spec


def comparable(result: dict) -> dict:
    """A result's JSON without the fields docs/scale-out.md lists as run-specific."""
    data = json.loads(json.dumps(result))
    for dotted in RUN_SPECIFIC_FIELDS:
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node.get(part, {})
        node.pop(last, None)
    return data


def test_the_pool_gives_the_serial_answer_both_ways(tmp_path):
    project = copy_box_port(tmp_path)
    spec = load_spec(project / "parity.toml")
    record(spec)
    serial = run_gate(spec)
    pooled = run_gate(spec, execution=plan(jobs=2))
    assert serial.passed and pooled.passed
    assert pooled.provenance["execution"]["engine"] == "pool"
    assert pooled.provenance["execution"]["workers"] == 2
    assert comparable(pooled.to_dict()) == comparable(serial.to_dict())
    assert json.dumps(comparable(pooled.to_dict())) == json.dumps(comparable(serial.to_dict()))

    plant_scale_bug(project)  # the planted regression fails the same claims, the same way
    serial = run_gate(load_spec(project / "parity.toml"))
    pooled = run_gate(load_spec(project / "parity.toml"), execution=plan(jobs=2))
    assert not serial.passed and not pooled.passed
    assert comparable(pooled.to_dict()) == comparable(serial.to_dict())
    assert [v.claim_id for v in pooled.verdicts if not v.passed] == [
        v.claim_id for v in serial.verdicts if not v.passed
    ]


def test_a_pool_records_what_a_serial_record_records(tmp_path):
    serial_project = copy_box_port(tmp_path / "serial")
    pooled_project = copy_box_port(tmp_path / "pooled")
    serial_spec = load_spec(serial_project / "parity.toml")
    pooled_spec = load_spec(pooled_project / "parity.toml")
    record(serial_spec)
    record(pooled_spec, execution=plan(jobs=2))
    a, b = load_reference(serial_spec), load_reference(pooled_spec)
    assert list(a.cases) == list(b.cases)
    for case in a.cases:
        left, right = a.outputs(case), b.outputs(case)
        assert list(left) == list(right)
        for name in left:
            assert left[name].dtype == right[name].dtype
            assert left[name].tobytes() == right[name].tobytes()
    # one writer: the pool's workers wrote nothing into the references folder
    assert sorted(p.name for p in pooled_spec.references.iterdir()) == sorted(
        p.name for p in serial_spec.references.iterdir()
    )


# A factory that notes each activation (the process that loaded "the model"), a candidate that
# dies by SIGKILL or hangs on the cases a file names.
FAULTY = (
    TINY_MODEL
    + """

import os
import signal
from pathlib import Path

HERE = Path(__file__).parent


def loaded_once():
    with open(HERE / "activations.txt", "a") as handle:
        handle.write(f"{os.getpid()}\\n")
    return candidate32


def faulty(case):
    plan = HERE / "faults.json"
    faults = __import__("json").loads(plan.read_text()) if plan.exists() else {}
    fault = faults.get(case.name)
    if fault == "kill-once":
        faults[case.name] = None
        # atomically: a worker running another case may read the plan at this moment
        staged = plan.with_name(f"faults-{os.getpid()}.tmp")
        staged.write_text(__import__("json").dumps(faults))
        os.replace(staged, plan)
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "hang":
        import time

        time.sleep(120)
    return candidate32(case)
"""
)

FAULTY_SPEC = """
format_version = 8
outputs = ["y", "logits"]

[waived]
logits = "the pre-activation of y, which the claims already gate"

{cases}
[runners.reference]
role = "reference"
callable = "tiny:reference"

[runners.cand]
role = "candidate"
{candidate}

[claims.y-close]
outputs = ["y"]
metric = "max_abs"
bound = 1e-5
oracle = "equivalence"
status = "provisional"
{execution}
"""

CASES = [f"c{i}" for i in range(6)]


def faulty_project(tmp_path, candidate='callable = "tiny:faulty"', execution=""):
    cases = "".join(
        f'[cases.{c}]\npath = "cases/{c}.npz"\nsha256 = "{{sha:{c}}}"\n\n' for c in CASES
    )
    rng = np.random.default_rng(3)
    path = make_project(
        tmp_path,
        FAULTY_SPEC.format(cases=cases, candidate=candidate, execution=execution),
        modules={"tiny.py": FAULTY},
        cases={c: {"x": rng.standard_normal((3, 8))} for c in CASES},
    )
    record(load_spec(path))
    return path


def test_a_worker_activates_its_runner_once_across_cases(tmp_path):
    path = faulty_project(tmp_path, candidate='factory = "tiny:loaded_once"')
    result = run_gate(load_spec(path), execution=plan(jobs=2))
    assert result.passed, result.errors
    pids = (tmp_path / "activations.txt").read_text().split()
    assert 1 <= len(pids) <= 2 and len(set(pids)) == len(pids)  # 6 cases, at most 2 loads


def test_a_worker_killed_mid_unit_fails_the_gate_naming_it(tmp_path):
    path = faulty_project(tmp_path)
    (tmp_path / "faults.json").write_text(json.dumps({"c2": "kill"}))
    result = run_gate(load_spec(path), execution=plan(jobs=2))
    assert not result.passed
    (error,) = result.errors
    assert error.startswith("runner cand, case c2: crash: worker ")
    assert "died while running it: exit -9 (signal 9)" in error
    (lost,) = [v for v in result.verdicts if v.case == "c2"]
    assert not lost.passed and lost.failures[0].metric == "run"
    assert all(v.passed for v in result.verdicts if v.case != "c2")  # nothing else dropped


def test_a_unit_whose_worker_died_is_retried_once_when_the_spec_allows(tmp_path):
    path = faulty_project(tmp_path, execution="[execution]\nretries = 1\n")
    (tmp_path / "faults.json").write_text(json.dumps({"c3": "kill-once"}))
    result = run_gate(load_spec(path), execution=plan(load_spec(path), jobs=2))
    assert result.passed, result.errors
    assert result.provenance["execution"]["retried"] == ["cand/c3"]
    # a worker that dies every time is retried once, then the unit is a failure that says so
    (tmp_path / "faults.json").write_text(json.dumps({"c3": "kill"}))
    result = run_gate(load_spec(path), execution=plan(load_spec(path), jobs=2))
    assert not result.passed
    (error,) = result.errors
    assert "died while running it: exit -9 (signal 9) (tried 2 times)" in error


def test_a_hung_unit_is_cancelled_at_its_runner_timeout(tmp_path):
    path = faulty_project(tmp_path, candidate='callable = "tiny:faulty"\ntimeout = 2')
    (tmp_path / "faults.json").write_text(json.dumps({"c1": "hang"}))
    start = time.monotonic()
    result = run_gate(load_spec(path), execution=plan(jobs=2))
    assert time.monotonic() - start < 60
    assert not result.passed
    (error,) = result.errors
    assert error.startswith("runner cand, case c1: timeout: no result within 2 s")
    # the worker holding the stray call was replaced: the other cases ran and hold
    assert {v.case for v in result.verdicts if v.passed} == set(CASES) - {"c1"}


def test_the_spec_execution_table_picks_the_engine(tmp_path):
    path = faulty_project(tmp_path, execution='[execution]\nengine = "pool"\njobs = 2\n')
    result = run_gate(load_spec(path), execution=plan(load_spec(path)))
    assert result.passed
    assert result.provenance["execution"]["engine"] == "pool"
    assert run_gate(load_spec(path)).provenance["execution"]["engine"] == "pool"
    # the command line overrides it
    assert plan(load_spec(path), jobs=1).engine == "serial"


def test_exitfirst_stops_a_pool_too(tmp_path):
    project = copy_box_port(tmp_path)
    spec = load_spec(project / "parity.toml")
    record(spec)
    plant_scale_bug(project)
    result = run_gate(
        load_spec(project / "parity.toml"), stop_at_first_violation=True, execution=plan(jobs=2)
    )
    assert not result.passed
    assert any("stopped at the first violation" in n.reason for n in result.not_evaluated)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--jobs", "0"], "--jobs expects a number of workers >= 1 or \"auto\", got '0'"),
        (["--jobs", "many"], "--jobs expects a number of workers >= 1 or \"auto\", got 'many'"),
        (["--ray", ""], "--ray expects a cluster address"),
    ],
)
def test_bad_execution_arguments_are_one_line_exit_2(tmp_path, capsys, arguments, message):
    path = make_project(tmp_path)
    for command in ("gate", "record"):
        assert main([command, str(path), *arguments]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err and len(err.splitlines()) == 1


def test_the_execution_table_is_validated(tmp_path):
    path = faulty_project(tmp_path)
    text = path.read_text()
    bad = {
        '[execution]\nengine = "spark"\n': "expected one of serial, pool, ray, got 'spark'",
        "[execution]\njobs = 0\n": 'expected a number >= 1 or "auto", got 0',
        "[execution]\nretries = -1\n": "expected 0 to 10, got -1",
        '[execution]\naddress = "h:1"\n': 'a cluster address needs engine = "ray"',
        "[execution]\nthreads = 2\n": "unknown key",
    }
    for table, message in bad.items():
        path.write_text(text + table)
        with pytest.raises(SpecError, match=message.replace("(", r"\(").replace(")", r"\)")):
            load_spec(path)
    path.write_text(text.replace("format_version = 8", "format_version = 7") + "[execution]\n")
    with pytest.raises(SpecError, match="needs format_version = 8"):
        load_spec(path)
    path.write_text(
        text.replace('callable = "tiny:faulty"', 'callable = "tiny:faulty"\nthreads = 0')
    )
    with pytest.raises(SpecError, match="expected a whole number >= 1, got 0"):
        load_spec(path)
    with pytest.raises(UserError, match="unknown engine"):
        plan(engine="spark")


def test_auto_divides_the_cores_by_the_runners_threads(tmp_path):
    from paritygate.execution import auto_jobs

    path = faulty_project(tmp_path, candidate='callable = "tiny:faulty"\nthreads = 64')
    spec = load_spec(path)
    assert auto_jobs(spec, ["cand"]) == 1
    assert auto_jobs(spec, ["reference"]) >= 1
    # every worker's BLAS / OpenMP pools get the runner's threads
    from paritygate.execution import THREAD_VARIABLES, _Pool

    pool = _Pool(spec, ["cand"], 1, 0)
    assert {pool.env[v] for v in THREAD_VARIABLES} == {"64"}


def test_speed_claims_are_timed_after_the_pool_is_gone(tmp_path, monkeypatch):
    from test_gate_speed import SLEEPY_MODEL, _spec

    from paritygate import children, speed

    path = make_project(
        tmp_path,
        _spec("fast", "speedup", 1.5),
        modules={"sleepy.py": SLEEPY_MODEL},
        cases={"a": {"x": np.random.default_rng(1).standard_normal((3, 8))}},
    )
    record(load_spec(path))
    alive_while_timing = []
    timed = speed.speed_verdict

    def watched(*args, **kwargs):
        alive_while_timing.append(children.live())
        return timed(*args, **kwargs)

    monkeypatch.setattr(speed, "speed_verdict", watched)
    result = run_gate(load_spec(path), execution=plan(jobs=2))
    (verdict,) = [v for v in result.verdicts if v.claim_id == "fast"]
    assert verdict.passed and result.passed, verdict.failures
    assert alive_while_timing == [[]]  # no pool worker lived while the claim was timed


@pytest.mark.parametrize("jobs", [1, 2])
def test_record_stops_at_the_reference_first_failure_and_writes_nothing(tmp_path, jobs):
    from paritygate.references import RecordError

    path = faulty_project(tmp_path)
    before = (tmp_path / "references" / "manifest.json").read_text()
    path.write_text(
        path.read_text().replace('callable = "tiny:reference"', 'callable = "tiny:faulty"')
    )
    (tmp_path / "faults.json").write_text(json.dumps({"c1": "kill" if jobs > 1 else "hang"}))
    if jobs == 1:  # serially a hang is cancelled by the runner's watchdog
        path.write_text(
            path.read_text().replace(
                'callable = "tiny:faulty"', 'callable = "tiny:faulty"\ntimeout = 1', 1
            )
        )
    start = time.monotonic()
    with pytest.raises(RecordError, match="the reference failed, nothing was written: runner "):
        record(load_spec(path), execution=plan(jobs=jobs))
    assert time.monotonic() - start < 30
    assert (tmp_path / "references" / "manifest.json").read_text() == before


def test_an_interrupted_gate_leaves_what_it_evaluated_marked_incomplete(tmp_path):
    import signal
    import subprocess
    import sys

    path = faulty_project(tmp_path)
    partial = tmp_path / "parity-reports" / "parity" / "partial-result.json"
    gate = [sys.executable, "-m", "paritygate", "gate", path.name, "--jobs", "2"]
    # A gate that ends leaves no partial result: result.json says it all.
    done = subprocess.run(gate, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert not partial.exists() and partial.with_name("result.json").exists()
    partial.with_name("result.json").unlink()

    # Interrupted while its workers hang on c3 and c4: what arrived (c0-c2) is written as it
    # arrives, and the abort marks it incomplete and never passed; the exit code is not 0.
    (tmp_path / "faults.json").write_text(json.dumps({c: "hang" for c in CASES[3:]}))
    running = subprocess.Popen(gate, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (partial.exists() and json.loads(partial.read_text())["units_done"] >= 1):
        assert running.poll() is None, running.communicate()
        assert time.monotonic() < deadline, "no unit arrived"
        time.sleep(0.1)
    time.sleep(1.5)  # c2 arrives; the workers hang
    running.send_signal(signal.SIGTERM)
    out, err = running.communicate(timeout=60)
    assert running.returncode == 2, err
    assert err.decode().strip() == "paritygate: aborted (SIGTERM)"
    data = json.loads(partial.read_text())
    assert data["status"] == "incomplete" and data["passed"] is False
    assert data["stopped"] == "aborted (SIGTERM)"
    assert data["units_total"] == 6 and data["units_done"] == 3
    assert sorted(u["case"] for u in data["units"]) == ["c0", "c1", "c2"]
    assert all(u["runner"] == "cand" and u["ran"] == "ok" for u in data["units"])
    assert not partial.with_name("result.json").exists()  # nothing claims a verdict


def test_a_timing_unit_is_refused_while_units_run_beside_it(tmp_path):
    from paritygate.bench import time_side
    from paritygate.execution import listening

    path = faulty_project(tmp_path)
    refused: list[str] = []

    def time_meanwhile(outcome) -> None:  # called as each unit's outcome arrives
        try:
            time_side(lambda: None, name="probe", iterations=1, warmup=0)
        except UserError as exc:
            refused.append(str(exc))
        else:
            refused.append("timed")

    for engine in (plan(jobs=2), plan()):
        refused.clear()
        with listening(time_meanwhile):
            assert run_gate(load_spec(path), execution=engine).passed
        assert refused and "timed" not in refused, refused
        assert refused[0].startswith("timing 'probe' refused: ")
        assert "timing needs the node alone" in refused[0]
    assert "unit worker(s) of a run still run beside it (this process" in refused[0]
    # once the run's units are done, the node is the timing's alone
    assert len(time_side(lambda: None, name="probe", iterations=1, warmup=0).end_to_end_s) == 1
