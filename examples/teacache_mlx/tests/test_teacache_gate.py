"""The spec as a whole: the gate enforces every claim, and the README publishes exactly the
numbers the gate enforces (claims check), in both directions."""

from __future__ import annotations

import shutil

from paritygate import current_hardware, run_gate
from paritygate.cli import main


def test_gate_evaluates_and_holds_every_claim(spec):
    """Two cases keep the run short; the full run is ``paritygate gate parity.toml``."""
    result = run_gate(spec, cases=["seed0-digit0", "seed7-digit7"])
    failures = [
        (v.claim_id, v.candidate, v.case, [f.describe() for f in v.failures])
        for v in result.verdicts
        if not v.passed
    ]
    assert result.passed, (failures, result.errors, result.drift)
    # Claims calibrated for another hardware class are listed, by name, as not evaluated.
    here = set(current_hardware(spec))
    expected = {cid for cid, claim in spec.claims.items() if claim.hardware in here}
    assert {v.claim_id for v in result.verdicts} == expected
    assert {n.claim_id for n in result.not_evaluated} == set(spec.claims) - expected
    assert {"proxy-noop", "eager-noop", "compiled-noop"} <= expected  # hold on any machine
    noop = [v for v in result.verdicts if v.oracle == "no-op"]
    assert len(noop) == 6 and all(v.observed == 0.0 for v in noop)
    cached = [v for v in result.verdicts if v.claim_id == "cache-ssim"]
    assert all(v.observed < 1.0 for v in cached)
    assert len(cached) == (6 if "cache-ssim" in expected else 0)


def test_one_claim_through_the_pytest_plugin(paritygate_claim):
    """The project's own suite enforces a claim through paritygate's pytest fixture."""
    result = paritygate_claim("../parity.toml", "proxy-noop", case="seed3-digit3")
    (verdict,) = result.verdicts
    assert verdict.passed and verdict.oracle == "no-op"
    paired = verdict.evidence["paired"]
    assert paired["run_counts"] == {"baseline": 3, "candidate": 3}


def test_readme_publishes_the_numbers_the_gate_enforces(example_folder):
    readme = example_folder / "README.md"
    spec = example_folder / "parity.toml"
    assert main(["claims", "check", str(readme), "--spec", str(spec)]) == 0


def test_a_readme_promising_more_than_the_gate_enforces_fails(example_folder, tmp_path, capsys):
    project = tmp_path / "teacache_mlx"
    project.mkdir()
    shutil.copy(example_folder / "parity.toml", project)
    shutil.copytree(example_folder / "cases", project / "cases")
    shutil.copytree(example_folder / "calibration", project / "calibration")
    text = (example_folder / "README.md").read_text()
    marker = "<!-- claim: twin-max-abs -->"
    line = next(ln for ln in text.splitlines() if marker in ln)
    tighter = line.replace("2.9e-06", "1e-06", 1)
    assert tighter != line
    (project / "README.md").write_text(text.replace(line, tighter))
    code = main(
        ["claims", "check", str(project / "README.md"), "--spec", str(project / "parity.toml")]
    )
    assert code == 1
    assert "twin-max-abs" in capsys.readouterr().out


COUNTER = "self.skips_per_run.append(sum(self._run_decisions))"


def test_the_gate_catches_a_skip_counter_that_counts_attempts(example_folder, tmp_path):
    """A skip counter that counts every attempt (each step's decision, skipped or not) instead of
    the skips, planted in teacache.py, reports 25 skips at threshold 0: the no-op claims hold the
    cache's reported ``skips`` to the vanilla run's 0 and fail it on every case, naming the
    output and both values (the unit tests of test_teacache_noop.py were the only check before).
    The faithful cache passes the same claims on the same case."""
    project = tmp_path / "teacache_mlx"
    shutil.copytree(
        example_folder,
        project,
        ignore=shutil.ignore_patterns("tests", "parity-reports", "__pycache__", "results"),
    )
    for planted in (False, True):
        source = (example_folder / "teacache.py").read_text()
        assert source.count(COUNTER) == 1
        if planted:
            source = source.replace(COUNTER, COUNTER.replace("sum(", "len("))
        (project / "teacache.py").write_text(source)
        from paritygate import load_spec

        result = run_gate(
            load_spec(project / "parity.toml"),
            claims=["proxy-noop", "eager-noop"],
            cases=["seed0-digit0"],
        )
        failing = {(v.claim_id, v.case) for v in result.verdicts if not v.passed}
        if not planted:
            assert result.exit_code == 0 and not failing
            continue
        assert result.exit_code == 1
        assert failing == {("proxy-noop", "seed0-digit0"), ("eager-noop", "seed0-digit0")}
        details = [f.describe() for v in result.verdicts for f in v.failures]
        assert all("skips" in d and "25 vs 0" in d for d in details), details


ON_STEP = "if step == self._pipeline.steps - 1:"


def test_a_cache_that_closes_its_run_a_step_early_fails_on_its_next_generation(
    example_folder, tmp_path
):
    """A cache that closes a generation one step early (its run state reset before the last
    step) makes a first generation like the faithful one; the next generation on the same
    installed cache starts from the leftover state. The gate's fresh install per case never sees
    it; the runner that generates after a warm-up generation (proxy-cached-again) fails the SSIM
    floor and the skip band on it, while proxy-cached passes. The faithful cache passes both."""
    project = tmp_path / "teacache_mlx"
    shutil.copytree(
        example_folder,
        project,
        ignore=shutil.ignore_patterns("tests", "parity-reports", "__pycache__", "results"),
    )
    from paritygate import load_spec

    for planted in (False, True):
        source = (example_folder / "teacache.py").read_text()
        assert source.count(ON_STEP) == 1
        if planted:
            source = source.replace(ON_STEP, ON_STEP.replace("- 1", "- 2"))
        (project / "teacache.py").write_text(source)
        result = run_gate(
            load_spec(project / "parity.toml"), claims=["cache-ssim"], cases=["seed0-digit0"]
        )
        failing = {(v.candidate, v.case) for v in result.verdicts if not v.passed}
        if not planted:
            assert result.exit_code == 0 and not failing
            continue
        assert failing == {("proxy-cached-again", "seed0-digit0")}
        (verdict,) = [v for v in result.verdicts if not v.passed]
        assert verdict.observed < verdict.bound
        assert any("counted by paritygate" in f.describe() for f in verdict.failures)
