"""Planted bugs, one per optimization: each is a realistic mistake its gate must catch.

Every mutation is a context manager that patches the example's code and restores it on exit, and
a runner factory (``<name>_case``) for calibration's ``model_mutations``. None is active
outside its ``with`` block.

(1) compile: the compiled closure outlives a checkpoint swap (traced on the previous weights);
    caught by compiled-exact.
(2) token batching: the original order is not restored after sorting by length;
    caught by token-batching-exact.
(3) quantization: 2-bit weights instead of 4 (quality collapses); caught by the q4 accuracy,
    agreement and drift claims.
(4) pruning: the pruned layer forgets the key padding mask; caught by pruned-exact.
(5) prefix cache: the question part is cached by its option count (the options themselves are
    left out of the key: the same number of ids, the wrong digits);
    caught by prefix-cache-exact.
(6) block-local: window off by one (``|q - k| < 64``: 128 keys instead of 129); caught by
    block-local-exact.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import data
import encoder
import gate_runners
import mlx.core as mx
import model


@contextlib.contextmanager
def _patched(obj: Any, name: str, value: Any) -> Iterator[None]:
    old = vars(obj)[name] if name in vars(obj) else getattr(obj, name)  # keeps staticmethods
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


@contextlib.contextmanager
def _fresh(name: str) -> Iterator[None]:
    """Runner ``name``'s Encoder is rebuilt inside the block and dropped after it."""
    saved = gate_runners._ENCODERS.pop(name, None)
    try:
        yield
    finally:
        gate_runners._ENCODERS.pop(name, None)
        if saved is not None:
            gate_runners._ENCODERS[name] = saved


# (1) compile -------------------------------------------------------------------------------


@contextlib.contextmanager
def stale_checkpoint() -> Iterator[None]:
    """The compiled closure of the previous checkpoint is kept when the weights are swapped:
    mx.compile captured the weights it traced with, so the "new" model answers with the old ones."""
    with _fresh("compiled"):
        previous, _ = model.load_model()
        layer = previous.head_layers[0].fc2
        layer.weight = layer.weight * 1.05  # the previous checkpoint differs in one layer
        mx.eval(previous.parameters())
        old = encoder.Encoder(encoder.Settings(compiled=True), previous)
        current, info = model.load_model()
        swapped = encoder.Encoder(encoder.Settings(compiled=True), current, quant_info=info)
        swapped._forward = old._forward  # the bug: the closure survives the swap
        gate_runners._ENCODERS["compiled"] = swapped
        yield


# (2) token batching ------------------------------------------------------------------------


@contextlib.contextmanager
def order_not_restored() -> Iterator[None]:
    real = encoder.Encoder.postprocess

    def postprocess(graphs, n):
        sorted_graphs, start = [], 0
        for idx, out in graphs:
            sorted_graphs.append((list(range(start, start + len(idx))), out))
            start += len(idx)
        return real(sorted_graphs, n)

    with _patched(encoder.Encoder, "postprocess", staticmethod(postprocess)):
        yield


# (3) quantization --------------------------------------------------------------------------


@contextlib.contextmanager
def two_bit_weights() -> Iterator[None]:
    real = model.quantize

    def quantize(m, bits, group_size=model.GROUP_SIZE, backend=None):
        return real(m, 2, group_size, backend)

    with _fresh("q4"), _patched(model, "quantize", quantize):
        yield


# (4) pruning -------------------------------------------------------------------------------


@contextlib.contextmanager
def pruned_without_key_mask() -> Iterator[None]:
    def selected(self, x, positions, lengths):
        q, k, v = self.attn.project(self.norm1(x))
        q = mx.take_along_axis(q, positions[:, None, :, None], axis=2)
        o = model._sdpa(q, k, v, None, self.cfg.head_dim)  # padding keys not masked
        rows = mx.take_along_axis(x, positions[:, :, None], axis=1)
        return self.mlp(rows + self.attn.merge(o))

    with _patched(model.HeadLayer, "selected", selected):
        yield


# (5) prefix cache --------------------------------------------------------------------------


@contextlib.contextmanager
def cache_key_without_options() -> Iterator[None]:
    real = data.PrefixCache._get

    def _get(self, kind, value, text):
        if kind == "question":
            value = len(value)  # keyed by the option count, not the options themselves
        return real(self, kind, value, text)

    with _fresh("prefix-cache"), _patched(data.PrefixCache, "_get", _get):
        yield


# (6) block-local attention -----------------------------------------------------------------


@contextlib.contextmanager
def window_off_by_one() -> Iterator[None]:
    real = model.block_local_attention

    def block_local(q, k, v, lengths, window, block):
        return real(q, k, v, lengths, window - 1, block)

    with _patched(model, "block_local_attention", block_local):
        yield


MUTATIONS = {
    "stale-checkpoint": ("compiled", stale_checkpoint),
    "order-not-restored": ("token-batching", order_not_restored),
    "two-bit-weights": ("q4", two_bit_weights),
    "pruned-without-key-mask": ("pruned", pruned_without_key_mask),
    "cache-key-without-options": ("prefix-cache", cache_key_without_options),
    "window-off-by-one": ("block-local", window_off_by_one),
}


def run_mutated(mutation: str, case: Any) -> dict[str, Any]:
    """Runner of ``mutation``'s optimization on one case with the bug planted."""
    runner, bug = MUTATIONS[mutation]
    with bug():
        return gate_runners.run_items(runner, gate_runners.items_of(case))


def _case_runner(mutation: str):
    """A factory like ``gate_runners.make``: calibration builds a mutated runner with the options
    of the runner it stands in for (its name and device) and calls the result on every case."""

    def factory(name: str = "", device: str = "cpu"):
        gate_runners.make(MUTATIONS[mutation][0], device)  # the device, and the model loaded

        def run(case: Any) -> dict[str, Any]:
            return run_mutated(mutation, case)

        run.__name__ = f"{mutation.replace('-', '_')}_case"
        return run

    return factory


stale_checkpoint_case = _case_runner("stale-checkpoint")
order_not_restored_case = _case_runner("order-not-restored")
two_bit_weights_case = _case_runner("two-bit-weights")
pruned_without_key_mask_case = _case_runner("pruned-without-key-mask")
cache_key_without_options_case = _case_runner("cache-key-without-options")
window_off_by_one_case = _case_runner("window-off-by-one")
