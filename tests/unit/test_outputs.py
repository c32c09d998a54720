"""flatten_outputs: output trees become named leaves; bad trees raise InputError naming the path."""

from __future__ import annotations

import numpy as np
import pytest

from paritygate import InputError, flatten_outputs


def test_nested_dicts_lists_and_tuples_become_paths():
    boxes = np.zeros((2, 4))
    tree = {
        "logits": np.ones(3),
        "boxes": {"editor": boxes, "viewer": np.zeros(1)},
        "layers": [np.ones(2), (np.zeros(2), "tag")],
    }
    leaves = flatten_outputs(tree)
    assert list(leaves) == [
        "logits",
        "boxes/editor",
        "boxes/viewer",
        "layers/0",
        "layers/1/0",
        "layers/1/1",
    ]
    assert leaves["boxes/editor"] is boxes
    assert leaves["layers/1/1"] == "tag"


def test_rectangular_numeric_lists_are_one_leaf():
    leaves = flatten_outputs(
        {"grid": [[1, 2, 3], [4, 5, 6]], "mask": [True, False], "flat": (1.5, 2)}
    )
    assert list(leaves) == ["grid", "mask", "flat"]
    assert leaves["grid"].shape == (2, 3) and leaves["grid"].dtype.kind == "i"
    assert leaves["mask"].dtype == bool
    assert leaves["flat"].tolist() == [1.5, 2.0]


def test_ragged_or_mixed_lists_are_containers():
    leaves = flatten_outputs({"ragged": [[1, 2], [3]], "mixed": [1, "a"]})
    assert list(leaves) == ["ragged/0", "ragged/1", "mixed/0", "mixed/1"]
    assert leaves["ragged/1"].tolist() == [3]


def test_leaves_at_the_root():
    x = np.arange(3)
    assert flatten_outputs(x) == {"": x}
    assert flatten_outputs(2.5) == {"": 2.5}
    assert flatten_outputs("text") == {"": "text"}
    assert flatten_outputs(np.float32(1.0)) == {"": np.float32(1.0)}
    assert list(flatten_outputs([1, 2, 3])) == [""]
    assert flatten_outputs({}) == {}


def test_slash_joined_keys_name_the_same_outputs_as_nested_tables():
    x, y = np.zeros(2), np.ones(2)
    flat = flatten_outputs({"boxes/editor": x, "boxes/viewer": y})
    assert flat == flatten_outputs({"boxes": {"editor": x, "viewer": y}})
    assert list(flat) == ["boxes/editor", "boxes/viewer"]


def test_a_bare_leaf_takes_the_root_name_it_is_given():
    x = np.zeros(2)
    assert flatten_outputs(x, root="output") == {"output": x}
    assert flatten_outputs({"y": x}, root="output") == {"y": x}


def test_list_of_arrays_is_a_container():
    leaves = flatten_outputs([np.zeros(2), np.ones(2)])
    assert list(leaves) == ["0", "1"]


def test_duck_typed_arrays_are_leaves():
    class Duck:
        shape = (2,)
        dtype = "float32"

    duck = Duck()
    assert flatten_outputs({"d": duck}) == {"d": duck}


@pytest.mark.parametrize(
    ("tree", "where", "what"),
    [
        ({"a": {1: np.zeros(1)}}, "a", "must be strings"),
        ({"a": {"b//c": np.zeros(1)}}, "a", "no empty part"),
        ({"a": {"b/c": np.zeros(1), "b": {"c": np.ones(1)}}}, "a/b/c", "share this name"),
        ({"a": {"b": np.zeros(1), "b/c": np.ones(1)}}, "a/b/c", "also a folder"),
        ({"a": {"": np.zeros(1)}}, "a", "non-empty"),
        ({"a": [np.zeros(1), None]}, "a/1", "NoneType"),
        ({"a": {"b": object()}}, "a/b", "object"),
    ],
)
def test_bad_trees_name_the_path(tree, where, what):
    with pytest.raises(InputError) as info:
        flatten_outputs(tree)
    assert info.value.where == where
    assert what in str(info.value)


def test_an_empty_table_names_no_output_and_the_other_side_reports_it_missing():
    # a port that finds no segment returns an empty table where the reference has segments
    assert flatten_outputs({"segments": {}, "n": np.zeros(1)}) == {"n": np.zeros(1)}
    from paritygate import compare

    result = compare({"segments": {}}, {"segments": {"0": np.array([3, 9])}})
    assert not result
    assert "segments/0" in str(result)
