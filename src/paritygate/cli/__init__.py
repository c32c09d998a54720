"""The ``paritygate`` command line. It only parses arguments and calls the library.

Each command lives in its own module of this package and is imported only when it runs (or when
``--help`` lists it), so ``paritygate --help`` starts fast and needs no framework. User errors
end as one line on stderr with exit 2 (3 for drift); internal errors keep their traceback.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

from ..errors import UserError

__all__ = ["main", "cli", "COMMANDS"]

# command name -> "module:attribute" inside paritygate.cli
COMMANDS: dict[str, str] = {
    "compare": "compare:compare_command",
    "record": "gate:record_command",
    "verify": "gate:verify_command",
    "gate": "gate:gate_command",
    "report": "report:report_command",
    "claims": "claims:claims_group",
    "calibrate": "calibrate:calibrate_command",
    "bootstrap": "bootstrap:bootstrap_command",
    "bench": "bench:bench_command",
    "init": "onboard:init_command",
    "cases": "onboard:cases_group",
    "quick": "onboard:quick_command",
}


def _available() -> dict[str, str]:
    found = {}
    for name, target in COMMANDS.items():
        module = target.split(":")[0]
        if importlib.util.find_spec(f"{__name__}.{module}") is not None:
            found[name] = target
    return found


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_available())

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = _available().get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        module = importlib.import_module(f"{__name__}.{module_name}")
        return getattr(module, attr)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="paritygate")
def cli() -> None:
    """Measure, pin and enforce the numbers an ML port or optimization publishes.

    \b
    Exit codes: 0 every claim holds, 1 a claim is violated, 2 usage/spec/input error,
    3 drift (a pinned artifact or the environment changed; re-record deliberately).
    """


def _cli_words(message: str, argv: list[str] | None) -> str:
    """A library hint names Python arguments (``min_cases=``); on the command line the same
    setting is an option (``--min-cases``): name the option the user can type."""
    import re

    args = list(sys.argv[1:] if argv is None else argv)
    target = _available().get(args[0]) if args else None
    if target is None:
        return message
    module_name, attr = target.split(":")
    command = getattr(importlib.import_module(f"{__name__}.{module_name}"), attr)
    for param in getattr(command, "params", []):
        for opt in getattr(param, "opts", []):
            if opt.startswith("--"):
                python = opt[2:].replace("-", "_")
                message = re.sub(rf"(?<![\w-]){re.escape(python)}=", opt, message)
    return message


def main(argv: list[str] | None = None) -> int:
    """Console entry point: user errors become one line and an exit code, never a traceback."""
    try:
        result = cli.main(args=argv, prog_name="paritygate", standalone_mode=False)
    except UserError as exc:
        click.echo(f"paritygate: {exc.label}: {_cli_words(exc.one_line(), argv)}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("paritygate: aborted", err=True)
        return 2
    except click.UsageError as exc:
        # One line like every other user error, with where to look instead of the whole usage.
        command = exc.ctx.command_path if exc.ctx is not None else "paritygate"
        message = " ".join(exc.format_message().split())
        click.echo(f"paritygate: error: {message} (see '{command} --help')", err=True)
        return 2
    except click.ClickException as exc:
        exc.show()
        return 2
    except KeyboardInterrupt:
        return 130
    if isinstance(result, int):
        return result
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
