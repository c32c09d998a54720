"""``paritygate calibrate``: the claim's own mode, proposal, refusal, exact claims and --write."""

from __future__ import annotations

import json
import tomllib

import numpy as np
import pytest
from spec_helpers import make_project

from paritygate.cli import main
from paritygate.spec import load_spec

CASES = [f"c{i:02d}" for i in range(16)]

MODEL = '''
import numpy as np

W = np.random.default_rng(0).standard_normal((8, 4))


def reference(case):
    x = case.load()["x"]
    steps(0)
    return {"y": np.tanh(x @ W)}


def candidate32(case):
    x = case.load()["x"].astype(np.float32)
    return {"y": np.tanh(x @ W.astype(np.float32))}


def candidate16(case):
    x = case.load()["x"].astype(np.float16)
    return {"y": np.tanh(x @ W.astype(np.float16)).astype(np.float32)}


def candidate16_scaled(case):
    """the float16 port with its output scaled by 1.0001"""
    return {"y": candidate16(case)["y"] * np.float32(1.0001)}


def body():
    """the step a cache skips: paritygate counts its calls"""


def steps(skipped=0):
    for _ in range(25 - skipped):
        body()


def cached(case):
    """an approximation that skips 5 or 6 of 25 steps"""
    x = case.load()["x"]
    steps(5 + int(abs(x[0, 0]) > 1))
    return {"y": np.tanh(x @ W) * (1 + 1e-3)}


def never_skips(case):
    """a cache that never skips"""
    steps(0)
    return {"y": np.tanh(case.load()["x"] @ W) * (1 + 1e-5)}


def no_rows(case):
    """the port returning no rows at all"""
    return {"y": np.zeros((0, 4), np.float32)}


def candidate32_drops_a_row(case):
    y = candidate32(case)["y"]
    return {"y": y[1:] if case.name == "c07" else y}


def candidate32_zeroed(case):
    """the float32 port with the projection's last column zeroed"""
    x = case.load()["x"].astype(np.float32)
    w = W.astype(np.float32).copy()
    w[:, -1] = 0
    return {"y": np.tanh(x @ w)}
'''

CASE_TABLES = "".join(
    f'\n[cases.{c}]\npath = "cases/{c}.npz"\nsha256 = "{{sha:{c}}}"\n' for c in CASES
)

SPEC = (
    """
# Calibration fixture: a float64 reference against float32 and float16 ports.
format_version = 1
outputs = ["y"]
"""
    + CASE_TABLES
    + """
[runners.reference]
role = "reference"
callable = "calib:reference"

[runners.port32]
role = "candidate"
callable = "calib:candidate32"

[runners.port16]
role = "candidate"
callable = "calib:candidate16"

[runners.same]
role = "candidate"
callable = "calib:reference"

# The float32 port agrees with the reference to rounding.
[claims.y-close]
outputs = ["y"]
metric = "max_abs"
bound = 1e-3  # guessed after the first failure; calibrate before publishing
oracle = "equivalence"
mode = "paired"
status = "provisional"
candidates = ["port32"]

[claims.y-stored]
outputs = ["y"]
metric = "max_abs"
bound = 1e-3
oracle = "equivalence"
mode = "stored"
status = "provisional"
candidates = ["port32"]

[claims.y-half]
outputs = ["y"]
metric = "max_abs"
bound = 1e-2
oracle = "equivalence"
mode = "paired"
status = "provisional"
candidates = ["port16"]

[runners.port32-drops]
role = "candidate"
callable = "calib:candidate32_drops_a_row"

[claims.y-rows]
outputs = ["y"]
metric = "cosine"
bound = 0.999
oracle = "equivalence"
mode = "paired"
status = "provisional"
candidates = ["port32-drops"]

[claims.noop]
outputs = ["y"]
metric = "exact"
bound = 0
oracle = "no-op"
mode = "paired"
status = "provisional"
candidates = ["same"]
"""
)


@pytest.fixture
def project(tmp_path):
    rng = np.random.default_rng(3)
    cases = {c: {"x": rng.standard_normal((6, 8))} for c in CASES}
    return make_project(tmp_path, SPEC, modules={"calib.py": MODEL}, cases=cases)


