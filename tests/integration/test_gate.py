"""The gate on real small runs: the box-port incident, tiny numpy / MLX / subprocess models."""

from __future__ import annotations

import json
import platform

import numpy as np
import pytest
from spec_helpers import TINY_MODEL, TINY_SPEC, copy_box_port, make_project, plant_scale_bug

from paritygate.cli import main
from paritygate.errors import WrongHardware
from paritygate.gate import current_hardware, run_gate
from paritygate.references import record
from paritygate.spec import load_spec


@pytest.fixture()
def box_port(tmp_path):
    project = copy_box_port(tmp_path)
    record(load_spec(project / "parity.toml"))
    return project


def test_case_and_claim_filters(box_port, capsys):
    plant_scale_bug(box_port)
    spec = load_spec(box_port / "parity.toml")
    only = run_gate(spec, cases=["leetcode"], claims=["panel-edges"])
    assert only.passed and {v.case for v in only.verdicts} == {"leetcode"}
    assert main(["gate", str(box_port / "parity.toml"), "--case", "wide_editor"]) == 1
    assert main(["gate", str(box_port / "parity.toml"), "--claim", "nope"]) == 2
    assert "no claim 'nope'" in capsys.readouterr().err


def _tiny(tmp_path, spec_text=TINY_SPEC, **kwargs):
    path = make_project(tmp_path, spec_text, **kwargs)
    record(load_spec(path))
    return path


def test_float32_numpy_candidate_both_directions(tmp_path):
    path = _tiny(tmp_path)
    assert run_gate(load_spec(path)).passed  # float32 vs float64 within 1e-5
    path.write_text(path.read_text().replace("bound = 1e-5", "bound = 1e-12"))
    result = run_gate(load_spec(path))
    (verdict,) = [v for v in result.verdicts if v.case == "a"]
    assert not verdict.passed and verdict.observed > 1e-12
    (failure,) = verdict.failures
    assert failure.where.startswith("y at index ") and "elements beyond the bound" in failure.detail
    assert verdict.evidence["y"]["promotion"] == "float32 -> float64 (actual)"


def test_mlx_candidate_both_directions(tmp_path):
    spec_text = (
        TINY_SPEC.replace("tiny:candidate32", "tiny:candidate_mlx")
        + """
[claims.logits-cosine]
outputs = ["logits"]
metric = "cosine"
bound = 0.99999
oracle = "equivalence"
status = "provisional"
"""
    )
    path = _tiny(tmp_path, spec_text)
    result = run_gate(load_spec(path))
    assert result.passed and {v.claim_id for v in result.verdicts} == {"y-close", "logits-cosine"}
    # a real bug in the MLX port: ReLU where the model has tanh
    (tmp_path / "tiny.py").write_text(
        TINY_MODEL.replace('return {"y": mx.tanh(logits)', 'return {"y": mx.maximum(logits, 0)')
    )
    result = run_gate(load_spec(path))
    assert not result.passed
    assert {v.claim_id for v in result.verdicts if not v.passed} == {"y-close"}


def test_extra_output_fails(tmp_path, capsys):
    path = _tiny(tmp_path, TINY_SPEC.replace("tiny:candidate32", "tiny:candidate_extra"))
    result = run_gate(load_spec(path))
    assert not result.passed and all(result.verdicts)
    assert result.errors == [
        "runner cand, case a: extra output 'debug' (produced by the candidate, not in the "
        "reference)",
        "runner cand, case b: extra output 'debug' (produced by the candidate, not in the "
        "reference)",
    ]
    assert main(["gate", str(path)]) == 1


def test_missing_output_fails(tmp_path):
    spec_text = TINY_SPEC.replace("tiny:candidate32", "tiny:candidate_missing").replace(
        'outputs = ["y"]\nmetric', 'outputs = ["*"]\nmetric'
    )
    path = _tiny(tmp_path, spec_text)
    result = run_gate(load_spec(path))
    assert not result.passed
    failures = [f for v in result.verdicts for f in v.failures]
    assert {(f.metric, f.where) for f in failures} == {("missing_output", "logits")}
    # said once: the claim that covers 'logits' names it; the run errors do not repeat it
    assert result.errors == []


