"""Fit TeaCache's rescale polynomial on this model and choose the default threshold (offline).

    python fit_rescale.py            # writes weights/teacache_rescale.json

1. Vanilla generations over ``--cases`` fit cases (seeds 1000.., disjoint from the test cases)
   record, per step i >= 1, the relative L1 change of the first block's modulated input
   ``x_i = mean|m_i - m_{i-1}| / mean|m_{i-1}|`` and of the model output (the velocity)
   ``y_i = mean|v_i - v_{i-1}| / mean|v_{i-1}|``.
2. ``numpy.polyfit(x, y, 4)`` gives the coefficients (highest power first, as ``np.poly1d``).
3. A threshold sweep runs the real cache on the fit cases and records skipped steps and the SSIM
   of the decoded image against the same case's vanilla image; the default threshold is the
   smallest swept one whose mean skip count reaches ``--target-skips``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import platform

import mlx.core as mx
import numpy as np
from common import update_sums
from model import Pipeline, decode, load_model, make_cases
from teacache import RESCALE_FILE


def rel_l1(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.mean(np.abs(a - b)) / np.mean(np.abs(b)))


def record_changes(pipeline: Pipeline, case) -> tuple[list[float], list[float]]:
    model = pipeline.transformer
    mods, outs = [], []

    def predict(x, t, y):
        h, c = model.embed(x, t, y)
        h, mod = model.head(h, c)
        out = model.tail(model.body(h, c), c)
        mx.eval(mod, out)
        mods.append(np.array(mod))
        outs.append(np.array(out))
        return out

    original = pipeline.predict
    pipeline.predict = predict
    try:
        pipeline.generate([case])
    finally:
        pipeline.predict = original
    xs = [rel_l1(mods[i], mods[i - 1]) for i in range(1, len(mods))]
    ys = [rel_l1(outs[i], outs[i - 1]) for i in range(1, len(outs))]
    return xs, ys


def main() -> None:
    import teacache
    from skimage.metrics import structural_similarity

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=16)
    parser.add_argument("--target-skips", type=float, default=6.0)
    parser.add_argument("--degree", type=int, default=4)
    parser.add_argument(
        "--thresholds",
        type=lambda text: [float(v) for v in text.split(",")],
        default=[
            0.01,
            0.015,
            0.02,
            0.021,
            0.022,
            0.023,
            0.024,
            0.025,
            0.03,
            0.035,
            0.04,
            0.05,
            0.1,
        ],
    )
    args = parser.parse_args()

    model = load_model()
    pipeline = Pipeline(model)
    cases = make_cases(args.cases, first_seed=1000)
    xs: list[float] = []
    ys: list[float] = []
    vanilla = {}
    for case in cases:
        x, y = record_changes(pipeline, case)
        xs += x
        ys += y
        vanilla[case] = decode(np.array(pipeline.generate([case]))[0])
    x_arr, y_arr = np.array(xs), np.array(ys)
    coefficients = np.polyfit(x_arr, y_arr, args.degree)
    fitted = np.poly1d(coefficients)(x_arr)
    r2 = 1.0 - float(np.sum((y_arr - fitted) ** 2) / np.sum((y_arr - y_arr.mean()) ** 2))
    print(f"fit over {len(xs)} step pairs: coefficients {coefficients.tolist()}  R^2 {r2:.4f}")
    print(f"input change range [{x_arr.min():.4f}, {x_arr.max():.4f}]")

    sweep = []
    for thresh in args.thresholds:
        skips, ssims = [], []
        for case in cases:
            cache = teacache.ProxyTeaCache(thresh, tuple(coefficients)).install(pipeline)
            try:
                img = decode(np.array(pipeline.generate([case]))[0])
            finally:
                cache.uninstall()
            skips.append(cache.skips_per_run[0])
            ssims.append(structural_similarity(img, vanilla[case], data_range=1.0, win_size=7))
        row = {
            "rel_l1_thresh": thresh,
            "skips_mean": float(np.mean(skips)),
            "skips_min": int(min(skips)),
            "skips_max": int(max(skips)),
            "ssim_min": float(min(ssims)),
            "ssim_mean": float(np.mean(ssims)),
        }
        sweep.append(row)
        print(row)
    chosen = next(
        (r["rel_l1_thresh"] for r in sweep if r["skips_mean"] >= args.target_skips),
        sweep[-1]["rel_l1_thresh"],
    )
    out = {
        "coefficients": [float(c) for c in coefficients],
        "degree": args.degree,
        "fit": {
            "x": "rel-L1 change of the first block's modulated input between steps",
            "y": "rel-L1 change of the model output (velocity) between steps",
            "cases": [c.name for c in cases],
            "points": len(xs),
            "r2": r2,
            "x_range": [float(x_arr.min()), float(x_arr.max())],
        },
        "default_rel_l1_thresh": chosen,
        "target_skips": args.target_skips,
        "steps": pipeline.steps,
        "sweep": sweep,
        "platform": f"MLX {mx.__version__} CPU, {platform.system()} {platform.machine()}",
        "date": datetime.date.today().isoformat(),
    }
    RESCALE_FILE.write_text(json.dumps(out, indent=2) + "\n")
    update_sums(RESCALE_FILE)
    print(f"default rel_l1_thresh {chosen}; wrote {RESCALE_FILE}")


if __name__ == "__main__":
    main()
