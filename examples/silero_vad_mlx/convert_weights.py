"""Convert the TorchScript Silero VAD weights shipped in the ``silero-vad`` wheel to safetensors.

The wheel also ships ``silero_vad_16k.safetensors``, but it holds older weights that do not match
the TorchScript model, so the port is converted from ``silero_vad.jit`` itself. Tensors keep
PyTorch's layout (the MLX port transposes on load) so that each converted tensor can be compared
with the TorchScript ``state_dict`` entry it came from, byte for byte.

Run once (needs torch and silero-vad)::

    python convert_weights.py          # writes weights/silero_vad_16k_mlx.safetensors + manifest
    python convert_weights.py --check  # re-converts in memory, compares with the committed file
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
WEIGHTS_PATH = HERE / "weights" / "silero_vad_16k_mlx.safetensors"
MANIFEST_PATH = HERE / "weights" / "manifest.json"

# TorchScript state_dict prefix -> prefix in the converted file. The 8 kHz model is a separate
# sub-module with the same architecture and its own weights.
PREFIXES = {"_model.": "16k.", "_model_8k.": "8k."}

# Every tensor the port needs, with its expected shape (filter length 256 at 16 kHz, 128 at 8 kHz).
EXPECTED_SHAPES = {
    "16k.stft.forward_basis_buffer": (258, 1, 256),
    "8k.stft.forward_basis_buffer": (130, 1, 128),
    "16k.encoder.0.reparam_conv.weight": (128, 129, 3),
    "8k.encoder.0.reparam_conv.weight": (128, 65, 3),
}
for _rate in ("16k", "8k"):
    EXPECTED_SHAPES.update(
        {
            f"{_rate}.encoder.0.reparam_conv.bias": (128,),
            f"{_rate}.encoder.1.reparam_conv.weight": (64, 128, 3),
            f"{_rate}.encoder.1.reparam_conv.bias": (64,),
            f"{_rate}.encoder.2.reparam_conv.weight": (64, 64, 3),
            f"{_rate}.encoder.2.reparam_conv.bias": (64,),
            f"{_rate}.encoder.3.reparam_conv.weight": (128, 64, 3),
            f"{_rate}.encoder.3.reparam_conv.bias": (128,),
            f"{_rate}.decoder.rnn.weight_ih": (512, 128),
            f"{_rate}.decoder.rnn.weight_hh": (512, 128),
            f"{_rate}.decoder.rnn.bias_ih": (512,),
            f"{_rate}.decoder.rnn.bias_hh": (512,),
            f"{_rate}.decoder.decoder.2.weight": (1, 128, 1),
            f"{_rate}.decoder.decoder.2.bias": (1,),
        }
    )


def torchscript_path() -> Path:
    """The TorchScript file inside the installed silero-vad wheel (found without importing
    torch)."""
    import importlib.util

    spec = importlib.util.find_spec("silero_vad")
    if spec is None or spec.origin is None:
        raise SystemExit("silero-vad is not installed: pip install silero-vad==6.2.3")
    return Path(spec.origin).parent / "data" / "silero_vad.jit"


def map_name(torch_name: str) -> str:
    for old, new in PREFIXES.items():
        if torch_name.startswith(old):
            return new + torch_name[len(old) :]
    raise ValueError(
        f"unexpected TorchScript tensor {torch_name!r}: no known prefix {list(PREFIXES)}"
    )


def convert(jit_path: Path) -> dict[str, np.ndarray]:
    """Map every TorchScript state_dict entry to its converted name; check names and shapes."""
    import torch

    model = torch.jit.load(str(jit_path), map_location="cpu")
    converted: dict[str, np.ndarray] = {}
    for name, tensor in model.state_dict().items():
        new_name = map_name(name)
        array = tensor.detach().cpu().numpy()
        if array.dtype != np.float32:
            raise ValueError(f"{name}: expected float32, got {array.dtype}")
        converted[new_name] = np.ascontiguousarray(array)
    missing = sorted(set(EXPECTED_SHAPES) - set(converted))
    extra = sorted(set(converted) - set(EXPECTED_SHAPES))
    if missing or extra:
        raise ValueError(f"{jit_path}: missing tensors {missing}, unexpected tensors {extra}")
    for name, shape in EXPECTED_SHAPES.items():
        if converted[name].shape != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {converted[name].shape}")
    return converted


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write(converted: dict[str, np.ndarray], jit_path: Path) -> dict:
    from importlib.metadata import version

    from safetensors.numpy import save_file

    WEIGHTS_PATH.parent.mkdir(parents=True, exist_ok=True)
    tmp = WEIGHTS_PATH.with_suffix(".tmp")
    save_file(
        converted,
        str(tmp),
        metadata={
            "source": "silero_vad/data/silero_vad.jit",
            "layout": "pytorch (Cout, Cin, K) for convolutions",
        },
    )
    os.replace(tmp, WEIGHTS_PATH)
    manifest = {
        "file": WEIGHTS_PATH.name,
        "sha256": sha256_file(WEIGHTS_PATH),
        "source": {
            "package": "silero-vad",
            "version": version("silero-vad"),
            "file": "silero_vad/data/silero_vad.jit",
            "sha256": sha256_file(jit_path),
        },
        "converted_with": {"torch": version("torch")},
        "tensors": {name: list(array.shape) for name, array in sorted(converted.items())},
    }
    MANIFEST_PATH.write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--check",
        action="store_true",
        help="compare a fresh conversion with the committed file instead of writing",
    )
    args = parser.parse_args(argv)
    jit_path = torchscript_path()
    converted = convert(jit_path)
    if args.check:
        from safetensors.numpy import load_file

        stored = load_file(str(WEIGHTS_PATH))
        bad = [
            n for n in converted if n not in stored or not np.array_equal(stored[n], converted[n])
        ]
        if bad or set(stored) != set(converted):
            print(f"{WEIGHTS_PATH} differs from {jit_path}: {bad}")
            return 1
        print(f"{WEIGHTS_PATH} matches {jit_path} ({len(stored)} tensors)")
        return 0
    manifest = write(converted, jit_path)
    print(f"wrote {WEIGHTS_PATH} sha256={manifest['sha256']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
