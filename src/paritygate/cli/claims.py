"""``paritygate claims check DOCS... --spec SPEC``: published numbers against the spec."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["claims_group"]


@click.group("claims")
def claims_group() -> None:
    """Keep the numbers published in docs and the claims of the spec one and the same."""


@claims_group.command("check")
@click.argument("docs", nargs=-1, type=click.Path(path_type=Path, dir_okay=False))
@click.option(
    "--spec",
    "spec",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="The spec (default: parity.toml, or pyproject.toml with [tool.paritygate], here).",
)
@click.option(
    "--unmarked",
    is_flag=True,
    help="Also list every figure (3.50x, 5x faster, ≤ 2 px, 0.9987) written without a marker in "
    "the docs or sections ('README.md#claims') the claims list in `published`.",
)
def check_command(docs: tuple[Path, ...], spec: Path | None, unmarked: bool) -> int:
    """Check the claim and measured markers of DOCS (and of every doc a claim lists in
    `published`) against SPEC; with --unmarked, also every figure of a published doc or section
    that no marker ties.

    \b
    Markers (an HTML comment right after the number; see docs/claims-check.md):
      ≤ 2 px <!-- claim: boxes.edge_px -->                  the claim's bound
      0.9987 <!-- measured: results/vad.json#/a/b -->        a figure in a result file
    Exit 0 when every tied number agrees (and, with --unmarked, no figure is unmarked), 1 when
    any does not (one line per problem naming file:line, the claim and both numbers), 2 when a
    doc or the spec cannot be read.
    """
    from ..claims_check import check_claims

    if spec is None:
        from ..spec import find_spec

        spec = find_spec(Path.cwd())
    result = check_claims(docs, spec, unmarked=unmarked)
    for problem in result.problems:
        click.echo(str(problem))
    counts = f"{len(result.markers)} marker(s) in {len(result.docs)} doc(s) against {spec}"
    if result.passed:
        click.echo(f"claims check: ok, {counts}")
    else:
        click.echo(f"claims check: FAIL, {len(result.problems)} problem(s); {counts}", err=True)
    return result.exit_code