def test_missing_output_no_claim_covers_is_an_error_of_the_run(tmp_path):
    """The claim covers only 'y', which the candidate produces: its verdicts hold, and the
    missing 'logits' is reported once, as an error of the run, which still fails."""
    path = _tiny(tmp_path, TINY_SPEC.replace("tiny:candidate32", "tiny:candidate_missing"))
    result = run_gate(load_spec(path))
    assert not result.passed and result.verdicts and all(result.verdicts)
    assert result.errors == [
        "runner cand, case a: missing output 'logits' (in the reference, not produced by the "
        "candidate)",
        "runner cand, case b: missing output 'logits' (in the reference, not produced by the "
        "candidate)",
    ]


def test_adapter_missing_output_is_said_by_the_cross_adapter_verdict_once(tmp_path):
    spec_text = (
        TINY_SPEC
        + """
[runners.cand-api]
role = "adapter"
adapter_of = "cand"
callable = "tiny:candidate_missing"
"""
    )
    path = _tiny(tmp_path, spec_text.replace("tiny:candidate32", "tiny:reference"))
    result = run_gate(load_spec(path))
    assert not result.passed and result.errors == []
    failing = [v for v in result.verdicts if not v.passed]
    assert [(v.claim_id, v.candidate, v.case) for v in failing] == [
        ("cross-adapter:cand", "cand-api", "a"),
        ("cross-adapter:cand", "cand-api", "b"),
    ]
    assert all(
        [(f.metric, f.where) for f in v.failures] == [("missing_output", "logits")] for v in failing
    )
    # the sides are named as they are: the adapter lacks what its candidate produced
    assert failing[0].failures[0].detail == "in candidate cand, not produced by adapter cand-api"


def test_an_adapter_with_an_extra_or_an_empty_output_is_told_so(tmp_path):
    """An output the adapter adds is an extra output of the adapter (not 'missing in the
    reference'); an empty output against a non-empty one is a size failure, not a NaN."""
    model = (
        TINY_MODEL
        + """

def adapter_extra(case):
    out = candidate32(case)
    out["debug"] = np.zeros(3)
    return out


def adapter_empty(case):
    out = candidate32(case)
    out["y"] = np.zeros((0, 4), np.float32)
    return out
"""
    )
    for adapter, expected in (
        (
            "adapter_extra",
            ("extra_output", "debug", "produced by adapter cand-api, not in candidate cand"),
        ),
        ("adapter_empty", ("size", "y", None)),
    ):
        spec_text = TINY_SPEC + (
            f'\n[runners.cand-api]\nrole = "adapter"\nadapter_of = "cand"\n'
            f'callable = "tiny:{adapter}"\n'
        )
        path = make_project(
            tmp_path / adapter, spec_text, modules={"tiny.py": model, "tiny_cli.py": ""}
        )
        record(load_spec(path))
        result = run_gate(load_spec(path))
        cross = [v for v in result.verdicts if v.oracle == "cross-adapter"]
        assert cross and not any(cross), adapter
        failures = [(f.metric, f.where, f.detail) for f in cross[0].failures]
        assert [f[:2] for f in failures] == [expected[:2]], failures
        if expected[2]:
            assert failures[0][2] == expected[2]
        assert not any(f[0] == "nonfinite" for v in cross for f in failures)


def test_a_missing_output_has_no_passing_bound_and_no_measured_worst(tmp_path, capsys):
    """The candidate lacks the claim's only output: no value was measured, so the summary says
    what failed instead of "worst 0 ... zero", and no "bound that would have held" is offered;
    a candidate whose output is merely off keeps both."""
    model = TINY_MODEL + "\n\ndef no_y(case):\n    return {'logits': reference(case)['logits']}\n"
    modules = {"tiny.py": model, "tiny_cli.py": ""}
    path = make_project(
        tmp_path / "missing", TINY_SPEC.replace("tiny:candidate32", "tiny:no_y"), modules=modules
    )
    record(load_spec(path))
    result = run_gate(load_spec(path))
    verdict = next(v for v in result.verdicts if v.claim_id == "y-close")
    assert not verdict.passed and verdict.observed is None
    assert "bound_that_passes" not in verdict.evidence
    assert main(["gate", str(path)]) == 1
    out = capsys.readouterr().out
    assert "y-close  cand  0/2 cases  missing output  bound 1e-05" in out, out
    assert "would have held" not in out and "worst 0" not in out
    # the planted difference the other way: an output that is off keeps its measured worst and
    # the bound that would have held
    strict = make_project(
        tmp_path / "off", TINY_SPEC.replace("bound = 1e-5", "bound = 1e-12"), modules=modules
    )
    record(load_spec(strict))
    assert main(["gate", str(strict)]) == 1
    out = capsys.readouterr().out
    assert "would have held" in out and "missing output" not in out


