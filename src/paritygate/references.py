"""Recorded references: the reference runner's outputs for every case, with their provenance.

On disk (the spec's ``references`` folder)::

    manifest.json                 format, format_version, sha256 of every file, per-case input
                                  hashes and output shapes/dtypes, pins, provenance, and a digest
                                  of the manifest itself (a hand edit is detected)
    outputs/<case>.safetensors    the case's outputs, one tensor per flattened output name

    v-<id>/outputs/<case>.safetensors   (a record's version folder; references recorded before
                                  versions were introduced keep ``outputs/`` at the top)

No pickle anywhere. A record runs under a lock and writes its outputs into a new version folder;
``manifest.json`` is the pointer to the current version, and the switch is one atomic step: the
new manifest replaces the old one by a rename (POSIX ``rename(2)``: atomic on a local POSIX
filesystem). A reader sees the old reference or the new one, never neither; a record killed at any
step leaves the previous reference intact, and the next record removes what it left (version
folders the manifest does not point into, unfinished manifests, and the ``.references.tmp-*`` /
``.references.old-*`` folders of the former swap). The version a record replaces stays until the
next record, so that a verify that read the old manifest before the switch finishes on its files
(a gate reads every output it compares right after verifying, so it finishes on its version even
across several records); version folders the manifest does not point into are not part of the
reference (``verify`` ignores them). Before the old reference is replaced, :func:`record`
computes a diff against it.

Nothing else belongs in the folder: a file the manifest does not list is drift naming it (move it
out; a record never deletes it), a recorded file linked outside the spec's folder is drift and
never read, and a write error (a full disk) is one line naming the folder and the space needed,
the previous reference kept.

Format history (``FORMAT_VERSION``; a reference of another version is *tainted*: re-record):
    1 — paritygate 0.1.0: safetensors per case, manifest.json with sha256 of every file and a
        digest of its own canonical JSON. The safetensors header metadata (informational, never
        read back) is one key, ``paritygate``, holding sorted JSON, so identical outputs record
        to identical bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import DriftError, InputError, RunFailure, UserError
from .files import (
    atomic_write_text,
    fsync_folder,
    load_outputs,
    save_outputs,
    sha256_file,
    staging_folder,
)
from .outputs import flatten_outputs
from .provenance import capture, check_file_pins, check_package_pin, utc_now
from .results import DriftItem
from .spec import Case, Spec, load_spec

__all__ = [
    "FORMAT",
    "FORMAT_VERSION",
    "Reference",
    "RecordResult",
    "record",
    "load_reference",
    "recorded_outputs",
    "case_input_drift",
    "manifest_digest",
    "diff_outputs",
    "RecordError",
]

FORMAT = "paritygate-reference"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"


class RecordError(UserError):
    """The reference could not be recorded (its runner failed, or an output is undeclared)."""


def manifest_digest(manifest: dict[str, Any]) -> str:
    """sha256 of the manifest's canonical JSON, the ``digest`` key left out."""
    body = {k: v for k, v in manifest.items() if k != "digest"}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------------------------
# Reading


def _load_v1(folder: Path, manifest: dict[str, Any]) -> Reference:
    return Reference(folder=folder, manifest=manifest)


# format_version -> loader. A new format adds a loader here and keeps the old ones readable.
_LOADERS: dict[int, Callable[[Path, dict[str, Any]], Reference]] = {1: _load_v1}


