"""Generated (seeded) cases: values from documented formulas over PCG64's raw integers, pinned by
sha256; record / verify / gate run on them; a changed generator is drift; a bad declaration is
one spec error."""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

from paritygate.cli import main
from paritygate.errors import SpecError
from paritygate.seeded import Generation, generate, npy_bytes
from paritygate.spec import load_spec

MODEL = """
import numpy as np

W = np.linspace(-1.0, 1.0, 32).reshape(8, 4)


def reference(x):
    x = x["a"] if isinstance(x, dict) else x
    return {"y": np.tanh(x.astype(np.float64) @ W)}


def candidate(x):
    x = x["a"] if isinstance(x, dict) else x
    return {"y": np.tanh(x.astype(np.float32) @ W.astype(np.float32))}


def make(shape, dtype, seed, **params):
    return {"a": np.full(shape, seed, dtype=dtype), "b": np.arange(3, dtype=np.int32)}
"""

SPEC = """format_version = 6
outputs = ["y"]

[cases.x]
generate = {{ shape = [3, 8], dtype = "float32", distribution = "normal", seed = {seed} }}
{pin}

[cases.len]
generate = {{ shape = [0, 8], dtype = "float32", distribution = "uniform", low = -1, high = 1, \
seed = 7 }}
sweep = {{ axis = 0, values = [1, 2, 5] }}
{sweep_pin}

[runners.reference]
role = "reference"
callable = "model:reference"
pass = "inputs"

[runners.candidate]
role = "candidate"
callable = "model:candidate"
pass = "inputs"

[claims.y]
outputs = ["y"]
metric = "max_abs"
bound = 1e-5
oracle = "equivalence"
status = "provisional"
"""


def _pin_of(generation: Generation) -> str:
    return hashlib.sha256(npy_bytes(generate(generation))).hexdigest()


def _project(tmp_path, seed=0, pin_seed=None, sweep_pins=True):
    (tmp_path / "model.py").write_text(MODEL)
    x = Generation((3, 8), "float32", "normal", seed if pin_seed is None else pin_seed)
    pins = [
        _pin_of(Generation((n, 8), "float32", "uniform", 7, {"low": -1, "high": 1}))
        for n in (1, 2, 5)
    ]
    text = SPEC.format(
        seed=seed,
        pin=f'sha256 = "{_pin_of(x)}"',
        sweep_pin=f"sha256 = {pins!r}".replace("'", '"') if sweep_pins else "",
    )
    path = tmp_path / "parity.toml"
    path.write_text(text)
    return path


def test_uniform_values_follow_the_documented_formula():
    raw = np.random.PCG64(3).random_raw(6)
    expected = [-2.0 + 4.0 * ((int(r) >> 11) * 2.0**-53) for r in raw]
    out = generate(Generation((2, 3), "float64", "uniform", 3, {"low": -2.0, "high": 2.0}))
    assert out.shape == (2, 3) and out.dtype == np.float64
    assert out.ravel().tolist() == expected


def test_normal_is_box_muller_on_the_raw_integers():
    raw = [int(r) >> 11 for r in np.random.PCG64(11).random_raw(4)]
    u1, u2 = (raw[0] + 1) * 2.0**-53, raw[1] * 2.0**-53
    radius = math.sqrt(-2 * math.log(u1))
    out = generate(Generation((3,), "float64", "normal", 11, {"mean": 1.0, "std": 2.0}))
    assert out[0] == 1.0 + 2.0 * radius * math.cos(2 * math.pi * u2)
    assert out[1] == 1.0 + 2.0 * radius * math.sin(2 * math.pi * u2)
    big = generate(Generation((20000,), "float32", "normal", 1))
    assert abs(float(big.mean())) < 0.03 and abs(float(big.std()) - 1) < 0.03


def test_integers_are_a_multiply_shift_reduction():
    raw = np.random.PCG64(5).random_raw(1000)
    out = generate(Generation((1000,), "int32", "integers", 5, {"low": -3, "high": 10}))
    assert out.dtype == np.int32
    assert out.tolist() == [-3 + ((int(r) * 13) >> 64) for r in raw]
    assert set(out.tolist()) == set(range(-3, 10))


