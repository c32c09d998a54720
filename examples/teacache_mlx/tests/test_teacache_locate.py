"""Locating where two runs part: the PyTorch twin against the MLX model, matched automatically
(their module trees share names, but not every module: MLX's blocks own LayerNorm modules, the
twin calls F.layer_norm), with bugs planted in one MLX block located at that block."""

from __future__ import annotations

import numpy as np
import pytest

from paritygate.locate import capture, locate, locate_models

# The claim the twin is gated by (parity.toml): its bound scales to every layer.
CLAIM_BOUND = 2.9e-06


@pytest.fixture(scope="module")
def sides(runners, model_mod, cases):
    import torch_twin

    noise, label = runners.case_inputs(cases[0])
    twin = runners.torch_twin.model()
    mlx_model = runners.vanilla.model()
    pipeline = model_mod.Pipeline(mlx_model)

    def torch_run():
        return torch_twin.sample_torch(twin, noise, label)

    def mlx_run():
        return np.array(pipeline.sample(noise, label))

    return twin, torch_run, mlx_model, mlx_run


def _locate(sides):
    twin, torch_run, mlx_model, mlx_run = sides
    return locate_models(torch_run, twin, mlx_run, mlx_model, bound=CLAIM_BOUND)


def test_the_correct_pair_shows_no_divergence_beyond_the_bound(sides):
    found = _locate(sides)
    assert found, found.message
    # 25 steps of embeddings, 6 blocks (MLX runs block 0 through forward_with_modulated, not
    # __call__, so the twin's block-0 output has no partner; its submodules match), the final
    # layer and the model; MLX's LayerNorm modules have no twin (it calls F.layer_norm)
    assert len(found.pairs) > 1300
    assert all(p.how == "name" and p.confidence == 1.0 for p in found.pairs)
    assert all(p.judged <= p.bound for p in found.pairs)
    assert {n.split("#")[0] for n in found.unmatched_reference} == {"blocks.0"}
    assert {n.split("#")[0].rsplit(".", 1)[1] for n in found.unmatched_candidate} == {
        "norm1",
        "norm2",
        "norm",
    }
    assert found.message.startswith("no divergence: ")


def test_a_block_output_scaled_by_1_01_is_located_at_that_block(sides, model_mod):
    _, _, mlx_model, _ = sides
    restore = model_mod.mutate_block(mlx_model, 3, 1.01)
    try:
        found = _locate(sides)
    finally:
        restore()
    assert not found
    first = found.first
    assert (first.reference, first.call, first.candidate) == ("blocks.3", 0, "blocks.3")
    assert found.message.startswith("first divergence at blocks.3#0: max_abs ")
    # the block's inner modules (MutatedBlock.inner.*) are paired by order and shape, and agree
    inner = [p for p in found.pairs if p.candidate.startswith("blocks.3.inner.") and p.call == 0]
    assert len(inner) == 7 and all(p.how == "order" and not p.diverged for p in inner)
    assert all(p.reference == p.candidate.replace(".inner", "") for p in inner)


def test_a_wrong_norm_epsilon_is_located_at_that_block(sides):
    _, _, mlx_model, _ = sides
    norm = mlx_model.blocks[3].norm1
    norm.eps = 1e-2
    try:
        found = _locate(sides)
    finally:
        norm.eps = 1e-6
    assert not found
    # the MLX LayerNorm has no twin module: the first matched activation after it diverges
    assert found.first.reference == "blocks.3.attn.qkv" and found.first.call == 0
    assert found.message.startswith("first divergence at blocks.3.attn.qkv#0: max_abs ")
    assert all(not p.diverged for p in found.pairs if p.position < found.first.position)


def test_the_mlx_pipeline_is_byte_identical_once_capture_is_removed(sides):
    _, _, mlx_model, mlx_run = sides
    before = mlx_run()
    with capture(mlx_model, lambda name, out: None):
        during = mlx_run()
    after = mlx_run()
    assert before.tobytes() == during.tobytes() == after.tobytes()


def test_locate_through_the_spec(example_folder):
    """``paritygate locate parity.toml --claim twin-max-abs --case seed0-digit0``: the runners
    expose their models (``gate_runners.vanilla.model``)."""
    found = locate(example_folder / "parity.toml", "twin-max-abs", "seed0-digit0")
    assert found, found.message
    assert (found.reference_runner, found.candidate_runner) == ("vanilla", "torch-twin")
