"""The spec loader: schema validation, named errors, path containment, refusals, edits."""

from __future__ import annotations

import os
import tomllib

import pytest
from spec_helpers import BOX_PORT, TINY_SPEC, make_project

from paritygate.errors import SpecError
from paritygate.spec import NOOP_STORED_REASON, load_spec, parse_slice, update_claim


def test_box_port_example_loads_with_every_part():
    spec = load_spec(BOX_PORT / "parity.toml")
    assert set(spec.cases) == {
        "leetcode",
        "wide_editor",
        "narrow",
        "edge_to_edge",
        "icon",
        "on_threshold",
    }
    assert spec.reference.name == "reference"
    assert [c.name for c in spec.candidates] == ["port"]
    assert [a.name for a in spec.adapters_of("port")] == ["port-python"]
    port = spec.runners["port"]
    assert port.kind == "subprocess" and port.output_format == "json" and port.timeout == 120
    claim = spec.claims["panel-edges"]
    assert (claim.metric, claim.bound, claim.unit, claim.scope) == (
        "max_edge_delta",
        2.0,
        "px",
        "edge",
    )
    assert claim.covers("boxes/editor") and not claim.covers("logits")
    assert claim.holds(2) and not claim.holds(3)
    assert spec.reference.pins["preprocess"]["model_size"] == [80, 60]
    assert spec.path == (BOX_PORT / "parity.toml").resolve() and spec.table == ()


def _error(tmp_path, spec_text, **kwargs) -> str:
    path = make_project(tmp_path, spec_text, **kwargs)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    text = str(info.value)
    assert str(path.resolve()) in text  # every error names the file
    return text


def test_malformed_toml_names_file_and_line(tmp_path):
    text = _error(tmp_path, TINY_SPEC + "\n[claims.broken\n")
    assert "malformed TOML" in text and "line" in text


@pytest.mark.parametrize(
    "addition, key",
    [
        ("\ncolour = 'blue'\n", "colour"),
        ("\n[claims.y-close.params]\nbins = 3\n", "claims.y-close.params.bins"),
    ],
)
def test_unknown_keys_are_rejected_by_name(tmp_path, addition, key):
    text = _error(
        tmp_path,
        TINY_SPEC.replace("format_version = 2\n", "format_version = 2" + addition, 1)
        if "colour" in addition
        else TINY_SPEC + addition,
    )
    assert key in text and "unknown" in text


def test_typo_in_a_claim_key_is_rejected(tmp_path):
    text = _error(tmp_path, TINY_SPEC.replace("bound = 1e-5", "bound = 1e-5\nboud = 2"))
    assert "claims.y-close.boud" in text and "expected one of" in text


def test_wrong_type_names_key_and_expectation(tmp_path):
    text = _error(tmp_path, TINY_SPEC.replace("bound = 1e-5", 'bound = "tight"'))
    assert "claims.y-close.bound" in text and "finite number" in text


def test_claim_on_an_output_no_runner_produces_is_refused(tmp_path):
    text = _error(tmp_path, TINY_SPEC.replace('outputs = ["y"]', 'outputs = ["probs"]'))
    assert "claims.y-close.outputs" in text and "'probs'" in text and "matches no output" in text


@pytest.mark.parametrize("path", ["../outside.npz", "/etc/passwd", "cases/../../x.npz"])
def test_paths_may_not_escape_the_spec_folder(tmp_path, path):
    text = _error(tmp_path / "p", TINY_SPEC.replace('path = "cases/a.npz"', f'path = "{path}"'))
    assert "cases.a.path" in text and ("escapes" in text or "absolute" in text)


def test_symlink_out_of_the_spec_folder_is_refused(tmp_path):
    outside = tmp_path / "outside.npz"
    outside.write_bytes(b"x")
    project = tmp_path / "p"
    project.mkdir()
    os.symlink(outside, project / "link.npz")
    text = _error(project, TINY_SPEC.replace('path = "cases/a.npz"', 'path = "link.npz"'))
    assert "escapes the spec's folder" in text


def test_noop_claim_in_stored_mode_is_refused_with_the_reason(tmp_path):
    spec = (
        TINY_SPEC
        + """
[claims.wrapper-noop]
outputs = ["y"]
metric = "exact"
bound = 0
oracle = "no-op"
mode = "stored"
status = "provisional"
"""
    )
    text = _error(tmp_path, spec)
    assert "claims.wrapper-noop.mode" in text
    assert NOOP_STORED_REASON in text and "records the script" in text
    # the same claim in paired mode is accepted
    path = make_project(tmp_path / "ok", spec.replace('mode = "stored"', 'mode = "paired"'))
    assert load_spec(path).claims["wrapper-noop"].mode == "paired"


