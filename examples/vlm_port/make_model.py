"""Make the example's tiny Qwen2.5-VL model and write it in the Hugging Face layout.

Not part of CI. The committed ``model/`` came from

    python make_model.py        # about 10 s on 2 shared CPU cores

Weights: seeded initialization (``torch.manual_seed(SEED)``) of transformers'
``Qwen2_5_VLForConditionalGeneration`` with ``CONFIG`` below; no training. The initializer's
standard deviation is raised from Qwen's 0.02 to 0.2 so that the next-token distributions are
peaked (top-1 / top-2 margins well above float32 noise) rather than nearly uniform. A torch
release that draws its normal samples differently makes other weights; the committed weights
are pinned by sha256 (``model/SHA256SUMS.json``) and are the reference, not this script's output
elsewhere.

The architecture is Qwen2.5-VL's, scaled down:

- vision tower: 14 px patches over 2 frames (temporal patch 2: a still image is repeated), a
  Conv3d patch embedding, 4 blocks of width 64 and 4 heads (RMSNorm, SwiGLU), window attention
  in blocks 0 and 2 (window 112 px: 4 x 4 merged patches) and full attention in blocks 1 and 3,
  2-D rotary position ids, and the patch merger (2 x 2 patches -> one token of width 128);
- language model: Qwen2 with 2 layers, width 128, 4 query / 2 key-value heads (head 32),
  multimodal rotary embedding (mrope sections 4/6/6 of the 16 frequency pairs: time, height,
  width), tied embeddings, vocabulary of 512.

Tokenizer: byte-level BPE trained by ``tokenizers`` with Qwen2's pre-tokenizer regex on the
Python standard library's top-level source files (as examples/lm_port does), and Qwen2.5-VL's
special tokens at the end of the vocabulary. Chat template: Qwen2.5-VL's documented template
(the default system message, a content list whose image items write
``<|vision_start|><|image_pad|><|vision_end|>`` in the order they appear); the processor then
repeats ``<|image_pad|>`` once per merged patch (``preprocess.py``).

Preprocessing parameters (``preprocessor_config.json``): 14 px patches, merge 2, temporal patch
2, CLIP mean/std, ``min_pixels`` 56*56 and ``max_pixels`` 28*28*64 (at most 64 image tokens),
so that each canonical image is resized to a grid of at most 64 merged patches.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sysconfig
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL_DIR = HERE / "model"
SEED = 20261205

QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# Qwen2.5-VL's special tokens, in the order of its tokenizer (ids from VOCAB - 14 on).
SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
]
VOCAB = 512

# Qwen2.5-VL's chat template (tokenizer_config.json of Qwen/Qwen2.5-VL-*-Instruct), unchanged.
CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}"
    "{% for message in messages %}{% if loop.first and message['role'] != 'system' %}"
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n{% endif %}"
    "<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}"
    "{{ message['content'] }}<|im_end|>\n{% else %}{% for content in message['content'] %}"
    "{% if content['type'] == 'image' or 'image' in content or 'image_url' in content %}"
    "{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif content['type'] == 'video' or 'video' in content %}"
    "{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>"
    "{% elif 'text' in content %}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

PREPROCESSOR = dict(
    patch_size=14,
    temporal_patch_size=2,
    merge_size=2,
    min_pixels=56 * 56,
    max_pixels=28 * 28 * 64,
    image_mean=[0.48145466, 0.4578275, 0.40821073],
    image_std=[0.26862954, 0.26130258, 0.27577711],
    rescale_factor=1 / 255,
    do_rescale=True,
    do_normalize=True,
    do_resize=True,
    do_convert_rgb=True,
    resample=3,
    image_processor_type="Qwen2VLImageProcessor",
    processor_class="Qwen2_5_VLProcessor",
)

TEXT = dict(
    vocab_size=VOCAB,
    hidden_size=128,
    intermediate_size=256,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    tie_word_embeddings=True,
    use_sliding_window=False,
    attention_dropout=0.0,
    initializer_range=0.2,
)
ROPE = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [4, 6, 6]}
VISION = dict(
    depth=4,
    hidden_size=64,
    intermediate_size=128,
    num_heads=4,
    out_hidden_size=128,
    fullatt_block_indexes=[1, 3],
    window_size=112,
    patch_size=14,
    spatial_merge_size=2,
    temporal_patch_size=2,
    in_channels=3,
    tokens_per_second=2,
    hidden_act="silu",
    initializer_range=0.2,
)


def special_id(token: str) -> int:
    return VOCAB - len(SPECIAL_TOKENS) + SPECIAL_TOKENS.index(token)


def corpus(max_chars: int = 400_000) -> list[str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    texts, total = [], 0
    for path in sorted(p for p in root.glob("*.py") if p.is_file()):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        texts.append(text)
        total += len(text)
        if total >= max_chars:
            break
    # the grounding answers' vocabulary: JSON boxes and panel labels
    texts.append('[{"bbox_2d": [0, 12, 345, 678], "label": "editor"}]\n' * 50)
    return texts


def make_tokenizer(out: Path) -> None:
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(byte_fallback=False, ignore_merges=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB - len(SPECIAL_TOKENS),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    assert tok.get_vocab_size() == VOCAB - len(SPECIAL_TOKENS), tok.get_vocab_size()
    tok.add_special_tokens(SPECIAL_TOKENS)
    for t in SPECIAL_TOKENS:
        assert tok.token_to_id(t) == special_id(t), (t, tok.token_to_id(t))
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=SPECIAL_TOKENS[1:],
        model_max_length=TEXT["max_position_embeddings"],
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)


def config_dict() -> dict:
    """config.json in both conventions: transformers 5 reads ``text_config`` (rope in
    ``rope_parameters``); mlx-vlm 0.7.10 reads the language model's keys at the top level
    (``rope_theta``, ``rope_scaling`` with ``type`` and ``mrope_section``)."""
    ids = dict(
        image_token_id=special_id("<|image_pad|>"),
        video_token_id=special_id("<|video_pad|>"),
        vision_start_token_id=special_id("<|vision_start|>"),
        vision_end_token_id=special_id("<|vision_end|>"),
        vision_token_id=special_id("<|vision_pad|>"),
    )
    eos = [special_id("<|im_end|>"), special_id("<|endoftext|>")]
    text = dict(
        TEXT,
        model_type="qwen2_5_vl_text",
        rope_parameters=dict(ROPE),
        eos_token_id=eos,
        bos_token_id=special_id("<|endoftext|>"),
        pad_token_id=special_id("<|endoftext|>"),
    )
    top = dict(TEXT)
    top.update(
        rope_theta=ROPE["rope_theta"],
        rope_scaling={"type": "mrope", "rope_type": "default", "mrope_section": [4, 6, 6]},
    )
    return dict(
        architectures=["Qwen2_5_VLForConditionalGeneration"],
        model_type="qwen2_5_vl",
        torch_dtype="float32",
        text_config=text,
        vision_config=dict(VISION, model_type="qwen2_5_vl"),
        eos_token_id=eos,
        bos_token_id=special_id("<|endoftext|>"),
        pad_token_id=special_id("<|endoftext|>"),
        **top,
        **ids,
    )


def make_weights(out: Path) -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    cfg = config_dict()
    keys = (
        "text_config",
        "vision_config",
        "image_token_id",
        "video_token_id",
        "vision_start_token_id",
        "vision_end_token_id",
        "tie_word_embeddings",
    )
    config = Qwen2_5_VLConfig(**copy.deepcopy({k: cfg[k] for k in keys}), initializer_range=0.2)
    torch.manual_seed(SEED)
    model = Qwen2_5_VLForConditionalGeneration(config).to(torch.float32).eval()
    # Qwen's checkpoint names (what both loaders read): visual.*, model.*, no lm_head (tied)
    state = {}
    for key, value in model.state_dict().items():
        if key.startswith("lm_head."):
            continue
        key = key.replace("model.visual.", "visual.").replace("model.language_model.", "model.")
        state[key] = value.detach().contiguous().clone()
    save_file(state, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (out / "preprocessor_config.json").write_text(json.dumps(PREPROCESSOR, indent=2) + "\n")
    (out / "generation_config.json").write_text(
        json.dumps({"do_sample": False, "eos_token_id": cfg["eos_token_id"]}, indent=2) + "\n"
    )


def write_sums(out: Path) -> None:
    sums = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.iterdir())
        if p.is_file() and p.name != "SHA256SUMS.json"
    }
    (out / "SHA256SUMS.json").write_text(json.dumps(sums, indent=2) + "\n")


def main() -> None:
    MODEL_DIR.mkdir(exist_ok=True)
    make_tokenizer(MODEL_DIR)
    make_weights(MODEL_DIR)
    write_sums(MODEL_DIR)
    print(f"wrote {MODEL_DIR}")


if __name__ == "__main__":
    main()
