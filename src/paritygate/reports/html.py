"""A static HTML page of a gate run: tables, and plots embedded as base64 PNG.

No network assets: styles are inline and plots are data URIs. Plots need matplotlib (the
``plots`` extra); without it the page still holds every table and says how to get the plots.
"""

from __future__ import annotations

import base64
import io
import json
from html import escape
from pathlib import Path
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
    unit_of,
    verdict_message,
    verdict_word,
    verdicts,
)

__all__ = ["render_html", "plots_available"]

# Keep the page small on runs with many cases: at most this many per-edge plots.
MAX_EDGE_PLOTS = 40

_STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:1.5em 2em;
color:#1b1f24;max-width:100%;overflow-wrap:break-word}
h1{margin:0.2em 0} h2{margin:1.2em 0 0.4em} h1 .PASS{color:#1a7f37} h1 .FAIL{color:#cf222e}
h1 .DRIFT{color:#9a6700}
table{border-collapse:collapse;margin:0.5em 0;font-size:0.92em;max-width:100%}
th,td{border:1px solid #d0d7de;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f6f8fa} tr.fail td{background:#ffebe9} td.pass{color:#1a7f37}
td.FAIL{color:#cf222e;font-weight:bold}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
figure{display:inline-block;margin:0.3em 1em 0.5em 0;vertical-align:top}
figure img{max-width:100%} figcaption{font-size:0.85em;color:#57606a}
.note{background:#fff8c5;border:1px solid #d4a72c;padding:0.6em 1em}
.failure{margin:0.3em 0 0.3em 1.5em} details{margin:0.3em 0} summary{cursor:pointer}
pre{background:#f6f8fa;padding:0.6em;overflow-x:auto;white-space:pre-wrap;max-width:100%}
pre code,td code{overflow-wrap:anywhere} table.claims td:nth-child(-n+8){white-space:nowrap}
div.wide{overflow-x:auto;max-width:100%}
table.claims code{overflow-wrap:normal}
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
    """Observed per case with the bound dashed; cosine-like metrics as 1 - x on a log scale.
    None when there is nothing to see (every value zero, or none numeric)."""
    from matplotlib.figure import Figure

    from .terminal import ONE_MINUS

    metric = str(items[0].get("metric", ""))
    points = [
        (case_label(v), _display(metric, v.get("observed")), bool(v.get("passed"))) for v in items
    ]
    points = [(c, o, p) for c, o, p in points if o is not None]
    if not points or all(o == 0 for _, o, _ in points):
        return None
    figure = Figure(figsize=(4.2, 2.4))
    axes = figure.add_subplot()
    xs = list(range(len(points)))
    for x, (_, observed, ok) in zip(xs, points, strict=True):
        axes.scatter([x], [observed], s=14, color="#1a7f37" if ok else "#cf222e", zorder=3)
    for bound in _bounds(items[0].get("bound")):
        shown = _display(metric, bound)
        axes.axhline(shown, color="#9a6700", linestyle="--", label=f"bound {fmt(shown)}")
    if metric in ONE_MINUS and all(o > 0 for _, o, _ in points):
        axes.set_yscale("log")
    else:
        axes.ticklabel_format(axis="y", style="sci", scilimits=(-3, 4), useOffset=False)
    axes.margins(x=0.05, y=0.15)  # points sitting on the bound stay visible
    axes.set_xticks([])
    axes.set_xlabel(f"{len(points)} cases", fontsize=8)
    unit = unit_of(items[0])
    label = f"1 - {metric}" if metric in ONE_MINUS else metric
    axes.set_ylabel(f"{label} {f'({unit})' if unit and unit != metric else ''}".strip(), fontsize=8)
    axes.tick_params(labelsize=7)
    axes.set_title(f"{claim_id} — {candidate}", fontsize=9)
    if axes.get_legend_handles_labels()[0]:
        axes.legend(fontsize=7)
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
    unit = unit_of(verdict)
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
            parts.append(_figure(img, "observed per case, bound dashed"))
            shown += 1
    edge_plots = 0
    # Per-edge plots for failing verdicts only: a passing case's deltas are all within the bound
    # (mostly zero), and forty such plots say nothing.
    ordered = [v for v in verdicts(result) if not v.get("passed")]
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
        parts.append("<p>Nothing to plot: every observed value is zero or not numeric.</p>")
    return parts


def _table(
    headers: list[str],
    rows: list[list[str]],
    row_classes: list[str] | None = None,
    *,
    first_cell_class: bool = False,
    css_class: str = "",
) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        cls = f' class="{row_classes[i]}"' if row_classes else ""
        cells = [
            f'<td class="{c}">{c}</td>' if first_cell_class and j == 0 else f"<td>{c}</td>"
            for j, c in enumerate(row)
        ]
        body.append(f"<tr{cls}>" + "".join(cells) + "</tr>")
    cls = f' class="{css_class}"' if css_class else ""
    # A wide table scrolls inside its own box: the page never overflows sideways.
    return (
        f'<div class="wide"><table{cls}><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></div>"
    )


def _num(value: Any) -> str:
    return escape(fmt(value, compact=True))


def _display(metric: str, value: Any) -> float | None:
    from .terminal import ONE_MINUS

    number = as_float(value)
    if number is None:
        return None
    return 1.0 - number if metric in ONE_MINUS else number


def _claims_section(result: dict[str, Any], folder: Path | None = None) -> list[str]:
    """Per claim and candidate: verdict, cases, worst case, bound, margin and the distribution
    across cases; failures expanded under the table, every case collapsed in <details>."""
    import statistics

    from .terminal import ONE_MINUS, claim_summaries

    claims = claim_summaries(result)
    if not claims:
        return []
    rows, classes = [], []
    for c in claims:
        values = [
            x for x in (_display(c.metric, v.get("observed")) for v in c.verdicts) if x is not None
        ]
        spread = ""
        if len(values) > 1:
            spread = (
                f"{_num(min(values))} · {_num(statistics.median(values))} · {_num(max(values))}"
            )
        metric = f"1 − {c.metric}" if c.metric in ONE_MINUS else c.metric
        rows.append(
            [
                "pass" if c.passed else "FAIL",
                f"<code>{escape(c.claim_id)}</code>",
                escape(c.candidate),
                escape(metric),
                escape(c.cases_cell()),
                escape(c.worst_cell()),
                escape(c.bound_cell()),
                escape(c.margin_cell()),
                spread,
            ]
        )
        classes.append("pass" if c.passed else "fail")
    parts = [
        "<h2>Claims</h2>",
        _table(
            [
                "",
                "claim",
                "candidate",
                "metric",
                "cases",
                "worst",
                "bound",
                "margin",
                "across cases (min · median · max)",
            ],
            rows,
            classes,
            first_cell_class=True,
            css_class="claims",
        ),
    ]
    failing = [c for c in claims if not c.passed]
    if failing:
        parts.append("<h2>Failures</h2>")
    for c in failing:
        parts.append(f"<h3><code>{escape(c.claim_id)}</code> · {escape(c.candidate)}</h3>")
        for v in c.failing + c.no_outputs:
            text = escape(verdict_message(v))
            passes = (v.get("evidence") or {}).get("bound_that_passes")
            if passes is not None:
                text += f" — a bound of {_num(passes)} would have held"
            parts.append(f'<p class="failure"><b>{escape(case_label(v))}</b>: {text}</p>')
        parts.extend(_locate_links(result, c, claims, folder))
    parts.append("<h2>Every case</h2>")
    for c in claims:
        case_rows, case_classes = [], []
        for v in c.verdicts:
            ok = bool(v.get("passed"))
            case_rows.append(
                [
                    "pass" if ok else "FAIL",
                    escape(case_label(v)),
                    _num(
                        _display(c.metric, v.get("observed"))
                        if as_float(v.get("observed")) is not None
                        else v.get("observed")
                    ),
                    "" if ok else escape(verdict_message(v)),
                ]
            )
            case_classes.append("pass" if ok else "fail")
        label = f"1 − {c.metric}" if c.metric in ONE_MINUS else c.metric
        parts.append(
            f"<details><summary><code>{escape(c.claim_id)}</code> · {escape(c.candidate)}: "
            f"{escape(c.cases_cell())}</summary>"
            + _table(["", "case", label, "failure"], case_rows, case_classes, first_cell_class=True)
            + "</details>"
        )
    return parts


def _locate_links(
    result: dict[str, Any], claim: Any, claims: list[Any], folder: Path | None
) -> list[str]:
    """Under a failing claim: a link to each locate page of its failing cases found beside the
    report (``paritygate locate ... --report`` writes them), else the command that writes one."""
    from ..locate import locate_report_name
    from .terminal import locate_hint

    links = []
    for v in claim.failing:
        if v.get("case") is None or folder is None:
            continue
        name = locate_report_name(claim.claim_id, claim.candidate, str(v["case"]))
        if (folder / name).is_file():
            links.append(
                f'<a href="{escape(name)}">{escape(case_label(v))}: where it parts, layer by '
                "layer</a>"
            )
    if links:
        return [f'<p class="locate">{" · ".join(links)}</p>']
    hint = locate_hint(result, claim, claims)
    if not hint:
        return []
    return [
        f'<p class="locate">where it parts: <code>{escape(hint)} --report</code> (writes the '
        "layer plot beside this report, linked here on the next report)</p>"
    ]


def _provenance_section(provenance: dict[str, Any]) -> list[str]:
    """Provenance as tables: the facts that move numbers shown; bulky entries collapsed."""
    if not provenance:
        return []
    facts, bulky = [], []
    for key, value in provenance.items():
        if key == "packages" and isinstance(value, dict):
            text = ", ".join(f"{k} {v}" for k, v in sorted(value.items()))
            facts.append([escape(key), escape(text)])
        elif isinstance(value, dict) and all(
            not isinstance(v, (dict, list)) for v in value.values()
        ):
            text = ", ".join(f"{k}: {v}" for k, v in value.items())
            facts.append([escape(key), escape(text)])
        elif isinstance(value, list) and all(not isinstance(v, (dict, list)) for v in value):
            if value:
                facts.append([escape(key), "<br>".join(escape(str(v)) for v in value)])
        elif isinstance(value, (dict, list)):
            bulky.append((key, value))
        else:
            facts.append([escape(key), escape(str(value))])
    parts = ["<h2>Provenance</h2>", _table(["", "value"], facts)]
    for key, value in bulky:
        rows = _flatten_rows(value)
        parts.append(
            f"<details><summary>{escape(key)} ({len(rows)} entries)</summary>"
            + _table(["key", "value"], [[escape(k), escape(v)] for k, v in rows])
            + "</details>"
        )
    return parts


def _flatten_rows(value: Any, prefix: str = "") -> list[tuple[str, str]]:
    if isinstance(value, dict):
        rows: list[tuple[str, str]] = []
        for k, v in value.items():
            rows += _flatten_rows(v, f"{prefix}.{k}" if prefix else str(k))
        return rows
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        rows = []
        for i, v in enumerate(value):
            rows += _flatten_rows(v, f"{prefix}[{i}]")
        return rows
    if isinstance(value, float):
        return [(prefix, fmt(value, compact=True))]
    return [(prefix, json.dumps(value) if isinstance(value, list) else str(value))]


def render_html(result: dict[str, Any], folder: Path | None = None) -> str:
    """The HTML report; ``folder``: where it is written (the locate pages found there are
    linked under their failing claims)."""
    from .terminal import run_error_groups, verdict_line

    word = verdict_word(result)
    spec = escape(str(result.get("spec", "")))
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>paritygate {word}: {spec}</title>",
        f"<style>{_STYLE}</style></head><body>",
        f'<h1>paritygate: <span class="{word}">{word}</span></h1>',
        f"<p>{escape(verdict_line(result).split(' — ', 1)[-1])} · spec <code>{spec}</code> · "
        f"exit code {escape(str(result.get('exit_code', '')))} · "
        f"finished {escape(str(result.get('finished', '')))}</p>",
    ]
    if not verdicts(result) and not result.get("errors") and not result.get("drift"):
        # (a gate's own "no claim was evaluated" error, or drift, already says why)
        parts.append('<p class="note">No claim was evaluated: a gate that ran nothing fails.</p>')
    errors = result.get("errors") or []
    if errors:
        groups = run_error_groups(errors)
        total = len({v.get("case") for v in verdicts(result) if v.get("case") is not None})
        parts.append("<h2>Errors</h2>")
        for group in groups:
            parts.append(f"<p><b>{escape(group.headline(total))}</b></p>")
            if group.detail:
                parts.append(f"<pre>{escape(group.detail)}</pre>")
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
    items = verdicts(result)
    parts.extend(_claims_section(result, None if folder is None else Path(folder)))

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
    parts.extend(_plots_section(result))
    parts.extend(_provenance_section(result.get("provenance") or {}))
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