def test_the_summary_says_it_counts_claim_candidate_pairs_when_a_spec_has_two_candidates(
    tmp_path, capsys
):
    two = TINY_SPEC + '\n[runners.cand64]\nrole = "candidate"\ncallable = "tiny:reference"\n'
    path = _tiny(tmp_path, two.replace("bound = 1e-5", "bound = 1e-12"))
    assert main(["gate", str(path)]) == 1
    out = capsys.readouterr().out
    # the float64 candidate holds the strict bound, the float32 one does not: one pair of two
    assert "FAIL — 1/2 claim × candidate pairs (1 claim, 2 candidates) hold" in out, out
    one = _tiny(tmp_path / "one", TINY_SPEC)
    assert main(["gate", str(one)]) == 0
    assert "PASS — 1/1 claims hold" in capsys.readouterr().out


def test_a_cosine_claim_writes_its_values_as_distances_from_one(tmp_path, capsys):
    """A cosine floor of 1 - 1e-15 printed with 4 digits reads "bound 1", which no value could
    exceed: per-case lines write 1 - x; a NaN makes the cosine undefined, said in the header."""
    cosine = TINY_SPEC.replace('metric = "max_abs"\nbound = 1e-5', 'metric = "cosine"\nbound = B')
    strict = _tiny(tmp_path / "strict", cosine.replace("bound = B", "bound = 0.999999999999999"))
    assert main(["gate", str(strict)]) == 1
    out = capsys.readouterr().out
    assert "bound 1-1e-15 short by 1.6e-15" in out and "bound of 1-2.6e-15 would have held" in out
    assert " bound 1 " not in out and "short by 1-" not in out
    model = TINY_MODEL + (
        "\n\ndef with_nan(case):\n    out = candidate32(case)\n"
        "    out['y'][0, 0] = np.nan\n    return out\n"
    )
    nan = make_project(
        tmp_path / "nan",
        cosine.replace("bound = B", "bound = 0.999").replace("tiny:candidate32", "tiny:with_nan"),
        modules={"tiny.py": model, "tiny_cli.py": ""},
    )
    record(load_spec(nan))
    assert main(["gate", str(nan)]) == 1
    out = capsys.readouterr().out
    assert "0/2 cases  cosine undefined  bound 0.001" in out, out
    assert "cosine at y bound 1-0.001 (undefined: actual has NaN" in out


def test_crashed_subprocess_runner_fails_with_its_stderr(tmp_path, capsys):
    spec_text = TINY_SPEC.replace(
        'callable = "tiny:candidate32"',
        'command = ["{python}", "tiny_cli.py", "{case}", "{out}"]\nformat = "npz"\nenv = { MODE = '
        '"crash" }',
    )
    path = _tiny(tmp_path, spec_text)
    assert main(["gate", str(path)]) == 1
    out = capsys.readouterr().out
    # one line for the crash on every case, its stderr once, before the claims
    assert out.startswith("ERROR runner cand crashed on 2/2 cases (a, b): exited with status 7\n")
    assert out.count("fatal: cannot open model weights at /nonexistent/weights.bin") == 1
    assert "FAIL  y-close  cand  0/2 cases  no outputs" in out
    assert "no outputs on 2 case(s): the runner failed (see above)" in out
    assert out.rstrip().splitlines()[-1].endswith("parity-reports/parity/report.html")
    result = json.loads((tmp_path / "parity-reports" / "parity" / "result.json").read_text())
    assert any("/nonexistent/weights.bin" in e for e in result["errors"])
    # the same command without the fault passes: the runner itself is sound
    path.write_text(path.read_text().replace('env = { MODE = "crash" }', ""))
    assert main(["gate", str(path)]) == 0


def test_unparseable_output_fails(tmp_path):
    spec_text = TINY_SPEC.replace(
        'callable = "tiny:candidate32"',
        'command = ["{python}", "tiny_cli.py", "{case}", "{out}"]\nformat = "npz"\nenv = { MODE = '
        '"garbage" }',
    )
    result = run_gate(load_spec(_tiny(tmp_path, spec_text)))
    assert (
        not result.passed
        and all("unparseable" in e for e in result.errors)
        and len(result.errors) == 2
    )


