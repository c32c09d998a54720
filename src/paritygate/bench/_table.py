"""``[benchmarks.NAME]`` tables: what ``paritygate bench run`` runs.

A table lives in its own TOML file or in a spec file (format 5)::

    [benchmarks.encoder-b16]
    baseline = "encoder_bench:reference"        # a callable by import name ...
    candidate = ["./build/encoder", "--b", "16"] # ... or a command (one process per call)
    workload = "encoder, batch 16, L=93"        # the workload class (default: the table name)
    budget = 30                                 # seconds
    threshold = 0.03                            # optional; unset: A/A on this machine
    processes = 4                               # optional; 0 = in-process
    path = ["src"]                              # optional import folders, relative to the file
    history = "bench-history"                   # optional: append every result here

Import names resolve against the file's folder (and ``path``), like the spec's runners.
"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SpecError

__all__ = ["BenchTable", "load_tables", "run_table"]

_KEYS = {
    "baseline",
    "candidate",
    "workload",
    "budget",
    "blocks",
    "threshold",
    "processes",
    "path",
    "history",
    "provenance",
}


@dataclass
class BenchTable:
    name: str
    baseline: str | list[str]
    candidate: str | list[str]
    workload: str
    folder: Path
    budget: float | None = None
    blocks: int | None = None
    threshold: float | None = None
    processes: int | None = None
    path: list[str] = field(default_factory=list)
    history: Path | None = None
    provenance: dict[str, Any] = field(default_factory=dict)


def _side(value: Any, where: str) -> str | list[str]:
    if isinstance(value, str) and ":" in value:
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) and v for v in value):
        return value
    raise SpecError(
        f"expected 'module:function' or a command (a list of strings), got {value!r}", where=where
    )


def _number(table: dict, key: str, where: str, kind=float, positive=True):
    if key not in table:
        return None
    value = table[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SpecError(f"expected a number, got {value!r}", where=f"{where}.{key}")
    if kind is int and value != int(value):
        raise SpecError(f"expected a whole number, got {value!r}", where=f"{where}.{key}")
    if positive and not value > 0:
        hint = "a change of 0 cannot be told from noise" if key == "threshold" else None
        raise SpecError(f"must be > 0, got {value!r}", where=f"{where}.{key}", hint=hint)
    return kind(value)


def load_tables(path: str | Path) -> dict[str, BenchTable]:
    """Every ``[benchmarks.NAME]`` table of a TOML file, validated (one-line errors)."""
    file = Path(path)
    try:
        data = tomllib.loads(file.read_text())
    except FileNotFoundError:
        raise SpecError("no such file", where=str(file)) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SpecError(f"not TOML ({exc})", where=str(file)) from None
    tables = data.get("benchmarks")
    if not isinstance(tables, dict) or not tables:
        raise SpecError("no [benchmarks.NAME] table", where=str(file))
    if "format_version" in data and "runners" in data:
        # a spec file: [benchmarks] needs spec format 5
        version = data.get("format_version")
        if isinstance(version, int) and version < 5:
            raise SpecError(
                f"[benchmarks] needs format_version = 5, this spec says {version}",
                where=str(file),
            )
    out = {}
    for name, table in tables.items():
        where = f"{file}: benchmarks.{name}"
        if not isinstance(table, dict):
            raise SpecError("expected a table", where=where)
        unknown = sorted(set(table) - _KEYS)
        if unknown:
            raise SpecError(
                f"unknown key {unknown[0]!r}; expected one of: {', '.join(sorted(_KEYS))}",
                where=where,
            )
        for key in ("baseline", "candidate"):
            if key not in table:
                raise SpecError(f"missing {key!r}", where=where)
        paths = table.get("path", [])
        if isinstance(paths, str):
            paths = [paths]
        history = table.get("history")
        out[name] = BenchTable(
            name=name,
            baseline=_side(table["baseline"], f"{where}.baseline"),
            candidate=_side(table["candidate"], f"{where}.candidate"),
            workload=str(table.get("workload", name)),
            folder=file.resolve().parent,
            budget=_number(table, "budget", where),
            blocks=_number(table, "blocks", where, int),
            threshold=_number(table, "threshold", where),
            processes=_number(table, "processes", where, int, positive=False),
            path=[str(p) for p in paths],
            history=(file.resolve().parent / str(history)) if history else None,
            provenance=dict(table.get("provenance", {})),
        )
    return out


class _Command:
    """A side that is a command: one process per call (its start-up is part of the time)."""

    def __init__(self, argv: list[str], cwd: Path):
        self.argv = argv
        self.cwd = cwd
        self.__qualname__ = " ".join(argv)

    def __call__(self) -> None:
        done = subprocess.run(self.argv, cwd=self.cwd, capture_output=True)
        if done.returncode != 0:
            raise RuntimeError(
                f"{' '.join(self.argv)} exited {done.returncode}: "
                f"{done.stderr.decode(errors='replace').strip()[-200:]}"
            )


def run_table(
    table: BenchTable,
    *,
    budget: float | None = None,
    threshold: float | None = None,
    processes: int | None = None,
    recalibrate: bool = False,
    clock: str = "wall",
):
    from ..errors import InputError
    from . import run_bench

    for folder in reversed([table.folder, *(table.folder / p for p in table.path)]):
        if str(folder) not in sys.path:
            sys.path.insert(0, str(folder))
    sides = []
    for side in (table.baseline, table.candidate):
        sides.append(_Command(side, table.folder) if isinstance(side, list) else side)
    commands = any(isinstance(s, _Command) for s in sides)
    if commands and clock != "wall":
        raise InputError(
            f"benchmarks.{table.name}: clock={clock!r} cannot time a command (it runs in a child "
            "process, whose CPU time is not this process's)",
            hint="use the wall clock for commands",
        )
    chosen = processes if processes is not None else table.processes
    return run_bench(
        sides[0],
        sides[1],
        workload=table.workload,
        budget=budget or table.budget or (None if table.blocks else 10.0),
        blocks=table.blocks,
        threshold=threshold or table.threshold,
        processes=0 if commands else chosen,
        names=(
            table.baseline if isinstance(table.baseline, str) else "baseline (command)",
            table.candidate if isinstance(table.candidate, str) else "candidate (command)",
        ),
        provenance={"benchmark": table.name, **table.provenance},
        recalibrate=recalibrate,
        clock=clock,
    )
