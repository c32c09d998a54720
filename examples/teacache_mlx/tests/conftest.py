"""Puts the example's folder on sys.path for its tests.

The example's modules have plain top-level names (model, common, teacache ...) that other
examples may also use, so they are imported afresh for this folder's test modules and taken off
sys.path / sys.modules afterwards: the tests always exercise this example's files.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parents[1]
MODULES = (
    "common",
    "model",
    "torch_twin",
    "teacache",
    "gate_runners",
    "make_cases",
    "fit_rescale",
    "train",
    "calibrate_claims",
)


@pytest.fixture(scope="session", autouse=True)
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


@pytest.fixture(scope="session")
def model_mod(example_on_path):
    return _module("model")


@pytest.fixture(scope="session")
def teacache(example_on_path):
    return _module("teacache")


@pytest.fixture(scope="session")
def runners(example_on_path):
    return _module("gate_runners")


@pytest.fixture(scope="session")
def spec(example_on_path):
    from paritygate import load_spec

    return load_spec(EXAMPLE / "parity.toml")


@pytest.fixture(scope="session")
def cases(spec):
    return list(spec.cases.values())


@pytest.fixture(scope="session")
def vanilla_outputs(runners, cases):
    """Vanilla MLX outputs of every spec case, computed once (in-process baselines)."""
    return {case.name: runners.vanilla(case) for case in cases}


@pytest.fixture(scope="session")
def twin_outputs(runners, cases):
    return {case.name: runners.torch_twin(case) for case in cases}


def claim_bound(spec, claim_id: str) -> float:
    return float(spec.claims[claim_id].bound)


@pytest.fixture(scope="session")
def bound(spec):
    return lambda claim_id: claim_bound(spec, claim_id)


def as_numpy(x):
    return np.asarray(x)
