"""Two implementations of the same tiny Qwen2.5-VL model, one interface: ``run(case) -> dict``.

A case (``cases/*.json``, ``make_cases.py``) is an image, a prompt, a fixed continuation (the
grounding answer, scored teacher-forced) and ``max_new_tokens`` (greedy length).
``grounding(entry)`` (below) runs only the answer and its boxes, through the reference or one
of mlx-vlm's entry points (parity-adapters.toml); ``after_other_image`` and ``make(...,
fresh=True)`` are the two sides of the state claim (parity-state.toml).

- ``TransformersRunner``, the reference: the prompt from the tokenizer's chat template with the
  user's content ``[image, text]`` (Qwen2.5-VL's documented order), pixel values and grid from
  ``preprocess.py`` (transformers' processor needs torchvision), ``<|image_pad|>`` expanded
  there; ``Qwen2_5_VLForConditionalGeneration`` in float32, eager attention, on the CPU.
- ``MlxRunner``, the candidate: mlx-vlm's own path end to end: ``mlx_vlm.load`` (model and
  processor), ``mlx_vlm.prompt_utils.apply_chat_template`` (which builds the message content in
  the order mlx-vlm's per-model table says), its processor (its numpy image processor, its
  image-token expansion, the tokenizer) and the model, on ``mx.cpu`` in float32.

Each returns (docs/spec.md's sequence conventions, plus the vision part):

- ``prompt_ids`` [n], ``continuation_ids`` [m] (int64);
- ``logits`` [n + m, vocab] float32, teacher-forced: one forward pass over prompt + continuation;
- ``greedy_ids`` [steps], ``greedy_logits`` [steps, vocab]: greedy decoding (argmax), each step
  one full forward pass over prompt + the tokens so far (no KV cache), with each step's logits;
- ``answer_ids`` [up to MAX_ANSWER]: the greedy answer through each side's generation loop with
  its KV cache (transformers ``generate``; mlx-vlm ``generate_step`` at temperature 0), up to
  ``<|im_end|>``; ``boxes/question`` and ``boxes/editor`` [4]: the answer parsed and scaled to
  the original image (``boxes``), absent when the answer has no such box;
- ``pixel_values`` [patches, 3, 14, 14] float32 (the first of the two identical temporal frames of
  what each side feeds its vision tower, ``first_frame``) and ``image_grid_thw`` [1, 3] int64;
- ``vision_embeds`` [image tokens, 128] float32: the vision tower's output (after the patch
  merger), the rows that replace the ``<|image_pad|>`` embeddings.

``make(runtime, bug=None)`` is the factory ``parity.toml`` names; ``bug`` plants one of ``BUGS``
in a runner (the candidate; ``REFERENCE_BUGS`` below: the reference), never in a committed file:

- ``image-after-text``: mlx-vlm's message format for qwen2_5_vl switched to the one its
  qwen2_vl entry uses (image after the text), the seed's chat-template content-ordering bug;
- ``bilinear-resize``: the candidate's image processor resizes with PIL's bilinear filter
  instead of bicubic;
- ``vision-cache``: the candidate keeps the vision tower's output between calls, keyed by the
  patch grid only (not the image): a later image with the same grid gets an earlier image's
  features (the seed's state that persists between calls);
- ``corner-scaling``: the candidate maps the answer's boxes back to the original image with the
  corner-aligned scale (original - 1) / (resized - 1): the answer is right, the boxes drift by
  0 to about 12 px, more on larger images (the seed's 9 px);
- ``lanczos-resize``: the candidate's image processor resizes with PIL's Lanczos filter instead
  of bicubic (the filter swap between frameworks);
- ``image-token-short``: the prompt carries one ``<|image_pad|>`` fewer than the grid's merged
  patches (an off-by-one in the expansion); mlx-vlm fills the image positions it finds and drops
  the vision tower's last row without a word;
- ``vision-rope-stride``: the vision tower's 2-D rotary position ids computed from the flat
  patch index with a row length one too long (w + 1): the first row is right, every later row
  starts one or more columns off (an off-by-one in the ids, not a translation);
- ``vision-rope-shift``: the same ids all one higher (1-based): a translation, which rotary
  attention cannot see (it scores relative positions): the gate passes it, on purpose.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
MODEL_DIR = HERE / "model"
CASES_DIR = HERE / "cases"
THREADS = 2
DEVICE_ENV = "VLM_PORT_MLX_DEVICE"
BUGS = (
    "image-after-text",
    "bilinear-resize",
    "lanczos-resize",
    "corner-scaling",
    "vision-cache",
    "image-token-short",
    "vision-rope-stride",
    "vision-rope-shift",
)
MAX_ANSWER = 120  # tokens of the generated answer (the longest answer of the cases has 93)
LABELS = ("question", "editor")


def load_case(name: str) -> dict:
    return json.loads((CASES_DIR / f"{name}.json").read_text())


def case_image(case: dict) -> Any:
    """The case's image, checked against the sha256 its case file pins (the spec pins the
    case file, so the image bytes are pinned too)."""
    import io

    from PIL import Image

    data = (CASES_DIR / case["image"]).read_bytes()
    if hashlib.sha256(data).hexdigest() != case["image_sha256"]:
        raise ValueError(f"{case['image']}: sha256 differs from the case's image_sha256")
    with Image.open(io.BytesIO(data)) as img:
        return img.convert("RGB")


def first_frame(pixel_values: np.ndarray) -> np.ndarray:
    """[patches, 3 * 2 * 14 * 14] -> [patches, 3, 14, 14]: the first of the two temporal
    frames of every patch (a still image is repeated; the second frame is a copy), which halves
    the recorded reference."""
    return np.ascontiguousarray(pixel_values.reshape(len(pixel_values), 3, 2, 14, 14)[:, :, 0])


def _ids(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).reshape(-1)


def boxes(
    answer: str, size: list[int], grid_thw: np.ndarray, corners: bool = False
) -> dict[str, np.ndarray]:
    """``boxes/<label>`` [4] float64 in pixels of the original image, parsed from an answer in
    Qwen2.5-VL's format (JSON ``[{"bbox_2d": [x1, y1, x2, y2], "label": ...}]`` in pixels of
    the resized image: the grid times 14), each coordinate scaled back by original / resized and
    rounded to the pixel. An answer that does not parse, or a label it lacks, gives no output:
    the gate fails a missing box. ``corners`` scales by (original - 1) / (resized - 1), the
    corner-aligned convention: a planted bug that moves far edges by up to about 12 px."""
    try:
        items = json.loads(answer)
    except ValueError:
        return {}
    width, height = size
    resized_h, resized_w = int(grid_thw[0][1]) * 14, int(grid_thw[0][2]) * 14
    out = {}
    for item in items if isinstance(items, list) else []:
        label = item.get("label") if isinstance(item, dict) else None
        box = item.get("bbox_2d") if isinstance(item, dict) else None
        if label in LABELS and isinstance(box, list) and len(box) == 4:
            sx, sy = width / resized_w, height / resized_h
            if corners:
                sx, sy = (width - 1) / (resized_w - 1), (height - 1) / (resized_h - 1)
            x1, y1, x2, y2 = (float(v) for v in box)
            scaled = [x1 * sx, y1 * sy, x2 * sx, y2 * sy]
            out[f"boxes/{label}"] = np.round(np.asarray(scaled, dtype=np.float64))
    return out


class TransformersRunner:
    name = "transformers"

    def __init__(self, model_dir: Path = MODEL_DIR) -> None:
        import preprocess
        import torch
        from transformers import AutoTokenizer, Qwen2_5_VLForConditionalGeneration

        torch.set_num_threads(THREADS)
        self.torch = torch
        self.pre = preprocess
        self.config = preprocess.load_config(model_dir)
        self.tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        self.model = Qwen2_5_VLForConditionalGeneration.from_pretrained(
            str(model_dir), dtype=torch.float32, attn_implementation="eager"
        ).eval()

    def prompt(self, case: dict, grid_thw: np.ndarray) -> np.ndarray:
        messages = [
            {
                "role": "user",
                "content": [{"type": "image"}, {"type": "text", "text": case["prompt"]}],
            }
        ]
        text = self.tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
        text = self.pre.expand_image_tokens(text, grid_thw, self.config["merge_size"])
        return _ids(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _logits(self, ids: np.ndarray, pixel_values: Any, grid: Any) -> np.ndarray:
        torch = self.torch
        # transformers 5 computes the multimodal (t, h, w) rotary positions only when it is
        # given mm_token_type_ids (1 at image tokens), as its processor returns; without them it
        # silently falls back to 1-D positions
        image = (ids == self.model.config.image_token_id).astype(np.int64)
        with torch.no_grad():
            out = self.model(
                input_ids=torch.from_numpy(ids)[None],
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                mm_token_type_ids=torch.from_numpy(image)[None],
                pixel_values=pixel_values,
                image_grid_thw=grid,
            )
        return out.logits[0].float().numpy()

    def answer(self, prompt: np.ndarray, pixel_values: Any, grid: Any) -> np.ndarray:
        """Greedy answer through ``generate`` (KV cache), up to ``<|im_end|>`` (left out)."""
        torch = self.torch
        end = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        image = (prompt == self.model.config.image_token_id).astype(np.int64)
        with torch.no_grad():
            out = self.model.generate(
                input_ids=torch.from_numpy(prompt)[None],
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                mm_token_type_ids=torch.from_numpy(image)[None],
                pixel_values=pixel_values,
                image_grid_thw=grid,
                max_new_tokens=MAX_ANSWER,
                do_sample=False,
                eos_token_id=end,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        ids = out[0, len(prompt) :].numpy()
        return _ids(ids[: np.argmax(ids == end)] if (ids == end).any() else ids)

    def run(self, case: dict) -> dict:
        torch = self.torch
        pv_np, grid_np = self.pre.process_image(case_image(case), self.config)
        pixel_values, grid = torch.from_numpy(pv_np), torch.from_numpy(grid_np)
        prompt = self.prompt(case, grid_np)
        cont = _ids(self.tokenizer(case["continuation"], add_special_tokens=False)["input_ids"])
        with torch.no_grad():
            vision = self.model.model.visual(pixel_values, grid_thw=grid).pooler_output
        logits = self._logits(np.concatenate([prompt, cont]), pixel_values, grid)
        ids, greedy, rows = prompt, [], []
        for _ in range(case["max_new_tokens"]):
            row = self._logits(ids, pixel_values, grid)[-1]
            rows.append(row)
            greedy.append(int(np.argmax(row)))
            ids = np.append(ids, greedy[-1])
        answer = self.answer(prompt, pixel_values, grid)
        text = self.tokenizer.decode(answer.tolist(), skip_special_tokens=False)
        return dict(
            prompt_ids=prompt,
            continuation_ids=cont,
            logits=logits,
            greedy_ids=_ids(greedy),
            greedy_logits=np.stack(rows),
            answer_ids=answer,
            **boxes(text, case["size"], grid_np),
            pixel_values=first_frame(pv_np),
            image_grid_thw=grid_np,
            vision_embeds=vision.float().numpy(),
        )


class MlxRunner:
    name = "mlx-vlm"

    def __init__(
        self,
        model_dir: Path = MODEL_DIR,
        image_after_text: bool = False,
        resample: int | None = None,
        corner_scaling: bool = False,
        vision_cache: bool = False,
        image_token_short: bool = False,
        vision_rope_shift: bool = False,
        vision_rope_stride: bool = False,
    ) -> None:
        import mlx.core as mx
        from mlx_vlm import load

        # MLX's CPU unless VLM_PORT_MLX_DEVICE=gpu (gpu/run_gpu.sh: MLX CUDA against the recorded
        # CPU reference)
        mx.set_default_device(mx.gpu if os.environ.get(DEVICE_ENV) == "gpu" else mx.cpu)
        self.mx = mx
        self.model, self.processor = load(str(model_dir))
        if vision_cache:
            self.model.vision_tower = _grid_keyed_cache(self.model.vision_tower)
        if vision_rope_shift:
            tower = self.model.vision_tower
            tower.rotary_pos_emb = _shifted_rotary(tower.rotary_pos_emb)
        if vision_rope_stride:
            self.model.vision_tower.rot_pos_emb = _strided_rot_pos_emb(self.model.vision_tower)
        self.image_token_short = image_token_short
        self.image_after_text = image_after_text
        self.resample = resample
        self.corner_scaling = corner_scaling

    def prompt_text(self, case: dict) -> str:
        from mlx_vlm import prompt_utils

        table = prompt_utils.MODEL_CONFIG
        saved = table["qwen2_5_vl"]
        if self.image_after_text:  # the planted bug: qwen2_vl's entry, image after the text
            table["qwen2_5_vl"] = prompt_utils.MessageFormat.LIST_WITH_IMAGE
        try:
            return prompt_utils.apply_chat_template(
                self.processor, self.model.config, case["prompt"], num_images=1
            )
        finally:
            table["qwen2_5_vl"] = saved

    def _inputs(self, case: dict) -> dict:
        inputs = self._processed(case)
        if self.image_token_short:  # the planted bug: the last <|image_pad|> left out
            mx = self.mx
            ids = np.array(inputs["input_ids"])
            last = int(np.flatnonzero(ids[0] == self.model.config.image_token_id)[-1])
            for key in ("input_ids", "attention_mask"):
                if key in inputs:
                    inputs[key] = mx.array(np.delete(np.array(inputs[key]), last, axis=1))
        return inputs

    def _processed(self, case: dict) -> dict:
        image = case_image(case)
        if self.resample is None:
            return self.processor(text=[self.prompt_text(case)], images=[image])
        # the planted resize bug: the candidate's processor with another PIL filter
        from mlx_vlm.models.qwen3_vl import processing_qwen3_vl as proc
        from PIL import Image

        original = proc._resize_video_frames

        def resize(video: np.ndarray, target_h: int, target_w: int) -> np.ndarray:
            frames = [
                np.array(
                    Image.fromarray(f.transpose(1, 2, 0)).resize(
                        (target_w, target_h), resample=Image.Resampling(self.resample)
                    )
                ).transpose(2, 0, 1)
                for f in video
            ]
            return np.stack(frames)

        proc._resize_video_frames = resize
        try:
            return self.processor(text=[self.prompt_text(case)], images=[image])
        finally:
            proc._resize_video_frames = original

    def _logits(self, ids: np.ndarray, pixel_values: Any, grid: Any) -> np.ndarray:
        mx = self.mx
        out = self.model(mx.array(ids[None]), pixel_values, mask=None, image_grid_thw=grid)
        return np.array(out.logits[0].astype(mx.float32))

    def answer(self, inputs: Any) -> np.ndarray:
        """Greedy answer through mlx-vlm's ``generate_step`` (KV cache, temperature 0), up to
        ``<|im_end|>`` (left out)."""
        from mlx_vlm.generate.ar import generate_step

        end = self.processor.tokenizer.convert_tokens_to_ids("<|im_end|>")
        tokens = []
        steps = generate_step(
            inputs["input_ids"],
            self.model,
            inputs["pixel_values"],
            inputs.get("attention_mask"),
            max_tokens=MAX_ANSWER,
            temperature=0.0,
            image_grid_thw=inputs["image_grid_thw"],
        )
        for token, _ in steps:
            if int(token) == end:
                break
            tokens.append(int(token))
        return _ids(tokens)

    def run(self, case: dict) -> dict:
        mx = self.mx
        inputs = self._inputs(case)
        prompt = _ids(np.array(inputs["input_ids"]))
        pixel_values, grid = inputs["pixel_values"], inputs["image_grid_thw"]
        cont = _ids(
            self.processor.tokenizer(case["continuation"], add_special_tokens=False)["input_ids"]
        )
        vision = self.model.vision_tower(pixel_values.astype(mx.float32), grid)
        logits = self._logits(np.concatenate([prompt, cont]), pixel_values, grid)
        ids, greedy, rows = prompt, [], []
        for _ in range(case["max_new_tokens"]):
            row = self._logits(ids, pixel_values, grid)[-1]
            rows.append(row)
            greedy.append(int(np.argmax(row)))
            ids = np.append(ids, greedy[-1])
        answer = self.answer(inputs)
        text = self.processor.tokenizer.decode(answer.tolist(), skip_special_tokens=False)
        grid_np = np.array(grid).astype(np.int64).reshape(1, 3)
        return dict(
            prompt_ids=prompt,
            continuation_ids=cont,
            logits=logits,
            greedy_ids=_ids(greedy),
            greedy_logits=np.stack(rows),
            answer_ids=answer,
            **boxes(text, case["size"], grid_np, corners=self.corner_scaling),
            pixel_values=first_frame(np.array(pixel_values.astype(mx.float32))),
            image_grid_thw=grid_np,
            vision_embeds=np.array(vision.astype(mx.float32)),
        )


def _grid_keyed_cache(tower: Any) -> Any:
    """The ``vision-cache`` bug: mlx-vlm's vision tower behind a cache keyed by the grid."""
    import mlx.nn as nn

    class GridKeyedCache(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tower = tower
            self._features: dict[tuple[int, ...], Any] = {}

        @property
        def patch_embed(self) -> Any:  # read by mlx-vlm for the pixel values' dtype
            return self.tower.patch_embed

        def __call__(self, pixel_values: Any, grid_thw: Any, **kwargs: Any) -> Any:
            key = tuple(int(v) for v in np.array(grid_thw).reshape(-1))
            if key not in self._features:
                self._features[key] = self.tower(pixel_values, grid_thw, **kwargs)
            return self._features[key]

    return GridKeyedCache()


def _shifted_rotary(rotary: Any) -> Any:
    """The ``vision-rope-shift`` bug: the vision tower's rotary table read one position on, so
    that patch (h, w) is rotated as (h + 1, w + 1)."""
    import mlx.nn as nn

    class Shifted(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rotary = rotary

        def __call__(self, seqlen: Any) -> Any:
            return self.rotary(seqlen + 1)[1:]

    return Shifted()


def _strided_rot_pos_emb(tower: Any) -> Any:
    """The ``vision-rope-stride`` bug: mlx-vlm's ``rot_pos_emb`` with the (h, w) ids taken from
    the flat patch index with a row length of w + 1 instead of w."""
    import mlx.core as mx

    def rot_pos_emb(grid_thw: Any) -> Any:
        merge = tower.spatial_merge_size
        pos_ids = []
        for t, h, w in grid_thw.tolist():
            flat = mx.arange(h * w)
            ids = []
            for axis in (flat // (w + 1), flat % (w + 1)):
                axis = axis.reshape(h // merge, merge, w // merge, merge)
                ids.append(mx.transpose(axis, (0, 2, 1, 3)).flatten())
            pos_ids.append(mx.tile(mx.stack(ids, axis=-1), (t, 1)))
        pos_ids = mx.concatenate(pos_ids, axis=0)
        table = tower.rotary_pos_emb(mx.max(grid_thw[:, 1:]) + 1)
        return table[pos_ids].reshape(pos_ids.shape[0], -1)

    return rot_pos_emb


def make(runtime: str, bug: str | None = None, fresh: bool = False) -> Any:
    """The runner ``parity.toml`` names: ``runtime`` is transformers or mlx-vlm; ``bug`` one of
    ``BUGS`` (mlx-vlm) or ``REFERENCE_BUGS`` (transformers). ``fresh``: every call builds a new
    runner (nothing left from an earlier call): the reference of the state claims."""
    if fresh:
        return lambda case: make(runtime, bug)(case)
    if bug is not None and bug not in bugs_of(runtime):
        raise ValueError(f"unknown bug {bug!r} for {runtime}; expected one of {_names(runtime)}")
    if runtime == "transformers":
        if bug == "stale-rope-deltas":
            return EmbeddingsRunner().run
        return TransformersRunner().run
    if runtime == "mlx-vlm":
        from PIL import Image

        filters = {
            "bilinear-resize": int(Image.Resampling.BILINEAR),
            "lanczos-resize": int(Image.Resampling.LANCZOS),
        }
        return MlxRunner(
            image_after_text=bug == "image-after-text",
            resample=filters.get(bug),
            corner_scaling=bug == "corner-scaling",
            vision_cache=bug == "vision-cache",
            image_token_short=bug == "image-token-short",
            vision_rope_shift=bug == "vision-rope-shift",
            vision_rope_stride=bug == "vision-rope-stride",
        ).run
    raise ValueError(f"unknown runtime {runtime!r}")


# ---------------------------------------------------------------------------------------------
# The grounding answer through every entry point (parity-adapters.toml): ``answer_utf8`` (the
# answer's text as UTF-8 bytes, uint8: entry points that return text are compared byte for byte)
# and the boxes parsed from it.
ENTRY_POINTS = ("transformers", "step", "api", "cli", "server")


def _grounding(text: str, case: dict, grid_thw: np.ndarray) -> dict:
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8).copy()
    return dict(answer_utf8=data, **boxes(text, case["size"], grid_thw))


def grounding(entry: str, bug: str | None = None, source: str | None = None) -> Any:
    """The answer and its boxes through one entry point: ``transformers`` (the reference's
    ``generate``), ``step`` (mlx-vlm's ``generate_step``, the candidate of parity.toml), ``api``
    (``mlx_vlm.generate``: its own image loading, processing and generation loop) or ``cli``
    (``python -m mlx_vlm.generate`` in a child process, the answer read from its stdout). ``bug``
    ``raw-prompt``: the api entry point is given the prompt without the chat template.
    ``source="bootstrap"``: the command line runs the mlx-vlm source of the checkout that
    ``paritygate bootstrap`` made (``PARITYGATE_BOOTSTRAP_DIR`` first on ``PYTHONPATH``)."""
    import preprocess

    config = preprocess.load_config(MODEL_DIR)

    def grid_of(case: dict) -> np.ndarray:
        width, height = case["size"]
        h, w = preprocess.smart_resize(
            height, width, 28, config["min_pixels"], config["max_pixels"]
        )
        return np.array([[1, h // 14, w // 14]], dtype=np.int64)

    if entry == "transformers":
        ref = TransformersRunner()

        def run(case: dict) -> dict:
            pixels, grid = preprocess.process_image(case_image(case), ref.config)
            torch = ref.torch
            prompt = ref.prompt(case, grid)
            ids = ref.answer(prompt, torch.from_numpy(pixels), torch.from_numpy(grid))
            return _grounding(ref.tokenizer.decode(ids.tolist()), case, grid)

        return run
    if entry == "step":
        cand = MlxRunner()

        def run(case: dict) -> dict:
            inputs = cand._inputs(case)
            ids = cand.answer(inputs)
            return _grounding(cand.processor.tokenizer.decode(ids.tolist()), case, grid_of(case))

        return run
    if entry == "api":
        import mlx.core as mx
        from mlx_vlm import generate, load
        from mlx_vlm.prompt_utils import apply_chat_template

        mx.set_default_device(mx.cpu)
        model, processor = load(str(MODEL_DIR))

        def run(case: dict) -> dict:
            case_image(case)  # the pinned bytes; mlx-vlm then reads the file itself
            prompt = case["prompt"]
            if bug != "raw-prompt":
                prompt = apply_chat_template(processor, model.config, prompt, num_images=1)
            result = generate(
                model,
                processor,
                prompt,
                image=[str(CASES_DIR / case["image"])],
                max_tokens=MAX_ANSWER,
                temperature=0.0,
                verbose=False,
            )
            return _grounding(result.text, case, grid_of(case))

        return run
    if entry == "cli":
        import subprocess
        import sys

        def run(case: dict) -> dict:
            case_image(case)
            command = [sys.executable, "-m", "mlx_vlm.generate", "--model", str(MODEL_DIR)]
            command += ["--image", str(CASES_DIR / case["image"]), "--prompt", case["prompt"]]
            command += ["--max-tokens", str(MAX_ANSWER), "--temperature", "0"]
            env = None
            if source == "bootstrap":  # the checkout paritygate bootstrap made, first on the path
                checkout = os.environ["PARITYGATE_BOOTSTRAP_DIR"]
                path = os.pathsep.join(p for p in (checkout, os.environ.get("PYTHONPATH")) if p)
                env = dict(os.environ, PYTHONPATH=path)
            done = subprocess.run(command, capture_output=True, text=True, check=True, env=env)
            return _grounding(done.stdout.strip(), case, grid_of(case))

        return run
    if entry == "server":
        return _Server(grid_of)
    raise ValueError(f"unknown entry point {entry!r}; expected one of {', '.join(ENTRY_POINTS)}")


class _Server:
    """mlx-vlm's HTTP server (``python -m mlx_vlm.server``) on a free port of 127.0.0.1, started
    here and registered with ``paritygate.children`` (an aborted gate ends it); each case one
    ``POST /v1/chat/completions`` with the image's path and the prompt, temperature 0.
    ``close()`` (called by paritygate when the runner is put away) stops it."""

    def __init__(self, grid_of: Any) -> None:
        import socket
        import subprocess
        import sys
        import time
        import urllib.request

        from paritygate import children

        self.grid_of = grid_of
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        command = [sys.executable, "-m", "mlx_vlm.server", "--model", str(MODEL_DIR)]
        command += ["--host", "127.0.0.1", "--port", str(self.port)]
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        children.started(self.process, own_group=True)
        deadline = time.monotonic() + 180
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5).read()
                return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    self.close()
                    raise RuntimeError("mlx-vlm's server did not start") from None
                time.sleep(0.5)

    def __call__(self, case: dict) -> dict:
        import urllib.request

        case_image(case)  # the pinned bytes; the server then reads the file itself
        image = {"type": "image_url", "image_url": {"url": str(CASES_DIR / case["image"])}}
        content = [image, {"type": "text", "text": case["prompt"]}]
        body = {
            "model": str(MODEL_DIR),
            "messages": [{"role": "user", "content": content}],
            "max_tokens": MAX_ANSWER,
            "temperature": 0.0,
            "stream": False,
        }
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}/v1/chat/completions",
            data=json.dumps(body).encode("utf-8"),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=300) as response:
            text = json.loads(response.read())["choices"][0]["message"]["content"]
        return _grounding(text, case, self.grid_of(case))

    def close(self) -> None:
        from paritygate import children

        children.end(self.process)


# The image a state check runs first: fullhd's grid (12 x 20 patches) is also laptop's and odd's.
OTHER_IMAGE = "fullhd"


def after_other_image(runtime: str, bug: str | None = None) -> Any:
    """One runner whose every call on a case follows a call on another image (what a service
    does). The state claim holds it byte-equal to a fresh call."""
    run = make(runtime, bug)

    def second_call(case: dict) -> dict:
        run(load_case(OTHER_IMAGE))
        return run(case)

    return second_call


def after_other_image_with_vision_cache(runtime: str, bug: str | None = None) -> Any:
    return after_other_image(runtime, "vision-cache")


# A mutated candidate for ``paritygate calibrate --model-mutation NAME=runners:with_...``: built
# with the candidate runner's options, it plants one bug, the signal calibration measures.
def with_bilinear_resize(runtime: str, bug: str | None = None) -> Any:
    return make(runtime, "bilinear-resize")


# The reference's planted bug, ``make("transformers", bug=...)`` (parity-state-transformers.toml).
REFERENCE_BUGS = ("stale-rope-deltas",)


def bugs_of(runtime: str) -> tuple[str, ...]:
    """The bugs ``make`` plants in ``runtime``'s runner; none for an unknown runtime."""
    return {"transformers": REFERENCE_BUGS, "mlx-vlm": BUGS}.get(runtime, ())


def _names(runtime: str) -> str:
    return ", ".join(bugs_of(runtime)) or "none (unknown runtime)"


class EmbeddingsRunner(TransformersRunner):
    """The ``stale-rope-deltas`` bug: every forward pass of the reference (teacher-forced and
    the greedy steps) merges the vision tower's output into the prompt's embeddings itself and
    calls the model with ``inputs_embeds`` instead of ``input_ids`` and the pixel values. Given
    no ids, transformers 5.23's Qwen2.5-VL cannot rebuild the 3-D rotary positions and adds the
    ``rope_deltas`` the model keeps between calls (set by the last ``generate``: the previous
    call's image) to 1-D positions; a fresh model has none and uses the 1-D positions alone. So
    a call after another image differs from a fresh call, by a translation of every position
    (rotary attention sees it only as rounding: the logits move by about 1e-4, the tokens do
    not); ``generate``'s answer is given the ids and recomputes them. The 1-D positions are a
    bug of their own, which the stored gate catches against mlx-vlm; the state claim, with this
    bug planted in both of its runners, sees only what is kept between calls."""

    def _logits(self, ids: np.ndarray, pixel_values: Any, grid: Any) -> np.ndarray:
        torch = self.torch
        inner = self.model.model
        input_ids = torch.from_numpy(ids)[None]
        image = (ids == self.model.config.image_token_id).astype(np.int64)
        with torch.no_grad():
            embeds = inner.get_input_embeddings()(input_ids)
            vision = inner.visual(pixel_values, grid_thw=grid).pooler_output
            mask = torch.from_numpy(image.astype(bool))[None, :, None].expand_as(embeds)
            out = self.model(
                inputs_embeds=embeds.masked_scatter(mask, vision.to(embeds.dtype)),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                mm_token_type_ids=torch.from_numpy(image)[None],
                image_grid_thw=grid,
            )
        return out.logits[0].float().numpy()
