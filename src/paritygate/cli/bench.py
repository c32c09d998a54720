"""``paritygate bench``: run a benchmark table, show and compare saved runs, print history."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ..errors import InputError


def _load(path: str):
    from ..bench import BenchResult

    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InputError("no such file", where=path) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not JSON ({exc})", where=path) from None
    if not isinstance(data, dict):
        raise InputError("not a paritygate benchmark result", where=path)
    return BenchResult.from_dict(data, where=path)


def _table(result, title: str) -> Table:
    table = Table(title=title)
    for col in ("side", "samples", "calls/sample", "cold", "p50", "p95", "stage fractions"):
        table.add_column(col)
    for side in (result.baseline, result.candidate):
        s = side.summary()

        def fmt(key: str, s: dict = s) -> str:
            return f"{s[key] * 1e3:.4g} ms" if key in s else "too few samples"

        fractions = ", ".join(f"{k} {v:.0%}" for k, v in s.get("stage_fraction", {}).items())
        table.add_row(
            side.name,
            str(s["n"]),
            str(side.loops),
            fmt("cold_s"),
            fmt("p50_s"),
            fmt("p95_s"),
            fractions,
        )
    return table


def _print_result(console: Console, result, title: str) -> None:
    console.print(_table(result, title))
    click.echo(result.describe())
    for warning in result.warnings:
        click.echo(f"warning: {warning}")


@click.group("bench")
def bench_command() -> None:
    """Run paired benchmarks and compare saved runs (see docs/bench.md).

    \b
    Exit codes of run/compare: 0 faster or equivalent, 1 slower or inconclusive,
    2 usage or input error (including runs whose checked provenance differs)."""


@bench_command.command("show")
@click.argument("result", type=click.Path(dir_okay=False))
def show(result: str) -> None:
    """Print a saved benchmark result: samples, percentiles, stage fractions, the verdict."""
    data = _load(result)
    _print_result(Console(), data, f"{data.workload} ({result})")


@bench_command.command("compare")
@click.argument("first", type=click.Path(dir_okay=False))
@click.argument("second", type=click.Path(dir_okay=False))
@click.option("--json", "json_out", type=click.Path(dir_okay=False), help="write the comparison")
def compare(first: str, second: str, json_out: str | None) -> int:
    """Compare two saved runs of one workload: did the measured effect change?

    Refuses (exit 2) when their checked provenance differs."""
    from ..bench import compare_runs

    a, b = _load(first), _load(second)
    comparison = compare_runs(a, b, names=(first, second))
    click.echo(comparison.describe())
    if json_out:
        Path(json_out).write_text(json.dumps(comparison.to_dict(), indent=1))
    return 0 if comparison else 1
