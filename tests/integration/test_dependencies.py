"""The core install works without any extra (in the spirit of Polygraphy's dependency tests).

A fresh virtual environment gets this project without extras, so only the core dependencies
(numpy, safetensors, ml_dtypes, click, rich, tomlkit, scipy, and numba with llvmlite on the
platforms numba ships wheels for; importing paritygate still loads no numba). Every module of
the package must import there (modules for an optional framework import it lazily), every CLI
command must show its help, and the compare command and the demo must run. In the full test
environment, where the frameworks are installed, importing paritygate or running
``paritygate --help`` must load none of them, nor pytest.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import venv
from pathlib import Path

import numpy as np
import pytest

import paritygate

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(paritygate.__file__).resolve().parents[1]
CORE = {"numpy", "safetensors", "ml_dtypes", "click", "rich", "tomlkit", "scipy"}
if platform.machine() in ("x86_64", "AMD64", "aarch64", "arm64"):
    CORE |= {"numba", "llvmlite"}  # the fast kernel by default where numba has wheels
OPTIONAL_DISTRIBUTIONS = {
    "torch",
    "mlx",
    "jax",
    "jaxlib",
    "onnxruntime",
    "scikit_image",
    "matplotlib",
    "scikit_learn",
    "silero_vad",
    "pytest",
    "hypothesis",
    "psutil",
}
# module names, as they appear in sys.modules
OPTIONAL = (
    "torch",
    "mlx",
    "jax",
    "jaxlib",
    "onnxruntime",
    "numba",
    "skimage",
    "matplotlib",
    "sklearn",
    "silero_vad",
    "pytest",
    "hypothesis",
    "psutil",
)

_WALK = """
import importlib, json, pkgutil, sys
import paritygate
after_import = sorted(m for m in {optional!r} if m in sys.modules)
imported, failed = [], {{}}
for info in pkgutil.walk_packages(paritygate.__path__, "paritygate."):
    if info.name.rsplit(".", 1)[-1] == "__main__":
        continue  # running it would start the CLI
    try:
        importlib.import_module(info.name)
        imported.append(info.name)
    except Exception as exc:
        failed[info.name] = f"{{type(exc).__name__}}: {{exc}}"
from paritygate.cli import cli
import click
print(json.dumps({{"file": paritygate.__file__, "after_import": after_import,
                  "imported": imported, "failed": failed,
                  "commands": cli.list_commands(click.Context(cli))}}))