@pytest.mark.parametrize(
    "dtype, low, high",
    [
        ("uint64", 0, 2**64),
        ("int64", -(2**63), 2**63),
        ("uint64", 5, 2**63 + 12345),
        ("int8", -128, 128),
    ],
)
def test_integers_reach_the_whole_range_of_64_bit_dtypes(dtype, low, high):
    raw = np.random.PCG64(9).random_raw(500)
    out = generate(Generation((500,), dtype, "integers", 9, {"low": low, "high": high}))
    assert out.dtype == np.dtype(dtype)
    assert [int(v) for v in out] == [low + ((int(r) * (high - low)) >> 64) for r in raw]


def test_generated_bytes_are_pinned_constants():
    """The generated files' sha256 are constants: a change of formula, of the npy header or of
    numpy's PCG64 would change them (and every spec pinning them would report drift)."""
    uniform = _pin_of(Generation((4, 4), "float32", "uniform", 0))
    normal = _pin_of(Generation((4, 4), "float32", "normal", 0))
    integers = _pin_of(Generation((16,), "int64", "integers", 0, {"high": 1000}))
    assert (uniform, normal, integers) == (
        "2893a78fe5f332be84f09295982b2d7d33177b5976cf0b0960e48f7ac4b960c0",
        "523e66fcc561f77a743f784f2df2a4470994ebf0a1973490e47b0aa8e30fd17b",
        "f556f6dfc82c19a113f8927fb74737ffdbfd2982ab54478131cfc2e0ebed1edc",
    )


def test_npy_header_is_numpy_readable(tmp_path):
    for shape in [(), (5,), (2, 3), (1, 2, 3)]:
        array = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
        path = tmp_path / "a.npy"
        path.write_bytes(npy_bytes(array))
        back = np.load(path, allow_pickle=False)
        assert back.shape == shape and np.array_equal(back, array)
        assert (len(npy_bytes(array)) - array.nbytes) % 64 == 0
        import io

        saved = io.BytesIO()
        np.save(saved, array)
        assert saved.getvalue() == npy_bytes(array)  # the same bytes numpy's writer makes today


def test_spec_with_generated_cases_loads_with_a_sweep(tmp_path):
    spec = load_spec(_project(tmp_path))
    assert list(spec.cases) == ["x", "len.1", "len.2", "len.5"]
    assert spec.cases["len.5"].load().shape == (5, 8)
    assert spec.cases["x"].path.name == "x.npy" and spec.cases["x"].generated is not None
    # the shorter sweep cases are prefixes of the longer one: one stream, one seed
    np.testing.assert_array_equal(spec.cases["len.2"].load(), spec.cases["len.5"].load()[:2])


def test_record_verify_gate_pass_on_generated_cases(tmp_path, capsys):
    path = _project(tmp_path)
    assert main(["record", str(path)]) == 0
    assert main(["verify", str(path)]) == 0
    assert main(["gate", str(path)]) == 0
    assert sorted(p.name for p in (tmp_path / ".paritygate" / "cases").iterdir()) == [
        "len.1.npy",
        "len.2.npy",
        "len.5.npy",
        "x.npy",
    ]


def test_changed_seed_is_drift_with_a_clear_message(tmp_path, capsys):
    path = _project(tmp_path)
    assert main(["record", str(path)]) == 0
    capsys.readouterr()
    # the declaration now says seed 1 while the pin is still seed 0's bytes
    path.write_text(path.read_text().replace("seed = 0 ", "seed = 1 "))
    assert main(["gate", str(path)]) == 3
    out = capsys.readouterr()
    text = " ".join((out.out + out.err).split())
    assert "generated input (normal float32[3, 8] seed=1) differs from its pin" in text
    assert "the generator, its seed or the declaration changed" in text
    assert main(["verify", str(path)]) == 3


def test_changed_custom_generator_is_drift(tmp_path, capsys):
    (tmp_path / "model.py").write_text(MODEL)
    array = np.full((2, 8), 4, dtype=np.float32)
    from safetensors.numpy import save

    digest_dict = hashlib.sha256(save({"a": array, "b": np.arange(3, dtype=np.int32)})).hexdigest()
    text = (
        SPEC.split("[cases.x]")[0]
        + (
            "[cases.custom]\n"
            'generate = { shape = [2, 8], dtype = "float32", seed = 4, generator = "model:make" }\n'
            f'sha256 = "{digest_dict}"\n\n'
        )
        + "[runners"
        + SPEC.split("[runners", 1)[1]
    )
    path = tmp_path / "parity.toml"
    path.write_text(text)
    spec = load_spec(path)
    loaded = spec.cases["custom"].load()
    assert np.array_equal(loaded["a"], array) and spec.cases["custom"].path.suffix == ".safetensors"
    assert main(["record", str(path)]) == 0
    capsys.readouterr()
    (tmp_path / "model.py").write_text(MODEL.replace("np.arange(3", "np.arange(1, 4"))
    import importlib
    import sys

    sys.modules.pop("model", None)
    importlib.invalidate_caches()
    assert main(["verify", str(path)]) == 3
    text = " ".join(capsys.readouterr().out.split())
    assert "generated input (model:make float32[2, 8] seed=4) differs from its pin" in text


