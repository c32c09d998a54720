"""``paritygate calibrate SPEC --claim ID``: measure a claim's noise and bug signals, propose a
bound."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from .gate import _JOBS, _RAY

__all__ = ["calibrate_command"]


def _pairs(values: tuple[str, ...], option: str, *, number: bool) -> dict:
    from ..errors import InputError

    parsed: dict = {}
    for text in values:
        name, sep, value = text.rpartition("=")
        if not sep or not name.strip() or not value.strip():
            raise InputError(f"{option} expects NAME=VALUE, got {text!r}")
        if number:
            try:
                parsed[name.strip()] = float(value)
            except ValueError:
                raise InputError(f"{option} {name.strip()!r}: {value!r} is not a number") from None
        else:
            parsed[name.strip()] = value.strip()
    return parsed


def _say(text: str) -> None:
    """Print ``text`` fitted to the terminal's width (COLUMNS, else the terminal, else 100)."""
    from ..reports.terminal import fitted, terminal_width

    for line in fitted(text, terminal_width()):
        click.echo(line)


def _run_failed(spec: Path, claim_id: str, exc: Any) -> Exception:
    """A run that failed during calibration, as one short line (exit 2) that names the file
    holding the runner's whole stderr and traceback, written into the spec's reports folder."""
    from ..errors import InputError
    from ..files import atomic_write_text
    from ..spec import load_spec

    detail = exc.describe()
    if "\n" not in detail:
        return InputError(f"a run failed during calibration: {exc.one_line()}")
    try:
        folder = load_spec(spec).reports
        folder.mkdir(parents=True, exist_ok=True)
        path = atomic_write_text(folder / f"calibrate-{claim_id}-error.txt", detail + "\n")
    except (OSError, InputError):
        return InputError(f"a run failed during calibration: {exc.one_line()}")
    return InputError(
        f"a run failed during calibration: {exc.one_line()}",
        hint=f"its stderr and traceback: {path}",
    )


