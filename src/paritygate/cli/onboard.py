"""``paritygate init`` and ``paritygate cases add``: a first spec and pinned cases by command.

Exit codes: 0 written · 2 usage, spec or input error (nothing written).
"""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["init_command", "cases_group", "quick_command"]


def _pass_styles(values: tuple[str, ...]) -> str | dict[str, str]:
    """--pass STYLE (both runners) or --pass ROLE:STYLE, repeatable."""
    from ..errors import InputError

    styles: dict[str, str] = {}
    for value in values:
        role, sep, style = value.rpartition(":")
        if sep and not role:
            raise InputError(f"--pass {value!r}: expected STYLE or ROLE:STYLE")
        for name in [role] if sep else ["reference", "candidate"]:
            styles[name] = style
    if not styles:
        return "case"
    return styles


def _calling_options(command):
    """--format, --pass and --factory, shared by init and quick: how each runner is called."""
    command = click.option(
        "--factory",
        "factories",
        multiple=True,
        type=click.Choice(["reference", "candidate"]),
        help="That runner's module:function is a factory: called once with no arguments, it "
        "returns the per-case function (repeatable).",
    )(command)
    command = click.option(
        "--pass",
        "pass_as",
        multiple=True,
        metavar="[ROLE:]case|inputs|path",
        help="What a module:function receives per case: a Case (.name .path .load(); the "
        "default), the case's inputs (a dict of arrays), or the file's path (the spec's pass). "
        "For both runners, or one: --pass candidate:path (repeatable).",
    )(command)
    return click.option(
        "--format",
        "output_format",
        type=click.Choice(["npz", "safetensors", "json"]),
        default="npz",
        show_default=True,
        help="What a command writes at {out}.",
    )(command)


@click.command("init")
@click.argument(
    "folder", required=False, default=".", type=click.Path(path_type=Path, file_okay=False)
)
@click.option(
    "--cases",
    "cases",
    multiple=True,
    required=True,
    metavar="GLOB",
    help="Case files, relative to FOLDER (repeatable), e.g. 'cases/*.npz'.",
)
@click.option(
    "--reference",
    required=True,
    metavar="MOD:FN|COMMAND",
    help="The reference: a module:function, or a command with {case} and {out}.",
)
@click.option(
    "--candidate",
    required=True,
    metavar="MOD:FN|COMMAND",
    help="The candidate (the port), in the same form.",
)
@click.option(
    "--outputs",
    default=None,
    metavar="NAME[,NAME]",
    help="Output names (default: found by running the reference on the first case).",
)
@click.option(
    "--atol",
    type=float,
    default=None,
    help="A max-abs claim with this bound instead of an exact one.",
)
@_calling_options
@click.option("--force", is_flag=True, help="Replace an existing parity.toml.")
def init_command(
    folder: Path,
    cases: tuple[str, ...],
    reference: str,
    candidate: str,
    outputs: str | None,
    atol: float | None,
    output_format: str,
    pass_as: tuple[str, ...],
    factories: tuple[str, ...],
    force: bool,
) -> int:
    """Write FOLDER/parity.toml: pinned cases, a reference, a candidate and one provisional claim.

    \b
    Then: paritygate record FOLDER; paritygate gate FOLDER.
    Exit codes: 0 written, 2 bad input (nothing written).
    """
    from ..onboarding import init_spec

    path = init_spec(
        folder,
        cases=list(cases),
        reference=reference,
        candidate=candidate,
        outputs=[o.strip() for o in outputs.split(",") if o.strip()] if outputs else None,
        atol=atol,
        output_format=output_format,
        force=force,
        pass_as=_pass_styles(pass_as),
        factories=factories,
    )
    text = path.read_text(encoding="utf-8")
    count = text.split("\n[cases]\n", 1)[1].count("\n")
    click.echo(f"wrote {path} ({count} cases, one provisional claim)")
    click.echo(f"next: paritygate record {folder} && paritygate gate {folder}")
    from ..spec import load_spec

    claim_id = next(iter(load_spec(path).claims))
    click.echo(f"to measure a bound: paritygate calibrate {path} --claim {claim_id} --write")
    return 0


@click.group("cases")
def cases_group() -> None:
    """Manage a spec's cases."""


