"""Test helpers: ``assert_parity`` raises AssertionError whose message is the full report.

``assert_parity(actual, baseline="name")`` is the zero-configuration start (as pytest-regressions
and syrupy do it): the first run writes the outputs as the baseline ``name`` (safetensors, with a
provenance file beside it) and fails ("baseline written; review and re-run"); later runs compare
against it. With ``update=True`` (``--paritygate-update-baselines`` under pytest, or
``PARITYGATE_UPDATE_BASELINES=1``) a baseline that differs is re-recorded, the run fails with the
difference to review, and :func:`orphaned_baselines` lists baselines no test used.

Importing this module imports no test framework; it works under pytest, unittest or plain asserts.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from .compare import compare
from .errors import InputError
from .results import Comparison

__all__ = [
    "assert_parity",
    "BaselineWritten",
    "BaselineUpdated",
    "baseline_paths",
    "orphaned_baselines",
    "project_module",
    "use_project",
    "BASELINE_DIR",
    "UPDATE_ENV",
]

BASELINE_DIR = "baselines"  # default folder, relative to the working folder (pytest: the test's)
UPDATE_ENV = "PARITYGATE_UPDATE_BASELINES"
BASELINE_FORMAT_VERSION = 1  # history: 1 — <name>.safetensors + <name>.json (provenance)
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")

# Baselines used in this process (absolute paths), for orphaned_baselines().
_USED: set[Path] = set()


class BaselineWritten(AssertionError):
    """The baseline did not exist: it was written, and this run fails so it is reviewed."""


class BaselineUpdated(AssertionError):
    """The baseline differed and was re-recorded on request; this run fails with the diff."""


def baseline_paths(name: str, folder: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
    """(outputs file, provenance file) of baseline ``name`` in ``folder``."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise InputError(
            f"baseline name {name!r}: use letters, digits, '_', '-' and '.' (a file name)"
        )
    base = Path(folder if folder is not None else BASELINE_DIR)
    return base / f"{name}.safetensors", base / f"{name}.json"


def _write(name: str, actual: Any, data: Path, meta: Path, bounds: dict[str, Any]) -> None:
    from .files import atomic_write_bytes, save_outputs, sha256_file
    from .outputs import flatten_outputs
    from .provenance import capture

    flat = flatten_outputs(actual)
    data.parent.mkdir(parents=True, exist_ok=True)
    save_outputs(data, flat if isinstance(flat, dict) else {"output": flat})
    provenance = {
        "format": "paritygate-baseline",
        "format_version": BASELINE_FORMAT_VERSION,
        "name": name,
        "sha256": sha256_file(data),
        "bounds": {k: v for k, v in bounds.items() if isinstance(v, (int, float, str, bool))},
        "provenance": capture(root=Path.cwd()),
    }
    text = json.dumps(provenance, indent=1, sort_keys=True, default=str) + "\n"
    atomic_write_bytes(meta, text.encode())


def _read(data: Path, meta: Path) -> Any:
    from .files import load_outputs, sha256_file

    try:
        info = json.loads(meta.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise InputError(f"baseline provenance unreadable: {exc}", where=str(meta)) from None
    if info.get("format_version") != BASELINE_FORMAT_VERSION:
        raise InputError(
            f"baseline format_version {info.get('format_version')!r} is not "
            f"{BASELINE_FORMAT_VERSION} (tainted: re-record it with {UPDATE_ENV}=1)",
            where=str(meta),
        )
    if info.get("sha256") != sha256_file(data):
        raise InputError(
            f"baseline file changed since it was written (sha256 {info.get('sha256')}); "
            f"re-record it deliberately with {UPDATE_ENV}=1",
            where=str(data),
        )
    outputs = load_outputs(data)
    return outputs.get("output", outputs) if list(outputs) == ["output"] else outputs


def assert_parity(
    actual: Any,
    expected: Any = None,
    *,
    baseline: str | None = None,
    baseline_dir: str | os.PathLike[str] | None = None,
    update: bool | None = None,
    **bounds: Any,
) -> Comparison | None:
    """Compare like :func:`paritygate.compare` and raise AssertionError unless every output passes.

    ``bounds`` are the keyword arguments of :func:`~paritygate.compare` (``atol``, ``rtol``,
    ``min_cosine``, ``max_ulp``, ``tolerance``, ``label`` ...); without them the comparison is
    exact. Returns the comparison when it passes, so that a test can also inspect the metrics.

    With ``baseline="name"`` instead of ``expected``, ``actual`` is compared against the stored
    baseline ``name`` in ``baseline_dir`` (default ``baselines``): written on the first run (which
    fails with :class:`BaselineWritten`), re-recorded when ``update`` (default: the
    ``PARITYGATE_UPDATE_BASELINES`` environment variable) and it differs (failing with
    :class:`BaselineUpdated` and the difference).
    """
    __tracebackhide__ = True  # pytest shows the caller's line, not this one
    from .reports.text import format_comparison

    if baseline is None:
        comparison = compare(actual, expected, **bounds)
        if not comparison.passed:
            raise AssertionError(format_comparison(comparison))
        return comparison
    if expected is not None:
        raise InputError("give either expected or baseline=, not both")
    if update is None:
        update = os.environ.get(UPDATE_ENV, "") not in ("", "0")
    data, meta = baseline_paths(baseline, baseline_dir)
    _USED.add(data.resolve())
    if not data.is_file():
        _write(baseline, actual, data, meta, bounds)
        raise BaselineWritten(
            f"baseline written: {data} (with its provenance in {meta.name}); review it and "
            "re-run: the next run compares against it"
        )
    stored = _read(data, meta)
    comparison = compare(actual, stored, **bounds, label=f"against baseline {baseline}")
    if comparison.passed:
        return comparison
    if update:
        _write(baseline, actual, data, meta, bounds)
        raise BaselineUpdated(
            f"baseline re-recorded: {data}; review the difference below and re-run without "
            f"the update flag\n{format_comparison(comparison)}"
        )
    raise AssertionError(
        f"differs from baseline {baseline} ({data}); if the change is intended, re-record with "
        f"--paritygate-update-baselines (or {UPDATE_ENV}=1)\n{format_comparison(comparison)}"
    )


def used_baselines() -> set[Path]:
    """Baselines compared or written in this process."""
    return set(_USED)


def orphaned_baselines(folders: list[str | os.PathLike[str]]) -> list[Path]:
    """Baselines in ``folders`` that no assertion used in this process (sorted)."""
    found = []
    for folder in folders:
        for path in sorted(Path(folder).glob("*.safetensors")):
            if path.resolve() not in _USED:
                found.append(path)
    return found


def project_module(folder: str | os.PathLike[str], name: str) -> Any:
    """Module ``name`` of the parity project in ``folder``, imported as the gate imports its
    runners' modules: for tests that call a project's code directly, in a session that may hold
    several projects whose modules share names (``runners``, ``model``). A package folder's
    module is the package's submodule; a plain folder's is imported by its name, and any cached
    module named like one of the folder's own that belongs to another project (or was edited
    since) is imported afresh. Keep the folder on ``sys.path`` while the module's code runs if
    it imports lazily (pytest: ``monkeypatch.syspath_prepend(folder)``)."""
    from .runners import import_project_module

    return import_project_module(folder, name)


def use_project(folder: str | os.PathLike[str]) -> None:
    """Make the parity project in ``folder`` the one plain imports find (``import model`` in a
    test, or inside the project's code when called): cached modules named like the folder's
    own that belong to another project, or were edited since, are dropped. A test session over
    several projects calls it as each project's tests start, with the folder on ``sys.path``."""
    from .runners import use_project as use

    use(folder)
