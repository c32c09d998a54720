"""Claims check: numbers published in Markdown against the spec and committed result files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from paritygate.claims_check import check_claims, find_markers, parse_number
from paritygate.cli import main
from paritygate.errors import InputError

SPEC_HEAD = """\
format_version = 1
outputs = ["boxes/*", "prob"]

[cases.leetcode]
path = "cases/leetcode.png"
sha256 = "{sha}"
label = 1

[runners.reference]
role = "reference"
callable = "detector:reference"

[runners.port]
role = "candidate"
callable = "detector:port"
""".format(sha="0" * 64)


def _claims(
    edge_bound: float = 2,
    edge_status: str = "calibrated",
    edge_basis: bool = True,
    published: str = '["README.md"]',
) -> str:
    basis = (
        '\n[claims."boxes.edge_px".basis]\n'
        'measured = "noise over 40 cases, 2026-11-20, apple-m2; largest 0.4 px, smallest bug 3 '
        'px"\n'
        if edge_basis
        else ""
    )
    return f"""
[claims."boxes.edge_px"]
outputs = ["boxes/*"]
metric = "max_edge_delta"
bound = {edge_bound}
unit = "px"
oracle = "equivalence"
status = "{edge_status}"
published = {published}
{basis}
[claims.prob_cosine]
outputs = ["prob"]
metric = "cosine"
bound = 0.97
oracle = "equivalence"
status = "provisional"
"""


README = """\
# Detector port

The port matches the reference within **≤ 2 px** <!-- claim: boxes.edge_px --> on every edge
of every box, and the probabilities keep a cosine ≥ 0.97 <!-- claim: prob_cosine -->.

Measured: cosine 0.9987 <!-- measured: results/gate.json#/verdicts/1/observed -->,
worst edge 1.4 px <!-- measured: results/gate.json#/verdicts/0/observed -->.

