"""A static HTML page of a gate run: tables, and plots embedded as base64 PNG.

No network assets: styles are inline and plots are data URIs. Plots need matplotlib (the
``plots`` extra); without it the page still holds every table and says how to get the plots.
"""

from __future__ import annotations

import base64
import io
import json
from html import escape
from typing import Any

from ._common import (
    as_float,
    case_label,
    claim_groups,
    distributions,
    edge_deltas,
    fmt,
    speed_evidence,
    speed_series,
    summary_counts,
    verdict_message,
    verdict_word,
    verdicts,
)

__all__ = ["render_html", "plots_available"]

# Keep the page small on runs with many cases: at most this many per-edge plots.
MAX_EDGE_PLOTS = 40

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:2em;color:#1b1f24}
h1 .PASS{color:#1a7f37} h1 .FAIL{color:#cf222e} h1 .DRIFT{color:#9a6700}
table{border-collapse:collapse;margin:1em 0;font-size:0.92em}
th,td{border:1px solid #d0d7de;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa} tr.fail td{background:#ffebe9} tr.pass td:first-child{color:#1a7f37}
td.num{text-align:right;font-variant-numeric:tabular-nums}
figure{display:inline-block;margin:0.5em 1em 1em 0} figcaption{font-size:0.85em;color:#57606a}
.note{background:#fff8c5;border:1px solid #d4a72c;padding:0.6em 1em}
pre{background:#f6f8fa;padding:0.6em;overflow-x:auto;white-space:pre-wrap}
"""


def plots_available() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=96, bbox_inches="tight")
    data = base64.b64encode(buffer.getvalue()).decode("ascii")
    return f'<img alt="plot" src="data:image/png;base64,{data}">'


def _bounds(bound: Any) -> list[float]:
    if isinstance(bound, (list, tuple)):
        return [b for b in (as_float(x) for x in bound) if b is not None]
    number = as_float(bound)
    return [] if number is None else [number]


def _metric_plot(claim_id: str, candidate: str, items: list[dict[str, Any]]) -> str | None:
    from matplotlib.figure import Figure

    points = [(case_label(v), as_float(v.get("observed")), bool(v.get("passed"))) for v in items]
    points = [(c, o, p) for c, o, p in points if o is not None]
    if not points:
        return None
    figure = Figure(figsize=(max(4.0, 0.5 * len(points) + 2.5), 3.0))
    axes = figure.add_subplot()
    xs = list(range(len(points)))
    for x, (_, observed, ok) in zip(xs, points):
        axes.scatter([x], [observed], color="#1a7f37" if ok else "#cf222e", zorder=3)
    for bound in _bounds(items[0].get("bound")):
        axes.axhline(bound, color="#9a6700", linestyle="--", label=f"bound {fmt(bound)}")
    axes.margins(x=0.1, y=0.15)  # points sitting on the bound stay visible
    axes.set_xticks(xs, [c for c, _, _ in points], rotation=30, ha="right", fontsize=8)
    unit = items[0].get("unit") or ""
    axes.set_ylabel(f"{items[0].get('metric', '')} {f'({unit})' if unit else ''}".strip())
    axes.set_title(f"{claim_id} — {candidate}", fontsize=10)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=8)
    return _png(figure)


def _edge_plot(verdict: dict[str, Any], deltas: dict[str, float]) -> str:
    from matplotlib.figure import Figure

    names = list(deltas)
    figure = Figure(figsize=(max(4.0, 0.35 * len(names) + 2.5), 3.0))
    axes = figure.add_subplot()
    bounds = _bounds(verdict.get("bound"))
    limit = max(bounds) if bounds else None
    colors = ["#cf222e" if limit is not None and deltas[n] > limit else "#0969da" for n in names]
    axes.bar(range(len(names)), [deltas[n] for n in names], color=colors)
    if limit is not None:
        axes.axhline(limit, color="#9a6700", linestyle="--", label=f"bound {fmt(limit)}")
        axes.legend(fontsize=8)
    axes.set_xticks(range(len(names)), names, rotation=45, ha="right", fontsize=7)
    unit = verdict.get("unit") or ""
    axes.set_ylabel(f"|delta| {f'({unit})' if unit else ''}".strip())
    axes.set_title(
        f"{verdict.get('claim_id')} — {verdict.get('candidate')} — {case_label(verdict)}",
        fontsize=10,
    )
    return _png(figure)


def _distribution_plot(
    title: str, series: dict[str, list[float]], bound: Any, xlabel: str = ""
) -> str:
    from matplotlib.figure import Figure

    figure = Figure(figsize=(5.5, 3.0))
    axes = figure.add_subplot()
    import numpy as np

    # One set of bin edges for every series, so that their bars line up and compare.
    pooled = np.concatenate([np.asarray(v, dtype=float) for v in series.values()])
    longest = max(len(v) for v in series.values())
    edges = np.histogram_bin_edges(pooled, bins=min(40, max(5, longest // 3)))
    for name, samples in series.items():
        axes.hist(samples, bins=edges, alpha=0.55, label=name)
    for value in _bounds(bound):
        axes.axvline(value, color="#9a6700", linestyle="--", label=f"bound {fmt(value)}")
    axes.legend(fontsize=8)
    axes.set_title(title, fontsize=10)
    axes.set_ylabel("count")
    if xlabel:
        axes.set_xlabel(xlabel)
    return _png(figure)


def _figure(img: str, caption: str) -> str:
    return f"<figure>{img}<figcaption>{escape(caption)}</figcaption></figure>"


def _plots_section(result: dict[str, Any]) -> list[str]:
    parts = ["<h2>Plots</h2>"]
    if not plots_available():
        parts.append(
            '<p class="note">Plots need matplotlib: install the <code>plots</code> extra '
            "(<code>pip install 'paritygate[plots]'</code>) and re-render with "
            "<code>paritygate report result.json</code>.</p>"
        )
        return parts
    shown = 0
    for (claim_id, candidate), items in claim_groups(result).items():
        img = _metric_plot(claim_id, candidate, items)
        if img:
            parts.append(_figure(img, f"{claim_id}: observed per case, bound dashed"))
            shown += 1
    edge_plots = 0
    # Failing verdicts first, so the cap on per-edge plots never hides a violation's plot.
    ordered = sorted(verdicts(result), key=lambda v: bool(v.get("passed")))
    for verdict in ordered:
        deltas = edge_deltas(verdict.get("evidence"))
        if deltas and edge_plots < MAX_EDGE_PLOTS:
            parts.append(_figure(_edge_plot(verdict, deltas), "per-edge deltas, bound dashed"))
            edge_plots += 1
    for verdict in verdicts(result):
        timed = speed_series(verdict)
        if timed:
            xlabel, series, lines = timed
            title = (
                f"{verdict.get('claim_id')} — {verdict.get('candidate')} — {case_label(verdict)}"
            )
            img = _distribution_plot(title, series, lines, xlabel)
            parts.append(
                _figure(img, "speed samples" + (", bound dashed" if lines else ", both sides"))
            )
            shown += 1
    bounds_by_title = {
        f"{v.get('claim_id')} / {v.get('candidate')} / {case_label(v)}": v.get("bound")
        for v in verdicts(result)
    }
    for title, series in distributions(result):
        img = _distribution_plot(title, series, bounds_by_title.get(title))
        parts.append(_figure(img, f"calibration distribution: {title}"))
        shown += 1
    if not shown and not edge_plots:
        parts.append("<p>No numeric observations to plot.</p>")
    return parts


def _table(headers: list[str], rows: list[list[str]], row_classes: list[str] | None = None) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def render_html(result: dict[str, Any]) -> str:
    word = verdict_word(result)
    counts = summary_counts(result)
    spec = escape(str(result.get("spec", "")))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>paritygate {word}: {spec}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f'<h1>paritygate: <span class="{word}">{word}</span></h1>',
        f"<p>Spec <code>{spec}</code> · exit code {escape(str(result.get('exit_code', '')))} · "
        f"started {escape(str(result.get('started', '')))} · "
        f"finished {escape(str(result.get('finished', '')))}</p>",
        f"<p>{counts['passed']} of {counts['verdicts']} claim verdicts hold · "
        f"{counts['failed']} violated · {counts['not_evaluated']} not evaluated · "
        f"{counts['drift']} drift · {counts['errors']} errors</p>",
    ]
    if not verdicts(result) and not result.get("errors") and not result.get("drift"):
        # (a gate's own "no claim was evaluated" error, or drift, already says why)
        parts.append('<p class="note">No claim was evaluated: a gate that ran nothing fails.</p>')

    items = verdicts(result)
    if items:
        rows, classes = [], []
        for v in items:
            unit = f" {v['unit']}" if v.get("unit") else ""
            rows.append(
                [
                    "pass" if v.get("passed") else "FAIL",
                    f"<code>{escape(str(v.get('claim_id')))}</code>",
                    escape(case_label(v)),
                    escape(str(v.get("candidate", ""))),
                    escape(str(v.get("oracle", ""))),
                    escape(str(v.get("metric", ""))),
                    escape(fmt(v.get("observed")) + unit),
                    escape(fmt(v.get("bound")) + unit),
                    escape(fmt(v.get("excess"))),
                    "" if v.get("passed") else escape(verdict_message(v)),
                ]
            )
            classes.append("pass" if v.get("passed") else "fail")
        parts.append("<h2>Claims</h2>")
        parts.append(
            _table(
                [
                    "",
                    "claim",
                    "case",
                    "candidate",
                    "oracle",
                    "metric",
                    "observed",
                    "bound",
                    "excess",
                    "failures",
                ],
                rows,
                classes,
            )
        )

    speed = [(v, line) for v in items if (line := speed_evidence(v))]
    if speed:
        parts.append("<h2>Speed claims</h2>")
        parts.append(
            _table(
                ["claim", "case", "candidate", "evidence"],
                [
                    [
                        f"<code>{escape(str(v.get('claim_id')))}</code>",
                        escape(case_label(v)),
                        escape(str(v.get("candidate", ""))),
                        escape(line),
                    ]
                    for v, line in speed
                ],
            )
        )

    not_evaluated = result.get("not_evaluated") or []
    if not_evaluated:
        parts.append("<h2>Not evaluated</h2>")
        parts.append(
            _table(
                ["claim", "reason"],
                [
                    [
                        f"<code>{escape(str(i.get('claim_id')))}</code>",
                        escape(str(i.get("reason", ""))),
                    ]
                    for i in not_evaluated
                ],
            )
        )
    drift = result.get("drift") or []
    if drift:
        parts.append("<h2>Drift</h2>")
        parts.append("<p>Something pinned shifted; this does not say the candidate is wrong.</p>")
        parts.append(
            _table(
                ["kind", "subject", "expected", "observed", "detail"],
                [
                    [
                        escape(str(i.get(k) or ""))
                        for k in ("kind", "subject", "expected", "observed", "detail")
                    ]
                    for i in drift
                ],
            )
        )
    errors = result.get("errors") or []
    if errors:
        parts.append("<h2>Errors</h2>")
        parts.extend(f"<pre>{escape(str(e))}</pre>" for e in errors)

    parts.extend(_plots_section(result))

    provenance = result.get("provenance") or {}
    if provenance:
        parts.append("<h2>Provenance</h2>")
        parts.append(
            _table(
                ["key", "value"],
                [
                    [escape(str(k)), f"<code>{escape(json.dumps(v, sort_keys=True))}</code>"]
                    for k, v in provenance.items()
                ],
            )
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
