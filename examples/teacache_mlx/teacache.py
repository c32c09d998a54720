"""TeaCache for the digit DiT pipeline (after arXiv:2411.19108).

Each step, the cache looks at the *modulated input of the first block* (cheap: one LayerNorm and
the block's adaLN shift/scale), measures its relative L1 change against the previous step,
rescales it with a polynomial fitted on this model (``weights/teacache_rescale.json``, written by
``fit_rescale.py``) and accumulates it. While the accumulated estimate stays below
``rel_l1_thresh`` the body (blocks 1..N-1) is skipped and the last computed body residual
``body_out - body_in`` is added instead; otherwise the body runs, the residual is refreshed and the
accumulator restarts. The first and the last step always compute.

``rel_l1_thresh <= 0`` is the reference mode: a fast path that computes every step and creates no
cache tensors (no residual, no stored modulated input).

Two ways to put the cache into a pipeline, as diffusion integrations do:

* ``ProxyTeaCache`` replaces ``pipeline.transformer`` with a proxy that re-walks the forward pass
  stage by stage (embed, head, body-or-skip, tail). It needs an uncompiled pipeline: a compiled
  ``predict`` has traced the real transformer and would bypass the proxy.
* ``EagerTeaCache`` replaces ``pipeline.predict`` (compiled or not) by an eager closure that runs
  the same stages.

Both register one step callback on the pipeline (it closes a generation: records its skip count
and clears the per-generation state). ``uninstall`` removes everything ``install`` added and puts
back the very objects it replaced; nothing is left on the pipeline or the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
from model import DiT, Pipeline

__all__ = [
    "RESCALE",
    "DEFAULT_THRESHOLD",
    "TeaCache",
    "ProxyTeaCache",
    "EagerTeaCache",
    "install",
    "uninstall",
    "installed",
    "fingerprint",
]

RESCALE_FILE = Path(__file__).resolve().parent / "weights" / "teacache_rescale.json"


def _load_rescale() -> dict[str, Any]:
    # Absent only while fit_rescale.py is producing it for the first time.
    return json.loads(RESCALE_FILE.read_text()) if RESCALE_FILE.exists() else {}


RESCALE: dict[str, Any] = _load_rescale()
#: The threshold published in the README (its skip band and SSIM floor are claims).
DEFAULT_THRESHOLD: float = float(RESCALE.get("default_rel_l1_thresh", 0.0))

# Pipelines that carry a cache, without marking the pipeline itself.
_INSTALLED: dict[int, TeaCache] = {}


class TeaCache:
    """Cache state and the skip decision, shared by both integration variants."""

    variant = "base"

    def __init__(
        self,
        rel_l1_thresh: float = DEFAULT_THRESHOLD,
        coefficients: tuple[float, ...] | None = None,
    ):
        self.rel_l1_thresh = float(rel_l1_thresh)
        if coefficients is None and "coefficients" not in RESCALE:
            raise FileNotFoundError(f"{RESCALE_FILE} is missing: run fit_rescale.py")
        self.coefficients = tuple(coefficients or RESCALE["coefficients"])
        self._rescale = np.poly1d(self.coefficients)
        self.skips_per_run: list[int] = []  # one entry per finished generation
        self.decisions: list[list[bool]] = []  # per generation: True where the body was skipped
        self._pipeline: Pipeline | None = None
        self._replaced: tuple[str, Any] | None = None
        self._reset_run()

    # -- state of one generation ------------------------------------------------------------
    def _reset_run(self) -> None:
        self._step = 0
        self._accumulated = 0.0
        self._previous_modulated: mx.array | None = None
        self._residual: mx.array | None = None
        self._run_decisions: list[bool] = []

    @property
    def skipped(self) -> int:
        """Skipped body evaluations over all finished generations."""
        return sum(self.skips_per_run)

    @property
    def holds_tensors(self) -> bool:
        return self._previous_modulated is not None or self._residual is not None

    def _should_skip(self, modulated: mx.array, num_steps: int) -> bool:
        previous = self._previous_modulated
        self._previous_modulated = modulated
        if previous is None or self._step == 0 or self._step == num_steps - 1:
            self._accumulated = 0.0
            return False
        change = mx.mean(mx.abs(modulated - previous)) / mx.mean(mx.abs(previous))
        self._accumulated += float(self._rescale(change.item()))
        if self._accumulated < self.rel_l1_thresh and self._residual is not None:
            return True
        self._accumulated = 0.0
        return False

    def forward(self, model: DiT, x: mx.array, t: mx.array, y: mx.array) -> mx.array:
        """One denoising prediction, re-walking the model's stages with the skip in the middle."""
        h, c = model.embed(x, t, y)
        if self.rel_l1_thresh <= 0:  # reference mode: no cache tensors, nothing measured
            h, _ = model.head(h, c)
            skip = False
            h = model.body(h, c)
        else:
            h, modulated = model.head(h, c)
            skip = self._should_skip(modulated, self._pipeline.steps)
            if skip:
                h = h + self._residual
            else:
                body_in = h
                h = model.body(h, c)
                self._residual = h - body_in
        self._run_decisions.append(skip)
        self._step += 1
        return model.tail(h, c)

    def _on_step(self, step: int, t: float, x: mx.array) -> None:
        if step == self._pipeline.steps - 1:
            self.decisions.append(self._run_decisions)
            self.skips_per_run.append(sum(self._run_decisions))
            self._reset_run()

    # -- install / uninstall ----------------------------------------------------------------
    def _replace(self, pipeline: Pipeline) -> tuple[str, Any]:
        raise NotImplementedError

    def install(self, pipeline: Pipeline) -> TeaCache:
        if id(pipeline) in _INSTALLED:
            raise RuntimeError("a TeaCache is already installed on this pipeline")
        self._pipeline = pipeline
        self._replaced = self._replace(pipeline)
        pipeline.callbacks.append(self._on_step)
        _INSTALLED[id(pipeline)] = self
        self._reset_run()
        return self

    def uninstall(self) -> None:
        pipeline = self._pipeline
        if pipeline is None or _INSTALLED.get(id(pipeline)) is not self:
            raise RuntimeError("this TeaCache is not installed")
        name, original = self._replaced
        setattr(pipeline, name, original)
        pipeline.callbacks.remove(self._on_step)
        del _INSTALLED[id(pipeline)]
        self._pipeline = None
        self._replaced = None
        self._reset_run()


