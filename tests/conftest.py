"""Shared test configuration: the three tiers of the suite.

- ``tests/unit``: framework-free, seconds (``make test-fast``);
- ``tests/backends``: one file per framework; ``PARITYGATE_TEST_FRAMEWORKS=torch,mlx`` selects
  some (the others are deselected, never skipped); by default every framework runs;
- ``tests/integration`` and ``examples``: the gate, the CLI, bootstrap, dependencies and the
  examples end to end, all marked ``slow`` (``-m "not slow"`` leaves them out); the examples are
  marked by examples/conftest.py, which pytest loads whenever it collects an example's tests.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from isolation import clean_environment, clean_session  # noqa: F401 (fixtures)

TESTS = Path(__file__).resolve().parent
INTEGRATION = TESTS / "integration"
FRAMEWORKS = ("jax", "mlx", "onnxruntime", "torch")


def _selected_frameworks() -> set[str]:
    chosen = os.environ.get("PARITYGATE_TEST_FRAMEWORKS", "").strip()
    if not chosen:
        return set(FRAMEWORKS)
    names = {n.strip() for n in chosen.split(",") if n.strip()}
    unknown = names - set(FRAMEWORKS)
    if unknown:
        raise pytest.UsageError(
            f"PARITYGATE_TEST_FRAMEWORKS: unknown {', '.join(sorted(unknown))} "
            f"(frameworks: {', '.join(FRAMEWORKS)})"
        )
    return names


def _framework_of(path: Path) -> str | None:
    """The framework a backend test file is about (``test_backend_torch.py`` -> torch); None for
    the files that are about several (``test_backend_cosine.py``), which always run."""
    if path.parent != TESTS / "backends" or not path.name.startswith("test_backend_"):
        return None
    name = path.stem[len("test_backend_") :]
    return name if name in FRAMEWORKS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    selected = _selected_frameworks()
    kept, deselected = [], []
    for item in items:
        path = Path(str(item.path)).resolve()
        if path.is_relative_to(INTEGRATION):
            item.add_marker(pytest.mark.slow)
        framework = _framework_of(path)
        if framework is not None and framework not in selected:
            deselected.append(item)
        else:
            kept.append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = kept