def test_a_spec_whose_claims_all_hold_on_other_hardware_cannot_run_here(tmp_path, capsys):
    spec_text = (
        TINY_SPEC.replace('status = "provisional"', 'status = "provisional"\nhardware = "m2"')
        + """
[hardware.m2]
system = "Darwin"
cpu = "Apple M2*"

[claims.fast]
outputs = ["y"]
metric = "p50_ms"
bound = 1
oracle = "approximation"
status = "provisional"
hardware = "m2"
"""
    )
    path = _tiny(tmp_path, spec_text)
    # Nothing was violated, nothing can be checked: neither a pass nor a failure, exit 4.
    with pytest.raises(
        WrongHardware, match="hardware class 'm2' \\(system Darwin, cpu Apple M2\\*\\)"
    ):
        run_gate(load_spec(path), hardware="any")
    capsys.readouterr()
    assert main(["gate", str(path), "--hardware", "any"]) == 4
    err = capsys.readouterr().err.strip()
    assert err.startswith("paritygate: cannot run here: ") and len(err.splitlines()) == 1
    assert "this machine is in no declared class" in err and "nothing was evaluated" in err
    assert "--hardware or PARITYGATE_HARDWARE" in err
    # naming the class evaluates them (the speed claim too: that is a gate run on its hardware)
    assert run_gate(load_spec(path), hardware="m2").verdicts


def test_claims_on_other_hardware_are_listed_by_name_beside_those_that_run(tmp_path, capsys):
    spec_text = (
        TINY_SPEC
        + """
[hardware.m2]
system = "Darwin"
cpu = "Apple M2*"

[claims.fast]
outputs = ["y"]
metric = "p50_ms"
bound = 1
oracle = "approximation"
status = "provisional"
hardware = "m2"
"""
    )
    path = _tiny(tmp_path, spec_text)
    result = run_gate(load_spec(path), hardware="any")
    assert result.passed and {v.claim_id for v in result.verdicts} == {"y-close"}
    assert [n.claim_id for n in result.not_evaluated] == ["fast"]
    assert "'m2'" in result.not_evaluated[0].reason
    capsys.readouterr()
    assert main(["gate", str(path), "--hardware", "any"]) == 0
    out = capsys.readouterr().out
    assert out.count("fast (holds for hardware class 'm2'") == 1


def test_hardware_classes_match_this_machine(tmp_path):
    spec_text = (
        TINY_SPEC
        + f'\n[hardware.here]\nsystem = "{platform.system()}"\n\n[hardware.elsewhere]\nsystem = '
        '"Plan9"\n'
    )
    spec = load_spec(make_project(tmp_path, spec_text))
    assert current_hardware(spec) == ["any", "here"]
    assert current_hardware(spec, "elsewhere") == ["any", "elsewhere"]


def test_dataset_claims_accuracy_and_ece(tmp_path):
    rng = np.random.default_rng(3)
    cases = {f"c{i}": {"x": rng.standard_normal((1, 8))} for i in range(6)}
    w = np.random.default_rng(0).standard_normal((8, 4))
    labels = {name: int(np.argmax(arrays["x"] @ w)) for name, arrays in cases.items()}
    labels["c5"] = (labels["c5"] + 1) % 4  # one case the model gets wrong: accuracy 5/6
    case_tables = "".join(
        f'\n[cases.{n}]\npath = "cases/{n}.npz"\nsha256 = "{{sha:{n}}}"\nlabel = {labels[n]}\n'
        for n in cases
    )
    spec_text = (
        TINY_SPEC.split("[cases.a]")[0]
        + case_tables
        + "\n[runners.reference]"
        + TINY_SPEC.split("[runners.reference]")[1]
        + """
[claims.top1]
outputs = ["logits"]
metric = "accuracy"
bound = 0.8
oracle = "approximation"
status = "provisional"

[claims.calibration]
outputs = ["logits"]
metric = "ece"
bound = 0.9
oracle = "approximation"
status = "provisional"
params = { inputs = "logits", bins = 5 }
"""
    )
    path = _tiny(tmp_path, spec_text, cases=cases)
    result = run_gate(load_spec(path))
    top1 = next(v for v in result.verdicts if v.claim_id == "top1")
    assert top1.case is None and top1.passed and top1.observed == pytest.approx(5 / 6)
    assert next(v for v in result.verdicts if v.claim_id == "calibration").passed
    path.write_text(path.read_text().replace("bound = 0.8", "bound = 0.9"))
    top1 = next(v for v in run_gate(load_spec(path)).verdicts if v.claim_id == "top1")
    assert not top1.passed and top1.excess == pytest.approx(0.9 - 5 / 6)