```markdown
Examples in code blocks are not markers: ≤ 30 px <!-- claim: boxes.edge_px -->
```
And inline code neither: `≤ 9 px <!-- claim: nothing.here -->`.
"""


def _project(
    tmp_path: Path,
    *,
    spec_claims: str | None = None,
    readme: str = README,
    results: dict | None = None,
) -> tuple[Path, Path]:
    (tmp_path / "parity.toml").write_text(
        SPEC_HEAD + (spec_claims if spec_claims is not None else _claims())
    )
    (tmp_path / "README.md").write_text(readme)
    (tmp_path / "results").mkdir(exist_ok=True)
    data = (
        results
        if results is not None
        else {
            "format": "paritygate-gate-result",
            "verdicts": [
                {"claim_id": "boxes.edge_px", "observed": 1.4},
                {"claim_id": "prob_cosine", "observed": 0.998712},
            ],
        }
    )
    (tmp_path / "results" / "gate.json").write_text(json.dumps(data))
    return tmp_path / "parity.toml", tmp_path / "README.md"


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # messages name paths relative to the working folder


def test_consistent_docs_pass(tmp_path):
    spec, readme = _project(tmp_path)
    result = check_claims([readme], spec)
    assert result.problems == []
    assert result.passed and result.exit_code == 0
    kinds = [(m.kind, m.target, m.line) for m in result.markers]
    assert kinds == [
        ("claim", "boxes.edge_px", 3),
        ("claim", "prob_cosine", 4),
        ("measured", "results/gate.json#/verdicts/1/observed", 6),
        ("measured", "results/gate.json#/verdicts/0/observed", 7),
    ]


def test_gate_looser_than_published_number_fails(tmp_path):
    # seed 002: the README publishes 2 px, the gate runs at 30 px
    spec, readme = _project(tmp_path, spec_claims=_claims(edge_bound=30))
    result = check_claims([readme], spec)
    assert not result and result.exit_code == 1
    [problem] = result.problems
    text = str(problem)
    assert text.startswith("README.md:3: claim boxes.edge_px:")
    assert "the gate's bound 30 px (parity.toml:17) is looser than the published '≤ 2 px'" in text
    assert re.search(r"\b2\b", text) and "30" in text


def test_gate_stricter_than_published_number_also_differs(tmp_path):
    spec, readme = _project(tmp_path, spec_claims=_claims(edge_bound=1.5))
    [problem] = check_claims([readme], spec).problems
    assert (
        "README.md:3: claim boxes.edge_px: published '≤ 2 px' (2) differs from the gate's bound "
        "1.5 px" in str(problem)
    )


def test_lower_bound_claim_looser_in_the_gate(tmp_path):
    spec, _ = _project(tmp_path)
    text = README.replace("cosine ≥ 0.97 <!--", "cosine ≥ 0.99 <!--")
    (tmp_path / "README.md").write_text(text)
    [problem] = check_claims([tmp_path / "README.md"], spec).problems
    assert "README.md:4: claim prob_cosine: the gate's bound 0.97" in str(problem)
    assert "looser than the published '≥ 0.99'" in str(problem)


def test_comparator_in_the_wrong_direction_fails(tmp_path):
    spec, _ = _project(tmp_path)
    (tmp_path / "README.md").write_text(README.replace("cosine ≥ 0.97", "cosine ≤ 0.97"))
    [problem] = check_claims([tmp_path / "README.md"], spec).problems
    assert "reads as a upper bound, but cosine is a lower bound" in str(problem)


def test_unit_mismatch_fails(tmp_path):
    spec, _ = _project(tmp_path)
    (tmp_path / "README.md").write_text(README.replace("**≤ 2 px**", "≤ 2 ms"))
    [problem] = check_claims([tmp_path / "README.md"], spec).problems
    assert "published '≤ 2 ms' is in ms but the spec's bound 2 px" in str(problem)


def test_differing_measured_figure_fails(tmp_path):
    results = {"verdicts": [{"observed": 1.4}, {"observed": 0.9971}]}
    spec, readme = _project(tmp_path, results=results)
    [problem] = check_claims([readme], spec).problems
    text = str(problem)
    assert text.startswith("README.md:6:")
    assert (
        "published '0.9987' differs from results/gate.json#/verdicts/1/observed, which holds 0.9971"
        in text
    )


def test_measured_figure_rounds_to_the_written_precision(tmp_path):
    # 0.998712 is published as 0.9987; 0.99876 would round to 0.9988 and fails
    spec, readme = _project(
        tmp_path, results={"verdicts": [{"observed": 1.449}, {"observed": 0.99876}]}
    )
    problems = [str(p) for p in check_claims([readme], spec).problems]
    assert len(problems) == 1 and "README.md:6:" in problems[0] and "0.9988" in problems[0]


def test_measured_marker_with_missing_file_or_pointer(tmp_path):
    spec, _ = _project(tmp_path)
    (tmp_path / "README.md").write_text(
        "a 0.5 <!-- measured: results/absent.json#/x -->\n"
        "b 0.5 <!-- measured: results/gate.json#/verdicts/7/observed -->\n"
        "c 0.5 <!-- measured: results/gate.json#/format -->\n"
        "d ≤ 2 px <!-- claim: boxes.edge_px -->\n"
    )
    problems = [str(p) for p in check_claims([tmp_path / "README.md"], spec).problems]
    assert problems == [
        "README.md:1: published '0.5' cites results/absent.json, which does not exist",
        "README.md:2: published '0.5' cites results/gate.json#/verdicts/7/observed: no index '7' "
        "(at '/verdicts/7/observed') in results/gate.json",
        "README.md:3: published '0.5' cites results/gate.json#/format, which holds "
        "'paritygate-gate-result', not a finite number",
    ]


def test_unpublished_claim_fails(tmp_path):
    readme = README.replace("**≤ 2 px** <!-- claim: boxes.edge_px -->", "**≤ 2 px**")
    spec, path = _project(tmp_path, readme=readme)
    [problem] = check_claims([path], spec).problems
    text = str(problem)
    assert text.startswith(
        "README.md: claim boxes.edge_px: the spec (parity.toml:17) says this claim is published "
        "here"
    )
    assert "no '<!-- claim: boxes.edge_px -->' marker" in text and "2 px" in text


def test_published_docs_are_checked_even_when_not_named(tmp_path):
    spec, _ = _project(tmp_path, spec_claims=_claims(edge_bound=30))
    result = check_claims([], spec)
    assert [d.name for d in result.docs] == ["README.md"]
    assert len(result.problems) == 1 and "looser" in str(result.problems[0])


def test_published_doc_that_does_not_exist(tmp_path):
    spec, readme = _project(tmp_path, spec_claims=_claims(published='["docs/absent.md"]'))
    [problem] = check_claims([readme], spec).problems
    assert str(problem) == (
        "parity.toml:17: claim boxes.edge_px: says it is published in docs/absent.md, which does "
        "not exist"
    )


def test_calibrated_claim_without_basis_fails(tmp_path):
    spec, readme = _project(tmp_path, spec_claims=_claims(edge_basis=False))
    problems = [str(p) for p in check_claims([readme], spec).problems]
    assert len(problems) == 1
    assert problems[0].startswith(
        "parity.toml:17: claim boxes.edge_px: is calibrated but states no basis"
    )


def test_other_spec_errors_are_reported_once(tmp_path):
    spec, readme = _project(
        tmp_path, spec_claims=_claims().replace('metric = "cosine"', 'metric = "cosine"\nbund = 1')
    )
    problems = [str(p) for p in check_claims([readme], spec).problems]
    assert len(problems) == 1
    assert problems[0].startswith("parity.toml: the spec does not load:")
    assert "claims.prob_cosine.bund: unknown key" in problems[0]


def test_provisional_claim_without_basis_is_fine(tmp_path):
    spec, readme = _project(
        tmp_path, spec_claims=_claims(edge_basis=False, edge_status="provisional")
    )
    assert check_claims([readme], spec).passed


def test_unknown_claim_and_marker_without_number(tmp_path):
    spec, _ = _project(tmp_path)
    (tmp_path / "README.md").write_text(
        README
        + "Speed 1.3× <!-- claim: speed.p50 -->\nno number here <!-- claim: prob_cosine -->\n"
        "bad <!-- claim prob_cosine -->\n"
    )
    problems = [str(p) for p in check_claims([tmp_path / "README.md"], spec).problems]
    assert problems[0].startswith(
        "README.md:13: claim speed.p50: unknown claim: the spec parity.toml has no "
        "[claims.speed.p50]"
    )
    assert "claims in the spec: boxes.edge_px, prob_cosine" in problems[0]
    assert problems[1] == (
        "README.md:14: claim marker 'prob_cosine' does not follow a number "
        "(write the marker right after the number it ties)"
    )
    assert problems[2].startswith("README.md:15: malformed marker")
    assert len(problems) == 3


def test_percentages_against_fractions_and_percent_units(tmp_path):
    claims = (
        _claims()
        + """
