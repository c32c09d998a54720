"""The lm_port gate: the faithful ports pass; each planted bug (always a mutation of the
candidate, in a scratch copy of the example) is caught by the claim meant for it, with a message
that names the position; 4-bit fails the strict claim and passes its own; the README publishes
the numbers the gate enforces."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from paritygate import load_spec, run_gate
from paritygate.cli import main

EXAMPLE = Path(__file__).resolve().parents[1]
MLX = 'options = { runtime = "mlx-lm" }'
F32 = 'options = { runtime = "llama.cpp", gguf = "tiny-qwen2-f32.gguf" }'


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """A scratch copy of the example: bugs are planted in its specs, never in committed files."""
    target = tmp_path_factory.mktemp("lm") / "lm_port"
    shutil.copytree(
        EXAMPLE,
        target,
        ignore=shutil.ignore_patterns("parity-reports", "tests", "__pycache__", "calibration"),
    )
    return target


def _planted(example: Path, spec: str, faithful: str, bug: str, name: str) -> Path:
    text = (example / spec).read_text()
    assert faithful in text
    planted = faithful.replace(" }", f', bug = "{bug}" }}')
    path = example / name
    path.write_text(text.replace(faithful, planted))
    return path


def _failing(result) -> dict[tuple[str, str, str], list]:
    return {(v.claim_id, v.candidate, v.case): v.failures for v in result.verdicts if not v.passed}


def test_the_faithful_ports_pass_every_claim(example):
    """The whole gate, as the README runs it: every claim on every gated case."""
    result = run_gate(load_spec(example / "parity.toml"))
    assert result.passed, [f.describe() for v in result.verdicts for f in v.failures]
    assert {v.claim_id for v in result.verdicts} == set(load_spec(example / "parity.toml").claims)


def test_system_message_after_the_user_text_fails_token_ids_at_its_position(example):
    spec = _planted(example, "parity.toml", MLX, "system-after-user", "template.toml")
    result = run_gate(load_spec(spec), claims=["token-ids"], cases=["chat-01-split-multi"])
    assert not result.passed and result.exit_code == 1
    failing = _failing(result)
    assert set(failing) == {("token-ids", "mlx-lm", "chat-01-split-multi")}
    (failure,) = failing["token-ids", "mlx-lm", "chat-01-split-multi"]
    # '<|im_start|>' then the role: 'user' where the reference has 's' (of 'system')
    assert (failure.metric, failure.where) == ("token_ids_equal", "prompt_ids position 1")
    assert failure.detail.startswith("actual 464 'user' vs expected 82 's'; context from position")
    assert "actual '<|im_start|>user\\nExplain split'" in failure.detail
    assert "expected '<|im_start|>system\\nY'" in failure.detail


@pytest.mark.parametrize("bug", ["rope-theta", "rms-eps", "head-scale"])
def test_a_model_bug_in_mlx_fails_the_teacher_forced_claims(example, bug):
    spec = _planted(example, "parity.toml", MLX, bug, f"{bug}.toml")
    claims = ["mlx-kl", "token-ids"]
    result = run_gate(load_spec(spec), claims=claims, cases=["plain-00"])
    assert not result.passed
    assert set(_failing(result)) == {("mlx-kl", "mlx-lm", "plain-00")}  # the ids still agree
    (failure,) = _failing(result)["mlx-kl", "mlx-lm", "plain-00"]
    assert failure.metric == "kl_max" and failure.where.startswith("logits position ")
    assert failure.observed > 1e3 * failure.bound
    assert "reference top-1" in failure.detail and "candidate top-1" in failure.detail


def test_a_kv_cache_left_from_the_previous_call_fails_the_state_claim(example):
    spec = _planted(example, "parity-state.toml", F32, "kv-cache", "state.toml")
    result = run_gate(load_spec(spec), cases=["plain-00"])
    assert not result.passed
    assert set(_failing(result)) == {("f32-fresh-state", "llama-f32", "plain-00")}
    failures = _failing(result)["f32-fresh-state", "llama-f32", "plain-00"]
    assert {f.metric for f in failures} == {"byte_equality"}
    # teacher-forced logits conditioned on the other prompt's tokens (the greedy run resets)
    assert {f.where for f in failures} == {
        "forward check a: candidate vs baseline-before, logits",
        "reversed check a: candidate-before vs baseline, logits",
    }
    assert all("first difference at index (0,0)" in f.detail for f in failures)
    # in parity.toml the same bug passes the first case and fails every later one
    spec = _planted(example, "parity.toml", F32, "kv-cache", "kv.toml")
    result = run_gate(load_spec(spec), claims=["f32-kl"], cases=["plain-00", "plain-03"])
    assert set(_failing(result)) == {("f32-kl", "llama-f32", "plain-03")}


def test_four_bit_fails_the_strict_claim_and_passes_its_own(example):
    text = (example / "parity.toml").read_text()
    at = text.index("[claims.q8-kl]")
    strict = 'candidates = ["llama-q8"]'
    at = text.index(strict, at)
    path = example / "strict.toml"
    path.write_text(text[:at] + 'candidates = ["llama-q8", "llama-q4"]' + text[at + len(strict) :])
    result = run_gate(load_spec(path), claims=["q8-kl", "q4-kl"], cases=["plain-17"])
    assert set(_failing(result)) == {("q8-kl", "llama-q4", "plain-17")}
    (failure,) = _failing(result)["q8-kl", "llama-q4", "plain-17"]
    assert failure.metric == "kl_max" and failure.observed > failure.bound


def test_readme_publishes_the_numbers_the_gate_enforces(example, capsys):
    for doc, spec in (("README.md", "parity.toml"), ("STATE.md", "parity-state.toml")):
        assert main(["claims", "check", str(EXAMPLE / doc), "--spec", str(EXAMPLE / spec)]) == 0
        assert "claims check: ok" in capsys.readouterr().out
    # a gate looser than the published 4-bit bound is refused
    text = (example / "parity.toml").read_text()
    loose = example / "loose.toml"
    loose.write_text(text.replace("bound = 0.068\n", "bound = 0.1\n", 1))
    assert main(["claims", "check", str(example / "README.md"), "--spec", str(loose)]) == 1
    out = capsys.readouterr().out
    assert "claim q4-kl: the gate's bound 0.1" in out and "looser than the published" in out
