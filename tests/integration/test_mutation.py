"""``paritygate mutate``: the mutation score of a gate. Mutants that change outputs are caught by
the claim and case that see them; a mutant in dead code survives with its diff; a declared
equivalent leaves the denominator; a crashing or hanging mutant counts as caught and is listed
apart; the user's tree is byte-identical afterwards; an unmutated gate that fails, and bad input,
exit 2 in one line; --min-score both ways; --scope keeps a function's or class's mutants. The
box-port example's published score is measured again in examples/box_port/tests."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest
from spec_helpers import TINY_SPEC, copy_box_port, make_project

from paritygate.cli import main
from paritygate.mutation import find_mutations
from paritygate.references import record
from paritygate.spec import load_spec

pytestmark = pytest.mark.slow

MODEL = """
import time

import numpy as np

W = np.random.default_rng(0).standard_normal((8, 4))


def reference(case):
    x = case.load()["x"]
    logits = x @ W
    return {"y": np.tanh(logits), "logits": logits}


def candidate(case):
    x = case.load()["x"]
    logits = x.astype(np.float32) @ W
    if x.shape[0] > 100:  # dead code: every case has 3 rows
        logits = logits[:, :2]
    unused = x[0] * 0  # paritygate: equivalent
    return {"y": np.tanh(logits), "logits": logits}


def crash(case):
    raise RuntimeError("weights not loaded: layer 3 missing")


def hang(case):
    time.sleep(120)
