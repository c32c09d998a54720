"""Dataset claims (agreement, accuracy, ECE) are calibrated from per-case contributions with a
bootstrap over cases: the gate's own dataset metric, its sampling noise over cases, and model
mutations that must fall beyond the proposed bound."""

from __future__ import annotations

import numpy as np
import pytest
from spec_helpers import make_project

from paritygate.calibration import calibrate_dataset_claim
from paritygate.cli import main
from paritygate.errors import InputError
from paritygate.spec import load_spec

MODEL = """
import numpy as np

W = np.random.default_rng(0).standard_normal((8, 4))


def reference(case):
    return {"scores": case.load()["x"] @ W}


def candidate(case):
    x = case.load()["x"].astype(np.float32)
    return {"scores": x @ W.astype(np.float32)}


def shuffled(case):
    \"\"\"the port with its class columns in the wrong order\"\"\"
    x = case.load()["x"].astype(np.float32)
    return {"scores": x @ W[:, ::-1].astype(np.float32)}


def nearly(case):
    \"\"\"a harmless change: scores scaled by 1.0001\"\"\"
    return {"scores": candidate(case)["scores"] * np.float32(1.0001)}
"""

CASES = [f"c{i:02d}" for i in range(16)]
W = np.random.default_rng(0).standard_normal((8, 4))


def _project(tmp_path):
    rng = np.random.default_rng(5)
    cases = {c: {"x": rng.standard_normal((1, 8))} for c in CASES}
    head = 'format_version = 3\noutputs = ["scores"]\n'
    for i, (name, arrays) in enumerate(cases.items()):
        label = int(np.argmax(arrays["x"] @ W))
        if i % 5 == 4:
            label = (label + 1) % 4  # three cases the reference itself gets wrong
        head += (
            f'\n[cases.{name}]\npath = "cases/{name}.npz"\n'
            f'sha256 = "{{sha:{name}}}"\nlabel = {label}\n'
        )
    spec = (
        head
        + """
[runners.reference]
role = "reference"
callable = "model:reference"

[runners.port]
role = "candidate"
callable = "model:candidate"

[claims.top1]
outputs = ["scores"]
metric = "accuracy"
bound = 0.5
oracle = "equivalence"
status = "provisional"
"""
    )
    return make_project(tmp_path, spec, modules={"model.py": MODEL}, cases=cases)


def test_accuracy_is_calibrated_by_a_bootstrap_over_cases(tmp_path):
    path = _project(tmp_path)
    result = calibrate_dataset_claim(
        path, "top1", model_mutations={"shuffled": "model:shuffled"}, resamples=500
    )
    assert result, result.summary()
    assert result.observed == 13 / 16
    assert 0.4 < result.interval < result.observed  # the sampling noise of 16 cases
    assert result.mutations["shuffled"] < result.proposed_bound <= result.interval
    assert "bootstrap bound over cases" in result.summary()


def test_a_mutation_inside_the_sampling_noise_refuses_and_write_keeps_the_spec(tmp_path, capsys):
    path = _project(tmp_path)
    before = path.read_text()
    args = ["calibrate", str(path), "--claim", "top1", "--model-mutation", "nearly=model:nearly"]
    assert main([*args, "--write"]) == 1
    out = capsys.readouterr().out
    assert "no gap between noise and the smallest bug" in out and "nearly" in out
    assert path.read_text() == before
    # The good case: a real bug is caught and --write stores bound, status and basis.
    good = ["calibrate", str(path), "--claim", "top1", "--model-mutation", "s=model:shuffled"]
    assert main([*good, "--write"]) == 0
    claim = load_spec(path).claims["top1"]
    assert claim.status == "calibrated" and 0.4 < claim.bound < 13 / 16
    assert claim.basis["n"] == 16 and "scipy.stats.bootstrap" in claim.basis["bootstrap"]