@cases_group.command("add")
@click.argument("patterns", nargs=-1, metavar="[GLOB...]")
@click.option(
    "--spec",
    "spec_path",
    default="parity.toml",
    show_default=True,
    type=click.Path(path_type=Path),
    help="The spec to add the cases to.",
)
@click.option(
    "--sweep",
    "sweeps",
    multiple=True,
    metavar="CASE:axis=A,chunk=N[,...]",
    help="Boundary cases derived from the template CASE: lengths 0, 1 and k*N-1, k*N, k*N+1 on "
    "axis A (k up to max=, default 3), batch sizes 1, 2 and an odd one above the largest chunk "
    "with batch=B; with after=OTHER[,reset=true] call sequences: CASE after a call on OTHER (and "
    "after the runner's reset()) (repeatable; docs/spec.md, 'Boundary sweeps', 'Call sequences').",
)
@click.option("--dry-run", is_flag=True, help="List what would be added; write nothing.")
def cases_add_command(
    patterns: tuple[str, ...], spec_path: Path, sweeps: tuple[str, ...], dry_run: bool
) -> int:
    """Pin the files GLOB matches (relative to the spec's folder) as cases, one line each;
    with --sweep, derive and pin a template case's boundary cases.

    A file already pinned keeps its name; a new one is named by its file name.

    \b
    Exit codes: 0 added (or nothing new), 2 bad input (nothing written).
    """
    from ..boundaries import parse_sweep, sweep_cases
    from ..errors import InputError
    from ..onboarding import add_cases

    if not patterns and not sweeps:
        raise InputError(
            "cases add: give GLOB... or --sweep CASE:axis=A,chunk=N (or CASE:after=OTHER)"
        )
    declared = [parse_sweep(text) for text in sweeps]
    plan: list = add_cases(spec_path, list(patterns), dry_run=dry_run) if patterns else []
    for sweep in declared:
        plan += sweep_cases(spec_path, sweep, dry_run=dry_run)
    added = [c for c in plan if c.added]
    for case in added:
        click.echo(
            f"{'would add' if dry_run else 'added'} {case.name}: {case.path} {case.sha256[:12]}"
        )
    kept = len(plan) - len(added)
    click.echo(
        f"{len(added)} case(s) {'to add' if dry_run else 'added'}, {kept} already pinned"
        + ("" if dry_run or not added else f"; re-record: paritygate record {spec_path}")
    )
    return 0


@click.command("quick")
@click.option("--reference", required=True, metavar="MOD:FN|COMMAND", help="The reference runner.")
@click.option("--candidate", required=True, metavar="MOD:FN|COMMAND", help="The candidate runner.")
@click.option(
    "--inputs",
    "inputs",
    multiple=True,
    required=True,
    metavar="GLOB",
    help="Input files, relative to the working folder (repeatable).",
)
@click.option("--atol", type=float, default=None, help="Max-abs bound (default: exact).")
@click.option("--min-cosine", type=float, default=None, help="Cosine floor (default: exact).")
@_calling_options
@click.option(
    "--save-spec",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write the equivalent spec here, so the one-liner grows into a gate.",
)
@click.option("--verbose", "-v", is_flag=True, help="A row per input under every claim.")
def quick_command(
    reference: str,
    candidate: str,
    inputs: tuple[str, ...],
    atol: float | None,
    min_cosine: float | None,
    output_format: str,
    pass_as: tuple[str, ...],
    factories: tuple[str, ...],
    save_spec: Path | None,
    verbose: bool,
) -> int:
    """Compare two runners on some inputs without a spec: exact unless bounds are given.

    Both run back to back in this process (module:function) or as commands ('python run.py
    {case} {out}'); nothing is recorded.

    \b
    Exit codes: 0 every output matches, 1 a difference beyond the bounds (or a runner failed),
    2 bad input.
    """
    from ..onboarding import quick
    from ..reports.terminal import console, print_result

    bounds = [f"atol {atol:g}" if atol is not None else "", ""]
    if min_cosine is not None:
        bounds[1] = f"cosine >= {min_cosine:g}"
    stated = ", ".join(b for b in bounds if b)
    out = console()
    out.print(
        f"comparing with {stated}"
        if stated
        else "comparing exactly (no bound given: --atol, --min-cosine)",
        soft_wrap=False,
    )
    result, _ = quick(
        inputs=list(inputs),
        reference=reference,
        candidate=candidate,
        atol=atol,
        min_cosine=min_cosine,
        output_format=output_format,
        save_spec=save_spec,
        pass_as=_pass_styles(pass_as),
        factories=factories,
    )
    print_result(out, result.to_dict(), verbose=verbose)
    if save_spec is not None:
        out.print(f"spec: {save_spec} (paritygate gate {save_spec})", soft_wrap=True)
    return result.exit_code
