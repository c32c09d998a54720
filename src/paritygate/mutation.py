"""Mutation score: how much of a port its gate's cases exercise.

A gate is only as strong as its cases: a bug on a path that no case reaches passes every claim.
:func:`mutate` plants small bugs (mutants) in the candidate runner's Python source, one at a
time, runs the unmutated gate's command (``python -m paritygate gate``) on each mutant in a
scratch copy of the spec's folder, and reports which mutants the gate caught (by which claim, on
which case) and which survived. A survivor is a case to add (or a claim to tighten); its unified
diff shows where. The score is caught / (total - declared equivalent); a mutant that crashes the
runner or hangs past the timeout counts as caught ("crash", "timeout": the gate would not pass)
and is listed apart, as does one whose run shifts a pin ("drift": a runner that wrote to its case
input). A file that a runner pins (``pins.files``) is refused before any gate runs: every mutant
of it would be drift, a verdict on the pin and none on the cases.

The user's tree is only read: every gate run happens in a scratch copy (one per parallel job,
reused, the mutated file restored after each mutant), and its reports go to the scratch folder.

**How the source is rewritten.** With Python's own :mod:`ast`: it locates the nodes an operator
applies to, and the mutation replaces exactly that node's source span in the original text
(``ast`` positions), so everything else, comments and layout included, stays byte-identical and
each mutant's diff is one line. The well-kept mutation testers were considered as libraries and
do not fit: mutmut 3 rewrites whole modules into "trampolines" that switch mutants at run time
inside its own pytest runner (its mutation code is not a library API, and it pulls in pytest,
textual and coverage); cosmic-ray's operators are generic (number, comparison, boolean
replacement) and come with a session database, aiohttp, SQLAlchemy and GitPython. Neither has
the operators a numerical port needs (an axis changed, a dtype narrowed, a constant scaled by
1 +- eps, a dropped state reset), and ``ast.unparse`` of a whole module would reformat it (a
diff of every line), so the spans are spliced instead. No dependency is added.

Operators (:data:`OPERATORS`):

- ``off-by-one``: an integer literal in arithmetic, an index or a slice bound becomes n + 1; a
  slice bound that is an expression gets ``+ 1``;
- ``scale``: a float literal scaled by 1 + eps and by 1 - eps (eps = :data:`EPSILON`);
- ``compare``: a comparison negated (``<`` -> ``>=``, ``==`` -> ``!=``, ``is`` -> ``is not``);
- ``axis``: an ``axis=`` / ``dim=`` argument (and the axis of ``apply_along_axis``) changed:
  0 <-> 1, n -> n - 1 otherwise;
- ``dtype``: a dtype narrowed: ``float64`` -> ``float32``, ``float32`` -> ``float16`` (as an
  attribute such as ``np.float32`` or as the string ``"float32"``);
- ``drop-reset``: a statement that resets state dropped: an assignment to an attribute of the
  value the attribute was first assigned (``self.cache = None`` after ``__init__`` set it).

A line holding the comment ``# paritygate: equivalent`` declares its mutants equivalent (a
change that cannot alter any output): they are listed, not run, and leave the denominator.
User-written mutations are the ``NAME=MODULE:FUNCTION`` model mutations of ``paritygate
calibrate``: the candidate runner's callable (or factory) replaced in the scratch spec.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError

__all__ = [
    "EPSILON",
    "OPERATORS",
    "PRAGMA",
    "MutantResult",
    "MutationResult",
    "SourceMutation",
    "find_mutations",
    "mutate",
    "operators_named",
]

OPERATORS: tuple[str, ...] = ("off-by-one", "scale", "compare", "axis", "dtype", "drop-reset")
#: The relative size of the ``scale`` operator's change: a constant c becomes c * (1 +- EPSILON).
EPSILON = 1e-3
#: The comment that declares a line's mutants equivalent.
PRAGMA = "paritygate: equivalent"
#: Statuses of a mutant the gate stopped; "survived" and "equivalent" are the others.
CAUGHT = ("caught", "crash", "timeout", "drift")

_NARROW = {"float64": "float32", "float32": "float16"}
_NEGATED: dict[type, str] = {
    ast.Lt: ">=",
    ast.LtE: ">",
    ast.Gt: "<=",
    ast.GtE: "<",
    ast.Eq: "!=",
    ast.NotEq: "==",
    ast.Is: "is not",
    ast.IsNot: "is",
    ast.In: "not in",
    ast.NotIn: "in",
}
_OPS: dict[type, str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.Is: "is",
    ast.IsNot: "is not",
    ast.In: "in",
    ast.NotIn: "not in",
}


def operators_named(text: str) -> tuple[str, ...]:
    """Operators by name, comma-separated; ``all`` or ``none`` (only user-written mutations)."""
    names = [n.strip() for n in text.split(",") if n.strip()]
    if names == ["all"]:
        return OPERATORS
    if names == ["none"]:
        return ()
    unknown = [n for n in names if n not in OPERATORS]
    if unknown or not names:
        raise InputError(
            f"--operators: unknown {', '.join(repr(n) for n in unknown) or 'empty list'}; "
            f"use {', '.join(OPERATORS)}, 'all' or 'none'"
        )
    return tuple(n for n in OPERATORS if n in names)


# --------------------------------------------------------------------------------------------
# Finding mutations in a source file


@dataclass(frozen=True)
class SourceMutation:
    """One mutant: the source span ``[start, end)`` of ``file`` replaced by ``replacement``."""

    id: str  # file:line:col:operator[variant], stable while the file does not change
    operator: str
    file: str  # relative to the spec's folder
    line: int
    col: int
    start: int  # character offsets into the file's text
    end: int
    original: str
    replacement: str
    equivalent: bool = False
    # the enclosing classes and functions, dotted ("MlxRunner.run"); "" at module level
    scope: str = ""

    @property
    def description(self) -> str:
        return f"{_short(self.original)} -> {_short(self.replacement)}"

    def apply(self, source: str) -> str:
        return source[: self.start] + self.replacement + source[self.end :]

    def diff(self, source: str) -> str:
        """The mutant's unified diff against ``source`` (the file's original text)."""
        return _unified(source, self.apply(source), self.file)


def _short(text: str, width: int = 40) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def _unified(before: str, after: str, name: str) -> str:
    lines = difflib.unified_diff(
        before.splitlines(keepends=True),
        after.splitlines(keepends=True),
        f"a/{name}",
        f"b/{name}",
        n=1,
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


class _Finder:
    def __init__(self, source: str, file: str, operators: Sequence[str]):
        self.source = source
        self.file = file
        self.operators = set(operators)
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        self.found: list[SourceMutation] = []
        self.skip: set[int] = set()  # ids of nodes inside annotations and docstrings
        self.parents: dict[int, ast.AST] = {}

    def offset(self, line: int, col: int) -> int:
        # ast columns count UTF-8 bytes
        text = self.lines[line - 1].encode("utf-8")[:col].decode("utf-8", errors="replace")
        return self.starts[line - 1] + len(text)

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def text(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.source[start:end]

    def add(
        self,
        operator: str,
        node: ast.AST,
        replacement: str,
        variant: str = "",
        span: tuple[int, int] | None = None,
    ) -> None:
        if operator not in self.operators:
            return
        start, end = span if span is not None else self.span(node)
        original = self.source[start:end]
        if original == replacement:
            return
        line, col = node.lineno, node.col_offset  # type: ignore[attr-defined]
        last = node.end_lineno or line  # type: ignore[attr-defined]
        equivalent = any(PRAGMA in self.lines[i - 1] for i in range(line, last + 1))
        names = []
        parent = self.parents.get(id(node))
        while parent is not None:
            if isinstance(parent, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                names.append(parent.name)
            parent = self.parents.get(id(parent))
        self.found.append(
            SourceMutation(
                id=f"{self.file}:{line}:{col + 1}:{operator}{variant}",
                operator=operator,
                file=self.file,
                line=line,
                col=col + 1,
                start=start,
                end=end,
                original=original,
                replacement=replacement,
                equivalent=equivalent,
                scope=".".join(reversed(names)),
            )
        )

    def run(self, tree: ast.Module) -> list[SourceMutation]:
        self._mark_skipped(tree)
        parents = self.parents
        for node in ast.walk(tree):
            for child in ast.iter_child_nodes(node):
                parents[id(child)] = node
        self._resets(tree)
        for node in ast.walk(tree):
            if id(node) in self.skip:
                continue
            if isinstance(node, ast.Constant):
                self._constant(node, parents.get(id(node)))
            elif isinstance(node, ast.UnaryOp) and _int_literal(node) is not None:
                self._integer(node, parents.get(id(node)))
            elif isinstance(node, ast.Slice):
                self._slice(node)
            elif isinstance(node, ast.Compare):
                self._compare(node)
            elif isinstance(node, ast.Call):
                self._axis(node)
            elif isinstance(node, ast.Attribute) and node.attr in _NARROW:
                end = self.span(node)[1]
                self.add("dtype", node, _NARROW[node.attr], span=(end - len(node.attr), end))
        unique: dict[str, SourceMutation] = {}
        for mutation in sorted(self.found, key=lambda m: (m.start, m.end, m.id)):
            unique.setdefault(mutation.id, mutation)
        return list(unique.values())

    def _mark_skipped(self, tree: ast.Module) -> None:
        def skip_all(node: ast.AST | None) -> None:
            if node is not None:
                self.skip.update(id(n) for n in ast.walk(node))

        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                skip_all(node.returns)
                for arg in [*node.args.args, *node.args.posonlyargs, *node.args.kwonlyargs]:
                    skip_all(arg.annotation)
                for arg in (node.args.vararg, node.args.kwarg):
                    if arg is not None:
                        skip_all(arg.annotation)
            elif isinstance(node, ast.AnnAssign):
                skip_all(node.annotation)
            elif isinstance(node, ast.JoinedStr):
                skip_all(node)  # f-strings: messages, and positions inside them are unreliable
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                body = node.body
                if (
                    body
                    and isinstance(body[0], ast.Expr)
                    and isinstance(body[0].value, ast.Constant)
                ):
                    skip_all(body[0])

    def _constant(self, node: ast.Constant, parent: ast.AST | None) -> None:
        value = node.value
        if isinstance(value, bool):
            return
        if isinstance(value, int):
            if not isinstance(parent, ast.UnaryOp):
                self._integer(node, parent)
        elif isinstance(value, float) and value != 0.0:
            self.add("scale", node, _float_text(value * (1 + EPSILON)), "+")
            self.add("scale", node, _float_text(value * (1 - EPSILON)), "-")
        elif isinstance(value, str) and value in _NARROW:
            quote = self.text(node)[0]
            self.add("dtype", node, f"{quote}{_NARROW[value]}{quote}")

    def _integer(self, node: ast.AST, parent: ast.AST | None) -> None:
        value = _int_literal(node)
        if value is None:
            return
        in_arithmetic = isinstance(parent, ast.BinOp)
        in_index = isinstance(parent, ast.Subscript) and parent.slice is node
        if isinstance(parent, ast.Tuple):
            above = self.parents.get(id(parent))
            in_index = isinstance(above, ast.Subscript) and above.slice is parent
        if in_arithmetic or in_index:
            self.add("off-by-one", node, str(value + 1))

    def _slice(self, node: ast.Slice) -> None:
        for bound in (node.lower, node.upper):
            if bound is None:
                continue
            value = _int_literal(bound)
            if value is not None:
                self.add("off-by-one", bound, str(value + 1))
            else:
                text = self.text(bound)
                simple = isinstance(bound, (ast.Name, ast.Attribute, ast.Call, ast.Subscript))
                self.add("off-by-one", bound, f"{text} + 1" if simple else f"({text}) + 1")

    def _compare(self, node: ast.Compare) -> None:
        operands = [node.left, *node.comparators]
        texts = []
        for operand in operands:
            text = self.text(operand)
            if isinstance(operand, (ast.Compare, ast.BoolOp, ast.IfExp, ast.Lambda, ast.NamedExpr)):
                text = f"({text})"
            texts.append(text)
        for i in range(len(node.ops)):
            pieces = [texts[0]]
            for j, other in enumerate(node.ops):
                word = _NEGATED[type(other)] if j == i else _OPS[type(other)]
                pieces += [word, texts[j + 1]]
            self.add("compare", node, " ".join(pieces), str(i) if len(node.ops) > 1 else "")

    def _axis(self, node: ast.Call) -> None:
        for keyword in node.keywords:
            if keyword.arg in ("axis", "dim"):
                value = _int_literal(keyword.value)
                if value is not None:
                    self.add("axis", keyword.value, str(_other_axis(value)))
        name = node.func.attr if isinstance(node.func, ast.Attribute) else None
        if name is None and isinstance(node.func, ast.Name):
            name = node.func.id
        if name == "apply_along_axis" and len(node.args) >= 2:
            value = _int_literal(node.args[1])
            if value is not None:
                self.add("axis", node.args[1], str(_other_axis(value)))

    def _resets(self, tree: ast.Module) -> None:
        first: dict[tuple[int, str], str] = {}  # (enclosing class, target) -> first value
        statements = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.Assign) or (isinstance(n, ast.AnnAssign) and n.value is not None)
        ]
        for node in sorted(statements, key=lambda n: (n.lineno, n.col_offset)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) != 1 or not isinstance(targets[0], ast.Attribute):
                continue
            key = (id(self._enclosing_class(node)), ast.unparse(targets[0]))
            value = ast.unparse(node.value)  # type: ignore[arg-type]
            if key not in first:
                first[key] = value
            elif first[key] == value and isinstance(node, ast.Assign):
                self.add("drop-reset", node, "pass")

    def _enclosing_class(self, node: ast.AST) -> ast.AST | None:
        parent = self.parents.get(id(node))
        while parent is not None and not isinstance(parent, ast.ClassDef):
            parent = self.parents.get(id(parent))
        return parent


def _int_literal(node: ast.AST | None) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and type(node.operand.value) is int
    ):
        return -node.operand.value
    return None


def _float_text(value: float) -> str:
    text = f"{value:.12g}"
    return text if any(c in text for c in ".en") else text + ".0"


def _other_axis(value: int) -> int:
    if value == 0:
        return 1
    if value == 1:
        return 0
    return value - 1


def find_mutations(
    source: str, file: str, operators: Iterable[str] = OPERATORS
) -> list[SourceMutation]:
    """Every mutant the ``operators`` make of ``source`` (the text of ``file``), in source order."""
    try:
        tree = ast.parse(source, filename=file)
    except SyntaxError as exc:
        raise InputError(f"{file}: not valid Python ({exc.msg}, line {exc.lineno})") from None
    return [
        m for m in _Finder(source, file, tuple(operators)).run(tree) if _parses(m.apply(source))
    ]


def _parses(source: str) -> bool:
    try:
        ast.parse(source)
    except SyntaxError:
        return False
    return True


# --------------------------------------------------------------------------------------------
# Results


@dataclass
class MutantResult:
    """One mutant and what the gate made of it. ``status``: caught (a claim failed), crash (the
    runner or the gate failed), timeout, drift (its run shifted a pin: a case input written),
    survived, or equivalent (declared; not run)."""

    number: int
    id: str
    operator: str
    file: str
    line: int
    description: str
    status: str
    claim: str | None = None  # the first claim that failed
    case: str | None = None  # on this case (None for dataset-level claims)
    candidate: str | None = None
    caught_by: list[str] = field(default_factory=list)  # every failing "claim @ case"
    detail: str = ""  # crash / timeout message, the failing claim's observed value
    seconds: float = 0.0
    diff: str = ""

    @property
    def caught(self) -> bool:
        return self.status in CAUGHT


@dataclass
class MutationResult:
    """A mutation run: every mutant with its status; truthy when the score meets ``min_score``
    (always, when no minimum was asked for)."""

    spec: str
    candidate: str
    files: list[str]
    operators: list[str]
    mutants: list[MutantResult] = field(default_factory=list)
    cases: int = 0
    # --case / --claim: the gate of every mutant restricted to these (empty: all of them)
    only_cases: list[str] = field(default_factory=list)
    only_claims: list[str] = field(default_factory=list)
    scopes: list[str] = field(default_factory=list)  # --scope: the functions / classes mutated
    jobs: int = 1
    timeout: float = 0.0  # seconds per mutant's gate
    baseline_seconds: float = 0.0  # the unmutated gate, as a subprocess
    seconds: float = 0.0  # the whole run
    min_score: float | None = None
    found: int = 0  # mutants the operators made, before --limit

    @property
    def total(self) -> int:
        return len(self.mutants)

    @property
    def equivalent(self) -> int:
        return sum(m.status == "equivalent" for m in self.mutants)

    @property
    def caught(self) -> int:
        return sum(m.caught for m in self.mutants)

    @property
    def judged(self) -> int:
        """The score's denominator: every mutant but the declared equivalents."""
        return self.total - self.equivalent

    @property
    def survived(self) -> list[MutantResult]:
        return [m for m in self.mutants if m.status == "survived"]

    @property
    def gate_runs(self) -> int:
        """Gate runs made: the unmutated one and one per mutant that was not declared
        equivalent."""
        return 1 + self.judged

    @property
    def score(self) -> float | None:
        """caught / (total - equivalent); None when no mutant was judged."""
        return self.caught / self.judged if self.judged else None

    @property
    def passed(self) -> bool:
        if self.min_score is None:
            return True
        return self.score is not None and self.score >= self.min_score

    def __bool__(self) -> bool:
        return self.passed

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1

    def to_dict(self) -> dict[str, Any]:
        from .results import to_jsonable

        data = to_jsonable(self)
        data.update(
            format="paritygate-mutation-result",
            format_version=1,
            total=self.total,
            equivalent=self.equivalent,
            caught=self.caught,
            judged=self.judged,
            survived=len(self.survived),
            score=self.score,
            gate_runs=self.gate_runs,
            passed=self.passed,
            exit_code=self.exit_code,
        )
        return data

    def summary(self, width: int = 80) -> str:
        """A compact table (fits ``width`` columns), then every survivor's diff."""
        lines = [_fit(f"{self.spec}: candidate {self.candidate}, {', '.join(self.files)}", width)]
        lines.append(_fit(" #  status      operator    line  caught by / change", width))
        for m in self.mutants:
            if m.status in ("caught",):
                what = f"{m.claim} @ {m.case}" if m.case else f"{m.claim}"
            elif m.status in ("crash", "timeout", "drift"):
                what = m.detail
            else:
                what = m.description
            line = str(m.line) if m.line else "-"
            row = f"{m.number:>2}  {m.status:<10}  {m.operator:<10}  {line:>4}  {what}"
            lines.append(_fit(row, width))
        crashes = sum(m.status == "crash" for m in self.mutants)
        timeouts = sum(m.status == "timeout" for m in self.mutants)
        drifts = sum(m.status == "drift" for m in self.mutants)
        score = "n/a" if self.score is None else f"{self.score:.0%}"
        judged = self.judged
        apart = f"{crashes} crash, {timeouts} timeout" + (f", {drifts} drift" if drifts else "")
        lines.append(
            _fit(
                f"score {score}: {self.caught}/{judged} caught ({apart}), "
                f"{len(self.survived)} survived, {self.equivalent} equivalent",
                width,
            )
        )
        lines.append(
            _fit(
                f"cost: {self.gate_runs} gate runs x {self.cases} cases in {self.seconds:.1f} s "
                f"with {self.jobs} job{'s' if self.jobs != 1 else ''}",
                width,
            )
        )
        lines.append(
            _fit(
                f"      (unmutated gate {self.baseline_seconds:.2f} s; timeout per mutant "
                f"{self.timeout:.0f} s)",
                width,
            )
        )
        if self.min_score is not None:
            verdict = "meets" if self.passed else "is below"
            lines.append(f"the score {verdict} --min-score {self.min_score:g}")
        if self.survived:
            lines.append("survivors (a case or a claim that would catch each is missing):")
            for m in self.survived:
                lines.append(_fit(f"#{m.number} {m.operator} {m.id}", width))
                lines += ["  " + line for line in m.diff.splitlines()]
        return "\n".join(lines)


