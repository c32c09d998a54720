"""Locating where two runs part: the PyTorch twin against the MLX model, matched automatically
(their module trees share names, but not every module: MLX's blocks own LayerNorm modules, the
twin calls F.layer_norm), with bugs planted in one MLX block located at that block."""

from __future__ import annotations

from contextlib import contextmanager

import mlx.core as mx
import numpy as np
import pytest

from paritygate.locate import bisect_models, capture, locate, locate_models

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


def _locate(sides, **options):
    twin, torch_run, mlx_model, mlx_run = sides
    return locate_models(torch_run, twin, mlx_run, mlx_model, bound=CLAIM_BOUND, **options)


def _bisect(sides):
    twin, torch_run, mlx_model, mlx_run = sides
    return bisect_models(
        torch_run, twin, mlx_run, mlx_model, bound=CLAIM_BOUND, points=r"blocks\.\d+"
    )


@contextmanager
def nudged_block(mlx_model, index: int, size: float):
    """A planted bug whose effect is small at its own block and amplified by the next one:
    block ``index`` adds ``size`` with alternating signs (zero mean over the channels) to its
    last token's output. The block's max-abs error is ``size``, below its scaled bound; the next
    block's LayerNorm divides the token by its spread and its attention mixes it into every
    token, so the next block's first projection is past its own bound."""
    block = mlx_model.blocks[index]
    original = type(block)
    dim = mlx_model.config.dim
    nudge = np.zeros((mlx_model.config.tokens, dim), dtype=np.float32)
    nudge[-1] = np.where(np.arange(dim) % 2 == 0, size, -size)
    added = mx.array(nudge)

    class Nudged(original):
        def __call__(self, h, c):
            return original.__call__(self, h, c) + added

    block.__class__ = Nudged  # ``__call__`` is looked up on the class
    try:
        yield
    finally:
        block.__class__ = original


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


def test_swapped_attention_heads_are_located_at_that_block(sides):
    """Block 3's attention class is swapped for one that exchanges heads 0 and 1 of the
    attention output before the output projection (a porter's head-layout slip; MLX's
    ``Attention`` and the twin's agree on it otherwise). The block's ``qkv`` projection, before
    the bug, agrees; the projection that reads the heads, ``blocks.3.attn.proj``, is the first
    matched activation they reach at the first step, inside block 3. The same class with the
    heads in order shows no divergence: the rewritten attention is faithful but for the swap."""
    _, _, mlx_model, _ = sides
    attn = mlx_model.blocks[3].attn
    original = type(attn)
    swap = [1, 0, *range(2, attn.heads)]

    class HeadsSwapped(original):
        def __call__(self, x):
            b, n, d = x.shape
            hd = d // self.heads
            qkv = self.qkv(x).reshape(b, n, 3, self.heads, hd).transpose(2, 0, 3, 1, 4)
            out = mx.fast.scaled_dot_product_attention(
                qkv[0], qkv[1], qkv[2], scale=1.0 / float(np.sqrt(hd))
            )
            out = out[:, mx.array(swap)]  # (batch, heads, tokens, head_dim)
            return self.proj(out.transpose(0, 2, 1, 3).reshape(b, n, d))

    attn.__class__ = HeadsSwapped  # ``__call__`` is looked up on the class
    try:
        found = _locate(sides)
        swap[:] = range(attn.heads)
        faithful = _locate(sides)
    finally:
        attn.__class__ = original
    assert faithful, faithful.message
    assert not found
    assert found.first.label == "blocks.3.attn.proj#0"
    assert found.message.startswith("first divergence at blocks.3.attn.proj#0: max_abs ")
    assert all(not p.diverged for p in found.pairs if p.position < found.first.position)
    qkv = next(p for p in found.pairs if p.label == "blocks.3.attn.qkv#0")
    assert qkv.position < found.first.position
    assert _locate(sides), "the attention's class was not put back"


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


# -- bisect: where the error arises, told apart from where it is first seen ----------------------


def test_a_bug_amplified_by_the_next_block_is_seen_there_and_bisected_to_its_own(sides):
    _, _, mlx_model, _ = sides
    with nudged_block(mlx_model, 3, 1.5e-5):
        plain = _locate(sides)
        resumed = _locate(sides, resume="blocks.3")
        found = _bisect(sides)
    # error growth alone: block 3 stays within its bound, block 4's first projection does not
    own = next(p for p in plain.pairs if p.label == "blocks.3#0")
    assert 0 < own.judged < own.bound
    assert plain.first.label == "blocks.4.attn.qkv#0"
    # fed the reference's block-3 output at every step, everything after it agrees
    assert resumed.first is None and resumed.fed == 25
    assert resumed.message.startswith(
        "resumed after blocks.3, fed the reference's activation at 25 calls: no divergence "
        "downstream ("
    )
    assert resumed.message.endswith("the error arises at or before blocks.3")
    # the MLX model runs block 0 through forward_with_modulated: its output is no resume point
    assert found.points == ["blocks.1", "blocks.2", "blocks.3", "blocks.4", "blocks.5"]
    assert found.layer == "blocks.3"
    assert found.message == (
        "the error arises in blocks.3: resumed after blocks.2 the runs still part (at "
        "blocks.4.attn.qkv#0), resumed after blocks.3 they agree; error growth alone points at "
        "blocks.4.attn.qkv#0"
    )


def test_bisect_finds_a_block_scaled_by_1_01_and_nothing_in_the_correct_pair(sides, model_mod):
    _, _, mlx_model, _ = sides
    restore = model_mod.mutate_block(mlx_model, 4, 1.01)
    try:
        found = _bisect(sides)
    finally:
        restore()
    assert found.plain.first.label == "blocks.4#0" and found.layer == "blocks.4"
    assert found.message.startswith("the error arises in blocks.4: resumed after blocks.3 the ")
    good = _bisect(sides)
    assert good and good.layer is None and good.runs == {}
