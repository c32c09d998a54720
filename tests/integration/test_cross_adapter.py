"""Cross-adapter check: every entry point of a candidate agrees with it at zero tolerance."""

from __future__ import annotations

from spec_helpers import TINY_SPEC, make_project

from paritygate.gate import run_gate
from paritygate.references import record
from paritygate.spec import load_spec


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
