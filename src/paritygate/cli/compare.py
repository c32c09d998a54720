"""``paritygate compare A B``: compare two output files (A actual / candidate, B expected /
reference)."""

from __future__ import annotations

import json
from pathlib import Path

import click

__all__ = ["compare_command"]


def _holds_one_unnamed_output(path: Path) -> bool:
    """A .npy file, or a JSON document whose top level is not an object (a list, a number...):
    load_outputs names its single output by the file's stem."""
    suffix = path.suffix.lower()
    if suffix == ".npy":
        return True
    if suffix != ".json":
        return False
    with open(path, "rb") as handle:
        head = handle.read(4096).decode("utf-8-sig", errors="replace").lstrip()
    return not head.startswith("{")


def _check_names(path: Path, tree: dict) -> None:
    """Output names a file cannot hold (empty, containing '/'), reported with the file's name."""
    from ..errors import InputError
    from ..outputs import flatten_outputs

    try:
        flatten_outputs(tree)
    except InputError as exc:
        inside = f"[{exc.where}]" if exc.where and exc.where != "output tree" else ""
        raise InputError(exc.message, hint=exc.hint, where=f"{path}{inside}") from None


def _load_pair(actual_file: Path, expected_file: Path) -> tuple[dict, dict]:
    from ..files import load_outputs

    actual = load_outputs(actual_file)
    expected = load_outputs(expected_file)
    for path, tree in ((actual_file, actual), (expected_file, expected)):
        _check_names(path, tree)
    # Two files that each hold one unnamed output are the same output whatever they are called.
    if _holds_one_unnamed_output(actual_file) and _holds_one_unnamed_output(expected_file):
        (name,) = expected
        (value,) = actual.values()
        actual = {name: value}
    return actual, expected


@click.command("compare")
@click.argument("actual_file", metavar="A", type=click.Path(path_type=Path))
@click.argument("expected_file", metavar="B", type=click.Path(path_type=Path))
@click.option(
    "--atol",
    type=float,
    default=0.0,
    show_default=True,
    help="Absolute tolerance: an element passes when |a - b| <= atol + rtol*|b|.",
)
@click.option(
    "--rtol",
    type=float,
    default=0.0,
    show_default=True,
    help="Relative tolerance, relative to B (the reference).",
)
@click.option(
    "--min-cosine",
    type=float,
    default=None,
    help="Lowest cosine similarity allowed per output (a zero-norm side fails).",
)
@click.option(
    "--max-ulp",
    type=int,
    default=None,
    help="Largest ULP distance allowed, counted in the coarser float dtype of the two.",
)
@click.option(
    "--max-mean-abs",
    type=float,
    default=None,
    help="Largest mean absolute difference allowed per output.",
)
@click.option(
    "--equal-nan/--no-equal-nan",
    default=True,
    show_default=True,
    help="Whether NaN at the same position on both sides counts as equal.",
)
@click.option(
    "--worst-k",
    type=click.IntRange(min=0),
    default=10,
    show_default=True,
    help="How many worst elements to report per output.",
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Print the comparison as JSON (for machines) instead of the table.",
)
@click.pass_context
def compare_command(
    ctx: click.Context,
    actual_file: Path,
    expected_file: Path,
    atol: float,
    rtol: float,
    min_cosine: float | None,
    max_ulp: int | None,
    max_mean_abs: float | None,
    equal_nan: bool,
    worst_k: int,
    as_json: bool,
) -> None:
    """Compare output file A (actual: the candidate, e.g. the port) against B (expected: the
    reference). Files: .safetensors, .npz, .npy (never unpickled) or .json.

    Every output of B must be in A and the other way round: a missing or extra output fails.
    The defaults demand exact equality; loosen them with the bound options.

    \b
    Exit codes: 0 every output within bounds, 1 an output outside its bounds (or missing or
    extra), 2 bad input (unreadable, pickled or unknown file, mismatched shapes or dtypes).
    """
    from ..compare import compare

    actual, expected = _load_pair(actual_file, expected_file)
    comparison = compare(
        actual,
        expected,
        atol=atol,
        rtol=rtol,
        min_cosine=min_cosine,
        max_ulp=max_ulp,
        max_mean_abs=max_mean_abs,
        equal_nan=equal_nan,
        worst_k=worst_k,
        label=f"{actual_file} vs {expected_file}",
    )
    if as_json:
        data = comparison.to_dict()
        data["actual_file"] = str(actual_file)
        data["expected_file"] = str(expected_file)
        click.echo(json.dumps(data, indent=2, allow_nan=False))
    else:
        _print_report(comparison)
    # ctx.exit gives the code in click's standalone mode as well as through paritygate.cli.main.
    ctx.exit(0 if comparison.passed else 1)


def _print_report(comparison) -> None:
    from ..reports.terminal import console as make_console
    from ..reports.text import comparison_table, format_output, output_name

    console = make_console()
    console.print(comparison_table(comparison))
    for path in comparison.missing:
        console.print(
            f"missing: {output_name(path)} is in B (expected) but not in A (actual)", style="red"
        )
    for path in comparison.extra:
        console.print(
            f"extra: {output_name(path)} is in A (actual) but not in B (expected)", style="red"
        )
    for out in comparison.failing():
        console.print()
        console.print(format_output(out), markup=False, soft_wrap=True)
    total = len(comparison.outputs)
    failing = sum(1 for _ in comparison.failing())
    verdict = "PASS" if comparison.passed else "FAIL"
    summary = f"{verdict}: {total - failing} of {total} outputs within bounds"
    if comparison.missing:
        summary += f", {len(comparison.missing)} missing"
    if comparison.extra:
        summary += f", {len(comparison.extra)} extra"
    console.print(summary, style="green" if comparison.passed else "bold red")
