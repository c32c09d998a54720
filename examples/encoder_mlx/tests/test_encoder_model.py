"""The model: the PyTorch twin agrees, masks keep padding finite, quantization's contract."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def items(data_mod, sweep):
    return sweep["padding-mix"] + sweep["options-1-to-5"]


def test_torch_twin_computes_the_same_model(data_mod, model_mod, encoder_mod, items):
    """Training ran in PyTorch: the converted MLX model must be the same function (RoPE
    convention, fused QKV layout, gated MLP split, masks)."""
    import torch
    from torch_twin import load_torch_model

    tok = data_mod.load_tokenizer()
    batch = data_mod.collate(data_mod.prepare_items(tok, items))
    twin = load_torch_model()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # for this call only: later tests get torch's own thread count
    try:
        with torch.no_grad():
            ta, tc = twin(
                torch.from_numpy(batch.ids.astype(np.int64)),
                torch.from_numpy(batch.lengths.astype(np.int64)),
                torch.from_numpy(batch.markers.astype(np.int64)),
                torch.from_numpy(batch.marker_mask),
                torch.from_numpy(batch.features),
            )
    finally:
        torch.set_num_threads(threads)
    out = encoder_mod.Encoder(encoder_mod.Settings(max_batch=len(items)))(items)
    assert np.abs(out["action"] - ta.numpy()).max() < 1e-4
    assert np.abs(out["choice"] - tc.numpy()).max() < 1e-4
    assert (out["action"].argmax(1) == ta.numpy().argmax(1)).all()
    # a wrong RoPE convention (traditional interleaved pairs) is a different function
    import mlx.core as mx

    x = mx.random.normal((1, 2, 8, 32), key=mx.random.key(0))
    half = mx.fast.rope(x, 32, traditional=False, base=1e4, scale=1.0, offset=0)
    from torch_twin import rope

    assert np.allclose(np.array(half), rope(torch.from_numpy(np.array(x)), 1e4).numpy(), atol=1e-5)
    inter = mx.fast.rope(x, 32, traditional=True, base=1e4, scale=1.0, offset=0)
    assert not np.allclose(np.array(inter), np.array(half), atol=1e-3)


def test_padding_stays_finite_and_never_reaches_valid_positions(data_mod, model_mod):
    import mlx.core as mx

    m, _ = model_mod.load_model()
    lengths = mx.array([5, 200])  # the first row is mostly padding, past whole local windows
    mask = model_mod.dense_mask(lengths, 200, 64)
    assert bool(mx.all(mx.any(mask, axis=-1)))  # every query attends to something
    ids = mx.array(np.random.default_rng(0).integers(5, 60, (2, 200)).astype(np.int32))
    markers = mx.array([[1, 2, 0, 0, 0], [3, 150, 0, 0, 0]], dtype=mx.int32)
    mmask = mx.array([[True, True, False, False, False], [True, True, False, False, False]])
    feats = mx.zeros((2, 4))
    a, c = m(ids, lengths, markers, mmask, feats)
    assert np.isfinite(np.array(a)).all() and np.isfinite(np.array(c)).all()
    noisy = mx.concatenate([ids[:1, :5], mx.full((1, 195), 7, dtype=mx.int32)], axis=1)
    a2, _ = m(mx.concatenate([noisy, ids[1:]]), lengths, markers, mmask, feats)
    assert np.array_equal(np.array(a2)[0], np.array(a)[0])  # padding content is unobservable
    assert (np.array(c)[:, 2:] == model_mod.CHOICE_FILL).all()


def test_quantization_skips_the_d_plus_4_layer_and_keeps_the_activation_dtype(model_mod):
    import mlx.nn as nn

    m, info = model_mod.load_model(quant_bits=4)
    assert info["skipped"] == ["act_head.layers.0"]  # input width D + 4 = 68
    assert m.act_head.layers[0].weight.shape[-1] == m.cfg.dim + 4
    assert len(info["quantized"]) == 22
    assert all(isinstance(m.layers[i].attn.qkv, nn.QuantizedLinear) for i in range(3))
    assert not isinstance(m.act_head.layers[0], nn.QuantizedLinear)
    with pytest.raises(ValueError):  # a blanket call cannot quantize the D+4 layer
        nn.quantize(model_mod.load_model()[0], group_size=64, bits=4)


def test_on_cuda_single_group_layers_stay_float_and_the_report_says_why(model_mod):
    """The device condition is a parameter (``backend``): on MLX CUDA every Linear whose input
    width is one group of 64 stays float32 (its quantized_matmul is wrong there); the report
    lists each with its reason. On CPU the same layers are quantized."""
    import mlx.nn as nn

    m, info = model_mod.load_model(quant_bits=8, backend="cuda")
    assert info["backend"] == "cuda"
    widths = {p: mod.weight.shape[-1] for p, mod in m.named_modules() if isinstance(mod, nn.Linear)}
    assert info["skipped"] == sorted(p for p, w in widths.items() if w in (64, 68))
    # 3 encoder layers (qkv, out, w12), 2 head layers (qkv, out, fc1), act head's 2nd, scorer
    assert len(info["skipped"]) == 3 * 3 + 2 * 3 + 2 + 1
    assert sorted(info["quantized"]) == sorted(
        [f"layers.{i}.w3" for i in range(3)] + [f"head_layers.{i}.fc2" for i in range(2)]
    )
    assert "single group of 64" in info["reasons"]["layers.0.attn.qkv"]
    assert "repro_quantized_matmul.py" in info["reasons"]["layers.0.attn.qkv"]
    assert "does not divide" in info["reasons"]["act_head.layers.0"]
    assert not isinstance(m.layers[0].attn.qkv, nn.QuantizedLinear)  # the predicate is applied
    assert isinstance(m.layers[0].w3, nn.QuantizedLinear)
    cpu, cpu_info = model_mod.load_model(quant_bits=8, backend="cpu")
    assert len(cpu_info["quantized"]) == 22 and cpu_info["skipped"] == ["act_head.layers.0"]
    assert isinstance(cpu.layers[0].attn.qkv, nn.QuantizedLinear)
    assert model_mod.quant_backend() == "cpu"  # the tests run on MLX's CPU device


def test_flop_model_sizes_the_ci_gate(model_mod):
    cfg = model_mod.load_config()
    # seed 003's A = N (4 D^2 + 3 D I) + H * (4 D^2 + 2 D I_head); 2 FLOPs per weight per token
    a = 3 * (4 * 64 * 64 + 3 * 64 * 128) + 2 * (4 * 64 * 64 + 2 * 64 * 128)
    assert model_mod.flops_per_token(cfg) == 2 * a
