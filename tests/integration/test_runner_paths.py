"""Runner options declared as paths resolve against the spec's folder, from any working folder
(spec format 4); in-process runners run in the spec's folder, and the process's working folder
is restored around them."""

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

    # the factory ran in the spec's folder; the caller's working folder is back afterwards
    assert tiny.seen == [str((tmp_path / "project").resolve())]
    assert os.getcwd() == str(elsewhere)


def test_undeclared_relative_option_resolves_from_the_spec_folder(tmp_path, monkeypatch):
    """Without ``paths`` the option reaches the factory as the plain string; it still names the
    spec's file, because the factory runs in the spec's folder."""
    path = _project(tmp_path / "project", paths=False)
    assert load_spec(path).runners["cand"].options["weights"] == "weights/w.npy"
    monkeypatch.chdir(tmp_path)
    result = run_gate(load_spec(path))
    assert result.passed, result.errors
    assert os.getcwd() == str(tmp_path)


def test_relative_option_missing_from_the_spec_folder_fails_naming_it(tmp_path, monkeypatch):
    path = _project(tmp_path / "project", paths=False)
    (tmp_path / "project" / "weights" / "w.npy").rename(tmp_path / "w.npy")
    (tmp_path / "weights").mkdir()
    (tmp_path / "w.npy").rename(tmp_path / "weights" / "w.npy")  # beside the caller only
    monkeypatch.chdir(tmp_path)
    result = run_gate(load_spec(path))
    assert not result.passed
    assert "No such file" in " ".join(result.errors) and "weights/w.npy" in " ".join(result.errors)


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


# Two projects whose modules share names (``tiny``, ``helpers``), each a package: a module imports
# its sibling relatively, and each project's gate runs its own code in one process.
HELPERS = "SCALE = {scale}\n"
PACKAGED_MODEL = """
import numpy as np

from .helpers import SCALE

W = np.random.default_rng(0).standard_normal((8, 4))


def reference(case):
    x = case.load()["x"]
    logits = x @ W
    return {"y": np.tanh(logits), "logits": logits}


def candidate32(case):
    x = case.load()["x"].astype(np.float32)
    logits = (x @ W.astype(np.float32)) * np.float32(SCALE)
    return {"y": np.tanh(logits), "logits": logits}
"""


def _package(root, scale: float):
    modules = {
        "__init__.py": '"""A parity project that is a package."""\n',
        "tiny.py": PACKAGED_MODEL,
        "helpers.py": HELPERS.format(scale=scale),
    }
    path = make_project(root, modules=modules)
    record(load_spec(path))
    return load_spec(path)


def test_a_package_project_imports_its_modules_as_the_package_s(tmp_path, monkeypatch):
    import sys

    from paritygate.runners import import_name

    # a top-level ``helpers`` another test imported (the plain projects below) is not this one's
    monkeypatch.delitem(sys.modules, "helpers", raising=False)
    good = _package(tmp_path / "good_port", scale=1.0)
    bad = _package(tmp_path / "bad_port", scale=1.01)  # a planted 1 % scale in its helper
    assert import_name(good.root, "tiny") == ("good_port.tiny", tmp_path)
    assert import_name(good.root, "numpy") == ("numpy", tmp_path)
    assert import_name(tmp_path, "tiny")[0] == "tiny"  # a plain folder: names as written
    first = run_gate(good)
    assert first.passed, first.errors
    second = run_gate(bad)
    assert not second.passed and not second.errors
    assert all(v.metric == "max_abs" and v.observed > 1e-3 for v in second.verdicts)
    assert run_gate(good).passed  # and back: each run imports its own project's code
    assert sys.modules["good_port.helpers"].SCALE == 1.0
    assert sys.modules["bad_port.helpers"].SCALE == 1.01
    assert "helpers" not in sys.modules  # never imported as a top-level module
    assert str(tmp_path) not in sys.path  # the runner took its path entry off again


def test_plain_projects_sharing_a_helper_module_name_each_import_their_own(tmp_path):
    # Two plain folders whose runner modules import a sibling by the same plain name: the second
    # gate must not run the first project's cached ``helpers``.
    import sys

    def plain(root, scale):
        modules = {
            "tiny.py": PACKAGED_MODEL.replace(
                "from .helpers import SCALE", "from helpers import SCALE"
            ),
            "helpers.py": HELPERS.format(scale=scale),
        }
        path = make_project(root, modules=modules)
        record(load_spec(path))
        return load_spec(path)

    good = plain(tmp_path / "good", 1.0)
    bad = plain(tmp_path / "bad", 1.01)
    assert run_gate(good).passed
    second = run_gate(bad)
    assert not second.passed and not second.errors, "ran the other project's helpers"
    assert run_gate(good).passed
    assert sys.modules["helpers"].__file__ == str(tmp_path / "good" / "helpers.py")


def test_a_package_module_edited_in_place_is_imported_afresh(tmp_path):
    # A long-lived process (a test session) that plants a bug in a package's module after a
    # first gate: the next gate runs the edited code.
    project = _package(tmp_path / "port", scale=1.0)
    assert run_gate(project).passed
    helpers = project.root / "helpers.py"
    helpers.write_text(HELPERS.format(scale=1.01))
    os.utime(helpers, ns=(helpers.stat().st_atime_ns, helpers.stat().st_mtime_ns + 10**9))
    assert not run_gate(project).passed
