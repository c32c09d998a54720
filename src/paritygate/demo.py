"""``python -m paritygate.demo`` (what ``make demo`` runs): a port checked against its reference.

Two bundled output files stand for a model and its port: ``demo_reference.safetensors`` holds
the float32 outputs of a small classifier-and-layout model (class logits, an embedding, and one
box per UI element), ``demo_candidate.safetensors`` the outputs of a float16 port of it. The port
carries the rounding noise every float16 port has, and one planted bug: the right edge of the
``editor`` box is 9 px off, the kind of bug a 30 px gate can hide for weeks.

The demo holds the port to its published claims:

- logits and embedding: ``|a - e| <= 0.01`` per element and cosine >= 0.9999 (``compare``);
- decisions: every argmax agrees (``compare_class_decisions``);
- boxes: every edge within 2 px (``compare_keyed_boxes``).

It prints the full report, writes it as JSON under ``./reports/`` and prints that path. The
planted bug must be caught: the demo exits 0 when the report fails exactly on ``editor.x2``, and
1 if the gate missed it or failed elsewhere. No framework is needed, only numpy.
"""

from __future__ import annotations

import json
import sys
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["main", "run_demo", "make_fixtures", "REFERENCE_FILE", "CANDIDATE_FILE"]

REFERENCE_FILE = "demo_reference.safetensors"
CANDIDATE_FILE = "demo_candidate.safetensors"

LOGITS_ATOL = 0.01
MIN_COSINE = 0.9999
MAX_EDGE_PX = 2.0
PLANTED = ("editor", "x2", 9.0)  # label, edge, pixels

_LABELS = ("editor", "sidebar", "toolbar", "statusbar")
_EDGES = ("x1", "y1", "x2", "y2")


def _model_outputs(dtype: Any) -> dict[str, Any]:
    """A fixed two-layer classifier and box head whose every layer rounds to ``dtype``.

    The matrix products accumulate in float64 and round once to ``dtype``: a float32 product
    through BLAS depends on the kernel the CPU selects (AVX2 and AVX-512 sum in other orders),
    and the bundled files must be what any machine regenerates, byte for byte.
    """
    rng = np.random.default_rng(20260101)
    inputs = rng.standard_normal((32, 24))
    w1 = rng.standard_normal((24, 48)) / np.sqrt(24)
    w2 = rng.standard_normal((48, 10)) / np.sqrt(48)
    w_embed = rng.standard_normal((48, 64)) / np.sqrt(48)
    x, w1, w2, w_embed = (a.astype(dtype) for a in (inputs, w1, w2, w_embed))

    def matmul(a: Any, b: Any) -> Any:
        return (a.astype(np.float64) @ b.astype(np.float64)).astype(dtype)

    hidden = np.maximum(matmul(x, w1), dtype(0))
    logits = matmul(hidden, w2)
    embedding = matmul(hidden, w_embed).mean(axis=0)
    # The layout of a 1280x800 window, refined by a few pixels the model predicts.
    layout = np.array(
        [
            [240, 48, 1040, 776],  # editor
            [0, 48, 240, 776],  # sidebar
            [0, 0, 1280, 48],  # toolbar
            [0, 776, 1280, 800],
        ],
        dtype=dtype,
    )  # statusbar
    refine = np.tanh(embedding[:16].reshape(4, 4)) * dtype(3)
    corners = layout + refine
    boxes = {label: corners[i] for i, label in enumerate(_LABELS)}
    return {"logits": logits, "embedding": embedding, "boxes": boxes}


def make_fixtures(folder: str | Path) -> tuple[Path, Path]:
    """Write the two demo files into ``folder``: the float32 reference, the float16 port."""
    from .files import save_outputs

    folder = Path(folder)
    reference = _model_outputs(np.float32)
    candidate = _model_outputs(np.float16)
    label, edge, pixels = PLANTED
    candidate["boxes"][label] = candidate["boxes"][label].copy()
    candidate["boxes"][label][_EDGES.index(edge)] += np.float16(pixels)
    meta_ref = {"model": "paritygate demo classifier", "dtype": "float32", "role": "reference"}
    meta_cand = {
        "model": "paritygate demo classifier",
        "dtype": "float16",
        "role": "candidate",
        "planted": f"{label}.{edge} +{pixels:g} px",
    }
    return (
        save_outputs(folder / REFERENCE_FILE, reference, metadata=meta_ref),
        save_outputs(folder / CANDIDATE_FILE, candidate, metadata=meta_cand),
    )


def _bundled(name: str) -> Path:
    return Path(str(resources.files("paritygate") / "data" / name))