NOOP_MODEL = (
    TINY_MODEL
    + """

_calls = {"leaked": False}


def reference_with_state(case):
    out = reference(case)
    if _calls["leaked"]:
        out["y"] = out["y"] + 1e-7  # a callback left installed changes later baselines
    return out


def wrapper_noop(case):
    return reference_with_state(case)


def wrapper_leaky(case):
    out = reference_with_state(case)
    _calls["leaked"] = True
    return out
"""
)

NOOP_SPEC = (
    TINY_SPEC.replace("tiny:reference", "tiny:reference_with_state").replace(
        "tiny:candidate32", "tiny:wrapper_noop"
    )
    + """
[claims.wrapper-noop]
outputs = ["y"]
metric = "exact"
bound = 0
oracle = "no-op"
mode = "paired"
status = "provisional"
"""
)


def test_paired_noop_claim_both_directions(tmp_path):
    path = _tiny(tmp_path, NOOP_SPEC, modules={"tiny.py": NOOP_MODEL})
    result = run_gate(load_spec(path), claims=["wrapper-noop"])
    assert result.passed and [v.oracle for v in result.verdicts] == ["no-op", "no-op"]
    path.write_text(path.read_text().replace("tiny:wrapper_noop", "tiny:wrapper_leaky"))
    result = run_gate(load_spec(path), claims=["wrapper-noop"])
    assert not result.passed
    wheres = [f.where for v in result.verdicts for f in v.failures]
    assert any("baseline-after" in w for w in wheres)


def test_zero_claims_selected_by_drift_is_not_a_pass(tmp_path):
    path = make_project(tmp_path)
    record(load_spec(path))
    stored = next(p for p in (tmp_path / "references").rglob("*.safetensors"))
    stored.write_bytes(stored.read_bytes() + b" ")  # a recorded file shifted
    result = run_gate(load_spec(path))
    assert result.exit_code == 3 and not result.passed and not result.verdicts


def test_bad_spec_exits_2_and_overwrites_nothing(box_port, capsys):
    spec_path = box_port / "parity.toml"
    before = {p: p.read_bytes() for p in (box_port / "references").rglob("*") if p.is_file()}
    spec_path.write_text(spec_path.read_text() + "\n[claims.panel-edges.basis\n")
    for command in ("record", "verify", "gate"):
        assert main([command, str(spec_path)]) == 2
        assert "malformed TOML" in capsys.readouterr().err
    assert {
        p: p.read_bytes() for p in (box_port / "references").rglob("*") if p.is_file()
    } == before


ACTIVITY_MODEL = (
    TINY_MODEL
    + """

import os


def body():
    # the work an optimization saves: paritygate counts its calls
    return None


def candidate_cached(case):
    for _ in range(int(os.environ.get("CALLS", "6"))):
        body()
    return candidate32(case)
"""
)


def test_activity_band_both_directions(tmp_path, monkeypatch):
    spec_text = TINY_SPEC.replace("tiny:candidate32", "tiny:candidate_cached").replace(
        'status = "provisional"',
        'status = "provisional"\nactivity = { calls = "tiny:body", min = 5, max = 7 }',
    )
    path = _tiny(tmp_path, spec_text, modules={"tiny.py": ACTIVITY_MODEL})
    result = run_gate(load_spec(path))
    assert result.passed and result.errors == []  # the count is not an "extra output"
    monkeypatch.setenv("CALLS", "0")
    result = run_gate(load_spec(path))
    assert not result.passed
    failures = [f for v in result.verdicts for f in v.failures]
    assert [f.metric for f in failures] == ["activity:tiny:body"] * 2
    assert "calls of tiny:body = 0 (counted by paritygate)" in failures[0].detail
    assert "the optimization did nothing" in failures[0].detail


