"""``paritygate mutate SPEC``: the mutation score of a gate (how much of the port its cases
exercise)."""

from __future__ import annotations

import json
from pathlib import Path

import click

__all__ = ["mutate_command"]


@click.command("mutate")
@click.argument(
    "spec_path", metavar="SPEC", required=False, default=".", type=click.Path(path_type=Path)
)
@click.option(
    "--candidate", default=None, help="Candidate runner to mutate (when there are several)."
)
@click.option(
    "--operators",
    "operator_names",
    default="all",
    show_default=True,
    metavar="LIST",
    help="Source mutations, comma-separated: off-by-one, scale, compare, axis, dtype, "
    "drop-reset; 'all' or 'none'.",
)
@click.option(
    "--file",
    "files",
    multiple=True,
    metavar="PATH",
    help="Mutate this Python file (relative to the spec's folder) instead of the candidate "
    "runner's module. Repeatable.",
)
@click.option(
    "--model-mutation",
    "model_mutations",
    multiple=True,
    metavar="NAME=MODULE:FUNCTION",
    help="A user-written mutant, called like the candidate runner it replaces (as in "
    "`paritygate calibrate`). Repeatable.",
)
@click.option(
    "--limit",
    type=int,
    default=None,
    help="Run at most N source mutants, spread evenly over the file(s).",
)
@click.option("--jobs", type=int, default=1, show_default=True, help="Mutants gated in parallel.")
@click.option(
    "--timeout",
    type=float,
    default=None,
    help="Seconds per mutant's gate; past it the mutant counts as caught (timeout). "
    "Default: 5 x the unmutated gate's time, at least 20 s.",
)
@click.option(
    "--min-score",
    type=float,
    default=None,
    help="Exit 1 when caught / (total - equivalent) is below this fraction (default: report only).",
)
@click.option(
    "--case",
    "cases",
    multiple=True,
    metavar="NAME",
    help="Gate every mutant on this case only (repeatable): a quick set for a slow gate.",
)
@click.option(
    "--claim",
    "claims",
    multiple=True,
    metavar="ID",
    help="Evaluate only this claim for every mutant (repeatable).",
)
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    metavar="NAME",
    help="Mutate only inside this function or class (dotted: Runner.run), repeatable: a file "
    "that also holds the reference's code or test scaffolding.",
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write every mutant, its status and the survivors' diffs as JSON.",
)
def mutate_command(
    spec_path: Path,
    candidate: str | None,
    operator_names: str,
    files: tuple[str, ...],
    model_mutations: tuple[str, ...],
    limit: int | None,
    jobs: int,
    timeout: float | None,
    min_score: float | None,
    cases: tuple[str, ...],
    claims: tuple[str, ...],
    scopes: tuple[str, ...],
    json_path: Path | None,
) -> int:
    """Plant small bugs in the candidate's source and run the gate on each: which are caught
    (by which claim, on which case) and which survive (the cases to add).

    Every gate run happens in a scratch copy of the spec's folder; the user's files are only
    read. The unmutated gate must pass first. A mutant that crashes the runner or hangs counts
    as caught and is listed as such. A line with the comment `# paritygate: equivalent`
    declares its mutants equivalent: listed, not run, outside the score's denominator.
    Exit codes: 0 the score meets --min-score (or none was asked for), 1 below it, 2 bad input
    or an unmutated gate that does not pass.
    """
    from ..files import atomic_write_text
    from ..mutation import mutate, operators_named
    from ..results import to_jsonable
    from .calibrate import _pairs
    from .gate import _progress

    operators = operators_named(operator_names)
    pairs = _pairs(model_mutations, "--model-mutation", number=False)
    with _progress("mutants") as update:
        result = mutate(
            spec_path,
            candidate=candidate,
            operators=operators,
            files=files,
            model_mutations=pairs,
            limit=limit,
            jobs=jobs,
            timeout=timeout,
            min_score=min_score,
            cases=cases,
            claims=claims,
            scopes=scopes,
            progress=lambda done, total: update("gated", done, total),
        )
    click.echo(result.summary())
    if json_path is not None:
        atomic_write_text(json_path, json.dumps(to_jsonable(result.to_dict()), indent=1) + "\n")
        click.echo(f"mutants: {json_path}")
    return result.exit_code
