"""A first port, as a new user makes it from the docs: a scikit-learn model ported to ONNX
Runtime, its runners taking the inputs dict, the candidate a factory that loads
``model.onnx`` by a relative path; started with ``paritygate init``, gated from another folder
and from the project's ``tests/`` folder by the pytest plugin."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from paritygate.cli import main

pytestmark = pytest.mark.slow

SRC = Path(__file__).resolve().parents[2] / "src"

RUNNERS = """
import numpy as np
import onnxruntime as ort
from sklearn.linear_model import LinearRegression

_rng = np.random.default_rng(0)
_X = _rng.standard_normal((64, 4))
MODEL = LinearRegression().fit(_X, _X @ np.array([0.5, -1.0, 2.0, 0.25]) + 0.1)


def sklearn_reference(inputs):
    return {"y": MODEL.predict(inputs["x"].astype(np.float64)).astype(np.float32)}


def onnx_candidate(inputs):
    session = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    return {"y": session.run(None, {"x": inputs["x"]})[0][:, 0]}


def load_onnx(path="model.onnx"):
    session = ort.InferenceSession(path, providers=["CPUExecutionProvider"])

    def run(inputs):
        return {"y": session.run(None, {"x": inputs["x"]})[0][:, 0]}

    return run


def onnx_on_file(path):
    x = np.load(path, allow_pickle=False)["x"]
    return load_onnx()({"x": x})


def crashing(inputs):
    raise RuntimeError("the port is not finished")
"""

PLUGIN_TEST = """
def test_port(paritygate_gate):
    paritygate_gate("../parity.toml")
"""


# A linear model as ONNX protobuf bytes, encoded by hand (the onnx package is not needed to
# make one): y = x @ W + B, one Gemm node.
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, value: int | str | bytes) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    data = value.encode() if isinstance(value, str) else value
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _tensor(name: str, array: np.ndarray) -> bytes:
    array = np.ascontiguousarray(array, dtype=np.float32)
    dims = b"".join(_field(1, int(d)) for d in array.shape)
    return dims + _field(2, 1) + _field(8, name) + _field(9, array.tobytes())


def _value_info(name: str, dims: list[int | str]) -> bytes:
    shape = b"".join(_field(1, _field(2, d) if isinstance(d, str) else _field(1, d)) for d in dims)
    return _field(1, name) + _field(2, _field(1, _field(1, 1) + _field(2, shape)))


def linear_onnx(coef: np.ndarray, intercept: float) -> bytes:
    w = np.atleast_2d(np.asarray(coef, dtype=np.float32)).T  # (features, 1)
    b = np.atleast_1d(np.asarray(intercept, dtype=np.float32))
    node = b"".join(_field(1, n) for n in ("x", "W", "B")) + _field(2, "y") + _field(4, "Gemm")
    graph = (
        _field(1, node)
        + _field(2, "linear")
        + _field(5, _tensor("W", w))
        + _field(5, _tensor("B", b))
        + _field(11, _value_info("x", ["n", w.shape[0]]))
        + _field(12, _value_info("y", ["n", w.shape[1]]))
    )
    return _field(1, 8) + _field(8, _field(1, "") + _field(2, 13)) + _field(7, graph)


@pytest.fixture
def port(tmp_path):
    """``tmp_path/port``: runners.py, model.onnx exported from the fitted model, 40 cases."""
    folder = tmp_path / "port"
    (folder / "cases").mkdir(parents=True)
    (folder / "runners.py").write_text(RUNNERS)
    namespace: dict = {}
    exec(compile(RUNNERS, "runners.py", "exec"), namespace)
    model = namespace["MODEL"]
    (folder / "model.onnx").write_bytes(linear_onnx(model.coef_, model.intercept_))
    rng = np.random.default_rng(1)
    for i in range(40):
        x = rng.standard_normal((16, 4)).astype(np.float32)
        np.savez(folder / "cases" / f"batch_{i:02d}.npz", x=x)
    return folder


def _init(port, monkeypatch, *extra: str, candidate: str = "runners:load_onnx") -> int:
    monkeypatch.chdir(port)
    return main(
        [
            "init",
            "--cases",
            "cases/*.npz",
            "--reference",
            "runners:sklearn_reference",
            "--candidate",
            candidate,
            *extra,
        ]
    )


def test_init_names_pass_inputs_when_the_function_reads_the_inputs_dict(port, monkeypatch, capsys):
    assert _init(port, monkeypatch, candidate="runners:onnx_candidate") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and len(err) < 240, err
    assert "reference runners:sklearn_reference failed on case batch_00 (crash at " in err
    assert "runners.py:12): TypeError: 'Case' object is not subscriptable" in err
    assert err.rstrip().endswith("try --pass inputs)"), err
    assert not (port / "parity.toml").exists()


def test_init_names_the_runner_whose_calling_convention_differs(port, monkeypatch, capsys):
    """The reference reads the inputs dict (--pass inputs); the candidate opens the case file
    itself: handed the dict, it fails on the first case, and the fix names the candidate."""
    assert _init(port, monkeypatch, "--pass", "inputs", candidate="runners:onnx_on_file") == 2
    err = capsys.readouterr().err
    assert "candidate runners:onnx_on_file failed on case batch_00" in err
    assert err.rstrip().endswith("try --pass candidate:path)"), err
    assert not (port / "parity.toml").exists()
    capsys.readouterr()
    extra = ("--pass", "inputs", "--pass", "candidate:path", "--atol", "1e-5")
    assert _init(port, monkeypatch, *extra, candidate="runners:onnx_on_file") == 0
    text = (port / "parity.toml").read_text()
    assert 'pass = "inputs"' in text and 'pass = "path"' in text


def test_init_leaves_a_candidate_crash_to_the_gate(port, monkeypatch, capsys):
    """A candidate that fails for another reason than its argument (an unfinished port) is
    the gate's to report: init writes the spec."""
    assert _init(port, monkeypatch, "--pass", "inputs", candidate="runners:crashing") == 0
    assert (port / "parity.toml").is_file()


