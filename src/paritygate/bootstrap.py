"""Bootstrap: the only sanctioned way to set up a parity-test checkout.

Steps, each with its own error and exit code (docs/bootstrap.md):

=====  ================  ====================================================================
code   step              fails when
=====  ================  ====================================================================
10     clone             the folder is not fresh (non-empty and not a clone bootstrap made) or
                         ``git clone`` fails
11     checkout          the pinned commit is not a commit SHA or does not exist upstream
12     patch             ``git apply --check`` rejects the patch (it does not apply cleanly)
13     required-lines    a literal fix line is missing from the patched tree
14     build             the build command exits non-zero or times out
0..3   gate              the gate's own exit code (0 holds, 1 violated, 2 spec error, 3 drift)
=====  ================  ====================================================================

A folder bootstrap made is marked inside its ``.git`` folder; such a folder is deleted and cloned
again on the next run, never reused, because a tree that has been built in is dirty.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import SpecError, UserError

__all__ = [
    "BootstrapConfig",
    "BootstrapResult",
    "BootstrapError",
    "CloneError",
    "CheckoutError",
    "PatchError",
    "RequiredLinesError",
    "BuildError",
    "RequiredLine",
    "StepRecord",
    "bootstrap",
    "config_from_spec",
    "parse_required",
    "WORKDIR_ENV",
    "STEP_EXIT_CODES",
]

# Environment variable naming the bootstrapped checkout, set for the build and the gate so that
# a spec's subprocess runners can find the binary that was built there.
WORKDIR_ENV = "PARITYGATE_BOOTSTRAP_DIR"
# Marker file inside <workdir>/.git: "this folder is a clone that bootstrap made".
_MARKER = "paritygate-bootstrap"
_STDERR_TAIL_LINES = 25
_SHA = re.compile(r"[0-9a-fA-F]{7,64}")


class BootstrapError(UserError):
    """A bootstrap step failed; ``step`` names it and ``exit_code`` is the step's own code."""

    step = "bootstrap"
    exit_code = 2


class CloneError(BootstrapError):
    step = "clone"
    exit_code = 10


class CheckoutError(BootstrapError):
    step = "checkout"
    exit_code = 11


class PatchError(BootstrapError):
    step = "patch"
    exit_code = 12


class RequiredLinesError(BootstrapError):
    step = "required-lines"
    exit_code = 13


class BuildError(BootstrapError):
    step = "build"
    exit_code = 14


STEP_EXIT_CODES = {
    cls.step: cls.exit_code
    for cls in (CloneError, CheckoutError, PatchError, RequiredLinesError, BuildError)
}


@dataclass(frozen=True)
class RequiredLine:
    """A literal line the patched tree must contain: ``file`` relative to the checkout."""

    file: str
    line: str


@dataclass
class BootstrapConfig:
    upstream: str
    commit: str
    patch: Path | None = None
    require: list[RequiredLine] = field(default_factory=list)
    build: str | None = None
    gate: Path | None = None  # the spec to gate; None stops after the build
    workdir: Path | None = None  # None: a new temporary folder
    build_timeout: float | None = None


@dataclass
class StepRecord:
    step: str
    seconds: float
    detail: str = ""


@dataclass
class BootstrapResult:
    workdir: Path
    commit: str
    steps: list[StepRecord] = field(default_factory=list)
    gate_result: Any = None  # a GateResult when the gate ran in-process
    gate_exit_code: int | None = None

    @property
    def exit_code(self) -> int:
        return 0 if self.gate_exit_code is None else self.gate_exit_code

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    def __bool__(self) -> bool:
        return self.passed


def parse_required(text: str) -> RequiredLine:
    """``FILE:LITERAL_LINE`` (split at the first colon) as a :class:`RequiredLine`."""
    file, sep, line = text.partition(":")
    if not sep or not file.strip() or not line.strip():
        raise UserError(
            f"--require expects FILE:LITERAL_LINE, got {text!r}",
            hint="e.g. --require 'src/model.py:x = x.transpose(0, 2, 3, 1)'",
        )
    return RequiredLine(file.strip(), line)


def _git(args: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, GIT_TERMINAL_PROMPT="0", LC_ALL="C")
    try:
        return subprocess.run(
            ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
        )
    except FileNotFoundError:
        raise UserError("git is not installed or not on PATH") from None


def _tail(text: str, lines: int = _STDERR_TAIL_LINES) -> str:
    kept = text.rstrip().splitlines()[-lines:]
    return "\n".join(kept)


