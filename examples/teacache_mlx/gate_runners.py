"""The runners ``parity.toml`` gates against each other; each turns one case file into outputs.

Every runner returns ``sample`` (the final float32 sample) and ``image`` (decoded to [0, 1]).
The skip band of the cache claim is not reported by the cache: paritygate counts the calls of
``DiT.body`` in the vanilla run and in the cache's run itself (``parity.toml``).

All MLX runners share one model and two pipelines over it (uncompiled and compiled), so that a
cache that fails to restore what it replaced leaks into the next vanilla run, which is exactly
what the paired oracle's check (b) looks for. Each cache run installs the cache, generates and
uninstalls it again, the way an application toggles it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "case_inputs",
    "shared_model",
    "shared_pipeline",
    "vanilla",
    "vanilla_compiled",
    "proxy_noop",
    "eager_noop",
    "proxy_cached",
    "eager_cached",
    "proxy_cached_again",
    "torch_twin",
    "torch_twin_block_scaled",
]

_STATE: dict[str, Any] = {}


def case_inputs(case: Any) -> tuple[np.ndarray, np.ndarray]:
    """(noise (1, 16, 16) float32, label (1,) int32) of a spec case (or a path to its file)."""
    if hasattr(case, "load"):
        data = case.load()
    else:
        with np.load(case, allow_pickle=False) as npz:
            data = {k: npz[k] for k in npz.files}
    return data["noise"][None].astype(np.float32), np.array([int(data["label"])], dtype=np.int32)


def shared_model():
    if "model" not in _STATE:
        from model import load_model

        _STATE["model"] = load_model()
    return _STATE["model"]


def shared_pipeline(compiled: bool = False):
    key = "compiled" if compiled else "eager"
    if key not in _STATE:
        from model import Pipeline

        _STATE[key] = Pipeline(shared_model(), compiled=compiled)
    return _STATE[key]


def _outputs(sample: Any, skips: int = 0) -> dict[str, Any]:
    """``sample``, ``image`` and ``skips``: the skipped body evaluations the cache reports about
    this generation (``TeaCache.skips_per_run``; 0 without a cache). The no-op claims hold it to
    the vanilla run's 0: a cache at threshold 0 skips nothing and must say so. It is never the
    skip band's evidence: paritygate counts the body's calls for that."""
    from common import decode

    sample = np.array(sample)[0]
    return {"sample": sample, "image": decode(sample), "skips": np.array(skips, dtype=np.int64)}


def vanilla(case: Any) -> dict[str, Any]:
    """The reference: the uncompiled MLX pipeline without any cache."""
    return _outputs(shared_pipeline().sample(*case_inputs(case)))


# The model each in-process runner runs, for `paritygate locate` (docs/locate.md): a function
# returning it, so that the model is loaded on first use.
vanilla.model = shared_model


def vanilla_compiled(case: Any) -> dict[str, Any]:
    """The MLX pipeline with ``mx.compile``-d predict."""
    return _outputs(shared_pipeline(compiled=True).sample(*case_inputs(case)))


def _cached(case: Any, variant: str, compiled: bool, threshold: float | None) -> dict[str, Any]:
    import teacache

    pipeline = shared_pipeline(compiled)
    thresh = teacache.DEFAULT_THRESHOLD if threshold is None else threshold
    cache = teacache.install(pipeline, variant, rel_l1_thresh=thresh)
    try:
        sample = pipeline.sample(*case_inputs(case))
    finally:
        teacache.uninstall(pipeline)
    return _outputs(sample, cache.skips_per_run[-1])


def proxy_noop(case: Any) -> dict[str, Any]:
    """ProxyTeaCache at rel_l1_thresh = 0 on the uncompiled pipeline."""
    return _cached(case, "proxy", False, 0.0)


def eager_noop(case: Any) -> dict[str, Any]:
    """EagerTeaCache at rel_l1_thresh = 0 replacing the compiled pipeline's predict."""
    return _cached(case, "eager", True, 0.0)


def proxy_cached(case: Any) -> dict[str, Any]:
    """ProxyTeaCache at the default threshold."""
    return _cached(case, "proxy", False, None)


def eager_cached(case: Any) -> dict[str, Any]:
    """EagerTeaCache at the default threshold on the compiled pipeline."""
    return _cached(case, "eager", True, None)


def proxy_cached_again():
    """Runner factory: a ProxyTeaCache at the default threshold installed once on a pipeline of
    its own, which has made one generation (noise of seed 10 000, digit 0) before the first case,
    so that every case is a later generation of the same installed cache: the state transition a
    fresh install per case never reaches (the cache must reset its run when a generation ends).
    The private pipeline keeps the installed cache away from every other runner."""
    import teacache
    from model import Pipeline

    pipeline = Pipeline(shared_model())
    cache = teacache.install(pipeline, "proxy")
    warm_up = np.random.default_rng(10_000).standard_normal((1, 16, 16)).astype(np.float32)
    pipeline.sample(warm_up, np.array([0], dtype=np.int32))

    def run(case: Any) -> dict[str, Any]:
        sample = pipeline.sample(*case_inputs(case))
        return _outputs(sample, cache.skips_per_run[-1])

    return run


def _torch_model():
    if "torch" not in _STATE:
        import torch
        from torch_twin import load_torch_model

        torch.set_num_threads(1)
        _STATE["torch"] = load_torch_model()
    return _STATE["torch"]


def torch_twin(case: Any) -> dict[str, Any]:
    """The PyTorch twin (same weights, PyTorch CPU kernels)."""
    from torch_twin import sample_torch

    return _outputs(sample_torch(_torch_model(), *case_inputs(case)))


torch_twin.model = _torch_model


def torch_twin_block_scaled(case: Any, index: int = 3, factor: float = 1.01) -> dict[str, Any]:
    """The twin with body block ``index``'s update scaled by ``factor`` (a model-level bug)."""
    from torch_twin import mutate_block, sample_torch

    model = _torch_model()
    restore = mutate_block(model, index, factor)
    try:
        return _outputs(sample_torch(model, *case_inputs(case)))
    finally:
        restore()
