"""Train the example's tiny Qwen2 language model on CPU and write it in the Hugging Face layout.

Not part of CI. The committed ``model/`` came from

    python train.py            # about 2 minutes on 2 shared CPU cores (figures in README.md)

Text: the Python standard library's own source files (every machine with Python has them):
the top-level ``*.py`` files of ``sysconfig.get_paths()["stdlib"]`` in sorted name order, read
until ``--chars`` characters. A different Python patch release holds slightly different files,
so a retrained model differs from the committed one; the committed weights are pinned by sha256
(``model/SHA256SUMS.json``) and are the reference, not this script's output elsewhere.

Chat data: for every documented function in those files, a conversation in the Qwen chat format
``<|im_start|>user\\nExplain NAME.<|im_end|>\\n``
``<|im_start|>assistant\\nFIRST DOCSTRING LINE<|im_end|>``,
so that the chat template's special tokens are learned, not only present in the vocabulary.

Tokenizer: byte-level BPE trained by ``tokenizers`` with Qwen2's pre-tokenizer regex (the one
llama.cpp implements as the ``qwen2`` pre-tokenizer), NFC normalization, no BOS token, and the
special tokens ``<|endoftext|>``, ``<|im_start|>``, ``<|im_end|>``.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import sysconfig
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL_DIR = HERE / "model"

# Qwen2's split regex (tokenizer.json of Qwen/Qwen2.5-*): llama.cpp's "qwen2" pre-tokenizer.
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

CONFIG = dict(
    vocab_size=2048,
    hidden_size=128,
    intermediate_size=320,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=1024,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    use_sliding_window=False,
    hidden_act="silu",
    attention_dropout=0.0,
)


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(p for p in root.glob("*.py") if p.is_file())


def read_corpus(max_chars: int) -> tuple[str, list[str], list[str]]:
    """(plain text, chat conversations, file names used), deterministic for one stdlib."""
    parts: list[str] = []
    chats: list[str] = []
    names: list[str] = []
    total = 0
    for path in stdlib_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        parts.append(text)
        names.append(path.name)
        total += len(text)
        try:
            tree = ast.parse(text)
        except SyntaxError:
            tree = None
        for node in ast.walk(tree) if tree is not None else ():
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
                doc = ast.get_docstring(node)
                if doc and not node.name.startswith("_"):
                    line = doc.strip().splitlines()[0].strip()
                    if 8 <= len(line) <= 200:
                        chats.append(
                            f"<|im_start|>user\nExplain {node.name}.<|im_end|>\n"
                            f"<|im_start|>assistant\n{line}<|im_end|>\n"
                        )
        if total >= max_chars:
            break
    return "".join(parts), chats, names


def train_tokenizer(texts: list[str], vocab_size: int):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

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
        vocab_size=vocab_size - len(SPECIAL_TOKENS),
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_special_tokens(SPECIAL_TOKENS)
    return tok


def save_tokenizer(tok, out: Path) -> None:
    from transformers import PreTrainedTokenizerFast

    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token=None,
        unk_token=None,
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
        model_max_length=CONFIG["max_position_embeddings"],
        clean_up_tokenization_spaces=False,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    cfg_path = out / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["add_bos_token"] = False
    cfg["chat_template"] = CHAT_TEMPLATE
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    (out / "chat_template.jinja").unlink(missing_ok=True)


def add_top_level_rope_theta(path: Path) -> None:
    """Write ``rope_theta`` at the top level of config.json too.

    transformers 5 writes it only inside ``rope_parameters``; mlx-lm 0.32.2's qwen2 reads the top
    level and otherwise silently uses its default 1e6: measured before this fix, transformers vs
    mlx-lm teacher-forced logits differed by max-abs 3.6 and KL mean 0.037, top-1 agreeing on
    only 88% of positions, while llama.cpp (whose converter reads ``rope_parameters``) agreed.
    """
    config = json.loads(path.read_text())
    config["rope_theta"] = config["rope_parameters"]["rope_theta"]
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chars", type=int, default=1_500_000, help="plain-text budget")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=MODEL_DIR)
    args = parser.parse_args()

    import numpy as np
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    random.seed(args.seed)
    start = time.perf_counter()
    text, chats, names = read_corpus(args.chars)
    tok = train_tokenizer([text, *chats], CONFIG["vocab_size"])
    t_tok = time.perf_counter() - start

    ids = np.asarray(tok.encode(text).ids, dtype=np.int64)
    chat_ids = [tok.encode(c).ids for c in chats]
    eos = tok.token_to_id("<|endoftext|>")
    im_start = tok.token_to_id("<|im_start|>")
    im_end = tok.token_to_id("<|im_end|>")
    config = Qwen2Config(
        **CONFIG, bos_token_id=eos, eos_token_id=im_end, pad_token_id=eos, dtype="float32"
    )
    model = Qwen2ForCausalLM(config)
    n_params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=args.lr, total_steps=args.steps, pct_start=0.1
    )
    rng = np.random.default_rng(args.seed)

    def batch() -> torch.Tensor:
        rows = []
        for _ in range(args.batch):
            if chat_ids and rng.random() < 0.3:  # a packed run of conversations
                row: list[int] = []
                while len(row) < args.seq:
                    row.extend(chat_ids[int(rng.integers(len(chat_ids)))])
                rows.append(row[: args.seq])
            else:
                at = int(rng.integers(0, len(ids) - args.seq))
                rows.append(ids[at : at + args.seq].tolist())
        return torch.tensor(rows, dtype=torch.long)

    log = []
    model.train()
    t0 = time.perf_counter()
    for step in range(args.steps):
        x = batch()
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if step % 50 == 0 or step == args.steps - 1:
            log.append({"step": step, "loss": round(float(loss.detach()), 4)})
            print(f"step {step} loss {float(loss.detach()):.4f} ({time.perf_counter() - t0:.0f} s)")
    t_train = time.perf_counter() - t0

    model.eval()
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    add_top_level_rope_theta(args.out / "config.json")
    save_tokenizer(tok, args.out)
    GenerationConfig(
        bos_token_id=eos, eos_token_id=[im_end, eos], pad_token_id=eos, do_sample=False
    ).save_pretrained(args.out)
    info = {
        "python_stdlib_files": len(names),
        "first_file": names[0],
        "last_file": names[-1],
        "plain_tokens": int(len(ids)),
        "chat_conversations": len(chats),
        "parameters": int(n_params),
        "steps": args.steps,
        "batch": args.batch,
        "seq": args.seq,
        "lr": args.lr,
        "seed": args.seed,
        "threads": args.threads,
        "tokenizer_seconds": round(t_tok, 1),
        "train_seconds": round(t_train, 1),
        "special_token_ids": {"<|endoftext|>": eos, "<|im_start|>": im_start, "<|im_end|>": im_end},
        "loss": log,
    }
    (args.out / "train_log.json").write_text(json.dumps(info, indent=2) + "\n")
    print(json.dumps({k: v for k, v in info.items() if k != "loss"}, indent=2))


if __name__ == "__main__":
    main()
