"""`make test-gpu` refuses to run when a framework it tests is missing or not on the GPU."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gpu_preflight  # noqa: E402


def fake_frameworks(**broken):
    """An importer of fake frameworks, all on a GPU, except ``broken``: name -> None (import
    fails) or a module object to return instead."""
    good = {
        "torch": SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: True)),
        "triton": SimpleNamespace(),
        "jax": SimpleNamespace(default_backend=lambda: "gpu"),
        "mlx.core": SimpleNamespace(gpu="gpu", is_available=lambda device: True),
        "onnxruntime": SimpleNamespace(),
    }

    def importer(name):
        key = name.split(".")[0]
        if key in broken:
            if broken[key] is None:
                raise ImportError(f"No module named {name!r}")
            return broken[key]
        return good[name]

    return importer


def test_every_framework_on_the_gpu_passes():
    assert gpu_preflight.problems(fake_frameworks()) == {}


def test_a_missing_framework_is_refused_by_name():
    found = gpu_preflight.problems(fake_frameworks(mlx=None, onnxruntime=None))
    assert set(found) == {"mlx", "onnxruntime"}
    assert found["mlx"].startswith("cannot be imported (ImportError: No module named 'mlx.core')")


def test_a_framework_without_its_gpu_is_refused():
    cpu_torch = SimpleNamespace(cuda=SimpleNamespace(is_available=lambda: False))
    cpu_jax = SimpleNamespace(default_backend=lambda: "cpu")
    cpu_mlx = SimpleNamespace(gpu="gpu", is_available=lambda device: False)
    found = gpu_preflight.problems(fake_frameworks(torch=cpu_torch, jax=cpu_jax, mlx=cpu_mlx))
    assert found == {
        "torch": "imports, but torch.cuda.is_available() is False",
        "jax": "imports, but its default backend is 'cpu'",
        "mlx": "imports, but has no GPU device (install mlx-cuda-13 beside mlx)",
    }


def test_main_exits_non_zero_naming_what_is_missing(monkeypatch, capsys):
    monkeypatch.setattr(gpu_preflight, "problems", lambda: {"jax": "cannot be imported (x)"})
    assert gpu_preflight.main() == 1
    out, err = capsys.readouterr()
    assert "test-gpu: jax: cannot be imported (x)" in out and "test-gpu: torch: ok" in out
    assert "refusing to run: jax missing or not on the GPU" in err


def test_every_gpu_marked_test_is_in_tests_backends():
    """`make test-gpu` runs tests/backends only: a gpu-marked test elsewhere would never run."""
    root = Path(__file__).resolve().parents[2]
    marked = [
        p.relative_to(root).as_posix()
        for folder in ("tests", "examples")
        for p in (root / folder).rglob("*.py")
        if "mark.gpu" in p.read_text(encoding="utf-8") and p.name != Path(__file__).name
    ]
    assert marked and all(m.startswith("tests/backends/") for m in marked), marked
