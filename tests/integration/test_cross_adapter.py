"""Cross-adapter check: every entry point of a candidate agrees with it at zero tolerance."""

from __future__ import annotations

from spec_helpers import TINY_SPEC, copy_box_port, make_project

from paritygate.gate import CROSS_ADAPTER_PREFIX, run_gate
from paritygate.references import record
from paritygate.spec import load_spec


def test_box_port_adapters_agree(tmp_path):
    project = copy_box_port(tmp_path)
    spec = load_spec(project / "parity.toml")
    record(spec)
    result = run_gate(spec)
    cross = [v for v in result.verdicts if v.oracle == "cross-adapter"]
    assert [(v.claim_id, v.candidate, v.case) for v in cross] == [
        (f"{CROSS_ADAPTER_PREFIX}port", "port-python", case)
        for case in ("leetcode", "wide_editor", "narrow")
    ]
    assert all(v.passed and v.bound == 0 and v.observed == 0 for v in cross)


def test_adapter_with_a_stale_threshold_is_caught_even_when_the_claim_holds(tmp_path):
    """The command-line adapter carries a stale copy of an old threshold. Each box moves 4 px,
    a 30 px claim still holds, but the adapters disagree and the gate fails."""
    project = copy_box_port(tmp_path)
    cli = project / "port_cli.py"
    cli.write_text(
        cli.read_text().replace(
            "result = detect_image(image)", "result = detect_image(image, threshold=0.6)"
        )
    )
    spec = load_spec(project / "parity-30px.toml")
    record(spec)
    result = run_gate(spec)
    assert all(v.passed for v in result.verdicts if v.claim_id == "panel-edges")
    cross = [v for v in result.verdicts if v.oracle == "cross-adapter"]
    assert len(cross) == 3 and not any(cross) and not result.passed and result.exit_code == 1
    first = cross[0].failures[0]
    assert first.where == "boxes/editor at index 0" and first.observed == 4 and first.bound == 0
    assert "port-python 132, port 136" in first.detail


def test_subprocess_adapter_of_an_in_process_candidate(tmp_path):
    spec_text = (
        TINY_SPEC
        + """
[runners.cand-cli]
role = "adapter"
adapter_of = "cand"
command = ["{python}", "tiny_cli.py", "{case}", "{out}"]
format = "npz"
"""
    )
    path = make_project(tmp_path, spec_text)
    record(load_spec(path))
    result = run_gate(load_spec(path))
    cross = [v for v in result.verdicts if v.oracle == "cross-adapter"]
    assert len(cross) == 2 and all(cross) and result.passed
    # a second entry point that went through float64 is a different numerical path: caught
    cli = tmp_path / "tiny_cli.py"
    cli.write_text(
        cli.read_text().replace(
            'x = np.load(case, allow_pickle=False)["x"].astype(np.float32)',
            'x = np.load(case, allow_pickle=False)["x"]',
        )
    )
    result = run_gate(load_spec(path))
    cross = [v for v in result.verdicts if v.oracle == "cross-adapter"]
    assert not any(cross) and all(v.passed for v in result.verdicts if v.oracle != "cross-adapter")
    assert 0 < cross[0].observed < 1e-5
