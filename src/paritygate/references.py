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
next record, so that a gate that read the old manifest before the switch finishes on its files;
version folders the manifest does not point into are not part of the reference (``verify``
ignores them). Before the old reference is replaced,
:func:`record` computes a diff against it.

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
from .files import atomic_write_text, load_outputs, save_outputs, sha256_file
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


def _umask() -> int:
    # mkstemp/mkdtemp create private files; the final reference gets the usual permissions.
    mask = os.umask(0)
    os.umask(mask)
    return mask


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


def load_reference(spec: Spec, folder: Path | None = None) -> Reference:
    """Read a reference's manifest. Another format version, a damaged or hand-edited manifest
    raise DriftError; a missing reference raises DriftError with the hint to record one."""
    folder = Path(folder or spec.references)
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
    return loader(folder, manifest)


def case_input_drift(case: Case, reference: Reference | None) -> list[DriftItem]:
    """What shifted under one case: its input file against its sha256 pin and, with a
    reference, the input the reference recorded for it (empty: nothing shifted)."""
    drift = []
    if not case.path.is_file():
        drift.append(
            DriftItem(
                "case-input", case.name, case.sha256, None, f"input file {case.path} is missing"
            )
        )
    else:
        observed = sha256_file(case.path)
        if observed != case.sha256:
            drift.append(
                DriftItem(
                    "case-input", case.name, case.sha256, observed, "input differs from its pin"
                )
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


def _check_before_record(spec: Spec) -> None:
    problems = []
    for case in spec.cases.values():
        if not case.path.is_file():
            problems.append(f"case {case.name}: input file {case.path} is missing")
            continue
        observed = sha256_file(case.path)
        if observed != case.sha256:
            problems.append(
                f"case {case.name}: input sha256 {observed[:12]}… differs from the pin "
                f"{case.sha256[:12]}…"
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
) -> RecordResult:
    """Run the reference on every case and write the reference atomically.

    ``before_replace(diff)`` is called with the diff against the previous reference before it
    is replaced (only when one exists); returning False keeps the previous reference.

    Raises DriftError (case inputs or the reference's pins disagree with the spec), RecordError
    (the reference runner failed or produced an undeclared output). Nothing is overwritten then.
    """
    _check_before_record(spec)
    # One record at a time, from running the reference to the swap: a second one fails fast
    # instead of racing on the old reference or on importing the runner's modules.
    with _lock(spec.references):
        return _record_locked(
            spec, dry_run=dry_run, progress=progress, before_replace=before_replace
        )


def _record_locked(
    spec: Spec,
    *,
    dry_run: bool,
    progress: Callable[[str, int, int], None] | None,
    before_replace: Callable[[list[str]], bool] | None,
) -> RecordResult:
    from .approximation import CALLS_PREFIX
    from .runners import make_runner

    folder = spec.references
    runner = spec.reference
    outputs: dict[str, dict[str, Any]] = {}
    seconds: dict[str, float] = {}
    warnings: list[str] = []
    active = make_runner(runner, spec)
    try:
        active.activate()
        for i, case in enumerate(spec.cases.values()):
            if progress:
                progress(case.name, i, len(spec.cases))
            result = active.run(case)
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
        if progress:
            progress("", len(spec.cases), len(spec.cases))
    except RunFailure as exc:
        raise RecordError(
            f"the reference failed, nothing was written: {exc.describe()}", where=str(spec.path)
        ) from None
    finally:
        active.deactivate()

    old: Reference | None = None
    old_error = None
    if (folder / MANIFEST).exists():
        try:
            old = load_reference(spec)
        except DriftError as exc:
            old_error = exc.message

    _clean_leftovers(folder, old)
    folder.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=folder, prefix="v-tmp-"))
    version = staging
    switched = False
    try:
        os.chmod(staging, 0o777 & ~_umask())
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
        if version.is_dir():
            shutil.rmtree(staging)  # the same content is already there
        else:
            os.rename(staging, version)
        _hook("before-switch")
        # The switch is one atomic step: the manifest (the pointer to this version's files) is
        # replaced by a rename. A reader sees the old reference or the new one, never neither.
        atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        switched = True
        _fsync_folder(folder)
        _hook("after-switch")
        # The version just replaced stays until the next record: a gate or verify that read the
        # old manifest before the switch finishes on the files it points to.
        previous = {rel.split("/", 1)[0] for rel in (old.files if old else {}) if "/" in rel}
        _clean_leftovers(folder, None, keep={version.name, *previous})
        return RecordResult(folder, manifest, diff, replaced, True, warnings)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
        if not switched and version != staging and old is not None:
            pointed = {rel.split("/", 1)[0] for rel in old.files if "/" in rel}
            if version.name not in pointed:
                shutil.rmtree(version, ignore_errors=True)


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


def _fsync_folder(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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

    (tmp / "outputs").mkdir()
    os.chmod(tmp / "outputs", 0o777 & ~_umask())
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
