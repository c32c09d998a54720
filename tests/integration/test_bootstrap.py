"""Bootstrap against a local upstream repository made by the test (no network)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from paritygate.bootstrap import (
    WORKDIR_ENV,
    BootstrapConfig,
    BuildError,
    CheckoutError,
    CloneError,
    PatchError,
    RequiredLine,
    RequiredLinesError,
    bootstrap,
    config_from_spec,
)
from paritygate.cli import main

BUGGY = """\
def preprocess(size):
    crop = size - 1
    return crop


def edge(size):
    scale = 1.0
    return preprocess(size) * scale
"""

FIXED = BUGGY.replace("    crop = size - 1\n", "    crop = size  # no off-by-one crop\n").replace(
    "    scale = 1.0\n", "    scale = 1.0  # same filter as the reference\n"
)
# Only the first of the two fix lines: applies cleanly, but is incomplete.
HALF_FIXED = BUGGY.replace("    crop = size - 1\n", "    crop = size  # no off-by-one crop\n")

REQUIRED = [
    RequiredLine("detector.py", "crop = size  # no off-by-one crop"),
    RequiredLine("detector.py", "scale = 1.0  # same filter as the reference"),
]
BUILD = (
    f'"{sys.executable}" -c '
    "\"import detector; open('built.txt', 'w').write(str(detector.edge(10)))\""
)


def _git(cwd: Path, *args: str, strip: bool = True) -> str:
    env = dict(
        os.environ,
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@example.com",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@example.com",
    )
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip() if strip else done.stdout


def _patch(upstream: Path, new_text: str, target: Path) -> Path:
    (upstream / "detector.py").write_text(new_text)
    target.write_text(_git(upstream, "diff", strip=False))
    _git(upstream, "checkout", "--", "detector.py")
    return target


@pytest.fixture
def upstream(tmp_path):
    repo = tmp_path / "upstream"
    repo.mkdir()
    _git(repo, "init", "--quiet", "-b", "main")
    (repo / "detector.py").write_text(BUGGY)
    (repo / ".gitignore").write_text("built.txt\n__pycache__/\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "--quiet", "-m", "upstream")
    sha = _git(repo, "rev-parse", "HEAD")
    # a later upstream commit that must not be what gets built
    (repo / "later.txt").write_text("later\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "--quiet", "-m", "later")
    patches = tmp_path / "patches"
    patches.mkdir()
    return {
        "repo": repo,
        "sha": sha,
        "complete": _patch(repo, FIXED, patches / "complete.patch"),
        "incomplete": _patch(repo, HALF_FIXED, patches / "incomplete.patch"),
        "tmp": tmp_path,
    }


def _config(up, **overrides) -> BootstrapConfig:
    values = dict(
        upstream=str(up["repo"]),
        commit=up["sha"],
        patch=up["complete"],
        require=REQUIRED,
        build=BUILD,
        gate=None,
        workdir=up["tmp"] / "work",
    )
    values.update(overrides)
    return BootstrapConfig(**values)


def _gate_reading_the_build(spec: Path) -> int:
    # Stands in for a gate: holds when the built artifact is the reference's 10 (no crop bug).
    built = Path(os.environ[WORKDIR_ENV]) / "built.txt"
    return 0 if built.read_text() == "10.0" else 1


def test_complete_patch_passes_every_step(upstream):
    seen = []
    result = bootstrap(
        _config(upstream, gate=Path("parity.toml")),
        run_gate=_gate_reading_the_build,
        on_step=lambda s: seen.append(s.step),
    )
    assert seen == ["clone", "checkout", "patch", "required-lines", "build", "gate"]
    assert result.passed and result.exit_code == 0
    assert result.commit == upstream["sha"]
    assert not (result.workdir / "later.txt").exists()  # pinned commit, not the branch tip
    assert (result.workdir / "built.txt").read_text() == "10.0"
    assert WORKDIR_ENV not in os.environ


def test_gate_failure_is_the_bootstrap_exit_code(upstream):
    # no patch: the build succeeds with the bug, and the gate catches it
    result = bootstrap(
        _config(upstream, patch=None, require=[], gate=Path("parity.toml")),
        run_gate=_gate_reading_the_build,
    )
    assert (result.workdir / "built.txt").read_text() == "9.0"
    assert result.exit_code == 1 and not result


def test_incomplete_patch_fails_at_required_lines(upstream):
    with pytest.raises(RequiredLinesError) as info:
        bootstrap(_config(upstream, patch=upstream["incomplete"]))
    message = str(info.value)
    assert info.value.exit_code == 13
    assert (
        "detector.py: missing required line 'scale = 1.0  # same filter as the reference'"
        in message
    )
    assert "no off-by-one crop" not in message  # the line that is present is not reported
    assert not (upstream["tmp"] / "work" / "built.txt").exists()  # the build never ran


def test_non_empty_foreign_folder_is_never_reused(upstream):
    work = upstream["tmp"] / "work"
    work.mkdir()
    (work / "stale.o").write_text("left over from another build")
    with pytest.raises(CloneError, match="not empty and is not a clone bootstrap made") as info:
        bootstrap(_config(upstream))
    assert info.value.exit_code == 10
    assert (work / "stale.o").read_text() == "left over from another build"  # untouched
    assert sorted(p.name for p in work.iterdir()) == ["stale.o"]


def test_own_earlier_clone_is_cloned_again_not_reused(upstream):
    first = bootstrap(_config(upstream))
    (first.workdir / "dirty.txt").write_text("edited by hand after the build")
    (first.workdir / "detector.py").write_text(BUGGY)  # patch undone by hand
    second = bootstrap(_config(upstream))
    assert second.workdir == first.workdir
    assert not (second.workdir / "dirty.txt").exists()
    assert (second.workdir / "detector.py").read_text() == FIXED


def test_unknown_commit_fails_at_checkout(upstream):
    with pytest.raises(
        CheckoutError, match="commit 0123456789abcdef0123456789abcdef01234567 does not exist"
    ) as info:
        bootstrap(_config(upstream, commit="0123456789abcdef0123456789abcdef01234567"))
    assert info.value.exit_code == 11


def test_branch_name_is_not_a_pin(upstream):
    with pytest.raises(CheckoutError, match="'main' is not a commit SHA"):
        bootstrap(_config(upstream, commit="main"))


def test_patch_that_does_not_apply_fails_at_patch(upstream):
    bad = upstream["tmp"] / "bad.patch"
    bad.write_text(upstream["complete"].read_text().replace("crop = size - 1", "crop = size - 2"))
    with pytest.raises(PatchError, match="does not apply cleanly") as info:
        bootstrap(_config(upstream, patch=bad))
    assert info.value.exit_code == 12
    assert str(bad) in str(info.value)


def test_failing_build_fails_at_build_with_its_stderr_tail(upstream):
    build = (
        f'"{sys.executable}" -c '
        "\"import sys; print('linker: undefined symbol _edge', file=sys.stderr); sys.exit(3)\""
    )
    with pytest.raises(BuildError) as info:
        bootstrap(_config(upstream, build=build))
    assert info.value.exit_code == 14
    assert "failed with exit 3" in str(info.value)
    assert "linker: undefined symbol _edge" in str(info.value)


def test_unreachable_upstream_fails_at_clone(upstream):
    with pytest.raises(CloneError, match="git clone .* failed") as info:
        bootstrap(_config(upstream, upstream=str(upstream["tmp"] / "no-such-repo")))
    assert info.value.exit_code == 10


def _spec_with_table(up, extra: str = "") -> Path:
    spec = up["tmp"] / "parity.toml"
    spec.write_text(
        "[bootstrap]\n"
        f'upstream = "upstream"\n'
        f'commit = "{up["sha"]}"\n'
        'patch = "patches/incomplete.patch"\n'
        'require = ["detector.py:crop = size  # no off-by-one crop",\n'
        '           {file = "detector.py", line = "scale = 1.0  # same filter as the reference"}]\n'
        'workdir = "work"\n' + extra
    )
    return spec


def test_spec_table_supplies_what_flags_leave_out_and_flags_win(upstream):
    spec = _spec_with_table(upstream)
    config = config_from_spec(spec)
    assert config.upstream == str(upstream["repo"])
    assert config.patch == upstream["tmp"] / "patches" / "incomplete.patch"
    assert config.require == REQUIRED
    assert config.workdir == upstream["tmp"] / "work"
    overridden = config_from_spec(spec, patch=upstream["complete"], require=("x.py:y",))
    assert overridden.patch == upstream["complete"]
    assert overridden.require == [RequiredLine("x.py", "y")]


def test_spec_table_unknown_key_is_a_spec_error(upstream):
    spec = _spec_with_table(upstream, 'bulid = "make"\n')
    with pytest.raises(Exception, match=r"unknown key\(s\) in \[bootstrap\]: bulid"):
        config_from_spec(spec)


def test_cli_exit_codes_per_step(upstream, capsys):
    spec = _spec_with_table(upstream)
    # the table's incomplete patch: required lines fail with 13
    assert main(["bootstrap", "--gate", str(spec), "--build", BUILD]) == 13
    err = capsys.readouterr().err
    assert "required-lines  FAILED (exit 13)" in err
    # the CLI prints the error on one line (whitespace runs collapsed)
    assert "detector.py: missing required line 'scale = 1.0 # same filter as the reference'" in err
    # a failing build: 14
    assert (
        main(
            [
                "bootstrap",
                "--gate",
                str(spec),
                "--patch",
                str(upstream["complete"]),
                "--build",
                "exit 7",
            ]
        )
        == 14
    )
    assert "failed with exit 7" in capsys.readouterr().err
    # bad commit: 11
    assert main(["bootstrap", "--gate", str(spec), "--commit", "deadbeef"]) == 11
    # malformed --require: a usage error
    assert main(["bootstrap", "--gate", str(spec), "--require", "no-colon"]) == 2


def test_spec_loader_accepts_the_bootstrap_table(upstream):
    from paritygate.spec import load_spec

    spec = _spec_with_table(upstream)
    spec.write_text(
        'format_version = 1\noutputs = ["y"]\n\n[cases.a]\npath = "a.bin"\nsha256 = "'
        + "0" * 64
        + '"\n\n[runners.ref]\nrole = "reference"\ncallable = "m:f"\n\n[runners.port]\n'
        'role = "candidate"\ncallable = "m:g"\n\n[claims.y]\noutputs = ["y"]\nmetric = "max_abs"\n'
        'bound = 0\noracle = "equivalence"\nstatus = "provisional"\n\n' + spec.read_text()
    )
    assert list(load_spec(spec).claims) == ["y"]
    assert config_from_spec(spec).commit == upstream["sha"]


UPSTREAM_PORT = """\
import numpy as np


