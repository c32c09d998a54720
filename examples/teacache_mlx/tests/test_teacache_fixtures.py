"""Drift oracle: the pinned fixtures are the bytes they were when the claims were measured.

A failure here says "something shifted; re-record deliberately", never "the cache is wrong".
"""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from paritygate import load_spec, verify


def test_weights_and_rescale_fit_match_their_pinned_sha256(example_folder, spec):
    from common import SUMS, read_sums, sha256_file

    sums = read_sums(SUMS)
    assert set(sums) == {"dit_digits.safetensors", "teacache_rescale.json"}
    for name, digest in sums.items():
        assert sha256_file(SUMS.parent / name) == digest, name
    pins = spec.runners["vanilla"].pins["files"]
    assert pins == {f"weights/{name}": digest for name, digest in sums.items()}
    assert (SUMS.parent / "dit_digits.safetensors").stat().st_size < 2 * 1024 * 1024


def test_case_files_hold_the_noise_their_seed_draws(example_folder, cases):
    from common import Case, initial_noise

    for case in cases:
        data = case.load()
        seed = int(case.name.split("-")[0].removeprefix("seed"))
        assert int(data["label"]) == case.label == seed % 10
        assert np.array_equal(data["noise"], initial_noise(Case(seed, case.label)))


def test_verify_passes_then_reports_tampered_weights_as_drift(example_folder, tmp_path):
    project = tmp_path / "teacache_mlx"
    shutil.copytree(
        example_folder,
        project,
        ignore=shutil.ignore_patterns(
            "__pycache__", "tests", "calibration", "parity-reports", "*.png", "*.log"
        ),
    )
    spec = load_spec(project / "parity.toml")
    assert verify(spec, runners=["vanilla"]).passed

    weights = project / "weights" / "dit_digits.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01  # one bit of one weight
    weights.write_bytes(bytes(data))
    drift = verify(load_spec(project / "parity.toml"), runners=["vanilla"]).drift
    assert drift, "a changed weights file must be drift"
    assert any("dit_digits.safetensors" in f"{d.subject} {d.detail}" for d in drift)


def test_verify_reports_a_changed_case_input_as_drift(example_folder, tmp_path):
    project = tmp_path / "teacache_mlx"
    shutil.copytree(
        example_folder,
        project,
        ignore=shutil.ignore_patterns(
            "__pycache__", "tests", "calibration", "parity-reports", "*.png", "*.log"
        ),
    )
    case_file = project / "cases" / "seed3-digit3.npz"
    with np.load(case_file, allow_pickle=False) as npz:
        noise, label = npz["noise"].copy(), npz["label"]
    noise[0, 0] = np.nextafter(noise[0, 0], np.float32(np.inf))  # one ULP
    np.savez(case_file, noise=noise, label=label)
    drift = verify(load_spec(project / "parity.toml"), runners=["vanilla"]).drift
    assert any("seed3-digit3" in f"{d.subject} {d.detail}" for d in drift)


def test_the_fit_is_documented_beside_its_coefficients(example_folder):
    import teacache

    rescale = teacache.RESCALE
    assert len(rescale["coefficients"]) == rescale["degree"] + 1
    assert rescale["fit"]["points"] == 16 * 24 and 0.5 < rescale["fit"]["r2"] <= 1.0
    row = next(r for r in rescale["sweep"] if r["rel_l1_thresh"] == teacache.DEFAULT_THRESHOLD)
    assert row["skips_mean"] >= rescale["target_skips"]
    assert teacache.DEFAULT_THRESHOLD == pytest.approx(rescale["default_rel_l1_thresh"])
