"""Output files: round trips without pickle, atomic writes, and every kind of bad file refused."""

from __future__ import annotations

import hashlib
import io
import json
import os
import pickle
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import safetensors.numpy

from paritygate.errors import InputError
from paritygate.files import atomic_write_bytes, load_outputs, save_outputs, sha256_file
from paritygate.outputs import flatten_outputs


class _Payload:
    """Unpickling this object opens (and so creates) the marker file: proof of execution."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def _one_line(exc: pytest.ExceptionInfo) -> str:
    text = exc.value.one_line()
    assert "\n" not in text
    return text


# ---------------------------------------------------------------------------------------------
# round trips


def _sample_outputs() -> dict:
    rng = np.random.default_rng(0)
    return {
        "logits": rng.standard_normal((2, 5)).astype(np.float32),
        "half": rng.standard_normal(7).astype(np.float16),
        "bf16": rng.standard_normal(6).astype(ml_dtypes.bfloat16),
        "fp8": np.array([0.5, -1.0, 2.0], dtype=ml_dtypes.float8_e4m3fn),
        "ids": np.array([3, 1, 4, 1, 5], dtype=np.int64),
        "pixels": np.array([0, 255, 7], dtype=np.uint8),
        "mask": np.array([True, False, True]),
        "scalar": np.array(1.25, dtype=np.float64),
        "empty": np.zeros((0, 4), dtype=np.float32),
        "boxes": {"editor": np.array([1.0, 2.0, 30.0, 40.0], dtype=np.float32)},
    }


def test_safetensors_round_trip_keeps_dtypes_shapes_and_values(tmp_path):
    path = save_outputs(tmp_path / "out.safetensors", _sample_outputs(), metadata={"model": "m"})
    loaded = flatten_outputs(load_outputs(path))
    original = _sample_outputs()
    flat = {k: v for k, v in original.items() if k != "boxes"} | {
        "boxes/editor": original["boxes"]["editor"]
    }
    assert set(loaded) == set(flat)
    for name, array in flat.items():
        assert loaded[name].dtype == array.dtype, name
        assert loaded[name].shape == array.shape, name
        assert loaded[name].tobytes() == array.tobytes(), name


def test_npz_round_trip_and_names_that_clash_with_numpy_keywords(tmp_path):
    outputs = {k: v for k, v in _sample_outputs().items() if k not in ("bf16", "fp8")}
    outputs["file"] = np.arange(3)  # np.savez(file, **kw) would clash on this name
    loaded = load_outputs(save_outputs(tmp_path / "out.npz", outputs))
    assert loaded["file"].tolist() == [0, 1, 2]
    assert loaded["boxes"]["editor"].tolist() == [1.0, 2.0, 30.0, 40.0]
    assert loaded["scalar"].shape == ()
    assert loaded["pixels"].dtype == np.uint8


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_nested_dicts_and_lists_save_under_the_gates_names(tmp_path, suffix):
    """A list of arrays is one output per item (``a/0``, ``a/1``), as the gate names them, not one
    stacked array; dicts inside lists and lists inside dicts keep their paths."""
    x, y = np.arange(3, dtype=np.float32), np.arange(3, 6, dtype=np.float32)
    tree = {
        "a": [x, y],
        "b": {"c": [{"d": x}, (y, np.int64(7))], "e": [[1, 2], [3, 4]]},
    }
    loaded = flatten_outputs(load_outputs(save_outputs(tmp_path / f"out{suffix}", tree)))
    expected = flatten_outputs(tree)
    assert list(expected) == ["a/0", "a/1", "b/c/0/d", "b/c/1/0", "b/c/1/1", "b/e"]
    assert sorted(loaded) == sorted(expected)
    for name, value in expected.items():
        assert loaded[name].shape == np.shape(value), name
        assert loaded[name].tolist() == np.asarray(value).tolist(), name
    assert loaded["b/e"].shape == (2, 2)  # a rectangular list of numbers is one array


def test_saving_names_a_bad_leaf_by_its_path(tmp_path):
    with pytest.raises(InputError) as exc:
        save_outputs(tmp_path / "out.npz", {"a": [np.ones(2), {"b": None}]})
    assert "a/1/b" in _one_line(exc) and "out.npz" in _one_line(exc)
    with pytest.raises(InputError) as exc:
        save_outputs(tmp_path / "out.npz", {"a": ["text", np.ones(2)]})
    assert "'a/0'" in _one_line(exc) and ".json" in _one_line(exc)


def test_npz_refuses_bfloat16_it_cannot_store_faithfully(tmp_path):
    with pytest.raises(InputError) as exc:
        save_outputs(tmp_path / "out.npz", {"x": np.ones(2, dtype=ml_dtypes.bfloat16)})
    assert "'x'" in _one_line(exc) and "safetensors" in _one_line(exc)
    assert not (tmp_path / "out.npz").exists()


def test_slash_names_come_back_nested_and_clashes_are_refused(tmp_path):
    path = tmp_path / "flat.safetensors"
    path.write_bytes(safetensors.numpy.save({"layers/0": np.ones(2), "layers/1": np.zeros(2)}))
    loaded = load_outputs(path)
    assert sorted(loaded["layers"]) == ["0", "1"]
    assert sorted(flatten_outputs(loaded)) == ["layers/0", "layers/1"]
    path.write_bytes(safetensors.numpy.save({"layers": np.ones(2), "layers/1": np.zeros(2)}))
    with pytest.raises(InputError) as exc:
        load_outputs(path)
    assert "'layers'" in _one_line(exc) and str(path) in _one_line(exc)
    path.write_bytes(safetensors.numpy.save({"a//b": np.ones(2)}))
    with pytest.raises(InputError, match="empty part"):
        load_outputs(path)


def test_safetensors_whose_header_length_looks_like_a_pickle_opcode_loads(tmp_path):
    # The header length is little-endian: 0x0280 bytes starts the file with 0x80 0x02, the
    # opening of a protocol-2 pickle. Such a valid file must load.
    path = tmp_path / "long-name.safetensors"
    for length in range(1, 800):
        data = safetensors.numpy.save({"x" * length: np.ones(2, dtype=np.float32)})
        if data[:2] == b"\x80\x02":
            break
    else:
        pytest.fail("no name length gives a header of 0x280 bytes")
    path.write_bytes(data)
    assert load_outputs(path)["x" * length].tolist() == [1.0, 1.0]


def test_npy_is_named_by_file_stem(tmp_path):
    np.save(tmp_path / "logits.npy", np.arange(4, dtype=np.float32))
    loaded = load_outputs(tmp_path / "logits.npy")
    assert list(loaded) == ["logits"]
    assert loaded["logits"].tolist() == [0.0, 1.0, 2.0, 3.0]


def test_json_tree_is_returned_as_a_tree(tmp_path):
    tree = {
        "boxes": {"editor": [1, 2, 3, 4]},
        "text": "hello",
        "probs": [[0.1, 0.9]],
        "nan": float("nan"),
    }
    path = save_outputs(tmp_path / "out.json", tree)
    loaded = load_outputs(path)
    assert loaded["boxes"] == {"editor": [1, 2, 3, 4]}
    assert loaded["text"] == "hello"
    assert np.isnan(loaded["nan"])
    (tmp_path / "list.json").write_text("[1, 2, 3]")
    assert load_outputs(tmp_path / "list.json") == {"list": [1, 2, 3]}


def test_json_duplicate_keys_are_refused_not_silently_dropped(tmp_path):
    (tmp_path / "twice.json").write_text('{"boxes": {"editor": [1, 2], "editor": [3, 4]}}')
    with pytest.raises(InputError, match=r"twice\.json: key 'editor' appears twice in one object"):
        load_outputs(tmp_path / "twice.json")
    (tmp_path / "once.json").write_text('{"boxes": {"editor": [1, 2], "title": [3, 4]}}')
    assert load_outputs(tmp_path / "once.json") == {"boxes": {"editor": [1, 2], "title": [3, 4]}}


def test_json_save_turns_arrays_into_lists(tmp_path):
    path = save_outputs(
        tmp_path / "out.json",
        {
            "a": np.array([[1, 2]], dtype=np.int32),
            "b": np.float32(0.5),
            "c": np.array([1.5], dtype=ml_dtypes.bfloat16),
        },
    )
    assert json.loads(path.read_text()) == {"a": [[1, 2]], "b": 0.5, "c": [1.5]}


def test_saving_strings_to_an_array_format_is_refused(tmp_path):
    with pytest.raises(InputError) as exc:
        save_outputs(tmp_path / "out.safetensors", {"text": np.array(["a", "b"])})
    assert "'text'" in _one_line(exc) and ".json" in _one_line(exc)


def test_saving_to_an_unknown_extension_is_refused(tmp_path):
    with pytest.raises(InputError) as exc:
        save_outputs(tmp_path / "out.pt", {"x": np.ones(2)})
    assert "out.pt" in _one_line(exc)


# ---------------------------------------------------------------------------------------------
# atomic writes and hashing


def test_atomic_write_replaces_the_file_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "ref.bin"
    atomic_write_bytes(target, b"old")
    atomic_write_bytes(target, b"new contents")
    assert target.read_bytes() == b"new contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref.bin"]


def test_atomic_write_failure_keeps_the_old_file(tmp_path, monkeypatch):
    target = tmp_path / "ref.bin"
    target.write_bytes(b"old")

    def broken_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_bytes(target, b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ref.bin"]


def test_atomic_write_into_a_missing_folder_is_an_input_error(tmp_path):
    with pytest.raises(InputError) as exc:
        atomic_write_bytes(tmp_path / "nope" / "x.bin", b"data")
    assert "nope" in _one_line(exc)


def test_sha256_file_matches_hashlib_and_changes_with_content(tmp_path):
    path = tmp_path / "f.bin"
    path.write_bytes(b"abc" * 100_000)
    assert sha256_file(path) == hashlib.sha256(b"abc" * 100_000).hexdigest()
    path.write_bytes(b"abd" * 100_000)
    assert sha256_file(path) == hashlib.sha256(b"abd" * 100_000).hexdigest()
    with pytest.raises(InputError) as exc:
        sha256_file(tmp_path / "missing.bin")
    assert "missing.bin" in _one_line(exc) and "not found" in _one_line(exc)


# ---------------------------------------------------------------------------------------------
# pickles are refused and never executed


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "executed.marker"


def test_payload_is_live(tmp_path):
    """The refusal tests below mean something only because this payload really executes."""
    live = tmp_path / "live.marker"
    pickle.loads(pickle.dumps(_Payload(live)))
    assert live.exists()


@pytest.mark.parametrize("suffix", [".npy", ".npz", ".safetensors", ".json"])
def test_renamed_pickle_is_refused_and_not_executed(tmp_path, marker, suffix):
    path = tmp_path / f"outputs{suffix}"
    path.write_bytes(pickle.dumps({"logits": _Payload(marker)}, protocol=4))
    with pytest.raises(InputError) as exc:
        load_outputs(path)
    line = _one_line(exc)
    assert str(path) in line
    assert "pickle" in line
    assert not marker.exists()


def test_protocol0_pickle_renamed_npy_is_refused_and_not_executed(tmp_path, marker):
    path = tmp_path / "outputs.npy"
    path.write_bytes(pickle.dumps(_Payload(marker), protocol=0))
    with pytest.raises(InputError) as exc:
        load_outputs(path)
    assert str(path) in _one_line(exc)
    assert not marker.exists()


def test_npy_object_array_is_refused_and_not_executed(tmp_path, marker):
    path = tmp_path / "outputs.npy"
    array = np.empty(1, dtype=object)
    array[0] = _Payload(marker)
    np.save(path, array, allow_pickle=True)
    with pytest.raises(InputError) as exc:
        load_outputs(path)
    assert "object array" in _one_line(exc) and str(path) in _one_line(exc)
    assert not marker.exists()


def test_npz_with_object_array_member_is_refused_and_not_executed(tmp_path, marker):
    path = tmp_path / "outputs.npz"
    array = np.empty(1, dtype=object)
    array[0] = _Payload(marker)
    np.savez(path, fine=np.ones(2), evil=array)
    with pytest.raises(InputError) as exc:
        load_outputs(path)
    line = _one_line(exc)
    assert "evil" in line and "object array" in line
    assert not marker.exists()


def test_torch_style_zip_with_data_pkl_is_refused_and_not_executed(tmp_path, marker):
    path = tmp_path / "outputs.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", pickle.dumps(_Payload(marker)))
    with pytest.raises(InputError) as exc:
        load_outputs(path)
    assert "data.pkl" in _one_line(exc) and "pickle" in _one_line(exc)
    assert not marker.exists()


# ---------------------------------------------------------------------------------------------
# truncated, garbage, unknown, missing


def _good_bytes(suffix: str) -> bytes:
    outputs = {"logits": np.arange(64, dtype=np.float32).reshape(8, 8)}
    if suffix == ".safetensors":
        return safetensors.numpy.save(outputs)
    buffer = io.BytesIO()
    if suffix == ".npy":
        np.save(buffer, outputs["logits"])
    elif suffix == ".npz":
        np.savez(buffer, **outputs)
    else:
        buffer.write(json.dumps({"logits": outputs["logits"].tolist()}).encode())
    return buffer.getvalue()


@pytest.mark.parametrize("suffix", [".safetensors", ".npy", ".npz", ".json"])
def test_good_bytes_load(tmp_path, suffix):
    path = tmp_path / f"good{suffix}"
    path.write_bytes(_good_bytes(suffix))
    loaded = load_outputs(path)
    name = "good" if suffix == ".npy" else "logits"  # a .npy file is named by its stem
    assert list(loaded) == [name]
    assert np.array_equal(np.asarray(loaded[name]), np.arange(64).reshape(8, 8))


@pytest.mark.parametrize("suffix", [".safetensors", ".npy", ".npz", ".json"])
def test_truncated_file_is_one_line_naming_the_file(tmp_path, suffix):
    path = tmp_path / f"cut{suffix}"
    data = _good_bytes(suffix)
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError) as exc:
        load_outputs(path)
    assert str(path) in _one_line(exc)


@pytest.mark.parametrize("suffix", [".safetensors", ".npy", ".npz", ".json"])
@pytest.mark.parametrize("content", [b"", b"\x00" * 3, b"this is not an output file at all" * 3])
def test_garbage_or_empty_file_is_one_line_naming_the_file(tmp_path, suffix, content):
    path = tmp_path / f"junk{suffix}"
    path.write_bytes(content)
    with pytest.raises(InputError) as exc:
        load_outputs(path)
    assert str(path) in _one_line(exc)


def test_unknown_extension_missing_file_and_directory(tmp_path):
    odd = tmp_path / "weights.pt"
    odd.write_bytes(b"whatever")
    with pytest.raises(InputError) as exc:
        load_outputs(odd)
    assert (
        "weights.pt" in _one_line(exc)
        and ".pt" in _one_line(exc)
        and ".safetensors" in _one_line(exc)
    )
    with pytest.raises(InputError) as exc:
        load_outputs(tmp_path / "absent.safetensors")
    assert "absent.safetensors" in _one_line(exc) and "not found" in _one_line(exc)
    folder = tmp_path / "dir.npz"
    folder.mkdir()
    with pytest.raises(InputError) as exc:
        load_outputs(folder)
    assert "dir.npz" in _one_line(exc) and "directory" in _one_line(exc)


def test_safetensors_with_inconsistent_header_is_refused(tmp_path):
    data = bytearray(safetensors.numpy.save({"x": np.ones(4, dtype=np.float32)}))
    header_len = int.from_bytes(data[:8], "little")
    header = bytes(data[8 : 8 + header_len]).replace(b"[4]", b"[9]")
    path = tmp_path / "bad.safetensors"
    path.write_bytes(bytes(data[:8]) + header + bytes(data[8 + header_len :]))
    with pytest.raises(InputError) as exc:
        load_outputs(path)
    assert str(path) in _one_line(exc)


# ---------------------------------------------------------------------------------------------
# case inputs, text files and folders: the same module, the same refusals


def test_case_files_load_through_the_hardened_readers(tmp_path):
    from paritygate.files import load_case

    arrays = {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "ids/0": np.array([1, 2])}
    np.savez(tmp_path / "c.npz", **arrays)
    safetensors.numpy.save_file(arrays, str(tmp_path / "c.safetensors"))
    for name in ("c.npz", "c.safetensors"):
        loaded = load_case(tmp_path / name)
        assert sorted(loaded) == ["ids/0", "x"]  # names as stored, not nested
        np.testing.assert_array_equal(loaded["x"], arrays["x"])
        loaded["x"][0, 0] = 7  # writable, as a model working in place expects
    (tmp_path / "c.json").write_text("[1, 2]")
    assert load_case(tmp_path / "c.json") == [1, 2]
    (tmp_path / "c.wav").write_bytes(b"RIFF")
    assert load_case(tmp_path / "c.wav") == b"RIFF"
    marker = tmp_path / "executed"
    (tmp_path / "p.npy").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(InputError, match="pickle") as info:
        load_case(tmp_path / "p.npy")
    assert info.value.where == str(tmp_path / "p.npy") and not marker.exists()
    with pytest.raises(InputError, match="file not found"):
        load_case(tmp_path / "missing.npz")


def test_read_text_is_one_error_naming_the_file(tmp_path):
    from paritygate.errors import SpecError
    from paritygate.files import read_text

    (tmp_path / "ok.md").write_text("héllo", encoding="utf-8")
    assert read_text(tmp_path / "ok.md", "doc") == "héllo"
    with pytest.raises(InputError, match="no such doc"):
        read_text(tmp_path / "nope.md", "doc")
    (tmp_path / "bad.toml").write_bytes(b"\xff\xfe")
    with pytest.raises(SpecError, match="not UTF-8") as info:
        read_text(tmp_path / "bad.toml", "spec", error=SpecError)
    assert info.value.where == str(tmp_path / "bad.toml")
    with pytest.raises(InputError, match="is a directory"):
        read_text(tmp_path, "doc")


# ---------------------------------------------------------------------------------------------
# fault sweep: files that np.load or json would read while something in them is lost


def _npy_bytes(array: np.ndarray, version: tuple[int, int] | None = None) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array(buffer, array, version=version, allow_pickle=False)
    return buffer.getvalue()


@pytest.mark.parametrize("version", [None, (3, 0)])
def test_npy_holding_two_arrays_or_trailing_bytes_is_refused(tmp_path, version):
    first, second = np.arange(3.0), np.arange(3.0) + 1
    good = tmp_path / "good.npy"
    good.write_bytes(_npy_bytes(first, version))
    np.testing.assert_array_equal(load_outputs(good)["good"], first)

    two = tmp_path / "two.npy"
    two.write_bytes(_npy_bytes(first, version) + _npy_bytes(second, version))
    with pytest.raises(InputError, match="holds a second .npy array after the first") as info:
        load_outputs(two)
    assert info.value.where == str(two) and "\n" not in _one_line(info)

    trailing = tmp_path / "trailing.npy"
    trailing.write_bytes(_npy_bytes(first, version) + b"garbage")
    with pytest.raises(InputError, match=r"has 7 byte\(s\) after the array") as info:
        load_outputs(trailing)
    assert info.value.where == str(trailing)


def test_npz_member_with_trailing_bytes_names_the_member(tmp_path):
    path = tmp_path / "o.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", _npy_bytes(np.arange(3.0)) + _npy_bytes(np.arange(2.0)))
    with pytest.raises(InputError, match="second .npy array") as info:
        load_outputs(path)
    assert info.value.where == f"{path}[x]"


@pytest.mark.filterwarnings("ignore:Duplicate name")
@pytest.mark.parametrize("same", [False, True])
def test_npz_with_a_member_name_twice_is_refused(tmp_path, same):
    path = tmp_path / "dup.npz"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("x.npy", _npy_bytes(np.arange(3.0)))
        archive.writestr("x.npy", _npy_bytes(np.arange(3.0) + (0 if same else 1)))
    with pytest.raises(InputError, match="member 'x.npy' appears twice") as info:
        load_outputs(path)
    assert info.value.where == str(path)


def test_json_nested_too_deeply_is_one_input_error(tmp_path):
    from paritygate.files import MAX_JSON_DEPTH, load_case

    ok = tmp_path / "ok.json"
    depth = MAX_JSON_DEPTH - 1  # under the object that names it
    ok.write_text('{"x": ' + '["a", ' * depth + "1" + "]" * depth + "}")
    assert sorted(flatten_outputs(load_outputs(ok)))[0].startswith("x/0")
    for depth in (MAX_JSON_DEPTH, 980, 100_000):  # under, near and past Python's own recursion
        path = tmp_path / f"deep{depth}.json"
        path.write_text('{"x": ' + "[" * depth + "]" * depth + "}")
        with pytest.raises(InputError, match="JSON nested too deeply") as info:
            load_outputs(path)
        assert info.value.where == str(path)
        with pytest.raises(InputError, match="JSON nested too deeply"):
            load_case(path)


def test_numeric_list_with_more_dimensions_than_an_array_is_one_input_error(tmp_path):
    path = tmp_path / "o.json"
    path.write_text('{"x": ' + "[" * 65 + "1" + "]" * 65 + "}")
    with pytest.raises(InputError, match="nested 65 levels deep; an array has at most 64"):
        flatten_outputs(load_outputs(path))
    path.write_text('{"x": ' + "[" * 64 + "1" + "]" * 64 + "}")
    assert flatten_outputs(load_outputs(path))["x"].ndim == 64
