"""The public API: ``paritygate.__all__`` and the ``__all__`` of the public submodules. The
examples are projects users copy, so they import nothing else (checked on their syntax trees)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import paritygate

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def private_uses(source: str, where: str = "<source>") -> list[str]:
    """Every use of paritygate in ``source`` outside the public API: imports of other modules or
    names, and attribute chains such as ``paritygate.gate.run_gate``."""
    public = set(paritygate.PUBLIC_MODULES)
    short = {m.rpartition(".")[2] for m in public}
    problems = []
    tree = ast.parse(source)
    aliases = {"paritygate"}  # local names bound to the package itself
    for node in ast.walk(tree):
        line = f"{where}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "paritygate":
                    aliases.add(alias.asname or "paritygate")
                elif alias.name.startswith("paritygate.") and alias.name not in public:
                    problems.append(f"{line}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            module = node.module
            if module == "paritygate":
                for alias in node.names:
                    if alias.name not in paritygate.__all__ and alias.name not in short:
                        problems.append(f"{line}: from paritygate import {alias.name}")
            elif module.startswith("paritygate."):
                if module not in public:
                    problems.append(f"{line}: from {module} import ...")
                    continue
                exported = importlib.import_module(module).__all__
                for alias in node.names:
                    if alias.name not in exported:
                        problems.append(f"{line}: from {module} import {alias.name}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            name = node.attr
            if name not in paritygate.__all__ and f"paritygate.{name}" not in public:
                problems.append(f"{where}:{node.lineno}: paritygate.{name}")
    return problems


def test_the_checker_catches_private_uses_and_passes_public_ones():
    assert private_uses("from paritygate import compare, run_gate\nimport paritygate.cli") == []
    assert private_uses("from paritygate.calibration import additive_noise") == []
    assert private_uses("import paritygate as pg\npg.load_spec('x')") == []
    bad = (
        "from paritygate.gate import run_gate\n"
        "from paritygate import _host\n"
        "import paritygate.runners\n"
        "from paritygate.calibration import _propose\n"
        "import paritygate as pg\n"
        "pg.references.load_reference\n"
    )
    assert [p.split(": ", 1)[1] for p in private_uses(bad)] == [
        "from paritygate.gate import ...",
        "from paritygate import _host",
        "import paritygate.runners",
        "from paritygate.calibration import _propose",
        "paritygate.references",
    ]


def test_every_public_name_exists_and_importing_paritygate_is_light():
    for name in paritygate.__all__:
        assert getattr(paritygate, name) is not None, name
    for module in paritygate.PUBLIC_MODULES:
        exported = importlib.import_module(module).__all__
        missing = [n for n in exported if not hasattr(importlib.import_module(module), n)]
        assert missing == [], module


@pytest.mark.parametrize(
    "path",
    sorted(EXAMPLES.rglob("*.py")),
    ids=lambda p: str(p.relative_to(EXAMPLES)),
)
def test_examples_use_only_the_public_api(path):
    assert private_uses(path.read_text(encoding="utf-8"), str(path.relative_to(EXAMPLES))) == []