"""

SPEC = TINY_SPEC.replace("tiny:candidate32", "tiny:candidate")
OPERATORS = "off-by-one,compare,dtype"


def _snapshot(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("mutate") / "tiny"
    spec = make_project(root, SPEC, modules={"tiny.py": MODEL})
    record(load_spec(spec))
    return spec


@pytest.fixture(scope="module")
def run(project, tmp_path_factory):
    """One mutation run over the tiny project: source operators plus a crashing and a hanging
    user-written mutant, in two parallel jobs."""
    import contextlib
    import io

    before = _snapshot(project.parent)
    report = tmp_path_factory.mktemp("report") / "mutants.json"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(
            [
                "mutate",
                str(project),
                "--operators",
                OPERATORS,
                "--model-mutation",
                "crash=tiny:crash",
                "--model-mutation",
                "hang=tiny:hang",
                "--timeout",
                "10",
                "--jobs",
                "2",
                "--min-score",
                "0.6",
                "--json",
                str(report),
            ]
        )
    after = _snapshot(project.parent)
    return code, out.getvalue(), json.loads(report.read_text()), before, after


def test_outputs_changing_mutants_are_caught_by_the_claim_and_case(run):
    code, out, data, _, _ = run
    model = MODEL
    (dtype,) = [m for m in data["mutants"] if m["operator"] == "dtype"]
    assert dtype["status"] == "caught"
    assert (dtype["claim"], dtype["case"], dtype["candidate"]) == ("y-close", "a", "cand")
    assert dtype["caught_by"] == ["y-close @ a"]  # the gate stops at the first failing case
    assert "x.astype(np.float32) @ W" in model.splitlines()[dtype["line"] - 1]
    (flip,) = [m for m in data["mutants"] if m["operator"] == "compare"]
    assert flip["status"] == "caught" and flip["claim"] == "y-close"
    assert "x.shape[0] > 100 -> x.shape[0] <= 100" == flip["description"]
    assert flip["diff"] == ""  # diffs are shown for survivors
    assert "y-close @ a" in out


def test_dead_code_mutants_survive_with_their_diff(run):
    _, out, data, _, _ = run
    survivors = [m for m in data["mutants"] if m["status"] == "survived"]
    assert [m["description"] for m in survivors] == ["0 -> 1", "2 -> 3"]
    assert all(m["operator"] == "off-by-one" for m in survivors)
    assert "-    if x.shape[0] > 100:" in survivors[0]["diff"]
    assert "+    if x.shape[1] > 100:" in survivors[0]["diff"]
    assert "+        logits = logits[:, :3]" in survivors[1]["diff"]
    assert "survivors (a case or a claim that would catch each is missing):" in out
    assert "+        logits = logits[:, :3]" in out


def test_declared_equivalent_mutants_leave_the_denominator(run):
    _, _, data, _, _ = run
    equivalent = [m for m in data["mutants"] if m["status"] == "equivalent"]
    assert [m["description"] for m in equivalent] == ["0 -> 1", "0 -> 1"]  # x[0] and * 0
    assert data["total"] == 8 and data["equivalent"] == 2
    assert data["caught"] == 4 and data["score"] == pytest.approx(4 / 6)
    assert data["gate_runs"] == 7  # the unmutated gate and 6 mutants; equivalents do not run


def test_crash_and_timeout_count_as_caught_and_are_listed_apart(run):
    _, out, data, _, _ = run
    crash = next(m for m in data["mutants"] if m["id"] == "model:crash")
    hang = next(m for m in data["mutants"] if m["id"] == "model:hang")
    assert crash["status"] == "crash" and crash["line"] == 0
    assert crash["detail"] == (
        "runner cand, case a: crash: RuntimeError: weights not loaded: layer 3 missing"
    )
    assert crash["description"] == "crash=tiny:crash" and crash["file"] == "parity.toml"
    assert hang["status"] == "timeout" and hang["detail"] == "no answer in 10 s"
    assert "4/6 caught (1 crash, 1 timeout), 2 survived, 2 equivalent" in out


def test_the_table_fits_80_columns_and_the_score_meets_the_minimum(run):
    code, out, data, _, _ = run
    assert code == 0 and data["passed"] and data["exit_code"] == 0
    table = out.split("survivors")[0]
    assert max(len(line) for line in table.splitlines()) <= 80
    assert "score 67%" in out and "the score meets --min-score 0.6" in out
    assert re.search(r"cost: 7 gate runs x 2 cases in [\d.]+ s with 2 jobs", out)
    assert data["format"] == "paritygate-mutation-result" and data["cases"] == 2


def test_the_users_tree_is_byte_identical(run):
    _, _, _, before, after = run
    assert before == after
    assert not any(name.startswith("parity-reports") for name in after)


def test_a_score_below_the_minimum_exits_1(project, capsys):
    # the first off-by-one mutant is the dead-code condition's index: it survives
    code = main(
        ["mutate", str(project), "--operators", "off-by-one", "--limit", "1", "--min-score", "0.5"]
    )
    out = capsys.readouterr().out
    assert code == 1
    assert "score 0%: 0/1 caught" in out and "the score is below --min-score 0.5" in out


def test_an_unmutated_gate_that_fails_exits_2(tmp_path, capsys):
    spec = make_project(
        tmp_path, SPEC.replace("bound = 1e-5", "bound = 1e-12"), modules={"tiny.py": MODEL}
    )
    record(load_spec(spec))
    assert main(["mutate", str(spec), "--operators", "dtype"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "the unmutated gate does not pass (exit 1: claim y-close fails on case a)" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--operators", "nonsense"], "--operators: unknown 'nonsense'"),
        (["--jobs", "0"], "--jobs must be at least 1, got 0"),
        (["--limit", "0"], "--limit must be at least 1, got 0"),
        (["--min-score", "80"], "--min-score must lie in [0, 1], got 80.0"),
        (["--candidate", "nosuch"], "--candidate: no runner 'nosuch'"),
        (["--candidate", "reference"], "--candidate: 'reference' is the reference"),
        (["--file", "../elsewhere.py"], "not inside the spec's folder"),
        (["--file", "cases/a.npz"], "not a Python file"),
        (["--model-mutation", "broken"], "--model-mutation expects NAME=VALUE"),
        (["--bogus"], "No such option '--bogus'"),
        (["--case", "c"], "--case 'c': not in parity.toml"),
        (["--claim", "y-far"], "--claim 'y-far': not in parity.toml"),
        (["--scope", "nosuch"], "--scope 'nosuch': no mutant inside a function or class"),
    ],
)
def test_bad_input_is_one_line_exit_2(project, capsys, args, message):
    assert main(["mutate", str(project), *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and message in err
    assert "Traceback" not in captured.err + captured.out


def test_scope_keeps_the_mutants_of_one_function(project, tmp_path, capsys):
    report = tmp_path / "scoped.json"
    args = ["mutate", str(project), "--operators", "compare", "--scope", "candidate"]
    assert main([*args, "--json", str(report)]) == 0
    capsys.readouterr()
    data = json.loads(report.read_text())
    assert data["scopes"] == ["candidate"]
    assert [m["description"] for m in data["mutants"]] == ["x.shape[0] > 100 -> x.shape[0] <= 100"]


def test_case_and_claim_restrict_every_gate_run(project, tmp_path, capsys):
    """A quick set of a slow gate: every mutant gated on one case and one claim; the count of
    cases, the names and the verdicts say so, and a mutant is still caught there."""
    report = tmp_path / "quick.json"
    args = ["mutate", str(project), "--operators", "dtype", "--case", "b", "--claim", "y-close"]
    assert main([*args, "--json", str(report)]) == 0
    out = capsys.readouterr().out
    data = json.loads(report.read_text())
    assert (data["cases"], data["only_cases"], data["only_claims"]) == (1, ["b"], ["y-close"])
    assert "gate runs x 1 cases" in out
    caught = [m for m in data["mutants"] if m["status"] == "caught"]
    assert caught and {(m["claim"], m["case"]) for m in caught} == {("y-close", "b")}


def test_operators_on_a_numerical_module():
    source = (
        "import numpy as np\n"
        "class Cache:\n"
        "    def __init__(self):\n"
        "        self.hits = None\n"
        "    def reset(self):\n"
        "        self.hits = None\n"
        "class Other:\n"  # its own first value: not a reset of Cache's
        "    def __init__(self):\n"
        "        self.hits = None\n"
        "def f(x: np.ndarray) -> np.ndarray:\n"
        '    """Docstring 1.5"""\n'
        '    y = x.astype("float32").sum(axis=-1) * 0.5\n'
        "    return y[1:-1] if y.size >= 2 else y\n"
    )
    found = [(m.operator, m.description) for m in find_mutations(source, "m.py")]
    assert found == [
        ("drop-reset", "self.hits = None -> pass"),  # the reset after __init__'s first value
        ("dtype", '"float32" -> "float16"'),
        ("axis", "-1 -> -2"),
        ("scale", "0.5 -> 0.5005"),
        ("scale", "0.5 -> 0.4995"),
        ("off-by-one", "1 -> 2"),
        ("off-by-one", "-1 -> 0"),
        ("compare", "y.size >= 2 -> y.size < 2"),
    ]  # nothing in annotations or docstrings
    scopes = [m.scope for m in find_mutations(source, "m.py")]
    assert scopes == ["Cache.reset"] + ["f"] * 7  # --scope keeps a function's or class's mutants


def test_a_command_runner_mutates_the_script_its_command_names(tmp_path, capsys):
    """box_port's candidate is a command (`{python} port_cli.py ...`): its script is the file
    mutated by default; with no operator and no user-written mutant there is nothing to run."""
    project = copy_box_port(tmp_path)
    assert main(["mutate", str(project / "parity.toml"), "--operators", "none"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "paritygate: error: no mutant: the operators (none) find nothing to change in "
        "port_cli.py, and no --model-mutation was given"
    )
    assert (
        main(["mutate", str(project / "parity.toml"), "--operators", "compare", "--limit", "x"])
        == 2
    )
    assert "'x' is not a valid integer" in capsys.readouterr().err


FACTORY_MODEL = """
import numpy as np