def _prepare_workdir(workdir: Path | None) -> Path:
    """A new, empty folder to clone into; a previous clone made here is deleted first."""
    if workdir is None:
        return Path(tempfile.mkdtemp(prefix="paritygate-bootstrap-"))
    workdir = workdir.absolute()
    if workdir.exists() and not workdir.is_dir():
        raise CloneError("the bootstrap folder is a file", where=str(workdir))
    if workdir.is_dir() and any(workdir.iterdir()):
        if (workdir / ".git" / _MARKER).is_file():
            # Our own earlier clone: it has been patched and built in, so it is dirty by
            # definition. Start again from nothing.
            shutil.rmtree(workdir)
        else:
            raise CloneError(
                "the bootstrap folder is not empty and is not a clone bootstrap made; "
                "refusing to reuse a tree that may be dirty",
                where=str(workdir),
                hint="pass a new or empty --workdir, or leave it out to use a fresh temporary "
                "folder",
            )
    workdir.mkdir(parents=True, exist_ok=True)
    return workdir


def _clone(upstream: str, workdir: Path) -> None:
    done = _git(["clone", "--quiet", "--no-checkout", "--", upstream, str(workdir)])
    if done.returncode != 0:
        raise CloneError(
            f"git clone {upstream} failed (exit {done.returncode}): {_tail(done.stderr, 5)}",
            where=str(workdir),
        )
    (workdir / ".git" / _MARKER).write_text(f"upstream={upstream}\n", encoding="utf-8")


def _checkout(commit: str, workdir: Path, upstream: str) -> str:
    if not _SHA.fullmatch(commit):
        raise CheckoutError(
            f"{commit!r} is not a commit SHA; a pin must be a commit, not a branch or tag that "
            "moves"
        )
    found = _git(["rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}"], cwd=workdir)
    if found.returncode != 0:
        raise CheckoutError(f"commit {commit} does not exist in {upstream}")
    sha = found.stdout.strip()
    if not sha.lower().startswith(commit.lower()):
        raise CheckoutError(f"{commit} resolved to {sha}, which is not the pinned commit")
    done = _git(["checkout", "--quiet", "--detach", sha], cwd=workdir)
    if done.returncode != 0:
        raise CheckoutError(f"git checkout {sha} failed: {_tail(done.stderr, 5)}")
    status = _git(["status", "--porcelain", "--ignored"], cwd=workdir)
    if status.stdout.strip():
        raise CheckoutError(
            f"the fresh checkout of {sha} is not clean:\n{_tail(status.stdout, 10)}"
        )
    return sha


def _apply_patch(patch: Path, workdir: Path) -> None:
    patch = patch.absolute()
    if not patch.is_file():
        raise PatchError("no such patch file", where=str(patch))
    check = _git(["apply", "--check", "--verbose", str(patch)], cwd=workdir)
    if check.returncode != 0:
        raise PatchError(
            f"the patch does not apply cleanly: {_tail(check.stderr, 10)}", where=str(patch)
        )
    done = _git(["apply", str(patch)], cwd=workdir)
    if done.returncode != 0:
        raise PatchError(f"git apply failed: {_tail(done.stderr, 10)}", where=str(patch))


def _check_required(required: list[RequiredLine], workdir: Path) -> None:
    missing: list[str] = []
    for item in required:
        path = (workdir / item.file).resolve()
        if not path.is_relative_to(workdir.resolve()):
            raise RequiredLinesError(f"{item.file} lies outside the checkout")
        literal = item.line.strip()
        if not path.is_file():
            missing.append(f"{item.file}: file does not exist (required line {literal!r})")
            continue
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        if not any(literal in line for line in lines):
            missing.append(f"{item.file}: missing required line {literal!r}")
    if missing:
        raise RequiredLinesError(
            "the patched tree lacks required fix lines (the patch applied but is incomplete): "
            + "; ".join(missing),
            hint="re-derive the patch from the working tree that holds the fix",
        )


