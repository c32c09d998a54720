"""Locating the port's planted bugs inside the port: the faithful MLX port (reference) against
each variant with one bug (candidate), captured through the port's own functions (the port is
written as methods, not modules: ``paritygate.locate.Functions``), each bug located at the
function where it lives. The TorchScript reference cannot be captured and is refused with
what to pass instead."""

from __future__ import annotations

import numpy as np
import pytest

from paritygate.locate import Functions, capture, locate, locate_models

# the port's stages, named like the TorchScript model's modules
STAGES = {
    "stft": "_stft_magnitude",
    "encoder": "_encode",
    "decoder.rnn": "_lstm",
    "decoder.state": "_store_state",
    "decoder": "_decode",
}
INPUTS = {"frames": "_stft_magnitude"}  # the chunks with their context, as the STFT gets them

BUGS = {
    # planted bug: (variant, case, where it is located)
    "stft-zero-padding": ({"stft_zero_padding": True}, "clean_speech", "stft#0"),
    "lstm-gates-ifog": ({"lstm_gate_order": "ifog"}, "clean_speech", "decoder.rnn#0"),
    "context-two-chunks-back": ({"context_lag": 2}, "short_pauses", "frames#0"),
    "context-from-the-chunk-itself": ({"context_lag": 0}, "clean_speech", "frames#0"),
    "state-in-float16": ({"state_dtype": "float16"}, "speech_32k", "decoder.state#0"),
}


@pytest.fixture(scope="module")
def bound(spec):
    return spec.claims["probability-max-abs"].bound


def _side(vad_mlx, case, **variant):
    port = vad_mlx.load(vad_mlx.PortVariant(**variant))
    return (
        lambda: port.probabilities(case.samples, case.rate),
        Functions(port, outputs=STAGES, inputs=INPUTS),
    )


def _locate(vad_mlx, case, bound, **variant):
    return locate_models(*_side(vad_mlx, case), *_side(vad_mlx, case, **variant), bound=bound)


@pytest.mark.parametrize("bug", list(BUGS))
def test_each_planted_bug_is_located_at_its_stage(bug, vad_mlx, cases, bound):
    variant, case_name, where = BUGS[bug]
    case = next(c for c in cases if c.name == case_name)
    found = _locate(vad_mlx, case, bound, **variant)
    assert not found
    assert found.first.label == where, found.message
    assert found.message.startswith(f"first divergence at {where}: max_abs ")
    assert all(p.how == "name" for p in found.pairs)
    assert not found.unmatched_reference and not found.unmatched_candidate


def test_the_faithful_port_shows_no_divergence(vad_mlx, cases, bound):
    case = next(c for c in cases if c.name == "speech_32k")
    found = _locate(vad_mlx, case, bound)
    assert found, found.message
    assert all(p.max_abs == 0 for p in found.pairs)
    # frames, stft, encoder once (all chunks at once); rnn, state and decoder once per chunk
    chunks = -(-case.samples[:: case.rate // 16000].size // 512)
    assert len(found.pairs) == 3 + 3 * chunks


def test_the_port_is_byte_identical_once_capture_is_removed(vad_mlx, cases):
    case = cases[0]
    run, functions = _side(vad_mlx, case)
    before = run()
    with capture(functions, lambda name, out: None):
        during = run()
    after = run()
    assert before.tobytes() == during.tobytes() == after.tobytes()
    assert not set(STAGES.values()) & set(vars(functions.owner))


def test_the_torchscript_reference_is_refused_with_what_to_pass_instead(spec, cases):
    from paritygate import InputError

    with pytest.raises(InputError) as caught:
        locate(spec, "probability-max-abs", cases[0].name)
    message = str(caught.value)
    assert message.startswith("runner torchscript: its model is a TorchScript module (")
    assert "expose the eager nn.Module it was scripted or traced from as `model`" in message
    assert "paritygate.locate.Functions" in message


def test_an_unknown_function_is_refused(vad_mlx, cases, bound):
    from paritygate import InputError

    port = vad_mlx.load()
    run = lambda: port.probabilities(cases[0].samples, cases[0].rate)  # noqa: E731
    with pytest.raises(InputError, match="cannot capture SileroVAD._nope: no such function"):
        locate_models(run, Functions(port, {"x": "_nope"}), run, port, bound=bound)
    assert np.isfinite(run()).all()
