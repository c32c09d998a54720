"""The pinned model files, and the three runtimes agreeing on two cases (chat and plain)."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

CASES = [
    {
        "kind": "chat",
        "messages": [{"role": "user", "content": "Explain join."}],
        "continuation": "Return a string.<|im_end|>",
        "max_new_tokens": 12,
    },
    {
        "kind": "plain",
        "text": "def main():\n    parser = argparse.ArgumentParser(",
        "continuation": "    return os.path.join(path, name)\n",
        "max_new_tokens": 12,
    },
]


@pytest.fixture(scope="module")
def runners(example_module):
    return example_module("runners")


@pytest.fixture(scope="module")
def outputs(runners):
    made = [runners.TransformersRunner(), runners.MlxRunner(), runners.LlamaCppRunner()]
    return {r.name: [r.run(c) for c in CASES] for r in made}


def _log_softmax(x):
    x = x.astype(np.float64)
    m = x.max(-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(-1, keepdims=True))


def _kl_max(ref, cand):
    lr, lc = _log_softmax(ref), _log_softmax(cand)
    return float((np.exp(lr) * (lr - lc)).sum(-1).max())


def test_model_files_match_their_pinned_sha256(runners):
    sums = json.loads((runners.MODEL_DIR / "SHA256SUMS.json").read_text())
    assert "model.safetensors" in sums and "tiny-qwen2-f32.gguf" in sums
    for name, digest in sums.items():
        data = (runners.MODEL_DIR / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, name
    assert (runners.MODEL_DIR / "model.safetensors").stat().st_size <= 10_000_000


def test_runtimes_agree_on_token_ids_and_greedy(outputs):
    ref = outputs["transformers"]
    for name in ("mlx-lm", "llama.cpp"):
        for r, c in zip(ref, outputs[name]):
            assert c["prompt_ids"] == r["prompt_ids"], name
            assert c["continuation_ids"] == r["continuation_ids"], name
            assert c["greedy_ids"] == r["greedy_ids"], name
    chat_ids = ref[0]["prompt_ids"]
    assert chat_ids[0] == 2046 and chat_ids[-3] == 2046  # <|im_start|> is one special token


def test_teacher_forced_logits_close(outputs):
    # measured 2026-12-04, Linux x86-64 CPU: mlx-lm max-abs 3.6e-6, KL max 9e-13;
    # llama.cpp f32 max-abs 2.2e-3, KL max 1.5e-7. Bounds leave ~10x headroom.
    for name, max_abs, max_kl in (("mlx-lm", 5e-5, 1e-9), ("llama.cpp", 2e-2, 1e-5)):
        for r, c in zip(outputs["transformers"], outputs[name]):
            assert c["logits"].shape == r["logits"].shape
            assert np.abs(c["logits"] - r["logits"]).max() <= max_abs, name
            assert _kl_max(r["logits"], c["logits"]) <= max_kl, name


def test_a_wrong_rope_theta_in_mlx_is_caught(runners, tmp_path):
    # the drift this example found: mlx-lm reads top-level rope_theta only (default 1e6)
    import shutil

    for p in runners.MODEL_DIR.iterdir():
        if not p.name.endswith(".gguf"):
            shutil.copy(p, tmp_path / p.name)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["rope_theta"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    bad = runners.MlxRunner(tmp_path).run(CASES[1])
    ref = runners.TransformersRunner().run(CASES[1])
    assert np.abs(bad["logits"] - ref["logits"]).max() > 0.1
    assert _kl_max(ref["logits"], bad["logits"]) > 1e-3