def run_demo(reference_file: Path, candidate_file: Path) -> dict[str, Any]:
    """Every claim of the demo on the two files; the JSON-ready report and the printable text."""
    from .compare import compare
    from .files import load_outputs, sha256_file
    from .reports.text import format_comparison
    from .structured import compare_class_decisions, compare_keyed_boxes

    expected = load_outputs(reference_file)
    actual = load_outputs(candidate_file)
    numeric = compare(
        {k: v for k, v in actual.items() if k != "boxes"},
        {k: v for k, v in expected.items() if k != "boxes"},
        atol=LOGITS_ATOL,
        min_cosine=MIN_COSINE,
        label="float16 port vs float32 reference",
    )
    decisions = compare_class_decisions(actual["logits"], expected["logits"], path="logits")
    boxes = compare_keyed_boxes(
        actual.get("boxes", {}), expected.get("boxes", {}), max_edge_delta=MAX_EDGE_PX, path="boxes"
    )
    passed = bool(numeric) and bool(decisions) and bool(boxes)
    claims = [
        (f"logits and embedding (|a - e| <= {LOGITS_ATOL:g}, cosine >= {MIN_COSINE:g})", numeric),
        ("class decisions (every argmax agrees)", decisions),
        (f"box edges (every edge within {MAX_EDGE_PX:g} px)", boxes),
    ]
    numeric_text = format_comparison(numeric).split("\n", 1)
    details = [
        numeric_text[0].split(": ", 1)[-1]
        + "\n"
        + (numeric_text[1] if len(numeric_text) > 1 else ""),
        decisions.describe(),
        boxes.describe() + f"\n  a bound of {boxes.bound_that_passes:.4g} px would have passed",
    ]
    sections = [
        f"claim {i} of {len(claims)}, {name}: {detail}"
        for i, ((name, _), detail) in enumerate(zip(claims, details), start=1)
    ]
    violated = [name.split(" (")[0] for name, result in claims if not result]
    gate_line = (
        f"gate verdict: PASS — {len(claims)} of {len(claims)} claims hold"
        if passed
        else f"gate verdict: FAIL — {len(violated)} of {len(claims)} claims violated "
        f"({', '.join(violated)})"
    )
    label, edge, pixels = PLANTED
    intro = (
        f"paritygate demo: a float16 port against its float32 reference, {len(claims)} claims. "
        f"One bug is planted on purpose ({label}.{edge} +{pixels:g} px), so the expected gate "
        f"verdict is FAIL, on exactly that edge."
    )
    text = "\n\n".join([intro, *sections, gate_line])
    report = {
        "format": "paritygate-demo-report",
        "format_version": 1,
        "passed": passed,
        "files": {
            "candidate": {"path": str(candidate_file), "sha256": sha256_file(candidate_file)},
            "reference": {"path": str(reference_file), "sha256": sha256_file(reference_file)},
        },
        "claims": {
            "logits_and_embedding": {"atol": LOGITS_ATOL, "min_cosine": MIN_COSINE},
            "decisions": {"min_argmax_agreement": 1.0},
            "boxes": {"max_edge_delta_px": MAX_EDGE_PX},
        },
        "comparison": numeric.to_dict(),
        "structured": [decisions.to_dict(), boxes.to_dict()],
    }
    return {
        "report": report,
        "text": text,
        "numeric": numeric,
        "decisions": decisions,
        "boxes": boxes,
    }


def _caught_exactly_the_planted_bug(outcome: dict[str, Any]) -> bool:
    label, edge, _ = PLANTED
    boxes = outcome["boxes"]
    return (
        bool(outcome["numeric"])
        and bool(outcome["decisions"])
        and [f.where for f in boxes.failures] == [f"{label}.{edge}"]
    )


def main(argv: list[str] | None = None) -> int:
    """Run the demo on the bundled files; write ``reports/demo-report.json`` in the current
    folder."""
    import argparse

    import click

    from .errors import UserError
    from .files import atomic_write_bytes

    parser = argparse.ArgumentParser(
        prog="python -m paritygate.demo", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--out", default="reports", help="folder for the JSON report (default: reports)"
    )
    args = parser.parse_args(argv)
    try:
        outcome = run_demo(_bundled(REFERENCE_FILE), _bundled(CANDIDATE_FILE))
        out_dir = Path(args.out)
        out_dir.mkdir(parents=True, exist_ok=True)
        report_path = out_dir / "demo-report.json"
        atomic_write_bytes(report_path, (json.dumps(outcome["report"], indent=2) + "\n").encode())
    except UserError as exc:
        click.echo(f"paritygate demo: error: {exc.one_line()}", err=True)
        return exc.exit_code
    click.echo(outcome["text"])
    click.echo("")
    caught = _caught_exactly_the_planted_bug(outcome)
    label, edge, pixels = PLANTED
    if caught:
        click.echo(
            f"demo: OK — the FAIL above is the expected outcome: the gate caught the planted bug "
            f"({label}.{edge} off by {pixels:g} px) and nothing else; float16 rounding stays "
            "within the published claims."
        )
    else:
        click.echo(
            f"demo: UNEXPECTED — the gate should fail on exactly the planted bug ({label}.{edge}) "
            "and did not; the port or the gate changed."
        )
    click.echo(f"JSON report: {report_path.resolve()}")
    return 0 if caught else 1


if __name__ == "__main__":
    sys.exit(main())