def forward(x):
    y = x * 2.0
    y = y + 0.5  # bias from the old preprocessing
    return y
"""
PORT_FIX = UPSTREAM_PORT.replace(
    "    y = y + 0.5  # bias from the old preprocessing\n",
    "    y = y + 0.0  # preprocessing matches the reference\n",
)

PROJECT_SPEC = """\
format_version = 1
outputs = ["y"]

[cases.a]
path = "cases/a.npz"
sha256 = "{sha}"

[runners.reference]
role = "reference"
callable = "reference:forward"

[runners.port]
role = "candidate"
command = ["{{python}}", "run_port.py", "{{case}}", "{{out}}"]
format = "npz"

[claims.y-exact]
outputs = ["y"]
metric = "max_abs"
bound = 0
oracle = "equivalence"
status = "provisional"
"""

REFERENCE = """\
def forward(case):
    return {"y": case.load()["x"] * 2.0}
"""

# The spec's runner: the port built in the bootstrapped checkout, found through the environment.
RUN_PORT = """\
import os, runpy, sys
import numpy as np

built = runpy.run_path(os.path.join(os.environ["PARITYGATE_BOOTSTRAP_DIR"], "build", "port.py"))
x = np.load(sys.argv[1], allow_pickle=False)["x"]
np.savez(sys.argv[2], y=built["forward"](x))
"""


def _port_project(tmp_path):
    import hashlib

    import numpy as np

    repo = tmp_path / "port-upstream"
    repo.mkdir()
    _git(repo, "init", "--quiet", "-b", "main")
    (repo / "port.py").write_text(UPSTREAM_PORT)
    _git(repo, "add", ".")
    _git(repo, "commit", "--quiet", "-m", "port")
    sha = _git(repo, "rev-parse", "HEAD")
    (repo / "port.py").write_text(PORT_FIX)
    patch = tmp_path / "fix.patch"
    patch.write_text(_git(repo, "diff", strip=False))
    _git(repo, "checkout", "--", "port.py")

    project = tmp_path / "project"
    (project / "cases").mkdir(parents=True)
    np.savez(project / "cases" / "a.npz", x=np.arange(6.0).reshape(2, 3))
    digest = hashlib.sha256((project / "cases" / "a.npz").read_bytes()).hexdigest()
    (project / "parity.toml").write_text(PROJECT_SPEC.format(sha=digest))
    (project / "reference.py").write_text(REFERENCE)
    (project / "run_port.py").write_text(RUN_PORT)
    return repo, sha, patch, project


def test_end_to_end_with_the_real_gate(tmp_path, monkeypatch, capsys):
    from paritygate.references import record
    from paritygate.spec import load_spec

    repo, sha, patch, project = _port_project(tmp_path)
    monkeypatch.syspath_prepend(str(project))
    record(load_spec(project / "parity.toml"))
    build = "mkdir -p build && cp port.py build/port.py"
    args = [
        "bootstrap",
        "--gate",
        str(project / "parity.toml"),
        "--upstream",
        str(repo),
        "--commit",
        sha,
        "--build",
        build,
        "--workdir",
        str(tmp_path / "work"),
    ]
    fix_line = "port.py:y = y + 0.0  # preprocessing matches the reference"
    # the complete patch: every step passes and the gate holds
    assert main([*args, "--patch", str(patch), "--require", fix_line]) == 0
    out = capsys.readouterr().out
    assert "bootstrap: gate" in out and "y-exact" in out
    assert (project / "parity-reports" / "parity" / "result.json").is_file()
    # without the patch the build succeeds and the gate catches the 0.5 bias: exit 1
    assert main(args) == 1
    assert "FAIL" in capsys.readouterr().out
