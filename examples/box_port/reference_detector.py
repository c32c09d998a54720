"""The reference panel detector (the "Python reference" of the port).

Preprocessing: area-average the image down to the model size (80 x 60), scaled to [0, 1].
Model: Gaussian smoothing (sigma 1) and a threshold, connected components (scipy.ndimage).
Postprocessing: the two largest components, left one "question", right one "editor", with their
boxes mapped back to input pixels by the resize's scale factors.
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

MODEL_WIDTH, MODEL_HEIGHT = 80, 60
SIGMA = 1.0
THRESHOLD = 0.35


def detect(path: str) -> dict[str, dict[str, np.ndarray]]:
    with np.load(path, allow_pickle=False) as data:
        image = data["image"].astype(np.float64) / 255.0
    height, width = image.shape
    fy, fx = height // MODEL_HEIGHT, width // MODEL_WIDTH
    small = image.reshape(MODEL_HEIGHT, fy, MODEL_WIDTH, fx).mean(axis=(1, 3))
    smooth = ndimage.gaussian_filter(small, SIGMA, mode="reflect", truncate=4.0)
    labels, count = ndimage.label(smooth > THRESHOLD)
    objects = ndimage.find_objects(labels)
    sizes = ndimage.sum_labels(np.ones_like(labels), labels, index=np.arange(1, count + 1))
    largest = sorted(np.argsort(sizes)[::-1][:2], key=lambda i: objects[i][1].start)
    scale_x, scale_y = width / MODEL_WIDTH, height / MODEL_HEIGHT
    boxes = {}
    for name, index in zip(("question", "editor"), largest):
        rows, cols = objects[index]
        box = [cols.start * scale_x, rows.start * scale_y, cols.stop * scale_x, rows.stop * scale_y]
        boxes[name] = np.round(np.array(box)).astype(np.int64)
    return {"boxes": boxes}
