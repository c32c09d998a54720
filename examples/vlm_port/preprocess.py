"""The reference's image preprocessing and prompt building for Qwen2.5-VL, written out.

transformers' own Qwen2.5-VL image processor needs torchvision; this module is the documented
algorithm of ``Qwen2VLImageProcessor`` (transformers' slow, PIL-based processor) in numpy, and
the reference runner feeds its ``pixel_values`` and ``image_grid_thw`` to the model directly.

1. **smart_resize**: the target height and width are multiples of ``factor = patch * merge``
   (28 px), closest to the input's, scaled so that their product lies within
   ``[min_pixels, max_pixels]`` keeping the aspect ratio (rounded down when shrinking, up when
   growing).
2. **resize**: PIL on the 8-bit RGB image, ``resample`` 3 (bicubic), as the model's
   ``preprocessor_config.json`` says.
3. **rescale and normalize**: float32 ``(x / 255 - mean) / std`` per channel (CLIP's mean/std).
4. **patchify**: the still image is repeated ``temporal_patch_size`` (2) times; the
   [2, 3, H, W] block is cut into 14 x 14 patches, ordered so that the 2 x 2 patches one merged
   token covers are consecutive (the merger then concatenates them), each patch flattened as
   (channel, frame, row, column): ``pixel_values`` [grid_h * grid_w, 3 * 2 * 14 * 14],
   ``image_grid_thw`` [[1, grid_h, grid_w]].
5. **image tokens**: ``<|image_pad|>`` of the chat template is repeated
   ``grid_h * grid_w / merge**2`` times.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

MODEL_DIR = Path(__file__).resolve().parent / "model"
IMAGE_PAD = "<|image_pad|>"


def load_config(model_dir: Path = MODEL_DIR) -> dict[str, Any]:
    return json.loads((model_dir / "preprocessor_config.json").read_text())


def smart_resize(
    height: int, width: int, factor: int, min_pixels: int, max_pixels: int
) -> tuple[int, int]:
    if max(height, width) / min(height, width) > 200:
        raise ValueError(f"aspect ratio above 200: {width} x {height}")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def process_image(
    image: Any, config: dict[str, Any] | None = None, resample: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(pixel_values float32 [patches, 3 * 2 * 14 * 14], image_grid_thw int64 [1, 3]) of one
    PIL image. ``resample`` overrides the configured PIL filter (a planted bug uses it)."""
    from PIL import Image

    cfg = config or load_config()
    ps, tps, ms = cfg["patch_size"], cfg["temporal_patch_size"], cfg["merge_size"]
    image = image.convert("RGB")
    h, w = smart_resize(image.height, image.width, ps * ms, cfg["min_pixels"], cfg["max_pixels"])
    filt = Image.Resampling(cfg["resample"] if resample is None else resample)
    arr = np.asarray(image.resize((w, h), resample=filt), dtype=np.float32)  # [H, W, 3]
    arr = arr * np.float32(cfg["rescale_factor"])
    mean = np.asarray(cfg["image_mean"], dtype=np.float32)
    std = np.asarray(cfg["image_std"], dtype=np.float32)
    arr = ((arr - mean) / std).transpose(2, 0, 1)  # [3, H, W]
    frames = np.repeat(arr[None], tps, axis=0)  # [T, 3, H, W]
    gh, gw = h // ps, w // ps
    patches = frames.reshape(1, tps, 3, gh // ms, ms, ps, gw // ms, ms, ps)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8)
    pixel_values = np.ascontiguousarray(patches.reshape(gh * gw, 3 * tps * ps * ps))
    return pixel_values.astype(np.float32), np.array([[1, gh, gw]], dtype=np.int64)


def image_token_count(grid_thw: np.ndarray, merge_size: int = 2) -> int:
    return int(np.prod(grid_thw[0])) // (merge_size * merge_size)


def expand_image_tokens(text: str, grid_thw: np.ndarray, merge_size: int = 2) -> str:
    """The chat template writes one ``<|image_pad|>``; the model reads one per merged patch."""
    if text.count(IMAGE_PAD) != 1:
        raise ValueError(f"expected one {IMAGE_PAD} in the prompt, got {text.count(IMAGE_PAD)}")
    return text.replace(IMAGE_PAD, IMAGE_PAD * image_token_count(grid_thw, merge_size))
