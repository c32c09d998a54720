"""What locating costs: captured runs against plain ones, bisect's runs, and host memory.

Arms (each timed as the median of ``--repeat`` runs after one warm-up, interleaved):

- TeaCache (examples/teacache_mlx, 25 sampling steps): the MLX pipeline plain and with every
  module captured into a recorder (``capture``); the PyTorch twin the same; a whole
  ``locate_models`` (one run per side, compared as they arrive) and a ``bisect_models`` over
  ``blocks\\.\\d+`` on a planted bug (its run count and wall time).
- Silero VAD (examples/silero_vad_mlx): the MLX port's ``probabilities`` plain and with its five
  stages captured as ``Functions``.
- ONNX Runtime (silero_vad_16k_op15.onnx from the silero-vad wheel, 1 thread): 100 chunks
  through ``session.run`` plain and captured (the captured copy's session creation timed apart).

Host memory: the peak of traced allocations (tracemalloc, which numpy reports to) during a
TeaCache ``locate_models`` (pairs compared as they arrive), with ``keep=True``, and during a
bisect (whose reference activations are held throughout), against the size of every reference
activation.

    PYTHONPATH=src python benchmarks/bench_locate.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def timed(function, repeat: int) -> float:
    function()
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def peak(function) -> int:
    tracemalloc.start()
    try:
        function()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def teacache(repeat: int) -> dict:
    import mlx.core as mx

    from paritygate.locate import _Recorder, bisect_models, capture, locate_models
    from paritygate.testing import use_project

    folder = ROOT / "examples" / "teacache_mlx"
    sys.path.insert(0, str(folder))
    use_project(folder)
    import gate_runners as runners
    import model as model_mod
    import torch_twin

    from paritygate import load_spec

    spec = load_spec(folder / "parity.toml")
    case = next(iter(spec.cases.values()))
    noise, label = runners.case_inputs(case)
    twin, mlx_model = runners.torch_twin.model(), runners.vanilla.model()
    pipeline = model_mod.Pipeline(mlx_model)

    def torch_run():
        return torch_twin.sample_torch(twin, noise, label)

    def mlx_run():
        return np.array(pipeline.sample(noise, label))

    def captured(model, run):
        def go():
            with capture(model, _Recorder()):
                run()

        return go

    out = {
        "mlx_plain_s": timed(mlx_run, repeat),
        "mlx_captured_s": timed(captured(mlx_model, mlx_run), repeat),
        "torch_plain_s": timed(torch_run, repeat),
        "torch_captured_s": timed(captured(twin, torch_run), repeat),
    }
    bound = 2.9e-6
    out["locate_s"] = timed(
        lambda: locate_models(torch_run, twin, mlx_run, mlx_model, bound=bound), repeat
    )
    recorder = _Recorder()
    with capture(twin, recorder):
        torch_run()
    out["reference_activations"] = len(recorder.items)
    out["reference_activation_bytes"] = sum(r.array.nbytes for r in recorder.items)
    out["locate_peak_bytes"] = peak(
        lambda: locate_models(torch_run, twin, mlx_run, mlx_model, bound=bound)
    )
    out["locate_keep_peak_bytes"] = peak(
        lambda: locate_models(torch_run, twin, mlx_run, mlx_model, bound=bound, keep=True)
    )
    restore = model_mod.mutate_block(mlx_model, 4, 1.01)
    try:

        def bisect():
            return bisect_models(
                torch_run, twin, mlx_run, mlx_model, bound=bound, points=r"blocks\.\d+"
            )

        found = bisect()
        start = time.perf_counter()
        bisect()
        out["bisect_s"] = time.perf_counter() - start
        out["bisect_points"] = len(found.points)
        out["bisect_resumed_runs"] = len(found.runs)
        out["bisect_layer"] = found.layer
        out["bisect_peak_bytes"] = peak(bisect)
    finally:
        restore()
    mx.clear_cache()
    return out


def silero(repeat: int) -> dict:
    from paritygate.locate import Functions, _Recorder, capture
    from paritygate.testing import use_project

    folder = ROOT / "examples" / "silero_vad_mlx"
    sys.path.insert(0, str(folder))
    use_project(folder)
    import runners
    import vad_mlx

    case = runners.gated_cases()[0]
    port = vad_mlx.load()
    stages = {
        "stft": "_stft_magnitude",
        "encoder": "_encode",
        "decoder.rnn": "_lstm",
        "decoder.state": "_store_state",
        "decoder": "_decode",
    }

    def run():
        return port.probabilities(case.samples, case.rate)

    def captured():
        with capture(Functions(port, stages), _Recorder()):
            run()

    return {
        "case": case.name,
        "plain_s": timed(run, repeat),
        "captured_s": timed(captured, repeat),
    }


def onnx(repeat: int) -> dict:
    import importlib.util

    import onnxruntime

    from paritygate.locate import _Recorder, capture

    path = Path(importlib.util.find_spec("silero_vad").origin).parent / "data"
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(
        str(path / "silero_vad_16k_op15.onnx"), options, providers=["CPUExecutionProvider"]
    )
    chunks = np.random.default_rng(0).standard_normal((100, 1, 576)).astype(np.float32) * 0.1

    def run():
        state = np.zeros((2, 1, 128), np.float32)
        for chunk in chunks:
            _, state = session.run(None, {"input": chunk, "state": state, "sr": np.array(16000)})

    recorder = _Recorder()

    def captured():
        recorder.items.clear()
        recorder.calls.clear()
        with capture(session, recorder):
            run()

    start = time.perf_counter()
    with capture(session, _Recorder()):
        setup = time.perf_counter() - start
    return {
        "chunks": len(chunks),
        "plain_s": timed(run, repeat),
        "captured_s": timed(captured, repeat),
        "captured_session_setup_s": setup,
        "activations_per_chunk": len(recorder.items) // len(chunks),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    results = {
        "teacache": teacache(args.repeat),
        "silero_functions": silero(args.repeat),
        "onnx": onnx(args.repeat),
    }
    print(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
