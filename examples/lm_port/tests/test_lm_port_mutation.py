"""The mutation score README.md publishes (``mutation.json``: 31 mutants of the candidates' code
in ``runners.py``; `make mutation` from the repository root) is tied to the README by ``claims
check``; CI measures a small set again: llama.cpp's off-by-one mutants on one case and two
claims, each caught by the claim the published set names."""

from __future__ import annotations

import json

SMALL_SET = [
    "--candidate",
    "mlx-lm",
    "--file",
    "runners.py",
    "--scope",
    "LlamaCppRunner.run",
    "--operators",
    "off-by-one",
    "--case",
    "chat-01-split-multi",
    "--claim",
    "f32-kl",
    "--claim",
    "float-greedy",
    "--jobs",
    "2",
]

EXPECTED = {
    "runners.py:209:43:off-by-one": ("caught", "f32-kl", "chat-01-split-multi"),
    "runners.py:209:51:off-by-one": ("caught", "f32-kl", "chat-01-split-multi"),
    "runners.py:215:70:off-by-one": ("caught", "float-greedy", "chat-01-split-multi"),
    "runners.py:216:38:off-by-one": ("caught", "float-greedy", "chat-01-split-multi"),
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
    published = {
        m["id"]: m for m in json.loads((example_folder / "mutation.json").read_text())["mutants"]
    }
    for mutant_id, (status, claim, _) in EXPECTED.items():
        assert (published[mutant_id]["status"], published[mutant_id]["claim"]) == (status, claim)


def test_the_readme_publishes_the_committed_score(example_folder):
    from paritygate.cli import main

    published = json.loads((example_folder / "mutation.json").read_text())
    assert published["judged"] >= 20
    readme, spec = example_folder / "README.md", example_folder / "parity.toml"
    assert main(["claims", "check", str(readme), "--spec", str(spec)]) == 0
