"""The one number formatter, the ml_dtypes names and the exception roots shared by every module."""

from __future__ import annotations

import math
import pickle

import ml_dtypes
import numpy as np
import pytest

from paritygate._dtypes import ML_DTYPES_NAMES, is_float, is_ml_float, is_numeric, numpy_dtype
from paritygate._format import format_number
from paritygate.errors import InputError, RunFailure, UserError


@pytest.mark.parametrize(
    ("value", "kwargs", "text"),
    [
        (None, {}, "-"),
        (None, {"none": "none"}, "none"),
        (True, {}, "True"),
        (12345678, {}, "12345678"),
        (np.int64(3), {}, "3"),
        (1 / 3, {}, "0.333333"),
        (np.float32(0.5), {}, "0.5"),
        (1 / 3, {"digits": 4}, "0.3333"),
        (math.nan, {}, "nan"),
        (-math.inf, {}, "-inf"),
        (0.99995, {"digits": 4, "near_one": True}, "1-5e-05"),
        (0.5, {"digits": 4, "near_one": True}, "0.5"),
        ("abc", {}, "abc"),
    ],
)
def test_format_number(value, kwargs, text):
    assert format_number(value, **kwargs) == text


def test_ml_dtypes_names_and_predicates():
    assert ML_DTYPES_NAMES == ("bfloat16", "float8_e4m3fn", "float8_e5m2")
    for name in ML_DTYPES_NAMES:
        dtype = numpy_dtype(name)
        assert dtype == np.dtype(getattr(ml_dtypes, name))
        assert is_ml_float(dtype) and is_float(dtype) and is_numeric(dtype)
    assert numpy_dtype("float16") == np.float16
    record = np.dtype([("a", "f4")])
    assert not is_numeric(record) and not is_ml_float(record) and not is_float(record)
    assert is_numeric(np.dtype("c8")) and not is_numeric(np.dtype("c8"), "biuf")
    assert not is_float(np.dtype("i4")) and not is_numeric(np.dtype("U3"))


def test_run_failure_is_a_user_error_that_exits_1_and_pickles():
    failure = RunFailure("cand", "a", "crash", "exited with status 3", "Traceback...\nboom")
    assert isinstance(failure, UserError) and not isinstance(failure, InputError)
    assert failure.exit_code == 1
    assert str(failure).startswith("runner cand, case a: crash: exited with status 3")
    assert "--- stderr ---" in str(failure)
    assert "\n" not in failure.one_line()
    back = pickle.loads(pickle.dumps(failure))
    assert (back.runner, back.case, back.kind, back.stderr) == (
        "cand",
        "a",
        "crash",
        failure.stderr,
    )
    assert str(back) == str(failure)