[claims.accuracy]
outputs = ["prob"]
metric = "accuracy"
bound = 0.95
oracle = "approximation"
status = "provisional"

[claims.accuracy_pct]
outputs = ["prob"]
metric = "accuracy"
bound = 95
unit = "%"
oracle = "approximation"
status = "provisional"
"""
    )
    text = (
        README
        + "Accuracy ≥ 95 % <!-- claim: accuracy --> and ≥ 95% <!-- claim: accuracy_pct -->.\n"
        "Top-1 99.87 % <!-- measured: results/gate.json#/verdicts/1/observed -->.\n"
    )
    spec, readme = _project(tmp_path, spec_claims=claims, readme=text)
    result = check_claims([readme], spec)
    assert result.problems == []
    (tmp_path / "README.md").write_text(text.replace("≥ 95 % <!--", "≥ 99 % <!--"))
    [problem] = check_claims([readme], spec).problems
    assert (
        "claim accuracy: the gate's bound 0.95 (parity.toml:36) is looser than the published '≥ 99 "
        "%' (0.99)" in str(problem)
    )


@pytest.mark.parametrize(
    "text, value, high, comparator, unit",
    [
        ("≤ 2 px", 2.0, None, "<=", "px"),
        ("<= 2px", 2.0, None, "<=", "px"),
        ("&le; 2 px", 2.0, None, "<=", "px"),
        ("cosine **≥ 0.97**", 0.97, None, ">=", ""),
        (">= 30", 30.0, None, ">=", ""),
        ("1,234.5 ms", 1234.5, None, None, "ms"),
        ("2\u2009000\u2009000 samples", 2_000_000.0, None, None, "samples"),
        ("1.2e-3", 0.0012, None, None, ""),
        ("3.2 × 10^-5", 3.2e-5, None, None, ""),
        ("3.2×10⁻⁵", 3.2e-5, None, None, ""),
        ("99.5 %", 99.5, None, None, "%"),
        ("1.3×", 1.3, None, None, "×"),
        ("5–7 skipped steps", 5.0, 7.0, None, "skipped steps"),
        ("−0.5 dB", -0.5, None, None, "dB"),
        ("(≤ 2 px)", 2.0, None, "<=", "px"),
    ],
)
def test_parse_number(text, value, high, comparator, unit):
    number = parse_number(text)
    assert number is not None
    assert number.value == pytest.approx(value, rel=1e-12)
    assert number.high == high
    assert number.comparator == comparator
    assert number.unit == unit


@pytest.mark.parametrize("text", ["no number", "abc2", "1,5", ""])
def test_parse_number_refuses_what_is_not_a_number_at_the_end(text):
    assert parse_number(text) is None


def test_find_markers_skips_code_and_reads_several_per_line(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "~~~\n≤ 1 px <!-- claim: a -->\n~~~\n≤ 2 px <!-- claim: b --> and ≥ 0.9 <!-- claim: c -->\n"
    )
    markers = find_markers(doc)
    assert [(m.target, m.line, m.number.value) for m in markers] == [("b", 4, 2.0), ("c", 4, 0.9)]
    with pytest.raises(InputError, match="no such doc"):
        find_markers(tmp_path / "absent.md")


def test_cli_exit_codes(tmp_path, capsys):
    spec, readme = _project(tmp_path)
    assert main(["claims", "check", str(readme), "--spec", str(spec)]) == 0
    assert "claims check: ok, 4 marker(s) in 1 doc(s)" in capsys.readouterr().out
    _project(tmp_path, spec_claims=_claims(edge_bound=30))
    assert main(["claims", "check", str(readme), "--spec", str(spec)]) == 1
    captured = capsys.readouterr()
    assert "README.md:3: claim boxes.edge_px: the gate's bound 30 px" in captured.out
    assert "claims check: FAIL, 1 problem(s)" in captured.err
    assert main(["claims", "check", "absent.md", "--spec", str(spec)]) == 2
    assert "no such doc" in capsys.readouterr().err
    # without --spec: parity.toml in the working folder; README.md is checked as it is published
    assert main(["claims", "check"]) == 1
    assert "README.md:3: claim boxes.edge_px: the gate's bound 30 px" in capsys.readouterr().out


def test_published_range_is_the_activity_band(tmp_path):
    claims = (
        _claims()
        + """
