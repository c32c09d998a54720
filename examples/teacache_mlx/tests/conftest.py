"""The example's modules and shared outputs for its tests; the modules come through
``example_module`` (examples/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

EXAMPLE = Path(__file__).resolve().parents[1]
# Outputs computed once per session (the modules themselves are imported per test module).
_ONCE: dict[str, dict] = {}


@pytest.fixture(scope="module")
def model_mod(example_module):
    return example_module("model")


@pytest.fixture(scope="module")
def teacache(example_module):
    return example_module("teacache")


@pytest.fixture(scope="module")
def runners(example_module):
    return example_module("gate_runners")


@pytest.fixture(scope="module")
def spec(example_folder):
    from paritygate import load_spec

    return load_spec(EXAMPLE / "parity.toml")


@pytest.fixture(scope="module")
def cases(spec):
    return list(spec.cases.values())


@pytest.fixture(scope="module")
def vanilla_outputs(runners, cases):
    """Vanilla MLX outputs of every spec case, computed once (in-process baselines)."""
    if "vanilla" not in _ONCE:
        _ONCE["vanilla"] = {case.name: runners.vanilla(case) for case in cases}
    return _ONCE["vanilla"]


@pytest.fixture(scope="module")
def twin_outputs(runners, cases):
    if "twin" not in _ONCE:
        _ONCE["twin"] = {case.name: runners.torch_twin(case) for case in cases}
    return _ONCE["twin"]


def claim_bound(spec, claim_id: str) -> float:
    return float(spec.claims[claim_id].bound)


@pytest.fixture(scope="module")
def bound(spec):
    return lambda claim_id: claim_bound(spec, claim_id)


def as_numpy(x):
    return np.asarray(x)
