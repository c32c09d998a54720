"""The runners ``parity.toml`` and ``parity-heldout.toml`` gate against each other.

Each runner turns one case (a JSON list of items) into outputs:

* ``action`` (n, 10) float32 logits and ``action_prob`` (their softmax);
* ``choice`` (n, 5) float32 option scores (``CHOICE_FILL`` in unused slots) and ``choice_prob``;
* ``ids`` (n, L) int32 prepared token ids (``PAD_ID`` past each item), ``markers`` (n, 5) int32
  marker positions (-1 in unused slots): the exact-identity outputs of batching and preparation;
* reported figures (scalars, not gated as activity: paritygate counts the optimized paths' calls
  itself, see the specs' ``activity`` bands): ``reordered_items`` and ``padding_waste`` (token
  batching), ``cache_hits`` (prefix cache).

One Encoder per runner lives for the whole process (a prefix cache keeps its entries across
cases, as in a service); the baseline is the Encoder with every switch off. The specs reach the
runners through ``make(name, device)``: ``device`` is the MLX device every runner of a spec runs
on ("cpu" in the CPU specs, so that their claims are MLX-CPU claims on any machine).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "make",
    "items_of",
    "encoder_for",
    "run_items",
    "baseline",
    "compiled",
    "token_batching",
    "pruned",
    "prefix_cache",
    "block_local",
    "quantized_8",
    "quantized_4",
    "RUNNERS",
]

_ENCODERS: dict[str, Any] = {}


def _settings(name: str):
    from encoder import Settings
    from model import Switches

    return {
        "baseline": Settings(),
        "compiled": Settings(compiled=True),
        "token-batching": Settings(batching="tokens", token_budget=384, max_batch=4),
        "pruned": Settings(switches=Switches(prune_last=True)),
        "prefix-cache": Settings(prefix_cache=True),
        "block-local": Settings(switches=Switches(block_local=True)),
        "q8": Settings(switches=Switches(quant_bits=8)),
        "q4": Settings(switches=Switches(quant_bits=4)),
    }[name]


def encoder_for(name: str):
    """The process-wide Encoder of runner ``name`` (float32 runners share one model)."""
    if name not in _ENCODERS:
        from encoder import Encoder

        settings = _settings(name)
        if settings.switches.quant_bits is None and "baseline" in _ENCODERS:
            base = _ENCODERS["baseline"]
            _ENCODERS[name] = Encoder(settings, base.model, base.tokenizer, base.quant_info)
        else:
            _ENCODERS[name] = Encoder(settings)
    return _ENCODERS[name]


def items_of(case: Any):
    import data

    if hasattr(case, "load"):
        return data.read_items(case.load())
    return data.read_items(case)


def _softmax(x: np.ndarray) -> np.ndarray:
    z = x.astype(np.float64) - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return (e / e.sum(axis=-1, keepdims=True)).astype(np.float32)


def run_items(name: str, items) -> dict[str, Any]:
    """Outputs of runner ``name`` on a list of items."""
    from encoder import token_ids

    enc = encoder_for(name)
    out = enc(items)
    prepared, stats = enc.last_prepared, enc.last
    idents = token_ids(prepared)
    result: dict[str, Any] = {
        "action": out["action"],
        "action_prob": _softmax(out["action"]),
        "choice": out["choice"],
        "choice_prob": _softmax(out["choice"]),
        "ids": idents["ids"],
        "markers": idents["markers"],
    }
    s = enc.settings
    if s.batching == "tokens":
        order = [i for batch in enc.last_batches for i in batch]
        result["reordered_items"] = np.int64(sum(1 for k, i in enumerate(order) if k != i))
        result["padding_waste"] = np.float64(stats.padding_waste)
    if s.prefix_cache:
        result["cache_hits"] = np.int64(stats.cache_hits)
    return result


def _runner(name: str):
    def run(case: Any) -> dict[str, Any]:
        return run_items(name, items_of(case))

    run.__name__ = name.replace("-", "_")
    run.__doc__ = f"The '{name}' Encoder on one case."
    return run


baseline = _runner("baseline")
compiled = _runner("compiled")
token_batching = _runner("token-batching")
pruned = _runner("pruned")
prefix_cache = _runner("prefix-cache")
block_local = _runner("block-local")
quantized_8 = _runner("q8")
quantized_4 = _runner("q4")

REPORTED = ("reordered_items", "padding_waste", "cache_hits")  # figures, not model outputs

RUNNERS = {
    "baseline": baseline,
    "compiled": compiled,
    "token-batching": token_batching,
    "pruned": pruned,
    "prefix-cache": prefix_cache,
    "block-local": block_local,
    "q8": quantized_8,
    "q4": quantized_4,
}


def make(name: str, device: str = "cpu", reports: bool = True):
    """Factory of the specs: the per-case callable of runner ``name`` on MLX device ``device``;
    ``reports=False`` leaves out the figures a runner reports about itself (``reordered_items``,
    ``padding_waste``, ``cache_hits``), for specs whose claims compare recorded outputs."""
    import mlx.core as mx

    if name not in RUNNERS:
        raise ValueError(f"unknown runner {name!r}; expected one of {', '.join(RUNNERS)}")
    if device not in ("cpu", "gpu"):
        raise ValueError(f"device must be 'cpu' or 'gpu', got {device!r}")
    mx.set_default_device(mx.cpu if device == "cpu" else mx.gpu)
    encoder_for(name)  # load (and quantize) at activation, not inside the first timed call
    if reports:
        return RUNNERS[name]
    runner = RUNNERS[name]

    def outputs_only(case: Any) -> dict[str, Any]:
        out = runner(case)
        return {k: v for k, v in out.items() if k not in REPORTED}

    outputs_only.__name__ = runner.__name__
    return outputs_only
