"""The docs: the MkDocs site builds with --strict, and every code block in docs/ and the READMEs
that shows Python or CLI use runs here, unless a marker right above it says why it cannot
(``<!-- doc-test: skip: REASON -->``). A CLI line may state its exit code: ``# doc-test: exit=2``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
DOCS += sorted((ROOT / "examples").glob("*/README.md"))
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```", re.S | re.M)
SKIP = re.compile(r"<!-- doc-test: skip: (?P<reason>[^>]*\S)\s*-->\s*$")
CLI_LINE = re.compile(r"^\s*(?:\$ )?(?:python -m )?paritygate\s")

MODEL = """
import numpy as np

W = np.random.default_rng(1).standard_normal((8, 3))


def reference(case):
    x = case.load()["x"].astype(np.float64)
    return {"logits": x @ W}


def port(case):
    x = case.load()["x"].astype(np.float32)
    return {"logits": x @ W.astype(np.float32)}
"""


def blocks(path: Path) -> list[tuple[int, str, str, str | None]]:
    """(line, language, body, skip reason) of every block that shows Python or CLI use."""
    text = path.read_text(encoding="utf-8")
    found = []
    for match in FENCE.finditer(text):
        lang, body = match["lang"], match["body"]
        cli = lang in ("", "console", "bash", "sh", "shell") and any(
            CLI_LINE.match(line) for line in body.splitlines()
        )
        if lang != "python" and not cli:
            continue
        before = text[: match.start()].rstrip("\n").splitlines()
        marker = SKIP.search(before[-1]) if before else None
        line = text[: match.start()].count("\n") + 1
        found.append(
            (line, "python" if lang == "python" else "cli", body, marker and marker["reason"])
        )
    return found


def run_block(kind: str, body: str, where: str) -> None:
    """Run one block in the working folder; AssertionError naming the block when it fails."""
    from paritygate.cli import main

    if kind == "python":
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                exec(compile(body, where, "exec"), {"__name__": "__doc_example__"})
        except Exception as exc:
            raise AssertionError(f"{where}: {type(exc).__name__}: {exc}") from None
        return
    for line in body.splitlines():
        if not CLI_LINE.match(line):
            continue
        command, _, comment = line.strip().removeprefix("$ ").partition("#")
        expected = int(m[1]) if (m := re.search(r"doc-test: exit=(\d+)", comment)) else 0
        args = shlex.split(command)
        args = args[args.index("paritygate") + 1 :]
        with (
            contextlib.redirect_stdout(io.StringIO()) as out,
            contextlib.redirect_stderr(io.StringIO()) as err,
        ):
            code = main(args)
        assert code == expected, (
            f"{where}: `{command.strip()}` exited {code}:\n{out.getvalue()}{err.getvalue()}"
        )


@pytest.fixture
def playground(tmp_path, monkeypatch, request):
    """The folder a page describes: an example's README runs in a copy of that example; the other
    pages in the folder docs/getting-started.md describes (model.py and twenty cases)."""
    path = request.node.callspec.params.get("path") if hasattr(request.node, "callspec") else None
    if path is not None and path.parent.parent == ROOT / "examples":
        copy = tmp_path / path.parent.name
        shutil.copytree(
            path.parent,
            copy,
            ignore=shutil.ignore_patterns("references", "parity-reports", "__pycache__"),
        )
        monkeypatch.chdir(copy)
        monkeypatch.syspath_prepend(str(copy))
        return copy
    rng = np.random.default_rng(0)
    (tmp_path / "cases").mkdir()
    for i in range(20):
        np.savez(tmp_path / "cases" / f"batch_{i:02d}.npz", x=rng.standard_normal((4, 8)))
    (tmp_path / "model.py").write_text(MODEL)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_block_runs_or_says_why_not(path, playground):
    ran = 0
    for line, kind, body, reason in blocks(path):
        where = f"{path.relative_to(ROOT)}:{line}"
        if reason is not None:
            continue  # the marker states why this block cannot run here
        run_block(kind, body, where)
        ran += 1
    if path.name == "getting-started.md":
        assert ran >= 4  # the page promises that every block runs


def test_the_harness_fails_a_broken_example_and_an_unmarked_one(tmp_path, playground):
    page = tmp_path / "page.md"
    page.write_text("```python\nraise ValueError('stale example')\n```\n")
    ((_, kind, body, reason),) = blocks(page)
    assert reason is None
    with pytest.raises(AssertionError, match="page.md:1: ValueError: stale example"):
        run_block(kind, body, "page.md:1")
    page.write_text("```console\n$ paritygate gate nowhere.toml\n```\n")
    ((_, kind, body, _),) = blocks(page)
    with pytest.raises(AssertionError, match="exited 2"):
        run_block(kind, body, "page.md:1")
    # a marker without a reason is not a marker
    page.write_text("<!-- doc-test: skip: -->\n```python\nx = 1\n```\n")
    assert blocks(page)[0][3] is None


PLUGIN_PAGE = ROOT / "docs" / "pytest-plugin.md"


def test_the_pytest_plugin_page_example_runs_against_the_box_port(pytester):
    """docs/pytest-plugin.md's first example, as written, in tests/ of a copy of
    examples/box_port."""
    from spec_helpers import copy_box_port

    project = copy_box_port(pytester.path)
    ((_, _, body, _), *_) = blocks(PLUGIN_PAGE)
    (project / "tests").mkdir(exist_ok=True)
    (project / "tests" / "test_parity.py").write_text(body)
    recorded = pytester.runpytest(
        str(project / "tests" / "test_parity.py"), "--paritygate-record", "-p", "no:cacheprovider"
    )
    recorded.assert_outcomes(failed=2)  # a re-record never passes silently
    result = pytester.runpytest(str(project / "tests" / "test_parity.py"), "-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def _mkdocs(root: Path, site: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-q",
            "-f",
            str(root / "mkdocs.yml"),
            "-d",
            str(site),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_mkdocs_site_builds_strict_and_a_broken_link_fails_it(tmp_path):
    built = _mkdocs(ROOT, tmp_path / "site")
    assert built.returncode == 0, built.stderr
    assert (tmp_path / "site" / "api" / "index.html").read_text().count("assert_parity") > 0
    # The doc-test markers steer this file's harness; the site's pages and search index drop
    # them (mkdocs_hooks.py) and keep the lines they were written on.
    marked = [p.name for p in ROOT.joinpath("docs").glob("*.md") if "doc-test" in p.read_text()]
    assert len(marked) >= 5, marked
    built_files = [p for p in (tmp_path / "site").rglob("*") if p.suffix in (".html", ".json")]
    showing = [str(p) for p in built_files if "doc-test" in p.read_text(encoding="utf-8")]
    assert showing == []
    started = (tmp_path / "site" / "getting-started" / "index.html").read_text()
    assert "<span class=\"s1\">'more/*.npz'</span>\n" in started
    copy = tmp_path / "copy"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    shutil.copy(ROOT / "mkdocs_hooks.py", copy / "mkdocs_hooks.py")
    os.symlink(ROOT / "src", copy / "src")
    (copy / "docs" / "api.md").write_text("::: paritygate.no_such_function\n", encoding="utf-8")
    broken = _mkdocs(copy, tmp_path / "site2")
    assert broken.returncode != 0 and "no_such_function" in broken.stderr
