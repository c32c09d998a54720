"""Plain-text and rich-table renderings of a :class:`~paritygate.results.Comparison`.

The text form is what ``assert_parity`` raises and what a CI log shows: every output with its
verdict and metrics, every violated bound, the worst elements and the bounds that would have
passed. Every failing output is listed, not just the first.
"""

from __future__ import annotations

import textwrap
from typing import Any

from .._format import format_number
from ..results import Comparison, OutputComparison, Tolerance

__all__ = ["format_comparison", "format_output", "comparison_table", "output_name"]


def output_name(path: str) -> str:
    """How an output path is shown (a tree that is a single leaf has the empty path)."""
    return path if path else "(output)"


def _tolerance_text(tol: Tolerance) -> str:
    parts = [f"atol={tol.atol:g}", f"rtol={tol.rtol:g}"]
    if tol.min_cosine is not None:
        parts.append(f"min_cosine={tol.min_cosine:g}")
    if tol.max_ulp is not None:
        parts.append(f"max_ulp={tol.max_ulp}")
    if tol.max_mean_abs is not None:
        parts.append(f"max_mean_abs={tol.max_mean_abs:g}")
    parts.append(f"equal_nan={tol.equal_nan}")
    return " ".join(parts)


def _verdict(passed: bool) -> str:
    return "PASS" if passed else "FAIL"


