"""Starting a spec: pin case files by command, scaffold a first spec from a folder of cases.

:func:`add_cases` adds every file a glob matches as a case pinned by its sha256, one line per
case (``name = { path = "...", sha256 = "..." }`` under ``[cases]``), so a 20-case spec needs 20
lines of cases, not 60 written by a shell loop. :func:`init_spec` writes a whole first spec: the
cases, a reference and a candidate (a ``module:function`` or a command), the outputs found by
running the reference on the first case, and one provisional exact claim over every output, to
be loosened by ``paritygate calibrate`` where a measured tolerance is the honest claim.

Both validate the spec they write before it replaces anything; the write is atomic.
"""

from __future__ import annotations

import hashlib
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import InputError

__all__ = [
    "AddedCase",
    "add_cases",
    "init_spec",
    "quick",
    "scaffold_text",
    "case_name_for",
    "runner_table",
]


@dataclass(frozen=True)
class AddedCase:
    name: str
    path: str  # relative to the spec's folder, with forward slashes
    sha256: str
    added: bool  # False: the file was already pinned under this name


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def case_name_for(path: Path) -> str:
    """A case name from a file name: its stem, with characters a name cannot hold as ``_``."""
    name = re.sub(r"[^A-Za-z0-9_.\-]+", "_", path.stem).strip("_.-")
    return name or "case"


def _matches(root: Path, patterns: list[str]) -> list[Path]:
    found: list[Path] = []
    for pattern in patterns:
        base = Path(pattern)
        if base.is_absolute():
            anchor = Path(base.anchor)
            hits = sorted(anchor.glob(str(base.relative_to(anchor))))
        else:
            hits = sorted(root.glob(pattern))
        files = [p.resolve() for p in hits if p.is_file()]
        if not files:
            raise InputError(f"no file matches {pattern!r} (relative to {root})")
        found.extend(f for f in files if f not in found)
    return found


def _plan(root: Path, files: list[Path], existing: dict[str, Any]) -> list[AddedCase]:
    by_path = {}
    for name, entry in existing.items():
        if isinstance(entry, dict) and isinstance(entry.get("path"), str):
            by_path[(root / entry["path"]).resolve()] = name
    taken = set(existing)
    plan: list[AddedCase] = []
    for file in files:
        try:
            rel = file.relative_to(root).as_posix()
        except ValueError:
            raise InputError(
                f"{file} lies outside the spec's folder {root}: case paths are relative to it"
            ) from None
        digest = _sha256(file)
        if file in by_path:
            name = by_path[file]
            pinned = existing[name].get("sha256")
            if pinned not in (None, digest):
                raise InputError(
                    f"cases.{name}: {rel} is pinned with another sha256 ({pinned}, the file now "
                    f"has {digest}); a changed case input is drift: re-pin it by hand, deliberately"
                )
            plan.append(AddedCase(name, rel, digest, False))
            continue
        name = case_name_for(file)
        if name in taken:
            parent = case_name_for(file.parent) if file.parent != root else ""
            candidate = f"{parent}_{name}" if parent else name
            counter = 2
            while candidate in taken:
                candidate = f"{name}_{counter}"
                counter += 1
            name = candidate
        taken.add(name)
        plan.append(AddedCase(name, rel, digest, True))
    return plan


def _write_validated(path: Path, text: str) -> None:
    from .files import atomic_write_text
    from .spec import spec_from_text

    spec_from_text(text, path)
    atomic_write_text(path, text)


def add_cases(
    spec_path: str | Path, patterns: list[str], *, dry_run: bool = False
) -> list[AddedCase]:
    """Pin every file the glob ``patterns`` match (relative to the spec's folder) as a case.

    A file already pinned keeps its name (and must still match its pin); a new file is named by
    its stem. Cases written in the compact form take one line each. Returns every matched file,
    added or not. The spec is validated before it is replaced; nothing is written on error.
    """
    import tomlkit

    path = Path(spec_path)
    if path.is_dir():
        path = path / "parity.toml"
    if not path.is_file():
        raise InputError(f"no spec at {path} (write one with `paritygate init`)")
    root = path.resolve().parent
    document = tomlkit.parse(path.read_text(encoding="utf-8"))
    cases = document.get("cases")
    plan = _plan(root, _matches(root, patterns), dict(cases.unwrap()) if cases else {})
    if dry_run or not any(c.added for c in plan):
        return plan
    if cases is None:
        cases = tomlkit.table()
        document["cases"] = cases
    compact = not (hasattr(cases, "is_super_table") and cases.is_super_table())
    for case in plan:
        if not case.added:
            continue
        entry = tomlkit.inline_table() if compact else tomlkit.table()
        entry.update({"path": case.path, "sha256": case.sha256})
        cases[case.name] = entry
    _write_validated(path, tomlkit.dumps(document))
    return plan


