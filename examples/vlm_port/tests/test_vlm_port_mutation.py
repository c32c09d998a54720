"""The mutation score README.md publishes (``mutation.json``: 33 mutants of mlx-vlm's code in
``runners.py``; `make mutation` from the repository root) is tied to the README by ``claims
check``; CI measures a small set again: the runner's narrowed dtypes on one case and three
claims, each caught by the claim the published set names."""

from __future__ import annotations

import json

SMALL_SET = [
    "--candidate",
    "mlx-vlm",
    "--file",
    "runners.py",
    "--scope",
    "MlxRunner",
    "--operators",
    "dtype",
    "--case",
    "leetcode",
    "--claim",
    "mlx-logits",
    "--claim",
    "pixel-values",
    "--claim",
    "vision-embeds",
    "--jobs",
    "2",
]

EXPECTED = {
    "runners.py:331:46:dtype": ("caught", "mlx-logits", "leetcode"),
    "runners.py:363:62:dtype": ("caught", "vision-embeds", "leetcode"),
    "runners.py:382:67:dtype": ("caught", "pixel-values", "leetcode"),
    "runners.py:384:50:dtype": ("caught", "vision-embeds", "leetcode"),
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
