"""Three runtimes of the same tiny Qwen2 model, one interface: ``run(case) -> dict``.

A case is ``{"kind": "chat", "messages": [...]}`` or ``{"kind": "plain", "text": "..."}``, plus
``"continuation"`` (text scored teacher-forced) and ``"max_new_tokens"`` (greedy length).
Each runner returns ``prompt_ids`` (after the chat template; no BOS, the model has none),
``continuation_ids``, ``logits`` (float32, [len(prompt) + len(continuation), vocab]: the
next-token logits at every position of prompt + continuation, teacher-forced), ``greedy_ids`` and
``greedy_logits`` (float32, [steps, vocab]: row i chose greedy_ids[i]); ids are int64 arrays.
These are the sequence-output names of docs/spec.md.

``make(runtime, gguf=None, bug=None)`` is the factory ``parity.toml`` names. ``bug`` plants one of
the bugs the tests gate (``BUGS``), always as a mutation of the candidate, never of a committed
file: a chat template that writes the system message after the user's text, a config edit in a
scratch copy of the model folder (rope_theta, rms_norm_eps), one attention head's scale, or a
llama.cpp KV cache left over from the previous call.

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


# A chat template with a planted bug: the system message is written after the first user turn.
SYSTEM_AFTER_USER_TEMPLATE = (
    "{%- for message in messages if message['role'] != 'system' %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- if loop.first %}{%- for s in messages if s['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + s['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}{%- endif %}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

BUGS = ("system-after-user", "rope-theta", "rms-eps", "head-scale", "kv-cache")


def prompt_text(tokenizer: Any, case: dict, template: str | None = None) -> str:
    if case["kind"] == "chat":
        return tokenizer.apply_chat_template(
            case["messages"], tokenize=False, add_generation_prompt=True, chat_template=template
        )
    return case["text"]


def _ids(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).reshape(-1)


def scratch_model(edit: dict[str, Any]) -> Path:
    """A scratch copy of the model folder (GGUF files left out) with ``edit`` applied to
    config.json: a config bug, planted without touching the committed files."""
    import json
    import shutil
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="lm-port-model-"))
    for p in MODEL_DIR.iterdir():
        if not p.name.endswith(".gguf"):
            shutil.copy(p, folder / p.name)
    config = json.loads((folder / "config.json").read_text())
    for key, value in edit.items():
        config[key] = value
        if key in config.get("rope_parameters", {}):
            config["rope_parameters"][key] = value
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    return folder


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
                output_logits=True,
                return_dict_in_generate=True,
            )
        steps = torch.cat([step.float() for step in out.logits]).numpy()
        return dict(
            prompt_ids=_ids(prompt),
            continuation_ids=_ids(cont),
            logits=logits.astype(np.float32),
            greedy_ids=_ids(out.sequences[0, len(prompt) :].tolist()),
            greedy_logits=steps.astype(np.float32),
        )


class MlxRunner:
    name = "mlx-lm"

    def __init__(
        self,
        model_dir: Path = MODEL_DIR,
        template: str | None = None,
        head_scale: float = 1.0,
        device: str = "cpu",
    ):
        import mlx.core as mx
        from mlx_lm import load

        if device not in ("cpu", "gpu"):
            raise ValueError(f"unknown MLX device {device!r}; expected cpu or gpu")
        mx.set_default_device(mx.cpu if device == "cpu" else mx.gpu)
        self.mx = mx
        self.template = template
        self.model, self.tokenizer = load(str(model_dir))
        if head_scale != 1.0:  # one head's attention logits scaled: its query rows of layer 0
            attn = self.model.model.layers[0].self_attn
            head_dim = attn.q_proj.weight.shape[0] // attn.n_heads
            rows = mx.arange(attn.q_proj.weight.shape[0])
            factor = mx.where((rows >= head_dim) & (rows < 2 * head_dim), head_scale, 1.0)
            attn.q_proj.weight = attn.q_proj.weight * factor[:, None]
            attn.q_proj.bias = attn.q_proj.bias * factor

    def encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def run(self, case: dict) -> dict:
        mx = self.mx
        prompt = self.encode(prompt_text(self.tokenizer, case, self.template))
        cont = self.encode(case["continuation"])
        logits = np.array(self.model(mx.array([prompt + cont]))[0].astype(mx.float32))
        greedy: list[int] = []
        rows = []
        ids = list(prompt)
        for _ in range(case["max_new_tokens"]):  # full recompute each step: no cache state
            row = self.model(mx.array([ids]))[0, -1].astype(mx.float32)
            rows.append(np.array(row))
            nxt = int(np.argmax(rows[-1]))
            greedy.append(nxt)
            ids.append(nxt)
        return dict(
            prompt_ids=_ids(prompt),
            continuation_ids=_ids(cont),
            logits=logits,
            greedy_ids=_ids(greedy),
            greedy_logits=np.stack(rows),
        )


class LlamaCppRunner:
    name = "llama.cpp"

    def __init__(
        self, gguf: str = "tiny-qwen2-f32.gguf", model_dir: Path = MODEL_DIR, reset: bool = True
    ):
        from llama_cpp import Llama
        from transformers import AutoTokenizer

        self.reset = reset  # False: the planted bug, a KV cache left from the previous call
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
        if self.reset:
            self.llm.reset()
        start = self.llm.n_tokens
        self.llm.eval(prompt + cont)
        logits = np.array(self.llm.scores[start : start + len(prompt) + len(cont)], np.float32)
        self.llm.reset()
        greedy: list[int] = []
        rows = []
        self.llm.eval(prompt)
        for _ in range(case["max_new_tokens"]):
            rows.append(np.array(self.llm.scores[self.llm.n_tokens - 1], dtype=np.float32))
            nxt = int(np.argmax(rows[-1]))
            greedy.append(nxt)
            self.llm.eval([nxt])
        if self.reset:
            self.llm.reset()
        return dict(
            prompt_ids=_ids(prompt),
            continuation_ids=_ids(cont),
            logits=logits,
            greedy_ids=_ids(greedy),
            greedy_logits=np.stack(rows),
        )


def make(
    runtime: str,
    gguf: str | None = None,
    bug: str | None = None,
    fresh: bool = False,
    device: str = "cpu",
) -> Any:
    """The runner ``parity.toml`` names: ``runtime`` is transformers, mlx-lm or llama.cpp;
    ``gguf`` the llama.cpp model file; ``bug`` one of ``BUGS`` planted in the candidate;
    ``device`` the MLX device of mlx-lm (``gpu``: MLX CUDA or Metal, gpu/run_gpu.sh).
    ``fresh``: every call builds a new runtime (nothing can be left from an earlier call): the
    reference of the leaked-state claim in parity-state.toml."""
    if fresh:
        return lambda case: make(runtime, gguf, bug)(case)
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}; expected one of {', '.join(BUGS)}")
    folder = MODEL_DIR
    if bug == "rope-theta":
        folder = scratch_model({"rope_theta": 1e5})
    elif bug == "rms-eps":
        folder = scratch_model({"rms_norm_eps": 1e-3})
    if runtime == "transformers":
        runner: Any = TransformersRunner(folder)
    elif runtime == "mlx-lm":
        runner = MlxRunner(
            folder,
            template=SYSTEM_AFTER_USER_TEMPLATE if bug == "system-after-user" else None,
            head_scale=1.5 if bug == "head-scale" else 1.0,
            device=device,
        )
    elif runtime == "llama.cpp":
        runner = LlamaCppRunner(gguf or "tiny-qwen2-f32.gguf", reset=bug != "kv-cache")
    else:
        raise ValueError(f"unknown runtime {runtime!r}")
    return runner.run


# A prompt that is none of the cases: run first, so that the case's call comes after another.
OTHER_PROMPT = {
    "kind": "plain",
    "text": "import sys\n\nfor line in sys.stdin:\n",
    "continuation": "    print(line)\n",
    "max_new_tokens": 8,
}


def after_other_prompt(runtime: str, gguf: str | None = None, bug: str | None = None) -> Any:
    """One runtime whose every call on a case follows a call on another prompt: what a service
    does. The leaked-state claim holds it byte-equal to a fresh call."""
    run = make(runtime, gguf, bug)

    def second_call(case: dict) -> dict:
        run(OTHER_PROMPT)
        return run(case)

    return second_call


# Mutated candidates for ``paritygate calibrate --model-mutation NAME=runners:with_...``: each is
# built with the candidate runner's options and plants one bug, the signal calibration measures.
def with_rms_eps(runtime: str, gguf: str | None = None, bug: str | None = None) -> Any:
    return make(runtime, gguf, "rms-eps")


def with_head_scale(runtime: str, gguf: str | None = None, bug: str | None = None) -> Any:
    return make(runtime, gguf, "head-scale")


def with_rope_theta(runtime: str, gguf: str | None = None, bug: str | None = None) -> Any:
    return make(runtime, gguf, "rope-theta")


def with_kv_cache(runtime: str, gguf: str | None = None, bug: str | None = None) -> Any:
    return make(runtime, gguf, "kv-cache")


def after_other_prompt_with_kv_cache(
    runtime: str, gguf: str | None = None, bug: str | None = None
) -> Any:
    return after_other_prompt(runtime, gguf, "kv-cache")
