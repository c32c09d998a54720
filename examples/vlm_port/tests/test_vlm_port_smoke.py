"""The pinned model, tokenizer and images; the documented preprocessing and prompt format; the
runners refusing an image that is not the pinned one."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest


@pytest.fixture(scope="module")
def runners(example_module):
    return example_module("runners")


@pytest.fixture(scope="module")
def preprocess(example_module):
    return example_module("preprocess")


def _sums(folder):
    return json.loads((folder / "SHA256SUMS.json").read_text())


def test_model_files_match_their_pinned_sha256(runners):
    sums = _sums(runners.MODEL_DIR)
    assert {
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "preprocessor_config.json",
    } <= set(sums)
    for name, digest in sums.items():
        assert hashlib.sha256((runners.MODEL_DIR / name).read_bytes()).hexdigest() == digest, name
    assert (runners.MODEL_DIR / "model.safetensors").stat().st_size <= 20_000_000


def test_the_config_has_qwen2_5_vl_s_parts_in_both_conventions(runners):
    config = json.loads((runners.MODEL_DIR / "config.json").read_text())
    vision = config["vision_config"]
    # window attention in some blocks, full attention in the others; the 2 x 2 patch merger
    assert 0 < len(vision["fullatt_block_indexes"]) < vision["depth"]
    assert vision["window_size"] == 112 and vision["spatial_merge_size"] == 2
    assert (vision["patch_size"], vision["temporal_patch_size"]) == (14, 2)
    # transformers 5 reads text_config.rope_parameters; mlx-vlm 0.7.10 the top-level keys
    mrope = config["text_config"]["rope_parameters"]["mrope_section"]
    assert config["rope_scaling"]["mrope_section"] == mrope
    head = config["hidden_size"] // config["num_attention_heads"]
    assert sum(mrope) * 2 == head


def test_cases_and_their_images_match_their_pinned_sha256(runners):
    sums = _sums(runners.CASES_DIR)
    for name, digest in sums.items():
        assert hashlib.sha256((runners.CASES_DIR / name).read_bytes()).hexdigest() == digest
    cases = [runners.load_case(n[: -len(".json")]) for n in sums if n.endswith(".json")]
    assert len(cases) >= 12
    for case in cases:
        image = (runners.CASES_DIR / case["image"]).read_bytes()
        assert hashlib.sha256(image).hexdigest() == case["image_sha256"]


def test_the_grid_and_the_image_token_count_vary_across_cases(runners, preprocess):
    config = preprocess.load_config(runners.MODEL_DIR)
    grids = set()
    for path in sorted(runners.CASES_DIR.glob("*.json")):
        if path.name == "SHA256SUMS.json":
            continue
        width, height = json.loads(path.read_text())["size"]
        h, w = preprocess.smart_resize(
            height, width, 28, config["min_pixels"], config["max_pixels"]
        )
        assert h % 28 == 0 and w % 28 == 0
        assert config["min_pixels"] <= h * w <= config["max_pixels"]
        grids.add((h // 14, w // 14))
    tokens = {gh * gw // 4 for gh, gw in grids}
    assert len(grids) >= 10 and len(tokens) >= 8 and min(tokens) <= 25 and max(tokens) == 64


def test_patchify_keeps_each_merged_token_s_four_patches_together(preprocess):
    from PIL import Image

    # a 56 x 28 image whose 14 px patches are numbered by their value
    values = np.arange(8, dtype=np.uint8).reshape(2, 4) * 30
    img = Image.fromarray(np.kron(values, np.ones((14, 14), dtype=np.uint8))).convert("RGB")
    config = dict(preprocess.load_config(), image_mean=[0, 0, 0], image_std=[1, 1, 1])
    config["rescale_factor"] = 1.0
    config["min_pixels"] = 28 * 56
    pixels, grid = preprocess.process_image(img, config)
    assert grid.tolist() == [[1, 2, 4]] and pixels.shape == (8, 3 * 2 * 14 * 14)
    # rows: merged token 0 = patches (0,0) (0,1) (1,0) (1,1), then token 1 = (0,2) (0,3) ...
    order = [int(round(row[0])) // 30 for row in pixels]
    assert order == [0, 1, 4, 5, 2, 3, 6, 7]
    # both temporal frames equal (a still image), channel-major
    patch = pixels[0].reshape(3, 2, 14, 14)
    assert np.array_equal(patch[:, 0], patch[:, 1])


def test_the_reference_prompt_places_the_image_before_the_text(runners, preprocess):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(runners.MODEL_DIR))
    messages = [
        {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Where?"}]}
    ]
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    text = preprocess.expand_image_tokens(text, np.array([[1, 4, 6]]))
    assert text == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "<|vision_start|>" + "<|image_pad|>" * 6 + "<|vision_end|>Where?<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    ids = tok(text, add_special_tokens=False)["input_ids"]
    assert ids.count(tok.convert_tokens_to_ids("<|image_pad|>")) == 6
    with pytest.raises(ValueError, match="expected one <\\|image_pad\\|>"):
        preprocess.expand_image_tokens("no image", np.array([[1, 2, 2]]))


def test_the_answer_parser_gives_back_the_case_s_panels(runners, preprocess):
    config = preprocess.load_config(runners.MODEL_DIR)
    for name in ("leetcode", "tiny", "column"):
        case = runners.load_case(name)
        width, height = case["size"]
        h, w = preprocess.smart_resize(
            height, width, 28, config["min_pixels"], config["max_pixels"]
        )
        grid = np.array([[1, h // 14, w // 14]])
        found = runners.boxes(case["continuation"], case["size"], grid)
        assert set(found) == {"boxes/question", "boxes/editor"}
        for label, box in case["panels"].items():
            # the answer is rounded in resized pixels: back within one resized pixel's width
            step = max(width / w, height / h)
            assert np.abs(found[f"boxes/{label}"] - box).max() <= step / 2 + 1, (name, label)
    # no JSON, or a label missing: no box (the gate fails a missing box)
    assert runners.boxes("[{", [10, 10], np.array([[1, 2, 2]])) == {}
    one = '[{"bbox_2d": [0, 0, 5, 5], "label": "editor"}]'
    assert set(runners.boxes(one, [28, 28], np.array([[1, 2, 2]]))) == {"boxes/editor"}


def test_a_runner_refuses_an_image_that_is_not_the_pinned_one(runners):
    case = dict(runners.load_case("tiny"), image_sha256="0" * 64)
    with pytest.raises(ValueError, match="tiny.png: sha256 differs"):
        runners.case_image(case)


def test_the_reference_preprocessing_matches_transformers_own_pil_processor(runners, preprocess):
    # transformers 5.23 ships a torchvision-free backend, Qwen2VLImageProcessorPil: same grid,
    # pixel values within 4.8e-7 on all 16 cases (measured 2026-12-05; float32 rounding of the
    # rescale and normalize steps, done in another order)
    import warnings

    from transformers import Qwen2VLImageProcessorPil

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = Qwen2VLImageProcessorPil.from_pretrained(str(runners.MODEL_DIR))
    for name in ("leetcode", "tiny", "column"):
        image = runners.case_image(runners.load_case(name))
        out = theirs(images=[image], return_tensors="np")
        pixels, grid = preprocess.process_image(image)
        assert np.array_equal(np.asarray(out["image_grid_thw"]), grid), name
        assert np.abs(np.asarray(out["pixel_values"]) - pixels).max() <= 1e-6, name
