#!/usr/bin/env bash
# Make a self-contained folder for the GPU runs (run_gpu.py): the library's src/, this example
# (without its tests) and the cp312 manylinux x86-64 wheels of what a GPU machine without the
# project's environment may lack (tokenizers, safetensors, tomlkit, click, rich and its three
# dependencies, packaging, ml_dtypes, threadpoolctl: about 6 MB). MLX itself is not included:
# it is installed there with `pip install --target .mlx mlx==0.32.4 mlx-cuda-13==0.32.4`.
#
#   bash examples/encoder_mlx/gpu/bundle.sh DEST [PIP]
#
# From the repository root. DEST then holds src/, examples/encoder_mlx/, pyproject.toml and
# wheels/ (about 9 MB); run from DEST's parent:
#   python3 DEST/examples/encoder_mlx/gpu/run_gpu.py calibrate --mlx .mlx --out "$OUT"
set -euo pipefail
dest="${1:?usage: bundle.sh DEST [PIP]}"
pip="${2:-python3 -m pip}"
here="$(cd "$(dirname "$0")/../../.." && pwd)"
if [ -n "$(git -C "$here" status --porcelain -- src pyproject.toml examples/encoder_mlx)" ]; then
  echo "bundle.sh: commit first: src/ or examples/encoder_mlx/ has changes (results name a clean commit)" >&2
  exit 2
fi
rm -rf "$dest/src" "$dest/examples" "$dest/.site-encoder"
mkdir -p "$dest/wheels"
tar -C "$here" --exclude __pycache__ --exclude '*.pyc' --exclude examples/encoder_mlx/tests \
  -cf - src pyproject.toml examples/encoder_mlx | tar -C "$dest" -xf -
# the commit the results will name (the bundle has no .git; bench_encoder.py reads this file)
git -C "$here" rev-parse HEAD > "$dest/examples/encoder_mlx/SOURCE_REVISION"
$pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$dest/wheels" tokenizers==0.23.3 safetensors==0.8.0 tomlkit==0.15.2 click==8.5.1 \
  rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2 pygments==2.21.0 packaging==26.4 \
  ml_dtypes==0.7.0 threadpoolctl==3.8.0
du -sh "$dest"
