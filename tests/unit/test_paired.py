"""The paired oracle: both orders, byte equality, leaked state, warm-up effects, lazy frameworks."""

from __future__ import annotations

import json

import numpy as np
import pytest

from paritygate.errors import InputError
from paritygate.paired import byte_differences, paired

RNG = np.random.default_rng(0)
WEIGHTS = RNG.standard_normal((4, 16, 16)).astype(np.float32) / 4
INPUT = RNG.standard_normal((8, 16)).astype(np.float32)

# A model with a callback registry, as diffusion pipelines have: callbacks see every step.
CALLBACKS: list = []


@pytest.fixture(autouse=True)
def _clean_registry():
    CALLBACKS.clear()
    yield
    CALLBACKS.clear()


def model(x: np.ndarray = INPUT) -> dict:
    h = x
    for step, w in enumerate(WEIGHTS):
        h = np.tanh(h @ w)
        for callback in CALLBACKS:
            h = callback(step, h)
    return {"latents": h, "steps": len(WEIGHTS)}


class Wrapper:
    """At threshold 0 the wrapper must be a no-op; ``leak`` forgets to unregister its callback."""

    def __init__(self, *, leak: bool = False):
        self.leak = leak
        self.active = False

    def callback(self, step: int, h: np.ndarray) -> np.ndarray:
        # While installed at threshold 0 it only observes. A stale instance applies the residual
        # it cached last, which is what a forgotten callback does to later runs.
        return h if self.active else h * np.float32(1.0001)

    def install(self) -> None:
        self.active = True
        CALLBACKS.append(self.callback)

    def uninstall(self) -> None:
        self.active = False
        if not self.leak:
            CALLBACKS.remove(self.callback)


def wrapped(*, leak: bool = False):
    def run() -> dict:
        wrapper = Wrapper(leak=leak)
        wrapper.install()
        try:
            return model()
        finally:
            wrapper.uninstall()

    return run


def test_byte_equal_noop_passes_both_orders():
    result = paired(model, wrapped(), label="threshold 0")
    assert result
    assert [(c.order, c.check, c.passed) for c in result.checks] == [
        ("forward", "a", True),
        ("forward", "b", True),
        ("reversed", "a", True),
        ("reversed", "b", True),
    ]
    assert result.messages() == []
    assert "holds" in result.summary()


def test_leaked_callback_fails_check_b_with_the_run_and_output_named():
    result = paired(model, wrapped(leak=True), orders=("forward",))
    assert not result
    forward_a, forward_b = result.checks
    assert forward_a.passed, "the candidate itself is exact while installed"
    assert not forward_b.passed
    (difference,) = forward_b.differences
    assert difference.path == "latents" and difference.reason == "bytes"
    assert difference.max_abs > 0 and difference.n_differ > 0
    expected = model()["latents"]
    CALLBACKS.append(Wrapper().callback)  # reproduce the leaked state to locate the first change
    leaked = model()["latents"]
    flat = int(np.argmax((leaked != expected).reshape(-1)))
    assert difference.first_index == np.unravel_index(flat, expected.shape)
    assert difference.max_abs == pytest.approx(float(np.max(np.abs(leaked - expected))))
    (message,) = result.messages()
    assert message.startswith(
        "forward order, check (b) baseline-after vs baseline-before (byte equality): "
        "output 'latents' differs: max_abs "
    )


def test_warm_up_effect_is_caught_only_by_the_reversed_order():
    table: dict = {}

    def baseline():
        table["scale"] = np.float32(0.5)  # a lazily built table the baseline fills on first use
        return model() | {"scaled": INPUT * table["scale"]}

    def candidate():
        return model() | {"scaled": INPUT * table.get("scale", np.float32(0.49))}

    assert paired(baseline, candidate, orders=("forward",))
    table.clear()
    result = paired(baseline, candidate, orders=("reversed",))
    assert not result
    reversed_a = result.checks[0]
    assert (reversed_a.order, reversed_a.check, reversed_a.passed) == ("reversed", "a", False)
    assert [d.path for d in reversed_a.differences] == ["scaled"]
    assert result.messages()[0].startswith(
        "reversed order, check (a) candidate-before vs baseline (byte equality): output 'scaled'"
    )


