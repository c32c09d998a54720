"""``paritygate bench``: inspect and compare saved benchmark results."""

from __future__ import annotations

import json
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from ..bench import check_comparable
from ..errors import InputError


def _load(path: str) -> dict:
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise InputError("no such file", where=path) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"not JSON ({exc})", where=path) from None
    if not isinstance(data, dict) or data.get("format") != "paritygate-bench-result":
        raise InputError("not a paritygate benchmark result", where=path)
    if data.get("format_version") != 1:
        raise InputError(
            f"benchmark result format version {data.get('format_version')!r} is not 1", where=path
        )
    return data


def _table(data: dict, title: str) -> Table:
    table = Table(title=title)
    for col in ("side", "n", "cold", "p50", "p95", "stage fractions"):
        table.add_column(col)
    for side in ("baseline", "candidate"):
        s = data[f"{side}_summary"]
        fmt = lambda key: f"{s[key] * 1e3:.3f} ms" if key in s else "too few samples"  # noqa: E731
        fractions = ", ".join(f"{k} {v:.0%}" for k, v in s.get("stage_fraction", {}).items())
        table.add_row(side, str(s["n"]), fmt("cold_s"), fmt("p50_s"), fmt("p95_s"), fractions)
    return table


@click.group("bench")
def bench_command() -> None:
    """Inspect saved benchmark results (written by paritygate.bench.run_bench(...).to_dict())."""


@bench_command.command("show")
@click.argument("result", type=click.Path(dir_okay=False))
def show(result: str) -> None:
    """Print a saved benchmark result: percentiles, stage fractions, paired verdict."""
    data = _load(result)
    console = Console()
    console.print(_table(data, f"{data['workload']} ({result})"))
    console.print(data["verdict"])


@bench_command.command("compare")
@click.argument("first", type=click.Path(dir_okay=False))
@click.argument("second", type=click.Path(dir_okay=False))
def compare(first: str, second: str) -> None:
    """Compare two saved results; refuses when their checked provenance differs (exit 2)."""
    a, b = _load(first), _load(second)
    check_comparable(a.get("provenance", {}), b.get("provenance", {}))
    console = Console()
    console.print(_table(a, first))
    console.print(_table(b, second))
    console.print(f"{first}: {a['verdict']}")
    console.print(f"{second}: {b['verdict']}")
