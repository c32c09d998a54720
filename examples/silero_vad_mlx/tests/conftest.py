"""Puts the example's folder on sys.path for its tests.

The example's modules have plain top-level names (make_cases, cli, runners ...) that other
examples may also use, so they are imported afresh for each test module of this folder and
taken off sys.path / sys.modules afterwards: the tests always exercise this example's files.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1]
MODULES = (
    "vad_mlx",
    "postprocess",
    "runners",
    "cli",
    "make_cases",
    "convert_weights",
    "segment_edges_basis",
    "vad_gate",
    "bench",
    "demo",
)


@pytest.fixture(scope="module", autouse=True)
def example_on_path():
    saved = {name: sys.modules.pop(name) for name in MODULES if name in sys.modules}
    sys.path.insert(0, str(EXAMPLE))
    yield EXAMPLE
    sys.path.remove(str(EXAMPLE))
    for name in MODULES:
        sys.modules.pop(name, None)
    sys.modules.update(saved)


def _module(name: str):
    module = importlib.import_module(name)
    assert Path(module.__file__).resolve().parent == EXAMPLE, module.__file__
    return module


@pytest.fixture(scope="module")
def vad_mlx(example_on_path):
    return _module("vad_mlx")


@pytest.fixture(scope="module")
def postprocess(example_on_path):
    return _module("postprocess")


@pytest.fixture(scope="module")
def runners(example_on_path):
    return _module("runners")


@pytest.fixture(scope="module")
def vad_gate(example_on_path):
    return _module("vad_gate")


@pytest.fixture(scope="module")
def make_cases(example_on_path):
    return _module("make_cases")


@pytest.fixture(scope="module")
def convert_weights(example_on_path):
    return _module("convert_weights")


@pytest.fixture(scope="module")
def cases(vad_gate):
    return vad_gate.load_cases()


@pytest.fixture(scope="module")
def segment_edges_basis(example_on_path):
    return _module("segment_edges_basis")