@dataclass
class Reference:
    folder: Path
    manifest: dict[str, Any]
    _cache: dict[str, dict[str, Any]] = field(default_factory=dict, repr=False)
    root: Path | None = None  # the spec's folder: a recorded file must not resolve outside it

    @property
    def version(self) -> str | None:
        """The version folder the manifest points into (``v-<digest>``, or ``outputs`` for a
        reference recorded before versions existed); None for a reference without files."""
        tops = sorted({rel.split("/", 1)[0] for rel in self.files if "/" in rel})
        return tops[0] if len(tops) == 1 else None

    @property
    def cases(self) -> dict[str, dict[str, Any]]:
        return self.manifest.get("cases", {})

    @property
    def files(self) -> dict[str, str]:
        return self.manifest.get("files", {})

    @property
    def provenance(self) -> dict[str, Any]:
        return self.manifest.get("provenance", {})

    @property
    def pins(self) -> dict[str, Any]:
        return self.manifest.get("pins", {})

    def outputs(self, case: str) -> dict[str, Any]:
        """The recorded outputs of one case. A damaged file raises DriftError (exit 3)."""
        if case in self._cache:
            return self._cache[case]
        entry = self.cases.get(case)
        if entry is None:
            raise DriftError(
                f"case {case!r} is not recorded in the reference",
                where=str(self.folder),
                hint="re-record deliberately: paritygate record SPEC",
            )
        path = self.folder / entry["file"]
        escape = outside_link(path, self.root)
        if escape is not None:
            raise DriftError(
                f"reference file is a symbolic link to {escape}, outside the spec's folder "
                "(a recorded file is never a link: the reference was tampered with)",
                where=str(path),
                hint="re-record deliberately: paritygate record SPEC",
            )
        try:
            # Sorted by name, as safetensors.numpy.load_file gives them (its header order is not).
            data = dict(sorted(flatten_outputs(load_outputs(path)).items()))
        except InputError as exc:
            raise DriftError(
                f"reference file is damaged ({exc.message})",
                where=str(path),
                hint="re-record deliberately: paritygate record SPEC",
            ) from None
        self._cache[case] = data
        return data


def outside_link(path: Path, root: Path | None) -> Path | None:
    """Where ``path`` really leads when a symbolic link takes it outside ``root`` (None when it
    stays inside, or when no root is known)."""
    if root is None:
        return None
    try:
        resolved = path.resolve()
        inside = resolved.is_relative_to(Path(root).resolve())
    except (OSError, RuntimeError):  # a link loop
        return path
    return None if inside else resolved


def check_references_folder(spec: Spec, folder: Path | None = None) -> None:
    """The spec's ``references`` path must be a folder (or not exist yet): anything else is an
    input error naming the path (exit 2), for record, verify and gate alike."""
    folder = Path(folder or spec.references)
    if folder.exists() and not folder.is_dir():
        raise InputError(
            "the spec's references path is a file, not a folder",
            where=str(folder),
            hint="move that file away, or set `references` in the spec to a folder; then run "
            f"paritygate record {spec.path.name}",
        )


