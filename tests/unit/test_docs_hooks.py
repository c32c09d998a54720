"""The docs site drops the doc-test markers (mkdocs_hooks.py) and nothing else."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _hooks():
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", ROOT / "mkdocs_hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_markers_are_dropped_and_the_lines_they_annotate_kept():
    page = (
        "Intro.\n\n"
        "<!-- doc-test: skip: installs packages -->\n"
        "```console\n"
        "$ paritygate cases add 'more/*.npz'   # doc-test: exit=2 (no such folder)\n"
        "$ paritygate gate .\n"
        "```\n"
    )
    shown = _hooks().on_page_markdown(page, page=None, config=None, files=None)
    assert shown == (
        "Intro.\n\n```console\n$ paritygate cases add 'more/*.npz'\n$ paritygate gate .\n```\n"
    )


def test_other_comments_and_text_stay():
    page = "<!-- claim: speedup -->\nA speedup of 2x. # not a marker\n"
    assert _hooks().strip_doc_test_markers(page) == page


def test_the_site_uses_the_hook_and_builds_into_an_ignored_site_folder():
    config = (ROOT / "mkdocs.yml").read_text()
    assert "hooks:\n  - mkdocs_hooks.py" in config and "site_dir: site\n" in config
    assert "/site/" in (ROOT / ".gitignore").read_text().splitlines()
    makefile = (ROOT / "Makefile").read_text()
    assert "docs-build:" in makefile and "mkdocs build --strict --site-dir site" in makefile
