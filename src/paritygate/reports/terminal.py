"""The final verdict table for the terminal (rich)."""

from __future__ import annotations

from typing import Any

from ._common import as_float, case_label, fmt, summary_counts, verdict_word, verdicts

__all__ = ["verdict_table", "verdict_line"]


def verdict_line(result: dict[str, Any]) -> str:
    counts = summary_counts(result)
    return (
        f"paritygate: {verdict_word(result)} — {counts['passed']}/{counts['verdicts']} claim "
        f"verdicts hold, {counts['failed']} violated, {counts['not_evaluated']} not evaluated, "
        f"{counts['drift']} drift, {counts['errors']} errors"
    )


def _excess_note(verdict: dict[str, Any]) -> str:
    excess = as_float(verdict.get("excess"))
    if excess is None:
        return ""
    observed, bound = as_float(verdict.get("observed")), as_float(verdict.get("bound"))
    sign = "-" if observed is not None and bound is not None and observed < bound else "+"
    return f" ({sign}{fmt(excess)})"


def console(stderr: bool = False) -> Any:
    """A rich console for the CLI. On a terminal it takes the terminal's width; piped into a CI
    log or a file (where rich would assume 80 columns and fold every claim name) it is 160 wide,
    unless COLUMNS says otherwise."""
    import os
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not stream.isatty() and not os.environ.get("COLUMNS"):
        width = 160
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


def verdict_table(result: dict[str, Any]) -> Any:
    """A :class:`rich.table.Table` of every claim x case verdict."""
    from rich.table import Table

    items = verdicts(result)
    # A run without verdicts (all claims elsewhere, drift, no claim evaluated) prints its title
    # and the not-evaluated caption, not an empty grid.
    from rich import box

    # Horizontal rules only and no outer padding: eight columns fit an 80-column terminal
    # without folding the names of a typical run.
    table = Table(
        title=verdict_line(result),
        title_justify="left",
        show_header=bool(items),
        box=box.SIMPLE_HEAD if items else None,
        pad_edge=False,
        padding=0,
        show_edge=False,
    )
    table.add_column("", no_wrap=True)
    # Claim ids and numbers stay whole (they are what a reader searches for and compares);
    # case, candidate and metric names fold when the terminal is narrow.
    table.add_column("claim", no_wrap=True)
    table.add_column("case", overflow="fold", min_width=6)
    table.add_column("candidate", overflow="fold", min_width=6)
    table.add_column("metric", overflow="fold", min_width=6)
    # The excess rides in the observed cell ("3 px (+1)" over a ceiling, "0.98 (-0.01)" under a
    # floor): a column of its own, empty on most rows, would fold the names on 80 columns.
    for name in ("observed", "bound"):
        table.add_column(name, justify="right", no_wrap=True)
    for v in items:
        unit = f" {v['unit']}" if v.get("unit") else ""
        cells = [
            "[green]pass[/]" if v.get("passed") else "[bold red]FAIL[/]",
            str(v.get("claim_id", "")),
            case_label(v),
            str(v.get("candidate", "")),
            str(v.get("metric", "")),
            fmt(v.get("observed")) + unit + _excess_note(v),
            fmt(v.get("bound")) + unit,
        ]
        table.add_row(*cells)
    not_evaluated = result.get("not_evaluated") or []
    if not_evaluated:
        table.caption = "not evaluated: " + "; ".join(
            f"{item.get('claim_id')} ({item.get('reason', '')})" for item in not_evaluated
        )
        table.caption_justify = "left"
    return table