def test_paired_claim_gets_a_bound_and_write_keeps_comments(project, capsys):
    before = project.read_text()
    assert (
        main(
            [
                "calibrate",
                str(project),
                "--claim",
                "y-close",
                "--write",
                "--model-mutation",
                "zeroed column=calib:candidate32_zeroed",
            ]
        )
        == 0
    )
    out = _words(capsys.readouterr().out)
    assert "paired mode, 16 cases" in out
    assert "zeroed column" in out and "caught in 16/16 cases" in out
    assert "probability about 1/(n+1) = 5.9%" in out
    assert "proposal: max_abs <= " in out and "wrote claims.y-close" in out
    after = project.read_text()
    assert "# The float32 port agrees with the reference to rounding." in after
    assert "# guessed after the first failure; calibrate before publishing" in after
    assert after.split("[claims.y-close]")[0] == before.split("[claims.y-close]")[0]
    claim = load_spec(project).claims["y-close"]
    assert claim.status == "calibrated" and 0 < claim.bound < 1e-5
    basis = tomllib.loads(after)["claims"]["y-close"]["basis"]
    assert basis["metric"] == "max_abs" and basis["n"] == 16 and basis["mode"] == "paired"
    assert 0 < basis["largest_noise"] <= claim.bound < basis["smallest_bug"]
    assert basis["hardware"] and basis["date"] and basis["versions"]["numpy"] == np.__version__


def test_noise_exactly_zero_writes_an_exact_claim(project, capsys):
    assert main(["calibrate", str(project), "--claim", "noop", "--write"]) == 0
    out = capsys.readouterr().out
    assert "noise is exactly zero over 16 cases" in out and "a no-op claim" in out
    claim = load_spec(project).claims["noop"]
    assert (claim.metric, claim.bound, claim.status) == ("exact", 0, "calibrated")
    assert claim.basis["noise"] == "exactly zero"


def test_no_gap_is_refused_with_exit_1_and_nothing_written(project, capsys):
    before = project.read_text()
    code = main(
        [
            "calibrate",
            str(project),
            "--claim",
            "y-half",
            "--write",
            "--model-mutation",
            "scaled=calib:candidate16_scaled",
        ]
    )
    assert code == 1
    out = capsys.readouterr().out
    assert (
        "REFUSED: no gap between noise and the smallest bug: change the comparison, not the "
        "constant" in out
    )
    assert "nothing written" in out
    assert "calibrated against the bugs it must catch" not in out  # an equivalence claim
    assert project.read_text() == before


