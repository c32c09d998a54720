"""Three runtimes of the same tiny Qwen2 model, one interface: ``run(case) -> dict``.

A case is ``{"kind": "chat", "messages": [...]}`` or ``{"kind": "plain", "text": "..."}``, plus
``"continuation"`` (text scored teacher-forced) and ``"max_new_tokens"`` (greedy length).
Each runner returns ``prompt_ids`` (after the chat template; no BOS, the model has none),
``continuation_ids``, ``logits`` (float32, [len(prompt) + len(continuation), vocab]: the
next-token logits at every position of prompt + continuation, teacher-forced) and ``greedy_ids``.

Determinism: every runtime on CPU in float32, greedy decoding (argmax, no sampling), 2 threads;
torch eager (no compile), MLX on ``mx.cpu``; llama.cpp with ``logits_all=True`` and its state
reset before every evaluation (a KV cache left from the previous call is a drift source).
The prompt is tokenized once, by the Hugging Face tokenizer, for transformers and mlx-lm (mlx-lm
wraps the same tokenizer); llama.cpp tokenizes with its own tokenizer, and ``prompt_ids`` from it
are what the token-id comparison checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

MODEL_DIR = Path(__file__).resolve().parent / "model"
THREADS = 2


def prompt_text(tokenizer: Any, case: dict) -> str:
    if case["kind"] == "chat":
        return tokenizer.apply_chat_template(
            case["messages"], tokenize=False, add_generation_prompt=True
        )
    return case["text"]


class TransformersRunner:
    name = "transformers"

    def __init__(self, model_dir: Path = MODEL_DIR):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        torch.set_num_threads(THREADS)
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, attn_implementation="eager"
        ).eval()

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def run(self, case: dict) -> dict:
        torch = self.torch
        prompt = self.encode(prompt_text(self.tokenizer, case))
        cont = self.encode(case["continuation"])
        with torch.no_grad():
            logits = self.model(torch.tensor([prompt + cont])).logits[0].float().numpy()
            # an explicit mask: without one, generate() masks every prompt token equal to the
            # pad id (<|endoftext|> written in the text), and step 0 already differs
            out = self.model.generate(
                torch.tensor([prompt]),
                attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                max_new_tokens=case["max_new_tokens"],
                do_sample=False,
                eos_token_id=None,
                pad_token_id=self.tokenizer.pad_token_id,
            )
        return dict(
            prompt_ids=prompt,
            continuation_ids=cont,
            logits=logits.astype(np.float32),
            greedy_ids=out[0, len(prompt) :].tolist(),
        )


class MlxRunner:
    name = "mlx-lm"

    def __init__(self, model_dir: Path = MODEL_DIR):
        import mlx.core as mx
        from mlx_lm import load

        mx.set_default_device(mx.cpu)
        self.mx = mx
        self.model, self.tokenizer = load(str(model_dir))

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def run(self, case: dict) -> dict:
        mx = self.mx
        prompt = self.encode(prompt_text(self.tokenizer, case))
        cont = self.encode(case["continuation"])
        logits = np.array(self.model(mx.array([prompt + cont]))[0].astype(mx.float32))
        greedy: list[int] = []
        ids = list(prompt)
        for _ in range(case["max_new_tokens"]):  # full recompute each step: no cache state
            nxt = int(mx.argmax(self.model(mx.array([ids]))[0, -1]).item())
            greedy.append(nxt)
            ids.append(nxt)
        return dict(prompt_ids=prompt, continuation_ids=cont, logits=logits, greedy_ids=greedy)


class LlamaCppRunner:
    name = "llama.cpp"

    def __init__(self, gguf: str = "tiny-qwen2-f32.gguf", model_dir: Path = MODEL_DIR):
        from llama_cpp import Llama
        from transformers import AutoTokenizer

        self.template = AutoTokenizer.from_pretrained(model_dir)  # the chat template only
        self.llm = Llama(
            str(model_dir / gguf),
            logits_all=True,
            n_ctx=512,
            n_threads=THREADS,
            seed=0,
            verbose=False,
        )

    def encode(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode("utf-8"), add_bos=False, special=True)

    def run(self, case: dict) -> dict:
        prompt = self.encode(prompt_text(self.template, case))
        cont = self.encode(case["continuation"])  # special=True: HF parses "<|im_end|>" too
        self.llm.reset()
        self.llm.eval(prompt + cont)
        logits = np.array(self.llm.scores[: len(prompt) + len(cont)], dtype=np.float32)
        self.llm.reset()
        greedy: list[int] = []
        self.llm.eval(prompt)
        for _ in range(case["max_new_tokens"]):
            nxt = int(np.argmax(self.llm.scores[self.llm.n_tokens - 1]))
            greedy.append(nxt)
            self.llm.eval([nxt])
        self.llm.reset()
        return dict(prompt_ids=prompt, continuation_ids=cont, logits=logits, greedy_ids=greedy)