@click.command("calibrate")
@click.argument("spec", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--claim", "claim_id", required=True, help="Id of the claim to calibrate.")
@click.option("--candidate", default=None, help="Candidate runner (when the claim covers several).")
@click.option(
    "--cases", type=int, default=None, help="Use the first N cases of the spec (default: all)."
)
@click.option(
    "--case",
    "case_names",
    multiple=True,
    metavar="NAME",
    help="Use this case of the spec (repeatable; default: all). Written into the basis.",
)
@click.option(
    "--skip-case",
    "skipped",
    multiple=True,
    metavar="NAME",
    help="Leave this case of the spec out (repeatable). The cases used go into the basis.",
)
@click.option(
    "--min-cases",
    type=int,
    default=16,
    show_default=True,
    help="Fewest cases accepted: the next case exceeds n observed ones with probability ~1/(n+1).",
)
@click.option("--repeats", type=int, default=1, show_default=True, help="Runs per case.")
@_JOBS
@_RAY
@click.option(
    "--reorder", is_flag=True, help="Shuffle the case order in every repeat after the first."
)
@click.option(
    "--margin",
    "margins",
    multiple=True,
    metavar="NAME=FACTOR",
    help="Widen the bound for a named source of spread, e.g. 'other machine=2'. Repeatable.",
)
@click.option(
    "--model-mutation",
    "model_mutations",
    multiple=True,
    metavar="NAME=MODULE:FUNCTION",
    help="A mutated candidate, called like the candidate runner it replaces: a callable for a "
    "callable runner, a factory (built with the runner's options) for a factory runner. "
    "Repeatable.",
)
@click.option(
    "--mutations",
    "mutation_names",
    default="all",
    show_default=True,
    metavar="LIST",
    help="Built-in output mutations, comma-separated: noise, spike, shift, swap, float16, "
    "bfloat16; 'all' or 'none'.",
)
@click.option(
    "--unit",
    type=click.Choice(["cases", "rows"]),
    default="cases",
    show_default=True,
    help="Dataset claims: what the bootstrap resamples (rows: the items of chunked cases).",
)
@click.option(
    "--write", is_flag=True, help="Store bound, status = calibrated and the basis in the spec."
)
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Write the raw distributions and the proposal as JSON.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Draw noise and bug histograms with the proposed bound (PNG, needs matplotlib).",
)
def calibrate_command(
    spec: Path,
    claim_id: str,
    candidate: str | None,
    cases: int | None,
    case_names: tuple[str, ...],
    skipped: tuple[str, ...],
    min_cases: int,
    repeats: int,
    jobs: str | None,
    ray_address: str | None,
    reorder: bool,
    margins: tuple[str, ...],
    model_mutations: tuple[str, ...],
    mutation_names: str,
    unit: str,
    write: bool,
    json_path: Path | None,
    plot_path: Path | None,
) -> int:
    """Measure the noise of a claim's comparison over many cases, inject bugs, propose a bound.

    Runs in the claim's mode (paired: reference and candidate back to back in this process;
    stored: the candidate against the recorded reference). Prints the distributions, the gap
    between the largest noise and the smallest bug signal, the risk that comes with n cases and
    the proposal. With --jobs or --ray the runs (a runner on a case, every repeat, every model
    mutation on a case) run on worker processes or a Ray cluster and give the same result.
    Exit codes: 0 a bound (or exact claim) is proposed, 1 refused (no gap: change
    the comparison, not the constant), 2 bad input.
    """
    from ..calibration import (
        calibrate_claim,
        calibration_plot,
        choose_cases,
        mutations_named,
        write_bound,
    )
    from ..errors import RunFailure
    from ..files import atomic_write_text
    from ..results import to_jsonable

    chosen = choose_cases(spec, cases, case_names, skipped)
    from ..errors import InputError
    from ..execution import plan
    from ..spec import load_spec as _load

    loaded = _load(spec)
    execution = plan(loaded, jobs=jobs, ray=ray_address)
    loaded_claim = loaded.claims.get(claim_id)
    if loaded_claim is not None and loaded_claim.scope == "dataset":
        if jobs is not None or ray_address is not None:
            raise InputError("a dataset claim is calibrated serially: leave out --jobs and --ray")
        return _dataset_claim(spec, claim_id, candidate, chosen, model_mutations, write, unit)
    try:
        result = calibrate_claim(
            spec,
            claim_id,
            candidate=candidate,
            cases=chosen,
            repeats=repeats,
            reorder=reorder,
            margin_for=_pairs(margins, "--margin", number=True),
            model_mutations=_pairs(model_mutations, "--model-mutation", number=False),
            mutations=mutations_named(mutation_names),
            min_cases=min_cases,
            execution=execution,
        )
    except RunFailure as exc:
        raise _run_failed(spec, claim_id, exc) from None
    _say(result.summary())
    from ..spec import load_spec

    current = load_spec(spec).claims[claim_id]
    sign = "<=" if current.direction == "max" else ">="
    _say(
        f"spec now: {current.metric} {sign} {current.bound:g} (status {current.status}): "
        f"{result.judge_bound(current.metric, current.bound)}"
    )
    if current.activity is not None:
        band = current.activity
        _say(
            f"spec activity band: {band.counter} in {band.text}: "
            f"{result.judge_activity(band.counter, band.low, band.high)}"
        )
    if json_path is not None:
        atomic_write_text(json_path, json.dumps(to_jsonable(result.to_dict()), indent=1) + "\n")
        _say(f"raw distributions: {json_path}")
    if plot_path is not None:
        _say(f"plot: {calibration_plot(result, plot_path)}")
    if result.refused:
        if write:
            _say("nothing written: the calibration refused")
        return 1
    if not write:
        _say("--write stores the proposal, status = calibrated and this basis in the spec")
        return 0
    if write:
        # A chosen subset of the spec's cases is part of what the bound rests on.
        fields = write_bound(
            spec, claim_id, result, cases=chosen if isinstance(chosen, list) else None
        )
        _say(
            f"wrote claims.{claim_id}: metric = {fields['metric']}, bound = "
            f"{fields['bound']:.12g}, "
            f"status = calibrated, with its basis, to {spec}"
        )
    return 0


def _dataset_claim(
    spec: Path,
    claim_id: str,
    candidate: str | None,
    chosen: Any,
    model_mutations: tuple[str, ...],
    write: bool,
    unit: str = "cases",
) -> int:
    """Agreement / accuracy / ECE: per-case contributions, a bootstrap over cases (or rows)."""
    from ..calibration import calibrate_dataset_claim
    from ..runners import RunFailure
    from ..spec import basis_table, update_claim

    if isinstance(chosen, int):
        from ..spec import load_spec

        names: list[str] | None = list(load_spec(spec).cases)[:chosen]
    else:
        names = chosen
    try:
        result = calibrate_dataset_claim(
            spec,
            claim_id,
            candidate=candidate,
            cases=names,
            model_mutations=_pairs(model_mutations, "--model-mutation", number=False),
            unit=unit,
        )
    except RunFailure as exc:
        raise _run_failed(spec, claim_id, exc) from None
    _say(result.summary())
    if result.refused:
        if write:
            _say("nothing written: the calibration refused")
        return 1
    if write:
        update_claim(
            spec,
            claim_id,
            bound=result.proposed_bound,
            status="calibrated",
            basis=basis_table(result.basis()),
        )
        _say(f"written: {result.metric} bound {result.proposed_bound:g}, status calibrated")
    else:
        _say("--write stores the proposal, status = calibrated and this basis in the spec")
    return 0
