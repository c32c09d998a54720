"""The click group of the command line and its lazily loaded commands (see
:mod:`paritygate.cli`)."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import click

__all__ = ["cli", "cli_words", "COMMANDS"]

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
    "mutate": "mutate:mutate_command",
    "init": "onboard:init_command",
    "cases": "onboard:cases_group",
    "quick": "onboard:quick_command",
    "locate": "locate:locate_command",
}


def _available() -> dict[str, str]:
    found = {}
    for name, target in COMMANDS.items():
        module = target.split(":")[0]
        if importlib.util.find_spec(f"paritygate.cli.{module}") is not None:
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
        module = importlib.import_module(f"paritygate.cli.{module_name}")
        return getattr(module, attr)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="paritygate")
def cli() -> None:
    """Measure, pin and enforce the numbers an ML port or optimization publishes.

    \b
    Exit codes: 0 every claim holds, 1 a claim is violated, 2 usage/spec/input error,
    3 drift (a pinned artifact or the environment changed; re-record deliberately).
    """


def cli_words(message: str, argv: list[str] | None) -> str:
    """A library hint names Python arguments (``min_cases=``); on the command line the same
    setting is an option (``--min-cases``): name the option the user can type."""
    import re

    args = list(sys.argv[1:] if argv is None else argv)
    target = _available().get(args[0]) if args else None
    if target is None:
        return message
    module_name, attr = target.split(":")
    command = getattr(importlib.import_module(f"paritygate.cli.{module_name}"), attr)
    for param in getattr(command, "params", []):
        for opt in getattr(param, "opts", []):
            if opt.startswith("--"):
                python = opt[2:].replace("-", "_")
                message = re.sub(rf"(?<![\w-]){re.escape(python)}=", opt, message)
    return message
