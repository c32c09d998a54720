"""A small class-conditional diffusion transformer (DiT) in MLX and its flow-matching sampler.

The forward pass is split the way TeaCache needs it:

* ``embed``  – patch embedding + position embedding, and the condition vector
  ``c = timestep_embedding(t) + class_embedding(y)``;
* ``head``   – the first transformer block; it also returns its *modulated input*
  (``LayerNorm(h) * (1 + scale) + shift``), the cheap signal TeaCache watches;
* ``body``   – the remaining blocks (what a cache may skip);
* ``tail``   – the adaLN final layer that decodes tokens back to a grey 16x16 image (velocity).

``Pipeline`` is the sampler (rectified flow, Euler, ``steps`` steps from t=1 to t=0). It calls
``pipeline.predict(x, t, y)`` once per step; ``predict`` calls ``pipeline.transformer``. With
``compiled=True`` the predict function is ``mx.compile``-d (as diffusion pipelines do on most
hardware), so a replaced ``transformer`` attribute would be bypassed by the cached trace: caches
for compiled pipelines must replace ``predict`` itself.

MLX has no forward hooks, so model-level mutations (a body block whose output is zeroed or
scaled) are implemented here as ``MutatedBlock`` (see ``mutate_block``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from common import WEIGHTS, Case, Config, decode, initial_noise, make_cases, timesteps

__all__ = [
    "Config",
    "DiT",
    "Block",
    "MutatedBlock",
    "Pipeline",
    "Case",
    "WEIGHTS",
    "load_model",
    "make_cases",
    "initial_noise",
    "timesteps",
    "decode",
    "mutate_block",
]


def timestep_features(t: mx.array, dim: int) -> mx.array:
    """Sinusoidal features of t in [0, 1] (scaled by 1000 as in DiT), shape (B, dim)."""
    half = dim // 2
    freqs = mx.exp(-math.log(10000.0) * mx.arange(half, dtype=mx.float32) / half)
    args = (t.astype(mx.float32) * 1000.0)[:, None] * freqs[None, :]
    return mx.concatenate([mx.cos(args), mx.sin(args)], axis=-1)


def modulate(x: mx.array, shift: mx.array, scale: mx.array) -> mx.array:
    return x * (1 + scale[:, None, :]) + shift[:, None, :]


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def __call__(self, x: mx.array) -> mx.array:
        b, n, d = x.shape
        hd = d // self.heads
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, hd).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        out = mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(hd))
        return self.proj(out.transpose(0, 2, 1, 3).reshape(b, n, d))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def __call__(self, x: mx.array) -> mx.array:
        return self.fc2(nn.gelu_approx(self.fc1(x)))


class Block(nn.Module):
    """DiT block with adaLN-Zero modulation from the condition vector."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6, affine=False)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6, affine=False)
        self.mlp = Mlp(dim, dim * mlp_ratio)
        self.ada = nn.Linear(dim, 6 * dim)

    def modulations(self, c: mx.array) -> list[mx.array]:
        return mx.split(self.ada(nn.silu(c)), 6, axis=-1)

    def modulated_input(self, h: mx.array, c: mx.array) -> mx.array:
        shift1, scale1, *_ = self.modulations(c)
        return modulate(self.norm1(h), shift1, scale1)

    def forward_with_modulated(self, h: mx.array, c: mx.array) -> tuple[mx.array, mx.array]:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.modulations(c)
        mod = modulate(self.norm1(h), shift1, scale1)
        h = h + gate1[:, None, :] * self.attn(mod)
        h = h + gate2[:, None, :] * self.mlp(modulate(self.norm2(h), shift2, scale2))
        return h, mod

    def __call__(self, h: mx.array, c: mx.array) -> mx.array:
        return self.forward_with_modulated(h, c)[0]


class MutatedBlock(nn.Module):
    """A block whose residual update is multiplied by ``factor`` (0 zeroes the block's output).

    A model-level bug worth catching: a dropped or mis-scaled block. It replaces one entry of
    ``DiT.blocks``; ``mutate_block`` returns a function that puts the original back.
    """

    def __init__(self, inner: Block, factor: float):
        super().__init__()
        self.inner = inner
        self.factor = factor

    def forward_with_modulated(self, h: mx.array, c: mx.array) -> tuple[mx.array, mx.array]:
        out, mod = self.inner.forward_with_modulated(h, c)
        return h + self.factor * (out - h), mod

    def __call__(self, h: mx.array, c: mx.array) -> mx.array:
        return self.forward_with_modulated(h, c)[0]


class FinalLayer(nn.Module):
    def __init__(self, dim: int, patch: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-6, affine=False)
        self.ada = nn.Linear(dim, 2 * dim)
        self.linear = nn.Linear(dim, patch * patch)

    def __call__(self, h: mx.array, c: mx.array) -> mx.array:
        shift, scale = mx.split(self.ada(nn.silu(c)), 2, axis=-1)
        return self.linear(modulate(self.norm(h), shift, scale))