IMAGE_MODEL = """
import numpy as np
from scipy import ndimage


def render(inputs):
    x = inputs["x"]
    return {"image": ndimage.gaussian_filter(np.outer(np.sin(x), np.cos(x)), 1.0)}


def render_uint8(inputs):
    image = render(inputs)["image"]
    pixels = (np.clip(image, -1, 1) * 127.5 + 127.5).round().astype(np.uint8)
    return {"image_nhwc": pixels[None, :, :, None]}


def render_swapped_axes(inputs):
    return {"image": render(inputs)["image"].T}
"""

IMAGE_SPEC = """
format_version = 1
outputs = ["image"]

[cases.a]
path = "cases/a.npz"
sha256 = "{sha:a}"

[runners.reference]
role = "reference"
callable = "render:render"
pass = "inputs"

[runners.cand]
role = "candidate"
callable = "render:render_uint8"
pass = "inputs"
cast = "reference"

[runners.cand.map.image]
from = "image_nhwc"
slice = "0, :, :, 0"
"""


def test_output_scope_ssim_with_mapping_and_cast_policy(tmp_path):
    spec_text = (
        IMAGE_SPEC
        + """
[claims.look]
outputs = ["image"]
metric = "ssim"
bound = 0.95
oracle = "approximation"
status = "provisional"
params = { data_range = 2.0 }
"""
    )
    cases = {"a": {"x": np.linspace(0, 6, 48)}}
    # The mapping slices the candidate's NHWC output to HW and the cast policy casts it to the
    # reference's float64; the candidate's bug is that it returns pixels in 0..255, not [-1, 1].
    path = _tiny(tmp_path, spec_text, modules={"render.py": IMAGE_MODEL}, cases=cases)
    result = run_gate(load_spec(path))
    (verdict,) = result.verdicts
    assert not verdict.passed and verdict.evidence["image"]["ssim"] < 0.95
    # the candidate fixed to return the same range: passes within quantization noise
    (tmp_path / "render.py").write_text(
        IMAGE_MODEL.replace(
            "(np.clip(image, -1, 1) * 127.5 + 127.5).round().astype(np.uint8)",
            "((np.clip(image, -1, 1) * 127.5).round() / 127.5)",
        )
    )
    (verdict,) = run_gate(load_spec(path)).verdicts
    assert verdict.passed and 0.95 <= verdict.observed < 1.0
    # a candidate with swapped axes fails the same claim
    path.write_text(
        path.read_text()
        .replace('callable = "render:render_uint8"', 'callable = "render:render_swapped_axes"')
        .replace('\n[runners.cand.map.image]\nfrom = "image_nhwc"\nslice = "0, :, :, 0"\n', "\n")
    )
    (verdict,) = run_gate(load_spec(path)).verdicts
    assert (
        not verdict.passed
        and verdict.failures[0].metric == "ssim"
        and verdict.failures[0].where == "image"
    )


def test_in_process_timeout_fails_the_gate_without_hanging_it(tmp_path, capsys):
    import sys

    from spec_helpers import TINY_MODEL
    from test_runners import HANGING_MODEL

    spec_text = TINY_SPEC.replace(
        'callable = "tiny:candidate32"', 'callable = "tiny:candidate_hang"\ntimeout = 0.5'
    )
    path = make_project(tmp_path, spec_text, modules={"tiny.py": TINY_MODEL + HANGING_MODEL})
    record(load_spec(path))
    try:
        assert main(["gate", str(path)]) == 1
    finally:
        sys.modules["tiny"].RELEASE.set()
    out = capsys.readouterr().out
    out = " ".join(out.split())
    assert "runner cand timed out on 1/2 cases (a): no result within 0.5 s" in out
    assert "runner cand timed out on 1/2 cases (b): not run: the call for case a timed out" in out


def test_progress_reports_every_runner_and_case_then_done(tmp_path):
    spec_text = (
        TINY_SPEC + '\n[runners.cand-api]\nrole = "adapter"\nadapter_of = "cand"\ncallable = '
        '"tiny:candidate32"\n'
    )
    path = _tiny(tmp_path, spec_text)
    stages = []
    result = run_gate(
        load_spec(path), progress=lambda stage, done, total: stages.append((stage, done, total))
    )
    assert result.passed
    assert stages == [
        ("cand: a", 0, 4),
        ("cand: b", 1, 4),
        ("cand-api: a", 2, 4),
        ("cand-api: b", 3, 4),
        ("done", 4, 4),
    ]
