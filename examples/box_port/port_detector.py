"""The port: an independent implementation of the panel detector, in plain numpy.

It is what a port to another runtime looks like: its own resize, its own separable Gaussian, its
own component search (column and row projections), its own coordinate mapping. Every adapter of
the port (the Python API below, the command line in port_cli.py) goes through ``detect_image``.
"""

from __future__ import annotations

import math

import numpy as np

MODEL_WIDTH, MODEL_HEIGHT = 80, 60
SIGMA = 1.0
THRESHOLD = 0.35


def preprocess(image: np.ndarray) -> tuple[np.ndarray, float, float]:
    """Model-size input in [0, 1] and the scale factors from model to input pixels."""
    height, width = image.shape
    scale_x = width / MODEL_WIDTH
    scale_y = height / MODEL_HEIGHT
    fy, fx = height // MODEL_HEIGHT, width // MODEL_WIDTH
    pixels = image.astype(np.float64) / 255.0
    blocks = pixels.reshape(MODEL_HEIGHT, fy, MODEL_WIDTH, fx)
    small = blocks.sum(axis=3).sum(axis=1) / (fx * fy)
    return small, scale_x, scale_y


def gaussian_kernel(sigma: float) -> np.ndarray:
    radius = int(4.0 * sigma + 0.5)  # paritygate: equivalent (int of 4.5 +- 5e-3 is 4)
    x = np.arange(-radius, radius + 1, dtype=np.float64)
    kernel = np.exp(-0.5 * (x / sigma) ** 2)
    return kernel / kernel.sum()


def smooth(image: np.ndarray, sigma: float) -> np.ndarray:
    kernel = gaussian_kernel(sigma)
    radius = len(kernel) // 2
    padded = np.pad(image, radius, mode="symmetric")
    rows = np.apply_along_axis(lambda r: np.convolve(r, kernel, mode="valid"), 1, padded)
    return np.apply_along_axis(lambda c: np.convolve(c, kernel, mode="valid"), 0, rows)


def _runs(flags: np.ndarray) -> list[tuple[int, int]]:
    edges = np.diff(np.concatenate([[0], flags.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)))


def detect_image(
    image: np.ndarray, *, threshold: float = THRESHOLD
) -> dict[str, dict[str, list[int]]]:
    small, scale_x, scale_y = preprocess(image)
    mask = smooth(small, SIGMA) > threshold
    panels = []
    for x1, x2 in _runs(mask.any(axis=0)):
        for y1, y2 in _runs(mask[:, x1:x2].any(axis=1)):
            panels.append(((x2 - x1) * (y2 - y1), x1, y1, x2, y2))
    panels = sorted(sorted(panels, reverse=True)[:2], key=lambda p: p[1])
    boxes = {}
    for name, (_, x1, y1, x2, y2) in zip(("question", "editor"), panels):
        box = [x1 * scale_x, y1 * scale_y, x2 * scale_x, y2 * scale_y]
        # the scales are whole numbers, so v is one, and v + 0.5 +- 5e-4 floors to v
        boxes[name] = [int(math.floor(v + 0.5)) for v in box]  # paritygate: equivalent
    return {"boxes": boxes}


def detect_file(path: str) -> dict[str, dict[str, list[int]]]:
    """The Python API adapter: a case file in, boxes out."""
    with np.load(path, allow_pickle=False) as data:
        return detect_image(data["image"])
