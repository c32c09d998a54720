"""``paritygate bench``: run a benchmark table, show and compare saved runs, print history."""

from __future__ import annotations

import json
import os
import sys
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


def _console() -> Console:
    """160 columns when piped (CI logs), like the rest of the CLI; COLUMNS when set."""
    if os.environ.get("COLUMNS") or sys.stdout.isatty():
        return Console()
    return Console(width=160)


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
    _print_result(_console(), data, f"{data.workload} ({result})")


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


def _seconds(value: str | None) -> float | None:
    if value is None:
        return None
    text = value.strip().lower()
    scale = 60.0 if text.endswith("m") else 1.0
    try:
        number = float(text.rstrip("sm"))
    except ValueError:
        raise InputError(f"--budget: expected seconds like 30s or 2m, got {value!r}") from None
    if not number > 0:
        raise InputError(f"--budget must be > 0, got {value!r}")
    return number * scale


def _fraction(value: str | None) -> float | None:
    if value is None:
        return None
    text = value.strip()
    try:
        number = float(text.rstrip("%")) / (100.0 if text.endswith("%") else 1.0)
    except ValueError:
        raise InputError(f"--threshold: expected a change like 3% or 0.03, got {value!r}") from None
    if not number > 0:
        raise InputError(
            f"--threshold must be > 0, got {value!r}",
            hint="a change of 0 cannot be told from noise; leave it out to calibrate A/A",
        )
    return number


@bench_command.command("run")
@click.argument("file", type=click.Path(dir_okay=False))
@click.argument("names", nargs=-1)
@click.option("--budget", help="time budget per benchmark, e.g. 30s or 2m (default: the table's)")
@click.option(
    "--threshold", help="smallest change worth calling, e.g. 3% (default: the table's or A/A)"
)
@click.option("--processes", type=int, help="worker processes per side (0: in this process)")
@click.option("--json", "json_dir", type=click.Path(file_okay=False), help="write NAME.json here")
@click.option(
    "--history",
    "history_dir",
    type=click.Path(file_okay=False),
    help="append to this history folder",
)
@click.option("--recalibrate", is_flag=True, help="measure the A/A threshold again")
@click.option(
    "--ray",
    "ray_address",
    metavar="ADDRESS",
    default=None,
    help="run each benchmark on a node of this Ray cluster that it has alone ('local' starts "
    "one here); refused, saying why, when no node is idle",
)
@click.option(
    "--clock",
    type=click.Choice(["wall", "cpu"]),
    default="wall",
    show_default=True,
    help="wall: elapsed time; cpu: the process's CPU time (leaves out time spent preempted on a "
    "busy machine; CPU-bound callables only)",
)
def run(
    file: str,
    names: tuple[str, ...],
    budget: str | None,
    threshold: str | None,
    processes: int | None,
    json_dir: str | None,
    history_dir: str | None,
    recalibrate: bool,
    ray_address: str | None,
    clock: str,
) -> int:
    """Run the [benchmarks.NAME] tables of FILE (a spec or its own TOML); all when no NAME.

    A benchmark never shares its node with other units of work: here, it is refused while a
    run's workers are busy; with --ray, it runs on an idle node asked for whole.

    Exit 0 when every benchmark is faster or equivalent, 1 when one is slower or inconclusive."""
    from ..bench._history import append
    from ..bench._table import load_tables, run_table

    tables = load_tables(file)
    unknown = [n for n in names if n not in tables]
    if unknown:
        raise InputError(
            f"no [benchmarks.{unknown[0]}] table; the file has: {', '.join(sorted(tables))}",
            where=file,
        )
    seconds, fraction = _seconds(budget), _fraction(threshold)
    console = _console()
    worst = 0
    for name in names or tuple(tables):
        table = tables[name]
        options = {
            "budget": seconds,
            "threshold": fraction,
            "processes": processes,
            "recalibrate": recalibrate,
            "clock": clock,
        }
        if ray_address is not None:
            from ..bench import BenchResult
            from ..execution import timed_on_ray

            address = None if ray_address == "local" else ray_address
            data = timed_on_ray(
                address,
                "paritygate.cli.bench:table_on_node",
                str(Path(file).resolve()),
                name,
                options,
                what=f"benchmark {name}",
            )
            result = BenchResult.from_dict(data, where=f"benchmark {name} on Ray")
        else:
            result = run_table(table, **options)
        _print_result(console, result, f"{name}: {table.workload}")
        if json_dir:
            Path(json_dir).mkdir(parents=True, exist_ok=True)
            Path(json_dir, f"{name}.json").write_text(json.dumps(result.to_dict(), indent=1))
        folder = history_dir or table.history
        if folder:
            click.echo(f"history: appended to {append(result, folder)}")
        worst = max(worst, 0 if result else 1)
    return worst


def table_on_node(file: str, name: str, options: dict) -> dict:
    """One benchmark table run where it is called (a Ray node it has alone), as JSON data."""
    from ..bench._table import load_tables, run_table

    return run_table(load_tables(file)[name], **options).to_dict()


@bench_command.command("history")
@click.argument("folder", type=click.Path(file_okay=False))
@click.option("--workload", help="one workload (its file stem); default: every file")
@click.option("--png", "png_dir", type=click.Path(file_okay=False), help="write WORKLOAD.png here")
@click.option(
    "--html", "html_dir", type=click.Path(file_okay=False), help="write WORKLOAD.html here"
)
@click.option(
    "--penalty",
    type=float,
    default=3.0,
    show_default=True,
    help="change-point penalty (x log n x noise variance)",
)
def history(
    folder: str, workload: str | None, png_dir: str | None, html_dir: str | None, penalty: float
) -> None:
    """Print the trend of each workload's history and flag step changes (ruptures)."""
    from ..bench._history import change_points, load, plot_png, write_html
    from ..bench._stats import format_ratio

    files = sorted(Path(folder).glob("*.jsonl"))
    if workload:
        files = [f for f in files if f.stem == workload]
    if not files:
        raise InputError(
            "no benchmark history here" + (f" for {workload!r}" if workload else ""), where=folder
        )
    for file in files:
        points = load(file)
        steps = change_points([p.candidate_s for p in points], penalty) if points else []
        table = Table(title=f"{file.stem} ({len(points)} runs)")
        for col in ("#", "date", "revision", "verdict", "ratio", "baseline", "candidate", ""):
            table.add_column(col)
        for i, p in enumerate(points):
            table.add_row(
                str(i),
                p.date,
                p.revision,
                p.verdict,
                format_ratio(p.ratio),
                f"{p.baseline_s * 1e3:.4g} ms",
                f"{p.candidate_s * 1e3:.4g} ms",
                "step change" if i in steps else "",
            )
        _console().print(table)
        if steps:
            for i in steps:
                before, after = points[i - 1].candidate_s, points[i].candidate_s
                click.echo(
                    f"step change at #{i} ({points[i].revision}): candidate "
                    f"{before * 1e3:.4g} ms -> {after * 1e3:.4g} ms"
                )
        else:
            click.echo("no step change")
        png = None
        if png_dir:
            Path(png_dir).mkdir(parents=True, exist_ok=True)
            png = plot_png(points, steps, Path(png_dir, f"{file.stem}.png"), file.stem)
            click.echo(f"wrote {png}")
        if html_dir:
            Path(html_dir).mkdir(parents=True, exist_ok=True)
            if png is None:
                png = plot_png(points, steps, Path(html_dir, f"{file.stem}.png"), file.stem)
            out = write_html(points, steps, png, Path(html_dir, f"{file.stem}.html"), file.stem)
            click.echo(f"wrote {out}")