def test_run_counts_reset_calls_and_wall_times_are_recorded():
    resets = []
    result = paired(model, wrapped(), reset=lambda: resets.append(1))
    assert result.run_counts == {"baseline": 3, "candidate": 3}
    assert len(resets) == 6
    assert [r.role for r in result.runs] == [
        "baseline-before",
        "candidate",
        "baseline-after",
        "candidate-before",
        "baseline",
        "candidate-after",
    ]
    assert all(r.wall_s > 0 for r in result.runs)
    assert result.compare_s > 0 and result.overhead > 0
    forward_only = paired(model, wrapped(), orders=("forward",))
    assert forward_only.run_counts == {"baseline": 2, "candidate": 1}


def test_reset_hook_runs_before_every_run():
    state = {"calls": 0}

    def stateful():  # a model that advances internal state on each call unless reset
        state["calls"] += 1
        return np.full(3, state["calls"], dtype=np.int64)

    assert not paired(stateful, stateful)
    assert paired(stateful, stateful, reset=lambda: state.update(calls=0))


def test_result_is_json_serializable_with_messages():
    result = paired(model, wrapped(leak=True))
    data = json.loads(json.dumps(result.to_dict()))
    assert data["passed"] is False
    assert data["run_counts"] == {"baseline": 3, "candidate": 3}
    assert data["messages"] == result.messages()
    assert data["checks"][1]["differences"][0]["path"] == "latents"


def test_nan_payloads_signed_zeros_dtypes_shapes_and_missing_outputs_differ():
    nan_a = np.array([np.nan, 1.0], dtype=np.float32)
    nan_b = nan_a.copy()
    nan_b.view(np.uint32)[0] |= 1  # another quiet NaN payload
    zeros = np.array([0.0, 1.0]), np.array([-0.0, 1.0])
    found = {
        d.path: d
        for d in byte_differences(
            {
                "nan": nan_a,
                "zero": zeros[0],
                "dtype": np.ones(2, np.float32),
                "shape": np.ones(2),
                "text": "a",
                "same": np.ones(2),
                "extra": 1,
            },
            {
                "nan": nan_b,
                "zero": zeros[1],
                "dtype": np.ones(2),
                "shape": np.ones(3),
                "text": "b",
                "same": np.ones(2),
                "missing": 1,
            },
        )
    }
    assert set(found) == {"nan", "zero", "dtype", "shape", "text", "extra", "missing"}
    assert "NaN with different payloads" in found["nan"].detail and found["nan"].first_index == (0,)
    assert found["zero"].max_abs == 0.0 and "signed zeros" in found["zero"].detail
    assert found["dtype"].reason == "dtype" and "float32 vs float64" in found["dtype"].detail
    assert found["shape"].reason == "shape"
    assert (found["extra"].reason, found["missing"].reason) == ("extra", "missing")
    assert byte_differences({"nan": nan_a}, {"nan": nan_a.copy()}) == []


def test_exceptions_name_the_run_and_order():
    def broken():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError) as info:
        paired(model, broken)
    assert "raised by the candidate run of the forward order" in "".join(info.value.__notes__)


def test_bad_orders_are_input_errors():
    with pytest.raises(InputError, match="unknown order 'sideways'"):
        paired(model, model, orders=("sideways",))
    with pytest.raises(InputError, match="at least one order"):
        paired(model, model, orders=())


def twin64():
    return {"latents": model(INPUT.astype(np.float64))["latents"].astype(np.float32)}


def twin32():
    return {"latents": model()["latents"]}