def test_stored_claim_is_measured_against_the_recorded_reference(project, capsys, tmp_path):
    from paritygate.references import record

    record(load_spec(project))
    json_path = tmp_path / "calibration.json"
    plot_path = tmp_path / "calibration.png"
    assert (
        main(
            [
                "calibrate",
                str(project),
                "--claim",
                "y-stored",
                "--margin",
                "other machine=2",
                "--json",
                str(json_path),
                "--plot",
                str(plot_path),
                "--repeats",
                "2",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "stored mode, 16 cases x 2 repeat(s)" in out and "margin: other machine x2" in out
    data = json.loads(json_path.read_text())
    assert data["mode"] == "stored" and data["margins"] == {"other machine": 2.0}
    assert len(data["by_metric"]["max_abs"]["noise"]) == 32
    assert plot_path.read_bytes()[:4] == b"\x89PNG"


def test_stored_claim_without_a_reference_is_drift(project, capsys):
    assert main(["calibrate", str(project), "--claim", "y-stored"]) == 3
    assert "no reference recorded" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--claim", "nope"], "no claim 'nope' (claims: y-close, y-stored, y-half, y-rows, noop)"),
        (["--claim", "y-close", "--cases", "8"], "at least 16 cases, got 8"),
        (["--claim", "y-close", "--margin", "machine"], "--margin expects NAME=VALUE"),
        (["--claim", "y-close", "--margin", "machine=0.5"], "must be a factor >= 1"),
        (
            ["--claim", "y-close", "--candidate", "port16"],
            "'port16' is not a candidate of this claim",
        ),
        (["--claim", "y-close", "--mutations", "shift,typo"], "--mutations: unknown typo"),
        (["--claim", "y-close", "--skip-case", "c99"], "unknown case(s) c99 (cases: c00, c01,"),
        (
            ["--claim", "y-close", "--case", "c01", "--cases", "4"],
            "use one of --cases, --case and --skip-case",
        ),
    ],
)
def test_bad_input_exits_2_with_one_line(project, capsys, args, message):
    assert main(["calibrate", str(project), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_fewer_cases_can_be_accepted_knowingly(project, capsys):
    assert (
        main(["calibrate", str(project), "--claim", "y-close", "--cases", "8", "--min-cases", "8"])
        == 0
    )
    assert "8 cases" in capsys.readouterr().out


def test_chosen_cases_are_the_ones_measured_and_go_into_the_basis(project, capsys, tmp_path):
    every = tmp_path / "every.json"
    assert main(["calibrate", str(project), "--claim", "y-close", "--json", str(every)]) == 0
    noise = json.loads(every.read_text())["by_metric"]["max_abs"]["noise"]
    worst = int(np.argmax(noise))  # one repeat: noise[i] belongs to CASES[i]
    before = project.read_text()
    assert (
        main(
            [
                "calibrate",
                str(project),
                "--claim",
                "y-close",
                "--skip-case",
                CASES[worst],
                "--min-cases",
                "15",
                "--write",
            ]
        )
        == 0
    )
    assert "15 cases" in capsys.readouterr().out
    basis = tomllib.loads(project.read_text())["claims"]["y-close"]["basis"]
    assert basis["cases"] == [c for c in CASES if c != CASES[worst]]
    assert (
        basis["largest_noise"] == max(n for i, n in enumerate(noise) if i != worst) < noise[worst]
    )
    assert project.read_text().split("[claims.y-close]")[0] == before.split("[claims.y-close]")[0]
    assert (
        main(
            [
                "calibrate",
                str(project),
                "--claim",
                "y-close",
                "--case",
                "c03",
                "--case",
                "c05",
                "--min-cases",
                "2",
            ]
        )
        == 0
    )
    assert "2 cases" in capsys.readouterr().out


def test_builtin_mutations_can_be_chosen(project, capsys):
    assert main(["calibrate", str(project), "--claim", "y-close", "--mutations", "shift,swap"]) == 0
    out = capsys.readouterr().out
    assert "shift(axis=-1,by=1)" in out and "swap(axis=-1,0<->1)" in out and "float16" not in out
    assert main(["calibrate", str(project), "--claim", "y-close", "--mutations", "none"]) == 1
    assert "no mutation changed the candidate's outputs" in capsys.readouterr().out


def _words(out: str) -> str:
    """The output with its line wrapping undone (it wraps at the terminal's width)."""
    return " ".join(out.split())


def _judged(out: str) -> str:
    """The "spec now:" line with its continuation lines (indented) joined back."""
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("spec now: "))
    end = first + 1
    while end < len(lines) and lines[end].startswith("  "):
        end += 1
    return _words("\n".join(lines[first:end]))


def test_the_specs_current_bound_is_judged_on_the_measured_distributions(project, capsys, tmp_path):
    json_path = tmp_path / "calibration.json"
    assert main(["calibrate", str(project), "--claim", "y-close", "--json", str(json_path)]) == 0
    out = capsys.readouterr().out
    dist = json.loads(json_path.read_text())["by_metric"]["max_abs"]
    let_through = sorted(name for name, values in dist["bugs"].items() if min(values) <= 1e-3)
    assert let_through, "the guessed bound 1e-3 should let a float16 drop through"
    assert _judged(out) == (
        "spec now: max_abs <= 0.001 (status provisional): noise fails it in 0 of 16 runs; "
        f"it lets through {', '.join(let_through)}"
    )
    assert "--write stores the proposal" in out
    # A bound below the measured noise: every noise run fails it, no mutation passes it.
    project.write_text(
        project.read_text().replace("bound = 1e-3  # guessed", "bound = 1e-12  # guessed")
    )
    assert main(["calibrate", str(project), "--claim", "y-close"]) == 0
    failing = sum(1 for v in dist["noise"] if v > 1e-12)
    assert _judged(capsys.readouterr().out).endswith(
        f"noise fails it in {failing} of 16 runs; it catches every mutation in every case"
    )
    assert failing == 16


def test_an_approximation_refused_on_output_mutations_names_what_hides_in_the_noise(
    project, capsys
):
    # A float16 port claimed as an approximation: a bfloat16 drop hides inside its own difference.
    project.write_text(
        project.read_text().replace(
            'oracle = "equivalence"\nmode = "paired"\nstatus = "provisional"\ncandidates = '
            '["port16"]',
            'oracle = "approximation"\nmode = "paired"\nstatus = "provisional"\ncandidates = '
            '["port16"]',
        )
    )
    assert load_spec(project).claims["y-half"].oracle == "approximation"
    code = main(["calibrate", str(project), "--claim", "y-half", "--mutations", "bfloat16,shift"])
    out = _words(capsys.readouterr().out)
    assert code == 1
    assert "inside the noise: bfloat16; beyond it: shift(axis=-1,by=1)" in out
    assert "an approximation claim is calibrated against the bugs it must catch" in out
    assert main(["calibrate", str(project), "--claim", "y-half", "--mutations", "shift"]) == 0
    assert "calibrated against the bugs it must catch" not in capsys.readouterr().out


def test_zero_noise_makes_a_paired_equivalence_a_no_op_claim_and_a_stored_one_exact(
    project, capsys
):
    from paritygate.references import record

    text = project.read_text().replace('candidates = ["port32"]', 'candidates = ["port32", "same"]')
    project.write_text(text)
    assert (
        main(["calibrate", str(project), "--claim", "y-close", "--candidate", "same", "--write"])
        == 0
    )
    claim = load_spec(project).claims["y-close"]
    assert (claim.metric, claim.bound, claim.oracle, claim.mode) == ("exact", 0, "no-op", "paired")
    record(load_spec(project))
    assert (
        main(["calibrate", str(project), "--claim", "y-stored", "--candidate", "same", "--write"])
        == 0
    )
    assert "an exact-equivalence claim" in capsys.readouterr().out
    stored = load_spec(project).claims["y-stored"]
    assert (stored.metric, stored.bound, stored.oracle, stored.mode) == (
        "exact",
        0,
        "equivalence",
        "stored",
    )
    # Non-zero noise leaves an equivalence claim an equivalence claim.
    assert (
        main(["calibrate", str(project), "--claim", "y-stored", "--candidate", "port32", "--write"])
        == 0
    )
    stored = load_spec(project).claims["y-stored"]
    assert stored.metric == "max_abs" and stored.bound > 0 and stored.oracle == "equivalence"


CACHE_CLAIM = """
[runners.cache]
role = "candidate"
callable = "calib:cached"

[claims.y-cache]
outputs = ["y"]
metric = "max_abs"
bound = 1e-2
oracle = "approximation"
mode = "paired"
status = "provisional"
candidates = ["cache"]
activity = { calls = "calib:body", measure = "skipped", min = 5, max = 6 }
"""


def test_an_activity_band_is_judged_on_the_counters_measured(project, capsys):
    project.write_text(project.read_text() + CACHE_CLAIM)
    args = [
        "calibrate",
        str(project),
        "--claim",
        "y-cache",
        "--mutations",
        "shift",
        "--model-mutation",
        "never skips=calib:never_skips",
    ]
    # The never-skipping cache hides in the quality metric's noise; the activity band rejects it
    # in every case, so it is reported as caught by the band and kept out of the metric's gap.
    assert main(args) == 0
    out = _words(capsys.readouterr().out)
    counter = "@calls:calib:body"
    assert f"activity {counter} (min..max over runs): candidate 5..6; never skips 0..0" in out
    assert f"caught in 16/16 cases by the activity band {counter} in 5..6, not by the metric" in out
    assert (
        f"spec activity band: {counter} in 5..6: the candidate is inside it in 16 of 16 runs; "
        "it rejects never skips" in out
    )
    assert "proposal: max_abs <= " in out
    # Without the band the same mutation hides in the noise: refused.
    project.write_text(
        project.read_text().replace(
            'activity = { calls = "calib:body", measure = "skipped", min = 5, max = 6 }\n', ""
        )
    )
    assert main(args) == 1
    out = _words(capsys.readouterr().out)
    assert "inside the noise: never skips" in out and "spec activity band" not in out
    # A band that lets the never-skipping cache through (0 is inside it) keeps it in the gap.
    project.write_text(
        project.read_text()
        + 'activity = { calls = "calib:body", measure = "skipped", min = 0, max = 9 }\n'
    )
    assert load_spec(project).claims["y-cache"].activity is not None
    assert main(args) == 1
    out = _words(capsys.readouterr().out)
    assert "inside the noise: never skips" in out
    assert (
        "spec activity band: @calls:calib:body in 0..9: the candidate is inside it in 16 of 16 runs"
        in out
    )
    assert "it rejects" not in out.split("spec activity band")[1]


def test_a_model_mutation_that_changes_an_outputs_shape_is_caught_not_an_error(
    project, capsys, tmp_path
):
    json_path = tmp_path / "calibration.json"
    assert (
        main(
            [
                "calibrate",
                str(project),
                "--claim",
                "y-close",
                "--json",
                str(json_path),
                "--model-mutation",
                "no rows=calib:no_rows",
                "--model-mutation",
                "zeroed column=calib:candidate32_zeroed",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "no rows" in out and "inf  (16 cases, caught in 16/16 cases)" in out
    assert (
        "case c00: structure changed: output 'y' shape (0, 4) against (6, 4) (and 15 more cases)"
        in out
    )
    data = json.loads(json_path.read_text())
    dist = data["by_metric"]["max_abs"]
    # The bound rests on the real noise; the structural bug is not the smallest one.
    assert 0 < dist["largest_noise"] <= data["proposed_bound"] < 1e-5
    assert dist["smallest_bug_mutation"] != "no rows"


def test_an_unmutated_candidate_that_changes_an_outputs_shape_stops_with_case_and_output(
    project, capsys
):
    assert (
        main(
            [
                "calibrate",
                str(project),
                "--claim",
                "y-rows",
                "--model-mutation",
                "no rows=calib:no_rows",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        "case c07: output 'y' of the unmutated candidate: shape (5, 4) against the baseline's (6, "
        "4)" in err
    )
    assert len(err.strip().splitlines()) == 1


def test_a_cosine_undefined_on_zero_outputs_is_said_undefined_not_minus_inf(tmp_path, capsys):
    """Both sides all zeros: the cosine has no value (the gate fails such a case); the account
    says "undefined" and why, where it printed -inf; a defined cosine is printed as a number."""
    from spec_helpers import TINY_MODEL, TINY_SPEC

    model = TINY_MODEL + (
        "\n\ndef zero(case):\n    out = reference(case)\n"
        "    out['y'] = np.zeros_like(out['y'])\n    return out\n"
    )
    spec = TINY_SPEC.replace('metric = "max_abs"\nbound = 1e-5', 'metric = "cosine"\nbound = 0.9')
    for name, runner, undefined in (("zero", "zero", True), ("defined", "candidate32", False)):
        text = spec.replace("tiny:candidate32", f"tiny:{runner}")
        if undefined:
            text = text.replace("tiny:reference", "tiny:zero")
        path = make_project(tmp_path / name, text, modules={"tiny.py": model, "tiny_cli.py": ""})
        assert main(["record", str(path), "--yes"]) == 0
        main(["calibrate", str(path), "--claim", "y-close", "--min-cases", "2"])
        out = capsys.readouterr().out
        assert "-inf" not in out, out
        row = next(line for line in out.splitlines() if line.startswith("cosine "))
        assert ("undefined" in row) == undefined, row
        assert ("cosine: undefined on 2 of 2 noise runs" in out) == undefined, out


def test_output_fits_80_columns_with_the_proposal_on_a_line_of_its_own(
    project, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "80")
    for claim, mutation, code in (
        ("y-close", "zeroed column=calib:candidate32_zeroed", 0),
        ("y-half", "scaled=calib:candidate16_scaled", 1),
        ("noop", None, 0),
    ):
        args = ["calibrate", str(project), "--claim", claim]
        args += ["--model-mutation", mutation] if mutation else []
        assert main(args) == code
        out = capsys.readouterr().out.splitlines()
        assert [line for line in out if len(line) > 80] == [], claim
        if claim == "y-close":
            proposal = [line for line in out if line.startswith("proposal: ")]
            assert len(proposal) == 1 and proposal[0].split()[1:3] == ["max_abs", "<="]
            assert len(proposal[0].split()) == 4  # metric, sign, bound: nothing else on it
        if claim == "y-half":  # a refusal wraps at spaces: its words are all there
            refusal = " ".join(" ".join(out).split())
            assert "REFUSED: no gap between noise and the smallest bug" in refusal
    # The same run piped with COLUMNS unset takes 100 columns, as the gate's output does.
    monkeypatch.delenv("COLUMNS")
    assert main(["calibrate", str(project), "--claim", "noop"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert max(len(line) for line in lines) > 80 and all(len(line) <= 100 for line in lines)


def test_a_runner_that_raises_is_one_short_line_naming_the_file_with_its_traceback(
    project, capsys, monkeypatch
):
    monkeypatch.setenv("COLUMNS", "80")
    (project.parent / "crashy.py").write_text(
        "def port(case):\n    raise ValueError('the port broke: ' + 'x' * 600)\n"
    )
    text = project.read_text() + (
        '\n[runners.crashy]\nrole = "candidate"\ncallable = "crashy:port"\n\n'
        '[claims.y-crash]\noutputs = ["y"]\nmetric = "max_abs"\nbound = 1e-3\n'
        'oracle = "equivalence"\nmode = "paired"\nstatus = "provisional"\n'
        'candidates = ["crashy"]\n'
    )
    project.write_text(text)
    assert main(["calibrate", str(project), "--claim", "y-crash"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    detail = project.parent / "parity-reports" / "parity" / "calibrate-y-crash-error.txt"
    assert "runner crashy" in err[0] and "ValueError: the port broke" in err[0]
    assert f"its stderr and traceback: {detail}" in err[0]
    assert len(err[0]) - len(str(detail)) <= 300  # short, but for the path
    assert "Traceback" in detail.read_text() and "x" * 600 in detail.read_text()


def _calibration_json(path) -> dict:
    """A calibration's JSON without its run-specific fields (when it ran)."""
    data = json.loads(path.read_text())
    data["environment"].pop("date")
    data["basis"].pop("date")
    return data


def test_a_pool_calibrates_what_a_serial_run_calibrates_both_ways(project, capsys, tmp_path):
    # Every kind of unit: the reference and the candidate on a case, each repeat of them, and a
    # model mutation sent to the workers by name, whose activity the workers count too.
    project.write_text(project.read_text() + CACHE_CLAIM)
    args = [
        "calibrate",
        str(project),
        "--claim",
        "y-cache",
        "--repeats",
        "2",
        "--mutations",
        "shift",
        "--model-mutation",
        "never skips=calib:never_skips",
    ]
    serial, pooled = tmp_path / "serial.json", tmp_path / "pooled.json"
    assert main([*args, "--json", str(serial)]) == 0
    out_serial = capsys.readouterr().out.split("raw distributions")[0]
    assert main([*args, "--jobs", "2", "--json", str(pooled)]) == 0
    out_pooled = capsys.readouterr().out.split("raw distributions")[0]
    assert _calibration_json(pooled) == _calibration_json(serial)
    assert out_pooled == out_serial and "caught in 16/16 cases by the activity band" in out_pooled
    assert len(_calibration_json(serial)["by_metric"]["max_abs"]["noise"]) == 32  # 2 repeats

    # A mutation that fails on a worker stops the pool's calibration as it stops a serial one.
    (project.parent / "calib.py").write_text(
        (project.parent / "calib.py").read_text()
        + "\n\ndef broken(case):\n    raise ValueError('the mutant broke')\n"
    )
    bad = [*args[:-1], "broken=calib:broken"]
    assert main(bad) == 2
    serial_err = capsys.readouterr().err
    assert main([*bad, "--jobs", "2"]) == 2
    pooled_err = capsys.readouterr().err
    assert "runner cache[broken], case c00" in serial_err and "the mutant broke" in serial_err
    assert pooled_err.split("its stderr")[0] == serial_err.split("its stderr")[0]
    # Dataset claims are calibrated serially: --jobs there is one line, exit 2.
    assert main(["calibrate", str(project), "--claim", "y-cache", "--jobs", "0"]) == 2
    assert "--jobs expects a number of workers" in capsys.readouterr().err