def runner_table(
    role: str,
    target: str,
    *,
    output_format: str = "npz",
    pass_as: str = "case",
    factory: bool = False,
) -> dict[str, Any]:
    """A runner's table from ``module:function`` (in-process) or a command line (a string with
    spaces, ``{case}`` and ``{out}`` placeholders: the subprocess protocol).

    An in-process function receives what ``pass_as`` names (``case``, ``inputs``, ``path``: the
    spec's ``pass``); with ``factory`` the function is a factory, called once with no
    arguments, that returns the per-case callable."""
    from .spec import PASS_STYLES

    if pass_as not in PASS_STYLES:
        raise InputError(f"--pass {pass_as!r}: expected one of {', '.join(PASS_STYLES)}")
    table: dict[str, Any] = {"role": role}
    if re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_][\w.]*", target):
        table["factory" if factory else "callable"] = target
        if pass_as != "case":
            table["pass"] = pass_as
        return table
    if factory:
        raise InputError(
            f"--factory {role}: {target!r} is a command; a factory is a 'module:function'"
        )
    argv = shlex.split(target)
    if not argv or "{out}" not in " ".join(argv):
        raise InputError(
            f"{role} {target!r} is neither 'module:function' nor a command with an {{out}} "
            "placeholder (for example: 'python run.py {case} {out}')"
        )
    table["command"] = argv
    table["format"] = output_format
    return table


def _first_case_failure(exc: Any, role: str, target: str, both: bool) -> InputError:
    """A runner failed on the first case while a spec was being started: one short line naming
    the runner, the case, where in its code, the exception; ``--pass`` when the failure looks
    like the wrong calling convention (a function reading ``inputs["x"]`` handed a Case)."""
    from .errors import failure_site, shorten

    at = exc.site or failure_site(exc.stderr)
    hint = None
    if exc.suggested_pass:
        # One style given for both runners (or none): the reference failing first says how both
        # are written; otherwise the option names the runner.
        style = exc.suggested_pass
        option = style if both and role == "reference" else f"{role}:{style}"
        hint = f"it reads {_PASS_WORDS[style]}: try --pass {option}"
    when = f"on case {exc.case}" if exc.case else "to start"
    return InputError(
        f"{role} {target} failed {when} ({exc.kind}"
        + (f" at {at}" if at else "")
        + f"): {shorten(exc.message)}",
        hint=hint,
    )


_PASS_WORDS = {
    "inputs": "the case's inputs (a dict)",
    "path": "the case file's path",
    "case": "a Case (.path .load())",
}


def _run_first_case(
    spec_text: str,
    spec_path: Path,
    targets: dict[str, str],
    *,
    required: str | None,
    both: bool = True,
) -> list[str]:
    """Run the spec's runners (role -> the target the user gave) on its first case, as the
    gate will: the outputs of ``required`` (the reference) are returned, and any failure of it
    is an error; another runner's failure is an error only when it looks like the wrong calling
    convention (any other failure is the gate's to report)."""
    from .errors import RunFailure
    from .runners import make_runner
    from .spec import spec_from_text

    spec = spec_from_text(spec_text, spec_path)
    first = next(iter(spec.cases.values()))
    found: list[str] = []
    for role, target in targets.items():
        active = make_runner(spec.runners[role], spec)
        try:
            active.activate()
            run = active.run(first)
        except RunFailure as exc:
            if role == required or exc.suggested_pass:
                raise _first_case_failure(exc, role, target, both) from None
            continue
        finally:
            active.deactivate()
        if role == required:
            found = sorted(run.outputs)
    return found


def _toml_value(value: Any) -> str:
    import tomlkit

    return tomlkit.item(value).as_string()


