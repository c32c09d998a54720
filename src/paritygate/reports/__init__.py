"""Renderings of results: text/rich tables, JSON, Markdown, JUnit XML and HTML.

Reports render result objects (or their JSON form); they never compute verdicts.
:func:`write_all` writes every report of a gate run into one folder; :func:`load_result` reads a
``result.json`` back (``paritygate report`` re-renders an earlier run from it).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..files import atomic_write_text
from ..results import to_jsonable
from .html import plots_available, render_html
from .json import load_result, render_json
from .junit import render_junit
from .markdown import render_markdown
from .terminal import verdict_line, verdict_table

__all__ = [
    "REPORT_FILES",
    "write_all",
    "load_result",
    "render_json",
    "render_markdown",
    "render_junit",
    "render_html",
    "plots_available",
    "verdict_table",
    "verdict_line",
]

# report name -> (file name, renderer)
REPORT_FILES = {
    "json": ("result.json", render_json),
    "markdown": ("summary.md", render_markdown),
    "junit": ("junit.xml", render_junit),
    "html": ("report.html", render_html),
}


def _as_dict(result: Any) -> dict[str, Any]:
    if isinstance(result, dict):
        return to_jsonable(result)  # as to_dict() gives it: paths that are not UTF-8 readable
    to_dict = getattr(result, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    raise InputError(f"cannot render a {type(result).__name__}: expected a GateResult or its dict")


def write_all(result: Any, out_dir: str | os.PathLike[str]) -> dict[str, Path]:
    """Write result.json, summary.md, junit.xml and report.html into ``out_dir``.

    ``result`` is a :class:`~paritygate.results.GateResult` or its ``to_dict()`` form. Returns
    {"json": path, "markdown": path, "junit": path, "html": path}. Every report is rendered
    before any is written, so a rendering error leaves the folder as it was.
    """
    data = _as_dict(result)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise InputError("report folder is a file", where=str(out))
    rendered = {
        # the HTML report links the locate pages already in the folder (docs/locate.md)
        name: (file, render_html(data, folder=out) if name == "html" else render(data))
        for name, (file, render) in REPORT_FILES.items()
    }
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(
            f"cannot create the report folder: {exc.strerror}", where=str(out)
        ) from None
    paths: dict[str, Path] = {}
    for name, (file, text) in rendered.items():
        path = out / file
        atomic_write_text(path, text)  # a reader never sees half a report
        paths[name] = path
    return paths
