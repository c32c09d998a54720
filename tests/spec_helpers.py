"""Builders of small, real parity projects for the spec / runner / gate tests."""

from __future__ import annotations

import hashlib
import shutil
import textwrap
from pathlib import Path

import numpy as np

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
BOX_PORT = EXAMPLES / "box_port"

# A tiny dense model: the float64 reference and independent float32 / MLX candidates.
TINY_MODEL = """
import numpy as np

W = np.random.default_rng(0).standard_normal((8, 4))


def reference(case):
    x = case.load()["x"]
    logits = x @ W
    return {"y": np.tanh(logits), "logits": logits}


def candidate32(case):
    x = case.load()["x"].astype(np.float32)
    logits = x @ W.astype(np.float32)
    return {"y": np.tanh(logits), "logits": logits}


def candidate_extra(case):
    out = reference(case)
    out["debug"] = np.zeros(3)
    return out


def candidate_missing(case):
    return {"y": reference(case)["y"]}


def candidate_crash(case):
    raise RuntimeError("weights not loaded: layer 3 missing")


def candidate_mlx(case):
    import mlx.core as mx

    x = mx.array(case.load()["x"].astype(np.float32))
    logits = x @ mx.array(W.astype(np.float32))
    return {"y": mx.tanh(logits), "logits": logits}
"""

SUBPROCESS_MODEL = '''
"""A command-line candidate speaking the subprocess protocol: case path in, npz out."""
import os
import sys

import numpy as np

W = np.random.default_rng(0).standard_normal((8, 4))

case, out = sys.argv[1], sys.argv[2]
mode = os.environ.get("MODE", "ok")
if mode == "crash":
    sys.stderr.write("fatal: cannot open model weights at /nonexistent/weights.bin\\n")
    sys.exit(7)
if mode == "hang":
    import time
    time.sleep(60)
x = np.load(case, allow_pickle=False)["x"].astype(np.float32)
logits = x @ W.astype(np.float32)
if mode == "garbage":
    open(out, "w").write("this is not an npz file")
else:
    np.savez(out, y=np.tanh(logits), logits=logits)
'''

TINY_WAIVED = """
[waived]
logits = "the pre-activation of y, which the claims already gate"
"""

TINY_SPEC = (
    """
format_version = 2
outputs = ["y", "logits"]
"""
    + TINY_WAIVED
    + """
[cases.a]
path = "cases/a.npz"
sha256 = "{sha:a}"
label = 1

[cases.b]
path = "cases/b.npz"
sha256 = "{sha:b}"
label = 2

[runners.reference]
role = "reference"
callable = "tiny:reference"

[runners.cand]
role = "candidate"
callable = "tiny:candidate32"

[claims.y-close]
outputs = ["y"]
metric = "max_abs"
bound = 1e-5
oracle = "equivalence"
status = "provisional"
"""
)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def make_project(
    root: Path,
    spec: str = TINY_SPEC,
    *,
    modules: dict[str, str] | None = None,
    cases: dict[str, dict[str, np.ndarray]] | None = None,
    name: str = "parity.toml",
) -> Path:
    """Write cases (npz), modules and a spec whose ``{sha:CASE}`` markers become the pins."""
    root.mkdir(parents=True, exist_ok=True)
    if modules is None:
        modules = {"tiny.py": TINY_MODEL, "tiny_cli.py": SUBPROCESS_MODEL}
    if cases is None:
        rng = np.random.default_rng(1)
        cases = {c: {"x": rng.standard_normal((3, 8))} for c in ("a", "b")}
    (root / "cases").mkdir(exist_ok=True)
    text = textwrap.dedent(spec)
    for case, arrays in cases.items():
        path = root / "cases" / f"{case}.npz"
        np.savez(path, **arrays)
        text = text.replace("{sha:" + case + "}", sha256(path))
    for filename, source in modules.items():
        (root / filename).write_text(textwrap.dedent(source))
    spec_path = root / name
    spec_path.write_text(text)
    return spec_path


def copy_box_port(root: Path) -> Path:
    """A fresh copy of the box-port example (without recorded references or reports)."""
    target = root / "box_port"
    shutil.copytree(
        BOX_PORT,
        target,
        ignore=shutil.ignore_patterns("references", "parity-reports", "__pycache__", ".*"),
    )
    return target


def plant_scale_bug(project: Path) -> None:
    """The box-port example's planted regression (its plant_bug.py), in the copy ``project``."""
    from paritygate.testing import project_module

    project_module(project, "plant_bug").plant_bug(project)


def recorded_file(references: Path, case: str) -> Path:
    """The recorded output file of ``case``, where the reference's manifest points."""
    import json

    manifest = json.loads((references / "manifest.json").read_text())
    return references / manifest["cases"][case]["file"]
