"""Runners: in-process callables (numpy, MLX) and subprocess commands under protocol v2."""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest
from spec_helpers import TINY_SPEC, make_project

from paritygate._host import host_arrays
from paritygate.errors import InputError
from paritygate.runners import (
    BARE_OUTPUT,
    PROTOCOL_VERSION,
    RunFailure,
    apply_maps,
    make_runner,
)
from paritygate.spec import OutputMap, load_spec

SUBPROCESS_SPEC = (
    TINY_SPEC
    + """
[runners.cli]
role = "candidate"
command = ["{python}", "tiny_cli.py", "{case}", "{out}"]
format = "npz"
timeout = 30
"""
)


def _expected(spec, case):
    x = np.load(spec.cases[case].path)["x"]
    w = np.random.default_rng(0).standard_normal((8, 4))
    return x @ w


def test_python_runner_lifecycle_and_outputs(tmp_path):
    spec = load_spec(make_project(tmp_path))
    runner = make_runner(spec.runners["reference"], spec)
    with runner:
        assert str(spec.root) in sys.path
        result = runner.run(spec.cases["a"])
    assert str(spec.root) not in sys.path
    assert set(result.outputs) == {"y", "logits"}
    np.testing.assert_array_equal(result.outputs["logits"], _expected(spec, "a"))
    assert result.seconds >= 0


def test_mlx_runner_outputs_become_numpy(tmp_path):
    spec = load_spec(
        make_project(tmp_path, TINY_SPEC.replace("tiny:candidate32", "tiny:candidate_mlx"))
    )
    with make_runner(spec.runners["cand"], spec) as runner:
        result = runner.run(spec.cases["b"])
    assert isinstance(result.outputs["y"], np.ndarray) and result.outputs["y"].dtype == np.float32
    np.testing.assert_allclose(result.outputs["logits"], _expected(spec, "b"), atol=1e-5)


def test_same_module_name_in_two_projects_is_not_confused(tmp_path):
    first = load_spec(make_project(tmp_path / "one"))
    other_model = {
        "tiny.py": "import numpy as np\ndef reference(case):\n    return {'y': np.ones(2), "
        "'logits': np.ones(2)}\n"
    }
    second = load_spec(make_project(tmp_path / "two", modules=other_model))
    with make_runner(first.reference, first) as r:
        a = r.run(first.cases["a"]).outputs["y"]
    with make_runner(second.reference, second) as r:
        b = r.run(second.cases["a"]).outputs["y"]
    assert a.shape == (3, 4) and b.tolist() == [1.0, 1.0]


def test_python_runner_crash_is_a_run_failure_with_traceback(tmp_path):
    spec = load_spec(
        make_project(tmp_path, TINY_SPEC.replace("tiny:candidate32", "tiny:candidate_crash"))
    )
    with make_runner(spec.runners["cand"], spec) as runner:
        with pytest.raises(RunFailure) as info:
            runner.run(spec.cases["a"])
    assert info.value.kind == "crash" and "layer 3 missing" in info.value.describe()
    assert "candidate_crash" in info.value.stderr  # the traceback's tail


def test_missing_callable_fails_at_activation(tmp_path):
    spec = load_spec(make_project(tmp_path, TINY_SPEC.replace("tiny:candidate32", "tiny:nope")))
    with pytest.raises(RunFailure, match="no attribute 'nope'"):
        make_runner(spec.runners["cand"], spec).activate()


def test_subprocess_runner_speaks_the_protocol(tmp_path):
    spec = load_spec(make_project(tmp_path, SUBPROCESS_SPEC))
    with make_runner(spec.runners["cli"], spec) as runner:
        result = runner.run(spec.cases["a"])
    assert result.outputs["y"].dtype == np.float32
    np.testing.assert_allclose(result.outputs["logits"], _expected(spec, "a"), atol=1e-5)
    assert PROTOCOL_VERSION == 2


def test_subprocess_environment_and_json_output(tmp_path):
    script = """
import json, os, sys
json.dump({"env": {"protocol": int(os.environ["PARITYGATE_PROTOCOL"]),
                   "seed": int(os.environ["PARITYGATE_SEED"])},
           "boxes": {"a": [1, 2, 3, 4]}, "name_len": len(os.environ["PARITYGATE_CASE_NAME"])},
          open(sys.argv[2], "w"))
"""
    spec_text = (
        TINY_SPEC
        + '\n[runners.js]\nrole = "candidate"\ncommand = "{python} js.py {case} {out}"\nseed = 5\n'
    )
    spec = load_spec(make_project(tmp_path, spec_text, modules={"tiny.py": "", "js.py": script}))
    with make_runner(spec.runners["js"], spec) as runner:
        out = runner.run(spec.cases["b"]).outputs
    assert out["env/protocol"].item() == 2 and out["env/seed"].item() == 5
    assert out["boxes/a"].tolist() == [1, 2, 3, 4] and out["name_len"].item() == 1


