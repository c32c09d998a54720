"""Puts the example's folder on sys.path for its tests.

The example's modules have plain top-level names (model, data, encoder ...) that other examples
may also use, so they are imported afresh for this folder's test modules and taken off
sys.path / sys.modules afterwards: the tests always exercise this example's files.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1]
MODULES = (
    "data",
    "model",
    "encoder",
    "torch_twin",
    "gate_runners",
    "mutations",
    "make_cases",
    "calibrate_claims",
    "train",
    "bench_encoder",
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
def data_mod(example_on_path):
    return _module("data")


@pytest.fixture(scope="session")
def model_mod(example_on_path):
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
    return _module("model")


@pytest.fixture(scope="session")
def encoder_mod(model_mod):
    return _module("encoder")


@pytest.fixture(scope="session")
def runners(model_mod):
    return _module("gate_runners")


@pytest.fixture(scope="session")
def mutations(runners):
    return _module("mutations")


@pytest.fixture(scope="session")
def spec(example_on_path):
    from paritygate.spec import load_spec

    return load_spec(EXAMPLE / "parity.toml")


@pytest.fixture(scope="session")
def heldout_spec(example_on_path):
    from paritygate.spec import load_spec

    return load_spec(EXAMPLE / "parity-heldout.toml")


@pytest.fixture(scope="session")
def sweep(data_mod, example_on_path):
    """The correctness sweep's cases (cases/sweep/*.json) by name."""
    from paritygate.spec import load_spec

    sweep_spec = load_spec(EXAMPLE / "parity-sweep.toml")
    return {name: data_mod.read_items(case.load()) for name, case in sweep_spec.cases.items()}
