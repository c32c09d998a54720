"""What every test starts from, whatever the shell that runs pytest has set or an earlier test
left behind (tests/conftest.py and examples/conftest.py use it).

A developer's own settings must not decide a test's outcome: ``PARITYGATE_KERNEL`` picks the
comparison kernel, ``PARITYGATE_UPDATE_BASELINES`` turns a failing baseline check into an
update, ``PARITYGATE_HARDWARE`` picks the hardware class speed claims are judged on, and
``COLUMNS`` or ``FORCE_COLOR`` change how the CLI's output wraps and whether it carries colour
codes. The session (its module-scoped fixtures included) runs without them and each test starts
without them (tests that need one set it with ``monkeypatch``). The benchmark harness's A/A
threshold cache lives in the session's temporary folder, never in the user's ``~/.cache``: a
cache left by an earlier run would change what a run measures.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

TERMINAL = ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR", "CLICOLOR_FORCE")


def _cleared(name: str) -> bool:
    """The suite's own options (``PARITYGATE_TEST_FRAMEWORKS``, ``PARITYGATE_PALLAS_TEST_ELEMENTS``:
    which tests run, how large) are kept; they are no setting of the code under test."""
    if name.startswith("PARITYGATE_"):
        return "_TEST_" not in name
    return name in TERMINAL


def _clear(patch: pytest.MonkeyPatch, cache: Path) -> None:
    for name in list(os.environ):
        if _cleared(name):
            patch.delenv(name)
    patch.setenv("PARITYGATE_CACHE_DIR", str(cache))


@pytest.fixture(scope="session", autouse=True)
def clean_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    cache = tmp_path_factory.mktemp("paritygate-cache")
    with pytest.MonkeyPatch.context() as patch:
        _clear(patch, cache)
        yield cache


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch: pytest.MonkeyPatch, clean_session: Path) -> None:
    _clear(monkeypatch, clean_session)
