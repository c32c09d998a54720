"""Both specs as a whole: the gates hold every claim, each planted bug fails its claim with a
message naming it, and the docs publish exactly the numbers the gates enforce."""

from __future__ import annotations

import shutil

import pytest

from paritygate import run_gate
from paritygate.cli import main

BUGS = [
    ("compiled-exact", "stale-checkpoint", "mixed-lengths", "action"),
    ("pruned-exact", "pruned-without-key-mask", "mixed-lengths", "action"),
    ("block-local-exact", "window-off-by-one", "long-inputs", "action"),
    ("token-batching-exact", "order-not-restored", "mixed-lengths", "action"),
    ("prefix-cache-exact", "cache-key-without-options", "one-option", "ids"),
]


def _failures(result):
    return [
        (v.claim_id, v.candidate, v.case, [f.describe() for f in v.failures])
        for v in result.verdicts
        if not v.passed
    ]


def test_gate_holds_every_exact_claim(spec):
    result = run_gate(spec)
    assert result.passed, (_failures(result), result.errors, result.drift)
    assert {v.claim_id for v in result.verdicts} == set(spec.claims)
    exact = [v for v in result.verdicts if v.metric == "exact"]
    assert len(exact) == 5 * len(spec.cases) and all(v.observed == 0.0 for v in exact)
    agreement = [v for v in result.verdicts if v.metric == "agreement"]
    assert len(agreement) == 6 and all(v.observed == 1.0 for v in agreement)


@pytest.mark.parametrize("claim,mutation,case,output", BUGS)
def test_each_planted_bug_fails_its_claim(spec, mutations, claim, mutation, case, output):
    runner, bug = mutations.MUTATIONS[mutation]
    with bug():
        result = run_gate(spec, claims=[claim], cases=[case])
    assert not result.passed
    failed = [v for v in result.verdicts if not v.passed]
    assert failed and all(v.claim_id == claim and v.candidate == runner for v in failed)
    text = " ".join(f.describe() for v in failed for f in v.failures)
    assert output in text, text


def test_heldout_gate_holds_accuracy_and_quantization_claims(heldout_spec):
    result = run_gate(heldout_spec)
    assert result.passed, (_failures(result), result.errors, result.drift)
    assert {v.claim_id for v in result.verdicts} == set(heldout_spec.claims)
    rows = {v.claim_id: v.evidence.get("rows") for v in result.verdicts if v.metric == "accuracy"}
    assert all(n == 600 for n in rows.values()), rows


def test_two_bit_weights_fail_the_four_bit_claims(heldout_spec, mutations):
    claims = ["q4-action-accuracy", "q4-choice-accuracy", "q4-action-agreement", "q4-prob-drift"]
    with mutations.MUTATIONS["two-bit-weights"][1]():
        result = run_gate(heldout_spec, claims=claims, cases=["heldout-00", "heldout-01"])
    failed = {v.claim_id for v in result.verdicts if not v.passed}
    assert {"q4-action-accuracy", "q4-action-agreement", "q4-prob-drift"} <= failed, failed


def test_two_bit_weights_fail_non_inferiority_naming_margin_difference_and_bound(
    heldout_spec, mutations
):
    """The planted degradation (2-bit weights) against the float32 baseline over the 600 items:
    the paired test fails it, and the failure names the margin, the observed difference and its
    confidence bound (the real 4-bit model passes: test_heldout_gate_holds_...)."""
    with mutations.MUTATIONS["two-bit-weights"][1]():
        result = run_gate(heldout_spec, claims=["q4-action-noninferior"])
    (verdict,) = result.verdicts
    assert not verdict.passed and verdict.observed < -0.03
    text = verdict.failures[0].describe()
    assert "against the margin 0.03" in text and "accuracy difference -0.0" in text
    assert f"lower confidence bound {verdict.observed:+.4f}" in text


