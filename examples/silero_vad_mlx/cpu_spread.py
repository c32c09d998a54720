"""How far the recorded references and every claim's observed value move with the CPU.

The references in ``references/`` were recorded on one CPU. torch's CPU kernels dispatch by
instruction set and vendor (ATen's vectorized ops by AVX2 / AVX-512, oneDNN convolutions and
MKL matrix products likewise) and ONNX Runtime's MLAS does too, so on another CPU family the
same model rounds differently. This script measures, on the CPU it runs on, for every gated case:

- the live TorchScript reference against the recorded one (probabilities, segments, timestamps
  from silero-vad's own ``get_speech_timestamps``), and the reference edges' smallest margin
  from the threshold they crossed;
- each candidate (MLX, ONNX Runtime) against the recorded reference, which is what the stored
  claims observe on this CPU, and against the live reference, which is what paired claims
  observe;
- the post-processor fed the recorded probabilities against the recorded timestamps.

``python cpu_spread.py --json calibration/cpu-spread-<cpu>.json`` writes the figures with the
CPU's name and instruction-set level; ``--skip-torch``, ``--skip-mlx`` and ``--skip-onnx``
leave out a runtime that is not installed. Run it once per CPU family and keep the files: the
claims' bases in ``parity.toml`` cite them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

_ENV = (
    "ATEN_CPU_CAPABILITY",
    "DNNL_MAX_CPU_ISA",
    "ONEDNN_MAX_CPU_ISA",
    "MKL_ENABLE_INSTRUCTIONS",
    "NPY_DISABLE_CPU_FEATURES",
    "OMP_NUM_THREADS",
)


def _max_abs(a: np.ndarray, b: np.ndarray) -> float:
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))


def _one_minus_cosine(a: np.ndarray, b: np.ndarray) -> float | None:
    """1 - cos from the normalized difference (keeps its precision near 1); None if undefined."""
    a, b = a.astype(np.float64), b.astype(np.float64)
    na, nb = np.linalg.norm(a), np.linalg.norm(b)
    if a.shape != b.shape or na == 0 or nb == 0:
        return None
    return float(np.sum((a / na - b / nb) ** 2) / 2)


def _compare(actual: np.ndarray, recorded: np.ndarray) -> dict:
    diff = np.abs(actual.astype(np.float64) - recorded.astype(np.float64))
    return {
        # of the float32 bytes: two CPUs' runs of one path agree bit for bit iff these match
        "sha256": hashlib.sha256(
            np.ascontiguousarray(actual, dtype=np.float32).tobytes()
        ).hexdigest()[:16],
        "max_abs": _max_abs(actual, recorded),
        "one_minus_cosine": _one_minus_cosine(actual, recorded),
        "differing": int(np.count_nonzero(diff)) if actual.shape == recorded.shape else None,
        "n": int(recorded.size),
        "worst_index": int(np.argmax(diff))
        if diff.size and actual.shape == recorded.shape
        else None,
    }


def machine() -> dict:
    from paritygate.provenance import cpu_facts, package_versions

    info = {"cpu": cpu_facts(), "packages": package_versions(), "env": {}}
    for var in _ENV:
        if var in os.environ:
            info["env"][var] = os.environ[var]
    return info


def measure(skip: set[str], torch_threads: int | None = None) -> dict:
    import runners

    cases = runners.gated_cases()
    out: dict = {"cases": {}}
    if "torch" not in skip:
        import torch

        runners.torchscript_model()  # silero-vad sets 1 torch thread on import
        if torch_threads is not None:
            torch.set_num_threads(torch_threads)
        out["torch"] = {
            "threads": torch.get_num_threads(),
            "capability": torch.backends.cpu.get_cpu_capability(),
            "mkldnn": bool(torch.backends.mkldnn.is_available()),
        }
    for case in cases:
        row: dict = {"n": int(case.reference.size)}
        recorded = case.recorded
        post = runners.gate_outputs(case.reference, case.rate, case.samples.size)
        row["postprocessor_equals_recorded"] = {
            k: bool(np.array_equal(post[k], recorded[k])) for k in ("segments", "timestamps")
        }
        live = None
        if "torch" not in skip:
            live = runners.reference_outputs(str(case.path))
            row["reference"] = _compare(live["probabilities"], case.reference)
            row["reference"]["segments_equal"] = bool(
                np.array_equal(live["segments"], recorded["segments"])
            )
            row["reference"]["timestamps_equal"] = bool(
                np.array_equal(live["timestamps"], recorded["timestamps"])
            )
            # How close the recorded reference's edges were to moving: each edge's probability
            # margin from the threshold it crossed.
            margins = [
                edge.margin
                for segment in runners.speech_segments(case.reference, case.rate, case.samples.size)
                for edge in (segment.start, segment.end)
                if edge.margin is not None
            ]
            row["reference"]["smallest_edge_margin"] = min(margins) if margins else None
        for name, run in (
            ("mlx", runners.mlx_probabilities),
            ("onnxruntime", runners.onnx_probabilities),
        ):
            if name in skip:
                continue
            probs = run(case.samples, case.rate)
            mine = runners.gate_outputs(probs, case.rate, case.samples.size)
            row[name] = {
                "vs_recorded": _compare(probs, case.reference),
                "segments_equal_recorded": bool(
                    np.array_equal(mine["segments"], recorded["segments"])
                ),
                "timestamps_equal_recorded": bool(
                    np.array_equal(mine["timestamps"], recorded["timestamps"])
                ),
            }
            if live is not None:
                row[name]["vs_live"] = _compare(probs, live["probabilities"])
                row[name]["timestamps_equal_live"] = bool(
                    np.array_equal(mine["timestamps"], live["timestamps"])
                )
        out["cases"][case.name] = row
    out["summary"] = summarize(out["cases"])
    return out


def summarize(rows: dict) -> dict:
    def worst(path: tuple[str, ...], key: str, largest: bool = True) -> dict | None:
        best = None
        for case, row in rows.items():
            node = row
            for p in path:
                node = node.get(p) if isinstance(node, dict) else None
            value = node.get(key) if isinstance(node, dict) else None
            if value is None:
                continue
            if best is None or (value > best["value"] if largest else value < best["value"]):
                best = {"value": value, "case": case}
        return best

    summary: dict = {
        "postprocessor_exact_everywhere": all(
            all(r["postprocessor_equals_recorded"].values()) for r in rows.values()
        )
    }
    if any("reference" in r for r in rows.values()):
        summary["reference_vs_recorded_max_abs"] = worst(("reference",), "max_abs")
        summary["reference_vs_recorded_one_minus_cosine"] = worst(
            ("reference",), "one_minus_cosine"
        )
        summary["reference_smallest_edge_margin"] = worst(
            ("reference",), "smallest_edge_margin", largest=False
        )
        summary["reference_timestamps_equal_recorded"] = all(
            r["reference"]["timestamps_equal"] and r["reference"]["segments_equal"]
            for r in rows.values()
        )
    for name in ("mlx", "onnxruntime"):
        if not any(name in r for r in rows.values()):
            continue
        summary[f"{name}_vs_recorded_max_abs"] = worst((name, "vs_recorded"), "max_abs")
        summary[f"{name}_vs_recorded_one_minus_cosine"] = worst(
            (name, "vs_recorded"), "one_minus_cosine"
        )
        summary[f"{name}_timestamps_equal_recorded"] = all(
            r[name]["timestamps_equal_recorded"] and r[name]["segments_equal_recorded"]
            for r in rows.values()
        )
        if any("vs_live" in r.get(name, {}) for r in rows.values()):
            summary[f"{name}_vs_live_max_abs"] = worst((name, "vs_live"), "max_abs")
            summary[f"{name}_vs_live_one_minus_cosine"] = worst(
                (name, "vs_live"), "one_minus_cosine"
            )
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--label", default=None, help="a note stored with the figures")
    parser.add_argument("--torch-threads", type=int, default=None)
    for name in ("torch", "mlx", "onnx"):
        parser.add_argument(f"--skip-{name}", action="store_true")
    args = parser.parse_args(argv)
    skip = {n for n in ("torch", "mlx") if getattr(args, f"skip_{n}")}
    if args.skip_onnx:
        skip.add("onnxruntime")
    measured = measure(skip, args.torch_threads)
    result = {"label": args.label, "machine": machine(), **measured}
    text = json.dumps(result, indent=1, sort_keys=True)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    print(
        json.dumps(
            {
                "label": args.label,
                "cpu": result["machine"]["cpu"],
                **result["summary"],
                "torch": result.get("torch"),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
