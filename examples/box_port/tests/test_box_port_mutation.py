"""The mutation score README.md publishes (``mutation.json``: all six operators on
``port_detector.py``, 32 mutants; `make mutation` from the repository root) is tied to the README
by ``claims check``; CI measures a small set again: the smoothing kernel's and the box search's
mutants, gated on the three boundary cases that were added to kill them. Each is caught on the
case the README names; the two declared-equivalent lines stay outside the score."""

from __future__ import annotations

import json
import shutil

SMALL_SET = [
    "--file",
    "port_detector.py",
    "--scope",
    "gaussian_kernel",
    "--scope",
    "detect_image",
    "--operators",
    "off-by-one,scale",
    "--case",
    "edge_to_edge",
    "--case",
    "icon",
    "--case",
    "on_threshold",
    "--jobs",
    "2",
]

EXPECTED = {
    "port_detector.py:32:18:scale+": ("equivalent", None, None),
    "port_detector.py:32:18:scale-": ("equivalent", None, None),
    "port_detector.py:32:32:scale+": ("equivalent", None, None),
    "port_detector.py:32:32:scale-": ("equivalent", None, None),
    "port_detector.py:33:37:off-by-one": ("caught", "panel-edges", "edge_to_edge"),
    "port_detector.py:34:22:scale+": ("caught", "panel-edges", "on_threshold"),
    "port_detector.py:34:22:scale-": ("caught", "panel-edges", "on_threshold"),
    "port_detector.py:34:43:off-by-one": ("caught", "panel-edges", "edge_to_edge"),
    "port_detector.py:58:37:off-by-one": ("survived", None, None),
    "port_detector.py:58:40:off-by-one": ("survived", None, None),
    "port_detector.py:60:51:off-by-one": ("caught", "panel-edges", "icon"),
    "port_detector.py:60:71:off-by-one": ("caught", "panel-edges", "edge_to_edge"),
    "port_detector.py:65:43:scale+": ("equivalent", None, None),
    "port_detector.py:65:43:scale-": ("equivalent", None, None),
}


def test_a_small_mutation_set_is_measured_again(example_folder, tmp_path, capsys):
    from paritygate import load_spec, record
    from paritygate.cli import main

    project = tmp_path / "box_port"
    shutil.copytree(
        example_folder,
        project,
        ignore=shutil.ignore_patterns("references", "parity-reports", "tests", "__pycache__", ".*"),
    )
    record(load_spec(project / "parity.toml"))
    report = tmp_path / "small.json"
    assert main(["mutate", str(project / "parity.toml"), *SMALL_SET, "--json", str(report)]) == 0
    capsys.readouterr()
    measured = json.loads(report.read_text())
    assert {m["id"]: (m["status"], m["claim"], m["case"]) for m in measured["mutants"]} == EXPECTED
    assert (measured["cases"], measured["gate_runs"], measured["equivalent"]) == (3, 9, 6)
    published = {
        m["id"]: m for m in json.loads((example_folder / "mutation.json").read_text())["mutants"]
    }
    # the full set (every case) agrees: same status, and the boundary cases' kills on the same case
    for mutant_id, (status, _, case) in EXPECTED.items():
        assert published[mutant_id]["status"] == status
        if case in ("icon", "on_threshold") or mutant_id.startswith("port_detector.py:33:"):
            assert published[mutant_id]["case"] == case


def test_the_readme_publishes_the_committed_score(example_folder):
    from paritygate.cli import main

    published = json.loads((example_folder / "mutation.json").read_text())
    assert published["total"] >= 20 and published["judged"] >= 20
    assert published["only_cases"] == [] and published["only_claims"] == []
    readme, spec = example_folder / "README.md", example_folder / "parity.toml"
    assert main(["claims", "check", str(readme), "--spec", str(spec)]) == 0
