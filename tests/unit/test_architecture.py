"""The package's shape, checked: no import circle inside src/ (imports inside functions count),
docs/architecture.md lists every module in a layer, and no module imports from a higher one."""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"
PACKAGE = SRC / "paritygate"


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_lines(tree: ast.AST) -> set[int]:
    """Lines inside ``if TYPE_CHECKING:`` blocks (imports there never run)."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If):
            test = node.test
            name = getattr(test, "id", None) or getattr(test, "attr", None)
            if name == "TYPE_CHECKING":
                for child in node.body:
                    lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def import_graph() -> dict[str, set[str]]:
    """module -> the paritygate modules it imports, at module level or inside functions."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        skip = _type_checking_lines(tree)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    stem = ".".join(base + ([node.module] if node.module else []))
                else:
                    stem = node.module or ""
                for alias in node.names:
                    submodule = f"{stem}.{alias.name}"
                    targets.append(submodule if submodule in modules else stem)
            for target in targets:
                while target and target not in modules:  # paritygate.x.y names x.y's module
                    target = target.rpartition(".")[0]
                if target and target != name and target.startswith("paritygate"):
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_checker_finds_a_circle_through_a_function_level_import():
    graph = {"paritygate.a": {"paritygate.b"}, "paritygate.b": {"paritygate.a"}, "x": set()}
    assert cycles(graph) == [["paritygate.a", "paritygate.b"]]
    assert cycles({"paritygate.a": {"paritygate.b"}, "paritygate.b": set()}) == []


def test_no_import_circle_inside_the_package():
    # The package __init__ re-exports the public API, so it imports nearly everything; modules
    # import their siblings directly, never the package root.
    graph = import_graph()
    importing_root = sorted(m for m, targets in graph.items() if "paritygate" in targets)
    assert importing_root == [], f"modules importing the package root: {importing_root}"
    assert cycles(graph) == []


DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_architecture_md_lists_every_module():
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    listed = {
        name
        for name in re.findall(r"`([A-Za-z0-9_/]+\.py)`", text)
        if not name.startswith(("tests/", "benchmarks/", "examples/"))
    }
    modules = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")}
    assert sorted(modules - listed) == [], "modules docs/architecture.md does not list"
    assert sorted(listed - modules) == [], "docs/architecture.md lists modules that do not exist"


def layers() -> tuple[list[str], dict[str, str]]:
    """The layers of docs/architecture.md's table, bottom to top (in the order the table lists
    them, each layer's rows together), and each module's layer."""
    order: list[str] = []
    layer_of: dict[str, str] = {}
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or cells[0] in ("layer", "---"):
            continue
        files = re.findall(r"`([A-Za-z0-9_/]+\.py)`", cells[1])
        if not files:
            continue
        if cells[0] not in order:
            order.append(cells[0])
        assert order[-1] == cells[0], f"the rows of layer {cells[0]!r} are not together"
        for name in files:
            parts = ["paritygate", *name[: -len(".py")].split("/")]
            layer_of[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = cells[0]
    return order, layer_of


def upward_imports(
    graph: dict[str, set[str]], order: list[str], layer_of: dict[str, str]
) -> list[str]:
    """Every import of a module from a higher layer, as ``importer (layer) -> imported (layer)``."""
    rank = {name: i for i, name in enumerate(order)}
    return [
        f"{module} ({layer_of[module]}) -> {target} ({layer_of[target]})"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if module in layer_of
        and target in layer_of
        and rank[layer_of[target]] > rank[layer_of[module]]
    ]


def test_the_layer_checker_finds_an_import_from_a_higher_layer():
    order = ["base", "oracles"]
    layer_of = {"paritygate.a": "base", "paritygate.b": "oracles"}
    assert (
        upward_imports({"paritygate.a": set(), "paritygate.b": {"paritygate.a"}}, order, layer_of)
        == []
    )
    assert upward_imports(
        {"paritygate.a": {"paritygate.b"}, "paritygate.b": set()}, order, layer_of
    ) == ["paritygate.a (base) -> paritygate.b (oracles)"]


def test_no_module_imports_from_a_higher_layer():
    """The layer rule of docs/architecture.md, function-level imports included."""
    order, layer_of = layers()
    assert order[0] == "base" and order[-1] == "entry points", order
    graph = import_graph()
    assert sorted(set(graph) - set(layer_of)) == [], "modules without a layer"
    assert upward_imports(graph, order, layer_of) == []


def test_the_product_speaks_for_itself():
    """Docstrings and comments cite no seed document by number: they say what the code does."""
    cited = [
        f"{p.relative_to(SRC)}:{n}"
        for p in sorted(PACKAGE.rglob("*.py"))
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\bseeds? 0\d\d\b", line)
    ]
    assert cited == []


ROOT = SRC.parent


def test_ruff_lint_and_format_are_clean():
    """ruff (configured in pyproject.toml) finds nothing, and the tree is formatted."""
    import subprocess
    import sys

    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 0, lint.stdout[-4000:] + lint.stderr[-2000:]
    fmt = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", "--no-cache", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert fmt.returncode == 0, fmt.stdout[-4000:] + fmt.stderr[-2000:]


def test_unit_tests_import_no_framework():
    """tests/unit stays framework-free: framework cases live in tests/backends."""
    frameworks = {"torch", "mlx", "jax", "jaxlib", "onnxruntime", "tensorflow"}
    found = []
    for path in sorted((ROOT / "tests" / "unit").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module]
            found += [f"{path.name}:{node.lineno}" for n in names if n.split(".")[0] in frameworks]
    assert found == []
