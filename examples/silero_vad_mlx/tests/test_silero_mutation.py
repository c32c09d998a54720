"""The mutation score README.md publishes (``mutation.json``, the full set of 24 mutants: `make
mutation` from the repository root) is tied to the README by ``claims check``; CI measures a
small set again: the comparison mutants of ``postprocess.py`` on two cases, the boundary case
that ends inside speech among them."""

from __future__ import annotations

import json

SMALL_SET = [
    "--candidate",
    "postprocessor",
    "--file",
    "postprocess.py",
    "--operators",
    "compare",
    "--limit",
    "6",
    "--case",
    "clean_speech",
    "--case",
    "short_pauses_edges.6143",
    "--jobs",
    "2",
]

EXPECTED = {
    "postprocess.py:25:19:compare": ("caught", "timestamps-exact", "clean_speech"),
    "postprocess.py:79:16:compare": ("survived", None, None),
    "postprocess.py:106:24:compare": ("survived", None, None),
    "postprocess.py:130:16:compare": ("survived", None, None),
    "postprocess.py:153:8:compare": ("survived", None, None),
    "postprocess.py:202:12:compare": ("crash", "probability-max-abs", "clean_speech"),
}


def test_a_small_mutation_set_is_measured_again(example_folder, tmp_path, capsys):
    from paritygate.cli import main

    report = tmp_path / "small.json"
    assert (
        main(["mutate", str(example_folder / "parity.toml"), *SMALL_SET, "--json", str(report)])
        == 0
    )
    capsys.readouterr()
    measured = json.loads(report.read_text())
    assert {m["id"]: (m["status"], m["claim"], m["case"]) for m in measured["mutants"]} == EXPECTED
    assert (measured["cases"], measured["gate_runs"]) == (2, 7)
    # the mutants the published full set shares with this one: caught (or crashed) there too
    published = {
        m["id"]: m["status"]
        for m in json.loads((example_folder / "mutation.json").read_text())["mutants"]
    }
    for mutant_id in ("postprocess.py:25:19:compare", "postprocess.py:202:12:compare"):
        assert published[mutant_id] == EXPECTED[mutant_id][0]


def test_the_readme_publishes_the_committed_score(example_folder):
    from paritygate.cli import main

    published = json.loads((example_folder / "mutation.json").read_text())
    assert published["judged"] >= 20 and published["cases"] == 33
    assert (
        main(
            [
                "claims",
                "check",
                str(example_folder / "README.md"),
                "--spec",
                str(example_folder / "parity.toml"),
            ]
        )
        == 0
    )
