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


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, (seed, question, editor) in CASES.items():
        path = folder / f"{name}.npz"
        np.savez(path, image=make_image(seed, [question, editor]))
        print(name, hashlib.sha256(path.read_bytes()).hexdigest())


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent / "cases")