@pytest.mark.parametrize(
    "generate_table, message",
    [
        (
            '{ shape = [2], dtype = "float32", distribution = "gauss", seed = 0 }',
            "expected one of uniform, normal, integers, got 'gauss'",
        ),
        (
            '{ shape = [2], dtype = "float32", distribution = "uniform" }',
            "seed: expected a non-negative integer, got None",
        ),
        (
            '{ shape = [2], dtype = "float32", distribution = "integers", high = 3, seed = 0 }',
            "integers draws int8",
        ),
        (
            '{ shape = [2], dtype = "int8", distribution = "integers", high = 300, seed = 0 }',
            "int8 cannot hold [0, 300)",
        ),
        (
            '{ shape = [2], dtype = "float32", distribution = "normal", low = 1, seed = 0 }',
            "not a parameter of normal",
        ),
        (
            '{ shape = "2", distribution = "uniform", seed = 0 }',
            "shape: expected a list of non-negative integers",
        ),
        (
            '{ shape = [2], distribution = "uniform", seed = 0, sead = 1 }',
            "generate.sead: unknown key",
        ),
        ('{ shape = [2], seed = 0, generator = "nope" }', "expected 'module:function', got 'nope'"),
        (
            '{ shape = [2], seed = 0, generator = "model:absent" }',
            "the generator failed: AttributeError",
        ),
    ],
)
def test_bad_declaration_is_one_spec_error_exit_2(tmp_path, capsys, generate_table, message):
    (tmp_path / "model.py").write_text(MODEL)
    text = (
        SPEC.split("[cases.x]")[0]
        + (f'[cases.bad]\ngenerate = {generate_table}\nsha256 = "{"0" * 64}"\n\n')
        + "[runners"
        + SPEC.split("[runners", 1)[1]
    )
    path = tmp_path / "parity.toml"
    path.write_text(text)
    with pytest.raises(SpecError, match=None) as info:
        load_spec(path)
    assert message in str(info.value)
    assert main(["verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) <= 2


def test_missing_pin_names_the_sha256_to_paste(tmp_path):
    path = _project(tmp_path, sweep_pins=False)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    text = str(info.value)
    assert "cases.len.sha256: required key is missing; the generated inputs have sha256 = [" in text
    pins = text.split("sha256 = [", 1)[1].split("]")[0]
    assert pins.count('"') == 6


def test_generated_cases_need_format_6(tmp_path):
    path = _project(tmp_path)
    path.write_text(path.read_text().replace("format_version = 6", "format_version = 5"))
    with pytest.raises(SpecError, match="generated cases need format_version = 6"):
        load_spec(path)


def test_sweep_on_a_file_case_is_refused(tmp_path):
    path = _project(tmp_path)
    path.write_text(
        path.read_text().replace(
            "[runners.reference]",
            '[cases.f]\npath = "model.py"\nsha256 = "' + "0" * 64 + '"\n'
            "sweep = { axis = 0, values = [1] }\n\n[runners.reference]",
        )
    )
    with pytest.raises(SpecError, match="a sweep needs a generated case"):
        load_spec(path)


def test_an_unwritable_generated_folder_is_one_spec_error(tmp_path, capsys):
    path = _project(tmp_path)
    (tmp_path / ".paritygate").write_text("a file where the folder goes")
    assert main(["verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert "cases.x.generate: cannot write the generated input to" in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_sweep_past_the_size_limit_names_the_length(tmp_path):
    path = _project(tmp_path)
    path.write_text(path.read_text().replace("values = [1, 2, 5]", "values = [1, 2, 99999999]"))
    with pytest.raises(SpecError, match=r"cases.len.sweep.values: length 99999999: 799999992 "):
        load_spec(path)
