"""The reports read a metric's unit, direction and display form from the claim-metric registry:
a metric added by one registry entry renders with its unit in the terminal text, the Markdown
summary and JUnit, with no edit to any report."""

from __future__ import annotations

import pytest

from paritygate import claim_metrics
from paritygate.claim_metrics import ClaimMetric
from paritygate.reports.junit import render_junit
from paritygate.reports.markdown import render_markdown
from paritygate.reports.terminal import render_lines
from paritygate.results import ClaimVerdict, GateResult


@pytest.fixture
def widgets():
    """A floor in widgets and a near-one score, each one registry entry (removed after)."""
    added = [
        claim_metrics.register(
            ClaimMetric(
                "widget_rate_t",
                scope="output",
                direction="min",
                comparison="compare",
                measure=lambda p: p.compared.max_abs,
                unit="widgets",
                summary="widgets per case",
            )
        ),
        claim_metrics.register(
            ClaimMetric(
                "closeness_t",
                scope="output",
                direction="min",
                comparison="compare",
                measure=lambda p: p.compared.cosine,
                near_one=True,
                summary="a score just below 1",
            )
        ),
    ]
    yield added
    for metric in added:
        del claim_metrics.METRICS[metric.name]


def _result() -> dict:
    """Verdicts whose claims name no unit of their own (the registry's applies)."""
    failing = ClaimVerdict(
        "rate-floor",
        "port",
        "a",
        False,
        "equivalence",
        "widget_rate_t",
        40.0,
        observed=37.5,
        excess=2.5,
    )
    holding = ClaimVerdict(
        "rate-floor", "port", "b", True, "equivalence", "widget_rate_t", 40.0, observed=41.0
    )
    close = ClaimVerdict(
        "close", "port", "a", True, "equivalence", "closeness_t", 0.99999, observed=0.9999995
    )
    return GateResult("parity.toml", verdicts=[failing, holding, close]).to_dict()


def _text(result: dict) -> str:
    return "\n".join(text for text, _ in render_lines(result, width=100, verbose=True))


def test_a_new_metric_renders_with_its_registry_unit_and_form(widgets):
    result = _result()
    markdown = render_markdown(result)
    assert "| worst 37.5 widgets @ a | floor 40 widgets | short by 2.5 |" in markdown
    # the near-one score in its distance-from-1 form, the floor "fallen short of"
    assert "| 1-closeness_t 5e-07 | bound 1e-05 | 20x margin |" in markdown
    assert "widget_rate_t observed 37.5 widgets, bound 40 widgets, short by 2.5" in markdown
    text = _text(result)
    assert "37.5 widgets" in text and "40 widgets" in text, text
    assert "1-closeness_t" in text, text
    junit = render_junit(result)
    assert "observed 41 widgets within bound 40 widgets" in junit
    assert "observed 37.5 widgets, bound 40 widgets" in junit


def test_without_the_entry_the_same_verdicts_carry_no_unit():
    # The other direction: the unit and form come from the entry, nowhere else.
    result = _result()
    markdown = render_markdown(result)
    assert "widgets" not in markdown and "widgets" not in _text(result)
    assert "| worst 41 @ b | bound 40 |" in markdown and "1-closeness_t" not in markdown
    assert "1-closeness_t" not in _text(result)


def test_a_claim_s_own_unit_wins_over_the_registry_s(widgets):
    result = _result()
    for verdict in result["verdicts"]:
        verdict["unit"] = "gadgets" if verdict["metric"] == "widget_rate_t" else ""
    markdown = render_markdown(result)
    assert "37.5 gadgets" in markdown and "widgets" not in markdown


def _agreement(observed: float, case: str | None = None) -> ClaimVerdict:
    return ClaimVerdict(
        "heads-agree",
        "onnx",
        case,
        observed >= 1.0,
        "equivalence",
        "agreement",
        1.0,
        observed=observed,
        excess=max(1.0 - observed, 0.0),
    )


def test_an_agreement_claim_reads_in_its_own_terms():
    """A floor of 100 % agreement is shown as a percentage, never as "1-agreement 0 bound 0"."""
    from paritygate.reports.terminal import claim_summaries

    result = GateResult("parity.toml", verdicts=[_agreement(1.0)]).to_dict()
    (summary,) = claim_summaries(result)
    assert summary.worst_cell() == "agreement 100%"
    assert summary.bound_cell() == "bound ≥ 100%"
    assert summary.margin_cell() == "at bound"
    text = _text(result)
    assert "agreement 100%" in text and "bound ≥ 100%" in text, text
    assert "1-agreement" not in text and "bound 0" not in text, text
    assert "100%" in render_markdown(result) and "100%" in render_junit(result)


def test_a_failed_agreement_claim_says_how_far_short_in_percent():
    result = GateResult("parity.toml", verdicts=[_agreement(0.96875)]).to_dict()
    from paritygate.reports.terminal import claim_summaries

    (summary,) = claim_summaries(result)
    assert summary.worst_cell() == "agreement 96.88%"
    assert summary.margin_cell() == "short by 3.125%"
    text = _text(result)
    assert "FAIL" in text and "agreement 96.88%" in text and "bound ≥ 100%" in text, text
    assert "agreement observed 96.875%, bound 100%" in render_markdown(result)
