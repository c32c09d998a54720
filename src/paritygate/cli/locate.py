"""``paritygate locate SPEC --claim ID --case CASE``: where inside the model the reference and a
candidate part (docs/locate.md)."""

from __future__ import annotations

import json
from pathlib import Path

import click

__all__ = ["locate_command"]


@click.command("locate")
@click.argument(
    "spec_path", metavar="SPEC", required=False, default=".", type=click.Path(path_type=Path)
)
@click.option("--claim", required=True, metavar="ID", help="The claim that fails.")
@click.option("--case", required=True, metavar="NAME", help="The case it fails on.")
@click.option(
    "--candidate",
    default=None,
    metavar="RUNNER",
    help="The candidate (when the claim has several).",
)
@click.option(
    "--map",
    "rules",
    multiple=True,
    metavar="'FROM -> TO'",
    help="A name rule from the candidate's module names to the reference's (a regular expression "
    "and its replacement; repeatable; added to the spec's [locate] map).",
)
@click.option(
    "--noise-from",
    default=None,
    metavar="RUNNER",
    help="A runner equivalent to the reference: per-layer bounds calibrated from its distance.",
)
@click.option(
    "--resume",
    default=None,
    metavar="MODULE",
    help="Replace every output of this candidate module by the reference's matched activation "
    "and judge only what runs after it: is the error made downstream, or did it arrive?",
)
@click.option(
    "--bisect",
    "points",
    default=None,
    metavar="REGEX",
    help="Resume after the candidate modules whose names match (e.g. 'blocks\\.\\d+'), by "
    "bisection, and name the one where the error arises.",
)
@click.option("--all", "every", is_flag=True, help="A row for every matched pair.")
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write the result as JSON here.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write an HTML page here: the plot (linear and log) and a row for every pair.",
)
@click.option(
    "--report",
    "report",
    is_flag=True,
    help="Write the HTML page into the spec's report folder as "
    "locate-<claim>-<candidate>-<case>.html, where the gate's HTML report links it.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write the per-layer error plot (PNG, linear and log) here.",
)
def locate_command(
    spec_path: Path,
    claim: str,
    case: str,
    candidate: str | None,
    rules: tuple[str, ...],
    noise_from: str | None,
    resume: str | None,
    points: str | None,
    every: bool,
    json_path: Path | None,
    html_path: Path | None,
    report: bool,
    plot_path: Path | None,
) -> int:
    """Run the claim's reference and candidate on CASE with every module's output captured,
    match the activations across the two module trees, and name the first layer past its bound.

    With --resume, only what runs after that module is judged; with --bisect, the candidate is
    resumed after each matching module by bisection and the one where the error arises is
    named (the exit code is that of the plain comparison).

    Exit codes: 0 no layer past its bound, 1 a divergence located, 2 usage, spec or input error.
    """
    from ..errors import InputError
    from ..files import atomic_write_text
    from ..locate import bisect, format_location, locate, write_html, write_plot

    if resume is not None and points is not None:
        raise InputError("--resume and --bisect: name one (a bisect resumes at each point itself)")
    if points is not None:
        found = bisect(
            spec_path, claim, case, points, candidate=candidate, rules=rules, noise_from=noise_from
        )
        location = found.plain
        click.echo(format_location(location, every=every))
        for run in found.runs.values():
            click.echo(f"  {run.message}")
        click.echo(found.message)
        data = found.to_dict()
    else:
        location = locate(
            spec_path,
            claim,
            case,
            candidate=candidate,
            rules=rules,
            noise_from=noise_from,
            resume=resume,
        )
        click.echo(format_location(location, every=every))
        data = location.to_dict()
    if json_path is not None:
        atomic_write_text(json_path, json.dumps(data, indent=1) + "\n")
    if html_path is not None:
        click.echo(f"report: {write_html(location, html_path)}")
    if report:
        from ..locate import locate_report_name
        from ..spec import load_spec

        folder = load_spec(spec_path).reports
        folder.mkdir(parents=True, exist_ok=True)
        name = locate_report_name(claim, location.candidate_runner, case)
        click.echo(f"report: {write_html(location, folder / name)}")
    if plot_path is not None:
        click.echo(f"plot: {write_plot(location, plot_path)}")
    if resume is not None:
        return 0 if location.first is None else 1
    return 0 if location else 1
