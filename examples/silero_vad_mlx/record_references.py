"""Record the TorchScript reference outputs for every case (needs torch and silero-vad).

Writes ``references/<case>.safetensors`` (per-chunk speech probabilities, float32) and
``references/references.json`` (speech timestamps from ``silero_vad.get_speech_timestamps`` run
end to end on the reference model, the options used, the cases' sha256, the weights' sha256 and
the provenance: torch, silero-vad, numpy versions, machine, date). ``make demo`` gates the MLX
port against these files without torch.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from make_cases import CASES_DIR, load_pins  # noqa: E402
from runners import provenance, read_wav, reference_probabilities, torchscript_model  # noqa: E402
from vad_mlx import SUPPORTED_RATES, resolve_rate  # noqa: E402

REFERENCES_DIR = HERE / "references"
INDEX_PATH = REFERENCES_DIR / "references.json"
TIMESTAMP_OPTIONS = {"threshold": 0.5, "min_speech_duration_ms": 250,
                     "min_silence_duration_ms": 100, "speech_pad_ms": 30}


def supported(rate: int) -> bool:
    return rate in SUPPORTED_RATES or (rate > 0 and rate % 16000 == 0)


def reference_timestamps(samples: np.ndarray, rate: int) -> list[dict]:
    import silero_vad
    import torch

    return silero_vad.get_speech_timestamps(torch.from_numpy(samples.copy()), torchscript_model(),
                                            sampling_rate=rate, **TIMESTAMP_OPTIONS)


def main() -> int:
    from safetensors.numpy import save_file

    REFERENCES_DIR.mkdir(exist_ok=True)
    pins = load_pins()["cases"]
    index = {"reference": "silero_vad/data/silero_vad.jit (TorchScript), chunk by chunk as "
                          "silero_vad.get_speech_timestamps calls it",
             "provenance": {**provenance(),
                            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")},
             "weights_sha256": json.loads((HERE / "weights" / "manifest.json").read_text())["source"]["sha256"],
             "timestamp_options": TIMESTAMP_OPTIONS, "cases": {}}
    for name, pin in pins.items():
        rate, samples = read_wav(CASES_DIR / pin["file"])
        if not supported(rate):
            index["cases"][name] = {"case_sha256": pin["sha256"], "sample_rate": rate,
                                    "rejected": True}
            continue
        probs = reference_probabilities(samples, rate)
        path = REFERENCES_DIR / f"{name}.safetensors"
        tmp = path.with_suffix(".tmp")
        save_file({"probabilities": probs}, str(tmp))
        os.replace(tmp, path)
        native, _ = resolve_rate(rate)
        index["cases"][name] = {
            "case_sha256": pin["sha256"], "sample_rate": rate, "model_rate": native,
            "chunks": int(probs.size), "file": path.name,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "timestamps": reference_timestamps(samples, rate),
            "chunks_within_0.15_of_threshold": float(np.mean(np.abs(probs - 0.5) <= 0.15))
            if probs.size else 0.0,
        }
        print(f"{name}: {probs.size} chunks, {len(index['cases'][name]['timestamps'])} segments")
    tmp = INDEX_PATH.with_suffix(".tmp")
    tmp.write_text(json.dumps(index, indent=2) + "\n")
    os.replace(tmp, INDEX_PATH)
    return 0


if __name__ == "__main__":
    sys.exit(main())
