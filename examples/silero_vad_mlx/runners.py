"""The runtimes gated against each other, each turning one WAV case into per-chunk probabilities.

- ``reference``: the TorchScript model shipped in silero-vad, called chunk by chunk exactly as
  ``silero_vad.get_speech_timestamps`` calls it (state reset first, last chunk zero-padded).
- ``onnxruntime``: the authors' ONNX export (``silero_vad.onnx``) on ONNX Runtime's CPU provider,
  driven like silero-vad's ``OnnxWrapper`` (context and state kept here, in numpy).
- ``mlx``: the port in :mod:`vad_mlx` through its Python API.
- ``mlx-cli``: the same port through ``cli.py`` in a subprocess (see :func:`run_cli`).

Only ``reference`` and ``onnxruntime`` import torch / onnxruntime, and only when called.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from vad_mlx import PortVariant, resolve_rate

__all__ = [
    "read_wav",
    "reference_probabilities",
    "onnx_probabilities",
    "mlx_probabilities",
    "run_cli",
    "VadCase",
    "gated_cases",
]

HERE = Path(__file__).resolve().parent
SPEC_PATH = HERE / "parity.toml"


def read_wav(path: str | Path) -> tuple[int, np.ndarray]:
    """(sample rate, float32 mono samples in [-1, 1)) of a 16-bit PCM WAV."""
    with wave.open(str(path), "rb") as f:
        if f.getnchannels() != 1 or f.getsampwidth() != 2:
            raise ValueError(
                f"{path}: expected mono 16-bit PCM WAV, got {f.getnchannels()} "
                f"channel(s) of {8 * f.getsampwidth()} bits"
            )
        rate = f.getframerate()
        data = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
    return rate, data.astype(np.float32) / np.float32(32768.0)


@dataclass(frozen=True)
class VadCase:
    """One gated case of parity.toml: its audio and the reference outputs recorded for it."""

    name: str
    path: Path
    rate: int
    samples: np.ndarray
    recorded: dict  # probabilities, segments and timestamps, as `paritygate record` stored them

    @property
    def reference(self) -> np.ndarray:
        """The recorded reference probabilities, one per chunk."""
        return self.recorded["probabilities"]

    @property
    def reference_timestamps(self) -> list[dict]:
        """silero-vad's get_speech_timestamps on the reference model, as recorded."""
        return [{"start": int(a), "end": int(b)} for a, b in self.recorded["timestamps"]]


def gated_cases(spec=None) -> list[VadCase]:
    """The cases of parity.toml (or of ``spec``) with their recorded reference outputs.

    Read through :func:`paritygate.recorded_outputs`: a case file that differs from its sha256
    pin, or that the reference was not recorded from, raises :class:`paritygate.DriftError`."""
    from paritygate import load_reference, load_spec, recorded_outputs

    spec = spec if spec is not None else load_spec(SPEC_PATH)
    reference = load_reference(spec)
    cases = []
    for case in spec.cases.values():
        outputs = recorded_outputs(spec, case, reference=reference)
        rate, samples = read_wav(case.path)
        cases.append(VadCase(case.name, case.path, rate, samples, outputs))
    return cases


