"""The pinned model files, and the three runtimes agreeing on two cases (chat and plain)."""

from __future__ import annotations

import hashlib
import json

import pytest

from paritygate.sequence import compare_teacher_forced, compare_token_ids

CASE_NAMES = ["chat-00-join", "chat-01-split-multi", "plain-00", "plain-17"]
# plain-17 writes <|endoftext|> (the pad id) inside the text: transformers' generate() without an
# explicit attention mask masks it, and the greedy runs part at step 0


@pytest.fixture(scope="module")
def cases(runners):
    folder = runners.MODEL_DIR.parent / "cases"
    return [json.loads((folder / f"{n}.json").read_text()) for n in CASE_NAMES]


@pytest.fixture(scope="module")
def runners(example_module):
    return example_module("runners")


@pytest.fixture(scope="module")
def outputs(runners, cases):
    made = [runners.TransformersRunner(), runners.MlxRunner(), runners.LlamaCppRunner()]
    return {r.name: [r.run(c) for c in cases] for r in made}


def test_model_files_match_their_pinned_sha256(runners):
    sums = json.loads((runners.MODEL_DIR / "SHA256SUMS.json").read_text())
    assert "model.safetensors" in sums and "tiny-qwen2-f32.gguf" in sums
    for name, digest in sums.items():
        data = (runners.MODEL_DIR / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == digest, name
    assert (runners.MODEL_DIR / "model.safetensors").stat().st_size <= 10_000_000


def test_cases_match_their_pinned_sha256(runners):
    folder = runners.MODEL_DIR.parent / "cases"
    sums = json.loads((folder / "SHA256SUMS.json").read_text())
    assert len(sums) >= 50
    assert {json.loads((folder / n).read_text())["kind"] for n in sums} == {"chat", "plain"}
    for name, digest in sums.items():
        assert hashlib.sha256((folder / name).read_bytes()).hexdigest() == digest, name


def test_runtimes_agree_on_token_ids_and_greedy(outputs):
    ref = outputs["transformers"]
    for name in ("mlx-lm", "llama.cpp"):
        for case, r, c in zip(CASE_NAMES, ref, outputs[name]):
            for key in ("prompt_ids", "continuation_ids", "greedy_ids"):
                result = compare_token_ids(c[key], r[key], path=f"{name} {case} {key}")
                assert result, result.describe()
    chat_ids = ref[0]["prompt_ids"]
    assert chat_ids[0] == 2046 and chat_ids[-3] == 2046  # <|im_start|> is one special token


def test_teacher_forced_logits_close(outputs):
    # measured 2026-12-04 over all 64 cases, Linux x86-64 CPU: mlx-lm max-abs 6.7e-6, KL max
    # 2.1e-12; llama.cpp f32 max-abs 3.4e-3, KL max 3.8e-7. Bounds leave about 10x headroom.
    bounds = {"mlx-lm": (5e-5, 1e-10), "llama.cpp": (3e-2, 5e-6)}
    for name, (max_abs, max_kl) in bounds.items():
        for case, r, c in zip(CASE_NAMES, outputs["transformers"], outputs[name]):
            result = compare_teacher_forced(
                r["logits"],
                c["logits"],
                max_abs=max_abs,
                max_kl=max_kl,
                min_top1_agreement=1.0,
                path=f"{name} {case}",
            )
            assert result, result.describe()


def test_a_wrong_rope_theta_in_mlx_is_caught(runners, cases, tmp_path):
    # the drift this example found: mlx-lm reads top-level rope_theta only (default 1e6)
    import shutil

    for p in runners.MODEL_DIR.iterdir():
        if not p.name.endswith(".gguf"):
            shutil.copy(p, tmp_path / p.name)
    config = json.loads((tmp_path / "config.json").read_text())
    del config["rope_theta"]
    (tmp_path / "config.json").write_text(json.dumps(config))
    bad = runners.MlxRunner(tmp_path).run(cases[2])
    ref = runners.TransformersRunner().run(cases[2])
    result = compare_teacher_forced(ref["logits"], bad["logits"], max_abs=5e-5, max_kl=1e-10)
    assert not result
    assert {f.metric for f in result.failures} == {"max_abs", "kl_divergence"}
    assert result.kl_max > 1e-3 and "position" in result.failures[1].where