def load_reference(spec: Spec, folder: Path | None = None) -> Reference:
    """Read a reference's manifest. Another format version, a damaged or hand-edited manifest
    raise DriftError; a missing reference raises DriftError with the hint to record one; a
    ``references`` path that is not a folder raises InputError."""
    folder = Path(folder or spec.references)
    check_references_folder(spec, folder)
    path = folder / MANIFEST
    hint = "re-record deliberately: paritygate record SPEC"
    if not path.is_file():
        raise DriftError(
            "no reference recorded",
            where=str(folder),
            hint=f"record one: paritygate record {spec.path.name}",
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DriftError(
            f"manifest is not valid JSON ({exc})", where=str(path), hint=hint
        ) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise DriftError(
            "not a paritygate reference manifest (format "
            f"{manifest.get('format') if isinstance(manifest, dict) else None!r})",
            where=str(path),
            hint=hint,
        )
    version = manifest.get("format_version")
    loader = _LOADERS.get(version) if isinstance(version, int) else None
    if loader is None or version != FORMAT_VERSION:
        raise DriftError(
            f"reference format_version {version!r}, this paritygate writes {FORMAT_VERSION}: the "
            "reference is tainted",
            where=str(path),
            hint=hint,
        )
    if manifest.get("digest") != manifest_digest(manifest):
        raise DriftError(
            "manifest was edited by hand (its digest does not match its content)",
            where=str(path),
            hint=hint,
        )
    reference = loader(folder, manifest)
    reference.root = spec.root
    return reference


def case_input_drift(case: Case, reference: Reference | None) -> list[DriftItem]:
    """What shifted under one case: its input file against its sha256 pin and, with a
    reference, the input the reference recorded for it (empty: nothing shifted)."""
    drift = []
    observed = case.observed_sha256()
    if observed is None:
        drift.append(DriftItem("case-input", case.name, case.sha256, None, case.missing))
    else:
        if observed != case.sha256:
            drift.append(
                DriftItem("case-input", case.name, case.sha256, observed, case.pin_mismatch)
            )
    if reference is not None:
        recorded = reference.cases.get(case.name)
        if recorded is None:
            drift.append(
                DriftItem(
                    "case-not-recorded",
                    case.name,
                    None,
                    None,
                    "the reference has no outputs for this case",
                )
            )
        elif recorded.get("input_sha256") != case.sha256:
            drift.append(
                DriftItem(
                    "case-input",
                    case.name,
                    case.sha256,
                    recorded.get("input_sha256"),
                    "the reference was recorded from another input",
                )
            )
    return drift


def recorded_outputs(
    spec: Spec | str | Path, case: Case | str | Path, *, reference: Reference | None = None
) -> dict[str, Any]:
    """The recorded reference outputs of one case of ``spec``, flattened, after the checks the
    gate makes in stored mode: the case's input matches its sha256 pin and the reference was
    recorded from that input. Anything shifted raises :class:`DriftError` naming the case (exit
    3): re-record deliberately.

    ``case`` is a :class:`~paritygate.spec.Case`, a case name, or the path of an input file: the
    case whose pinned sha256 the file has (how an in-process runner passed a path, such as a
    post-processor fed the recorded probabilities, finds its recording). ``reference``: an
    already loaded reference of the spec (default: :func:`load_reference`)."""
    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    if isinstance(case, Path):
        if not case.is_file():
            raise InputError("no such case input file", where=str(case))
        digest = sha256_file(case)
        found = [c for c in spec.cases.values() if c.sha256 == digest]
        if not found:
            raise InputError(
                f"no case of the spec is pinned to this file's sha256 {digest[:12]}…",
                where=str(case),
                hint=f"cases: {', '.join(spec.cases) or 'none'}",
            )
        case = found[0]
    elif isinstance(case, str):
        if case not in spec.cases:
            raise InputError(
                f"no case {case!r} (cases: {', '.join(spec.cases) or 'none'})", where=str(spec.path)
            )
        case = spec.cases[case]
    reference = reference if reference is not None else load_reference(spec)
    drift = case_input_drift(case, reference)
    if drift:
        item = drift[0]
        shown = f" (pinned {item.expected}, found {item.observed})" if item.observed else ""
        raise DriftError(
            f"case {case.name}: {item.detail}{shown}",
            where=str(reference.folder),
            hint="regenerate the case or re-record deliberately: "
            f"paritygate record {spec.path.name}",
        )
    return reference.outputs(case.name)


def stray_detail(folder: Path) -> str:
    """What a file in the references folder that the manifest does not list is, and what to do."""
    return (
        f"file is not in the manifest: not part of the reference; move it out of {folder} "
        "(re-recording does not remove it)"
    )


def unlisted_files(folder: Path, files: dict[str, str]) -> list[str]:
    """Files under ``folder`` that a manifest listing ``files`` does not hold, as paths relative
    to it: a user's own file, or one planted in a version folder. Version folders the manifest
    does not point into (one a record is writing or retiring) and the next manifest being
    written are not part of the reference and are left out."""
    listed = set(files) | {MANIFEST}
    pointed = {rel.split("/", 1)[0] for rel in files if "/" in rel}
    found = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file() or p.is_symlink()):
        rel = path.relative_to(folder).as_posix()
        top = rel.split("/", 1)[0] if "/" in rel else None
        if top is not None and top not in pointed and _is_version_folder(top):
            continue
        if top is None and rel.startswith(f".{MANIFEST}.") and rel.endswith(".tmp"):
            continue  # the next manifest, being written
        if rel not in listed:
            found.append(rel)
    return found


