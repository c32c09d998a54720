"""The GPU driver's bootstrap: what the machine lacks comes from the carried wheels, or the call
stops with one line naming it (the runs themselves need the GPU; their CPU dry run is
``gpu/run_gpu.py calibrate|bench --device cpu --smoke``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile

import pytest


@pytest.fixture(scope="module")
def driver(example_folder):
    path = example_folder / "gpu" / "run_gpu.py"
    spec = importlib.util.spec_from_file_location("encoder_run_gpu", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _wheel(folder, name: str, body: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as archive:
        archive.writestr(f"{name}/__init__.py", body)
        archive.writestr(f"{name}-1.0.dist-info/METADATA", f"Name: {name}\nVersion: 1.0\n")


def test_a_missing_package_is_unpacked_from_its_wheel_and_imports(driver, tmp_path, monkeypatch):
    wheels, site = tmp_path / "wheels", tmp_path / "site"
    _wheel(wheels, "pg_carried_pkg", "VALUE = 42\n")
    _wheel(wheels, "pg_unused_pkg", "raise ImportError('never unpacked')\n")
    monkeypatch.setattr(driver, "NEEDED", {"json": [], "pg_carried_pkg": ["pg_carried_pkg"]})
    env, info = driver.bootstrap(None, wheels, site)
    assert info["missing_before"] == ["pg_carried_pkg"]
    assert info["unpacked"] == ["pg_carried_pkg-1.0-py3-none-any.whl"]
    assert not (site / "pg_unused_pkg").exists()  # only what is missing is unpacked
    out = subprocess.run(
        [sys.executable, "-c", "import pg_carried_pkg; print(pg_carried_pkg.VALUE)"],
        env=env,
        capture_output=True,
        text=True,
    )
    assert out.stdout.strip() == "42", out.stderr


def test_a_package_neither_installed_nor_carried_stops_the_call_naming_it(
    driver, tmp_path, monkeypatch
):
    wheels = tmp_path / "wheels"
    _wheel(wheels, "pg_other_pkg", "")
    monkeypatch.setattr(driver, "NEEDED", {"pg_absent_pkg": ["pg_absent_pkg"]})
    with pytest.raises(SystemExit, match=r"cannot import pg_absent_pkg \(no wheel for it in "):
        driver.bootstrap(None, wheels, tmp_path / "site")
    monkeypatch.setattr(driver, "NEEDED", {"mlx_absent.core": []})
    with pytest.raises(SystemExit, match="cannot import mlx_absent.core"):
        driver.bootstrap(None, tmp_path / "no-wheels", tmp_path / "site")


def _repro(*args: str) -> subprocess.CompletedProcess:
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "gpu" / "repro_quantized_matmul.py"
    return subprocess.run(
        [sys.executable, str(script), "--device", "cpu", "--rows", "1,8", "--bits", "8", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_the_quantized_matmul_repro_runs_on_cpu_and_finds_no_bad_shape():
    """MLX's CPU backend agrees with the dequantized product at every width: exit 0."""
    res = _repro()
    assert res.returncode == 0, res.stdout + res.stderr
    assert "no bad shape among 12 (Device(cpu, 0))" in res.stdout
    assert "MLX 0.32" in res.stdout and "seed 0" in res.stdout


def test_the_repro_prints_the_bad_shapes_and_exits_1_when_it_finds_some():
    """The failing direction, on CPU: a zero tolerance makes float rounding a finding, so the
    report of bad shapes (and the exit status) is exercised without a GPU."""
    res = _repro("--tol", "0", "--widths", "64")
    assert res.returncode == 1, res.stdout + res.stderr
    assert "bad shape(s) of 4" in res.stdout
    assert "bits=8 dtype=float32 x=(8, 64) w=(64, 64) group_size=64: max |got - expected| = " in (
        res.stdout
    )
    bad = _repro("--rows", "0")
    assert bad.returncode == 2 and "expected whole numbers >= 1" in bad.stderr
