"""``paritygate report RESULT.json [--out DIR]``: re-render the reports of an earlier gate run."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["report_command"]


@click.command("report")
@click.argument("result_file", metavar="RESULT.json", type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder for the reports (default: the folder holding RESULT.json).",
)
def report_command(result_file: Path, out_dir: Path | None) -> int:
    """Re-render result.json, summary.md, junit.xml and report.html of an earlier gate run.

    Prints one line per claim and the path of report.html. The exit code is the run's own
    (0 every claim holds, 1 a claim is violated, 3 drift); 2 when RESULT.json is not a
    paritygate gate result.
    """
    from ..reports import load_result, write_all
    from ..reports._common import exit_code
    from ..reports.terminal import console, print_result

    result = load_result(result_file)
    paths = write_all(result, out_dir if out_dir is not None else result_file.parent)
    print_result(console(), result, report=str(paths["html"]))
    return exit_code(result)