def _is_version_folder(name: str) -> bool:
    return name == "outputs" or name.startswith("v-")


# --------------------------------------------------------------------------------------------
# Diff


def diff_outputs(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Human-readable differences between two flattened output sets."""
    import numpy as np

    lines = []
    for name in sorted(set(old) | set(new)):
        if name not in new:
            lines.append(f"output {name}: removed")
            continue
        if name not in old:
            lines.append(f"output {name}: added {new[name].dtype}{list(new[name].shape)}")
            continue
        a, b = old[name], new[name]
        if a.shape != b.shape or a.dtype != b.dtype:
            lines.append(f"output {name}: {a.dtype}{list(a.shape)} -> {b.dtype}{list(b.shape)}")
            continue
        if a.tobytes() == b.tobytes():
            continue
        diff = np.abs(a.astype(np.float64) - b.astype(np.float64))
        worst = np.unravel_index(int(np.nanargmax(diff)), diff.shape) if diff.size else ()
        lines.append(
            f"output {name}: {int(np.count_nonzero(diff))} of {diff.size} elements changed, "
            f"max |old - new| = {float(np.nanmax(diff)):.6g} at {tuple(int(i) for i in worst)}"
        )
    return lines


def _diff(
    old: Reference | None,
    old_error: str | None,
    manifest: dict[str, Any],
    outputs: dict[str, dict[str, Any]],
) -> list[str]:
    if old is None:
        return (
            [f"previous reference unreadable ({old_error}); it will be replaced"]
            if old_error
            else []
        )
    lines = []
    for case in sorted(set(old.cases) | set(manifest["cases"])):
        if case not in manifest["cases"]:
            lines.append(f"case {case}: removed")
            continue
        if case not in old.cases:
            lines.append(f"case {case}: added")
            continue
        if old.cases[case].get("input_sha256") != manifest["cases"][case]["input_sha256"]:
            lines.append(f"case {case}: input changed")
        try:
            previous = old.outputs(case)
        except DriftError as exc:
            lines.append(f"case {case}: previous outputs unreadable ({exc.message})")
            continue
        lines.extend(f"case {case}: {line}" for line in diff_outputs(previous, outputs[case]))
    if old.pins != manifest["pins"]:
        lines.append(
            f"pins: {json.dumps(old.pins, sort_keys=True)} -> "
            f"{json.dumps(manifest['pins'], sort_keys=True)}"
        )
    old_pkgs = old.provenance.get("packages", {})
    new_pkgs = manifest["provenance"].get("packages", {})
    for name in sorted(set(old_pkgs) | set(new_pkgs)):
        if old_pkgs.get(name) != new_pkgs.get(name):
            lines.append(f"provenance: {name} {old_pkgs.get(name)} -> {new_pkgs.get(name)}")
    old_git = (old.provenance.get("git") or {}).get("revision")
    new_git = (manifest["provenance"].get("git") or {}).get("revision")
    if old_git != new_git:
        lines.append(f"provenance: git revision {old_git} -> {new_git}")
    return lines


# --------------------------------------------------------------------------------------------
# Recording


@dataclass
class RecordResult:
    folder: Path
    manifest: dict[str, Any]
    diff: list[str]  # against the previous reference; empty when identical or none existed
    replaced: bool  # a previous reference existed
    written: bool  # False for a dry run
    warnings: list[str] = field(default_factory=list)  # e.g. an output that is NaN everywhere


def _all_nan(array: Any) -> bool:
    import numpy as np

    a = np.asarray(array)
    return a.size > 0 and a.dtype.kind in "fc" and bool(np.isnan(a).all())


@contextlib.contextmanager
def _lock(folder: Path) -> Iterator[None]:
    import fcntl

    folder.parent.mkdir(parents=True, exist_ok=True)
    lock_path = folder.parent / f".{folder.name}.lock"
    with open(lock_path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(
                "another record of this reference is running", where=str(folder)
            ) from None
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _case_line(spec: Spec, name: str) -> str:
    """``parity.toml:12`` where the spec's table of case ``name`` starts (the spec's path alone
    when the line cannot be found)."""
    import re

    pattern = re.compile(r"""^\s*\[\s*cases\s*\.\s*["']?""" + re.escape(name) + r"""["']?\s*\]""")
    try:
        lines = spec.path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        lines = []
    for number, line in enumerate(lines, 1):
        if pattern.match(line):
            return f"{spec.path}:{number}"
    return str(spec.path)


def _check_before_record(spec: Spec) -> None:
    for case in spec.cases.values():
        if not case.path.is_file():
            what = "is a folder, not a file" if case.path.is_dir() else "does not exist"
            raise InputError(
                f"cases.{case.name}: input file {case.path} {what}; nothing was recorded",
                where=_case_line(spec, case.name),
                hint=f"fix the case's path or create the file, then run "
                f"paritygate record {spec.path.name}",
            )
    problems = []
    for case in spec.cases.values():
        observed = case.observed_sha256() or "(missing)"
        if observed != case.sha256:
            problems.append(
                f"case {case.name}: input sha256 {observed[:12]}… differs from the pin "
                f"{case.sha256[:12]}…" + (f" ({case.pin_mismatch})" if case.sequence else "")
            )
    ref = spec.reference
    for package, pinned in ref.package_pins.items():
        holds, installed = check_package_pin(package, pinned)
        if not holds:
            problems.append(
                f"runner {ref.name}: package {package} pinned {pinned}, installed {installed}"
            )
    for rel, pinned, observed in check_file_pins(spec.root, ref.file_pins):
        problems.append(
            f"runner {ref.name}: file {rel} sha256 {observed and observed[:12]} differs from the "
            f"pin {pinned[:12]}…"
        )
    if problems:
        raise DriftError(
            "cannot record: " + "; ".join(problems),
            where=str(spec.path),
            hint="fix the pins in the spec or the environment, then record",
        )


def record(
    spec: Spec,
    *,
    dry_run: bool = False,
    progress: Callable[[str, int, int], None] | None = None,
    before_replace: Callable[[list[str]], bool] | None = None,
    execution: Any = None,
) -> RecordResult:
    """Run the reference on every case and write the reference atomically.

    ``execution`` (:func:`paritygate.execution.plan`; default: the spec's ``[execution]``) runs
    the cases serially, on a process pool or on Ray; the workers hand their outputs back and
    this process alone writes the reference.

    ``before_replace(diff)`` is called with the diff against the previous reference before it
    is replaced (only when one exists); returning False keeps the previous reference.

    Raises DriftError (case inputs or the reference's pins disagree with the spec), RecordError
    (the reference runner failed or produced an undeclared output). Nothing is overwritten then.
    """
    check_references_folder(spec)
    _check_before_record(spec)
    # One record at a time, from running the reference to the swap: a second one fails fast
    # instead of racing on the old reference or on importing the runner's modules.
    try:
        with _lock(spec.references):
            return _record_locked(
                spec,
                dry_run=dry_run,
                progress=progress,
                before_replace=before_replace,
                execution=execution,
            )
    except OSError as exc:  # the lock file, or reading the previous reference
        raise _write_failure(spec.references, exc, None, switched=False) from None


def _size(n: float) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _write_failure(
    folder: Path, exc: OSError, needed: int | None, *, switched: bool
) -> RecordError:
    """One line for an OSError while writing a reference: on a full disk, the folder and the
    space the record needs against what is free."""
    import errno

    kept = (
        "the new reference is in place"
        if switched
        else "nothing was replaced: the previous reference (if any) is unchanged"
    )
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        free = None
        probe = folder if folder.is_dir() else folder.parent
        with contextlib.suppress(OSError):
            free = shutil.disk_usage(probe).free
        need = f"about {_size(needed)}" if needed is not None else "more space"
        have = f", {_size(free)} free" if free is not None else ""
        return RecordError(
            f"no space left to write the reference: this record needs {need}{have}; {kept}",
            where=str(folder),
            hint="free space on that filesystem or point `references` elsewhere, then record again",
        )
    name = f" {exc.filename}" if exc.filename else ""
    return RecordError(
        f"cannot record the reference:{name}: {exc.strerror or exc}; {kept}",
        where=str(folder),
    )


def _record_locked(
    spec: Spec,
    *,
    dry_run: bool,
    progress: Callable[[str, int, int], None] | None,
    before_replace: Callable[[list[str]], bool] | None,
    execution: Any,
) -> RecordResult:
    from .approximation import CALLS_PREFIX
    from .execution import execute, plan
    from .runners import RunResult

    folder = spec.references
    runner = spec.reference
    outputs: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    warnings: list[str] = []
    chosen = execution if execution is not None else plan(spec)
    executed = execute(
        spec, [runner.name], list(spec.cases), chosen, progress=progress, stop_on_failure=True
    )
    try:
        if runner.name in executed.activation:
            raise executed.activation[runner.name]
        for case in spec.cases.values():
            outcome = executed.outcomes.get((runner.name, case.name))
            if outcome is None:  # not run: an earlier case failed, and that failure is raised
                continue
            if outcome.failure is not None:
                raise outcome.failure
            result = RunResult(outcome.outputs or {}, outcome.seconds, outcome.stderr)
            if case.observed_sha256() != case.sha256:
                raise RecordError(
                    f"reference runner {runner.name} modified the input file {case.path} of "
                    f"case {case.name} during its run (it no longer matches its sha256 pin); "
                    "nothing was written",
                    where=str(spec.path),
                    hint="a runner must not write to its case files: restore the file",
                )
            # Calls paritygate counted for an activity band are evidence of a run, not outputs.
            result.outputs = {
                k: v for k, v in result.outputs.items() if not k.startswith(CALLS_PREFIX)
            }
            undeclared = [name for name in result.outputs if not spec.declared(name)]
            if undeclared:
                raise RecordError(
                    f"reference runner {runner.name} produced outputs not declared in the spec's "
                    f"outputs: {', '.join(undeclared)}",
                    where=str(spec.path),
                )
            missing = spec.not_produced(result.outputs)
            if missing:
                raise RecordError(
                    f"reference runner {runner.name} did not produce the declared output(s) "
                    f"{', '.join(map(repr, missing))} on case {case.name}: a declared output "
                    "nothing produces would never be compared",
                    where=str(spec.path),
                )
            outputs[case.name] = result.outputs
            seconds[case.name] = result.seconds
            warnings.extend(
                f"case {case.name}: reference output {name!r} is NaN everywhere "
                f"({getattr(array, 'size', 0)} element(s)); a claim on it compares nothing useful"
                for name, array in sorted(result.outputs.items())
                if _all_nan(array)
            )
    except RunFailure as exc:
        raise RecordError(
            f"the reference failed, nothing was written: {exc.describe()}", where=str(spec.path)
        ) from None

    old: Reference | None = None
    old_error = None
    if (folder / MANIFEST).exists():
        try:
            old = load_reference(spec)
        except DriftError as exc:
            old_error = exc.message

    # What the record writes: the arrays, their safetensors headers and the manifest (a bound
    # reported on a full disk, never a promise).
    needed = sum(
        int(getattr(a, "nbytes", 0)) + 256 for tree in outputs.values() for a in tree.values()
    ) + 4096 * (len(outputs) + 2)
    state = {"switched": False}
    try:
        return _write_version(
            spec, folder, old, old_error, outputs, seconds, warnings, dry_run, before_replace, state
        )
    except OSError as exc:
        raise _write_failure(folder, exc, needed, switched=state["switched"]) from None


def _write_version(
    spec: Spec,
    folder: Path,
    old: Reference | None,
    old_error: str | None,
    outputs: dict[str, dict[str, Any]],
    seconds: dict[str, float],
    warnings: list[str],
    dry_run: bool,
    before_replace: Callable[[list[str]], bool] | None,
    state: dict[str, bool],
) -> RecordResult:
    """Write the outputs into a new version folder and switch the manifest to it; on any
    failure before the switch, remove what was written (the previous reference is untouched)."""
    _clean_leftovers(folder, old)
    folder.mkdir(parents=True, exist_ok=True)
    staging = staging_folder(folder, "v-tmp-")
    version = staging
    switched = False
    try:
        _hook("staging-created")
        manifest = _write(spec, staging, outputs, seconds)
        # The version folder is named by its content: identical outputs record to identical
        # names and bytes (a re-record that changed nothing changes nothing in git).
        content = hashlib.sha256(
            json.dumps(manifest["files"], sort_keys=True).encode("utf-8")
        ).hexdigest()
        version = folder / f"v-{content[:16]}"
        _prefix(manifest, version.name + "/")
        diff = _diff(old, old_error, manifest, outputs)
        replaced = old is not None or old_error is not None
        if dry_run:
            return RecordResult(folder, manifest, diff, replaced, False, warnings)
        if replaced and before_replace is not None and not before_replace(diff):
            return RecordResult(folder, manifest, diff, False, False, warnings)
        if version.is_dir() and _holds(folder, manifest["files"]):
            shutil.rmtree(staging)  # the same content is already there
        else:
            if version.is_dir():
                # A folder of this name whose files were tampered with (changed, removed,
                # replaced by links): set it aside (removed below) and put the fresh files in.
                aside = Path(tempfile.mkdtemp(dir=folder, prefix="v-tmp-"))
                os.rename(version, aside / version.name)
                shutil.rmtree(aside, ignore_errors=True)
            os.rename(staging, version)
        _hook("before-switch")
        # The switch is one atomic step: the manifest (the pointer to this version's files) is
        # replaced by a rename. A reader sees the old reference or the new one, never neither.
        atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        switched = state["switched"] = True
        fsync_folder(folder)
        _hook("after-switch")
        # The version just replaced stays until the next record: a gate or verify that read the
        # old manifest before the switch finishes on the files it points to.
        previous = {rel.split("/", 1)[0] for rel in (old.files if old else {}) if "/" in rel}
        _clean_leftovers(folder, None, keep={version.name, *previous})
        warnings.extend(
            f"{folder / rel}: {stray_detail(folder)}; verify reports it as drift until then"
            for rel in unlisted_files(folder, manifest["files"])
        )
        return RecordResult(folder, manifest, diff, replaced, True, warnings)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        if not switched and version != staging:
            pointed = {rel.split("/", 1)[0] for rel in old.files if "/" in rel} if old else set()
            if version.name not in pointed:
                shutil.rmtree(version, ignore_errors=True)


def _holds(folder: Path, files: dict[str, str]) -> bool:
    """Whether every file of a manifest is in ``folder`` as recorded: a regular file (no link)
    with the recorded sha256."""
    for rel, digest in files.items():
        path = folder / rel
        if path.is_symlink() or not path.is_file():
            return False
        try:
            if sha256_file(path) != digest:
                return False
        except InputError:
            return False
    return True


def _prefix(manifest: dict[str, Any], prefix: str) -> None:
    """Point the manifest's files into the version folder ``prefix`` and seal it (digest)."""
    manifest["files"] = {prefix + rel: digest for rel, digest in manifest["files"].items()}
    for entry in manifest["cases"].values():
        entry["file"] = prefix + entry["file"]
    manifest["digest"] = manifest_digest(manifest)


# A test-only hook: PARITYGATE_RECORD_FAULT=<step> makes record kill its own process (SIGKILL)
# at that write step, so the fault suite can show every step leaves a readable reference.
_FAULT_ENV = "PARITYGATE_RECORD_FAULT"


def _hook(step: str) -> None:
    if os.environ.get(_FAULT_ENV) == step:
        import signal

        os.kill(os.getpid(), signal.SIGKILL)


def _clean_leftovers(folder: Path, current: Reference | None, keep: set[str] | None = None) -> None:
    """Remove what interrupted records left (under the record lock): the temporary and retired
    folders of the former swap (``.references.tmp-*``, ``.references.old-*``), unfinished
    manifests, and every version folder the manifest does not point into."""
    for pattern in (f".{folder.name}.tmp-*", f".{folder.name}.old-*"):
        for path in folder.parent.glob(pattern):
            shutil.rmtree(path, ignore_errors=True)
    if not folder.is_dir():
        return
    if keep is None and current is None and (folder / MANIFEST).exists():
        return  # an unreadable manifest: leave its files for the diff and the user
    pointed: set[str] = set()
    if keep is not None:
        pointed |= keep
    elif current is not None:
        pointed = {rel.split("/", 1)[0] for rel in current.files if "/" in rel}
    for path in folder.iterdir():
        if path.name.startswith(f".{MANIFEST}.") and path.name.endswith(".tmp"):
            path.unlink(missing_ok=True)
        elif path.is_dir() and (path.name == "outputs" or path.name.startswith("v-")):
            if path.name not in pointed:
                shutil.rmtree(path, ignore_errors=True)


def _write(
    spec: Spec, tmp: Path, outputs: dict[str, dict[str, Any]], seconds: dict[str, float]
) -> dict[str, Any]:
    """Write the outputs into ``tmp`` (a version folder of the reference) and return the
    manifest, its file names relative to that folder (see :func:`_prefix`)."""
    import numpy as np

    (tmp / "outputs").mkdir()  # the mode a plain mkdir gives, as its parent has
    files: dict[str, str] = {}
    cases: dict[str, Any] = {}
    for case_name, tree in outputs.items():
        rel = f"outputs/{case_name}.safetensors"
        tensors = {name: np.ascontiguousarray(array) for name, array in tree.items()}
        try:
            # One metadata key holding sorted JSON: safetensors writes several keys in hash order,
            # which would give identical outputs different bytes (and sha256) on every record.
            info = json.dumps(
                {"format": FORMAT, "format_version": FORMAT_VERSION, "case": case_name},
                sort_keys=True,
            )
            # Written atomically and fsynced, with the permissions a plain open() gives.
            save_outputs(tmp / rel, tensors, metadata={"paritygate": info})
        except InputError as exc:  # e.g. a dtype safetensors cannot store
            raise RecordError(
                f"cannot store the outputs of case {case_name} as safetensors: {exc.message}"
            ) from None
        _hook("output-written")
        files[rel] = sha256_file(tmp / rel)
        case = spec.cases[case_name]
        cases[case_name] = {
            "input_sha256": case.sha256,
            "input": str(case.path.relative_to(spec.root)),
            "file": rel,
            "seconds": round(seconds[case_name], 6),
            "outputs": {
                name: {"dtype": str(a.dtype), "shape": list(a.shape)}
                for name, a in sorted(tree.items())
            },
        }
    runner = spec.reference
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "created": utc_now(),
        "spec": spec.path.name,
        "runner": runner.name,
        "files": files,
        "cases": cases,
        "pins": {"runner": runner.pins, "spec": spec.pins},
        "provenance": capture(root=spec.root, runner=runner, spec_pins=spec.pins),
    }
    return manifest