@pytest.mark.parametrize(
    "mode, kind, needle",
    [
        ("crash", "crash", "cannot open model weights"),
        ("garbage", "unparseable", "not a readable npz"),
    ],
)
def test_subprocess_failures_carry_stderr(tmp_path, mode, kind, needle):
    spec_text = SUBPROCESS_SPEC + f'env = {{ MODE = "{mode}" }}\n'
    spec = load_spec(make_project(tmp_path, spec_text))
    with make_runner(spec.runners["cli"], spec) as runner:
        with pytest.raises(RunFailure) as info:
            runner.run(spec.cases["a"])
    assert info.value.kind == kind and needle in info.value.describe()
    if mode == "crash":
        assert "status 7" in info.value.message and "/nonexistent/weights.bin" in info.value.stderr


def test_subprocess_timeout_kills_the_command(tmp_path):
    spec_text = SUBPROCESS_SPEC.replace("timeout = 30", "timeout = 1") + 'env = { MODE = "hang" }\n'
    spec = load_spec(make_project(tmp_path, spec_text))
    with make_runner(spec.runners["cli"], spec) as runner:
        with pytest.raises(RunFailure) as info:
            runner.run(spec.cases["a"])
    assert info.value.kind == "timeout" and "1 s" in info.value.message


def test_runner_outputs_are_named_by_the_one_flattener():
    tree = {"boxes": {"q": [1, 2, 3, 4]}, "seq": [np.zeros(2), np.ones(3)], "score": 0.5}
    flat = host_arrays(tree, root=BARE_OUTPUT)
    assert sorted(flat) == ["boxes/q", "score", "seq/0", "seq/1"]
    assert flat["boxes/q"].dtype.kind == "i" and flat["score"].shape == ()
    assert list(host_arrays(np.zeros(3), root=BARE_OUTPUT)) == ["output"]
    with pytest.raises(InputError, match="'label'"):
        host_arrays({"label": "cat"})
    # The rules of paritygate.outputs.flatten_outputs: a '/'-joined key names a nested output,
    # two names for one output clash, and an empty table names no output (nothing
    # under it is produced: the gate reports the reference's outputs there as missing).
    assert list(host_arrays({"boxes/q": np.zeros(1)})) == ["boxes/q"]
    with pytest.raises(InputError, match="share this name"):
        host_arrays({"boxes/q": np.zeros(1), "boxes": {"q": np.zeros(1)}})
    assert host_arrays({"boxes": {}, "score": 0.5}) == {"score": np.asarray(0.5)}


BF16_MODEL = """
import torch


def reference(case):
    return {"y": torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)}


def candidate_bf16(case):
    return {"y": torch.tensor([1.0, 2.0, 3.00390625], dtype=torch.bfloat16)}
"""


def test_torch_bfloat16_outputs_reach_the_host_exactly(tmp_path):
    # Regression: the runner's own conversion called .numpy() on a bfloat16 tensor, which torch
    # refuses (TypeError), so a working bf16 candidate was reported as crashing.
    spec_text = TINY_SPEC.replace("tiny:reference", "bf16:reference").replace(
        "tiny:candidate32", "bf16:candidate_bf16"
    )
    spec = load_spec(make_project(tmp_path, spec_text, modules={"bf16.py": BF16_MODEL}))
    with make_runner(spec.runners["cand"], spec) as runner:
        y = runner.run(spec.cases["a"]).outputs["y"]
    assert y.dtype.name == "bfloat16"
    assert y.astype(np.float64).tolist() == [1.0, 2.0, 3.0]  # 3.0039 rounds to 3 in bfloat16
    assert y.view(np.uint16).tolist() == [0x3F80, 0x4000, 0x4040]


def test_output_mapping_transpose_slice_cast():
    nhwc = np.arange(2 * 4 * 5 * 3, dtype=np.float64).reshape(2, 4, 5, 3)
    maps = {
        "image": OutputMap(
            "image",
            "image_nhwc",
            transpose=(0, 3, 1, 2),
            slice=(0, Ellipsis),
            slice_text="0, ...",
            cast="float32",
        ),
    }
    out = apply_maps({"image_nhwc": nhwc, "other": np.ones(2)}, maps)
    assert sorted(out) == ["image", "other"]
    assert out["image"].shape == (3, 4, 5) and out["image"].dtype == np.float32
    np.testing.assert_array_equal(out["image"], np.transpose(nhwc, (0, 3, 1, 2))[0])
    with pytest.raises(InputError, match="did not produce"):
        apply_maps({"other": np.ones(2)}, maps)
    with pytest.raises(InputError, match="transpose"):
        apply_maps({"image_nhwc": np.ones((2, 2))}, maps)


