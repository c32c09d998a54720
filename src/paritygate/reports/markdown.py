"""The Markdown summary, fit for a pull-request comment."""

from __future__ import annotations

from typing import Any

from ._common import (
    case_label,
    failure_text,
    fmt,
    metric_value,
    speed_evidence,
    summary_counts,
    unit_of,
    verdict_message,
    verdict_word,
    verdicts,
)

__all__ = ["render_markdown"]

# A pull-request comment must stay readable (and under the hosts' size limits of about 64 KiB):
# at most this many failure details per verdict, and this many rows in the verdict table, failing
# rows first; result.json and report.html hold everything.
MAX_FAILURES_SHOWN = 20
MAX_TABLE_ROWS = 150


def _cell(value: Any) -> str:
    """Text safe inside a Markdown table cell."""
    text = fmt(value) if not isinstance(value, str) else value
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def render_markdown(result: dict[str, Any]) -> str:
    word = verdict_word(result)
    counts = summary_counts(result)
    mark = {"PASS": "✅", "FAIL": "❌", "DRIFT": "⚠️"}[word]
    lines = [f"## {mark} paritygate: {word}", ""]
    spec = result.get("spec")
    if spec:
        lines.append(f"Spec `{spec}` · exit code {result.get('exit_code', '')}")
        lines.append("")
    lines.append(
        f"{counts['passed']} of {counts['verdicts']} claim verdicts hold · "
        f"{counts['failed']} violated · {counts['not_evaluated']} not evaluated · "
        f"{counts['drift']} drift · {counts['errors']} errors"
    )
    lines.append("")
    if word == "DRIFT":
        lines.append(
            "Drift means a pinned artifact or the environment changed; it does not say the "
            "candidate is wrong. Re-record deliberately once the change is understood."
        )
        lines.append("")
    if not verdicts(result) and not result.get("errors") and not result.get("drift"):
        # (a gate's own "no claim was evaluated" error, or drift, already says why)
        lines.append("**No claim was evaluated: a gate that ran nothing fails.**")
        lines.append("")

    items = verdicts(result)
    shown = items
    if len(items) > MAX_TABLE_ROWS:
        shown = [v for v in items if not v.get("passed")] + [v for v in items if v.get("passed")]
        shown = shown[:MAX_TABLE_ROWS]
    if items:
        lines.append("| | claim | case | candidate | metric | observed | bound | excess |")
        lines.append("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for v in shown:
            unit = f" {unit_of(v)}" if unit_of(v) else ""
            observed = metric_value(v.get("metric"), v.get("observed"))
            bound = metric_value(v.get("metric"), v.get("bound"))
            lines.append(
                "| {} | `{}` | {} | {} | {} | {} | {} | {} |".format(
                    "✅" if v.get("passed") else "❌",
                    _cell(str(v.get("claim_id", ""))),
                    _cell(case_label(v)),
                    _cell(str(v.get("candidate", ""))),
                    _cell(str(v.get("metric", ""))),
                    _cell(observed + unit if observed else ""),
                    _cell(bound + unit if bound else ""),
                    _cell(fmt(v.get("excess"))),
                )
            )
        if len(shown) < len(items):
            lines.append("")
            lines.append(
                f"… {len(items) - len(shown)} more verdicts (all holding unless listed above) "
                "are in result.json and report.html."
            )
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

    failing = [v for v in items if not v.get("passed")]
    if len(failing) > MAX_TABLE_ROWS:
        failing = failing[:MAX_TABLE_ROWS]
    if failing:
        lines.append("### Violations")
        lines.append("")
        for v in failing:
            head = f"- **`{v.get('claim_id')}`** on case `{case_label(v)}` ({v.get('candidate')})"
            failures = v.get("failures") or []
            lines.append(head if failures else f"{head}: {verdict_message(v)}")
            for failure in failures[:MAX_FAILURES_SHOWN]:
                lines.append(f"  - {failure_text(failure)}")
            if len(failures) > MAX_FAILURES_SHOWN:
                lines.append(
                    f"  - … and {len(failures) - MAX_FAILURES_SHOWN} more (see result.json)"
                )
        lines.append("")

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
