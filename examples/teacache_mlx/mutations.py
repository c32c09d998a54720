"""Planted bugs: the negative checks and the calibrations run them to prove the oracles bite.

None of these is used by the example's product code. Each is a plausible integration bug:

* ``LeakyEagerTeaCache`` – ``uninstall`` unregisters its step callback but leaves its predict
  closure behind: every later "vanilla" generation still runs through the cache.
* ``NeverSkipTeaCache`` – the decision never fires (say, the accumulator is reset every step):
  perfect quality, zero activity. Only the skip band catches it.
* ``DroppedResidualTeaCache`` – on a skipped step it forgets to add the cached residual (the body
  contributes nothing).
* ``StaleResidualTeaCache`` – the residual is cached once and never refreshed.

The ``*_case`` functions are runner callables (``module:function`` in calibrations).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx
import teacache
from model import DiT, Pipeline

__all__ = [
    "LeakyEagerTeaCache",
    "NeverSkipTeaCache",
    "DroppedResidualTeaCache",
    "StaleResidualTeaCache",
    "residual_dropped_case",
    "never_skip_case",
    "stale_residual_case",
    "mlx_block_scaled_case",
    "mlx_block_zeroed_case",
    "torch_block_scaled_case",
    "torch_block_zeroed_case",
]


class LeakyEagerTeaCache(teacache.EagerTeaCache):
    def uninstall(self) -> None:
        pipeline = self._pipeline
        pipeline.callbacks.remove(self._on_step)
        del teacache._INSTALLED[id(pipeline)]
        # Bug: pipeline.predict keeps the closure (a callback the sampler calls every step).
        # The closure keeps working on its own, so clear only the bookkeeping.
        self._replaced = None


class NeverSkipTeaCache(teacache.ProxyTeaCache):
    def _should_skip(self, modulated: mx.array, num_steps: int) -> bool:
        super()._should_skip(modulated, num_steps)
        self._accumulated = 0.0  # bug: the accumulator restarts every step
        return False


class DroppedResidualTeaCache(teacache.ProxyTeaCache):
    def forward(self, model: DiT, x: mx.array, t: mx.array, y: mx.array) -> mx.array:
        if self._residual is not None:
            self._residual = mx.zeros_like(self._residual)  # bug: the residual is lost
        return super().forward(model, x, t, y)


class StaleResidualTeaCache(teacache.ProxyTeaCache):
    def forward(self, model: DiT, x: mx.array, t: mx.array, y: mx.array) -> mx.array:
        stale = self._residual
        out = super().forward(model, x, t, y)
        if stale is not None:
            self._residual = stale  # bug: the first residual is never refreshed
        return out


def _run_cache(
    case: Any, cls: type[teacache.TeaCache], pipeline: Pipeline | None = None
) -> dict[str, Any]:
    import gate_runners

    pipeline = pipeline or gate_runners.shared_pipeline()
    cache = cls(teacache.DEFAULT_THRESHOLD).install(pipeline)
    try:
        sample = pipeline.sample(*gate_runners.case_inputs(case))
    finally:
        cache.uninstall()
    return gate_runners._outputs(sample)


def residual_dropped_case(case: Any) -> dict[str, Any]:
    """TeaCache that adds nothing on skipped steps (the cached residual is lost)."""
    return _run_cache(case, DroppedResidualTeaCache)


def stale_residual_case(case: Any) -> dict[str, Any]:
    """TeaCache whose cached residual is never refreshed after the first step."""
    return _run_cache(case, StaleResidualTeaCache)


class LyingTeaCache(NeverSkipTeaCache):
    """Never skips, yet its counter claims the skips a working cache would make."""

    def _on_step(self, step: int, t: float, x: mx.array) -> None:
        if step == self._pipeline.steps - 1:
            self._run_decisions = [False] + [True] * 7 + [False] * (len(self._run_decisions) - 8)
        super()._on_step(step, t, x)


def lying_cache_case(case: Any) -> tuple[dict[str, Any], int]:
    """The lying cache's outputs and the skip count it reports about itself."""
    import gate_runners

    pipeline = gate_runners.shared_pipeline()
    cache = LyingTeaCache(teacache.DEFAULT_THRESHOLD).install(pipeline)
    try:
        sample = pipeline.sample(*gate_runners.case_inputs(case))
    finally:
        cache.uninstall()
    return gate_runners._outputs(sample), cache.skips_per_run[-1]


def never_skip_case(case: Any) -> dict[str, Any]:
    """TeaCache whose decision never fires."""
    return _run_cache(case, NeverSkipTeaCache)


def _mlx_mutated(case: Any, index: int, factor: float) -> dict[str, Any]:
    import gate_runners
    from model import mutate_block

    restore = mutate_block(gate_runners.shared_model(), index, factor)
    try:
        return gate_runners.vanilla(case)
    finally:
        restore()


def mlx_block_scaled_case(case: Any) -> dict[str, Any]:
    """MLX model with body block 3's update scaled by 1.01."""
    return _mlx_mutated(case, 3, 1.01)


def mlx_block_zeroed_case(case: Any) -> dict[str, Any]:
    """MLX model with body block 3's update zeroed (a dropped block)."""
    return _mlx_mutated(case, 3, 0.0)


def torch_block_scaled_case(case: Any) -> dict[str, Any]:
    """PyTorch twin with body block 3's update scaled by 1.01."""
    import gate_runners

    return gate_runners.torch_twin_block_scaled(case, 3, 1.01)


def torch_block_zeroed_case(case: Any) -> dict[str, Any]:
    """PyTorch twin with body block 3's update zeroed (a dropped block)."""
    import gate_runners

    return gate_runners.torch_twin_block_scaled(case, 3, 0.0)