def test_init_with_pass_inputs_and_a_factory_then_gate_from_another_folder(
    port, monkeypatch, capsys
):
    extra = ("--pass", "inputs", "--factory", "candidate", "--atol", "1e-5")
    assert _init(port, monkeypatch, *extra) == 0
    text = (port / "parity.toml").read_text()
    assert 'factory = "runners:load_onnx"' in text and text.count('pass = "inputs"') == 2
    monkeypatch.chdir(port.parent)  # cd .. && paritygate gate port/parity.toml
    assert main(["record", "port/parity.toml"]) == 0
    capsys.readouterr()
    assert main(["gate", "port/parity.toml"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "40/40 cases" in out and "PASS" in out
    assert os.getcwd() == str(port.parent)  # the working folder is restored


def test_gate_does_not_read_a_model_beside_the_caller(port, monkeypatch, capsys):
    """The model the runner opens by a relative path is the spec's: one that lies only in the
    folder the gate is started from is not found, and the failure names it."""
    extra = ("--pass", "inputs", "--factory", "candidate", "--atol", "1e-5")
    assert _init(port, monkeypatch, *extra) == 0
    monkeypatch.chdir(port.parent)
    assert main(["record", "port/parity.toml"]) == 0
    (port / "model.onnx").rename(port.parent / "model.onnx")
    capsys.readouterr()
    assert main(["gate", "port/parity.toml"]) == 1
    out = capsys.readouterr().out
    assert "runner candidate crashed" in out and "NoSuchFile" in out and "model.onnx" in out


def test_quick_takes_pass_and_factory(port, monkeypatch, capsys):
    monkeypatch.chdir(port)
    argv = ["quick", "--reference", "runners:sklearn_reference", "--inputs", "cases/*.npz"]
    argv += ["--atol", "1e-5"]
    assert main([*argv, "--candidate", "runners:onnx_candidate"]) == 2
    err = capsys.readouterr().err
    assert "'Case' object is not subscriptable" in err and "try --pass inputs" in err
    code = main(
        [*argv, "--candidate", "runners:load_onnx", "--pass", "inputs", "--factory", "candidate"]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "40/40 cases" in out


def _pytest_in(folder: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")]))
    env["COLUMNS"] = "80"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rf"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_pytest_plugin_run_from_the_tests_folder(port, monkeypatch):
    assert (
        _init(port, monkeypatch, "--pass", "inputs", "--factory", "candidate", "--atol", "1e-5")
        == 0
    )
    assert main(["record", str(port)]) == 0
    (port / "tests").mkdir()
    (port / "tests" / "test_parity.py").write_text(PLUGIN_TEST)
    result = _pytest_in(port / "tests")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


@pytest.mark.parametrize(
    "candidate",
    [
        'callable = "runners:crashing"',  # crashes on every case
        'factory = "runners:load_onnx"\noptions = { path = "nope.onnx" }',  # never starts
    ],
    ids=["every-case", "factory"],
)
def test_pytest_plugin_shows_a_crashing_runner_once_and_first(port, monkeypatch, candidate):
    extra = ("--pass", "inputs", "--factory", "candidate", "--atol", "3.3e-6")
    assert _init(port, monkeypatch, *extra) == 0
    assert main(["record", str(port)]) == 0
    spec = port / "parity.toml"
    text = spec.read_text()
    spec.write_text(text.replace('factory = "runners:load_onnx"', candidate))
    (port / "tests").mkdir()
    (port / "tests" / "test_parity.py").write_text(PLUGIN_TEST)
    result = _pytest_in(port / "tests")
    assert result.returncode == 1, result.stdout
    lines = result.stdout.splitlines()
    section = lines[next(i for i, line in enumerate(lines) if "= paritygate =" in line) :]
    section = section[: next(i for i, line in enumerate(section) if "short test summary" in line)]
    assert not [line for line in section if len(line) > 80], section
    errors = [i for i, line in enumerate(section) if line.startswith("  ERROR runner candidate")]
    claim = [i for i, line in enumerate(section) if line.startswith("  FAIL outputs-max-abs")]
    assert len(errors) == 1 and len(claim) == 1 and errors[0] < claim[0], section
    assert not [line for line in section if "FAIL batch_" in line], section
    assert "    not evaluated on 40 case(s): the runner failed (ERROR above)" in section
