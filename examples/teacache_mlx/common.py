"""Framework-free pieces shared by the MLX model, its PyTorch twin and the offline scripts:
the configuration, the canonical cases and their initial noise, the timestep grid, decoding."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "Config",
    "Case",
    "WEIGHTS",
    "SUMS",
    "make_cases",
    "initial_noise",
    "timesteps",
    "decode",
    "sha256_file",
    "update_sums",
    "read_sums",
]

HERE = Path(__file__).resolve().parent
WEIGHTS = HERE / "weights" / "dit_digits.safetensors"
SUMS = HERE / "weights" / "SHA256SUMS"


@dataclass(frozen=True)
class Config:
    image_size: int = 16
    patch: int = 4
    dim: int = 64
    depth: int = 6
    heads: int = 4
    mlp_ratio: int = 4
    num_classes: int = 10

    @property
    def tokens(self) -> int:
        return (self.image_size // self.patch) ** 2


@dataclass(frozen=True)
class Case:
    """One canonical input: the seed of the initial noise and the digit to draw."""

    seed: int
    label: int

    @property
    def name(self) -> str:
        return f"seed{self.seed}-digit{self.label}"


def make_cases(n: int, first_seed: int = 0) -> list[Case]:
    return [Case(seed=first_seed + i, label=(first_seed + i) % 10) for i in range(n)]


def initial_noise(case: Case, image_size: int = 16) -> np.ndarray:
    """Initial noise drawn with numpy so every runtime starts from the same bytes."""
    rng = np.random.default_rng(case.seed)
    return rng.standard_normal((image_size, image_size)).astype(np.float32)


def timesteps(steps: int) -> np.ndarray:
    """t from 1 (noise) to 0 (data), ``steps + 1`` points, float32."""
    return np.linspace(1.0, 0.0, steps + 1, dtype=np.float32)


def decode(x: np.ndarray) -> np.ndarray:
    """Sample in [-1, 1] -> grey image in [0, 1] (float64)."""
    return np.clip((np.asarray(x, dtype=np.float64) + 1.0) / 2.0, 0.0, 1.0)


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_sums(sums: Path = SUMS) -> dict[str, str]:
    """``{file name: sha256}`` from a ``sha256sum``-format file."""
    entries = {}
    for line in sums.read_text().splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            entries[name.lstrip("*")] = digest
    return entries


def update_sums(path: Path, sums: Path = SUMS) -> None:
    """Record ``path``'s sha256 in ``sums`` (sha256sum format, one line per file, sorted)."""
    entries = read_sums(sums) if sums.exists() else {}
    entries[Path(path).name] = sha256_file(path)
    sums.write_text("".join(f"{digest}  {name}\n" for name, digest in sorted(entries.items())))
