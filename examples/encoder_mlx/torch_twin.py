"""The same decision model in PyTorch (training runs here, offline; parameter names match MLX).

RoPE is the non-traditional (half-split) rotation of ``mx.fast.rope``; GELU is the exact erf
form; LayerNorm eps 1e-5; the masks are model.py's (valid key within the window, or the query
itself).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from model import Config
from torch import nn


def rope(x: torch.Tensor, base: float) -> torch.Tensor:
    """Half-split rotary embedding over the last axis, positions along axis -2."""
    length, dims = x.shape[-2], x.shape[-1]
    half = dims // 2
    inv = base ** (-torch.arange(0, half, dtype=torch.float32) / half)
    ang = torch.arange(length, dtype=torch.float32)[:, None] * inv[None, :]
    cos, sin = torch.cos(ang), torch.sin(ang)
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


def masks(lengths: torch.Tensor, length: int, window: int) -> dict[str, torch.Tensor]:
    pos = torch.arange(length)
    valid = pos[None, :] < lengths[:, None]
    eye = (pos[:, None] == pos[None, :])[None, None]
    glob = valid[:, None, None, :] | eye
    near = ((pos[:, None] - pos[None, :]).abs() <= window)[None, None]
    return {"global": glob, "local": (valid[:, None, None, :] & near) | eye}


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def forward(self, x, mask):
        b, length, _ = x.shape
        h, hd = self.cfg.heads, self.cfg.head_dim
        qkv = self.qkv(x).reshape(b, length, 3, h, hd).permute(2, 0, 3, 1, 4)
        q, k, v = rope(qkv[0], self.cfg.rope_base), rope(qkv[1], self.cfg.rope_base), qkv[2]
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(hd))
        return self.out(o.transpose(1, 2).reshape(b, length, self.cfg.dim))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: Config, local: bool):
        super().__init__()
        self.local = local
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.w12 = nn.Linear(cfg.dim, 2 * cfg.enc_hidden)
        self.w3 = nn.Linear(cfg.enc_hidden, cfg.dim)

    def forward(self, x, m):
        x = x + self.attn(self.norm1(x), m["local" if self.local else "global"])
        a, g = self.w12(self.norm2(x)).chunk(2, dim=-1)
        return x + self.w3(F.gelu(a) * g)


class HeadLayer(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.fc1 = nn.Linear(cfg.dim, cfg.head_hidden)
        self.fc2 = nn.Linear(cfg.head_hidden, cfg.dim)

    def forward(self, x, mask):
        x = x + self.attn(self.norm1(x), mask)
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ActHead(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.layers = nn.ModuleList(
            [
                nn.Linear(cfg.dim + cfg.n_features, cfg.dim),
                nn.GELU(),
                nn.Linear(cfg.dim, cfg.n_actions),
            ]
        )

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x


class TorchDecisionModel(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList(
            [EncoderLayer(cfg, i not in cfg.global_layers) for i in range(cfg.enc_layers)]
        )
        self.head_layers = nn.ModuleList([HeadLayer(cfg) for _ in range(cfg.head_layers)])
        self.norm = nn.LayerNorm(cfg.dim)
        self.act_head = ActHead(cfg)
        self.scorer = nn.Linear(cfg.dim, 1)

    def forward(self, ids, lengths, markers, marker_mask, features):
        m = masks(lengths, ids.shape[1], self.cfg.window)
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x, m)
        for layer in self.head_layers:
            x = layer(x, m["global"])
        positions = torch.cat([torch.zeros_like(markers[:, :1]), markers], dim=1)
        rows = self.norm(torch.gather(x, 1, positions[:, :, None].expand(-1, -1, x.shape[-1])))
        action = self.act_head(torch.cat([rows[:, 0], features], dim=-1))
        scores = self.scorer(rows[:, 1:])[..., 0]
        return action, scores.masked_fill(~marker_mask, -1.0e4)


def state_for_mlx(model: TorchDecisionModel) -> dict:
    """float32 numpy arrays under MLX's parameter names (the names already match)."""
    return {k: v.detach().cpu().float().numpy() for k, v in model.state_dict().items()}


def load_torch_model(weights=None, config=None) -> TorchDecisionModel:
    from model import CONFIG, WEIGHTS, load_config
    from safetensors.torch import load_file

    model = TorchDecisionModel(load_config(config or CONFIG))
    model.load_state_dict(load_file(str(weights or WEIGHTS)), strict=True)
    return model.eval()
