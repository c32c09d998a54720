"""What `make test-gpu` checks before it runs a test: every framework it tests, on the GPU.

A GPU run that passes because a framework is missing (its tests erroring at import, or running on
the CPU build) would report a success that tested nothing on the GPU. This refuses it: each of
torch (CUDA), triton, jax (a GPU device), MLX (its GPU device) and onnxruntime must import
and, where it has a GPU, use it. One line per framework is printed; any failure exits
non-zero naming them.

Usage: python tests/gpu_preflight.py
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any

FRAMEWORKS = ("torch", "triton", "jax", "mlx", "onnxruntime")
MODULES = {"mlx": "mlx.core"}  # the module imported for a framework, where not its own name


def _torch(m: Any) -> str | None:
    return None if m.cuda.is_available() else "imports, but torch.cuda.is_available() is False"


def _jax(m: Any) -> str | None:
    platform = m.default_backend()
    return None if platform == "gpu" else f"imports, but its default backend is {platform!r}"


def _mlx(core: Any) -> str | None:
    if not core.is_available(core.gpu):
        return "imports, but has no GPU device (install mlx-cuda-13 beside mlx)"
    return None


GPU_CHECKS: dict[str, Callable[[Any], str | None]] = {"torch": _torch, "jax": _jax, "mlx": _mlx}


def problems(importer: Callable[[str], Any] = importlib.import_module) -> dict[str, str]:
    """{framework: what is wrong} for every framework test-gpu needs that is missing or not on the
    GPU; empty when all are there."""
    out = {}
    for name in FRAMEWORKS:
        try:
            module = importer(MODULES.get(name, name))
        except Exception as exc:  # ImportError, or a broken install failing at import
            out[name] = f"cannot be imported ({type(exc).__name__}: {exc})"
            continue
        check = GPU_CHECKS.get(name)
        try:
            why = check(module) if check else None
        except Exception as exc:
            why = f"fails its GPU check ({type(exc).__name__}: {exc})"
        if why:
            out[name] = why
    return out


def main() -> int:
    found = problems()
    for name in FRAMEWORKS:
        print(f"test-gpu: {name}: {found.get(name, 'ok')}")
    if found:
        print(
            f"test-gpu: refusing to run: {', '.join(found)} missing or not on the GPU "
            "(a run without them would pass without testing them)",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
