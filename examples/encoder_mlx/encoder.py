"""The inference path (items -> action logits and choice scores) with its switches.

``Encoder`` owns the preparation (tokenizer, optional prefix cache), the batch schedule
(insertion-order chunks, or grouping by useful tokens under a token budget with the original
order restored), the forward call (eager, or ``mx.compile``-d with shape specialization) and the
model switches of ``model.Switches`` (pruning, block-local attention, quantization). Every switch
is off by default; the default ``Encoder`` is the baseline every optimization is gated against.

Stages (timed by the benchmarks within the same iterations): ``prepare`` (text -> ids),
``build`` (collate, arrays, graph), ``compute`` (``mx.eval``), ``postprocess`` (numpy, order).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import data
import mlx.core as mx
import numpy as np
from model import DecisionModel, Switches, load_model


@dataclass(frozen=True)
class Settings:
    compiled: bool = False
    batching: str = "insertion"  # "insertion" (chunks of max_batch) | "tokens" (token budget)
    max_batch: int = 16
    token_budget: int = 1024
    length_multiple: int = 1  # pad each batch's length up to a multiple (shape buckets)
    prefix_cache: bool = False
    switches: Switches = field(default_factory=Switches)

    def __post_init__(self) -> None:
        if self.batching not in ("insertion", "tokens"):
            raise ValueError(f"batching must be 'insertion' or 'tokens', got {self.batching!r}")
        if self.max_batch < 1 or self.token_budget < 1 or self.length_multiple < 1:
            raise ValueError("max_batch, token_budget and length_multiple must be positive")


@dataclass
class RunStats:
    items: int = 0
    batches: int = 0
    useful_tokens: int = 0
    padded_tokens: int = 0
    shapes: list = field(default_factory=list)
    cache_hits: int = 0

    @property
    def padding_waste(self) -> float:
        return 1.0 - self.useful_tokens / self.padded_tokens if self.padded_tokens else 0.0


class Encoder:
    def __init__(
        self,
        settings: Settings = Settings(),
        model: DecisionModel | None = None,
        tokenizer: Any = None,
        quant_info: dict | None = None,
    ):
        self.settings = settings
        if model is None:
            model, quant_info = load_model(quant_bits=settings.switches.quant_bits)
        self.model = model
        self.quant_info = quant_info or {"bits": None, "quantized": [], "skipped": []}
        self.tokenizer = tokenizer if tokenizer is not None else data.load_tokenizer()
        self.cache = (
            data.PrefixCache(self.tokenizer, data.tokenizer_identity())
            if settings.prefix_cache
            else None
        )
        sw = settings.switches

        def forward(ids, lengths, markers, marker_mask, features):
            return self.model(ids, lengths, markers, marker_mask, features, sw=sw)

        # A fresh compiled closure per Encoder (per model instance): never reused across weights.
        self._forward: Callable = mx.compile(forward) if settings.compiled else forward
        self.last = RunStats()

    # -- stages ----------------------------------------------------------------------------

    def prepare(self, items: Sequence[data.Item]) -> list[data.Prepared]:
        if self.cache is not None:
            return self.cache.prepare(items)
        return data.prepare_items(self.tokenizer, items)

    def schedule(self, prepared: Sequence[data.Prepared]) -> list[list[int]]:
        s = self.settings
        if s.batching == "tokens":
            return data.plan_by_tokens([len(p.ids) for p in prepared], s.token_budget, s.max_batch)
        return data.chunks_in_order(len(prepared), s.max_batch)

    def _length(self, longest: int) -> int:
        m = self.settings.length_multiple
        return -(-longest // m) * m

    def build(self, prepared: Sequence[data.Prepared], batches: list[list[int]]):
        """Collate every batch and build its (lazy) graph."""
        stats = RunStats(items=len(prepared), batches=len(batches))
        graphs = []
        for idx in batches:
            part = [prepared[i] for i in idx]
            b = data.collate(part, self._length(max(len(p.ids) for p in part)))
            stats.useful_tokens += b.useful_tokens
            stats.padded_tokens += b.padded_tokens
            stats.shapes.append(tuple(b.ids.shape))
            out = self._forward(
                mx.array(b.ids),
                mx.array(b.lengths),
                mx.array(b.markers),
                mx.array(b.marker_mask),
                mx.array(b.features),
            )
            graphs.append((idx, out))
        self.last = stats
        return graphs

    @staticmethod
    def compute(graphs) -> None:
        mx.eval([out for _, out in graphs])

    @staticmethod
    def postprocess(graphs, n: int) -> dict[str, np.ndarray]:
        """Per-item outputs in the original order."""
        action = np.zeros((n, 10), dtype=np.float32)
        choice = np.zeros((n, data.MAX_OPTIONS), dtype=np.float32)
        for idx, (a, c) in graphs:
            action[idx] = np.array(a)
            choice[idx] = np.array(c)
        return {"action": action, "choice": choice}

    def __call__(self, items: Sequence[data.Item], timer: Callable | None = None) -> dict:
        """Outputs of ``items`` in their order; ``timer(stage)`` (a context manager factory) times
        the stages when given."""
        stage = timer or _no_timer
        hits = self.cache.hits if self.cache is not None else 0
        with stage("prepare"):
            prepared = self.prepare(items)
        self.last_prepared = prepared
        with stage("build"):
            batches = self.schedule(prepared)
            graphs = self.build(prepared, batches)
        self.last_batches = batches
        with stage("compute"):
            self.compute(graphs)
        with stage("postprocess"):
            out = self.postprocess(graphs, len(items))
        if self.cache is not None:
            self.last.cache_hits = self.cache.hits - hits
        return out

    def with_settings(self, **changes) -> Encoder:
        """Another Encoder over the same model and tokenizer (quantization needs a new model)."""
        settings = replace(self.settings, **changes)
        if settings.switches.quant_bits != self.settings.switches.quant_bits:
            return Encoder(settings, tokenizer=self.tokenizer)
        return Encoder(settings, self.model, self.tokenizer, self.quant_info)


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def _no_timer(name: str) -> _Null:
    return _Null()


def token_ids(prepared: Sequence[data.Prepared]) -> dict[str, np.ndarray]:
    """Prepared ids, marker positions and features of items as padded arrays (for exact checks)."""
    b = data.collate(prepared)
    return {
        "ids": b.ids,
        "lengths": b.lengths,
        "markers": np.where(b.marker_mask, b.markers, -1).astype(np.int32),
        "features": b.features,
    }
