"""Name rules with a slice: a reference that computes Q, K and V with three linears (PyTorch)
against a candidate that computes them with one fused linear whose output is their
concatenation (MLX), under other names and with each block's attention and feed-forward run in
the other order. Automatic matching
cannot pair the fused projection (its shape is none of the reference's) and must not pair the
rest wrongly with confidence; three rules with a ``slice`` each map its parts to the reference's
three projections, and a bug in one part is located at that part."""

from __future__ import annotations

import mlx.core as mx  # noqa: E402 - the frameworks are installed for these tests: never skipped
import mlx.nn as mnn  # noqa: E402
import numpy as np
import pytest
import torch  # noqa: E402

from paritygate.errors import InputError
from paritygate.locate import locate_models, parse_rule

DIM, HEADS, TOKENS, LAYERS = 16, 2, 5, 2


class TorchAttention(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = torch.nn.Linear(DIM, DIM)
        self.k_proj = torch.nn.Linear(DIM, DIM)
        self.v_proj = torch.nn.Linear(DIM, DIM)
        self.o_proj = torch.nn.Linear(DIM, DIM)

    def forward(self, x):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        hd = DIM // HEADS
        q, k, v = (a.reshape(TOKENS, HEADS, hd).transpose(0, 1) for a in (q, k, v))
        out = torch.softmax(q @ k.transpose(1, 2) / hd**0.5, dim=-1) @ v
        return self.o_proj(out.transpose(0, 1).reshape(TOKENS, DIM))


class TorchLayer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attn = TorchAttention()
        self.fc = torch.nn.Linear(DIM, DIM)

    def forward(self, x):  # a parallel block: its feed-forward runs first
        ff = torch.tanh(self.fc(x))
        return x + self.attn(x) + ff


class TorchModel(torch.nn.Module):
    """The reference: three projections per attention, named ``layers.N.attn.{q,k,v}_proj``."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.layers = torch.nn.ModuleList([TorchLayer() for _ in range(LAYERS)])
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class MlxAttention(mnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv = mnn.Linear(DIM, 3 * DIM)  # output: [q | k | v] on the last axis
        self.out = mnn.Linear(DIM, DIM)

    def __call__(self, x):
        hd = DIM // HEADS
        qkv = self.qkv(x).reshape(TOKENS, 3, HEADS, hd).transpose(1, 2, 0, 3)
        q, k, v = qkv[0], qkv[1], qkv[2]
        out = mx.softmax(q @ k.transpose(0, 2, 1) / hd**0.5, axis=-1) @ v
        return self.out(out.transpose(1, 0, 2).reshape(TOKENS, DIM))


class MlxBlock(mnn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mix = mnn.Linear(DIM, DIM)
        self.attention = MlxAttention()

    def __call__(self, x):  # the same parallel block, its attention run first
        return x + self.attention(x) + mx.tanh(self.mix(x))


class MlxModel(mnn.Module):
    """The candidate: one fused projection per attention, other names (``blocks.N.attention.qkv``,
    ``out``, ``mix``), and each block's attention run before its feed-forward."""

    def __init__(self, reference: TorchModel, v_scale_in_block_1: float = 1.0) -> None:
        super().__init__()
        self.blocks = [MlxBlock() for _ in range(LAYERS)]
        for block, layer in zip(self.blocks, reference.layers, strict=True):
            a = layer.attn

            def w(linear):
                return mx.array(linear.weight.detach().numpy())

            def b(linear):
                return mx.array(linear.bias.detach().numpy())

            block.attention.qkv.weight = mx.concatenate([w(a.q_proj), w(a.k_proj), w(a.v_proj)])
            block.attention.qkv.bias = mx.concatenate([b(a.q_proj), b(a.k_proj), b(a.v_proj)])
            block.attention.out.weight, block.attention.out.bias = w(a.o_proj), b(a.o_proj)
            block.mix.weight, block.mix.bias = w(layer.fc), b(layer.fc)
        if v_scale_in_block_1 != 1.0:  # a planted bug: the V rows of block 1's fused weight
            qkv = self.blocks[1].attention.qkv
            rows = mx.arange(3 * DIM)
            factor = mx.where(rows >= 2 * DIM, v_scale_in_block_1, 1.0)
            qkv.weight = qkv.weight * factor[:, None]
            qkv.bias = qkv.bias * factor

    def __call__(self, x):
        for block in self.blocks:
            x = block(x)
        return x


RULES = [
    *(
        {
            "from": r"blocks\.(\d+)\.attention\.qkv",
            "to": rf"layers.\1.attn.{name}_proj",
            "slice": f"..., {i * DIM}:{(i + 1) * DIM}",
        }
        for i, name in enumerate("qkv")
    ),
    r"blocks\.(\d+)\.attention\.out -> layers.\1.attn.o_proj",
    r"blocks\.(\d+)\.attention -> layers.\1.attn",
    r"blocks\.(\d+)\.mix -> layers.\1.fc",
    r"blocks\.(\d+) -> layers.\1",
]

# which reference module each candidate module truly stands for (the fused one: three)
TRUTH = {
    **{f"blocks.{n}.attention.out": f"layers.{n}.attn.o_proj" for n in range(LAYERS)},
    **{f"blocks.{n}.attention": f"layers.{n}.attn" for n in range(LAYERS)},
    **{f"blocks.{n}.mix": f"layers.{n}.fc" for n in range(LAYERS)},
    **{f"blocks.{n}": f"layers.{n}" for n in range(LAYERS)},
    "(root)": "(root)",
}


@pytest.fixture(scope="module")
def fused():
    reference = TorchModel().eval()
    x = np.random.default_rng(2).standard_normal((TOKENS, DIM)).astype(np.float32)

    def reference_run():
        with torch.no_grad():
            return reference(torch.from_numpy(x)).numpy()

    def run_of(candidate):
        return lambda: np.array(candidate(mx.array(x)))

    return reference, reference_run, run_of


def _locate(fused, candidate, rules=RULES):
    reference, reference_run, run_of = fused
    return locate_models(
        reference_run, reference, run_of(candidate), candidate, bound=1e-5, rules=rules
    )


def test_slice_rules_match_the_fused_projection_to_the_three(fused):
    found = _locate(fused, MlxModel(fused[0]))
    assert found, found.message
    assert all(p.how == "map" for p in found.pairs if p.reference != "(root)")
    assert not found.unmatched_candidate
    assert {n.split("#")[0] for n in found.unmatched_reference} == set()
    by_ref = {p.reference: p.candidate for p in found.pairs}
    for n in range(LAYERS):
        assert by_ref[f"layers.{n}.attn.q_proj"] == f"blocks.{n}.attention.qkv[..., 0:16]"
        assert by_ref[f"layers.{n}.attn.k_proj"] == f"blocks.{n}.attention.qkv[..., 16:32]"
        assert by_ref[f"layers.{n}.attn.v_proj"] == f"blocks.{n}.attention.qkv[..., 32:48]"
    assert len(found.pairs) == LAYERS * 7 + 1
    assert found.message.startswith(f"no divergence: {LAYERS * 7 + 1} matched pairs within ")


def test_a_bug_in_one_part_of_the_fused_projection_is_located_at_that_part(fused):
    """Block 1's fused weight has its V rows scaled by 1.01: its Q and K parts agree, and the
    first pair past its bound is the reference's ``layers.1.attn.v_proj`` against the fused
    projection's V slice."""
    found = _locate(fused, MlxModel(fused[0], v_scale_in_block_1=1.01))
    assert not found
    assert found.first.label == "layers.1.attn.v_proj#0"
    assert found.first.candidate == "blocks.1.attention.qkv[..., 32:48]"
    assert found.message.startswith(
        "first divergence at layers.1.attn.v_proj#0 (candidate blocks.1.attention.qkv[..., "
        "32:48]): max_abs "
    )
    before = {p.reference for p in found.pairs if p.position < found.first.position}
    assert {"layers.1.attn.q_proj", "layers.1.attn.k_proj"} <= before
    assert all(not p.diverged for p in found.pairs if p.position < found.first.position)


def test_without_rules_nothing_is_paired_wrongly_with_confidence(fused):
    """No name is shared but the root's: order and shape align the rest. The fused projection
    has no reference activation of its shape and stays unmatched; every other pair is either
    the true one or given a low confidence (at most 1/2), so none is wrong silently: a wrong
    pair compares unrelated activations, and the first divergence it shows says so."""
    found = _locate(fused, MlxModel(fused[0]), rules=())
    assert {n.split("#")[0] for n in found.unmatched_candidate} == {
        f"blocks.{n}.attention.qkv" for n in range(LAYERS)
    }
    wrong = [p for p in found.pairs if TRUTH.get(p.candidate) != p.reference]
    assert wrong, "the candidate's order differs: order and shape cannot pair it all rightly"
    assert all(p.how == "order" and p.confidence <= 0.5 for p in wrong), [
        (p.reference, p.candidate, p.confidence) for p in wrong
    ]
    # where such a pair is the first divergence, the message says what it rests on
    assert not found and found.first in wrong
    assert found.message.endswith(
        f"; that pair is matched by order and shape only, with confidence "
        f"{found.first.confidence:.2g}: check it, or map the names with a rule"
    )


@pytest.mark.parametrize(
    "rule, message",
    [
        ({"from": "a", "to": "b", "slice": 3}, "slice expects a numpy index such as"),
        ({"from": "a", "to": "b", "slice": "..., 0:x"}, "cannot read '0:x' as a slice"),
        ({"from": "a", "to": "b", "slice": "..., ..., 1"}, "at most one '...'"),
        ({"from": "a", "to": "b", "reference_slice": "0:"}, ""),
        ({"from": "a", "to": "b", "reference_slice": [0, 1]}, "reference_slice expects a numpy"),
        ({"from": "a", "to": "b", "slice": ":", "reference_slice": ":"}, "not both"),
    ],
)
def test_bad_slices_are_input_errors(rule, message):
    if not message:  # a valid one
        assert parse_rule(rule).reference_slice == (slice(0, None),)
        return
    with pytest.raises(InputError) as info:
        parse_rule(rule)
    assert message in str(info.value)


def test_a_layout_that_does_not_fit_leaves_the_activation_to_names_and_order(fused):
    """A rule whose reshape cannot apply to the activation it names is passed over (no
    traceback): the activation is left to name and order matching, and the rule pairs
    nothing."""
    rules = [r for r in RULES if r != r"blocks\.(\d+)\.mix -> layers.\1.fc"]
    rules.append({"from": r"blocks\.(\d+)\.mix", "to": r"layers.\1.fc", "reshape": [7, 3]})
    found = _locate(fused, MlxModel(fused[0]), rules=rules)
    # here neither: each block's feed-forward runs before its attention in the reference and
    # after it in the candidate, on the other side of the attention's anchors
    assert found, found.message
    assert not [p for p in found.pairs if p.reference.endswith(".fc")]
    assert found.unmatched_reference == [f"layers.{n}.fc#0" for n in range(LAYERS)]
    assert found.unmatched_candidate == [f"blocks.{n}.mix#0" for n in range(LAYERS)]


# -- the other way: the reference fused, the candidate with three projections -------------------

REVERSE_RULES = [
    *(
        {
            "from": rf"layers\.(\d+)\.attn\.{name}_proj",
            "to": r"blocks.\1.attention.qkv",
            "reference_slice": f"..., {i * DIM}:{(i + 1) * DIM}",
        }
        for i, name in enumerate("qkv")
    ),
    r"layers\.(\d+)\.attn\.o_proj -> blocks.\1.attention.out",
    r"layers\.(\d+)\.attn -> blocks.\1.attention",
    r"layers\.(\d+)\.fc -> blocks.\1.mix",
    r"layers\.(\d+) -> blocks.\1",
]


def _reverse(fused, v_scale_in_layer_1=1.0):
    """The MLX model (fused) as the reference, the PyTorch one (three projections) as the
    candidate; the bug: layer 1's V projection weight and bias scaled."""
    reference, _, run_of = fused
    fused_model = MlxModel(reference)
    candidate = TorchModel().eval()
    candidate.load_state_dict(reference.state_dict())
    with torch.no_grad():
        candidate.layers[1].attn.v_proj.weight.mul_(v_scale_in_layer_1)
        candidate.layers[1].attn.v_proj.bias.mul_(v_scale_in_layer_1)
    x = np.random.default_rng(2).standard_normal((TOKENS, DIM)).astype(np.float32)

    def candidate_run():
        with torch.no_grad():
            return candidate(torch.from_numpy(x)).numpy()

    return locate_models(
        run_of(fused_model), fused_model, candidate_run, candidate, bound=1e-5, rules=REVERSE_RULES
    )


def test_reference_slice_rules_match_three_projections_to_a_fused_reference(fused):
    found = _reverse(fused)
    assert found, found.message
    assert not found.unmatched_candidate and not found.unmatched_reference
    by_candidate = {p.candidate: p.reference for p in found.pairs}
    assert by_candidate["layers.1.attn.v_proj"] == "blocks.1.attention.qkv[..., 32:48]"
    assert by_candidate["layers.0.attn.q_proj"] == "blocks.0.attention.qkv[..., 0:16]"
    assert len(found.pairs) == LAYERS * 7 + 1


def test_a_bug_in_one_projection_is_located_at_that_part_of_the_fused_reference(fused):
    found = _reverse(fused, v_scale_in_layer_1=1.01)
    assert not found
    assert found.first.label == "blocks.1.attention.qkv[..., 32:48]#0"
    assert found.message.startswith(
        "first divergence at blocks.1.attention.qkv[..., 32:48]#0 (candidate "
        "layers.1.attn.v_proj): max_abs "
    )
    before = {p.candidate for p in found.pairs if p.position <= found.first.position}
    assert {"layers.1.attn.q_proj", "layers.1.attn.k_proj"} <= before
    assert all(
        not p.diverged
        for p in found.pairs
        if p is not found.first and p.position <= found.first.position
    )


def test_a_sliced_activation_is_no_resume_point(fused):
    reference, reference_run, run_of = fused
    candidate = MlxModel(reference)
    with pytest.raises(InputError, match="a part cannot be fed back"):
        locate_models(
            reference_run,
            reference,
            run_of(candidate),
            candidate,
            bound=1e-5,
            rules=RULES,
            resume="blocks.0.attention.qkv",
        )
