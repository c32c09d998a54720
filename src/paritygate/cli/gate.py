"""``paritygate record``, ``verify`` and ``gate``: the parity gate's three commands.

Exit codes: 0 every claim holds · 1 a claim is violated (or a runner failed) · 2 usage, spec or
input error · 3 drift (a pinned artifact or the environment changed; re-record deliberately).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

__all__ = ["record_command", "verify_command", "gate_command"]

_SPEC = click.argument(
    "spec_path", metavar="SPEC", required=False, default=".", type=click.Path(path_type=Path)
)
_JOBS = click.option(
    "--jobs",
    "-j",
    metavar="N|auto",
    default=None,
    help="Run the units on N worker processes (auto: the cores / the runners' threads); "
    "default: the spec's [execution], else serially.",
)
_RAY = click.option(
    "--ray",
    "ray_address",
    metavar="ADDRESS",
    default=None,
    help="Run the units on a Ray cluster (host:port or ray://...; 'local' starts one here). "
    "Needs pip install paritygate[ray].",
)
_PROGRESS = click.option(
    "--progress/--no-progress",
    "show_progress",
    default=None,
    help="One progress bar over every unit, on stderr (default: only on a terminal).",
)


def _console(stderr: bool = False) -> Any:
    from ..reports.terminal import console

    return console(stderr)


@contextmanager
def _progress(label: str, show: bool | None = None) -> Iterator[Any]:
    """One progress bar on stderr over every unit of a run, whichever worker ran it (hidden
    when stderr is not a terminal, unless ``show``)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=_console(stderr=True),
        transient=True,
        disable=not (sys.stderr.isatty() if show is None else show),
    )
    task = progress.add_task(label, total=None)

    def update(stage: str, done: int, total: int) -> None:
        progress.update(task, description=f"{label} {stage}", completed=done, total=total)

    with progress:
        yield update


PARTIAL_RESULT = "partial-result.json"


class _Partial:
    """``partial-result.json`` in the reports folder, rewritten as units arrive (at most about
    once a second) while the gate runs: what was evaluated so far, ``"status": "incomplete"``,
    ``"passed": false``. An interrupted gate leaves it, saying why it stopped; a gate that ends
    removes it (result.json says the rest)."""

    EVERY = 1.0  # seconds between rewrites

    def __init__(self, folder: Path, spec: Path):
        from ..provenance import utc_now

        self.path = folder / PARTIAL_RESULT
        self.data: dict[str, Any] = {
            "status": "incomplete",
            "passed": False,
            "spec": str(spec),
            "started": utc_now(),
            "stopped": "running",
            "units_done": 0,
            "units_total": None,
            "units": [],
        }
        self.last = 0.0

    def progress(self, update: Any) -> Any:
        def both(stage: str, done: int, total: int) -> None:
            self.data["units_total"] = total
            update(stage, done, total)

        return both

    def arrived(self, outcome: Any) -> None:
        import time

        unit: dict[str, Any] = {"runner": outcome.runner, "case": outcome.case}
        if outcome.failure is not None:
            unit.update(ran="failed", failure=outcome.failure.one_line())
        else:
            unit.update(ran="ok", outputs=list(outcome.outputs or {}))
        self.data["units"].append(unit)
        self.data["units_done"] = len(self.data["units"])
        if len(self.data["units"]) == 1 or time.monotonic() - self.last >= self.EVERY:
            self.write()

    def write(self, stopped: str | None = None) -> None:
        import json
        import time

        from ..files import atomic_write_text

        if stopped is not None:
            self.data["stopped"] = stopped
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, json.dumps(self.data, indent=1) + "\n")
        except OSError:  # a report folder that cannot be written fails the gate at the end
            pass
        self.last = time.monotonic()

    def finish(self) -> None:
        self.path.unlink(missing_ok=True)


@click.command("record")
@_SPEC
@_JOBS
@_RAY
@_PROGRESS
@click.option("--dry-run", is_flag=True, help="Run the reference and show the diff; write nothing.")
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Replace a previous reference without asking (asked only on a terminal).",
)
def record_command(
    spec_path: Path,
    jobs: str | None,
    ray_address: str | None,
    show_progress: bool | None,
    dry_run: bool,
    yes: bool,
) -> int:
    """Run the reference on every case and record its outputs with provenance.

    Outputs are written as safetensors with a manifest holding the sha256 of every file; the
    write is atomic. Before a previous reference is replaced, the diff against it is shown.
    """
    from ..execution import plan
    from ..references import record
    from ..spec import load_spec

    spec = load_spec(spec_path)
    execution = plan(spec, jobs=jobs, ray=ray_address)
    console = _console()

    def confirm(diff: list[str]) -> bool:
        _show_diff(console, diff)
        if diff and not yes and sys.stdin.isatty():
            return click.confirm("Replace the previous reference?", default=False)
        return True

    with _progress("record", show_progress) as update:
        result = record(
            spec,
            dry_run=dry_run,
            progress=update,
            before_replace=confirm,
            execution=execution,
        )
    for warning in result.warnings:
        click.echo(f"warning: {warning}", err=True)
    if dry_run:
        _show_diff(console, result.diff)
        console.print(
            f"dry run: {len(result.manifest['cases'])} cases recorded in memory, nothing written"
        )
        return 0
    if not result.written:
        console.print("kept the previous reference")
        return 0
    verb = "re-recorded" if result.replaced else "recorded"
    console.print(
        f"{verb} {len(result.manifest['cases'])} cases of runner {result.manifest['runner']} "
        f"into {result.folder} (manifest digest {result.manifest['digest'][:12]})"
    )
    return 0