def _build(command: str, workdir: Path, timeout: float | None) -> None:
    env = dict(os.environ, **{WORKDIR_ENV: str(workdir)})
    try:
        done = subprocess.run(
            command,
            shell=True,
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = (
            exc.stderr.decode(errors="replace")
            if isinstance(exc.stderr, bytes)
            else (exc.stderr or "")
        )
        raise BuildError(
            f"build command {command!r} timed out after {timeout} s; stderr tail:\n{_tail(stderr)}"
        ) from None
    if done.returncode != 0:
        tail = _tail(done.stderr) or _tail(done.stdout)
        raise BuildError(
            f"build command {command!r} failed with exit {done.returncode}; stderr tail:\n{tail}"
        )


def _gate_in_process(spec: Path) -> Any:
    from .gate import run_gate
    from .spec import load_spec

    return run_gate(load_spec(spec))


def bootstrap(
    config: BootstrapConfig,
    *,
    on_step: Callable[[StepRecord], None] | None = None,
    run_gate: Callable[[Path], Any] | None = None,
) -> BootstrapResult:
    """Clone, check out, patch, require the fix lines, build, then gate. Raises the failing step's
    :class:`BootstrapError` subclass; returns the result once every step before the gate passed.

    ``run_gate(spec)`` runs the gate and returns a GateResult (or an exit code); by default
    :func:`paritygate.gate.run_gate` on the loaded spec, with ``PARITYGATE_BOOTSTRAP_DIR`` set in
    the environment (subprocess runners inherit it).
    ``on_step`` is called after each step that passed (progress for the CLI).
    """
    steps: list[StepRecord] = []

    def record(step: str, started: float, detail: str = "") -> None:
        item = StepRecord(step, time.perf_counter() - started, detail)
        steps.append(item)
        if on_step is not None:
            on_step(item)

    started = time.perf_counter()
    workdir = _prepare_workdir(config.workdir)
    _clone(config.upstream, workdir)
    record("clone", started, f"{config.upstream} -> {workdir}")

    started = time.perf_counter()
    sha = _checkout(config.commit, workdir, config.upstream)
    record("checkout", started, sha)

    if config.patch is not None:
        started = time.perf_counter()
        _apply_patch(config.patch, workdir)
        record("patch", started, str(config.patch))

    if config.require:
        started = time.perf_counter()
        _check_required(config.require, workdir)
        record("required-lines", started, f"{len(config.require)} lines present")

    if config.build:
        started = time.perf_counter()
        _build(config.build, workdir, config.build_timeout)
        record("build", started, config.build)

    result = BootstrapResult(workdir=workdir, commit=sha, steps=steps)
    if config.gate is not None:
        started = time.perf_counter()
        previous = os.environ.get(WORKDIR_ENV)
        os.environ[WORKDIR_ENV] = str(workdir)
        try:
            outcome: Any = (run_gate or _gate_in_process)(config.gate)
        finally:
            if previous is None:
                os.environ.pop(WORKDIR_ENV, None)
            else:
                os.environ[WORKDIR_ENV] = previous
        if isinstance(outcome, int):
            result.gate_exit_code = outcome
        else:
            result.gate_result = outcome
            result.gate_exit_code = int(outcome.exit_code)
        record("gate", started, f"exit {result.gate_exit_code}")
    return result


def config_from_spec(spec: Path, **flags: Any) -> BootstrapConfig:
    """A :class:`BootstrapConfig` from the spec's ``[bootstrap]`` table, overridden by flags.

    Flags that are None (or empty) fall back to the table. Relative paths in the table are
    relative to the spec's folder; an upstream that is not a URL and exists there is a path too.
    """
    table: dict[str, Any] = {}
    if spec is not None and Path(spec).is_file():
        from .files import read_text
        from .spec import parse_toml

        data = parse_toml(read_text(spec, "spec", error=SpecError), spec)
        if "tool" in data and "paritygate" in data.get("tool", {}):
            data = data["tool"]["paritygate"]
        table = data.get("bootstrap", {}) or {}
        if not isinstance(table, dict):
            raise SpecError("[bootstrap] must be a table", where=str(spec))
        known = {"upstream", "commit", "patch", "require", "build", "workdir", "build_timeout"}
        unknown = sorted(set(table) - known)
        if unknown:
            raise SpecError(
                f"unknown key(s) in [bootstrap]: {', '.join(unknown)} (expected "
                f"{', '.join(sorted(known))})",
                where=str(spec),
            )
    base = Path(spec).absolute().parent if spec is not None else Path.cwd()

    def from_table_path(key: str) -> Path | None:
        value = table.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise SpecError(f"bootstrap.{key} must be a string path", where=str(spec))
        return base / value

    upstream = flags.get("upstream") or table.get("upstream")
    if (
        upstream
        and not flags.get("upstream")
        and "://" not in upstream
        and not upstream.startswith("git@")
    ):
        if (base / upstream).exists():
            upstream = str(base / upstream)
    commit = flags.get("commit") or table.get("commit")
    if not upstream:
        raise UserError("no upstream: pass --upstream or set bootstrap.upstream in the spec")
    if not commit:
        raise UserError("no pinned commit: pass --commit or set bootstrap.commit in the spec")

    require: list[RequiredLine] = [parse_required(r) for r in flags.get("require") or ()]
    if not require:
        for index, item in enumerate(table.get("require", []) or []):
            if isinstance(item, str):
                require.append(parse_required(item))
            elif (
                isinstance(item, dict)
                and isinstance(item.get("file"), str)
                and isinstance(item.get("line"), str)
            ):
                require.append(RequiredLine(item["file"], item["line"]))
            else:
                raise SpecError(
                    f"bootstrap.require[{index}] must be 'FILE:LINE' or {{file = ..., line = ...}}",
                    where=str(spec),
                )
    timeout = flags.get("build_timeout") or table.get("build_timeout")
    return BootstrapConfig(
        upstream=str(upstream),
        commit=str(commit),
        patch=flags.get("patch") or from_table_path("patch"),
        require=require,
        build=flags.get("build") or table.get("build"),
        gate=spec,
        workdir=flags.get("workdir") or from_table_path("workdir"),
        build_timeout=float(timeout) if timeout else None,
    )
