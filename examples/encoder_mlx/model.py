"""The encoder decision model in MLX, and its optimization switches.

Architecture (``Config``): token embedding; ``enc_layers`` pre-norm encoder layers with RoPE
(``mx.fast.rope``), a fused QKV projection and ``mx.fast.scaled_dot_product_attention``; layer 0
attends globally, the others through a boolean local window ``|q - k| <= window``; the encoder
MLP is gated (one projection D -> 2I, ``gelu(a) * b``, I -> D). Then ``head_layers`` global
decision-head layers (plain MLP, 2D), a final LayerNorm, and two outputs:

* ``action``: logits over the 10 digits from [CLS], through an action head whose first layer
  takes ``D + 4`` inputs (the [CLS] state and 4 item features);
* ``choice``: one score per option marker (``[OPT]``), ``CHOICE_FILL`` in unused slots.

Masks: a valid query attends to valid keys (inside the window in local layers); a padded query
attends only to itself, so padding stays finite and never reaches a valid position.

Optimization switches (``Switches``), each on its own:

* ``prune_last``: exact pruning of the last head layer (K/V for all tokens; Q, output projection,
  residual, norm and MLP only at [CLS] and the marker slots);
* ``block_local``: local layers attend in query blocks over their own K/V slice
  (``block + 2 * window`` keys) with a small exact mask, instead of a dense L x L mask;
* ``quant_bits``: ``nn.quantize`` (group 64) of the Linear layers ``skip_reason`` accepts (the
  D+4 action layer, and one-group layers on MLX CUDA, stay float); explicit ``act_dtype``;
* compilation lives in ``Encoder`` (``compiled=True``), shape-specialized.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn

HERE = Path(__file__).resolve().parent
WEIGHTS = HERE / "weights" / "encoder_digits.safetensors"
CONFIG = HERE / "weights" / "config.json"

CHOICE_FILL = -1.0e4
GROUP_SIZE = 64


@dataclass(frozen=True)
class Config:
    vocab_size: int = 64
    dim: int = 64
    heads: int = 2
    enc_layers: int = 3
    global_layers: tuple[int, ...] = (0,)
    head_layers: int = 2
    enc_hidden: int = 128
    head_hidden: int = 128
    window: int = 64
    n_actions: int = 10
    n_features: int = 4
    max_options: int = 5
    rope_base: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.heads

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> Config:
        data = dict(data)
        data["global_layers"] = tuple(data.get("global_layers", (0,)))
        return cls(**data)


def load_config(path: Path = CONFIG) -> Config:
    return Config.from_json(json.loads(Path(path).read_text()))


@dataclass(frozen=True)
class Switches:
    prune_last: bool = False
    block_local: bool = False
    block_size: int = 64
    quant_bits: int | None = None
    act_dtype: str = "float32"


def flops_per_token(cfg: Config) -> int:
    """Dense matrix FLOPs per token (seed 003's A: weights used per token, times 2)."""
    d, i = cfg.dim, cfg.enc_hidden
    enc = cfg.enc_layers * (4 * d * d + 3 * d * i)
    head = cfg.head_layers * (4 * d * d + 2 * d * cfg.head_hidden)
    return 2 * (enc + head)


# ------------------------------------------------------------------------------------------
# Masks


def dense_mask(lengths: mx.array, length: int, window: int | None) -> mx.array:
    """(B, 1, L, L) bool: valid key (within the window) or the query itself."""
    pos = mx.arange(length)
    valid = pos[None, :] < lengths[:, None]  # (B, L)
    allowed = valid[:, None, None, :]
    if window is not None:
        near = mx.abs(pos[:, None] - pos[None, :]) <= window
        allowed = mx.logical_and(allowed, near[None, None])
    eye = (pos[:, None] == pos[None, :])[None, None]
    return mx.logical_or(allowed, eye)


# ------------------------------------------------------------------------------------------
# Layers


class Attention(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.qkv = nn.Linear(cfg.dim, 3 * cfg.dim)
        self.out = nn.Linear(cfg.dim, cfg.dim)

    def project(self, x: mx.array) -> tuple[mx.array, mx.array, mx.array]:
        b, length, _ = x.shape
        h, hd = self.cfg.heads, self.cfg.head_dim
        qkv = self.qkv(x).reshape(b, length, 3, h, hd).transpose(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        q = mx.fast.rope(q, hd, traditional=False, base=self.cfg.rope_base, scale=1.0, offset=0)
        k = mx.fast.rope(k, hd, traditional=False, base=self.cfg.rope_base, scale=1.0, offset=0)
        return q, k, v

    def merge(self, o: mx.array) -> mx.array:
        b, _, length, _ = o.shape
        return self.out(o.transpose(0, 2, 1, 3).reshape(b, length, self.cfg.dim))


def _sdpa(q, k, v, mask, hd):
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(hd), mask=mask)


def block_local_attention(q, k, v, lengths, window: int, block: int) -> mx.array:
    """Local attention by query blocks: block j's queries attend to keys
    ``[j*block - window, (j+1)*block + window)`` with an exact (block, block + 2*window) mask
    (``|q - k| <= window``, valid key, or the query itself). Same semantics as the dense mask."""
    b, h, length, hd = q.shape
    nb = -(-length // block)
    lp = nb * block
    span = block + 2 * window
    q = mx.pad(q, [(0, 0), (0, 0), (0, lp - length), (0, 0)])
    k = mx.pad(k, [(0, 0), (0, 0), (window, lp - length + window), (0, 0)])
    v = mx.pad(v, [(0, 0), (0, 0), (window, lp - length + window), (0, 0)])
    idx = (mx.arange(nb)[:, None] * block + mx.arange(span)[None, :]).reshape(-1)
    kb = mx.take(k, idx, axis=2).reshape(b, h, nb, span, hd)
    vb = mx.take(v, idx, axis=2).reshape(b, h, nb, span, hd)
    qb = q.reshape(b, h, nb, block, hd)
    # query a of block j sits at j*block + a, key s of block j at j*block - window + s
    a = mx.arange(block)[:, None]
    s = mx.arange(span)[None, :]
    rel = s - a  # key - query + window
    near = mx.logical_and(rel >= 0, rel <= 2 * window)  # (block, span)
    kpos = mx.arange(nb)[:, None] * block - window + mx.arange(span)[None, :]  # (nb, span)
    kvalid = mx.logical_and(kpos[None] >= 0, kpos[None] < lengths[:, None, None])  # (B, nb, span)
    allowed = mx.logical_and(near[None, None], kvalid[:, :, None, :])  # (B, nb, block, span)
    mask = mx.logical_or(allowed, (rel == window)[None, None])
    qb = qb.transpose(0, 2, 1, 3, 4).reshape(b * nb, h, block, hd)
    kb = kb.transpose(0, 2, 1, 3, 4).reshape(b * nb, h, span, hd)
    vb = vb.transpose(0, 2, 1, 3, 4).reshape(b * nb, h, span, hd)
    mask = mask.reshape(b * nb, 1, block, span)
    o = _sdpa(qb, kb, vb, mask, hd)
    o = o.reshape(b, nb, h, block, hd).transpose(0, 2, 1, 3, 4).reshape(b, h, lp, hd)
    return o[:, :, :length]


class EncoderLayer(nn.Module):
    def __init__(self, cfg: Config, local: bool):
        super().__init__()
        self.cfg = cfg
        self.local = local
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.w12 = nn.Linear(cfg.dim, 2 * cfg.enc_hidden)
        self.w3 = nn.Linear(cfg.enc_hidden, cfg.dim)

    def __call__(self, x, masks, lengths, sw: Switches):
        q, k, v = self.attn.project(self.norm1(x))
        if self.local and sw.block_local:
            o = block_local_attention(q, k, v, lengths, self.cfg.window, sw.block_size)
        else:
            o = _sdpa(q, k, v, masks["local" if self.local else "global"], self.cfg.head_dim)
        x = x + self.attn.merge(o)
        a, g = mx.split(self.w12(self.norm2(x)), 2, axis=-1)
        return x + self.w3(nn.gelu(a) * g)


class HeadLayer(nn.Module):
    """A global decision-head layer (plain MLP)."""

    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.norm1 = nn.LayerNorm(cfg.dim)
        self.attn = Attention(cfg)
        self.norm2 = nn.LayerNorm(cfg.dim)
        self.fc1 = nn.Linear(cfg.dim, cfg.head_hidden)
        self.fc2 = nn.Linear(cfg.head_hidden, cfg.dim)

    def mlp(self, x):
        return x + self.fc2(nn.gelu(self.fc1(self.norm2(x))))

    def __call__(self, x, mask):
        q, k, v = self.attn.project(self.norm1(x))
        x = x + self.attn.merge(_sdpa(q, k, v, mask, self.cfg.head_dim))
        return self.mlp(x)

    def selected(self, x, positions, lengths):
        """The layer's output at ``positions`` (B, R) only: K/V for every token, Q and the rest
        of the layer at the selected rows. Equal in exact arithmetic to ``__call__`` + gather."""
        b, length, d = x.shape
        q, k, v = self.attn.project(self.norm1(x))
        q = mx.take_along_axis(q, positions[:, None, :, None], axis=2)  # (B, H, R, hd)
        valid = mx.arange(length)[None, :] < lengths[:, None]
        o = _sdpa(q, k, v, valid[:, None, None, :], self.cfg.head_dim)
        rows = mx.take_along_axis(x, positions[:, :, None], axis=1)  # (B, R, D)
        return self.mlp(rows + self.attn.merge(o))


class DecisionModel(nn.Module):
    def __init__(self, cfg: Config):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = [EncoderLayer(cfg, i not in cfg.global_layers) for i in range(cfg.enc_layers)]
        self.head_layers = [HeadLayer(cfg) for _ in range(cfg.head_layers)]
        self.norm = nn.LayerNorm(cfg.dim)
        self.act_head = nn.Sequential(
            nn.Linear(cfg.dim + cfg.n_features, cfg.dim),
            nn.GELU(),
            nn.Linear(cfg.dim, cfg.n_actions),
        )
        self.scorer = nn.Linear(cfg.dim, 1)

    def __call__(self, ids, lengths, markers, marker_mask, features, sw: Switches = Switches()):
        cfg = self.cfg
        act = getattr(mx, sw.act_dtype)
        length = ids.shape[1]
        masks = {
            "global": dense_mask(lengths, length, None),
            "local": None if sw.block_local else dense_mask(lengths, length, cfg.window),
        }
        x = self.embed(ids).astype(act)
        for layer in self.layers:
            x = layer(x, masks, lengths, sw)
        positions = mx.concatenate([mx.zeros_like(markers[:, :1]), markers], axis=1)  # (B, R)
        for layer in self.head_layers[:-1]:
            x = layer(x, masks["global"])
        last = self.head_layers[-1]
        if sw.prune_last:
            rows = last.selected(x, positions, lengths)
        else:
            x = last(x, masks["global"])
            rows = mx.take_along_axis(x, positions[:, :, None], axis=1)
        rows = self.norm(rows)
        # The action head's input dtype is the explicit activation dtype, never a weight's dtype
        # (a quantized layer's weight is packed integer storage).
        head_in = mx.concatenate([rows[:, 0], features.astype(act)], axis=-1)
        action = self.act_head(head_in)
        scores = self.scorer(rows[:, 1:])[..., 0]
        choice = mx.where(marker_mask, scores, mx.array(CHOICE_FILL, dtype=scores.dtype))
        return action.astype(mx.float32), choice.astype(mx.float32)


# ------------------------------------------------------------------------------------------
# Loading and quantization


# MLX 0.32.4 CUDA's quantized_matmul is wrong for an input width of one group (64) with 8 or more
# rows (gpu/repro_quantized_matmul.py; README "Quantization on MLX CUDA"): such layers stay
# float32 on that backend.
SINGLE_GROUP_UNSAFE = ("cuda",)


def quant_backend() -> str:
    """The backend quantized layers will run on: "cpu", "cuda" or "metal" (MLX's default device)."""
    if mx.default_device() != mx.gpu:
        return "cpu"
    cuda = getattr(mx, "cuda", None)
    return "cuda" if cuda is not None and cuda.is_available() else "metal"


def skip_reason(
    module: nn.Module, group_size: int = GROUP_SIZE, backend: str = "cpu"
) -> str | None:
    """Why a Linear stays unquantized (None: it is quantized).

    * an input width that does not divide by the group size (the D+4 action layer);
    * on a backend of ``SINGLE_GROUP_UNSAFE`` (MLX CUDA), an input width of exactly one group:
      its quantized matmul is wrong there (gpu/repro_quantized_matmul.py)."""
    width = module.weight.shape[-1]
    if width % group_size:
        return f"input width {width} does not divide by the group size {group_size}"
    if width == group_size and backend in SINGLE_GROUP_UNSAFE:
        return (
            f"input width {width} is a single group of {group_size}: MLX {backend.upper()}'s "
            "quantized_matmul is wrong for one-group reductions (gpu/repro_quantized_matmul.py)"
        )
    return None


def quantizable(
    path: str, module: nn.Module, group_size: int = GROUP_SIZE, backend: str = "cpu"
) -> bool:
    """A Linear the backend quantizes correctly (``skip_reason`` is None)."""
    return isinstance(module, nn.Linear) and skip_reason(module, group_size, backend) is None


def quantize(
    model: DecisionModel, bits: int, group_size: int = GROUP_SIZE, backend: str | None = None
) -> dict:
    """Quantize in place for ``backend`` ("cpu", "cuda", "metal"; default: the one MLX's default
    device runs on); returns which Linear layers were quantized, which were skipped and why."""
    backend = backend or quant_backend()
    chosen, reasons = [], {}
    for path, module in model.named_modules():
        if isinstance(module, nn.Linear):
            reason = skip_reason(module, group_size, backend)
            if reason is None:
                chosen.append(path)
            else:
                reasons[path] = reason
    nn.quantize(
        model,
        group_size=group_size,
        bits=bits,
        class_predicate=lambda p, m: quantizable(p, m, group_size, backend),
    )
    return {
        "bits": bits,
        "group_size": group_size,
        "backend": backend,
        "quantized": sorted(chosen),
        "skipped": sorted(reasons),
        "reasons": dict(sorted(reasons.items())),
    }


def load_model(
    weights: Path = WEIGHTS,
    config: Path = CONFIG,
    quant_bits: int | None = None,
    backend: str | None = None,
) -> tuple[DecisionModel, dict]:
    """The float32 model from safetensors (strict), quantized afterwards when asked (for
    ``backend``, default the default device's; see ``quantize``)."""
    cfg = load_config(config)
    model = DecisionModel(cfg)
    model.load_weights(str(weights), strict=True)
    model.eval()
    info: dict = {"bits": None, "quantized": [], "skipped": []}
    if quant_bits is not None:
        info = quantize(model, quant_bits, backend=backend)
    mx.eval(model.parameters())
    return model, info


@dataclass
class Stats:
    items: int = 0
    batches: int = 0
    useful_tokens: int = 0
    padded_tokens: int = 0
    shapes: set = field(default_factory=set)

    @property
    def padding_waste(self) -> float:
        return 1.0 - self.useful_tokens / self.padded_tokens if self.padded_tokens else 0.0
