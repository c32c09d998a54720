"""Command-line adapter of the MLX port: WAV in, JSON out (probabilities and speech timestamps).

    python cli.py speech.wav -o result.json [--threshold 0.5] [--min-speech-ms 250] ...

Exit status 0 on success, 2 on a bad input (unreadable file, unsupported sample rate) with one
line on stderr naming the file and the problem.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from postprocess import get_speech_timestamps  # noqa: E402
from runners import gate_outputs, read_wav  # noqa: E402
from vad_mlx import UnsupportedSampleRate, load, resolve_rate  # noqa: E402


def analyse(
    path: str | Path,
    threshold: float = 0.5,
    min_speech_duration_ms: int = 250,
    min_silence_duration_ms: int = 100,
    speech_pad_ms: int = 30,
) -> dict:
    """What the CLI writes, as a dict (also used by the Python API tests)."""
    rate, samples = read_wav(path)
    native, step = resolve_rate(rate)
    probs = load().probabilities(samples, rate)
    timestamps = get_speech_timestamps(
        probs,
        sampling_rate=native,
        threshold=threshold,
        min_speech_duration_ms=min_speech_duration_ms,
        min_silence_duration_ms=min_silence_duration_ms,
        speech_pad_ms=speech_pad_ms,
        audio_length_samples=-(-samples.size // step),
        step=step,
    )
    return {
        "file": Path(path).name,
        "sample_rate": rate,
        "model_rate": native,
        "probabilities": [float(p) for p in probs],
        "timestamps": timestamps,
    }


def gate_result(path: str | Path) -> dict:
    """The parity gate's outputs: probabilities (float32), segments ((n, 2) int64 chunks) and
    timestamps ((n, 2) int64 samples), with the post-processor's defaults."""
    rate, samples = read_wav(path)
    return gate_outputs(load().probabilities(samples, rate), rate, samples.size)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Silero VAD (MLX port): WAV -> JSON")
    parser.add_argument("wav")
    parser.add_argument("-o", "--output", required=True, help="JSON file to write")
    parser.add_argument("--threshold", type=float, default=0.5)
    parser.add_argument("--min-speech-ms", type=int, default=250)
    parser.add_argument("--min-silence-ms", type=int, default=100)
    parser.add_argument("--speech-pad-ms", type=int, default=30)
    parser.add_argument(
        "--gate-outputs",
        action="store_true",
        help="write the parity gate's outputs instead, as safetensors: "
        "probabilities, segments ([start chunk, end chunk] rows) and "
        "timestamps ([start, end] sample rows)",
    )
    args = parser.parse_args(argv)
    try:
        if args.gate_outputs:
            result = gate_result(args.wav)
        else:
            result = analyse(
                args.wav,
                args.threshold,
                args.min_speech_ms,
                args.min_silence_ms,
                args.speech_pad_ms,
            )
    except (UnsupportedSampleRate, ValueError, OSError, EOFError) as exc:
        print(f"cli.py: {args.wav}: {exc}", file=sys.stderr)
        return 2
    tmp = Path(args.output).with_suffix(".tmp")
    if args.gate_outputs:
        from safetensors.numpy import save_file

        save_file(result, str(tmp))
    else:
        tmp.write_text(json.dumps(result) + "\n")
    os.replace(tmp, args.output)
    return 0


if __name__ == "__main__":
    sys.exit(main())