def _show_diff(console: Any, diff: list[str]) -> None:
    if not diff:
        return
    console.print("[bold]difference against the previous reference:[/]")
    for line in diff:
        console.print(f"  {line}", markup=False)


@click.command("verify")
@_SPEC
def verify_command(spec_path: Path) -> int:
    """Drift only: reference files, case inputs, the reference's pins and the environment.

    Exit 3 with the list of what shifted. Drift never says the candidate is wrong.
    """
    from ..drift import verify
    from ..gate import raise_if_never_recorded
    from ..spec import load_spec

    spec = load_spec(spec_path)
    result = verify(spec)
    raise_if_never_recorded(spec, result)
    console = _console()
    _show_drift(console, result.describe())
    for line in result.info:
        console.print(f"[dim]info: {line}[/]")
    if not result.drift:
        console.print(f"no drift: {len(spec.cases)} cases and the reference match their pins")
    return result.exit_code


def _show_drift(console: Any, lines: list[str]) -> None:
    if lines:
        console.print(
            "[bold red]DRIFT[/] — something pinned shifted (this does not say the candidate "
            "is wrong); re-record deliberately:"
        )
        for line in lines:
            console.print(f"  {line}", markup=False)


@click.command("gate")
@_SPEC
@_JOBS
@_RAY
@_PROGRESS
@click.option(
    "--claim", "claims", multiple=True, metavar="ID", help="Evaluate only this claim (repeatable)."
)
@click.option(
    "--case", "cases", multiple=True, metavar="NAME", help="Run only this case (repeatable)."
)
@click.option(
    "--hardware",
    metavar="CLASS[,CLASS]",
    default=None,
    help="This machine's hardware classes, instead of matching the spec's [hardware] conditions.",
)
@click.option(
    "--out",
    "out_dir",
    type=click.Path(path_type=Path, file_okay=False),
    default=None,
    help="Folder for the reports (default: the spec's `reports`, else parity-reports/<spec stem>).",
)
@click.option("--verbose", "-v", is_flag=True, help="A row per case under every claim.")
@click.option(
    "--exitfirst",
    "-x",
    is_flag=True,
    help="Stop running candidates at the first case that violates a claim.",
)
def gate_command(
    spec_path: Path,
    jobs: str | None,
    ray_address: str | None,
    show_progress: bool | None,
    claims: tuple[str, ...],
    cases: tuple[str, ...],
    hardware: str | None,
    out_dir: Path | None,
    verbose: bool,
    exitfirst: bool,
) -> int:
    """Verify, run every candidate on every case, and evaluate every claim.

    Exit 0 only when every claim holds for every case; 1 when a claim is violated, a runner
    failed or no claim was evaluated; 3 on drift; 4 when every claim holds for another hardware
    class than this machine's (it cannot run here).

    While it runs, partial-result.json in the reports folder lists the units evaluated so far
    (status incomplete, never passed); an interrupted gate (Ctrl-C, SIGTERM) leaves it behind
    and exits 2.
    """
    from ..children import Terminated
    from ..errors import UserError
    from ..execution import listening, plan
    from ..gate import run_gate
    from ..reports import write_all
    from ..spec import load_spec

    spec = load_spec(spec_path)
    execution = plan(spec, jobs=jobs, ray=ray_address)
    folder = out_dir if out_dir is not None else spec.reports
    partial = _Partial(folder, spec_path)
    partial.write()
    try:
        with _progress("gate", show_progress) as update, listening(partial.arrived):
            result = run_gate(
                spec,
                claims=claims or None,
                cases=cases or None,
                hardware=hardware,
                progress=partial.progress(update),
                stop_at_first_violation=exitfirst,
                execution=execution,
            )
    except KeyboardInterrupt as exc:
        name = str(exc) if isinstance(exc, Terminated) else "SIGINT"
        partial.write(stopped=f"aborted ({name})")
        raise
    except UserError:  # bad input: nothing was evaluated
        partial.finish()
        raise
    except BaseException as exc:
        partial.write(stopped=f"failed: {type(exc).__name__}")
        raise
    data = result.to_dict()
    paths = write_all(data, folder)
    partial.finish()
    from ..reports.terminal import print_result

    print_result(_console(), data, verbose=verbose, report=str(paths["html"]))
    return result.exit_code