def _table(header: list[str], rows: list[list[str]], indent: str) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    lines = [indent + "  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip()]
    for row in rows:
        lines.append(indent + "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip())
    return lines


def format_output(out: OutputComparison, *, show_tolerance: bool = False) -> str:
    """The text block of one output."""
    lines = [f"output {output_name(out.path)}: {_verdict(out.passed)}"]
    ind = "  "
    shape = "scalar" if out.shape == () else ("-" if out.shape is None else str(tuple(out.shape)))
    facts = (
        f"{ind}shape {shape}, {out.size} elements; actual {out.dtype_actual}, "
        f"expected {out.dtype_expected}"
    )
    facts += f"; compared as {out.compared_as} on {out.backend}"
    lines.append(facts)
    if out.promotion:
        lines.append(f"{ind}promotion: {out.promotion}")
    if show_tolerance:
        lines.append(f"{ind}bounds: {_tolerance_text(out.tolerance)}")
    numeric = out.compared_as not in ("str", "bytes")
    if numeric and out.size:
        lines.append(
            f"{ind}max_abs {format_number(out.max_abs)}  mean_abs {format_number(out.mean_abs)}  "
            f"max_rel {format_number(out.max_rel)}  "
            f"max_rel_symmetric {format_number(out.max_rel_symmetric)}  "
            f"(rel_eps {out.tolerance.rel_eps:g})"
        )
        cos = (
            format_number(out.cosine)
            if out.cosine is not None
            else f"undefined ({out.cosine_undefined})"
        )
        if out.cosine is not None and out.cosine > 0.999999:
            cos = f"{out.cosine:.12f}"
        ulp = "-"
        if out.ulp_max is not None:
            ulp = (
                f"max {out.ulp_max} ({out.ulp_dtype}), {out.ulp_nonzero} element(s) >= 1 ULP apart"
            )
            if out.ulp_over is not None and out.tolerance.max_ulp is not None:
                ulp += f", {out.ulp_over} beyond {out.tolerance.max_ulp}"
        lines.append(f"{ind}cosine {cos}  ulp {ulp}")
        lines.append(
            f"{ind}mismatches {out.mismatches} of {out.size} "
            f"(|a - e| > {out.tolerance.atol:g} + {out.tolerance.rtol:g} |e|); "
            f"atol needed {format_number(out.atol_needed)} at rtol={out.tolerance.rtol:g}, "
            f"rtol needed {format_number(out.rtol_needed)} at atol={out.tolerance.atol:g}"
        )
        nf = out.nonfinite
        if any((nf.actual_nan, nf.expected_nan, nf.actual_inf, nf.expected_inf, nf.inf_mismatch)):
            lines.append(
                f"{ind}non-finite: NaN actual {nf.actual_nan}, expected {nf.expected_nan}, "
                f"both {nf.nan_both}, one side only {nf.nan_one_side}; Inf actual {nf.actual_inf}, "
                f"expected {nf.expected_inf}, unmatched {nf.inf_mismatch}"
            )
    elif not numeric:
        lines.append(f"{ind}compared exactly")
    elif out.shape is None:
        lines.append(f"{ind}no element compared: one side is empty")
    else:
        lines.append(f"{ind}empty on both sides")
    if out.failures:
        lines.append(f"{ind}failures:")
        for failure in out.failures:
            lines.append(f"{ind}  - {failure.describe()}")
    if out.worst:
        title = "worst elements" if not out.passed else "largest differences (within bounds)"
        lines.append(
            f"{ind}{title} ({len(out.worst)} shown of {max(out.mismatches, len(out.worst))}):"
        )
        rows = [
            [
                ",".join(str(i) for i in el.index) or "()",
                format_number(el.actual),
                format_number(el.expected),
                format_number(el.abs_diff),
                format_number(el.excess),
            ]
            for el in out.worst
        ]
        lines.extend(
            _table(["index", "actual", "expected", "abs diff", "excess"], rows, ind + "  ")
        )
    return "\n".join(lines)


def format_comparison(comparison: Comparison) -> str:
    """The full plain-text report: summary line, bounds, then every output."""
    outputs = comparison.outputs
    failing = [o for o in outputs if not o.passed]
    head = "paritygate comparison"
    if comparison.label:
        head += f" {comparison.label}"
    summary = (
        f"{head}: {_verdict(comparison.passed)} — {len(outputs) - len(failing)} of {len(outputs)} "
        f"outputs within bounds"
    )
    if comparison.missing:
        summary += f", {len(comparison.missing)} missing"
    if comparison.extra:
        summary += f", {len(comparison.extra)} extra"
    lines = [summary, f"bounds: {_tolerance_text(comparison.tolerance)}"]
    if comparison.missing:
        lines.append(
            "missing outputs (in expected, not in actual): "
            + ", ".join(output_name(p) for p in comparison.missing)
        )
    if comparison.extra:
        lines.append(
            "extra outputs (in actual, not in expected): "
            + ", ".join(output_name(p) for p in comparison.extra)
        )
    if failing:
        lines.append("failing outputs: " + ", ".join(output_name(o.path) for o in failing))
    # Failing outputs first so that a long report starts with what needs attention.
    for out in failing + [o for o in outputs if o.passed]:
        lines.append("")
        lines.append(format_output(out, show_tolerance=out.tolerance != comparison.tolerance))
    return "\n".join(lines)


def comparison_table(comparison: Comparison, width: int | None = None) -> Any:
    """One row per output, failing rows in red, as a rich renderable.

    Columns come in priority order (output, verdict, max_abs, 1 - cosine, mismatches, atol
    needed, shape, dtypes, mean_abs, max_rel, ulp, worst element) and as many as fit the
    console's width are shown, each whole: at 80 columns the first seven, on a wide terminal
    all. The title line states the bounds; failing outputs are detailed below the table.
    """
    from rich.console import Console, ConsoleOptions, RenderResult
    from rich.text import Text

    from ._common import fmt

    title = "paritygate comparison" + (f" {comparison.label}" if comparison.label else "")
    title += f": {_verdict(comparison.passed)} ({_tolerance_text(comparison.tolerance)})"
    header = [
        "output",
        "verdict",
        "max_abs",
        "1-cosine",
        "mismatches",
        "atol needed",
        "shape",
        "dtypes",
        "mean_abs",
        "max_rel",
        "ulp",
        "worst (index: actual vs expected)",
    ]
    right = {2, 3, 4, 5, 8, 9, 10}
    rows: list[tuple[list[str], bool]] = []
    for out in comparison.outputs:
        dtypes = (
            out.dtype_actual
            if out.dtype_actual == out.dtype_expected
            else f"{out.dtype_actual}/{out.dtype_expected}"
        )
        if out.compared_as not in (out.dtype_actual, out.dtype_expected):
            dtypes += f" as {out.compared_as}"
        worst = ""
        if out.worst:
            el = out.worst[0]
            index = ",".join(str(i) for i in el.index) or "()"
            worst = f"{index}: {format_number(el.actual)} vs {format_number(el.expected)}"
        # An empty output against a non-empty one (shape None) has no metrics to show.
        numeric = out.compared_as not in ("str", "bytes") and out.shape is not None
        one_minus = "-"
        if numeric:
            one_minus = (
                fmt(out.one_minus_cosine, compact=True)
                if out.one_minus_cosine is not None
                else "undefined"
            )
        rows.append(
            (
                [
                    output_name(out.path),
                    _verdict(out.passed),
                    fmt(out.max_abs, compact=True) if numeric else "-",
                    one_minus,
                    f"{out.mismatches}/{out.size}",
                    fmt(out.atol_needed, compact=True) if numeric else "-",
                    "-" if out.shape is None else "x".join(str(n) for n in out.shape) or "()",
                    dtypes,
                    fmt(out.mean_abs, compact=True) if numeric else "-",
                    fmt(out.max_rel, compact=True) if numeric else "-",
                    format_number(out.ulp_max),
                    worst or (out.failures[0].where if out.failures else ""),
                ],
                out.passed,
            )
        )
    for path in comparison.missing:
        rows.append(([output_name(path), "MISSING"] + [""] * 10, False))
    for path in comparison.extra:
        rows.append(([output_name(path), "EXTRA"] + [""] * 10, False))

    class _Table:
        def __rich_console__(self, con: Console, options: ConsoleOptions) -> RenderResult:
            limit = width or options.max_width
            widths = [max([len(h)] + [len(r[i]) for r, _ in rows]) for i, h in enumerate(header)]
            shown: list[int] = []
            used = 0
            for i, w in enumerate(widths):
                if shown and used + 2 + w > limit:
                    break
                shown.append(i)
                used += w + (2 if len(shown) > 1 else 0)

            def line(cells: list[str]) -> str:
                parts = [
                    cells[i].rjust(widths[i]) if i in right else cells[i].ljust(widths[i])
                    for i in shown
                ]
                return "  ".join(parts).rstrip()

            for text in textwrap.wrap(title, width=limit, break_long_words=False) or [title]:
                yield Text(text, style="bold")
            yield Text(line(header), style="bold", no_wrap=True, overflow="ignore")
            for cells, passed in rows:
                yield Text(
                    line(cells), style="" if passed else "red", no_wrap=True, overflow="ignore"
                )
            hidden = [header[i] for i in range(len(header)) if i not in shown]
            if hidden:
                note = f"(not shown at this width: {', '.join(hidden)}; --json has every metric)"
                for text in textwrap.wrap(note, width=limit, break_long_words=False):
                    yield Text(text, style="dim")

    return _Table()
