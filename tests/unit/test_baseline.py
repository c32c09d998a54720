"""assert_parity(actual, baseline="name"): the zero-configuration start, outside pytest's
fixture."""

from __future__ import annotations

import numpy as np
import pytest

from paritygate import assert_parity
from paritygate.errors import InputError
from paritygate.testing import BaselineUpdated, BaselineWritten, orphaned_baselines


def test_first_run_writes_and_fails_then_compares(tmp_path):
    out = {"probs": np.array([0.25, 0.75], dtype=np.float32), "ids": np.arange(3)}
    with pytest.raises(BaselineWritten, match="baseline written: .*review it and re-run"):
        assert_parity(out, baseline="model", baseline_dir=tmp_path)
    assert assert_parity(out, baseline="model", baseline_dir=tmp_path).passed
    changed = {**out, "probs": out["probs"] + np.float32(1e-3)}
    with pytest.raises(AssertionError, match="differs from baseline model") as info:
        assert_parity(changed, baseline="model", baseline_dir=tmp_path)
    assert not isinstance(info.value, (BaselineWritten, BaselineUpdated))
    assert assert_parity(changed, baseline="model", baseline_dir=tmp_path, atol=1e-2).passed
    with pytest.raises(BaselineUpdated, match="baseline re-recorded"):
        assert_parity(changed, baseline="model", baseline_dir=tmp_path, update=True)
    assert assert_parity(changed, baseline="model", baseline_dir=tmp_path).passed


def test_a_tampered_baseline_is_refused_not_trusted(tmp_path):
    out = {"x": np.ones(4)}
    with pytest.raises(BaselineWritten):
        assert_parity(out, baseline="b", baseline_dir=tmp_path)
    stored = tmp_path / "b.safetensors"
    stored.write_bytes(stored.read_bytes()[:-8] + bytes(8))
    with pytest.raises(InputError, match="baseline file changed since it was written"):
        assert_parity(out, baseline="b", baseline_dir=tmp_path)


def test_bad_names_and_orphans(tmp_path):
    with pytest.raises(InputError, match="baseline name"):
        assert_parity({"x": np.ones(1)}, baseline="../up", baseline_dir=tmp_path)
    with pytest.raises(InputError, match="either expected or baseline"):
        assert_parity({"x": np.ones(1)}, {"x": np.ones(1)}, baseline="x", baseline_dir=tmp_path)
    (tmp_path / "unused.safetensors").write_bytes(b"")
    with pytest.raises(BaselineWritten):
        assert_parity({"x": np.ones(1)}, baseline="used", baseline_dir=tmp_path)
    assert orphaned_baselines([tmp_path]) == [tmp_path / "unused.safetensors"]