def scaffold_text(
    root: Path,
    *,
    cases: list[str],
    reference: str,
    candidate: str,
    outputs: list[str] | None = None,
    atol: float | None = None,
    min_cosine: float | None = None,
    output_format: str = "npz",
    name: str | None = None,
    mode: str = "stored",
    header: list[str] | None = None,
    pass_as: str | dict[str, str] = "case",
    factories: tuple[str, ...] = (),
) -> str:
    """The text of a first spec rooted at ``root`` (see :func:`init_spec`)."""
    from .spec import SPEC_FORMAT_VERSION

    roles = ("reference", "candidate")
    styles = dict(pass_as) if isinstance(pass_as, dict) else dict.fromkeys(roles, pass_as)
    unknown = sorted(set(factories) - set(roles))
    if unknown:
        raise InputError(f"--factory {unknown[0]!r}: expected reference or candidate")
    unknown = sorted(set(styles) - set(roles))
    if unknown:
        raise InputError(f"--pass {unknown[0]}:STYLE: expected reference: or candidate:")
    plan = _plan(root, _matches(root, cases), {})
    ref, cand = (
        runner_table(
            role,
            target,
            output_format=output_format,
            pass_as=styles.get(role, "case"),
            factory=role in factories,
        )
        for role, target in (("reference", reference), ("candidate", candidate))
    )
    top = list(header or []) + [
        f"format_version = {SPEC_FORMAT_VERSION}",
        f"name = {_toml_value(name or root.name)}",
    ]

    def runner_lines(runner: str, table: dict[str, Any]) -> list[str]:
        return ["", f"[runners.{runner}]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items()]

    body = runner_lines("reference", ref) + runner_lines("candidate", cand)
    case_lines = ["", "[cases]"] + [
        f"{c.name} = {{ path = {_toml_value(c.path)}, sha256 = {_toml_value(c.sha256)} }}"
        for c in plan
    ]

    def claim(claim_id: str, names: list[str], metric: str, bound: Any) -> list[str]:
        lines = [
            "",
            f"[claims.{claim_id}]",
            f"outputs = {_toml_value(names)}",
            f"metric = {_toml_value(metric)}",
            f"bound = {_toml_value(bound)}",
            'oracle = "equivalence"',
            'status = "provisional"',
        ]
        return lines + ([f"mode = {_toml_value(mode)}"] if mode != "stored" else [])

    def text_for(names: list[str]) -> str:
        claims: list[str] = []
        if atol is not None:
            claims += claim("outputs-max-abs", names, "max_abs", atol)
        if min_cosine is not None:
            claims += claim("outputs-cosine", names, "cosine", min_cosine)
        if not claims:
            claims = claim("outputs-match", names, "exact", 0)
        lines = top + [f"outputs = {_toml_value(names)}"] + body + claims + case_lines
        return "\n".join(lines) + "\n"

    targets = {"reference": reference, "candidate": candidate}
    both = len(set(styles.get(r, "case") for r in roles)) == 1
    if outputs is None:
        outputs = _run_first_case(
            text_for(["output"]), root / "parity.toml", targets, required="reference", both=both
        )
        if not outputs:
            raise InputError("the reference returned no outputs on the first case")
    else:
        _run_first_case(
            text_for(list(outputs)), root / "parity.toml", targets, required=None, both=both
        )
    return text_for(list(outputs))


def init_spec(
    folder: str | Path,
    *,
    cases: list[str],
    reference: str,
    candidate: str,
    outputs: list[str] | None = None,
    atol: float | None = None,
    output_format: str = "npz",
    name: str | None = None,
    force: bool = False,
    pass_as: str | dict[str, str] = "case",
    factories: tuple[str, ...] = (),
) -> Path:
    """Write ``parity.toml`` in ``folder``: the cases ``cases`` match, pinned; the reference and
    the candidate; the outputs (found by running the reference on the first case unless given);
    one provisional claim over every output: exact, or max-abs ``atol`` when given. In-process
    functions receive what ``pass_as`` names (the spec's ``pass``; one style for both, or
    role -> style); the roles in ``factories``
    name factories. Both runners are tried on the first case: the reference must run, and a
    runner that fails as if handed the wrong argument is refused with the ``--pass`` to use.

    Refuses to replace an existing spec unless ``force``. Returns the spec's path."""
    root = Path(folder).resolve()
    path = root / "parity.toml"
    if path.exists() and not force:
        raise InputError(f"{path} exists; add cases with `paritygate cases add` or pass --force")
    header = [
        f"# Parity spec of {name or root.name}. Paths are relative to this file's folder.",
        "# The claim below starts provisional: `paritygate record` then `paritygate gate`;",
        "# `paritygate calibrate parity.toml --claim ID` measures a bound where exact is too",
        "# strict.",
    ]
    text = scaffold_text(
        root,
        cases=cases,
        reference=reference,
        candidate=candidate,
        outputs=outputs,
        atol=atol,
        output_format=output_format,
        name=name,
        header=header,
        pass_as=pass_as,
        factories=factories,
    )
    _write_validated(path, text)
    return path


def quick(
    *,
    inputs: list[str],
    reference: str,
    candidate: str,
    atol: float | None = None,
    min_cosine: float | None = None,
    output_format: str = "npz",
    save_spec: str | Path | None = None,
    root: str | Path | None = None,
    pass_as: str | dict[str, str] = "case",
    factories: tuple[str, ...] = (),
) -> tuple[Any, str]:
    """Run reference and candidate on every input, back to back in this process (paired mode:
    nothing is recorded), and evaluate an exact claim over every output (max-abs ``atol`` and/or
    cosine ``min_cosine`` when given). Returns (GateResult, the equivalent spec's text); with
    ``save_spec`` the text is written there, so the one-liner grows into a gate."""
    from .gate import run_gate
    from .spec import spec_from_text

    base = Path(root if root is not None else Path.cwd()).resolve()
    target = Path(save_spec).resolve() if save_spec is not None else base / "parity.toml"
    if save_spec is not None and target.parent != base:
        raise InputError(
            f"--save-spec {save_spec}: the spec must sit in the folder the input paths are "
            f"relative to ({base})"
        )
    header = [
        "# Written by `paritygate quick`: reference and candidate run back to back in one",
        "# process (mode = paired), so no reference needs recording.",
    ]
    text = scaffold_text(
        base,
        cases=inputs,
        reference=reference,
        candidate=candidate,
        atol=atol,
        min_cosine=min_cosine,
        output_format=output_format,
        mode="paired",
        header=header,
        pass_as=pass_as,
        factories=factories,
    )
    spec = spec_from_text(text, target)
    if save_spec is not None:
        if target.exists():
            raise InputError(f"{target} exists: --save-spec never replaces a spec")
        _write_validated(target, text)
    return run_gate(spec), text
