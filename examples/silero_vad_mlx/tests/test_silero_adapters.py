"""Cross-adapter check: the port through its Python API and through cli.py in a subprocess must
agree at zero tolerance on every case (one numerical path, so any difference is a bug)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest


def test_cli_and_python_api_agree_exactly_on_every_case(cases, runners, example_folder):
    import cli

    import paritygate

    for case in cases:
        from_cli = runners.run_cli(case.path)
        from_api = cli.analyse(case.path)
        assert from_cli == from_api, case.name  # JSON floats round-trip float32 values exactly
        probs = np.asarray(from_cli["probabilities"], dtype=np.float32)
        np.testing.assert_array_equal(probs, runners.mlx_probabilities(case.samples, case.rate))
        exact = paritygate.compare(
            {"p": probs}, {"p": np.asarray(from_api["probabilities"], dtype=np.float32)}
        )
        assert exact and exact["p"].max_abs == 0.0


def test_gate_outputs_of_the_cli_match_the_runner(cases, example_folder, tmp_path):
    import runners
    from safetensors.numpy import load_file

    for name, n_segments in (("short_pauses", 4), ("silence", 0)):
        case = next(c for c in cases if c.name == name)
        out = tmp_path / f"{name}.safetensors"
        subprocess.run(
            [
                sys.executable,
                str(example_folder / "cli.py"),
                str(case.path),
                "-o",
                str(out),
                "--gate-outputs",
            ],
            check=True,
        )
        from_cli = load_file(str(out))
        from_api = runners.mlx_outputs(str(case.path))
        assert sorted(from_cli) == ["probabilities", "segments", "timestamps"]
        for name in from_cli:
            np.testing.assert_array_equal(from_cli[name], from_api[name])
        assert from_cli["segments"].shape == (n_segments, 2)


def test_a_diverging_adapter_would_be_caught(cases, runners, example_folder):
    # Both directions: an adapter that, say, re-normalised the audio differs, and the exact
    # comparison reports it.
    import paritygate

    case = next(c for c in cases if c.name == "clean_speech")
    api = runners.mlx_probabilities(case.samples, case.rate)
    drifted = runners.mlx_probabilities(case.samples / np.abs(case.samples).max() * 0.9, case.rate)
    comparison = paritygate.compare({"probabilities": drifted}, {"probabilities": api})
    assert not comparison
    assert comparison["probabilities"].mismatches > 0


def test_cli_rejects_an_unsupported_rate_with_exit_2(make_cases, example_folder, tmp_path):
    wav = make_cases.CASES_DIR / "unsupported_rate_22050.wav"
    proc = subprocess.run(
        [
            sys.executable,
            str(example_folder / "cli.py"),
            str(wav),
            "-o",
            str(tmp_path / "out.json"),
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "unsupported_rate_22050.wav: unsupported sample rate 22050 Hz" in proc.stderr
    assert "supported rates are 8000 and 16000 Hz" in proc.stderr
    assert not (tmp_path / "out.json").exists()


def test_cli_output_is_json_with_timestamps(cases, runners):
    case = next(c for c in cases if c.name == "clean_speech")
    out = runners.run_cli(case.path, "--threshold", "0.5")
    assert out["sample_rate"] == 16000 and out["model_rate"] == 16000
    assert out["timestamps"] == case.reference_timestamps
    json.dumps(out)
    with pytest.raises(RuntimeError, match="exited 2"):
        runners.run_cli(case.path.with_name("no_such_file.wav"))
