"""``paritygate bootstrap``: clean clone at a pinned commit, patch, required lines, build, gate."""

from __future__ import annotations

from pathlib import Path

import click

__all__ = ["bootstrap_command"]


@click.command("bootstrap")
@click.option("--upstream", help="URL or path of the upstream repository to clone.")
@click.option("--commit", help="The pinned commit SHA to check out.")
@click.option(
    "--patch", type=click.Path(path_type=Path, dir_okay=False), help="Patch file to apply."
)
@click.option(
    "--require",
    "require",
    multiple=True,
    metavar="FILE:LITERAL_LINE",
    help="A literal line the patched FILE must contain (repeatable).",
)
@click.option("--build", help="Build command, run by the shell inside the checkout.")
@click.option(
    "--build-timeout", type=float, default=None, help="Seconds before the build is stopped."
)
@click.option(
    "--gate",
    "spec",
    required=True,
    type=click.Path(path_type=Path, dir_okay=False, exists=True),
    help="The spec to gate after the build; its [bootstrap] table supplies what flags leave out.",
)
@click.option(
    "--workdir",
    type=click.Path(path_type=Path, file_okay=False),
    help="New or empty folder for the clone (default: a fresh temporary folder).",
)
def bootstrap_command(
    upstream: str | None,
    commit: str | None,
    patch: Path | None,
    require: tuple[str, ...],
    build: str | None,
    build_timeout: float | None,
    spec: Path,
    workdir: Path | None,
) -> int:
    """Set up a parity-test checkout the only sanctioned way, then run the gate.

    \b
    Steps and their exit codes (docs/bootstrap.md):
      10 clone (the folder must be new, empty, or a clone bootstrap made)
      11 checkout of the pinned commit
      12 patch (git apply --check, then apply)
      13 required lines missing from the patched tree
      14 build command failed
      then the gate's own: 0 holds, 1 violated, 2 spec/input error, 3 drift
    The build and the gate see the checkout as $PARITYGATE_BOOTSTRAP_DIR.
    """
    from ..bootstrap import BootstrapError, bootstrap, config_from_spec

    config = config_from_spec(
        spec,
        upstream=upstream,
        commit=commit,
        patch=patch,
        require=require,
        build=build,
        workdir=workdir,
        build_timeout=build_timeout,
    )

    def show(step) -> None:  # type: ignore[no-untyped-def]
        click.echo(f"bootstrap: {step.step:<15} ok  {step.seconds:7.2f} s  {step.detail}")

    try:
        result = bootstrap(config, on_step=show)
    except BootstrapError as exc:
        click.echo(f"bootstrap: {exc.step:<15} FAILED (exit {exc.exit_code})", err=True)
        raise
    click.echo(f"bootstrap: checkout {result.workdir} at {result.commit}")
    if result.gate_result is not None:
        from rich.console import Console

        from ..reports import verdict_table, write_all
        from ..spec import load_spec

        data = result.gate_result.to_dict()
        paths = write_all(data, load_spec(spec).reports)
        console = Console()
        console.print(verdict_table(data))
        console.print(f"reports: {paths['markdown'].parent}", highlight=False, soft_wrap=True)
    return result.exit_code
