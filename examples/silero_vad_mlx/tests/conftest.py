"""The example's modules for its tests, through ``example_module`` (examples/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def vad_mlx(example_module):
    return example_module("vad_mlx")


@pytest.fixture(scope="module")
def postprocess(example_module):
    return example_module("postprocess")


@pytest.fixture(scope="module")
def runners(example_module):
    return example_module("runners")


@pytest.fixture(scope="module")
def make_cases(example_module):
    return example_module("make_cases")


@pytest.fixture(scope="module")
def convert_weights(example_module):
    return example_module("convert_weights")


@pytest.fixture(scope="module")
def spec(example_folder):
    from paritygate import load_spec

    return load_spec(example_folder / "parity.toml")


@pytest.fixture(scope="module")
def cases(runners, spec):
    """The spec's cases with their recorded reference outputs (drift is refused)."""
    return runners.gated_cases(spec)


@pytest.fixture(scope="module")
def segment_edges_basis(example_module):
    return example_module("segment_edges_basis")