W = np.random.default_rng(0).standard_normal((8, 4))


def reference(case):
    x = case.load()["x"]
    logits = x @ W
    return {"y": np.tanh(logits), "logits": logits}


def make(scale):
    def run(case):
        logits = (case.load()["x"] @ W) * scale
        return {"y": np.tanh(logits), "logits": logits}

    return run


def make_same(scale):  # a user-written mutant that changes nothing: it survives
    return make(scale)


def make_scaled(scale):  # built with the runner's options, 1 % off
    return make(scale * 1.01)


def make_without_options():  # does not take the runner's options: the runner fails
    return make(1.0)
"""

WRITES_INPUT = """

def writes_input(case):  # a runner that writes into its case input: drift, not a verdict
    x = case.load()["x"]
    np.savez(case.path, x=x + 1)
    logits = x @ W
    return {"y": np.tanh(logits), "logits": logits}
"""

FACTORY_SPEC = SPEC.replace(
    'callable = "tiny:candidate"', 'factory = "tiny:make"\noptions = { scale = 1.0 }'
)


def test_user_written_mutants_of_a_factory_runner_are_built_with_its_options(tmp_path, capsys):
    """--model-mutation through a factory runner: the scratch spec names the mutant as the
    factory and keeps the options, so a mutant built with them is judged by the claims (caught,
    or survived with the spec's diff); one that does not take them crashes, naming why."""
    spec = make_project(tmp_path / "factory", FACTORY_SPEC, modules={"tiny.py": FACTORY_MODEL})
    record(load_spec(spec))
    report = tmp_path / "factory.json"
    args = ["mutate", str(spec), "--operators", "none", "--json", str(report)]
    for pair in (
        "same=tiny:make_same",
        "scaled=tiny:make_scaled",
        "bare=tiny:make_without_options",
    ):
        args += ["--model-mutation", pair]
    assert main(args) == 0
    out = capsys.readouterr().out
    mutants = {m["id"]: m for m in json.loads(report.read_text())["mutants"]}
    assert (mutants["model:scaled"]["status"], mutants["model:scaled"]["claim"]) == (
        "caught",
        "y-close",
    )
    same = mutants["model:same"]
    assert same["status"] == "survived" and same["operator"] == "model"
    assert '-factory = "tiny:make"\n+factory = "tiny:make_same"\n' in same["diff"]
    assert "options" not in "".join(
        line for line in same["diff"].splitlines(keepends=True) if line[:1] in "+-"
    ).replace("---", "").replace("+++", "")  # the options stay as they are
    bare = mutants["model:bare"]
    assert bare["status"] == "crash" and "unexpected keyword argument 'scale'" in bare["detail"]
    assert "score 67%: 2/3 caught (1 crash, 0 timeout), 1 survived" in out


def test_a_pinned_file_is_refused_and_a_mutant_that_writes_its_input_is_drift(tmp_path, capsys):
    """Drift both ways. A file the candidate pins (pins.files) cannot be scored: the gate would
    refuse every mutant of it before a claim runs, so mutate exits 2 in one line; without the pin
    the same mutants are judged by the claims. A mutant whose run writes to its case input is
    drift (listed apart, the gate does not pass), and the mutants after it in the same job run on
    a fresh copy, judged as before."""
    spec = make_project(tmp_path / "drift", SPEC, modules={"tiny.py": MODEL + WRITES_INPUT})
    record(load_spec(spec))
    digest = hashlib.sha256((spec.parent / "tiny.py").read_bytes()).hexdigest()
    pinned = spec.parent / "pinned.toml"
    pinned.write_text(
        spec.read_text().replace(
            'callable = "tiny:candidate"',
            f'callable = "tiny:candidate"\n\n[runners.cand.pins.files]\n"tiny.py" = "{digest}"',
        )
    )
    assert main(["mutate", str(pinned), "--operators", "dtype"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (
        "paritygate: error: tiny.py: pinned by runner cand (pins.files), so the gate refuses "
        "every mutant of it as drift before any claim runs; mutate an unpinned file, or measure "
        "on a copy of the spec without that pin"
    )

    report = tmp_path / "drift.json"
    before = _snapshot(spec.parent)
    args = ["mutate", str(spec), "--operators", "dtype", "--jobs", "1", "--json", str(report)]
    args += [
        "--model-mutation",
        "writer=tiny:writes_input",
        "--model-mutation",
        "same=tiny:candidate",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert _snapshot(spec.parent) == before  # the user's case inputs included
    data = json.loads(report.read_text())
    by_id = {m["id"]: m for m in data["mutants"]}
    writer = by_id["model:writer"]
    assert writer["status"] == "drift" and writer["detail"] == "drift: case-input a"
    assert writer["claim"] is None  # no claim judged it
    (dtype,) = [m for m in data["mutants"] if m["operator"] == "dtype"]
    assert (dtype["status"], dtype["claim"]) == ("caught", "y-close")
    # after the writer, in the same job: a fresh copy, the unchanged candidate survives
    assert [m["id"] for m in data["mutants"]][-2:] == ["model:writer", "model:same"]
    assert by_id["model:same"]["status"] == "survived"
    assert "score 67%: 2/3 caught (0 crash, 0 timeout, 1 drift), 1 survived" in out