def test_scope_must_agree_with_the_metric(tmp_path):
    text = _error(
        tmp_path, TINY_SPEC.replace('metric = "max_abs"', 'metric = "max_abs"\nscope = "dataset"')
    )
    assert "measured per element" in text


def test_calibrated_claim_needs_a_basis(tmp_path):
    text = _error(tmp_path, TINY_SPEC.replace('status = "provisional"', 'status = "calibrated"'))
    assert "claims.y-close.basis" in text


def test_speed_claim_must_name_its_hardware_class(tmp_path):
    spec = (
        TINY_SPEC
        + """
[claims.fast]
outputs = ["y"]
metric = "p50_ms"
bound = 5
oracle = "approximation"
status = "provisional"
"""
    )
    assert "hardware class" in _error(tmp_path, spec)


def test_format_version_is_checked(tmp_path):
    assert "format_version" in _error(
        tmp_path, TINY_SPEC.replace("format_version = 2", "format_version = 99")
    )


def test_exactly_one_reference(tmp_path):
    text = _error(tmp_path, TINY_SPEC.replace('role = "candidate"', 'role = "reference"'))
    assert "exactly one runner" in text


def test_command_runner_needs_case_and_out_placeholders(tmp_path):
    spec = TINY_SPEC.replace(
        'callable = "tiny:candidate32"', 'command = ["./port", "--input", "x.png"]'
    )
    assert "{out}" in _error(tmp_path, spec)


def test_output_mapping_is_validated(tmp_path):
    spec = TINY_SPEC + '\n[runners.cand.map.y]\nfrom = "y_nhwc"\ntranspose = [0, 0]\n'
    assert "runners.cand.map.y.transpose" in _error(tmp_path, spec)
    spec = TINY_SPEC + '\n[runners.cand.map.y]\nslice = "0, :, abc"\n'
    assert "runners.cand.map.y.slice" in _error(tmp_path / "2", spec)


def test_parse_slice():
    assert parse_slice("0, :, 1:-1") == (0, slice(None), slice(1, -1))
    assert parse_slice("..., ::2") == (Ellipsis, slice(None, None, 2))
    with pytest.raises(ValueError):
        parse_slice("..., ...")


def test_pyproject_table_is_a_spec_and_errors_name_the_table(tmp_path):
    body = (
        TINY_SPEC.replace("[cases.", "[tool.paritygate.cases.")
        .replace("[waived]", "[tool.paritygate.waived]")
        .replace("[runners.", "[tool.paritygate.runners.")
        .replace("[claims.", "[tool.paritygate.claims.")
    )
    head, rest = body.split("[tool.paritygate.cases.a]", 1)
    text = (
        "[project]\nname = 'demo'\n\n[tool.paritygate]\n"
        + head.strip()
        + "\n\n[tool.paritygate.cases.a]"
        + rest
    )
    path = make_project(tmp_path, text, name="pyproject.toml")
    spec = load_spec(path)
    assert spec.table == ("tool", "paritygate") and "y-close" in spec.claims
    assert load_spec(tmp_path).path == path  # a folder finds its pyproject.toml
    good = path.read_text()
    path.write_text(good.replace("bound = 1e-5", "bound = -"))
    with pytest.raises(SpecError, match="malformed TOML"):
        load_spec(path)
    path.write_text(good.replace("bound = 1e-5", "bond = 1e-5"))
    with pytest.raises(SpecError, match=r"tool\.paritygate\.claims\.y-close"):
        load_spec(path)


def test_update_claim_keeps_comments_and_refuses_invalid_edits(tmp_path):
    path = make_project(
        tmp_path,
        "# header comment\n" + TINY_SPEC.replace("bound = 1e-5", "bound = 1e-5  # first guess"),
    )
    update_claim(
        path, "y-close", bound=2e-6, status="calibrated", basis={"cases": 2, "measured": "noise"}
    )
    text = path.read_text()
    assert "# header comment" in text and "# first guess" in text
    claim = load_spec(path).claims["y-close"]
    assert claim.bound == 2e-6 and claim.status == "calibrated" and claim.basis["cases"] == 2
    before = path.read_text()
    with pytest.raises(SpecError):
        update_claim(path, "y-close", bound="loose")
    with pytest.raises(SpecError):
        update_claim(path, "nope", bound=1)
    assert path.read_text() == before
    assert tomllib.loads(before)["claims"]["y-close"]["bound"] == 2e-6


