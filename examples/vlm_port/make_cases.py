"""Write the example's canonical images and cases (committed; pinned by ``cases/SHA256SUMS.json``).

    python make_cases.py

Each image is a UI-like screenshot drawn with PIL: a title bar, two panels ("question" on the
left, "editor" on the right, or stacked on portrait images) with lines of "text" (short dark
bars), a button. Sizes and aspect ratios vary (150 px to 3078 px wide, 1:3 to 10:3; 16 cases,
the fewest ``paritygate calibrate`` accepts), so that the
resize to the model's 28 px grid, the grid itself and the number of image tokens differ between
cases (``preprocess.smart_resize``: from 12 to 80 image tokens).

A case: ``{"image": "NAME.png", "image_sha256": ... (the runners refuse another image),
"prompt": ..., "panels": {label: [x1, y1, x2, y2]} (pixels of
the original image), "continuation": the grounding answer in Qwen2.5-VL's format (JSON boxes in
pixels of the resized image), "max_new_tokens": 8}``. The continuation is what the teacher-forced
logits score; the model is untrained, so it is a fixed answer, not the model's.
"""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

HERE = Path(__file__).resolve().parent
CASES_DIR = HERE / "cases"
PROMPT = 'Detect the two UI panels "question" and "editor". Answer with JSON boxes.'

# (name, width, height)
SIZES = [
    ("leetcode", 3078, 2114),
    ("laptop", 1280, 800),
    ("fullhd", 1920, 1080),
    ("square", 1024, 1024),
    ("portrait", 720, 1280),
    ("phone", 390, 844),
    ("small", 300, 200),
    ("tiny", 150, 150),
    ("banner", 1000, 300),
    ("column", 200, 600),
    ("odd", 997, 613),
    ("wide", 2560, 1080),
    ("tablet", 834, 1194),
    ("thumb", 224, 168),
    ("landscape-phone", 844, 390),
    ("page", 1240, 1754),
]


def draw(name: str, width: int, height: int) -> tuple[object, dict[str, list[int]]]:
    from PIL import Image, ImageDraw

    rng = random.Random(f"vlm-port-{name}")
    img = Image.new("RGB", (width, height), (246, 247, 249))
    d = ImageDraw.Draw(img)
    bar = max(8, height // 14)
    d.rectangle([0, 0, width - 1, bar], fill=(40, 44, 52))
    margin = max(2, min(width, height) // 40)
    top = bar + margin
    portrait = height > width * 1.2
    if portrait:
        split = rng.randint(int(height * 0.4), int(height * 0.6))
        question = [margin, top, width - margin, split - margin // 2]
        editor = [margin, split + margin // 2, width - margin, height - margin]
    else:
        split = rng.randint(int(width * 0.35), int(width * 0.5))
        question = [margin, top, split - margin // 2, height - margin]
        editor = [split + margin // 2, top, width - margin, height - margin]
    d.rectangle(question, fill=(255, 255, 255), outline=(200, 204, 210))
    d.rectangle(editor, fill=(30, 30, 36), outline=(90, 90, 100))
    for box, ink in ((question, (60, 64, 72)), (editor, (152, 195, 121))):
        x1, y1, x2, y2 = box
        line = max(3, (y2 - y1) // 24)
        y = y1 + line
        while y + line < y2 - line:
            length = rng.randint(int((x2 - x1) * 0.3), int((x2 - x1) * 0.9))
            d.rectangle([x1 + line, y, min(x2 - line, x1 + line + length), y + line // 2], fill=ink)
            y += line + line // 2
    bw, bh = max(6, width // 12), max(4, bar // 2)
    d.rectangle([width - margin - bw, bar // 4, width - margin, bar // 4 + bh], fill=(0, 122, 255))
    return img, {"question": question, "editor": editor}


def answer(panels: dict[str, list[int]], width: int, height: int) -> str:
    from preprocess import load_config, smart_resize

    cfg = load_config()
    rh, rw = smart_resize(
        height, width, cfg["patch_size"] * cfg["merge_size"], cfg["min_pixels"], cfg["max_pixels"]
    )
    boxes = []
    for label, (x1, y1, x2, y2) in panels.items():
        scaled = [round(x1 * rw / width), round(y1 * rh / height)]
        scaled += [round(x2 * rw / width), round(y2 * rh / height)]
        boxes.append({"bbox_2d": scaled, "label": label})
    return json.dumps(boxes)


def main() -> None:
    CASES_DIR.mkdir(exist_ok=True)
    sums = {}
    for name, width, height in SIZES:
        img, panels = draw(name, width, height)
        png = CASES_DIR / f"{name}.png"
        img.save(png, optimize=True)
        case = {
            "image": png.name,
            "image_sha256": hashlib.sha256(png.read_bytes()).hexdigest(),
            "size": [width, height],
            "prompt": PROMPT,
            "panels": panels,
            "continuation": answer(panels, width, height),
            "max_new_tokens": 8,
        }
        path = CASES_DIR / f"{name}.json"
        path.write_text(json.dumps(case, indent=2) + "\n")
        for p in (png, path):
            sums[p.name] = hashlib.sha256(p.read_bytes()).hexdigest()
    (CASES_DIR / "SHA256SUMS.json").write_text(json.dumps(sums, indent=2) + "\n")
    print(f"wrote {len(SIZES)} cases to {CASES_DIR}")


if __name__ == "__main__":
    main()
