"""Runner options declared as paths resolve against the spec's folder, from any working folder,
without the process's working folder changing (spec format 4)."""

from __future__ import annotations

import os

import numpy as np
import pytest
from spec_helpers import TINY_MODEL, TINY_SPEC, make_project

from paritygate.errors import SpecError
from paritygate.gate import run_gate
from paritygate.references import record
from paritygate.spec import load_spec

FACTORY = """

def load(weights):
    import os
    W = np.load(weights, allow_pickle=False)
    seen.append(os.getcwd())

    def run(case):
        x = case.load()["x"]
        return {"y": np.tanh(x @ W), "logits": x @ W}

    return run


seen = []
"""


def _project(tmp_path, paths: bool):
    runner = (
        '[runners.cand]\nrole = "candidate"\nfactory = "tiny:load"\n'
        'options = { weights = "weights/w.npy" }\n'
    )
    if paths:
        runner += 'paths = ["weights"]\n'
    text = TINY_SPEC.replace(
        '[runners.cand]\nrole = "candidate"\ncallable = "tiny:candidate32"\n', runner
    ).replace("format_version = 2", "format_version = 4")
    path = make_project(tmp_path, text, modules={"tiny.py": TINY_MODEL + FACTORY})
    (tmp_path / "weights").mkdir()
    np.save(tmp_path / "weights" / "w.npy", np.random.default_rng(0).standard_normal((8, 4)))
    record(load_spec(path))
    return path


def test_declared_paths_resolve_against_the_spec_folder_from_anywhere(tmp_path, monkeypatch):
    path = _project(tmp_path / "project", paths=True)
    assert load_spec(path).runners["cand"].options["weights"] == str(
        (tmp_path / "project" / "weights" / "w.npy").resolve()
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    result = run_gate(load_spec(path))
    assert result.passed, result.errors
    import tiny

    assert tiny.seen == [str(elsewhere)]  # the working folder stayed where it was
    assert os.getcwd() == str(elsewhere)


def test_undeclared_relative_option_depends_on_the_working_folder(tmp_path, monkeypatch):
    """Why ``paths`` exists: the same option without it is a plain string."""
    path = _project(tmp_path / "project", paths=False)
    monkeypatch.chdir(tmp_path)
    result = run_gate(load_spec(path))
    assert not result.passed and "No such file" in " ".join(result.errors)


def test_paths_are_checked(tmp_path):
    path = _project(tmp_path / "project", paths=True)
    text = path.read_text()
    path.write_text(text.replace('paths = ["weights"]', 'paths = ["weight"]'))
    with pytest.raises(
        SpecError, match="'weight' is not an option \\(did you mean 'weights'\\?\\)"
    ):
        load_spec(path)
    path.write_text(text.replace("format_version = 4", "format_version = 3"))
    with pytest.raises(SpecError, match="paths: needs format_version = 4"):
        load_spec(path)
    path.write_text(text.replace('"weights/w.npy"', '"../w.npy"'))
    with pytest.raises(SpecError, match="escapes the spec's folder"):
        load_spec(path)
