"""The equivalence oracle on in-process outputs: the gate's verdict for one claim."""

from __future__ import annotations

import numpy as np
import pytest
from spec_helpers import TINY_SPEC, make_project

from paritygate.equivalence import check_equivalence
from paritygate.errors import InputError


def test_measured_tolerance_passes_the_twin_and_fails_a_planted_bug(tmp_path):
    spec = make_project(tmp_path, TINY_SPEC)  # y-close: max_abs <= 1e-5
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((3, 8)), rng.standard_normal((8, 4))
    reference = {"y": np.tanh(x @ w)}
    port = {"y": np.tanh(x.astype(np.float32) @ w.astype(np.float32))}
    verdict = check_equivalence("y-close", port, reference, spec=spec)
    assert verdict and 0 < verdict.observed <= 1e-5
    bug = {"y": port["y"].copy()}
    bug["y"][1, 2] += np.float32(3e-4)
    verdict = check_equivalence("y-close", bug, reference, spec=spec, case="a")
    assert not verdict and verdict.observed == pytest.approx(3e-4, rel=1e-2)
    assert verdict.failures[0].where.startswith("y at index 1,2")


def test_wrong_oracle_or_unknown_claim_is_an_input_error(tmp_path):
    spec = make_project(
        tmp_path, TINY_SPEC.replace('oracle = "equivalence"', 'oracle = "approximation"')
    )
    with pytest.raises(InputError, match="answers the approximation question"):
        check_equivalence("y-close", {"y": np.ones(2)}, {"y": np.ones(2)}, spec=spec)
    with pytest.raises(InputError, match="no claim 'nope'"):
        check_equivalence("nope", {}, {}, spec=spec)