def _rows_project(tmp_path, rows_per_case: int = 40, cases: int = 4):
    """Few cases of many independent rows each (a held-out set stored in chunks)."""
    rng = np.random.default_rng(7)
    arrays = {f"r{i}": {"x": rng.standard_normal((rows_per_case, 8))} for i in range(cases)}
    head = 'format_version = 3\noutputs = ["scores", "extra"]\n'
    for name, case in arrays.items():
        labels = np.argmax(case["x"] @ W, axis=1)
        labels[::6] = (labels[::6] + 1) % 4  # a sixth of the rows the reference gets wrong
        head += (
            f'\n[cases.{name}]\npath = "cases/{name}.npz"\n'
            f'sha256 = "{{sha:{name}}}"\nlabel = {labels.tolist()}\n'
        )
    spec = (
        head
        + """
[runners.reference]
role = "reference"
callable = "model:reference"

[runners.port]
role = "candidate"
callable = "model:candidate"

[claims.top1]
outputs = ["scores"]
metric = "accuracy"
bound = 0.5
oracle = "equivalence"
status = "provisional"

[claims.both]
outputs = ["scores", "extra"]
metric = "accuracy"
bound = 0.5
oracle = "equivalence"
status = "provisional"
"""
    )
    model = MODEL + (
        "\n\ndef reference(case):\n"
        "    x = case.load()['x']\n"
        "    return {'scores': x @ W, 'extra': (x @ W)[:1]}\n"
        "\n\ndef candidate(case):\n"
        "    x = case.load()['x'].astype(np.float32)\n"
        "    return {'scores': x @ W.astype(np.float32), 'extra': (x @ W)[:1]}\n"
    )
    return make_project(tmp_path, spec, modules={"model.py": model}, cases=arrays)


def test_resampling_rows_bounds_a_chunked_held_out_set_by_its_items(tmp_path):
    path = _rows_project(tmp_path)
    by_rows = calibrate_dataset_claim(
        path, "top1", model_mutations={"shuffled": "model:shuffled"}, resamples=400, unit="rows"
    )
    assert by_rows, by_rows.summary()
    assert by_rows.unit == "rows" and by_rows.units == 160 and len(by_rows.cases) == 4
    assert by_rows.observed == 1 - 4 * 7 / 160  # every sixth row of each case is wrong
    # the sampling noise of 160 items: about 1.645 * sqrt(p (1 - p) / 160) below the observed
    assert 0.76 < by_rows.interval < by_rows.observed
    assert by_rows.mutations["shuffled"] < by_rows.proposed_bound <= by_rows.interval
    assert "bound over 160 rows of the cases" in by_rows.summary()
    assert by_rows.basis()["n"] == 160 and "160 rows" in by_rows.basis()["bootstrap"]
    # the other direction: a harmless change stays inside the noise of the rows and is refused
    nearly = calibrate_dataset_claim(
        path, "top1", model_mutations={"nearly": "model:nearly"}, resamples=200, unit="rows"
    )
    assert not nearly and "nearly" in nearly.reason and nearly.proposed_bound is None


def test_the_calibrate_command_resamples_rows_when_asked(tmp_path, capsys):
    path = _rows_project(tmp_path, cases=2)
    args = ["calibrate", str(path), "--claim", "top1", "--model-mutation", "s=model:shuffled"]
    assert main([*args, "--unit", "rows"]) == 0
    assert "bound over 80 rows of the cases" in capsys.readouterr().out
    main(args)  # the default resamples the two cases
    assert "bootstrap bound over cases" in capsys.readouterr().out


def test_resampling_rows_refuses_outputs_of_different_row_counts_and_unknown_units(tmp_path):
    path = _rows_project(tmp_path, cases=2)
    with pytest.raises(InputError, match=r"covered outputs hold \[1, 40\] rows"):
        calibrate_dataset_claim(
            path, "both", model_mutations={"s": "model:shuffled"}, resamples=50, unit="rows"
        )
    with pytest.raises(InputError, match="unit must be 'cases' or 'rows', got 'items'"):
        calibrate_dataset_claim(path, "top1", unit="items")