def _chunks(samples: np.ndarray, rate: int) -> tuple[np.ndarray, int]:
    native, step = resolve_rate(rate)
    audio = np.asarray(samples, dtype=np.float32)[::step]
    n = 512 if native == 16000 else 256
    count = -(-audio.size // n)
    padded = np.zeros(count * n, dtype=np.float32)
    padded[: audio.size] = audio
    return padded.reshape(count, n), native


_TORCH_MODEL = None


def torchscript_model():
    """The shipped TorchScript model, loaded once per process (silero-vad sets 1 torch thread)."""
    global _TORCH_MODEL
    if _TORCH_MODEL is None:
        import hashlib
        import importlib.util

        import silero_vad

        jit = Path(importlib.util.find_spec("silero_vad").origin).parent / "data" / "silero_vad.jit"
        pinned = json.loads((HERE / "weights" / "manifest.json").read_text())["source"]["sha256"]
        actual = hashlib.sha256(jit.read_bytes()).hexdigest()
        if actual != pinned:
            raise ValueError(
                f"{jit}: sha256 {actual} differs from the model the port was "
                f"converted from ({pinned}, weights/manifest.json)"
            )
        _TORCH_MODEL = silero_vad.load_silero_vad()
    return _TORCH_MODEL


def reference_probabilities(samples: np.ndarray, rate: int) -> np.ndarray:
    import torch

    chunks, native = _chunks(samples, rate)
    model = torchscript_model()
    model.reset_states()  # the model keeps state between calls
    with torch.no_grad():
        out = [model(torch.from_numpy(chunk.copy()), native).item() for chunk in chunks]
    model.reset_states()
    return np.asarray(out, dtype=np.float32)


_ORT_SESSION = None


def onnx_session():
    global _ORT_SESSION
    if _ORT_SESSION is None:
        import importlib.util

        import onnxruntime

        path = (
            Path(importlib.util.find_spec("silero_vad").origin).parent / "data" / "silero_vad.onnx"
        )
        opts = onnxruntime.SessionOptions()
        opts.inter_op_num_threads = 1
        opts.intra_op_num_threads = 1
        _ORT_SESSION = onnxruntime.InferenceSession(
            str(path), providers=["CPUExecutionProvider"], sess_options=opts
        )
    return _ORT_SESSION


def onnx_probabilities(samples: np.ndarray, rate: int) -> np.ndarray:
    chunks, native = _chunks(samples, rate)
    session = onnx_session()
    context_size = 64 if native == 16000 else 32
    state = np.zeros((2, 1, 128), dtype=np.float32)
    context = np.zeros((1, context_size), dtype=np.float32)
    sr = np.array(native, dtype=np.int64)
    out = []
    for chunk in chunks:
        x = np.concatenate([context, chunk[None, :]], axis=1)
        prob, state = session.run(None, {"input": x, "state": state, "sr": sr})
        context = x[:, -context_size:]
        out.append(float(prob.reshape(-1)[0]))
    return np.asarray(out, dtype=np.float32)


_PORTS: dict = {}


_FAITHFUL = PortVariant()


def mlx_probabilities(
    samples: np.ndarray, rate: int, variant: PortVariant = _FAITHFUL
) -> np.ndarray:
    import vad_mlx

    if variant not in _PORTS:
        _PORTS[variant] = vad_mlx.load(variant)
    return _PORTS[variant].probabilities(samples, rate)


def run_cli(wav: str | Path, *extra: str) -> dict:
    """Run ``cli.py`` on a WAV in a subprocess and return its JSON output."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.json"
        proc = subprocess.run(
            [sys.executable, str(HERE / "cli.py"), str(wav), "-o", str(out), *extra],
            capture_output=True,
            text=True,
            env={
                **os.environ,
                "PYTHONPATH": str(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""),
            },
        )
        if proc.returncode != 0:
            raise RuntimeError(f"cli.py {wav} exited {proc.returncode}: {proc.stderr.strip()}")
        return json.loads(out.read_text())


# -- runner entry points of parity.toml: a case path in, named outputs out ----------------------


def speech_segments(probabilities: np.ndarray, rate: int, n_samples: int) -> list:
    """The unpadded speech segments of a case's probabilities (:func:`postprocess.speech_segments`:
    edges in chunks, each with the probability that decided it and its margin from the threshold
    it crossed)."""
    import postprocess

    native, step = resolve_rate(rate)
    return postprocess.speech_segments(
        probabilities, sampling_rate=native, audio_length_samples=-(-n_samples // step)
    )


def gate_outputs(probabilities: np.ndarray, rate: int, n_samples: int) -> dict:
    """Probabilities, the unpadded segments in chunks and the padded timestamps in samples.

    ``segments`` is an int64 (n, 2) array of [start chunk, end chunk] rows and ``timestamps`` an
    int64 (n, 2) array of [start, end] samples from :func:`postprocess.get_speech_timestamps`
    with its defaults (n may be 0: silence has no segment, which is an output too).
    """
    import postprocess

    native, step = resolve_rate(rate)
    segments = speech_segments(probabilities, rate, n_samples)
    stamps = postprocess.get_speech_timestamps(
        probabilities, sampling_rate=native, audio_length_samples=-(-n_samples // step), step=step
    )
    return {
        "probabilities": np.asarray(probabilities, dtype=np.float32),
        "segments": np.array(
            [[s.start.chunk, s.end.chunk] for s in segments], dtype=np.int64
        ).reshape(-1, 2),
        "timestamps": timestamps_array(stamps),
    }


def timestamps_array(stamps: list[dict]) -> np.ndarray:
    return np.array([[t["start"], t["end"]] for t in stamps], dtype=np.int64).reshape(-1, 2)


def reference_outputs(path: str) -> dict:
    """TorchScript probabilities and segments; timestamps from silero-vad's own
    get_speech_timestamps run end to end on the TorchScript model."""
    import silero_vad
    import torch

    rate, samples = read_wav(path)
    out = gate_outputs(reference_probabilities(samples, rate), rate, samples.size)
    stamps = silero_vad.get_speech_timestamps(
        torch.from_numpy(samples.copy()), torchscript_model(), sampling_rate=rate
    )
    torchscript_model().reset_states()
    out["timestamps"] = timestamps_array(stamps)
    return out


# what `paritygate locate` would capture: the TorchScript model, which it refuses (no hooks run
# inside TorchScript), saying what to pass instead
reference_outputs.model = torchscript_model


def mlx_outputs(path: str) -> dict:
    rate, samples = read_wav(path)
    return gate_outputs(mlx_probabilities(samples, rate), rate, samples.size)


def mlx_runner(**variant):
    """Runner factory for a port variant (``factory = "runners:mlx_runner"`` with ``options``
    naming PortVariant fields): how the mutation tests gate a port with a planted bug."""
    port_variant = PortVariant(**variant)

    def run(path: str) -> dict:
        rate, samples = read_wav(path)
        return gate_outputs(mlx_probabilities(samples, rate, port_variant), rate, samples.size)

    return run


# The planted port bugs as candidate runners, for `paritygate calibrate --model-mutation
# NAME=runners:<function>`: each stands in for the MLX candidate with one bug.
mlx_stft_zero_padding = mlx_runner(stft_zero_padding=True)
mlx_lstm_gates_ifog = mlx_runner(lstm_gate_order="ifog")
mlx_context_two_chunks_back = mlx_runner(context_lag=2)
mlx_context_from_the_chunk_itself = mlx_runner(context_lag=0)
mlx_state_in_float16 = mlx_runner(state_dtype="float16")


def streaming_probabilities(samples: np.ndarray, rate: int, port=None) -> np.ndarray:
    """The port's streaming entry point: ``vad(chunk, rate)`` called chunk by chunk (the last
    chunk zero-padded), its state and context carried between calls, as an application feeds a
    live stream."""
    import vad_mlx

    port = port or vad_mlx.load()
    native, step = resolve_rate(rate)
    size = (512 if native == 16000 else 256) * step
    n_chunks = -(-samples.size // size)
    padded = np.zeros(n_chunks * size, dtype=np.float32)
    padded[: samples.size] = samples
    port.reset_states()
    return np.array(
        [port(padded[i * size : (i + 1) * size], rate) for i in range(n_chunks)], dtype=np.float32
    )


def mlx_streaming_outputs(path: str) -> dict:
    """The streaming entry point gated as an adapter of the whole-waveform one: same outputs,
    zero tolerance."""
    rate, samples = read_wav(path)
    return gate_outputs(streaming_probabilities(samples, rate), rate, samples.size)


def mlx_streaming_state_dropped(path: str) -> dict:
    """A planted streaming bug: the LSTM state and context are reset before every chunk."""
    import vad_mlx

    rate, samples = read_wav(path)
    port = vad_mlx.load()
    original = port.__call__

    class Forgetful:
        def reset_states(self):
            port.reset_states()

        def __call__(self, chunk, sample_rate):
            port.reset_states()
            return original(chunk, sample_rate)

    return gate_outputs(streaming_probabilities(samples, rate, Forgetful()), rate, samples.size)


def onnx_outputs(path: str) -> dict:
    rate, samples = read_wav(path)
    return gate_outputs(onnx_probabilities(samples, rate), rate, samples.size)


def postprocessor_runner(probabilities: str = "recorded"):
    """Runner factory: the port's post-processor fed the reference model's probabilities.

    ``probabilities`` says which, and must match the claim's mode so that both sides of the
    comparison consume the same numbers:

    - ``"recorded"``: the recorded reference of this case (stored mode, where the reference side
      of every comparison is that recording; needs no torch);
    - ``"live"``: the TorchScript model run here (paired mode, where the reference side runs
      live in this process). Fed the recording instead, a paired claim would compare the live
      model against the recording, which differs on any CPU that rounds torch's kernels
      differently from the one that recorded it.
    """
    if probabilities not in ("recorded", "live"):
        raise ValueError(f"probabilities must be 'recorded' or 'live', got {probabilities!r}")

    def run(path: str) -> dict:
        rate, samples = read_wav(path)
        if probabilities == "live":
            probs = reference_probabilities(samples, rate)
        else:
            from paritygate import recorded_outputs

            # The recording of the case whose pinned sha256 this file has (drift is refused).
            probs = recorded_outputs(SPEC_PATH, Path(path))["probabilities"]
        return gate_outputs(probs, rate, samples.size)

    return run


postprocessor_outputs = postprocessor_runner("recorded")
postprocessor_live_outputs = postprocessor_runner("live")
