"""The drift oracle: did a pinned artifact or the environment change?

``verify`` checks, without running any model:

- the reference's files against the sha256 in its manifest (and the manifest's own digest and
  format version);
- every case input against its sha256 pin, and the pins the reference was recorded with;
- the reference's pins in the spec against the pins and provenance it was recorded with (so in
  stored mode the reference framework need not even be installed);
- the pins of every runner that will run (packages, files) against the current environment.

Each shift is a :class:`~paritygate.results.DriftItem` (exit 3). Differences in provenance that
nothing pins (another numpy, another CPU) are information, not drift. A drift verdict says
"something shifted; re-record deliberately", never "the candidate is wrong".
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .errors import DriftError
from .files import sha256_file
from .provenance import capture, check_file_pins, check_package_pin, describe_cpu
from .references import (
    MANIFEST,
    Reference,
    case_input_drift,
    load_reference,
    outside_link,
    stray_detail,
    unlisted_files,
)
from .results import DriftItem, GateResult
from .spec import Spec

__all__ = ["VerifyResult", "verify", "runners_that_run", "check_input_after_run"]


@dataclass
class VerifyResult:
    drift: list[DriftItem] = field(default_factory=list)
    info: list[str] = field(default_factory=list)  # unpinned provenance differences
    reference: Reference | None = None

    @property
    def passed(self) -> bool:
        return not self.drift

    def __bool__(self) -> bool:
        return self.passed

    @property
    def exit_code(self) -> int:
        return 3 if self.drift else 0

    def describe(self) -> list[str]:
        lines = []
        for item in self.drift:
            text = f"{item.kind}: {item.subject}"
            if item.expected is not None or item.observed is not None:
                text += f": expected {item.expected}, found {item.observed}"
            if item.detail:
                text += f" ({item.detail})"
            lines.append(text)
        return lines


def runners_that_run(spec: Spec, claim_ids: Iterable[str] | None = None) -> list[str]:
    """Names of the runners a gate run will execute: the claims' candidates and their adapters,
    plus the reference when a paired claim is among them."""
    claims = (
        [spec.claims[c] for c in claim_ids] if claim_ids is not None else list(spec.claims.values())
    )
    names: list[str] = []
    if any(c.mode == "paired" for c in claims):
        names.append(spec.reference.name)
    for claim in claims:
        for candidate in claim.candidates:
            for name in [candidate, *(a.name for a in spec.adapters_of(candidate))]:
                if name not in names:
                    names.append(name)
    return names


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> dict[str, Any]:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value
    return out


def _show(value: Any) -> str | None:
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True)


def _pin_drift(subject: str, pinned: dict[str, Any], recorded: dict[str, Any]) -> list[DriftItem]:
    items = []
    flat_pinned, flat_recorded = _flat("", pinned, {}), _flat("", recorded, {})
    for key in sorted(set(flat_pinned) | set(flat_recorded)):
        if flat_pinned.get(key) != flat_recorded.get(key):
            items.append(
                DriftItem(
                    kind="pin",
                    subject=f"{subject}: {key}",
                    expected=_show(flat_pinned.get(key)),
                    observed=_show(flat_recorded.get(key)),
                    detail="the spec pins a value the reference was not recorded with",
                )
            )
    return items


def verify(
    spec: Spec, *, runners: Iterable[str] | None = None, cases: Iterable[str] | None = None
) -> VerifyResult:
    """Check every pin (see the module docstring). ``runners``: the runners that will run (their
    environment pins are checked); default: every candidate and adapter. ``cases``: the cases to
    check (default: all)."""
    result = VerifyResult()
    drift = result.drift
    case_names = list(cases) if cases is not None else list(spec.cases)
    will_run = (
        list(runners)
        if runners is not None
        else [r.name for r in spec.runners.values() if r.role != "reference"]
    )

    # -- the reference on disk ------------------------------------------------------------
    # A record switches references by replacing the manifest atomically: when files go missing
    # under the manifest read, and the manifest on disk is no longer that one, the check runs
    # again on the new one (a concurrent record is not drift).
    for _attempt in range(3):
        reference, found = _check_reference(spec)
        if not found or reference is None or not _manifest_moved(spec, reference):
            break
    drift.extend(found)
    result.reference = reference

    # -- case inputs ----------------------------------------------------------------------
    for name in case_names:
        drift.extend(case_input_drift(spec.cases[name], reference))
    if reference is not None:
        for name in sorted(set(reference.cases) - set(spec.cases)):
            result.info.append(
                f"the reference also holds case {name}, which the spec no longer lists"
            )

    # -- the reference's pins against what it was recorded with ----------------------------
    ref_runner = spec.reference
    if reference is not None:
        recorded_pins = reference.pins
        drift.extend(
            _pin_drift(
                f"runner {ref_runner.name}", ref_runner.pins, recorded_pins.get("runner", {})
            )
        )
        drift.extend(_pin_drift("spec pins", spec.pins, recorded_pins.get("spec", {})))
        recorded_packages = reference.provenance.get("packages", {})
        for package, pinned in ref_runner.package_pins.items():
            holds, installed = check_package_pin(package, pinned, recorded_packages.get(package))
            if not holds:
                drift.append(
                    DriftItem(
                        "pin",
                        f"runner {ref_runner.name}: package {package} (recorded)",
                        pinned,
                        recorded_packages.get(package),
                        "the reference was recorded with another version",
                    )
                )

    # -- runners that will run, against this environment ------------------------------------
    for name in will_run:
        runner = spec.runners[name]
        for package, pinned in runner.package_pins.items():
            holds, installed = check_package_pin(package, pinned)
            if not holds:
                drift.append(
                    DriftItem(
                        "environment",
                        f"runner {name}: package {package}",
                        pinned,
                        installed,
                        "installed version does not satisfy the pin",
                    )
                )
        for rel, pinned, observed in check_file_pins(spec.root, runner.file_pins):
            drift.append(
                DriftItem(
                    "environment",
                    f"runner {name}: file {rel}",
                    pinned,
                    observed,
                    "file is missing" if observed is None else "file differs from its pin",
                )
            )

    # -- unpinned provenance differences: information only ----------------------------------
    if reference is not None:
        result.info.extend(
            _unpinned(
                reference.provenance,
                capture(root=spec.root, runner=ref_runner, spec_pins=spec.pins),
                pinned=set(ref_runner.package_pins),
            )
        )
    return result


def _cpu_line(recorded: dict[str, Any], current: dict[str, Any]) -> str | None:
    """'cpu: recorded on AMD EPYC (avx2), running on Intel Xeon (avx512) ...' when the CPU, its
    vendor or the SIMD level the frameworks dispatch to differ; None when they agree.

    The CPU decides how framework kernels round (torch's ATen, oneDNN and MKL, ONNX Runtime's
    MLAS dispatch by instruction set and vendor), so a reference replayed on another CPU family
    can differ in the last bits of float outputs. Information, never drift: a claim whose basis
    covers that spread still holds, and one that does not fails on its own evidence."""
    old_info, new_info = recorded.get("cpu_info") or {}, current.get("cpu_info") or {}
    old_name = describe_cpu(old_info, recorded.get("cpu"))
    new_name = describe_cpu(new_info, current.get("cpu")) or "an unknown CPU"
    if old_name is None:
        return (
            f"cpu: recorded CPU unknown (the reference predates CPU provenance), running on "
            f"{new_name} (not pinned)"
        )
    keys = ("vendor", "isa")
    same_model = (old_info.get("model") or recorded.get("cpu")) == (
        new_info.get("model") or current.get("cpu")
    )
    if same_model and all(
        old_info.get(k) == new_info.get(k) for k in keys if old_info.get(k) is not None
    ):
        return None
    if not old_info:
        old_name += " (vendor and instruction set not recorded)"
    return (
        f"cpu: recorded on {old_name}, running on {new_name} (not pinned; framework kernels "
        "may round differently on another CPU family or instruction set)"
    )


def _dispatch_line(recorded: dict[str, Any], current: dict[str, Any]) -> str | None:
    """The SIMD level a framework dispatched to, or a variable forcing one, when it differs
    (a forced ATEN_CPU_CAPABILITY on the recording machine rounds like another CPU)."""
    old = (recorded.get("cpu_info") or {}).get("dispatch") or {}
    new = (current.get("cpu_info") or {}).get("dispatch") or {}
    keys = sorted(
        k for k in set(old) | set(new) if (k in old and k in new) or k.upper() == k
    )  # framework levels only where both sides read them; variables whenever set
    changed = [k for k in keys if old.get(k) != new.get(k)]
    if not changed:
        return None
    then = ", ".join(f"{k} {old.get(k)}" for k in changed)
    now = ", ".join(f"{k} {new.get(k)}" for k in changed)
    return f"cpu dispatch: recorded {then}; now {now} (not pinned)"


def _unpinned(recorded: dict[str, Any], current: dict[str, Any], *, pinned: set[str]) -> list[str]:
    lines = []
    old, new = recorded.get("packages", {}), current.get("packages", {})
    for name in sorted(set(old) | set(new)):
        if name not in pinned and old.get(name) != new.get(name):
            lines.append(
                f"package {name}: recorded {old.get(name)}, now {new.get(name)} (not pinned)"
            )
    lines.extend(
        line for line in (_cpu_line(recorded, current), _dispatch_line(recorded, current)) if line
    )
    for key, label in (("python", "python"), ("os", "os"), ("gpu", "gpu")):
        if recorded.get(key) != current.get(key):
            then, now = _show(recorded.get(key)), _show(current.get(key))
            lines.append(f"{label}: recorded {then}, now {now} (not pinned)")
    old_git, new_git = recorded.get("git") or {}, current.get("git") or {}
    if (old_git.get("revision"), old_git.get("dirty")) != (
        new_git.get("revision"),
        new_git.get("dirty"),
    ):
        then = f"{old_git.get('revision')}{' (dirty)' if old_git.get('dirty') else ''}"
        now = f"{new_git.get('revision')}{' (dirty)' if new_git.get('dirty') else ''}"
        lines.append(f"git: recorded {then}, now {now} (not pinned)")
    return lines


def _manifest_moved(spec: Spec, reference: Reference) -> bool:
    from .references import MANIFEST as NAME

    try:
        on_disk = json.loads((spec.references / NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True
    return not isinstance(on_disk, dict) or on_disk.get("digest") != reference.manifest.get(
        "digest"
    )


def _check_reference(spec: Spec) -> tuple[Reference | None, list[DriftItem]]:
    """The reference's manifest and files against their sha256; files outside the folders the
    manifest points into (a version a record is writing, or one it is retiring) are not part of
    the reference and are not checked."""
    drift: list[DriftItem] = []
    reference: Reference | None = None
    try:
        reference = load_reference(spec)
    except DriftError as exc:
        kind = (
            "reference-missing" if "no reference recorded" in exc.message else "reference-manifest"
        )
        drift.append(DriftItem(kind, str(spec.references / MANIFEST), None, None, exc.message))
        return None, drift
    folder = reference.folder
    for rel, digest in sorted(reference.files.items()):
        path = folder / rel
        escape = outside_link(path, spec.root)
        if escape is not None:
            drift.append(
                DriftItem(
                    "reference-file",
                    rel,
                    digest,
                    None,
                    f"file is a symbolic link to {escape}, outside the spec's folder; a recorded "
                    "file is never a link (the reference was tampered with)",
                )
            )
            continue
        if not path.is_file():
            drift.append(DriftItem("reference-file", rel, digest, None, "file is missing"))
            continue
        observed = sha256_file(path)
        if observed != digest:
            drift.append(
                DriftItem(
                    "reference-file", rel, digest, observed, "file changed since it was recorded"
                )
            )
    for rel in unlisted_files(folder, reference.files):
        path = folder / rel
        escape = outside_link(path, spec.root)
        observed = None if escape is not None or not path.is_file() else sha256_file(path)
        drift.append(DriftItem("reference-file", rel, None, observed, stray_detail(folder)))
    return reference, drift


def check_input_after_run(spec: Spec, case: str, who: str, result: GateResult) -> bool:
    """The case's input checked against its sha256 pin after a run as well as before: a runner
    that edits its own input would pass on what it wrote and leave the next gate to drift. A
    modified input is drift on that case (exit 3), once per case; returns True when it held."""
    path = spec.cases[case].path
    observed = spec.cases[case].observed_sha256()
    if observed == spec.cases[case].sha256:
        return True
    if not any(d.kind == "case-input" and d.subject == case for d in result.drift):
        result.drift.append(
            DriftItem(
                "case-input",
                case,
                spec.cases[case].sha256,
                observed,
                f"{who} modified the input file {path} during its run "
                f"({'deleted it' if observed is None else 'it no longer matches its pin'}); "
                "a runner must not write to its case files: restore the file",
            )
        )
    return False