[claims.cache-quality]
outputs = ["prob"]
metric = "cosine"
bound = 0.97
oracle = "approximation"
status = "provisional"
mode = "paired"
activity = { calls = "cache:Body.run", measure = "skipped", min = 5, max = 7 }
"""
    )
    text = README + "The cache skips 5–7 steps <!-- claim: cache-quality --> per image.\n"
    spec, readme = _project(tmp_path, spec_claims=claims, readme=text)
    assert check_claims([readme], spec).problems == []
    (tmp_path / "README.md").write_text(text.replace("5–7 steps", "5-6 steps"))
    [problem] = check_claims([readme], spec).problems
    assert str(problem).startswith(
        "README.md:13: claim cache-quality: the gate's activity band of cache:Body.run 5–7"
    )
    assert "is wider than the published '5-6 steps'" in str(problem)
    # a range tied to a claim without a band
    (tmp_path / "README.md").write_text(README + "within 1–2 px <!-- claim: boxes.edge_px -->\n")
    [problem] = check_claims([readme], spec).problems
    assert "published range '1–2 px' has nothing to tie to: the claim has no activity band" in str(
        problem
    )


def test_spec_in_pyproject(tmp_path):
    spec, readme = _project(tmp_path, spec_claims=_claims(edge_bound=30))
    body = spec.read_text()
    body = re.sub(r"^\[(?!\[)", "[tool.paritygate.", body, flags=re.M)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[project]\nname = "port"\n\n[tool.paritygate]\n' + body)
    spec.unlink()
    [problem] = check_claims([readme], pyproject).problems
    assert "the gate's bound 30 px (pyproject.toml:" in str(problem)


@pytest.mark.parametrize(
    "published,bound,looser",
    [
        ("0.99999999992", "0.99999999932", True),  # the README tightened in the ninth digit
        ("0.99999999932", "0.99999999902", True),  # the spec loosened in the ninth digit
        ("0.99999999932", "0.99999999992", False),  # stricter in the gate still differs
    ],
)
def test_cosine_bounds_compare_as_written_not_within_a_float_tolerance(
    tmp_path, published, bound, looser
):
    spec_claims = _claims().replace("bound = 0.97", f"bound = {bound}")
    spec, _ = _project(tmp_path, spec_claims=spec_claims)
    text = README.replace("cosine ≥ 0.97 <!--", f"cosine ≥ {published} <!--")
    (tmp_path / "README.md").write_text(text)
    [problem] = check_claims([tmp_path / "README.md"], spec).problems
    message = str(problem)
    assert ("looser than the published" in message) == looser
    assert bound in message and published in message
    one_minus = lambda x: format(1 - __import__("decimal").Decimal(x), "g")  # noqa: E731
    assert f"as 1 − x: published {one_minus(published)}, gate {one_minus(bound)}" in message


@pytest.mark.parametrize(
    "published,bound",
    [
        ("0.99999999932", "0.99999999932"),
        ("99.5 %", "0.995"),
        ("0.97", "9.7e-1"),
        ("0.970", "0.97"),
    ],
)
def test_bounds_written_differently_but_equal_in_decimal_pass(tmp_path, published, bound):
    spec_claims = _claims().replace("bound = 0.97", f"bound = {bound}")
    spec, _ = _project(tmp_path, spec_claims=spec_claims)
    text = README.replace("cosine ≥ 0.97 <!--", f"cosine ≥ {published} <!--")
    (tmp_path / "README.md").write_text(text)
    assert check_claims([tmp_path / "README.md"], spec).problems == []


# --------------------------------------------------------------------------------------------
# --unmarked: every figure of a published doc or section is tied to the spec or a result file

SECTIONED = """\
# Detector port

