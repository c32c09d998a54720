"""One mechanism for every example's tests: the example's modules, imported as the gate imports
them.

An example is a folder users copy; its modules import each other by plain names
(``import postprocess``), as they do when run from that folder. The examples' tests share one
pytest session and examples use the same module names (``make_cases``, ``model``), so tests reach
an example's modules the way ``paritygate gate`` imports a runner's module: as each example's
tests start, its folder goes first on ``sys.path`` and :func:`paritygate.testing.use_project`
makes its modules the ones plain imports find (another example's module of the same name is
never used); ``example_module("runners")`` is :func:`paritygate.testing.project_module`.

Every example's tests are end-to-end checks, marked ``slow`` here (tests/conftest.py marks
tests/integration), so that ``pytest examples`` alone selects them the same way as the whole
suite does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest
from isolation import clean_environment, clean_session  # noqa: F401 (fixtures)

EXAMPLES = Path(__file__).resolve().parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if Path(str(item.path)).resolve().is_relative_to(EXAMPLES):
            item.add_marker(pytest.mark.slow)


def _example_of(path: Path) -> Path | None:
    """The example folder a test file belongs to (``examples/<name>/tests/test_x.py``)."""
    parts = Path(path).resolve().relative_to(EXAMPLES).parts
    return EXAMPLES / parts[0] if len(parts) > 1 else None


@pytest.fixture(scope="module", autouse=True)
def example_folder(request: pytest.FixtureRequest) -> Iterator[Path | None]:
    folder = _example_of(request.path)
    if folder is None:
        yield None
        return
    from paritygate.testing import use_project

    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(folder))
        use_project(folder)  # its modules, not another example's of the same name
        yield folder


@pytest.fixture(scope="module")
def example_module(example_folder: Path) -> Callable[[str], ModuleType]:
    """``example_module("runners")``: the example's own module of that name."""
    from paritygate.testing import project_module

    def load(name: str) -> ModuleType:
        module = project_module(example_folder, name)
        assert Path(module.__file__).resolve().parent == example_folder, module.__file__
        return module

    return load