def test_tolerance_mode_uses_the_claims_metric_for_check_a_and_bytes_for_check_b():
    from paritygate.results import Tolerance

    exact = paired(twin64, twin32, orders=("forward",))
    assert not exact, "the float32 path is not byte-equal to the float64 one"
    observed = exact.checks[0].differences[0].max_abs
    result = paired(twin64, twin32, tolerance=Tolerance(atol=2 * observed))
    assert result and not result.exact
    assert [c.exact for c in result.checks] == [False, True, False, True]
    tight = paired(twin64, twin32, tolerance={"atol": observed / 4}, orders=("forward",))
    assert not tight and tight.checks[1].passed
    (difference,) = tight.checks[0].differences
    assert difference.reason == "tolerance" and difference.max_abs == pytest.approx(observed)
    message = tight.messages()[0]
    assert message.startswith(
        "forward order, check (a) candidate vs baseline-before (the claim's metric): output "
        "'latents'"
    )
    assert "worst element at index" in message and "atol" in message


def test_tolerance_mode_still_catches_a_leak_byte_for_byte():
    from paritygate.results import Tolerance

    def leaky32():
        out = wrapped(leak=True)()
        return {"latents": out["latents"]}

    result = paired(twin32, leaky32, tolerance=Tolerance(atol=1e-2), orders=("forward",))
    assert result.checks[0].passed and not result.checks[1].passed
    assert result.checks[1].exact


def test_pytest_fixture_passes_a_noop_and_fails_a_leak_with_the_summary(request):
    check = request.getfixturevalue("paritygate_paired")
    result = check(model, wrapped(), label="threshold 0")
    assert result.run_counts == {"baseline": 3, "candidate": 3}
    with pytest.raises(pytest.fail.Exception) as info:
        check(model, wrapped(leak=True), label="leaky wrapper")
    text = str(info.value)
    assert "paired byte equality oracle [leaky wrapper] FAILS" in text
    assert "forward order, check (b) baseline-after vs baseline-before" in text


def test_only_check_b_with_kept_outputs_leaves_check_a_to_the_caller():
    def off32():
        return {"latents": model()["latents"] + np.float32(1e-3)}  # check (a) would fail

    result = paired(model, off32, check_a=False, keep_outputs=True)
    assert result, "check (a) is the caller's; both leaked-state checks hold"
    assert [(c.order, c.check, c.exact) for c in result.checks] == [
        ("forward", "b", True),
        ("reversed", "b", True),
    ]
    assert result.run_counts == {"baseline": 3, "candidate": 3}
    assert sorted(result.outputs) == ["forward", "reversed"]
    assert sorted(result.outputs["forward"]) == ["baseline-after", "baseline-before", "candidate"]
    forward = result.outputs["forward"]
    np.testing.assert_array_equal(forward["candidate"]["latents"], off32()["latents"])
    np.testing.assert_array_equal(forward["baseline-before"]["latents"], model()["latents"])
    assert sorted(result.outputs["reversed"]) == ["baseline", "candidate-after", "candidate-before"]
    assert result.outputs["reversed"]["baseline"]["steps"] == 4
    data = result.to_dict()
    assert "outputs" not in data and data["passed"] is True
    json.dumps(data)
    assert result.summary().startswith("paired oracle (leaked-state checks only) holds over orders")
    assert paired(model, off32, check_a=False).outputs == {}  # nothing kept unless asked


def test_only_check_b_still_fails_a_leak_and_refuses_a_tolerance():
    result = paired(
        model, wrapped(leak=True), check_a=False, keep_outputs=True, orders=("forward",)
    )
    assert not result
    (check,) = result.checks
    assert (check.check, check.actual_run, check.expected_run) == (
        "b",
        "baseline-after",
        "baseline-before",
    )
    assert result.outputs["forward"]["candidate"]["latents"].shape == INPUT.shape
    with pytest.raises(InputError, match="metric of check \\(a\\)"):
        paired(model, model, check_a=False, tolerance={"atol": 1e-3})


def test_a_zero_dimensional_output_is_compared_byte_for_byte():
    # a scalar count (a cache's reported skips): equal passes, a different value names both
    assert byte_differences({"skips": np.array(0)}, {"skips": np.array(0)}) == []
    (difference,) = byte_differences({"skips": np.array(25)}, {"skips": np.array(0)})
    assert (difference.reason, difference.n_differ, difference.max_abs) == ("bytes", 1, 25.0)
    assert difference.first_index == () and difference.actual_at_first == 25
