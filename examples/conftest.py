"""One mechanism for every example's tests: the example's own modules, by their plain names.

An example is a folder users copy; its modules import each other by plain names
(``import postprocess``), as they do when run from that folder. The examples' tests share one
pytest session, and examples may use the same module names (``make_cases``), so each test module
of an example gets that example's folder first on ``sys.path`` and its modules imported afresh,
and both are taken off again afterwards (as paritygate's in-process runners do for a spec's
folder). Tests reach the modules through the ``example_module`` fixture.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).resolve().parent


def _example_of(path: Path) -> Path | None:
    """The example folder a test file belongs to (``examples/<name>/tests/test_x.py``)."""
    parts = Path(path).resolve().relative_to(EXAMPLES).parts
    return EXAMPLES / parts[0] if len(parts) > 1 else None


def _own_modules(folder: Path) -> set[str]:
    return {p.stem for p in folder.glob("*.py")} | {
        p.name for p in folder.iterdir() if (p / "__init__.py").is_file()
    }


@pytest.fixture(scope="module", autouse=True)
def example_folder(request: pytest.FixtureRequest) -> Iterator[Path | None]:
    folder = _example_of(request.path)
    if folder is None:
        yield None
        return
    names = _own_modules(folder)
    saved = {name: sys.modules.pop(name) for name in names if name in sys.modules}
    sys.path.insert(0, str(folder))
    try:
        yield folder
    finally:
        sys.path.remove(str(folder))
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)


@pytest.fixture(scope="module")
def example_module(example_folder: Path) -> Callable[[str], ModuleType]:
    """``example_module("runners")``: the example's own module of that name."""

    def load(name: str) -> ModuleType:
        module = importlib.import_module(name)
        assert Path(module.__file__).resolve().parent == example_folder, module.__file__
        return module

    return load