def test_update_claim_writes_a_plain_basis_mapping_as_calibration_does(tmp_path):
    path = make_project(tmp_path, TINY_SPEC)
    basis = {"cases": 16, "noise": {"max": 1e-6, "median": 2e-7}, "refused": None, "empty": {}}
    update_claim(path, "y-close", basis=basis)
    text = path.read_text()
    # nested maps inline, absent values left out (TOML has no null), the spec still loads
    assert "noise = {max = 1e-06, median = 2e-07}" in text
    assert "refused" not in text and "empty" not in text
    assert load_spec(path).claims["y-close"].basis == {
        "cases": 16,
        "noise": {"max": 1e-6, "median": 2e-7},
    }


def test_command_only_keys_are_refused_on_in_process_runners(tmp_path):
    text = _error(
        tmp_path,
        TINY_SPEC.replace(
            'callable = "tiny:candidate32"', 'callable = "tiny:candidate32"\nenv = { A = "1" }'
        ),
    )
    assert "runners.cand.env" in text and "only meaningful for command runners" in text


def test_in_process_timeout_is_opt_in_and_commands_default_to_600_s(tmp_path):
    spec = load_spec(
        make_project(
            tmp_path / "one",
            TINY_SPEC.replace(
                'callable = "tiny:candidate32"', 'callable = "tiny:candidate32"\ntimeout = 5'
            ),
        )
    )
    assert spec.runners["cand"].timeout == 5 and spec.runners["reference"].timeout is None
    text = _error(
        tmp_path / "two",
        TINY_SPEC.replace(
            'callable = "tiny:candidate32"', 'callable = "tiny:candidate32"\ntimeout = 0'
        ),
    )
    assert "runners.cand.timeout" in text and "expected a number of seconds > 0" in text


# ---------------------------------------------------------------------------------------------
# fault sweep: specs that overflowed the parser's recursion or were silently rounded


@pytest.mark.parametrize(
    "nested",
    [
        "x = " + "[" * 100_000 + "]" * 100_000,  # past tomllib's own recursion
        "x = " + "{a = " * 20_000 + "1" + "}" * 20_000,
        "x = " + "[" * 65 + "]" * 65,  # parses, but deeper than any spec
    ],
    ids=["arrays-100k", "inline-tables-20k", "arrays-65"],
)
def test_spec_nested_too_deeply_is_one_spec_error(tmp_path, nested):
    path = make_project(tmp_path, nested + "\n" + TINY_SPEC)
    with pytest.raises(SpecError, match="TOML nested too deeply") as info:
        load_spec(path)
    assert info.value.where == str(path) and "\n" not in info.value.one_line()


def test_spec_nesting_within_the_limit_still_loads(tmp_path):
    from paritygate.spec import MAX_SPEC_DEPTH

    depth = MAX_SPEC_DEPTH - 4  # under the document, claims, y-close and basis
    spec_text = TINY_SPEC + "\n[claims.y-close.basis]\nx = " + "[" * depth + "]" * depth + "\n"
    spec = load_spec(make_project(tmp_path, spec_text.replace("provisional", "calibrated")))
    assert spec.claims["y-close"].basis["x"] == eval("[" * depth + "]" * depth)


@pytest.mark.parametrize(
    "written, message",
    [
        ("99999999999999999999", "the integer 99999999999999999999 has no exact float64 value"),
        ("9007199254740993", "the integer 9007199254740993 has no exact float64 value"),
        ("1" + "0" * 400, "the integer of 401 digits is beyond the largest float64 number"),
    ],
)
def test_integer_bound_a_float_cannot_hold_is_refused(tmp_path, written, message):
    text = _error(tmp_path, TINY_SPEC.replace("bound = 1e-5", f"bound = {written}"))
    assert "claims.y-close.bound" in text and message in text
    if "no exact" in message:
        assert "write it as a float" in text


def test_integer_bounds_a_float_holds_exactly_still_load(tmp_path):
    spec_text = TINY_SPEC.replace("bound = 1e-5", "bound = 9007199254740992")
    assert load_spec(make_project(tmp_path / "a", spec_text)).claims["y-close"].bound == 2.0**53
    spec_text = TINY_SPEC.replace("bound = 1e-5", "bound = 1e20")
    assert load_spec(make_project(tmp_path / "b", spec_text)).claims["y-close"].bound == 1e20
    spec_text = TINY_SPEC.replace("bound = 1e-5", "bound = 3")
    bound = load_spec(make_project(tmp_path / "c", spec_text)).claims["y-close"].bound
    assert bound == 3.0 and type(bound) is float
