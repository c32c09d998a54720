"""The example's modules for its tests, through ``example_module`` (examples/conftest.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def data_mod(example_module):
    return example_module("data")


@pytest.fixture(scope="module")
def model_mod(example_module):
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
    return example_module("model")


@pytest.fixture(scope="module")
def encoder_mod(model_mod, example_module):
    return example_module("encoder")


@pytest.fixture(scope="module")
def runners(model_mod, example_module):
    return example_module("gate_runners")


@pytest.fixture(scope="module")
def mutations(runners, example_module):
    return example_module("mutations")


@pytest.fixture(scope="module")
def spec(example_folder):
    from paritygate import load_spec

    return load_spec(EXAMPLE / "parity.toml")


@pytest.fixture(scope="module")
def heldout_spec(example_folder):
    from paritygate import load_spec

    return load_spec(EXAMPLE / "parity-heldout.toml")


@pytest.fixture(scope="module")
def sweep(data_mod, example_folder):
    """The correctness sweep's cases (cases/sweep/*.json) by name."""
    from paritygate import load_spec

    sweep_spec = load_spec(EXAMPLE / "parity-sweep.toml")
    return {name: data_mod.read_items(case.load()) for name, case in sweep_spec.cases.items()}
