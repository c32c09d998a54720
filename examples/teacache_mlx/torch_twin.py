"""The same diffusion transformer in PyTorch, loading the same safetensors weights.

Parameter names match ``model.DiT`` one to one, so ``train.py`` trains this module and the MLX
model loads what it saved. As an inference twin it is a genuinely different numerical path
(PyTorch CPU kernels: its own GEMM, softmax and LayerNorm reductions) over the same math, which
gives the equivalence claim a real, non-zero noise distribution to calibrate against.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from common import WEIGHTS, Case, Config, initial_noise, timesteps
from torch import nn

__all__ = ["TorchDiT", "load_torch_model", "generate_torch", "sample_torch", "mutate_block"]


def timestep_features(t: torch.Tensor, dim: int) -> torch.Tensor:
    half = dim // 2
    freqs = torch.exp(
        -math.log(10000.0) * torch.arange(half, dtype=torch.float32, device=t.device) / half
    )
    args = (t.float() * 1000.0)[:, None] * freqs[None, :]
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


def modulate(x: torch.Tensor, shift: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    return x * (1 + scale[:, None, :]) + shift[:, None, :]


class Attention(nn.Module):
    def __init__(self, dim: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2])
        return self.proj(out.transpose(1, 2).reshape(b, n, d))


class Mlp(nn.Module):
    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, mlp_ratio: int):
        super().__init__()
        self.dim = dim
        self.attn = Attention(dim, heads)
        self.mlp = Mlp(dim, dim * mlp_ratio)
        self.ada = nn.Linear(dim, 6 * dim)

    def forward(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift1, scale1, gate1, shift2, scale2, gate2 = self.ada(F.silu(c)).chunk(6, dim=-1)
        norm = lambda z: F.layer_norm(z, (self.dim,), eps=1e-6)  # noqa: E731
        h = h + gate1[:, None, :] * self.attn(modulate(norm(h), shift1, scale1))
        return h + gate2[:, None, :] * self.mlp(modulate(norm(h), shift2, scale2))


class MutatedBlock(nn.Module):
    """The twin's counterpart of ``model.MutatedBlock``: the block's update times ``factor``."""

    def __init__(self, inner: Block, factor: float):
        super().__init__()
        self.inner = inner
        self.factor = factor

    def forward(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return h + self.factor * (self.inner(h, c) - h)


def mutate_block(model: TorchDiT, index: int, factor: float):
    """Replace ``model.blocks[index]`` by a MutatedBlock; returns the function undoing it."""
    original = model.blocks[index]
    model.blocks[index] = MutatedBlock(original, factor)

    def restore() -> None:
        model.blocks[index] = original

    return restore


class FinalLayer(nn.Module):
    def __init__(self, dim: int, patch: int):
        super().__init__()
        self.dim = dim
        self.ada = nn.Linear(dim, 2 * dim)
        self.linear = nn.Linear(dim, patch * patch)

    def forward(self, h: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        shift, scale = self.ada(F.silu(c)).chunk(2, dim=-1)
        return self.linear(modulate(F.layer_norm(h, (self.dim,), eps=1e-6), shift, scale))


class TorchDiT(nn.Module):
    def __init__(self, config: Config | None = None):
        super().__init__()
        config = config or Config()
        self.config = config
        d = config.dim
        self.patch_embed = nn.Linear(config.patch * config.patch, d)
        self.pos_embed = nn.Parameter(torch.zeros(config.tokens, d))
        self.t_mlp1 = nn.Linear(d, d)
        self.t_mlp2 = nn.Linear(d, d)
        self.y_embed = nn.Embedding(config.num_classes, d)
        self.blocks = nn.ModuleList(
            [Block(d, config.heads, config.mlp_ratio) for _ in range(config.depth)]
        )
        self.final = FinalLayer(d, config.patch)

    def init_for_training(self, seed: int = 0) -> None:
        """DiT initialisation: adaLN-Zero (every block starts as the identity)."""
        gen = torch.Generator().manual_seed(seed)
        for module in self.modules():
            if isinstance(module, nn.Linear):
                bound = math.sqrt(6.0 / (module.in_features + module.out_features))
                with torch.no_grad():
                    module.weight.uniform_(-bound, bound, generator=gen)
                    module.bias.zero_()
        with torch.no_grad():
            self.pos_embed.normal_(0.0, 0.02, generator=gen)
            self.y_embed.weight.normal_(0.0, 0.02, generator=gen)
            for block in self.blocks:
                block.ada.weight.zero_()
                block.ada.bias.zero_()
            self.final.ada.weight.zero_()
            self.final.ada.bias.zero_()
            self.final.linear.weight.zero_()
            self.final.linear.bias.zero_()

    def patchify(self, x: torch.Tensor) -> torch.Tensor:
        b = x.shape[0]
        p, g = self.config.patch, self.config.image_size // self.config.patch
        return x.reshape(b, g, p, g, p).permute(0, 1, 3, 2, 4).reshape(b, g * g, p * p)

    def unpatchify(self, tokens: torch.Tensor) -> torch.Tensor:
        b = tokens.shape[0]
        p, g = self.config.patch, self.config.image_size // self.config.patch
        return tokens.reshape(b, g, g, p, p).permute(0, 1, 3, 2, 4).reshape(b, g * p, g * p)

    def forward(self, x: torch.Tensor, t: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        h = self.patch_embed(self.patchify(x)) + self.pos_embed[None]
        temb = self.t_mlp2(F.silu(self.t_mlp1(timestep_features(t, self.config.dim))))
        c = temb + self.y_embed(y)
        for block in self.blocks:
            h = block(h, c)
        return self.unpatchify(self.final(h, c))


def load_torch_model(path: Path | str = WEIGHTS, config: Config | None = None) -> TorchDiT:
    from safetensors.torch import load_file

    model = TorchDiT(config)
    model.load_state_dict(load_file(str(path)), strict=True)
    return model.eval()


@torch.no_grad()
def generate_torch(model: TorchDiT, cases: list[Case], steps: int = 25) -> np.ndarray:
    """The MLX pipeline's sampler in PyTorch: same noise bytes, same timesteps, float32."""
    size = model.config.image_size
    noise = np.stack([initial_noise(c, size) for c in cases])
    return sample_torch(model, noise, np.array([c.label for c in cases]), steps)


@torch.no_grad()
def sample_torch(
    model: TorchDiT, noise: np.ndarray, labels: np.ndarray, steps: int = 25
) -> np.ndarray:
    x = torch.from_numpy(np.asarray(noise, dtype=np.float32).copy())
    y = torch.from_numpy(np.asarray(labels, dtype=np.int64))
    ts = timesteps(steps)
    for i in range(steps):
        t = torch.full((x.shape[0],), float(ts[i]), dtype=torch.float32)
        x = x + float(ts[i + 1] - ts[i]) * model(x, t, y)
    return x.numpy()