def _fit(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


# --------------------------------------------------------------------------------------------
# Running


@dataclass(frozen=True)
class _Job:
    number: int
    id: str
    operator: str
    file: str  # relative to the spec folder
    line: int
    description: str
    mutated: str  # the file's mutated text
    diff: str
    equivalent: bool = False


def _candidate(spec: Any, name: str | None) -> Any:
    from .spec import did_you_mean

    if name is not None:
        runner = spec.runners.get(name)
        if runner is None:
            raise InputError(
                f"--candidate: no runner {name!r} in {spec.path.name}"
                + did_you_mean(name, spec.runners)
            )
        if runner.role == "reference":
            raise InputError(f"--candidate: {name!r} is the reference; name a candidate")
        return runner
    candidates = [r for r in spec.runners.values() if r.role == "candidate"]
    if len(candidates) != 1:
        names = ", ".join(r.name for r in candidates) or "none"
        raise InputError(
            f"{spec.path.name} has {len(candidates)} candidates ({names}): "
            "name one with --candidate"
        )
    return candidates[0]


def _runner_file(spec: Any, runner: Any) -> Path:
    root = spec.root
    target = runner.callable or runner.factory
    if target:
        module = target.split(":")[0]
        base = root.joinpath(*module.split("."))
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
        raise InputError(
            f"runner {runner.name}: module {module!r} is not a file in {root}; name the file "
            "to mutate with --file"
        )
    for word in runner.command or ():
        if word.endswith(".py"):
            path = (runner.cwd or root) / word
            if path.is_file():
                return path
    raise InputError(
        f"runner {runner.name}: its command names no .py file in {root}; name the file to "
        "mutate with --file"
    )


def _inside(root: Path, path: Path, option: str) -> str:
    resolved = path.resolve()
    try:
        relative = resolved.relative_to(root)
    except ValueError:
        raise InputError(f"{option} {path}: not inside the spec's folder {root}") from None
    if resolved.suffix != ".py" or not resolved.is_file():
        raise InputError(f"{option} {path}: not a Python file")
    return relative.as_posix()


def _refuse_pinned(spec: Any, root: Path, relative: Sequence[str]) -> None:
    """A file a runner that runs pins (``pins.files``) cannot be mutated: the gate refuses any
    change to it as drift before a claim runs, so every mutant would score the pin, not the
    cases."""
    for runner in spec.runners.values():
        if runner.role == "reference":
            continue  # its pins are checked against the recording, not the files on disk
        pinned = {(spec.root / p).resolve(): p for p in runner.file_pins}
        for name in relative:
            if (root / name).resolve() in pinned:
                raise InputError(
                    f"{name}: pinned by runner {runner.name} (pins.files), so the gate refuses "
                    "every mutant of it as drift before any claim runs; mutate an unpinned file, "
                    "or measure on a copy of the spec without that pin"
                )


def _model_spec(spec: Any, runner: Any, target: str) -> str:
    """The spec's text with ``runner``'s callable (or factory) replaced by ``target``."""
    import tomlkit

    from .errors import SpecError
    from .spec import spec_from_text

    document = tomlkit.parse(spec.path.read_text(encoding="utf-8"))
    root: Any = document
    for key in spec.table:
        root = root[key]
    table = root["runners"][runner.name]
    if runner.factory:
        table["factory"] = target
    else:
        for key in ("factory", "options", "command", "format"):
            if key in table:
                del table[key]
        table["callable"] = target
    text = tomlkit.dumps(document)
    try:
        spec_from_text(text, spec.path)
    except SpecError as exc:
        raise InputError(f"--model-mutation {target}: {exc}") from None
    return text


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # a same-size mutant within one second: no stale .pyc
    package_parent = str(Path(__file__).resolve().parent.parent)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([package_parent, *paths])
    env.pop("COLUMNS", None)
    return env


def _run_gate(
    copy: Path,
    spec_name: str,
    out: Path,
    timeout: float | None,
    live: dict[int, subprocess.Popen[str]] | None = None,
    only: Sequence[str] = (),
) -> tuple[str, Any, str, float]:
    """Run the gate in ``copy``: (outcome, result.json data or None, last stderr line, seconds);
    outcome is "exit N" or "timeout". The process is in ``live`` while it runs. ``only``: the
    gate's ``--case`` / ``--claim`` arguments."""
    from . import children

    if out.exists():
        shutil.rmtree(out)
    argv = [sys.executable, "-m", "paritygate", "gate", spec_name, "--out", str(out), "--exitfirst"]
    argv += list(only)
    started = time.perf_counter()
    process = subprocess.Popen(
        argv,
        cwd=copy,
        env=_child_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
    )
    children.started(process, own_group=True)
    if live is not None:
        live[process.pid] = process
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        children.end(process)
        return "timeout", None, "", time.perf_counter() - started
    except BaseException:
        children.end(process)
        raise
    finally:
        if live is not None:
            live.pop(process.pid, None)
    children.finished(process)
    seconds = time.perf_counter() - started
    data = None
    result = out / "result.json"
    if result.is_file():
        try:
            data = json.loads(result.read_text(encoding="utf-8"))
        except ValueError:
            data = None
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    return f"exit {process.returncode}", data, last.strip(), seconds


def _judge(
    job: _Job, outcome: str, data: Any, last: str, seconds: float, timeout: float
) -> MutantResult:
    result = MutantResult(
        number=job.number,
        id=job.id,
        operator=job.operator,
        file=job.file,
        line=job.line,
        description=job.description,
        status="survived",
        seconds=round(seconds, 3),
        diff=job.diff,
    )
    if outcome == "timeout":
        result.status = "timeout"
        result.detail = f"no answer in {timeout:.0f} s"
        return result
    data = data or {}
    failing = [v for v in data.get("verdicts", []) if not v.get("passed")]
    if failing:
        first = failing[0]
        result.claim, result.case = first.get("claim_id"), first.get("case")
        result.candidate = first.get("candidate")
        result.caught_by = [
            f"{v.get('claim_id')} @ {v.get('case')}" if v.get("case") else str(v.get("claim_id"))
            for v in failing
        ]
    if data.get("errors"):
        # the runner failed: its verdicts fail for want of outputs, not on a measured value
        result.status = "crash"
        result.detail = str(data["errors"][0]).strip().splitlines()[0]
    elif failing:
        result.status = "caught"
        first = failing[0]
        observed, bound = first.get("observed"), first.get("bound")
        result.detail = f"observed {observed} bound {bound} {first.get('unit') or ''}".strip()
    elif data.get("drift"):
        # the gate refused the run: the mutant shifted something a pin holds (a runner that
        # wrote to its case input); no claim judged it, but the gate does not pass
        result.status = "drift"
        item = data["drift"][0]
        result.detail = f"drift: {item.get('kind')} {item.get('subject')}"
    elif outcome != "exit 0":
        result.status = "crash"
        result.detail = last or outcome
    return result


def _read(path: Path, name: str) -> str:
    """A file's exact text (its line endings kept, so that the copy is restored byte for byte)."""
    try:
        return path.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{name}: not UTF-8 text") from None


def _in_scopes(
    found: list[SourceMutation], scopes: Sequence[str], files: Sequence[str]
) -> list[SourceMutation]:
    """The mutants inside one of ``scopes`` (a dotted function or class name, or one of its
    parts: ``MlxRunner`` holds ``MlxRunner.run``); a scope holding none is bad input."""

    def inside(mutation: SourceMutation, scope: str) -> bool:
        return mutation.scope == scope or mutation.scope.startswith(scope + ".")

    for scope in scopes:
        if not any(inside(m, scope) for m in found):
            known = sorted({m.scope.split(".")[0] for m in found if m.scope})
            raise InputError(
                f"--scope {scope!r}: no mutant inside a function or class of that name in "
                f"{', '.join(files)}" + (f" (mutants lie in {', '.join(known)})" if known else "")
            )
    return [m for m in found if any(inside(m, scope) for scope in scopes)]


def _spread(items: list[Any], limit: int | None) -> list[Any]:
    """``limit`` items spread evenly over ``items`` (deterministic), all when no limit."""
    if limit is None or limit >= len(items):
        return items
    return [items[(i * len(items)) // limit] for i in range(limit)]


def mutate(
    spec_path: str | os.PathLike[str],
    *,
    candidate: str | None = None,
    operators: Sequence[str] = OPERATORS,
    files: Sequence[str | os.PathLike[str]] = (),
    model_mutations: dict[str, str] | None = None,
    limit: int | None = None,
    jobs: int = 1,
    timeout: float | None = None,
    min_score: float | None = None,
    cases: Sequence[str] = (),
    claims: Sequence[str] = (),
    scopes: Sequence[str] = (),
    progress: Callable[[int, int], None] | None = None,
) -> MutationResult:
    """Mutate the candidate runner's source and run the gate on every mutant.

    ``files`` (relative to the spec's folder) are mutated instead of the candidate runner's
    module (a ``callable``/``factory`` runner's module, a command runner's ``.py`` script).
    ``model_mutations`` maps names to ``"module:function"`` replacements of the candidate (as
    ``paritygate calibrate --model-mutation`` takes them). ``limit`` keeps that many source
    mutants spread evenly over the file(s); ``jobs`` gate runs go in parallel, each in its own
    scratch copy; ``timeout`` (seconds per mutant's gate) defaults to 5 x the unmutated gate's
    time, at least 20 s. ``cases`` / ``claims`` restrict every gate run (the unmutated one too) to
    those cases and claims: a quick mutation set of a slow gate. ``scopes`` keeps the source
    mutants inside those functions or classes (dotted: ``"MlxRunner.run"``), for a file that
    also holds the reference's code or test scaffolding. Raises
    :class:`~paritygate.errors.InputError` for bad input and when the unmutated gate does not
    pass.
    """
    from .spec import did_you_mean, load_spec

    if jobs < 1:
        raise InputError(f"--jobs must be at least 1, got {jobs}")
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be at least 1, got {limit}")
    if timeout is not None and not timeout > 0:
        raise InputError(f"--timeout must be a positive number of seconds, got {timeout}")
    if min_score is not None and not 0.0 <= min_score <= 1.0:
        raise InputError(f"--min-score must lie in [0, 1], got {min_score}")
    started = time.perf_counter()
    spec = load_spec(spec_path)
    root = spec.root.resolve()
    runner = _candidate(spec, candidate)
    only: list[str] = []
    for option, names, known in (("--case", cases, spec.cases), ("--claim", claims, spec.claims)):
        for name in names:
            if name not in known:
                raise InputError(
                    f"{option} {name!r}: not in {spec.path.name}" + did_you_mean(name, known)
                )
            only += [option, name]
    if files:
        relative = [_inside(root, root / Path(f), "--file") for f in files]
    else:
        relative = [_inside(root, _runner_file(spec, runner), f"runner {runner.name}:")]
    relative = list(dict.fromkeys(relative))
    if operators:
        _refuse_pinned(spec, root, relative)
    spec_name = spec.path.resolve().relative_to(root).as_posix()

    sources = {name: _read(root / name, name) for name in relative}
    found = [m for name in relative for m in find_mutations(sources[name], name, operators)]
    if scopes:
        found = _in_scopes(found, scopes, relative)
    chosen = _spread(found, limit)
    jobs_list: list[_Job] = []
    for mutation in chosen:
        jobs_list.append(
            _Job(
                number=len(jobs_list) + 1,
                id=mutation.id,
                operator=mutation.operator,
                file=mutation.file,
                line=mutation.line,
                description=mutation.description,
                mutated=mutation.apply(sources[mutation.file]),
                diff=mutation.diff(sources[mutation.file]),
                equivalent=mutation.equivalent,
            )
        )
    original_spec = _read(spec.path, spec_name)
    for name, target in (model_mutations or {}).items():
        if ":" not in target:
            raise InputError(f"--model-mutation {name}: expected MODULE:FUNCTION, got {target!r}")
        text = _model_spec(spec, runner, target)
        if spec_name not in sources:
            sources[spec_name] = original_spec
        jobs_list.append(
            _Job(
                number=len(jobs_list) + 1,
                id=f"model:{name}",
                operator="model",
                file=spec_name,
                line=0,
                description=f"{name}={target}",
                mutated=text,
                diff=_unified(original_spec, text, spec_name),
            )
        )
    if not jobs_list:
        raise InputError(
            f"no mutant: the operators ({', '.join(operators) or 'none'}) find nothing to change "
            f"in {', '.join(relative)}, and no --model-mutation was given"
        )

    result = MutationResult(
        spec=str(spec_path),
        candidate=runner.name,
        files=relative,
        operators=list(operators) + (["model"] if model_mutations else []),
        cases=len(cases) if cases else len(spec.cases),
        only_cases=list(cases),
        only_claims=list(claims),
        scopes=list(scopes),
        jobs=jobs,
        min_score=min_score,
        found=len(found) + len(model_mutations or {}),
    )
    scratch = Path(tempfile.mkdtemp(prefix="paritygate-mutate-"))
    try:
        ignore = shutil.ignore_patterns(".git", "__pycache__", ".pytest_cache", ".mypy_cache")
        reports = spec.reports.resolve()

        def copy_ignore(folder: str, names: list[str]) -> set[str]:
            skipped = set(ignore(folder, names))
            return skipped | {n for n in names if (Path(folder) / n).resolve() == reports}

        def fresh_copy(slot: Path) -> None:
            if (slot / "project").exists():
                shutil.rmtree(slot / "project")
            shutil.copytree(root, slot / "project", ignore=copy_ignore, symlinks=True)

        slots: queue.Queue[Path] = queue.Queue()
        for i in range(jobs):
            slot = scratch / f"job{i}"
            fresh_copy(slot)
            slots.put(slot)

        slot = slots.get()
        outcome, data, last, seconds = _run_gate(
            slot / "project", spec_name, slot / "out", None, only=only
        )
        slots.put(slot)
        if outcome != "exit 0":
            if data is not None and not data.get("passed", False):
                failing = [v for v in data.get("verdicts", []) if not v.get("passed")]
                why = "no claim was evaluated"
                if failing:
                    first = failing[0]
                    where = f" on case {first['case']}" if first.get("case") else ""
                    why = f"claim {first['claim_id']} fails{where}"
                if data.get("errors"):
                    why = " ".join(str(data["errors"][0]).split())
            else:
                why = last or outcome
            raise InputError(
                f"the unmutated gate does not pass ({outcome}: {why}); mutation testing needs a "
                f"passing gate: run `paritygate gate {spec_path}` and fix it first"
            )
        result.baseline_seconds = round(seconds, 3)
        result.timeout = timeout if timeout is not None else max(5 * seconds, 20.0)

        done = 0
        total = len(jobs_list)

        def run(job: _Job) -> MutantResult:
            if job.equivalent:
                return MutantResult(
                    number=job.number,
                    id=job.id,
                    operator=job.operator,
                    file=job.file,
                    line=job.line,
                    description=job.description,
                    status="equivalent",
                    diff=job.diff,
                )
            slot = slots.get()
            path = slot / "project" / job.file
            data = None
            try:
                path.write_bytes(job.mutated.encode("utf-8"))
                outcome, data, last, seconds = _run_gate(
                    slot / "project", spec_name, slot / "out", result.timeout, live, only
                )
            finally:
                path.write_bytes(sources[job.file].encode("utf-8"))
                if data is not None and data.get("drift"):
                    # the mutant wrote into the copy (a case input): the next mutant gets a
                    # fresh copy, never the written files
                    fresh_copy(slot)
                slots.put(slot)
            return _judge(job, outcome, data, last, seconds, result.timeout)

        results: list[MutantResult] = []
        live: dict[int, subprocess.Popen[str]] = {}
        pool = ThreadPoolExecutor(max_workers=jobs)
        try:
            for mutant in pool.map(run, jobs_list):
                results.append(mutant)
                done += 1
                if progress is not None:
                    progress(done, total)
        except BaseException:
            # Ctrl-C or SIGTERM: no mutant waits for its gate; the running gates are ended
            pool.shutdown(wait=False, cancel_futures=True)
            from . import children

            for process in list(live.values()):
                children.end(process)
            raise
        finally:
            pool.shutdown(wait=True)
        for mutant in results:
            if mutant.status not in ("survived", "equivalent"):
                mutant.diff = ""  # the diffs that matter are the survivors' (and equivalents')
        result.mutants = results
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    result.seconds = round(time.perf_counter() - started, 3)
    return result
