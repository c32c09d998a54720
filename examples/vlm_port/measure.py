"""Measure transformers (reference) against mlx-vlm (candidate) on every case; print a table.

    python measure.py [--bug NAME] [CASE ...]

Not part of the gate: the numbers README.md reports under "Measured agreement" came from it.
Per case: image size -> model grid, image tokens, prompt ids equal, pixel values and vision
embeddings max-abs, teacher-forced logits max-abs, KL max and top-1 agreement
(``paritygate.sequence.compare_teacher_forced``), the smallest top-1/top-2 margin of the
reference's teacher-forced logits, greedy runs equal, generated answers equal, the reference's
answer giving the case's own boxes, the largest edge difference in pixels, and each runner's
seconds.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import runners

from paritygate.sequence import compare_teacher_forced


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="*")
    parser.add_argument("--bug", choices=runners.BUGS)
    args = parser.parse_args()
    names = args.cases or sorted(
        p.stem for p in runners.CASES_DIR.glob("*.json") if p.stem != "SHA256SUMS"
    )
    ref = runners.make("transformers")
    cand = runners.make("mlx-vlm", bug=args.bug)
    rows = []
    for name in names:
        case = runners.load_case(name)
        t0 = time.perf_counter()
        r = ref(case)
        t1 = time.perf_counter()
        c = cand(case)
        t2 = time.perf_counter()
        row = dict(
            case=name,
            size=case["size"],
            grid=r["image_grid_thw"][0].tolist(),
            image_tokens=int(np.prod(r["image_grid_thw"][0])) // 4,
            ids_equal=bool(np.array_equal(r["prompt_ids"], c["prompt_ids"])),
            grid_equal=bool(np.array_equal(r["image_grid_thw"], c["image_grid_thw"])),
            ref_seconds=round(t1 - t0, 2),
            cand_seconds=round(t2 - t1, 2),
        )
        if r["pixel_values"].shape == c["pixel_values"].shape:
            row["pixel_max_abs"] = float(np.abs(r["pixel_values"] - c["pixel_values"]).max())
            row["vision_max_abs"] = float(np.abs(r["vision_embeds"] - c["vision_embeds"]).max())
        if r["logits"].shape == c["logits"].shape:
            tf = compare_teacher_forced(r["logits"], c["logits"], max_abs=1e9, max_kl=1e9)
            top = np.sort(r["logits"], axis=1)
            row.update(
                logits_max_abs=float(np.abs(r["logits"] - c["logits"]).max()),
                kl_max=tf.kl_max,
                top1=tf.top1_agreement,
                min_margin=float((top[:, -1] - top[:, -2]).min()),
            )
        row["greedy_equal"] = bool(np.array_equal(r["greedy_ids"], c["greedy_ids"]))
        row["answer_equal"] = bool(np.array_equal(r["answer_ids"], c["answer_ids"]))
        expected = runners.boxes(case["continuation"], case["size"], r["image_grid_thw"])
        row["answer_is_the_case_s"] = len(expected) == 2 and all(
            k in r and np.array_equal(v, r[k]) for k, v in expected.items()
        )
        keys = sorted(k for k in r if k.startswith("boxes/"))
        row["boxes"] = len(keys)
        row["edge_max_px"] = max(
            (float(np.abs(r[k] - c[k]).max()) for k in keys if k in c), default=None
        )
        rows.append(row)
        print(json.dumps(row))
    for key in ("pixel_max_abs", "vision_max_abs", "logits_max_abs", "kl_max"):
        values = [row[key] for row in rows if key in row]
        if values:
            print(f"{key}: max {max(values):.3g}")
    print("top1 worst:", min((row.get("top1", 0.0) for row in rows), default=None))
    print("prompt ids equal:", sum(row["ids_equal"] for row in rows), "of", len(rows))
    print("greedy equal:", sum(row["greedy_equal"] for row in rows), "of", len(rows))
    print("answers equal:", sum(row["answer_equal"] for row in rows), "of", len(rows))
    print("reference answers the case's boxes:", sum(row["answer_is_the_case_s"] for row in rows))
    print("edge max px:", max((row["edge_max_px"] or 0.0) for row in rows))


if __name__ == "__main__":
    main()