def test_quantization_that_quantizes_nothing_fails_its_activity_band(heldout_spec, runners):
    import model

    real = model.quantize

    def nothing(m, bits, group_size=model.GROUP_SIZE, backend=None):
        return {"bits": bits, "group_size": group_size, "quantized": [], "skipped": []}

    saved = runners._ENCODERS.pop("q8", None)
    model.quantize = nothing
    try:
        result = run_gate(heldout_spec, claims=["q8-prob-drift"], cases=["heldout-00"])
    finally:
        model.quantize = real
        runners._ENCODERS.pop("q8", None)
        if saved is not None:
            runners._ENCODERS["q8"] = saved
    (verdict,) = [v for v in result.verdicts if not v.passed]
    text = " ".join(f.describe() for f in verdict.failures)
    assert "QuantizedLinear" in text and "did nothing" in text, text


@pytest.mark.parametrize(
    "doc,spec_name",
    [
        ("README.md", "parity.toml"),
        ("QUALITY.md", "parity-heldout.toml"),
        ("SPEED.md", "parity-speed.toml"),
    ],
)
def test_docs_publish_the_numbers_the_gates_enforce(example_folder, doc, spec_name):
    assert (
        main(
            [
                "claims",
                "check",
                str(example_folder / doc),
                "--spec",
                str(example_folder / spec_name),
            ]
        )
        == 0
    )


def test_every_figure_of_the_published_claims_section_is_tied(example_folder, tmp_path, capsys):
    """parity.toml publishes its claims in README.md#claims: with --unmarked, a figure written
    there without a marker fails, one outside the section does not."""
    args = ["claims", "check", "--unmarked", "--spec"]
    assert main([*args, str(example_folder / "parity.toml")]) == 0
    capsys.readouterr()
    project = tmp_path / "encoder_mlx"
    project.mkdir()
    for name in ("parity.toml", "README.md", "mutation.json"):
        shutil.copy(example_folder / name, project)
    for folder in ("calibration", "bench-results"):
        shutil.copytree(example_folder / folder, project / folder)
    text = (project / "README.md").read_text()
    claims, after = text.split("\n## Claims\n", 1)[1].split("\n## ", 1)
    assert main([*args, str(project / "parity.toml")]) == 0  # the copy, as it is
    capsys.readouterr()
    (project / "README.md").write_text(
        text.replace("\n## Claims\n", "\n## Claims\n\nOn the GPU q4 is 3.50x faster.\n", 1)
    )
    assert main([*args, str(project / "parity.toml")]) == 1
    assert "unmarked number '3.50x' in README.md#claims" in capsys.readouterr().out
    assert claims and after  # a figure after the section is not the section's
    (project / "README.md").write_text(text + "\nOn the GPU q4 is 3.50x faster.\n")
    assert main([*args, str(project / "parity.toml")]) == 0


def test_a_doc_promising_more_than_the_gate_enforces_fails(example_folder, tmp_path, capsys):
    project = tmp_path / "encoder_mlx"
    project.mkdir()
    for name in ("parity-heldout.toml", "README.md", "QUALITY.md"):
        shutil.copy(example_folder / name, project)
    for folder in ("cases", "calibration"):
        shutil.copytree(example_folder / folder, project / folder)
    text = (example_folder / "QUALITY.md").read_text()
    marker = "<!-- claim: q4-action-accuracy -->"
    line = next(line for line in text.splitlines() if marker in line)
    import re

    number = re.findall(r"[0-9]+\.[0-9]+", line.split(marker)[0])[-1]
    tighter = line.replace(number, f"{float(number) + 0.01:.3f}")
    (project / "QUALITY.md").write_text(text.replace(line, tighter))
    code = main(
        [
            "claims",
            "check",
            str(project / "QUALITY.md"),
            "--spec",
            str(project / "parity-heldout.toml"),
        ]
    )
    assert code == 1
    assert "q4-action-accuracy" in capsys.readouterr().out
