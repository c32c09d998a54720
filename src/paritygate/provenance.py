"""Provenance captured automatically with every reference and gate run.

What produced a number matters as much as the number (a golden file records the script that
made it, not only the math). Captured without importing any framework that is not already imported:
versions
come from :mod:`importlib.metadata`; thread counts of a framework are read only when it is loaded.
Everything here is cheap (no GPU initialisation); a fact that cannot be found is ``None``.
"""

from __future__ import annotations

import datetime as _dt
import fnmatch
import importlib.metadata
import os
import platform
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .files import sha256_file

__all__ = [
    "FRAMEWORKS",
    "capture",
    "machine_facts",
    "cpu_facts",
    "describe_cpu",
    "package_versions",
    "git_state",
    "check_package_pin",
    "check_file_pins",
    "pinned_file_path",
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


def package_versions(extra: Iterable[str] = ()) -> dict[str, str]:
    """Installed versions of the known frameworks and of ``extra`` (absent ones left out)."""
    versions = {}
    for name in (*FRAMEWORKS, *extra):
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return dict(sorted(versions.items()))


# x86-64 SIMD levels as the frameworks' CPU dispatch names them (ATen's capability, oneDNN's
# and MLAS's kernels follow the same steps), highest first, with the flags each one needs.
_X86_LEVELS = (
    ("avx512", ("avx512f", "avx512bw", "avx512vl", "avx512dq")),
    ("avx2", ("avx2", "fma")),
    ("avx", ("avx",)),
    ("sse4.2", ("sse4_2",)),
)
_ARM_LEVELS = (("sve2", ("sve2",)), ("sve", ("sve",)), ("neon", ("asimd",)))
# Flags worth recording: those some framework's kernels dispatch on.
_FEATURES = (
    "sse4_2",
    "avx",
    "fma",
    "f16c",
    "avx2",
    "avx512f",
    "avx512bw",
    "avx512vl",
    "avx512dq",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "avx_vnni",
    "amx_tile",
    "amx_bf16",
    "amx_int8",
    "asimd",
    "asimdhp",
    "sve",
    "sve2",
    "bf16",
    "i8mm",
    "sme",
)
_VENDORS = {
    "GenuineIntel": "Intel",
    "AuthenticAMD": "AMD",
    "HygonGenuine": "Hygon",
    "CentaurHauls": "Centaur",
    "  Shanghai  ": "Zhaoxin",
}
# /proc/cpuinfo's "CPU implementer" on Arm.
_ARM_IMPLEMENTERS = {
    "0x41": "Arm",
    "0x42": "Broadcom",
    "0x43": "Cavium",
    "0x46": "Fujitsu",
    "0x48": "HiSilicon",
    "0x4e": "NVIDIA",
    "0x51": "Qualcomm",
    "0x61": "Apple",
    "0xc0": "Ampere",
}


def _level(features: set[str], levels: tuple[tuple[str, tuple[str, ...]], ...]) -> str | None:
    for name, needs in levels:
        if all(flag in features for flag in needs):
            return name
    return None


def _vendor_from_model(model: str | None) -> str | None:
    text = (model or "").lower()
    for needle, vendor in (("intel", "Intel"), ("amd", "AMD"), ("apple", "Apple")):
        if needle in text:
            return vendor
    return None


def _parse_cpuinfo(text: str) -> dict[str, Any]:
    """vendor, model, isa and dispatch-relevant features of the first processor in /proc/cpuinfo."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if fields:
                break  # the first processor is enough: the others are the same part
            continue
        key, _, value = line.partition(":")
        fields.setdefault(key.strip().lower(), value.strip())
    model = fields.get("model name") or fields.get("hardware") or fields.get("cpu model")
    flags = set((fields.get("flags") or fields.get("features") or "").split())
    vendor_id = fields.get("vendor_id")
    if vendor_id is not None:
        vendor = _VENDORS.get(vendor_id, vendor_id.strip() or None)
    else:
        implementer = fields.get("cpu implementer")
        vendor = _ARM_IMPLEMENTERS.get(implementer or "", implementer)
    if "flags" in fields:
        isa = _level(flags, _X86_LEVELS)
    elif "features" in fields:
        isa = _level(flags, _ARM_LEVELS)
    else:
        isa = None
    return {
        "vendor": vendor or _vendor_from_model(model),
        "model": model,
        "isa": isa,
        "features": [f for f in _FEATURES if f in flags],
    }


def _parse_sysctl(text: str) -> dict[str, Any]:
    """The same facts from ``sysctl`` on macOS (``name: value`` lines)."""
    values = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            values[key.strip()] = value.strip()
    model = values.get("machdep.cpu.brand_string") or None
    vendor_id = values.get("machdep.cpu.vendor")
    vendor = _VENDORS.get(vendor_id or "", vendor_id) or _vendor_from_model(model)
    on = {k for k, v in values.items() if v == "1"}
    if "hw.optional.arm64" in on or (model or "").startswith("Apple"):
        features = ["asimd"] + (["sme"] if "hw.optional.arm.FEAT_SME" in on else [])
        features += ["bf16"] if "hw.optional.arm.FEAT_BF16" in on else []
        features += ["i8mm"] if "hw.optional.arm.FEAT_I8MM" in on else []
        isa = "neon"
    else:
        names = {
            "hw.optional.avx2_0": "avx2",
            "hw.optional.avx1_0": "avx",
            "hw.optional.sse4_2": "sse4_2",
            "hw.optional.fma": "fma",
            "hw.optional.avx512f": "avx512f",
            "hw.optional.avx512bw": "avx512bw",
            "hw.optional.avx512vl": "avx512vl",
            "hw.optional.avx512dq": "avx512dq",
        }
        flags = {flag for key, flag in names.items() if key in on}
        features = [f for f in _FEATURES if f in flags]
        isa = _level(flags, _X86_LEVELS)
    return {"vendor": vendor, "model": model, "isa": isa, "features": features}


_SYSCTL_NAMES = (
    "machdep.cpu.brand_string",
    "machdep.cpu.vendor",
    "hw.optional.arm64",
    "hw.optional.arm.FEAT_SME",
    "hw.optional.arm.FEAT_BF16",
    "hw.optional.arm.FEAT_I8MM",
    "hw.optional.sse4_2",
    "hw.optional.avx1_0",
    "hw.optional.avx2_0",
    "hw.optional.fma",
    "hw.optional.avx512f",
    "hw.optional.avx512bw",
    "hw.optional.avx512vl",
    "hw.optional.avx512dq",
)


def _read_cpu() -> dict[str, Any]:
    system = platform.system()
    facts: dict[str, Any] | None = None
    try:
        if system == "Linux":
            facts = _parse_cpuinfo(Path("/proc/cpuinfo").read_text())
        elif system == "Darwin":
            # Unknown names (x86 flags on Apple silicon and back) make sysctl exit non-zero
            # but it still prints the others.
            out = subprocess.run(
                ["sysctl", *_SYSCTL_NAMES], capture_output=True, text=True, timeout=5
            )
            facts = _parse_sysctl(out.stdout)
    except (OSError, subprocess.SubprocessError):
        facts = None
    if not facts or not facts.get("model"):
        model = platform.processor() or None
        facts = {
            **(facts or {"isa": None, "features": []}),
            "model": model,
            "vendor": (facts or {}).get("vendor") or _vendor_from_model(model),
        }
    return facts


def _dispatch() -> dict[str, Any]:
    """The instruction-set level each loaded framework dispatches to, where it says so cheaply
    (no framework is imported for this), and the variables that force a lower one."""
    out: dict[str, Any] = {}
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        core = getattr(numpy, "_core", None) or getattr(numpy, "core", None)
        umath = getattr(core, "_multiarray_umath", None)
        features = getattr(umath, "__cpu_features__", None)
        if isinstance(features, dict):
            order = ("AVX512_SPR", "AVX512_ICL", "AVX512_SKX", "AVX512F", "AVX2", "AVX", "SSE42")
            order += ("SVE", "ASIMDHP", "ASIMD", "NEON")
            out["numpy"] = next((f for f in order if features.get(f)), None)
    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            out["torch"] = torch.backends.cpu.get_cpu_capability()
        except Exception:  # an old torch without the query has nothing cheap to say
            pass
    for var in DISPATCH_VARIABLES:
        if var in os.environ:
            out[var] = os.environ[var]
    return out


# Environment variables that force a framework's CPU kernels to another instruction set (and so
# may change rounding): recorded when set.
DISPATCH_VARIABLES = (
    "ATEN_CPU_CAPABILITY",
    "DNNL_MAX_CPU_ISA",
    "ONEDNN_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
    "MKL_CBWR",
    "NPY_DISABLE_CPU_FEATURES",
    "OPENBLAS_CORETYPE",
)

_CPU: dict[str, Any] | None = None


def cpu_facts() -> dict[str, Any]:
    """The CPU, as far as it decides rounding: ``vendor`` ('AMD', 'Intel', 'Apple' ...),
    ``model`` (the marketing name), ``isa`` (the highest SIMD level the frameworks' CPU kernels
    dispatch to: 'avx512', 'avx2', ... on x86-64; 'sve2', 'sve', 'neon' on Arm), the
    dispatch-relevant ``features`` and, under ``dispatch``, the level numpy and torch (when
    already imported) report and any variable that forces a lower one. From /proc/cpuinfo on
    Linux, sysctl on macOS, :func:`platform.processor` elsewhere; unknown facts are ``None``."""
    global _CPU
    if _CPU is None:
        _CPU = _read_cpu()
    return {**_CPU, "features": list(_CPU.get("features") or []), "dispatch": _dispatch()}


def describe_cpu(info: dict[str, Any] | None, model: str | None = None) -> str | None:
    """'AMD EPYC (AMD, avx2)' from cpu facts (or a bare model name); None when nothing is known."""
    info = info or {}
    name = info.get("model") or model
    if not name:
        return None
    extra = [x for x in (info.get("vendor"), info.get("isa")) if x and x not in name]
    return f"{name} ({', '.join(extra)})" if extra else name


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
    """system, machine, cpu model, vendor and SIMD level, gpu models, hostname (computed once
    per process)."""
    global _FACTS
    if _FACTS is None:
        cpu = cpu_facts()
        _FACTS = {
            "system": platform.system(),
            "release": platform.release(),
            "machine": platform.machine(),
            "cpu": cpu["model"],
            "cpu_vendor": cpu["vendor"],
            "cpu_isa": cpu["isa"],
            "cpu_count": os.cpu_count(),
            "gpu": _gpu_models(cpu["model"]),
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
        "cpu_info": cpu_facts(),
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
    """(holds, installed version). A pin is an exact version, a glob ('2.*') or a specifier
    ('>=2,<3')."""
    if installed is None:
        try:
            installed = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            return False, None
    return _specifier_match(pinned, installed), installed


def pinned_file_path(root: Path, rel: str) -> Path | None:
    """Where a file pin points: ``rel`` inside the spec's folder, or, for
    ``package:<import name>/<path>``, that path inside the installed package (None when the
    package is not installed)."""
    if not rel.startswith("package:"):
        return root / rel
    import importlib.util

    module, _, inner = rel[len("package:") :].partition("/")
    try:
        found = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if found is None:
        return None
    locations = list(found.submodule_search_locations or [])
    base = Path(locations[0]) if locations else Path(found.origin or "").parent
    return base / inner


def check_file_pins(root: Path, pins: dict[str, str]) -> list[tuple[str, str, str | None]]:
    """(path, pinned sha256, observed sha256 or None when missing) for every file pin that fails."""
    failures = []
    for rel, pinned in pins.items():
        path = pinned_file_path(root, rel)
        observed = sha256_file(path) if path is not None and path.is_file() else None
        if observed != pinned:
            failures.append((rel, pinned, observed))
    return failures