def test_mapping_declared_in_the_spec_is_applied(tmp_path):
    module = {
        "tiny.py": __import__("spec_helpers").TINY_MODEL
        + """

def candidate_nhwc(case):
    out = reference(case)
    return {"y_t": out["y"].T[None], "logits": out["logits"]}
"""
    }
    spec_text = TINY_SPEC.replace("tiny:candidate32", "tiny:candidate_nhwc") + (
        '\n[runners.cand.map.y]\nfrom = "y_t"\nslice = "0"\ntranspose = [1, 0]\n'
    )
    # slice applies after transpose: transpose first needs the 3-d layout -> use axes of 3
    spec_text = spec_text.replace("transpose = [1, 0]", "transpose = [0, 2, 1]")
    spec = load_spec(make_project(tmp_path, spec_text, modules=module))
    with make_runner(spec.runners["cand"], spec) as r:
        mapped = r.run(spec.cases["a"]).outputs
    with make_runner(spec.reference, spec) as r:
        ref = r.run(spec.cases["a"]).outputs
    np.testing.assert_array_equal(mapped["y"], ref["y"])
    assert json.dumps(sorted(mapped)) == json.dumps(["logits", "y"])


HANGING_MODEL = """
import threading

RELEASE = threading.Event()


def candidate_hang(case):
    RELEASE.wait(60)  # the test releases it once the watchdog has fired
    return candidate32(case)
"""


def test_in_process_timeout_fails_the_case_and_the_runners_remaining_cases(tmp_path):
    from spec_helpers import TINY_MODEL

    spec_text = TINY_SPEC.replace(
        'callable = "tiny:candidate32"', 'callable = "tiny:candidate_hang"\ntimeout = 0.5'
    )
    spec = load_spec(
        make_project(tmp_path, spec_text, modules={"tiny.py": TINY_MODEL + HANGING_MODEL})
    )
    try:
        with make_runner(spec.runners["cand"], spec) as runner:
            with pytest.raises(RunFailure) as first:
                runner.run(spec.cases["a"])
            with pytest.raises(RunFailure) as second:
                runner.run(spec.cases["b"])
    finally:
        sys.modules["tiny"].RELEASE.set()
    assert first.value.kind == "timeout" and first.value.case == "a"
    assert (
        "no result within 0.5 s" in first.value.message
        and "cannot be stopped" in first.value.message
    )
    assert (
        second.value.kind == "timeout"
        and "the call for case a timed out and is still running" in second.value.message
    )


def test_in_process_watchdog_returns_results_and_crashes_unchanged(tmp_path):
    spec_text = TINY_SPEC.replace(
        'callable = "tiny:candidate32"', 'callable = "tiny:candidate32"\ntimeout = 30'
    )
    spec_text += (
        '\n[runners.broken]\nrole = "candidate"\ncallable = "tiny:candidate_crash"\ntimeout = 30\n'
    )
    spec = load_spec(make_project(tmp_path, spec_text))
    with make_runner(spec.runners["cand"], spec) as runner:
        watched = runner.run(spec.cases["a"])
        direct = sys.modules["tiny"].candidate32(spec.cases["a"])  # the same call, unwatched
    assert watched.outputs["logits"].dtype == np.float32
    np.testing.assert_array_equal(watched.outputs["logits"], direct["logits"])
    np.testing.assert_allclose(watched.outputs["logits"], _expected(spec, "a"), atol=1e-5)
    with make_runner(spec.runners["broken"], spec) as runner:
        with pytest.raises(RunFailure) as info:
            runner.run(spec.cases["a"])
    assert (
        info.value.kind == "crash" and "weights not loaded: layer 3 missing" in info.value.message
    )
    assert "candidate_crash" in info.value.stderr  # the traceback from the worker thread


MLX_STATE_MODEL = """
import mlx.core as mx
import numpy as np

# lazy: built at import, evaluated at the first call
W_LAZY = mx.random.normal((8, 4), key=mx.random.key(0))


def candidate_mlx_module_state(case):
    return {"y": mx.tanh(mx.array(case.load()["x"].astype(np.float32)) @ W_LAZY)}


class Model:
    def __init__(self):
        self.w = mx.random.normal((8, 4), key=mx.random.key(0))  # lazy, made by the factory

    def __call__(self, case):
        return {"y": mx.tanh(mx.array(case.load()["x"].astype(np.float32)) @ self.w)}


def load():
    return Model()
"""


def test_watched_mlx_runner_keeps_its_lazy_state_on_its_thread(tmp_path):
    """MLX streams are per thread: arrays made at import or by the factory, still lazy, must be
    evaluated on the thread that made them. A watched runner imports, builds and calls on one."""
    spec_text = TINY_SPEC.replace(
        'callable = "tiny:candidate32"',
        'callable = "mlxstate:candidate_mlx_module_state"\ntimeout = 30',
    )
    spec_text += '\n[runners.built]\nrole = "candidate"\nfactory = "mlxstate:load"\ntimeout = 30\n'
    spec = load_spec(
        make_project(
            tmp_path,
            spec_text,
            modules={
                "tiny.py": __import__("spec_helpers").TINY_MODEL,
                "mlxstate.py": MLX_STATE_MODEL,
            },
        )
    )
    outputs = {}
    for name in ("cand", "built"):
        with make_runner(spec.runners[name], spec) as runner:
            outputs[name] = runner.run(spec.cases["a"]).outputs["y"]
    assert outputs["cand"].dtype == np.float32 and outputs["cand"].shape == (3, 4)
    np.testing.assert_array_equal(outputs["cand"], outputs["built"])
