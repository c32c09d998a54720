"""Silero VAD (v6, as shipped in silero-vad 6.2.3) re-implemented in MLX. Imports no torch.

The TorchScript model processes one chunk at a time (512 samples at 16 kHz, 256 at 8 kHz),
prepending the last 64 (32) samples of the previous chunk as context:

1. STFT front end: reflect-pad the (context + chunk) signal on the right by 64 (32) samples,
   convolve with a fixed (2 * (F/2 + 1), 1, F) basis at hop F/2 (F = 256 at 16 kHz, 128 at 8 kHz),
   split real and imaginary halves and take the magnitude -> (F/2 + 1) bins x 4 frames.
2. Encoder: four conv1d(k=3, padding=1) + ReLU blocks with strides 1, 2, 2, 1 -> 128 features.
3. Decoder: an LSTM cell (PyTorch gate order i, f, g, o) carrying (h, c) across chunks, then
   ReLU, a 1x1 convolution to one channel and a sigmoid -> the speech probability.

Rates: 16000 and 8000 natively; a multiple of 16000 is decimated to 16000 by taking every k-th
sample, like the reference. Anything else raises :class:`UnsupportedSampleRate`.

``PortVariant`` switches on deliberate, plausible port bugs. They exist only so that the parity
gate's tests can show that each one is caught; the default variant is the faithful port.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

__all__ = [
    "SUPPORTED_RATES",
    "PortVariant",
    "SileroVAD",
    "UnsupportedSampleRate",
    "load",
    "speech_probabilities",
]

HERE = Path(__file__).resolve().parent
WEIGHTS_PATH = HERE / "weights" / "silero_vad_16k_mlx.safetensors"
MANIFEST_PATH = HERE / "weights" / "manifest.json"

SUPPORTED_RATES = (8000, 16000)

# Per native rate: samples per chunk, context samples, STFT filter length (hop = half of it).
_GEOMETRY = {16000: (512, 64, 256), 8000: (256, 32, 128)}
_ENCODER_STRIDES = (1, 2, 2, 1)


class UnsupportedSampleRate(ValueError):
    """The sample rate is neither 8000, 16000 nor a multiple of 16000."""


@dataclass(frozen=True)
class PortVariant:
    """Deliberate port bugs, for mutation tests. All off = the faithful port."""

    stft_zero_padding: bool = False  # pad the STFT input with zeros instead of reflecting it
    lstm_gate_order: str = "ifgo"  # order the four gate blocks of the LSTM weights are read in
    context_lag: int = 1  # context from the chunk this many chunks back (faithful: 1; 0: itself)
    state_dtype: str = "float32"  # dtype the (h, c) state is stored in between chunks

    @property
    def is_faithful(self) -> bool:
        return self == PortVariant()


def resolve_rate(sample_rate: int) -> tuple[int, int]:
    """Return (native rate, decimation step) or raise naming the supported rates."""
    if not isinstance(sample_rate, (int, np.integer)) or isinstance(sample_rate, bool):
        raise UnsupportedSampleRate(f"sample rate must be an integer, got {sample_rate!r}")
    sample_rate = int(sample_rate)
    if sample_rate != 16000 and sample_rate > 0 and sample_rate % 16000 == 0:
        return 16000, sample_rate // 16000
    if sample_rate in SUPPORTED_RATES:
        return sample_rate, 1
    raise UnsupportedSampleRate(
        f"unsupported sample rate {sample_rate} Hz: supported rates are 8000 and 16000 Hz, "
        "or a multiple of 16000 Hz (decimated to 16000 by keeping every k-th sample)"
    )


def _verify_weights(path: Path) -> None:
    import hashlib

    if path != WEIGHTS_PATH or not MANIFEST_PATH.exists():
        return
    pinned = json.loads(MANIFEST_PATH.read_text())["sha256"]
    actual = hashlib.sha256(path.read_bytes()).hexdigest()
    if actual != pinned:
        raise ValueError(
            f"{path}: sha256 {actual} does not match the pinned {pinned} in {MANIFEST_PATH}; "
            "re-run convert_weights.py"
        )


class _RateModel:
    """Weights of one native rate, laid out for MLX (convolutions as (Cout, K, Cin))."""

    def __init__(self, tensors: dict, prefix: str, rate: int, variant: PortVariant) -> None:
        import mlx.core as mx

        self.chunk, self.context, self.filter_length = _GEOMETRY[rate]
        self.hop = self.filter_length // 2
        self.cutoff = self.filter_length // 2 + 1

        def get(name: str) -> np.ndarray:
            return tensors[f"{prefix}.{name}"]

        # (258, 1, 256) -> (258, 256, 1): one input channel, kernel along the time axis.
        self.basis = mx.array(get("stft.forward_basis_buffer").transpose(0, 2, 1))
        self.convs = []
        for i in range(4):
            w = get(f"encoder.{i}.reparam_conv.weight").transpose(0, 2, 1)
            b = get(f"encoder.{i}.reparam_conv.bias")
            self.convs.append((mx.array(np.ascontiguousarray(w)), mx.array(b)))
        w_ih, w_hh = get("decoder.rnn.weight_ih"), get("decoder.rnn.weight_hh")
        order = _gate_permutation(variant.lstm_gate_order)
        self.w_ih_t = mx.array(np.ascontiguousarray(_permute_gates(w_ih, order).T))
        self.w_hh_t = mx.array(np.ascontiguousarray(_permute_gates(w_hh, order).T))
        self.b_ih = mx.array(_permute_gates(get("decoder.rnn.bias_ih"), order))
        self.b_hh = mx.array(_permute_gates(get("decoder.rnn.bias_hh"), order))
        self.w_out = mx.array(get("decoder.decoder.2.weight").reshape(1, 128).T)
        self.b_out = mx.array(get("decoder.decoder.2.bias"))
        # Right reflect padding of a length-L signal by P: x[L-2], x[L-3], ..., x[L-1-P].
        length = self.context + self.chunk
        self.reflect_index = mx.array(np.arange(length - 2, length - 2 - self.context, -1))


def _gate_permutation(order: str) -> list[int]:
    if sorted(order) != sorted("ifgo") or len(order) != 4:
        raise ValueError(f"lstm_gate_order must be a permutation of 'ifgo', got {order!r}")
    return ["ifgo".index(g) for g in order]


def _permute_gates(array: np.ndarray, order: list[int]) -> np.ndarray:
    """Reorder the four 128-row gate blocks of an LSTM weight or bias."""
    blocks = np.split(array, 4, axis=0)
    return np.concatenate([blocks[i] for i in order], axis=0)


class SileroVAD:
    """Streaming Silero VAD in MLX, mirroring the TorchScript model's call protocol.

    ``vad(chunk, sample_rate)`` returns the speech probability of one chunk (512 samples at
    16 kHz, 256 at 8 kHz) and keeps the LSTM state and the context between calls, as the
    reference does; ``reset_states()`` starts a new stream. ``probabilities(waveform, rate)``
    resets, splits a whole waveform into chunks (zero-padding the last one) and returns one
    probability per chunk.
    """

    def __init__(
        self, weights_path: str | Path = WEIGHTS_PATH, variant: PortVariant = PortVariant()
    ) -> None:
        from safetensors.numpy import load_file

        weights_path = Path(weights_path)
        _verify_weights(weights_path)
        tensors = load_file(str(weights_path))
        self.variant = variant
        self._models = {
            16000: _RateModel(tensors, "16k", 16000, variant),
            8000: _RateModel(tensors, "8k", 8000, variant),
        }
        self.reset_states()

    def reset_states(self) -> None:
        self._state = None  # (h, c), each (1, 128); None = zeros, as in the reference
        self._contexts: list = []  # last context_lag contexts, newest last
        self._last_rate = 0

    # -- one chunk ---------------------------------------------------------------------------

    def __call__(self, chunk, sample_rate: int) -> float:
        import mlx.core as mx

        rate, step = resolve_rate(sample_rate)
        samples = np.asarray(chunk, dtype=np.float32).reshape(-1)[::step]
        model = self._models[rate]
        if samples.shape[0] != model.chunk:
            raise ValueError(
                f"chunk has {samples.shape[0]} samples; {model.chunk} are needed at {rate} Hz "
                "(256 at 8000 Hz, 512 at 16000 Hz)"
            )
        if self._last_rate and self._last_rate != rate:
            self.reset_states()
        lag = self.variant.context_lag
        if lag == 0:
            context = mx.array(samples[-model.context :])[None, :]
        elif len(self._contexts) >= lag:
            context = self._contexts[-lag]
        else:
            context = mx.zeros((1, model.context), dtype=mx.float32)
        x = mx.concatenate([context, mx.array(samples)[None, :]], axis=1)
        prob, self._state = self._forward(model, x, self._state)
        self._contexts = (self._contexts + [x[:, -model.context :]])[-max(lag, 1) :]
        self._last_rate = rate
        mx.eval(prob, *self._state)
        return float(prob.item())

    # -- a whole waveform ----------------------------------------------------------------------

    def probabilities(self, waveform, sample_rate: int) -> np.ndarray:
        """Per-chunk speech probabilities of a whole mono waveform (float32, one per chunk).

        The front end and encoder, which carry no state, run on all chunks at once; only the
        LSTM runs chunk by chunk. The state starts from zeros and is not kept afterwards.
        """
        import mlx.core as mx

        rate, step = resolve_rate(sample_rate)
        audio = np.asarray(waveform, dtype=np.float32)
        if audio.ndim != 1:
            raise ValueError(f"expected a mono waveform (1-D), got shape {audio.shape}")
        audio = audio[::step]
        model = self._models[rate]
        n_chunks = -(-audio.shape[0] // model.chunk)
        if n_chunks == 0:
            return np.zeros((0,), dtype=np.float32)
        padded = np.zeros(n_chunks * model.chunk, dtype=np.float32)
        padded[: audio.shape[0]] = audio
        chunks = padded.reshape(n_chunks, model.chunk)
        lag = self.variant.context_lag
        contexts = np.zeros((n_chunks, model.context), dtype=np.float32)
        if lag == 0:
            contexts[:] = chunks[:, -model.context :]
        elif n_chunks > lag:
            contexts[lag:] = chunks[: n_chunks - lag, -model.context :]
        x = mx.array(np.concatenate([contexts, chunks], axis=1))
        features = self._encode(model, x)  # (n_chunks, 128)
        gates_in = features @ model.w_ih_t + model.b_ih  # (n_chunks, 512)
        state = None
        probs = []
        for i in range(n_chunks):
            h, c = self._lstm(model, gates_in[i : i + 1], state)
            state = self._store_state(h, c)
            probs.append(self._decode(model, h))
        out = mx.concatenate(probs, axis=0).reshape(-1)
        mx.eval(out)
        return np.array(out, dtype=np.float32)

    # -- the network ---------------------------------------------------------------------------

    def _forward(self, model: _RateModel, x, state):
        features = self._encode(model, x)
        h, c = self._lstm(model, features @ model.w_ih_t + model.b_ih, state)
        return self._decode(model, h).reshape(()), self._store_state(h, c)

    def _stft_magnitude(self, model: _RateModel, x):
        import mlx.core as mx

        if self.variant.stft_zero_padding:
            pad = mx.zeros((x.shape[0], model.context), dtype=x.dtype)
        else:
            pad = x[:, model.reflect_index]
        signal = mx.concatenate([x, pad], axis=1)[:, :, None]  # (B, L, 1)
        spec = mx.conv1d(signal, model.basis, stride=model.hop)  # (B, frames, 2 * cutoff)
        real, imag = spec[:, :, : model.cutoff], spec[:, :, model.cutoff :]
        return mx.sqrt(real * real + imag * imag)  # (B, frames, cutoff)

    def _encode(self, model: _RateModel, x):
        import mlx.core as mx

        h = self._stft_magnitude(model, x)
        for (w, b), stride in zip(model.convs, _ENCODER_STRIDES):
            h = mx.maximum(mx.conv1d(h, w, stride=stride, padding=1) + b, 0.0)
        return h.reshape(h.shape[0], -1)  # one frame left: (B, 128)

    def _lstm(self, model: _RateModel, gates_in, state):
        import mlx.core as mx

        if state is None:
            h = mx.zeros((1, 128), dtype=mx.float32)
            c = mx.zeros((1, 128), dtype=mx.float32)
        else:
            h, c = (s.astype(mx.float32) for s in state)
        gates = gates_in + (h @ model.w_hh_t + model.b_hh)
        i, f, g, o = mx.split(gates, 4, axis=1)
        c = mx.sigmoid(f) * c + mx.sigmoid(i) * mx.tanh(g)
        h = mx.sigmoid(o) * mx.tanh(c)
        return h, c

    def _store_state(self, h, c):
        import mlx.core as mx

        dtype = getattr(mx, self.variant.state_dtype)
        return h.astype(dtype), c.astype(dtype)

    def _decode(self, model: _RateModel, h):
        import mlx.core as mx

        return mx.sigmoid(mx.maximum(h, 0.0) @ model.w_out + model.b_out)  # (1, 1)


def load(variant: PortVariant = PortVariant()) -> SileroVAD:
    """The port with the committed converted weights (sha256-checked against the manifest)."""
    return SileroVAD(WEIGHTS_PATH, variant)


def speech_probabilities(
    waveform, sample_rate: int = 16000, variant: PortVariant = PortVariant()
) -> np.ndarray:
    """Per-chunk speech probabilities of a whole waveform with a freshly loaded port."""
    return load(variant).probabilities(waveform, sample_rate)