class DiT(nn.Module):
    def __init__(self, config: Config | None = None):
        super().__init__()
        config = config or Config()
        self.config = config
        d = config.dim
        self.patch_embed = nn.Linear(config.patch * config.patch, d)
        self.pos_embed = mx.zeros((config.tokens, d))
        self.t_mlp1 = nn.Linear(d, d)
        self.t_mlp2 = nn.Linear(d, d)
        self.y_embed = nn.Embedding(config.num_classes, d)
        self.blocks = [Block(d, config.heads, config.mlp_ratio) for _ in range(config.depth)]
        self.final = FinalLayer(d, config.patch)

    # -- stages -------------------------------------------------------------------------------
    def patchify(self, x: mx.array) -> mx.array:
        b = x.shape[0]
        p, g = self.config.patch, self.config.image_size // self.config.patch
        return x.reshape(b, g, p, g, p).transpose(0, 1, 3, 2, 4).reshape(b, g * g, p * p)

    def unpatchify(self, tokens: mx.array) -> mx.array:
        b = tokens.shape[0]
        p, g = self.config.patch, self.config.image_size // self.config.patch
        return tokens.reshape(b, g, g, p, p).transpose(0, 1, 3, 2, 4).reshape(b, g * p, g * p)

    def embed(self, x: mx.array, t: mx.array, y: mx.array) -> tuple[mx.array, mx.array]:
        h = self.patch_embed(self.patchify(x)) + self.pos_embed[None]
        temb = self.t_mlp2(nn.silu(self.t_mlp1(timestep_features(t, self.config.dim))))
        return h, temb + self.y_embed(y)

    def head(self, h: mx.array, c: mx.array) -> tuple[mx.array, mx.array]:
        """First block; returns (hidden, modulated input of the first block)."""
        return self.blocks[0].forward_with_modulated(h, c)

    def body(self, h: mx.array, c: mx.array) -> mx.array:
        for block in self.blocks[1:]:
            h = block(h, c)
        return h

    def tail(self, h: mx.array, c: mx.array) -> mx.array:
        return self.unpatchify(self.final(h, c))

    def __call__(self, x: mx.array, t: mx.array, y: mx.array) -> mx.array:
        h, c = self.embed(x, t, y)
        h, _ = self.head(h, c)
        h = self.body(h, c)
        return self.tail(h, c)


def mutate_block(model: DiT, index: int, factor: float) -> Callable[[], None]:
    """Replace ``model.blocks[index]`` by a ``MutatedBlock``; returns the function undoing it."""
    original = model.blocks[index]
    model.blocks[index] = MutatedBlock(original, factor)

    def restore() -> None:
        model.blocks[index] = original

    return restore


def load_model(path: Path | str = WEIGHTS, config: Config | None = None) -> DiT:
    model = DiT(config)
    model.load_weights(str(path), strict=True)
    mx.eval(model.parameters())
    model.eval()
    return model


# -- sampler ---------------------------------------------------------------------------------


class Pipeline:
    """Rectified-flow Euler sampler around a DiT.

    ``callbacks`` are called as ``callback(step, t, x)`` after each step has been evaluated
    (progress, logging); their return value is ignored.
    """

    def __init__(self, transformer: DiT, steps: int = 25, compiled: bool = False):
        self.transformer = transformer
        self.steps = steps
        self.compiled = compiled
        self.callbacks: list[Callable[[int, float, mx.array], None]] = []
        self.predict = self._make_predict()

    def _make_predict(self) -> Callable[[mx.array, mx.array, mx.array], mx.array]:
        def predict(x: mx.array, t: mx.array, y: mx.array) -> mx.array:
            return self.transformer(x, t, y)

        return mx.compile(predict) if self.compiled else predict

    def generate(self, cases: list[Case]) -> mx.array:
        """Final samples for a batch of cases, shape (B, 16, 16), float32, evaluated."""
        size = self.transformer.config.image_size
        noise = np.stack([initial_noise(c, size) for c in cases])
        return self.sample(noise, np.array([c.label for c in cases], dtype=np.int32))

    def sample(self, noise: np.ndarray, labels: np.ndarray) -> mx.array:
        """Integrate from ``noise`` (B, 16, 16) float32 at t=1 to a sample at t=0."""
        x = mx.array(np.asarray(noise, dtype=np.float32))
        y = mx.array(np.asarray(labels, dtype=np.int32))
        ts = timesteps(self.steps)
        for i in range(self.steps):
            t = mx.full((x.shape[0],), float(ts[i]), dtype=mx.float32)
            v = self.predict(x, t, y)
            x = x + float(ts[i + 1] - ts[i]) * v
            mx.eval(x)  # one evaluation per step, as diffusion pipelines do
            for callback in self.callbacks:
                callback(i, float(ts[i]), x)
        return x
