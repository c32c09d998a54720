"""Per-chunk latency of the TorchScript reference, ONNX Runtime and the MLX port (CPU).

Streaming, as a voice application calls a VAD: one 512-sample chunk at 16 kHz per call, the
model's state kept between calls (the chunks of ``cases/clean_speech.wav`` in order, state reset
when the case wraps around). Every call ends synchronized (``.item()`` for torch, ``mx.eval`` and
``float()`` for MLX, ONNX Runtime returns host arrays).

Design (paritygate.bench.run_bench): the reference is the baseline, each candidate is timed
against it in interleaved blocks (AB, BA, ...) analysed as pairs; cold calls apart, warm-up not
counted; the outputs of the first call of every block are checked against each other within the
probability claim's bound (the code timed is the code gated); raw samples kept. The whole
experiment runs ``--runs`` times to show the run-to-run variability of p50 / p90.

A second workload times whole files (offline use): the 256 chunks of the same case per call,
the reference and ONNX Runtime chunk by chunk as ``get_speech_timestamps`` does, the MLX port
through its whole-waveform path (front end and encoder batched over all chunks, the LSTM
sequential); outputs checked against each other per block.

    python bench.py --runs 2 --json bench-results/cpu.json
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import runners  # noqa: E402


class ChunkStream:
    """Cycles through the chunks of one case; ``step()`` calls the model on the next chunk."""

    def __init__(self, chunks: np.ndarray, call, reset) -> None:
        self.chunks, self.call, self.reset = chunks, call, reset
        self.index = 0
        reset()

    def step(self, iteration) -> float:
        if self.index == len(self.chunks):
            self.index = 0
            self.reset()
        value = self.call(self.chunks[self.index])
        self.index += 1
        return value


def torchscript_stream(chunks):
    import torch

    model = runners.torchscript_model()
    tensors = [torch.from_numpy(c.copy()) for c in chunks]
    positions = iter(range(10**12))

    def call(chunk):
        with torch.no_grad():
            return model(tensors[next(positions) % len(tensors)], 16000).item()

    def reset():
        nonlocal positions
        model.reset_states()
        positions = iter(range(10**12))

    return ChunkStream(chunks, call, reset)


def mlx_stream(chunks):
    import vad_mlx

    port = vad_mlx.load()
    return ChunkStream(chunks, lambda c: port(c, 16000), port.reset_states)


def onnx_stream(chunks):
    session = runners.onnx_session()
    state = {}
    sr = np.array(16000, dtype=np.int64)

    def reset():
        state["s"] = np.zeros((2, 1, 128), dtype=np.float32)
        state["ctx"] = np.zeros((1, 64), dtype=np.float32)

    def call(chunk):
        x = np.concatenate([state["ctx"], chunk[None, :]], axis=1)
        prob, state["s"] = session.run(None, {"input": x, "state": state["s"], "sr": sr})
        state["ctx"] = x[:, -64:]
        return float(prob.reshape(-1)[0])

    return ChunkStream(chunks, call, reset)


def provenance(case) -> dict:
    from paritygate.bench import input_fingerprint
    from paritygate.provenance import git_state, machine_facts, package_versions, utc_now

    facts = machine_facts()
    git = git_state(HERE) or {}
    versions = package_versions(["silero-vad"])
    return {
        "date": utc_now(),
        "source_revision": git.get("revision", "unknown"),
        "machine": facts["cpu"] or facts["machine"],
        "cpu_isa": facts["cpu_isa"],
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": {
            p: versions.get(p) for p in ("torch", "silero-vad", "onnxruntime", "mlx", "numpy")
        },
        "torch_threads": __import__("torch").get_num_threads(),
        "onnxruntime_threads": "intra 1, inter 1",
        "workload": "streaming, 1 chunk of 512 samples at 16 kHz per call, state kept",
        "input_sha256": input_fingerprint({"chunks": case}),
        "shapes": "(1, 512) per call",
        "batching": "none",
        "dtype": "float32",
        "device": "cpu",
        "sync": ".item() / mx.eval + float() / host arrays",
        "command": "python bench.py " + " ".join(sys.argv[1:]),
    }


def main(argv: list[str] | None = None) -> int:
    from paritygate.bench import run_bench

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--blocks", type=int, default=10)
    parser.add_argument("--block-size", type=int, default=30)
    parser.add_argument("--json", type=Path, help="write every result with raw samples here")
    args = parser.parse_args(argv)

    from paritygate import load_spec

    spec = load_spec(runners.SPEC_PATH)
    case = next(c for c in runners.gated_cases(spec) if c.name == "clean_speech")
    chunks = case.samples[: (case.samples.size // 512) * 512].reshape(-1, 512).copy()
    # Each candidate's outputs are checked in every block against its own max-abs claim.
    bounds = {
        "mlx": spec.claims["probability-max-abs"].bound,
        "onnxruntime": spec.claims["onnx-probability-max-abs"].bound,
    }
    runners.torchscript_model()  # importing silero_vad sets torch to one thread, as shipped
    prov = provenance(chunks)
    print(json.dumps(prov, indent=1))

    file_results = []
    for run in range(args.runs):
        for name, fn in (
            ("mlx", lambda it: runners.mlx_probabilities(case.samples, case.rate)),
            ("onnxruntime", lambda it: runners.onnx_probabilities(case.samples, case.rate)),
        ):
            result = run_bench(
                lambda it: runners.reference_probabilities(case.samples, case.rate),
                fn,
                workload=f"whole file ({chunks.shape[0]} chunks), torchscript vs {name}",
                blocks=args.blocks,
                block_size=3,
                warmup=2,
                sync=lambda value: None,
                check_outputs=lambda a, b, bound=bounds[name]: (
                    a.shape == b.shape and float(np.abs(a - b).max()) <= bound
                ),
                provenance={
                    **prov,
                    "candidate": name,
                    "run": run,
                    "workload": "whole file, 1 call per case",
                },
            )
            file_results.append(result)
            b, c = result.baseline.summary(), result.candidate.summary()
            print(
                f"run {run} file {name:<12} torchscript p50 {b['p50_s'] * 1e3:.1f} ms | {name} "
                f"p50 {c['p50_s'] * 1e3:.1f} ms | {result.verdict}"
            )
    file_summary = {}
    for name in ("torchscript", "mlx", "onnxruntime"):
        sides = [
            r.baseline if name == "torchscript" else r.candidate
            for r in file_results
            if name == "torchscript" or r.provenance["candidate"] == name
        ]
        p50 = [s.summary()["p50_s"] * 1e3 for s in sides]
        file_summary[name] = {
            "p50_ms": [round(v, 2) for v in p50],
            "p50_ms_median": round(float(np.median(p50)), 1),
            "p50_ms_spread": round(max(p50) - min(p50), 1),
        }
    print(json.dumps({"whole_file_ms": file_summary}, indent=1))

    results = []
    for run in range(args.runs):
        for name, make in (("mlx", mlx_stream), ("onnxruntime", onnx_stream)):
            base, cand = torchscript_stream(chunks), make(chunks)
            result = run_bench(
                base.step,
                cand.step,
                workload=f"per-chunk latency, torchscript vs {name}",
                blocks=args.blocks,
                block_size=args.block_size,
                warmup=10,
                sync=lambda value: None,  # each call returns a host float: already synchronized
                check_outputs=lambda a, b, bound=bounds[name]: abs(a - b) <= bound,
                provenance={**prov, "candidate": name, "run": run},
            )
            results.append(result)
            b, c = result.baseline.summary(), result.candidate.summary()
            print(
                f"run {run} {name:<12} torchscript p50 {b['p50_s'] * 1e3:.3f} ms "
                f"p90 {b['p90_s'] * 1e3:.3f} ms | {name} p50 {c['p50_s'] * 1e3:.3f} ms "
                f"p90 {c['p90_s'] * 1e3:.3f} ms | {result.verdict}"
            )
    summary = {}
    for name in ("torchscript", "mlx", "onnxruntime"):
        sides = [
            r.baseline if name == "torchscript" else r.candidate
            for r in results
            if name == "torchscript" or r.provenance["candidate"] == name
        ]
        p50 = [s.summary()["p50_s"] * 1e3 for s in sides]
        p90 = [s.summary()["p90_s"] * 1e3 for s in sides]
        summary[name] = {
            "p50_ms": [round(v, 4) for v in p50],
            "p90_ms": [round(v, 4) for v in p90],
            "p50_ms_median": round(float(np.median(p50)), 3),
            "p50_ms_spread": round(max(p50) - min(p50), 3),
            "p90_ms_median": round(float(np.median(p90)), 3),
            "p90_ms_spread": round(max(p90) - min(p90), 3),
        }
    speedups = {
        name: [round(r.speedup, 3) for r in results if r.provenance["candidate"] == name]
        for name in ("mlx", "onnxruntime")
    }
    print(json.dumps({"summary_ms": summary, "speedup_vs_torchscript": speedups}, indent=1))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {
                    "format": "silero-vad-mlx-bench",
                    "provenance": prov,
                    "summary_ms": summary,
                    "speedup_vs_torchscript": speedups,
                    "whole_file_ms": file_summary,
                    "whole_file_speedup_vs_torchscript": {
                        name: [
                            round(r.speedup, 3)
                            for r in file_results
                            if r.provenance["candidate"] == name
                        ]
                        for name in ("mlx", "onnxruntime")
                    },
                    "results": [r.to_dict() for r in results],
                    "whole_file_results": [r.to_dict() for r in file_results],
                },
                indent=1,
            )
            + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
