"""The Markdown summary, fit for a pull-request comment."""

from __future__ import annotations

from typing import Any

from ._common import (
    case_label,
    failure_text,
    fmt,
    held_count,
    speed_evidence,
    summary_counts,
    verdict_message,
    verdict_word,
    verdicts,
)
from .terminal import ClaimSummary, claim_summaries

__all__ = ["render_markdown"]

# A pull-request comment must stay readable (and under the hosts' size limits of about 64 KiB):
# one row per (claim, candidate), as in the terminal and HTML reports, and under each failing
# claim at most MAX_CASES_SHOWN failing cases with MAX_FAILURES_SHOWN failures each, each case's
# line cut at MAX_DETAIL_CHARS; result.json and report.html hold every case and every failure.
MAX_TABLE_ROWS = 150
MAX_CASES_SHOWN = 3
MAX_FAILURES_SHOWN = 2
MAX_DETAIL_CHARS = 160


def _cell(value: Any) -> str:
    """Text safe inside a Markdown table cell."""
    text = fmt(value) if not isinstance(value, str) else value
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _clip(text: str, limit: int = MAX_DETAIL_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _case_detail(verdict: dict[str, Any]) -> str:
    """One failing case in one short line: its first failures, the rest counted."""
    failures = verdict.get("failures") or []
    if not failures:
        return _clip(verdict_message(verdict))
    text = "; ".join(failure_text(f) for f in failures[:MAX_FAILURES_SHOWN])
    more = len(failures) - MAX_FAILURES_SHOWN
    suffix = f"; +{more} more" if more > 0 else ""
    return _clip(text, MAX_DETAIL_CHARS - len(suffix)) + suffix


def _claim_table(claims: list[ClaimSummary]) -> list[str]:
    shown = [c for c in claims if not c.passed] + [c for c in claims if c.passed]
    shown = shown[:MAX_TABLE_ROWS]
    lines = [
        "| | claim | candidate | metric | cases | worst | bound | margin |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in shown:
        lines.append(
            "| {} | `{}` | {} | {} | {} | {} | {} | {} |".format(
                "✅" if c.passed else "❌",
                _cell(c.claim_id),
                _cell(c.candidate),
                _cell(c.metric),
                _cell(_cases_cell(c)),
                _cell(c.worst_cell()),
                _cell(c.bound_cell()),
                _cell(c.margin_cell()),
            )
        )
    if len(shown) < len(claims):
        lines += [
            "",
            f"… {len(claims) - len(shown)} more claims (all holding unless listed above) "
            "are in result.json and report.html.",
        ]
    return lines


def _cases_cell(claim: ClaimSummary) -> str:
    if claim.dataset:
        return "dataset"
    total = len(claim.verdicts)
    failed = len(claim.failing) + len(claim.no_outputs)
    return f"{total - failed}/{total} passed" + (f", {failed} failed" if failed else "")


def _violations(
    claims: list[ClaimSummary], full_report: str, result: dict[str, Any] | None = None
) -> list[str]:
    from .terminal import locate_hint

    failing = [c for c in claims if not c.passed]
    if not failing:
        return []
    lines = ["### Violations", ""]
    for c in failing[:MAX_TABLE_ROWS]:
        head = f"- **`{c.claim_id}`** ({c.candidate})"
        if not c.dataset:
            head += f": {len(c.failing)} of {len(c.verdicts)} cases failed"
        lines.append(head)
        for v in c.failing[:MAX_CASES_SHOWN]:
            where = "" if v.get("case") is None else f"`{case_label(v)}`: "
            lines.append(f"  - {where}{_case_detail(v)}")
        rest = c.failing[MAX_CASES_SHOWN:]
        if rest:
            names = ", ".join(f"`{case_label(v)}`" for v in rest[:8])
            names += ", …" if len(rest) > 8 else ""
            lines.append(f"  - … and {len(rest)} more failing cases: {names}")
        if c.no_outputs:
            lines.append(
                f"  - no outputs on {len(c.no_outputs)} case(s): the runner failed (see Errors)"
            )
        hint = locate_hint(result or {}, c, claims)
        if hint:
            lines.append(f"  - where it parts: `{hint}`")
    lines += [
        "",
        f"Every case and every failure: [{full_report}]({full_report}) and `result.json`, "
        "written beside this summary.",
        "",
    ]
    return lines


def render_markdown(result: dict[str, Any], *, full_report: str = "report.html") -> str:
    """The summary of a gate run for a pull-request comment: one row per (claim, candidate)
    with its cases passed and failed, its worst case and value against the bound; the failing
    cases' details capped and short, pointing to ``full_report`` (a path or URL) for the rest."""
    word = verdict_word(result)
    counts = summary_counts(result)
    items = verdicts(result)
    claims = claim_summaries(result)
    mark = {"PASS": "✅", "FAIL": "❌", "DRIFT": "⚠️"}[word]
    lines = [f"## {mark} paritygate: {word}", ""]
    spec = result.get("spec")
    if spec:
        lines.append(f"Spec `{spec}` · exit code {result.get('exit_code', '')}")
        lines.append("")
    held, total, what = held_count(result)
    lines.append(
        f"{held} of {total} {what} hold ({counts['passed']} of {counts['verdicts']} "
        f"claim × case verdicts) · {total - held} violated · "
        f"{counts['not_evaluated']} not evaluated · {counts['drift']} drift · "
        f"{counts['errors']} errors"
    )
    lines.append("")
    if word == "DRIFT":
        lines.append(
            "Drift means a pinned artifact or the environment changed; it does not say the "
            "candidate is wrong. Re-record deliberately once the change is understood."
        )
        lines.append("")
    if not items and not result.get("errors") and not result.get("drift"):
        # (a gate's own "no claim was evaluated" error, or drift, already says why)
        lines.append("**No claim was evaluated: a gate that ran nothing fails.**")
        lines.append("")
    if claims:
        lines += _claim_table(claims)
        lines.append("")

    speed = [(v, line) for v in items if (line := speed_evidence(v))]
    if speed:
        lines.append("### Speed claims")
        lines.append("")
        for v, line in speed:
            lines.append(
                f"- `{v.get('claim_id')}` on case `{case_label(v)}` ({v.get('candidate')}): {line}"
            )
        lines.append("")

    lines += _violations(claims, full_report, result)

    not_evaluated = result.get("not_evaluated") or []
    if not_evaluated:
        lines.append("### Not evaluated")
        lines.append("")
        for item in not_evaluated:
            lines.append(f"- `{item.get('claim_id')}`: {item.get('reason', '')}")
        lines.append("")

    drift = result.get("drift") or []
    if drift:
        lines.append("### Drift")
        lines.append("")
        lines.append("| kind | subject | expected | observed | detail |")
        lines.append("| --- | --- | --- | --- | --- |")
        for item in drift:
            lines.append(
                "| {} | {} | {} | {} | {} |".format(
                    *(
                        _cell(str(item.get(k) or ""))
                        for k in ("kind", "subject", "expected", "observed", "detail")
                    )
                )
            )
        lines.append("")

    errors = result.get("errors") or []
    if errors:
        lines.append("### Errors")
        lines.append("")
        for error in errors:
            text = str(error)
            if "\n" in text:
                head, _, rest = text.partition("\n")
                lines.append(f"- {head}")
                lines.append("")
                lines.append("  ```")
                lines.extend(f"  {line}" for line in rest.splitlines())
                lines.append("  ```")
            else:
                lines.append(f"- {text}")
        lines.append("")
    return "\n".join(lines).rstrip() + "\n"
