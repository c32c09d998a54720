"""Converted weights and canonical cases: pinned, reproducible, equal to their sources."""

from __future__ import annotations

import json

import numpy as np
import pytest


def test_converted_tensors_equal_the_torchscript_state_dict(convert_weights):
    import torch
    from safetensors.numpy import load_file

    stored = load_file(str(convert_weights.WEIGHTS_PATH))
    model = torch.jit.load(str(convert_weights.torchscript_path()), map_location="cpu")
    state = model.state_dict()
    assert len(state) == len(stored) == len(convert_weights.EXPECTED_SHAPES) == 30
    for torch_name, tensor in state.items():
        name = convert_weights.map_name(torch_name)
        assert stored[name].shape == tuple(tensor.shape) == convert_weights.EXPECTED_SHAPES[name]
        np.testing.assert_array_equal(stored[name], tensor.numpy(), err_msg=name)


def test_manifest_pins_the_weights_and_their_source(convert_weights):
    import hashlib

    manifest = json.loads(convert_weights.MANIFEST_PATH.read_text())
    assert manifest["sha256"] == convert_weights.sha256_file(convert_weights.WEIGHTS_PATH)
    assert (
        manifest["source"]["sha256"]
        == hashlib.sha256(convert_weights.torchscript_path().read_bytes()).hexdigest()
    )
    assert manifest["source"]["version"] == "6.2.3"


def test_check_mode_detects_a_changed_tensor(convert_weights, tmp_path, monkeypatch, capsys):
    from safetensors.numpy import load_file, save_file

    assert convert_weights.main(["--check"]) == 0
    tensors = load_file(str(convert_weights.WEIGHTS_PATH))
    tensors["16k.decoder.rnn.bias_hh"][3] += 1e-3
    tampered = tmp_path / "w.safetensors"
    save_file(tensors, str(tampered))
    monkeypatch.setattr(convert_weights, "WEIGHTS_PATH", tampered)
    assert convert_weights.main(["--check"]) == 1
    assert "16k.decoder.rnn.bias_hh" in capsys.readouterr().out


def test_unknown_tensor_names_and_wrong_shapes_are_rejected(convert_weights):
    with pytest.raises(ValueError, match="unexpected TorchScript tensor 'other.weight'"):
        convert_weights.map_name("other.weight")


def test_the_shipped_safetensors_file_is_not_the_torchscript_weights(convert_weights):
    # Why the port converts from the TorchScript file: the wheel's safetensors holds older weights.
    from safetensors.numpy import load_file

    old = load_file(str(convert_weights.torchscript_path().with_name("silero_vad_16k.safetensors")))
    new = load_file(str(convert_weights.WEIGHTS_PATH))
    shared = [k for k in old if any(k.endswith(n.split(".", 1)[1]) for n in new)]
    differing = [
        k
        for k in old
        if not any(v.shape == old[k].shape and np.array_equal(v, old[k]) for v in new.values())
    ]
    assert shared or differing
    assert differing, "the shipped safetensors unexpectedly equals the TorchScript weights"


def test_cases_match_their_pins_and_are_small(make_cases):
    assert make_cases.check() == []
    pins = make_cases.load_pins()["cases"]
    total = sum((make_cases.CASES_DIR / p["file"]).stat().st_size for p in pins.values())
    assert total < 3e6  # 23 gated cases and the rejected one, about 2.85 MB
    assert {"silence", "clipping", "shorter_than_chunk", "unsupported_rate_22050"} <= set(pins)


def test_edge_cases_are_what_they_claim(make_cases, runners):
    rate, silence = runners.read_wav(make_cases.CASES_DIR / "silence.wav")
    assert not silence.any()
    rate, clipped = runners.read_wav(make_cases.CASES_DIR / "clipping.wav")
    assert np.mean(np.abs(clipped) >= 32767 / 32768) > 0.01
    rate, short = runners.read_wav(make_cases.CASES_DIR / "shorter_than_chunk.wav")
    assert rate == 16000 and short.size < 512


def test_a_changed_case_is_drift(make_cases, runners, spec, tmp_path, monkeypatch):
    import shutil

    import paritygate

    folder = tmp_path / "example"
    shutil.copytree(
        spec.root, folder, ignore=shutil.ignore_patterns("parity-reports", "tests", "__pycache__")
    )
    with open(folder / "cases" / "clean_speech.wav", "r+b") as f:
        f.seek(-2, 2)
        f.write(b"\x01\x00")
    monkeypatch.setattr(make_cases, "CASES_DIR", folder / "cases")
    assert make_cases.check() == ["clean_speech"]
    with pytest.raises(
        paritygate.DriftError, match="case clean_speech: input differs from its pin"
    ):
        runners.gated_cases(paritygate.load_spec(folder / "parity.toml"))
    # The committed cases load, each with its recording.
    assert [c.name for c in runners.gated_cases(spec)] == list(spec.cases)
