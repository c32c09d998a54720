"""The mutation score README.md publishes (``mutation.json``, the full set of 22 mutants: `make
mutation` from the repository root) is tied to the README by ``claims check``; CI measures a
small set again: the off-by-one mutants of ``teacache.py`` on one case and the cache claim,
among them the generation closed a step early that only ``proxy-cached-again`` catches."""

from __future__ import annotations

import json

SMALL_SET = [
    "--candidate",
    "proxy-cached",
    "--file",
    "teacache.py",
    "--operators",
    "off-by-one",
    "--claim",
    "cache-ssim",
    "--case",
    "seed0-digit0",
    "--jobs",
    "2",
]

EXPECTED = {
    "teacache.py:106:77:off-by-one": ("survived", None, None),
    "teacache.py:137:43:off-by-one": ("caught", "cache-ssim", "seed0-digit0"),
}


def test_a_small_mutation_set_is_measured_again(example_folder, tmp_path, capsys):
    from paritygate.cli import main

    report = tmp_path / "small.json"
    spec = str(example_folder / "parity.toml")
    assert main(["mutate", spec, *SMALL_SET, "--json", str(report)]) == 0
    capsys.readouterr()
    measured = json.loads(report.read_text())
    assert {m["id"]: (m["status"], m["claim"], m["case"]) for m in measured["mutants"]} == EXPECTED
    assert (measured["cases"], measured["gate_runs"]) == (1, 3)
    published = json.loads((example_folder / "mutation.json").read_text())
    statuses = {m["id"]: m["status"] for m in published["mutants"]}
    assert {i: statuses[i] for i in EXPECTED} == {i: s for i, (s, _, _) in EXPECTED.items()}


def test_the_readme_publishes_the_committed_score(example_folder):
    from paritygate.cli import main

    published = json.loads((example_folder / "mutation.json").read_text())
    assert published["judged"] >= 20
    readme, spec = example_folder / "README.md", example_folder / "parity.toml"
    assert main(["claims", "check", str(readme), "--spec", str(spec)]) == 0
