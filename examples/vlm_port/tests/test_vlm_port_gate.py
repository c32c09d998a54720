"""The vlm_port gate: the faithful port passes every claim; each planted bug (a mutation of the
candidate, named in a scratch copy of the spec) is caught by the claim meant for it, with a
message that names where; the README publishes the numbers the gate enforces."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from paritygate import children, load_spec, run_gate
from paritygate.cli import main

EXAMPLE = Path(__file__).resolve().parents[1]
MLX = 'options = { runtime = "mlx-vlm" }'


@pytest.fixture(scope="module")
def example(tmp_path_factory):
    """A scratch copy of the example: bugs are planted in its specs, never in committed files."""
    target = tmp_path_factory.mktemp("vlm") / "vlm_port"
    shutil.copytree(
        EXAMPLE,
        target,
        ignore=shutil.ignore_patterns("parity-reports", "tests", "__pycache__", "calibration"),
    )
    return target


def _planted(example: Path, bug: str) -> Path:
    text = (example / "parity.toml").read_text()
    assert MLX in text
    path = example / f"{bug}.toml"
    path.write_text(text.replace(MLX, MLX.replace(" }", f', bug = "{bug}" }}')))
    return path


def _failing(result) -> dict[tuple[str, str], list]:
    return {(v.claim_id, v.case): v.failures for v in result.verdicts if not v.passed}


def test_the_faithful_port_passes_every_claim(example):
    # tiny: 150 x 150 px grown to a 10 x 10 patch grid (25 image tokens); leetcode: the seed's
    # 3078 x 2114 screenshot shrunk to 12 x 18 (54 image tokens)
    spec = load_spec(example / "parity.toml")
    result = run_gate(spec, cases=["tiny", "leetcode"])
    assert result.passed, [f.describe() for v in result.verdicts for f in v.failures]
    assert {v.claim_id for v in result.verdicts} == set(spec.claims)


def test_the_image_after_the_text_fails_token_ids_where_the_image_should_start(example):
    # the seed's incident: the chat message's content built as [text, image], not [image, text]
    claims = ["token-ids", "image-grid", "pixel-values", "vision-embeds"]
    result = run_gate(
        load_spec(_planted(example, "image-after-text")),
        claims=[*claims, "answer-ids", "panel-edges"],
        cases=["tiny"],
    )
    assert not result.passed and result.exit_code == 1
    # the image itself is untouched: the ids (where its tokens sit) fail, and so does the answer
    failing = _failing(result)
    assert set(failing) == {("token-ids", "tiny"), ("answer-ids", "tiny"), ("panel-edges", "tiny")}
    (failure,) = failing["token-ids", "tiny"]
    assert (failure.metric, failure.where) == ("token_ids_equal", "prompt_ids position 34")
    assert failure.detail.startswith("actual 35 'D' vs expected 507 '<|vision_start|>'")
    assert "actual 'user\\nDetect the'" in failure.detail
    assert "expected 'user\\n<|vision_start|><|image_pad|>" in failure.detail
    assert "lengths 119 / 119" in failure.detail  # same length: a shape check sees nothing
    # the answer is no longer box JSON: both boxes missing, each a failure
    edges = failing["panel-edges", "tiny"]
    assert {(f.metric, f.where) for f in edges} == {
        ("missing_output", "boxes/question"),
        ("missing_output", "boxes/editor"),
    }


def test_a_bilinear_resize_fails_the_pixel_values_and_the_vision_embeddings(example):
    claims = ["token-ids", "image-grid", "pixel-values", "vision-embeds", "answer-ids"]
    result = run_gate(
        load_spec(_planted(example, "bilinear-resize")),
        claims=[*claims, "panel-edges"],
        cases=["tiny"],
    )
    assert not result.passed
    # same grid, same ids, same answer and boxes: only the pixels and what the tower makes of
    # them differ (a gate on the boxes alone would pass this preprocessing bug)
    assert set(_failing(result)) == {("pixel-values", "tiny"), ("vision-embeds", "tiny")}
    (pixels,) = _failing(result)["pixel-values", "tiny"]
    assert pixels.metric == "exact" and pixels.where.startswith("pixel_values at index ")
    (vision,) = _failing(result)["vision-embeds", "tiny"]
    assert vision.metric == "max_abs" and vision.where.startswith("vision_embeds at index ")
    assert vision.observed > 1e3 * vision.bound


def test_the_seed_s_30_px_gate_hides_what_the_published_claim_catches(example):
    # corner-aligned scaling of the answer's boxes: the answer is right, the far edges drift
    spec = _planted(example, "corner-scaling")
    cases = ["leetcode"]
    result = run_gate(load_spec(spec), claims=["answer-ids", "panel-edges"], cases=cases)
    assert set(_failing(result)) == {("panel-edges", "leetcode")}  # the answer is right
    failures = _failing(result)["panel-edges", "leetcode"]
    assert {f.metric for f in failures} == {"edge_delta"}
    worst = max(failures, key=lambda f: f.observed)
    assert (worst.where, worst.observed) == ("box editor, edge x2", 11.0)
    assert worst.detail == "actual 3040, expected 3029 px"
    # the same claim at the seed's old 30 px tolerance passes the same drift
    text = spec.read_text()
    at = text.index("[claims.panel-edges]")
    loose = example / "loose-30px.toml"
    loose.write_text(text[:at] + text[at:].replace("bound = 0\n", "bound = 30\n", 1))
    assert run_gate(load_spec(loose), claims=["panel-edges"], cases=cases).passed


def test_readme_publishes_the_numbers_the_gate_enforces(example, capsys):
    assert (
        main(
            ["claims", "check", str(EXAMPLE / "README.md"), "--spec", str(EXAMPLE / "parity.toml")]
        )
        == 0
    )
    assert "claims check: ok" in capsys.readouterr().out
    # a gate looser than the published vision bound is refused
    text = (example / "parity.toml").read_text()
    loose = example / "loose.toml"
    loose.write_text(text.replace("bound = 0.00029\n", "bound = 0.003\n", 1))
    assert main(["claims", "check", str(example / "README.md"), "--spec", str(loose)]) == 1
    out = capsys.readouterr().out
    assert (
        "claim vision-embeds: the gate's bound 0.003" in out and "looser than the published" in out
    )


def test_a_vision_cache_kept_between_calls_fails_the_state_claim(example):
    # paired: mlx-vlm called after another image (fullhd, the same 12 x 20 grid as laptop)
    # against a fresh mlx-vlm, both orders, byte for byte
    state = example / "parity-state.toml"
    assert run_gate(load_spec(state), cases=["laptop"]).passed
    text = state.read_text()
    faithful = 'options = { runtime = "mlx-vlm" }'
    assert faithful in text
    planted = example / "state-vision-cache.toml"
    planted.write_text(text.replace(faithful, faithful.replace(" }", ', bug = "vision-cache" }')))
    result = run_gate(load_spec(planted), cases=["laptop"])
    assert not result.passed
    failures = _failing(result)["fresh-state", "laptop"]
    assert {f.metric for f in failures} == {"byte_equality"}
    where = {f.where for f in failures}
    assert "forward check a: candidate vs baseline-before, vision_embeds" in where
    assert "forward check a: candidate vs baseline-before, boxes/editor" in where


def test_the_same_vision_cache_fails_the_stored_gate_on_the_later_image_of_a_grid(example):
    spec = _planted(example, "vision-cache")
    cases = ["fullhd", "laptop", "tiny"]  # fullhd first: laptop gets its features
    result = run_gate(load_spec(spec), claims=["vision-embeds", "panel-edges"], cases=cases)
    assert set(_failing(result)) == {("vision-embeds", "laptop"), ("panel-edges", "laptop")}
    edges = _failing(result)["panel-edges", "laptop"]
    assert max(f.observed for f in edges) > 100  # fullhd's boxes, scaled to laptop's size


def test_every_entry_point_agrees_and_a_raw_prompt_in_one_fails_the_cross_adapter_check(example):
    spec = example / "parity-adapters.toml"
    result = run_gate(load_spec(spec), cases=["tiny"])
    assert result.passed, [f.describe() for v in result.verdicts for f in v.failures]
    assert {v.candidate for v in result.verdicts} == {
        "mlx-vlm",
        "mlx-vlm-api",
        "mlx-vlm-cli",
        "mlx-vlm-server",
    }
    assert not children.live()  # the server was stopped with its runner
    # the API entry point without the chat template (the command line left out: seconds)
    text = spec.read_text()
    text = text[: text.index("[runners.mlx-vlm-cli]")] + text[text.index("[claims.answer-text]") :]
    api = 'options = { entry = "api" }'
    planted = example / "adapters-raw-prompt.toml"
    planted.write_text(text.replace(api, api.replace(" }", ', bug = "raw-prompt" }')))
    result = run_gate(load_spec(planted), cases=["tiny"])
    failing = {(v.claim_id, v.candidate) for v in result.verdicts if not v.passed}
    assert failing == {("cross-adapter:mlx-vlm", "mlx-vlm-api")}
    (verdict,) = [v for v in result.verdicts if not v.passed]
    assert {(f.metric, f.where) for f in verdict.failures} >= {
        ("missing_output", "boxes/editor"),
        ("missing_output", "boxes/question"),
    }


def test_one_image_token_too_few_fails_token_ids_where_the_image_ends(example):
    # the prompt carries 24 <|image_pad|> for tiny's 25 merged patches: mlx-vlm fills the 24 it
    # finds and drops the tower's last row without a word; the ids claim names the position
    result = run_gate(
        load_spec(_planted(example, "image-token-short")),
        claims=["token-ids", "image-grid", "pixel-values", "vision-embeds"],
        cases=["tiny"],
    )
    assert set(_failing(result)) == {("token-ids", "tiny")}  # the image itself is untouched
    (failure,) = _failing(result)["token-ids", "tiny"]
    assert (failure.metric, failure.where) == ("token_ids_equal", "prompt_ids position 59")
    assert failure.detail.startswith("actual 508 '<|vision_end|>' vs expected 510 '<|image_pad|>'")
    assert failure.detail.endswith("lengths 118 / 119")


def test_a_lanczos_resize_fails_the_pixel_values_and_the_vision_embeddings(example):
    # bicubic swapped for Lanczos: the grid and the ids agree, the pixels do not
    result = run_gate(
        load_spec(_planted(example, "lanczos-resize")),
        claims=["token-ids", "image-grid", "pixel-values", "vision-embeds"],
        cases=["tiny"],
    )
    assert set(_failing(result)) == {("pixel-values", "tiny"), ("vision-embeds", "tiny")}
    (vision,) = _failing(result)["vision-embeds", "tiny"]
    assert vision.where.startswith("vision_embeds at index ") and vision.observed > 1.0


def test_vision_rotary_ids_off_by_one_fail_the_vision_embeddings_unless_a_translation(example):
    # the (h, w) ids from the flat patch index with a row length of w + 1: the vision tower's
    # output moves (its input, the pixels and the grid, does not)
    claims = ["token-ids", "image-grid", "pixel-values", "vision-embeds"]
    result = run_gate(
        load_spec(_planted(example, "vision-rope-stride")), claims=claims, cases=["tiny"]
    )
    assert set(_failing(result)) == {("vision-embeds", "tiny")}
    (vision,) = _failing(result)["vision-embeds", "tiny"]
    assert vision.metric == "max_abs" and vision.observed > 1.0
    # every id one higher is a translation: rotary attention scores relative positions only,
    # so the output agrees within the float32 noise the claim allows, and the gate passes it
    shifted = run_gate(
        load_spec(_planted(example, "vision-rope-shift")), claims=["vision-embeds"], cases=["tiny"]
    )
    assert shifted.passed


def test_transformers_called_after_another_image_equals_a_fresh_call(example):
    # the reference side of the state claim: the model keeps rope_deltas between calls; laptop
    # follows fullhd (the same 12 x 20 grid), paired against a fresh model, byte for byte
    spec = example / "parity-state-transformers.toml"
    result = run_gate(load_spec(spec), cases=["laptop"])
    assert result.passed, [f.describe() for v in result.verdicts for f in v.failures]
    assert {v.claim_id for v in result.verdicts} == {"transformers-fresh-state"}


def test_stale_rope_deltas_in_the_reference_fail_its_state_claim(example):
    # the reference merges the image into the embeddings itself and calls the model with
    # inputs_embeds: transformers then adds the rope_deltas kept from the last generate (fullhd's)
    # to 1-D positions, where a fresh model adds none. Planted in both runners (the claim is
    # about one implementation's state): a translation of every position, which rotary attention
    # sees only as rounding, so the logits move by about 1e-4 and the tokens do not
    state = example / "parity-state-transformers.toml"
    text = state.read_text()
    faithful = 'runtime = "transformers"'
    assert text.count(faithful) == 2  # the fresh reference and the candidate
    planted = example / "state-stale-rope-deltas.toml"
    planted.write_text(text.replace(faithful, f'{faithful}, bug = "stale-rope-deltas"'))
    result = run_gate(load_spec(planted), cases=["laptop"])
    assert not result.passed and result.exit_code == 1
    failures = _failing(result)["transformers-fresh-state", "laptop"]
    assert {f.metric for f in failures} == {"byte_equality"}
    differing = {f.where.rsplit(", ", 1)[1]: f for f in failures}
    assert set(differing) == {"logits", "greedy_logits"}  # greedy_ids, the answer: unchanged
    (verdict,) = [v for v in result.verdicts if not v.passed]
    assert 0 < verdict.observed < 1e-2, [f.describe() for f in failures]  # the largest max-abs
    assert differing["logits"].detail.startswith("bytes: max_abs 0.0001")


def test_make_plants_each_bug_only_in_its_own_runtime(example_module):
    runners = example_module("runners")
    with pytest.raises(ValueError, match="unknown bug 'vision-cache' for transformers; expected"):
        runners.make("transformers", "vision-cache")
    with pytest.raises(ValueError, match="unknown bug 'stale-rope-deltas' for mlx-vlm"):
        runners.make("mlx-vlm", "stale-rope-deltas")
