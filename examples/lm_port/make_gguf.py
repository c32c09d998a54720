"""Convert ``model/`` to GGUF with the converter of llama-cpp-python's vendored llama.cpp.

Not part of CI. Usage (LLAMA_CPP is the vendored llama.cpp of the llama-cpp-python 0.3.36 sdist,
``pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36`` and unpack it):

    python make_gguf.py --llama-cpp /path/llama_cpp_python-0.3.36/vendor/llama.cpp

writes ``model/tiny-qwen2-{f32,f16,q8_0}.gguf`` with ``convert_hf_to_gguf.py`` (its vendored
``gguf-py`` goes first on ``sys.path``: PyPI's ``gguf`` lags the converter), then
``model/tiny-qwen2-q4_0.gguf`` from the f32 file through llama.cpp's own quantizer, called as the
library function ``llama_cpp.llama_model_quantize`` (no ``llama-quantize`` binary needed).

One documented deviation: the converter names the BPE pre-tokenizer by hashing the token ids of a
fixed check string, and a freshly trained vocabulary matches no known hash. The tokenizer uses
Qwen2's split regex exactly (see train.py), so the converter is told ``qwen2``; the runners' token
id comparison is what checks that this choice holds.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODEL_DIR = HERE / "model"


def convert(llama_cpp: Path, outtype: str, out: Path) -> None:
    sys.path[:0] = [str(llama_cpp / "gguf-py"), str(llama_cpp)]
    import convert_hf_to_gguf
    from conversion.base import TextModel

    TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    sys.argv = ["convert_hf_to_gguf.py", str(MODEL_DIR), "--outtype", outtype]
    sys.argv += ["--outfile", str(out)]
    convert_hf_to_gguf.main()


def quantize(src: Path, dst: Path, ftype_name: str) -> None:
    import llama_cpp

    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, ftype_name)
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if rc != 0:
        raise SystemExit(f"llama_model_quantize {ftype_name} failed with {rc}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llama-cpp", type=Path, required=True)
    parser.add_argument("--outtype", choices=["f32", "f16", "q8_0", "q4_0"], required=True)
    args = parser.parse_args()
    out = MODEL_DIR / f"tiny-qwen2-{args.outtype}.gguf"
    if args.outtype == "q4_0":
        quantize(MODEL_DIR / "tiny-qwen2-f32.gguf", out, "LLAMA_FTYPE_MOSTLY_Q4_0")
    else:
        convert(args.llama_cpp, args.outtype, out)
    print(f"wrote {out} ({out.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
