"""Write the canonical test images (seeded, deterministic) and print their sha256 pins.

Each case is a 240 x 320 grey-scale screenshot-like image with two bright panels ("question" on
the left, "editor" on the right) on a noisy background, stored as ``cases/<name>.npz`` with one
uint8 array ``image``.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np

HEIGHT, WIDTH = 240, 320

# name -> (seed, question box, editor box) as (x1, y1, x2, y2) in pixels, x2/y2 exclusive
CASES = {
    "leetcode": (11, (8, 20, 120, 180), (132, 20, 252, 180)),
    "wide_editor": (12, (12, 24, 100, 176), (112, 24, 300, 176)),
    "narrow": (13, (24, 40, 104, 160), (120, 40, 236, 192)),
}


def make_image(seed: int, boxes: list[tuple[int, int, int, int]]) -> np.ndarray:
    rng = np.random.default_rng(seed)
    image = np.full((HEIGHT, WIDTH), 0.1) + rng.normal(0.0, 0.03, (HEIGHT, WIDTH))
    for x1, y1, x2, y2 in boxes:
        image[y1:y2, x1:x2] = 0.8 + rng.normal(0.0, 0.03, (y2 - y1, x2 - x1))
    return np.clip(np.round(image * 255), 0, 255).astype(np.uint8)


# Boundary cases: each reaches a path of the port the canonical images do not (the mutation run
# of README.md found them as survivors). Rectangles as above; a third box is a small element.
EDGE_CASES = {
    # the editor runs to the right and bottom borders: a smoothing window one wider than the
    # kernel makes a mask one column and one row wider than the image there
    "edge_to_edge": (14, [(8, 24, 120, 176), (132, 24, 320, 240)]),
    # a small icon left of the question panel: only the two largest elements are panels
    "icon": (15, [(4, 100, 20, 116), (40, 20, 140, 180), (152, 20, 300, 180)]),
}

# on_threshold: both panels have soft edges (shadows) whose grey levels put a box edge within
# 3e-5 of the threshold after smoothing: the column left of the question panel is 1.6e-5 below
# it, the editor's first column 2.6e-5 above it. A constant copied with too few digits (the
# threshold, sigma, 1/255, the kernel's exponent, each 1 +- 1e-3) moves an edge by one model
# pixel (4 px). The grey levels were found by a search over the 16 image columns before each
# panel's left edge, rows 20-180.
ON_THRESHOLD_SEED = 16
ON_THRESHOLD_BOXES = [(40, 20, 140, 180), (152, 20, 300, 180)]
ON_THRESHOLD_EDGES = {
    28: [37, 45, 35, 31, 34, 44, 30, 45, 33, 27, 34, 36, 225, 220, 214, 215],
    140: [20, 20, 25, 20, 21, 26, 22, 20, 56, 50, 56, 59, 201, 204, 197, 186],
}


def on_threshold_image() -> np.ndarray:
    image = make_image(ON_THRESHOLD_SEED, ON_THRESHOLD_BOXES)
    for first, levels in ON_THRESHOLD_EDGES.items():
        for column, level in enumerate(levels, start=first):
            image[20:180, column] = level
    return image


def images() -> dict[str, np.ndarray]:
    """Every case's image by name: the canonical ones, then the boundary cases."""
    out = {name: make_image(seed, [q, e]) for name, (seed, q, e) in CASES.items()}
    out.update({name: make_image(seed, boxes) for name, (seed, boxes) in EDGE_CASES.items()})
    out["on_threshold"] = on_threshold_image()
    return out


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, image in images().items():
        path = folder / f"{name}.npz"
        np.savez(path, image=image)
        print(name, hashlib.sha256(path.read_bytes()).hexdigest())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "cases")