class _TransformerProxy:
    """Stands in for ``pipeline.transformer``; calls re-walk the forward pass through the cache."""

    def __init__(self, model: DiT, cache: TeaCache):
        self._model = model
        self._cache = cache

    def __call__(self, x: mx.array, t: mx.array, y: mx.array) -> mx.array:
        return self._cache.forward(self._model, x, t, y)

    def __getattr__(self, name: str) -> Any:  # config, blocks, ... of the wrapped model
        return getattr(self._model, name)


class ProxyTeaCache(TeaCache):
    """Replaces ``pipeline.transformer`` by a proxy that re-walks the forward pass."""

    variant = "proxy"

    def _replace(self, pipeline: Pipeline) -> tuple[str, Any]:
        if pipeline.compiled:
            raise RuntimeError(
                "ProxyTeaCache needs an uncompiled pipeline: its compiled predict has traced the "
                "real transformer and would bypass the proxy; use EagerTeaCache"
            )
        original = pipeline.transformer
        pipeline.transformer = _TransformerProxy(original, self)
        return "transformer", original


class EagerTeaCache(TeaCache):
    """Replaces ``pipeline.predict`` (compiled or not) by an eager closure."""

    variant = "eager"

    def _replace(self, pipeline: Pipeline) -> tuple[str, Any]:
        original = pipeline.predict
        model = pipeline.transformer

        def predict(x: mx.array, t: mx.array, y: mx.array) -> mx.array:
            return self.forward(model, x, t, y)

        pipeline.predict = predict
        return "predict", original


_VARIANTS: dict[str, type[TeaCache]] = {"proxy": ProxyTeaCache, "eager": EagerTeaCache}


def install(
    pipeline: Pipeline,
    variant: str = "proxy",
    rel_l1_thresh: float = DEFAULT_THRESHOLD,
    coefficients: tuple[float, ...] | None = None,
) -> TeaCache:
    """Put a TeaCache of ``variant`` ('proxy' or 'eager') into ``pipeline``; returns the cache."""
    try:
        cls = _VARIANTS[variant]
    except KeyError:
        raise ValueError(f"variant must be one of {sorted(_VARIANTS)}, got {variant!r}") from None
    return cls(rel_l1_thresh, coefficients).install(pipeline)


def uninstall(pipeline: Pipeline) -> TeaCache:
    """Remove the cache installed on ``pipeline``; returns it (its skip counters stay readable)."""
    cache = _INSTALLED.get(id(pipeline))
    if cache is None:
        raise RuntimeError("no TeaCache is installed on this pipeline")
    cache.uninstall()
    return cache


def installed(pipeline: Pipeline) -> TeaCache | None:
    return _INSTALLED.get(id(pipeline))


def fingerprint(pipeline: Pipeline) -> dict[str, Any]:
    """Identity of everything a cache may touch: pipeline attributes and callbacks, model
    attributes and blocks. Equal fingerprints before install and after uninstall mean the
    pipeline was restored exactly (same objects, nothing added)."""
    model = pipeline.transformer
    return {
        "pipeline": {k: id(v) for k, v in vars(pipeline).items() if k != "callbacks"},
        "callbacks": [id(cb) for cb in pipeline.callbacks],
        "model": sorted(vars(model)),
        "model_children": {k: id(v) for k, v in model.items()},
        "blocks": [id(b) for b in model.blocks],
        "model_class": type(model).__qualname__,
    }