"""


# Modules that need a package at import time by design, and which package: the pytest plugin is
# loaded only by pytest itself (pytest11 entry point). In the core venv they must fail on exactly
# that package and nothing else.
NEEDED_AT_IMPORT = {"paritygate.pytest_plugin": "pytest"}


def _clean_env() -> dict[str, str]:
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")
    }
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def _pip(*args: str) -> subprocess.CompletedProcess:
    # The test environment's pip drives the new venv (pip --python), which saves seeding pip there.
    return subprocess.run(
        [sys.executable, "-m", "pip", *args],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="module")
def core_venv(tmp_path_factory, pytestconfig) -> Path:
    """A venv holding this project and its core dependencies only.

    It is installed from a copy of the source tree (the checkout gets no build/ or egg-info
    folders) without an index, from a wheelhouse in pytest's cache folder; the wheelhouse is filled
    from the package registry the first time only: the core dependencies and the build backend,
    exactly as pyproject.toml lists them.
    """
    import tomllib

    base = tmp_path_factory.mktemp("core-venv")
    project = base / "project"
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", ".pytest_cache")
    shutil.copytree(SRC, project / "src", ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, project / name)
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=False, clear=True).create(env_dir)
    python = env_dir / ("Scripts" if os.name == "nt" else "bin") / "python"

    cache = getattr(pytestconfig, "cache", None)  # None under -p no:cacheprovider
    wheelhouse = cache.mkdir("core-wheelhouse") if cache is not None else base / "wheelhouse"
    install = [
        "--python",
        str(python),
        "install",
        "-q",
        "--no-index",
        "--find-links",
        str(wheelhouse),
        str(project),
    ]
    done = _pip(*install)
    if done.returncode != 0:
        meta = tomllib.loads((ROOT / "pyproject.toml").read_text())
        needed = [*meta["project"]["dependencies"], *meta["build-system"]["requires"]]
        fetched = _pip("download", "-q", "-d", str(wheelhouse), *needed)
        assert fetched.returncode == 0, fetched.stderr[-3000:]
        done = _pip(*install)
    assert done.returncode == 0, done.stderr[-3000:]
    return python


def _run(python: Path, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(python), *args], env=_clean_env(), capture_output=True, text=True, timeout=120, cwd=cwd
    )


def test_core_install_has_only_core_dependencies(core_venv):
    done = _pip("--python", str(core_venv), "list", "--format", "json")
    assert done.returncode == 0, done.stderr
    installed = {p["name"].lower().replace("-", "_") for p in json.loads(done.stdout)}
    assert CORE <= installed
    present = sorted(installed & OPTIONAL_DISTRIBUTIONS)
    assert present == [], f"optional packages pulled in by the core install: {present}"


def test_every_module_imports_without_extras(core_venv, tmp_path):
    done = _run(core_venv, "-c", _WALK.format(optional=OPTIONAL), cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert "site-packages" in report["file"], report["file"]  # the installed copy, not the checkout
    expected_failures = {
        name: f"ModuleNotFoundError: No module named '{package}'"
        for name, package in NEEDED_AT_IMPORT.items()
    }
    assert report["failed"] == expected_failures
    assert report["after_import"] == []
    expected = {
        p.relative_to(SRC).with_suffix("").as_posix().replace("/", ".")
        for p in (SRC / "paritygate").rglob("*.py")
    }
    expected = {m.removesuffix(".__init__") for m in expected if not m.endswith("__main__")}
    assert set(report["imported"]) | set(NEEDED_AT_IMPORT) | {"paritygate"} == expected
    assert "compare" in report["commands"]


def test_every_command_shows_help_without_extras(core_venv, tmp_path):
    script = core_venv.with_name("paritygate")
    top = subprocess.run(
        [str(script), "--help"],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert top.returncode == 0, top.stderr
    done = _run(core_venv, "-c", _WALK.format(optional=OPTIONAL), cwd=tmp_path)
    commands = json.loads(done.stdout.strip().splitlines()[-1])["commands"]
    assert commands, "the CLI lists no commands"
    for command in commands:
        assert command in top.stdout
        shown = subprocess.run(
            [str(script), command, "--help"],
            env=_clean_env(),
            capture_output=True,
            text=True,
            timeout=300,
            cwd=tmp_path,
        )
        assert shown.returncode == 0, (command, shown.stderr[-2000:])
        assert "Usage:" in shown.stdout


def test_compare_and_demo_run_without_extras(core_venv, tmp_path):
    reference = tmp_path / "reference.npz"
    np.savez(reference, logits=np.linspace(-1, 1, 12, dtype=np.float32))
    script = core_venv.with_name("paritygate")
    same = subprocess.run(
        [str(script), "compare", str(reference), str(reference)],
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert same.returncode == 0, same.stderr
    demo = _run(
        core_venv, "-m", "paritygate.demo", "--out", str(tmp_path / "reports"), cwd=tmp_path
    )
    assert demo.returncode == 0, demo.stdout[-2000:] + demo.stderr[-2000:]
    assert (tmp_path / "reports" / "demo-report.json").exists()


def test_full_environment_import_and_help_load_no_framework(tmp_path):
    """Here the frameworks are installed, so loading one would show in sys.modules."""
    check = (
        "import sys\n"
        "import paritygate\n"
        f"optional = {OPTIONAL!r}\n"
        "after_import = sorted(m for m in optional if m in sys.modules)\n"
        "from paritygate.cli import main\n"
        "code = main(['--help'])\n"
        "after_help = sorted(m for m in optional if m in sys.modules)\n"
        "print(after_import, after_help, code)\n"
        "assert code == 0 and after_import == [] and after_help == [], (after_import, after_help)\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run(
        [sys.executable, "-c", check],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # the check itself can fail: importing a framework shows up
    canary = check.replace("import paritygate\n", "import paritygate, numba\n")
    done = subprocess.run(
        [sys.executable, "-c", canary],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert done.returncode != 0 and "numba" in done.stderr