## Claims

The port matches the reference within **≤ 2 px** <!-- claim: boxes.edge_px --> on every edge
of the 8 edges (4 boxes), over 40 cases, with MLX 0.32.4 and `1.5x` in code; its cosine is
0.9987 <!-- measured: results/gate.json#/verdicts/1/observed -->.

## Speed

q4 is 5x faster and the port 3.50x as fast, 12 ms per call.
"""


def test_unmarked_figures_of_a_published_section_fail_and_marked_ones_pass(tmp_path, capsys):
    spec, readme = _project(
        tmp_path, spec_claims=_claims(published='["README.md#claims"]'), readme=SECTIONED
    )
    # The marker is in the published section and every figure there is tied: both modes pass
    # ("8 edges", "4 boxes", "40 cases" are counts; a version and code are no figures).
    assert check_claims([readme], spec).problems == []
    assert check_claims([readme], spec, unmarked=True).problems == []
    assert main(["claims", "check", "--unmarked", "README.md", "--spec", str(spec)]) == 0
    capsys.readouterr()
    # Publish the whole README: the speed section's figures are unmarked.
    spec.write_text(spec.read_text().replace('["README.md#claims"]', '["README.md"]'))
    assert check_claims([readme], spec).problems == []  # without --unmarked: as before
    problems = [str(p) for p in check_claims([readme], spec, unmarked=True).problems]
    assert [p.split(": ", 1)[0] for p in problems] == ["README.md:11"] * 3
    assert ["'5x'" in problems[0], "'3.50x'" in problems[1], "'12 ms'" in problems[2]] == [True] * 3
    assert "unmarked number '5x' in README.md, which the spec publishes" in problems[0]
    assert main(["claims", "check", "--unmarked", "README.md", "--spec", str(spec)]) == 1
    out = capsys.readouterr().out
    assert "README.md:11: unmarked number '3.50x'" in out


def test_a_published_section_must_hold_the_claims_marker_and_exist(tmp_path):
    spec, readme = _project(
        tmp_path, spec_claims=_claims(published='["README.md#speed"]'), readme=SECTIONED
    )
    [problem] = check_claims([readme], spec).problems
    assert str(problem).startswith("README.md:9: claim boxes.edge_px:")
    assert "its section #speed has no '<!-- claim: boxes.edge_px -->' marker" in str(problem)
    spec.write_text(spec.read_text().replace("README.md#speed", "README.md#results"))
    [problem] = check_claims([readme], spec).problems
    assert "README.md has no heading whose anchor is #results" in str(problem)


def test_unmarked_without_a_published_doc_is_an_input_error(tmp_path, capsys):
    spec, readme = _project(tmp_path, spec_claims=_claims(published="[]"))
    with pytest.raises(InputError, match="no claim lists one"):
        check_claims([readme], spec, unmarked=True)
    assert main(["claims", "check", "--unmarked", "README.md", "--spec", str(spec)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "line,figures",
    [
        ("q4 is 5x faster, 3.50x and 1.3× the baseline", ["5x", "3.50x", "1.3×"]),
        ("≤ 2 px, ≥ 0.97, 97.5 %, 3.2 × 10^-5 and 1e-6", ["≤ 2 px", "≥ 0.97", "97.5 %"]),
        ("16 cases, (1), sha256, h200, 2026-12-01, 8×8, v1.2, MLX 0.32.4 and 64.", []),
        ("a [link](https://x.org/v1.5) <!-- 2.5 ms in a comment --> and `0.5 ms`", []),
        ("0.9987 <!-- measured: r.json#/a --> then 0.71 alone", ["0.71"]),
    ],
)
def test_what_counts_as_an_unmarked_figure(tmp_path, line, figures):
    from paritygate.claims_check import find_unmarked

    doc = tmp_path / "doc.md"
    doc.write_text(f"# T\n\n{line}\n")
    found = [n.text for _, n in find_unmarked(doc)]
    if line.startswith("≤"):
        figures = [*figures, "3.2 × 10^-5", "1e-6"]
    assert found == figures
