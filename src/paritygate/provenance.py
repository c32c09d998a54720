"""Provenance captured automatically with every reference and gate run.

What produced a number matters as much as the number (seed 000: a golden file recorded the script
that made it). Captured without importing any framework that is not already imported: versions
come from :mod:`importlib.metadata`; thread counts of a framework are read only when it is loaded.
Everything here is cheap (no GPU initialisation); a fact that cannot be found is ``None``.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import hashlib
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

__all__ = [
    "FRAMEWORKS",
    "capture",
    "machine_facts",
    "package_versions",
    "git_state",
    "sha256_file",
    "check_package_pin",
    "check_file_pins",
    "utc_now",
]

# Distributions whose versions are recorded when installed (they move numbers).
FRAMEWORKS = (
    "numpy",
    "scipy",
    "ml_dtypes",
    "safetensors",
    "numba",
    "torch",
    "torchvision",
    "torchaudio",
    "mlx",
    "mlx-metal",
    "mlx-lm",
    "mlx-vlm",
    "mflux",
    "jax",
    "jaxlib",
    "onnx",
    "onnxruntime",
    "onnxruntime-gpu",
    "tensorflow",
    "coremltools",
    "transformers",
    "diffusers",
    "tokenizers",
    "pillow",
    "opencv-python",
    "opencv-python-headless",
    "scikit-image",
    "scikit-learn",
    "silero-vad",
)
_THREAD_VARS = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
    "XLA_FLAGS",
    "CUDA_VISIBLE_DEVICES",
)


def utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def package_versions(extra: Iterable[str] = ()) -> dict[str, str]:
    """Installed versions of the known frameworks and of ``extra`` (absent ones left out)."""
    versions = {}
    for name in (*FRAMEWORKS, *extra):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return dict(sorted(versions.items()))


def _cpu_model() -> str | None:
    system = platform.system()
    try:
        if system == "Linux":
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
        elif system == "Darwin":
            out = subprocess.run(
                ["sysctl", "-n", "machdep.cpu.brand_string"],
                capture_output=True,
                text=True,
                timeout=5,
            )
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    return platform.processor() or None


def _gpu_models(cpu: str | None) -> list[str]:
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            if torch.cuda.is_available():
                return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
        except Exception:  # a broken CUDA setup must not stop provenance capture
            pass
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                capture_output=True,
                text=True,
                timeout=10,
            )
            if out.returncode == 0:
                return [line.strip() for line in out.stdout.splitlines() if line.strip()]
        except (OSError, subprocess.SubprocessError):
            pass
    if platform.system() == "Darwin" and cpu and cpu.startswith("Apple"):
        return [cpu]  # the GPU of Apple silicon is part of the chip
    return []


_FACTS: dict[str, Any] | None = None


def machine_facts() -> dict[str, Any]:
    """system, machine, cpu and gpu model, hostname (computed once per process)."""
    global _FACTS
    if _FACTS is None:
        cpu = _cpu_model()
        _FACTS = {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "cpu": cpu,
            "cpu_count": os.cpu_count(),
            "gpu": _gpu_models(cpu),
            "hostname": platform.node(),
        }
    return dict(_FACTS)


def _threads() -> dict[str, Any]:
    threads: dict[str, Any] = {"cpu_count": os.cpu_count()}
    if hasattr(os, "sched_getaffinity"):
        threads["affinity"] = len(os.sched_getaffinity(0))
    for var in _THREAD_VARS:
        if var in os.environ:
            threads[var] = os.environ[var]
    torch = sys.modules.get("torch")
    if torch is not None:
        threads["torch"] = torch.get_num_threads()
        threads["torch_interop"] = torch.get_num_interop_threads()
    numba = sys.modules.get("numba")
    if numba is not None and hasattr(numba, "get_num_threads"):
        try:
            threads["numba"] = numba.get_num_threads()
        except Exception:  # a numba without a usable threading layer has no count to report
            pass
    if "numpy" in sys.modules:
        # The native thread pools loaded in this process (OpenBLAS / MKL under numpy, OpenMP),
        # when threadpoolctl is installed; reading them loads nothing new.
        try:
            from threadpoolctl import threadpool_info
        except ImportError:
            pass
        else:
            pools = [
                {
                    "api": p.get("internal_api"),
                    "library": os.path.basename(str(p.get("filepath", ""))),
                    "threads": p.get("num_threads"),
                }
                for p in threadpool_info()
            ]
            if pools:
                threads["native_pools"] = pools
    return threads


def git_state(folder: str | Path) -> dict[str, Any] | None:
    """Revision and dirty flag of the git work tree holding ``folder`` (None outside git)."""
    git = shutil.which("git")
    if git is None:
        return None
    try:
        rev = subprocess.run(
            [git, "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=10
        )
        if rev.returncode != 0:
            return None
        status = subprocess.run(
            [git, "status", "--porcelain", "--untracked-files=no"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=30,
        )
        top = subprocess.run(
            [git, "rev-parse", "--show-toplevel"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return {
        "revision": rev.stdout.strip(),
        "dirty": bool(status.stdout.strip()),
        "root": top.stdout.strip() or None,
    }


def capture(
    *,
    root: str | Path,
    runner: Any = None,
    spec_pins: dict[str, Any] | None = None,
    extra_packages: Iterable[str] = (),
) -> dict[str, Any]:
    """Everything that may move a number, for one runner of one spec (JSON-compatible)."""
    pins = dict(getattr(runner, "pins", {}) or {})
    packages = package_versions([*extra_packages, *pins.get("packages", {})])
    facts = machine_facts()
    data: dict[str, Any] = {
        "date": utc_now(),
        "python": {
            "version": platform.python_version(),
            "implementation": platform.python_implementation(),
        },
        "os": {
            "system": facts["system"],
            "release": facts["release"],
            "machine": facts["machine"],
            "platform": platform.platform(),
        },
        "cpu": facts["cpu"],
        "gpu": facts["gpu"],
        "packages": packages,
        "threads": _threads(),
        "git": git_state(root),
        "spec_pins": dict(spec_pins or {}),
    }
    if runner is not None:
        data["runner"] = {
            "name": runner.name,
            "kind": runner.kind,
            "entry": runner.callable or runner.factory or list(runner.command or ()),
            "seed": runner.seed,
            "device": pins.get("device", "cpu"),
            "dtype": pins.get("dtype"),
            "pins": pins,
        }
    return data


def _specifier_match(pinned: str, installed: str) -> bool:
    if pinned[:1] in "<>=!~":
        try:
            from packaging.specifiers import SpecifierSet
            from packaging.version import Version

            return Version(installed) in SpecifierSet(pinned)
        except ImportError:  # packaging is absent: only exact pins can be checked
            return pinned.lstrip("=") == installed
        except Exception:
            return False
    return fnmatch.fnmatchcase(installed, pinned)


def check_package_pin(
    package: str, pinned: str, installed: str | None = None
) -> tuple[bool, str | None]:
    """(holds, installed version). A pin is an exact version, a glob ('2.*') or a specifier ('>=2,<3')."""
    if installed is None:
        try:
            installed = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return False, None
    return _specifier_match(pinned, installed), installed


def check_file_pins(root: Path, pins: dict[str, str]) -> list[tuple[str, str, str | None]]:
    """(path, pinned sha256, observed sha256 or None when missing) for every file pin that fails."""
    failures = []
    for rel, pinned in pins.items():
        path = root / rel
        observed = sha256_file(path) if path.is_file() else None
        if observed != pinned:
            failures.append((rel, pinned, observed))
    return failures
