"""The mutation score README.md publishes (``mutation.json``, 24 mutants of ``model.py``: `make
mutation` from the repository root) is tied to the README by ``claims check``; CI measures a
small set again: four comparison mutants on one case and two claims."""

from __future__ import annotations

import json

SMALL_SET = [
    "--candidate",
    "block-local",
    "--file",
    "model.py",
    "--operators",
    "compare",
    "--limit",
    "4",
    "--case",
    "mixed-lengths",
    "--claim",
    "block-local-exact",
    "--claim",
    "exact-paths-action-agreement",
    "--jobs",
    "2",
]

# Four compare mutants spread evenly over model.py. The last one lies in ``skip_reason`` (which
# layers quantize): parity.toml runs no quantized path, so it survives this gate, as mutant 23 of
# mutation.json does; parity-heldout.toml and test_encoder_model.py gate quantization.
EXPECTED = {
    "model.py:103:13:compare": ("caught", "block-local-exact", "mixed-lengths"),
    "model.py:160:27:compare": ("caught", "block-local-exact", "mixed-lengths"),
    "model.py:222:17:compare": ("caught", "exact-paths-action-agreement", None),
    "model.py:302:8:compare": ("survived", None, None),
}


def test_a_small_mutation_set_is_measured_again(example_folder, tmp_path, capsys):
    from paritygate.cli import main

    report = tmp_path / "small.json"
    spec = str(example_folder / "parity.toml")
    assert main(["mutate", spec, *SMALL_SET, "--json", str(report)]) == 0
    capsys.readouterr()
    measured = json.loads(report.read_text())
    assert {m["id"]: (m["status"], m["claim"], m["case"]) for m in measured["mutants"]} == EXPECTED
    assert (measured["cases"], measured["gate_runs"]) == (1, 5)
    published = json.loads((example_folder / "mutation.json").read_text())
    shared = {m["id"]: m["status"] for m in published["mutants"] if m["id"] in EXPECTED}
    assert all(status == EXPECTED[i][0] for i, status in shared.items())


def test_the_readme_publishes_the_committed_score(example_folder):
    from paritygate.cli import main

    published = json.loads((example_folder / "mutation.json").read_text())
    assert published["judged"] >= 20
    readme, spec = example_folder / "README.md", example_folder / "parity.toml"
    assert main(["claims", "check", str(readme), "--spec", str(spec)]) == 0
