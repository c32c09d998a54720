"""Generate the canonical speech-and-silence cases reproducibly, and check their sha256 pins.

Speech is synthesized with espeak-ng (Debian package ``espeak-ng`` 1.51: ``apt-get install
espeak-ng``), resampled from espeak's 22050 Hz to 16000 Hz with scipy's polyphase filter
(``resample_poly(x, 320, 441)``), laid out between silence gaps, mixed with noise from a seeded
numpy generator and written as mono int16 WAV. The WAVs are committed under ``cases/``; the
pins below are their sha256. Another espeak-ng version may synthesize slightly different audio,
which is why the files, not this script, are the cases: ``python make_cases.py --check``
verifies the committed files, ``python make_cases.py --write`` regenerates them.

``noisy_near_threshold`` is tuned (noise level and speech gain) so that at least 10% of its
chunks have a reference speech probability within 0.15 of the 0.5 threshold; ``--measure``
prints that fraction with the TorchScript reference (needs torch and silero-vad).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import wave
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
CASES_DIR = HERE / "cases"
PINS_PATH = CASES_DIR / "cases.json"

RATE = 16000

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "Parity gates must enforce the number you publish.",
    "Please call Stella and ask her to bring these things with her from the store.",
    "Six spoons of fresh snow peas, five thick slabs of blue cheese.",
    "A voice activity detector marks where somebody is speaking.",
]

# Further recordings made the same way, so that the spec has enough cases (n >= 16) for
# `paritygate calibrate` to estimate each claim's noise: other sentences, voices, speeds, speech
# gains and noise levels; two at 8 kHz.
EXTRA_SENTENCES = [
    "Turn left at the next corner and keep going.",
    "The meeting starts at nine thirty tomorrow morning.",
    "Numbers like three hundred and twelve are easy to say.",
    "She sells sea shells by the sea shore.",
]
EXTRA_VOICES = ["en", "en-us", "en-gb", "en"]


def synthesize(text: str, voice: str, speed: int) -> np.ndarray:
    """espeak-ng speech at 16 kHz, float32 in [-1, 1]."""
    from scipy.signal import resample_poly

    exe = shutil.which("espeak-ng")
    if exe is None:
        raise SystemExit("espeak-ng is not installed: apt-get install -y espeak-ng")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "speech.wav"
        subprocess.run([exe, "-v", voice, "-s", str(speed), "-w", str(path), text], check=True)
        rate, samples = read_wav(path)
    if rate != 22050:
        raise SystemExit(f"espeak-ng wrote {rate} Hz; this script expects 22050 Hz")
    return resample_poly(samples.astype(np.float64), 320, 441).astype(np.float32)


def read_wav(path: Path) -> tuple[int, np.ndarray]:
    with wave.open(str(path), "rb") as f:
        if f.getsampwidth() != 2 or f.getnchannels() != 1:
            raise ValueError(f"{path}: expected mono int16 WAV")
        rate = f.getframerate()
        data = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
    return rate, data.astype(np.float32) / 32768.0


def write_wav(path: Path, samples: np.ndarray, rate: int) -> None:
    pcm = np.clip(np.round(samples * 32768.0), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(rate)
        f.writeframes(pcm.tobytes())


def pink_noise(rng: np.random.Generator, n: int) -> np.ndarray:
    """Unit-RMS noise with a 1/f power spectrum (shaped white noise)."""
    spectrum = np.fft.rfft(rng.standard_normal(n))
    freqs = np.fft.rfftfreq(n)
    freqs[0] = freqs[1]
    noise = np.fft.irfft(spectrum / np.sqrt(freqs), n)
    return (noise / np.sqrt(np.mean(noise**2))).astype(np.float32)


def layout(parts: list[tuple[str, float]], voice: str, speed: int, gain: float) -> np.ndarray:
    """Concatenate ('say', text) and ('gap', seconds) parts."""
    pieces = []
    for kind, value in parts:
        if kind == "gap":
            pieces.append(np.zeros(int(value * RATE), dtype=np.float32))
        else:
            speech = synthesize(value, voice, speed)
            pieces.append(gain * speech / np.max(np.abs(speech)))
    return np.concatenate(pieces)


def build_cases() -> dict[str, tuple[np.ndarray, int]]:
    cases: dict[str, tuple[np.ndarray, int]] = {}

    clean = layout(
        [("gap", 0.6), ("say", SENTENCES[0]), ("gap", 0.8), ("say", SENTENCES[1]), ("gap", 0.5)],
        "en-us",
        160,
        gain=0.5,
    )
    clean += 0.003 * pink_noise(np.random.default_rng(1), clean.size)
    cases["clean_speech"] = (clean, RATE)

    # Quiet speech under loud pink noise: many chunks land near the 0.5 threshold.
    noisy = layout(
        [("gap", 0.4), ("say", SENTENCES[2]), ("gap", 0.7), ("say", SENTENCES[3]), ("gap", 0.4)],
        "en",
        170,
        gain=0.12,
    )
    noisy += 0.045 * pink_noise(np.random.default_rng(2), noisy.size)
    cases["noisy_near_threshold"] = (noisy, RATE)

    # Short pauses inside speech exercise min_silence_duration_ms and the padding merge.
    choppy = layout(
        [
            ("gap", 0.3),
            ("say", "one"),
            ("gap", 0.12),
            ("say", "two"),
            ("gap", 0.35),
            ("say", "three four"),
            ("gap", 0.09),
            ("say", SENTENCES[4]),
            ("gap", 0.6),
        ],
        "en-gb",
        150,
        gain=0.4,
    )
    choppy += 0.01 * pink_noise(np.random.default_rng(3), choppy.size)
    cases["short_pauses"] = (choppy, RATE)

    # The 8 kHz model is a separate network in the reference; 32 kHz is decimated to 16 kHz.
    from scipy.signal import resample_poly

    cases["clean_speech_8k"] = (
        resample_poly(clean.astype(np.float64), 1, 2).astype(np.float32),
        8000,
    )
    short = layout([("gap", 0.3), ("say", "Decimate by two."), ("gap", 0.2)], "en", 190, gain=0.5)
    short += 0.003 * pink_noise(np.random.default_rng(6), short.size)
    cases["speech_32k"] = (resample_poly(short.astype(np.float64), 2, 1).astype(np.float32), 32000)

    # Edge cases.
    silence = np.zeros(int(1.5 * RATE), dtype=np.float32)
    cases["silence"] = (silence, RATE)
    clipped = layout([("gap", 0.3), ("say", SENTENCES[0]), ("gap", 0.3)], "en-us", 180, gain=1.0)
    cases["clipping"] = (np.clip(6.0 * clipped, -1.0, 32767 / 32768), RATE)
    cases["shorter_than_chunk"] = (0.1 * pink_noise(np.random.default_rng(4), 300), RATE)
    # 22050 Hz is neither 8000, 16000 nor a multiple of 16000: the port must reject it.
    cases["unsupported_rate_22050"] = (0.05 * pink_noise(np.random.default_rng(5), 22050), 22050)
    cases.update(extra_cases())
    return cases


def extra_cases() -> dict[str, tuple[np.ndarray, int]]:
    """Twelve more speech recordings (extra_00 ... extra_11_8k) for calibration."""
    from scipy.signal import resample_poly

    cases: dict[str, tuple[np.ndarray, int]] = {}
    for i in range(12):
        text = EXTRA_SENTENCES[i % len(EXTRA_SENTENCES)]
        gain = (0.5, 0.2, 0.1)[i % 3]
        noise = (0.002, 0.02, 0.04, 0.06)[i % 4]
        audio = layout(
            [("gap", 0.3 + 0.1 * (i % 3)), ("say", text), ("gap", 0.4)],
            EXTRA_VOICES[i % 4],
            140 + 10 * (i % 5),
            gain,
        )
        audio = audio + noise * pink_noise(np.random.default_rng(100 + i), audio.size)
        audio = np.clip(audio, -1.0, 32767 / 32768)
        if i % 6 == 5:
            cases[f"extra_{i:02d}_8k"] = (
                resample_poly(audio.astype(np.float64), 1, 2).astype(np.float32),
                8000,
            )
        else:
            cases[f"extra_{i:02d}"] = (audio, RATE)
    return cases


#: The pauses of the minimum-silence cases, in chunks of 512 samples (16 kHz).
PAUSE_CHUNKS = (2, 3, 4)
#: The spoken phrase they repeat: samples 37920..50656 of short_pauses.wav ("three four").
PAUSE_PHRASE = (37920, 50656)


def pause_cases(short_pauses: np.ndarray) -> dict[str, tuple[np.ndarray, int]]:
    """One phrase of ``short_pauses`` (the committed WAV's samples) twice, with a pause of 2, 3
    and 4 chunks of digital silence between: the reference's probabilities stay below the
    threshold for 4, 5 and 6 chunks, and silero-vad splits the speech from 5 on (100 ms of
    minimum silence: the split waits for the fifth chunk below neg_threshold). A post-processor
    whose minimum silence is one chunk too long merges ``pause_3_chunks``; one chunk too short
    splits ``pause_2_chunks``. No length sweep reaches this boundary: it lies inside the input."""
    start, end = PAUSE_PHRASE
    phrase = short_pauses[start:end]
    return {
        f"pause_{n}_chunks": (
            np.concatenate(
                [
                    np.zeros(3200, dtype=np.float32),
                    phrase,
                    np.zeros(n * 512, dtype=np.float32),
                    phrase,
                    np.zeros(4800, dtype=np.float32),
                ]
            ),
            RATE,
        )
        for n in PAUSE_CHUNKS
    }


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def load_pins() -> dict:
    return json.loads(PINS_PATH.read_text())


def check() -> list[str]:
    """Names of committed cases whose sha256 differs from its pin (empty = all good)."""
    pins = load_pins()["cases"]
    return [
        name
        for name, entry in pins.items()
        if sha256_file(CASES_DIR / entry["file"]) != entry["sha256"]
    ]


def near_threshold_fraction(path: Path, threshold: float = 0.5, band: float = 0.15) -> float:
    import silero_vad
    import torch

    rate, samples = read_wav(path)
    model = silero_vad.load_silero_vad()
    model.reset_states()
    n = 512 if rate == 16000 else 256
    probs = []
    for start in range(0, samples.size, n):
        chunk = torch.from_numpy(samples[start : start + n].copy())
        chunk = torch.nn.functional.pad(chunk, (0, n - chunk.numel()))
        probs.append(model(chunk, rate).item())
    probs = np.array(probs)
    return float(np.mean(np.abs(probs - threshold) <= band))


def write_cases(cases: dict[str, tuple[np.ndarray, int]]) -> dict[str, dict]:
    """Write each case as ``cases/<name>.wav``; their pins."""
    pins = {}
    for name, (samples, rate) in cases.items():
        path = CASES_DIR / f"{name}.wav"
        write_wav(path, samples, rate)
        pins[name] = {
            "file": path.name,
            "rate": rate,
            "samples": int(samples.size),
            "sha256": sha256_file(path),
        }
    return pins


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate or check the canonical cases.")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--write", action="store_true", help="regenerate cases/ and the pins")
    group.add_argument("--check", action="store_true", help="verify the committed sha256 pins")
    group.add_argument(
        "--measure",
        action="store_true",
        help="fraction of chunks within 0.15 of 0.5 (reference model)",
    )
    parser.add_argument("--json", type=Path, help="with --measure: also write the fractions here")
    args = parser.parse_args(argv)
    if args.check:
        bad = check()
        print("all cases match their pins" if not bad else f"sha256 mismatch: {bad}")
        return 1 if bad else 0
    if args.measure:
        fractions = {}
        for name, entry in load_pins()["cases"].items():
            if entry["rate"] in (8000, 16000) and entry["samples"] >= 512:
                frac = near_threshold_fraction(CASES_DIR / entry["file"])
                fractions[name] = round(frac, 4)
                print(f"{name}: {frac:.1%} of chunks within 0.15 of 0.5")
        if args.json:
            args.json.write_text(
                json.dumps(
                    {
                        "measured": "fraction of chunks whose TorchScript speech probability "
                        "lies within 0.15 of the 0.5 threshold",
                        "fractions": fractions,
                    },
                    indent=1,
                )
                + "\n"
            )
        return 0
    CASES_DIR.mkdir(exist_ok=True)
    pins = write_cases(build_cases())
    # Cut from the written short_pauses.wav, so that they follow from the committed file.
    pins.update(write_cases(pause_cases(read_wav(CASES_DIR / "short_pauses.wav")[1])))
    espeak = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True).stdout
    PINS_PATH.write_text(
        json.dumps(
            {
                "generator": "make_cases.py",
                "espeak_ng": espeak.strip(),
                "numpy": np.__version__,
                "cases": pins,
            },
            indent=2,
        )
        + "\n"
    )
    print(f"wrote {len(pins)} cases to {CASES_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
