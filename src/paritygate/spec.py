"""The parity spec: one TOML file that declares cases, runners, pins and claims.

A spec is a standalone file (e.g. ``parity.toml``) or the ``[tool.paritygate]`` table of a
``pyproject.toml``. It is read with :mod:`tomllib`, validated against the schema below, and every
error names the file, the key and what was expected. Unknown keys are rejected (a typo in a bound's
key must not silently leave the claim unenforced). Every path is relative to the spec's folder and
may not leave it. The loaded :class:`Spec` keeps its source path and the table prefix, and claims
are keyed by id (``[claims.<id>]``), so tools that later edit the spec (calibration writing bounds)
address the same keys with tomlkit and keep comments and layout: see :func:`update_claim`.

The format is documented in ``docs/spec.md``.
"""

from __future__ import annotations

import fnmatch
import math
import re
import shlex
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import claim_metrics
from ._dtypes import ML_DTYPES_NAMES
from .approximation import ActivityBand
from .errors import SpecError
from .files import (
    atomic_write_bytes,
    atomic_write_text,
    check_nesting,
    load_case,
    read_text,
    sha256_file,
)
from .seeded import GENERATED_FOLDER, Generation

__all__ = [
    "SPEC_FORMAT_VERSION",
    "READABLE_SPEC_VERSIONS",
    "METRICS",
    "Case",
    "OutputMap",
    "Runner",
    "Claim",
    "HardwareClass",
    "Spec",
    "Execution",
    "ENGINES",
    "load_spec",
    "find_spec",
    "update_claim",
    "parse_slice",
    "NOOP_STORED_REASON",
    "did_you_mean",
    "spec_from_text",
    "default_reports",
    "RESET",
    "sequence_sha256",
]

# Where a spec's reports go when it names no ``reports`` folder: one folder per spec file under
# parity-reports/, so that two specs of one project (parity.toml, parity-gpu.toml) never
# overwrite each other's reports. (Before, every spec wrote parity-reports/ itself; a spec
# that sets ``reports = "parity-reports"`` still does.)
REPORTS_ROOT = "parity-reports"


def default_reports(spec_path: Path) -> str:
    """The default ``reports`` folder of the spec read from ``spec_path``, relative to its
    folder: ``parity-reports/<file stem>`` (``parity-reports/parity`` for parity.toml,
    ``parity-reports/pyproject`` for a spec in pyproject.toml)."""
    return f"{REPORTS_ROOT}/{Path(spec_path).stem}"


# Spec format history (a spec names its version in ``format_version``):
#   1  the first format.
#   2  every declared output must be covered by a claim or waived with a reason in
#      ``[waived]`` (output name or glob -> reason). Migration: a version-1 spec still loads
#      when every declared output is covered; one that declares an output no claim covers is
#      refused naming it, and adding a claim or a ``[waived]`` entry (with format_version = 2)
#      fixes it.
#   3  activity bands count calls themselves: ``activity = { calls = "module:Class.method",
#      measure = "calls" | "skipped", min, max, differ }``. A counter the candidate reports about
#      itself (``counter = "..."``, formats 1-2) is refused as activity evidence. Migration: name
#      the callable the optimization skips (the transformer body) in ``calls``, with
#      ``measure = "skipped"`` for a skip band, and set format_version = 3.
#   4  in-process runners may name factory options that are paths: ``paths = ["weights"]``;
#      they resolve against the spec's folder (not the working folder) and reach the factory
#      as absolute paths. Migration: none for specs without ``paths`` (formats 1-3 load as
#      before); a spec using ``paths`` sets format_version = 4.
#   5  ``[benchmarks.NAME]`` tables (run by ``paritygate bench run``; docs/bench.md) and the
#      speed-claim params ``budget`` (seconds) and ``threshold``. Migration: none; formats 1-4
#      load as before (speed claims of formats 1-4 may already name budget and threshold); a
#      spec with ``[benchmarks]`` sets format_version = 5.
#   6  generated (seeded) cases: ``[cases.x] generate = { shape, dtype, distribution, seed, ... }``
#      (or ``generator = "module:function"``) with ``sha256`` pinning the generated file, and
#      ``sweep = { axis, values }`` for one case per length (``x.1``, ``x.2``; ``sha256`` is then
#      a list, one pin per value); see :mod:`paritygate.seeded`. And ``[locate]`` (``map``:
#      name rules from the candidate's module tree to the reference's; ``noise_from``: a runner
#      for calibrated per-layer bounds), read by :mod:`paritygate.locate`. Migration: none;
#      formats 1-5 load as before; a spec with a generated case or [locate] sets
#      format_version = 6.
#   7  a ``[locate] map`` rule may take ``slice`` (a numpy basic index of the candidate's
#      activation, as in an output map) or ``reference_slice`` (of the reference's): the rules
#      of a fused projection map its parts to the other side's separate ones. Migration: none;
#      formats 1-6 load as before; a spec whose locate rule takes either sets format_version = 7.
#   8  scale-out (docs/scale-out.md): an ``[execution]`` table (``engine = "serial" | "pool" |
#      "ray"``, ``jobs`` (a number or "auto"), ``retries`` (a unit whose worker died runs again
#      that many times), ``address`` (a Ray cluster)), and per runner ``threads`` (the BLAS /
#      OpenMP threads one run uses, what ``--jobs auto`` divides the cores by) and ``resources``
#      (``num_cpus``, ``num_gpus``, ``memory`` and custom resources naming a hardware class, asked
#      of Ray for the runner's actors). Migration: none; formats 1-7 load as before and run
#      serially unless the command line asks for ``--jobs`` or ``--ray``; a spec with
#      ``[execution]``, ``threads`` or ``resources`` sets format_version = 8.
#   9  the dataset claim ``accuracy_noninferiority`` (a quantized or otherwise approximate model
#      gated as not worse than the reference by more than a margin: the bound is minus the
#      margin, the observed value the one-sided lower confidence bound of the paired accuracy
#      difference) and its params ``confidence``, ``resamples`` and ``seed``. Migration: none;
#      formats 1-8 load as before; a spec with such a claim sets format_version = 9.
#  10  call-sequence cases: ``[cases.x] sequence = ["a", "reset", "b"]`` (member cases of the
#      spec and the switch ``"reset"``), run on one active runner in order, the outputs the last
#      member's; ``sha256`` pins the members' names, pins and order (:func:`sequence_sha256`).
#      Written by ``paritygate cases add --sweep T:after=O[,reset=true]``. Migration: none;
#      formats 1-9 load as before; a spec with a sequence case sets format_version = 10.
SPEC_FORMAT_VERSION = 10
READABLE_SPEC_VERSIONS = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
#: The switch of a call-sequence case between two calls: the runner's ``reset()``.
RESET = "reset"

# metric -> (scope, direction), read live from the claim-metric registry. "max": observed must
# be <= bound; "min": observed must be >= bound.
METRICS: Mapping[str, tuple[str, str]] = claim_metrics.MetricView(lambda m: (m.scope, m.direction))
SCOPES = claim_metrics.SCOPES
# Why a metric's required parameter is never guessed (the message of a claim without it).
_REQUIRED_PARAM_REASONS = {
    "data_range": "{metric} needs the images' data range (255 for uint8 pixels, 1.0 for [0, 1]); "
    "it is never guessed",
}
ORACLES = ("drift", "no-op", "equivalence", "approximation")
MODES = ("stored", "paired")
STATUSES = ("calibrated", "provisional")
ROLES = ("reference", "candidate", "adapter")
OUTPUT_FORMATS = ("json", "npz", "safetensors")
PASS_STYLES = ("case", "path", "inputs")
ENGINES = ("serial", "pool", "ray")

NOOP_STORED_REASON = (
    "a no-op claim is byte equality between the baseline and the candidate, and byte equality "
    "holds only between two paths run back to back in one process: a stored golden file records "
    "the script that made it, not only the math (the callback class, the process structure, the "
    "library versions), so it fails for reasons unrelated to the candidate and passes by luck. "
    'Use mode = "paired"'
)

# A file pin naming a file inside an installed package: "package:silero_vad/data/model.onnx".
PACKAGE_PIN_PREFIX = "package:"

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def sequence_sha256(steps: Iterable[Any]) -> str:
    """The pin of a call-sequence case: the sha256 of the canonical JSON (compact, UTF-8) of its
    steps, ``[member, member's sha256]`` per call and ``"reset"`` per switch, in order."""
    import hashlib
    import json

    text = json.dumps(list(steps), separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """ " (did you mean 'x'?)" for the closest choice (difflib), or an empty string."""
    import difflib

    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _pin_hint(path: Path) -> str:
    """The pin a case file would get, for the error that asks for it."""
    if not path.is_file():
        return f" (and {path} does not exist)"
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return (
        f'; pin the file as it is now with sha256 = "{digest.hexdigest()}" (check the file '
        "first), or pin cases with `paritygate cases add`"
    )


# --------------------------------------------------------------------------------------------
# Data model


@dataclass(frozen=True)
class Case:
    """One canonical input, pinned by sha256. ``labels`` feed dataset-level claims."""

    name: str
    path: Path  # absolute (a generated case: the file its input was written to)
    sha256: str
    labels: dict[str, Any] = field(default_factory=dict)
    # A generated case's declaration (format 6, :mod:`paritygate.seeded`); None for a file.
    generated: Generation | None = None
    # A call-sequence case (format 10): its member cases in call order, None for a reset; its
    # path is the last member's, its sha256 the pin of :func:`sequence_sha256`.
    sequence: tuple[Case | None, ...] = ()

    def steps(self, pins: bool = True) -> list[Any]:
        """A sequence's steps as pinned: ``[name, sha256]`` per member (``pins=False``: the
        member's input as it is now, None when its file is missing) and ``"reset"``."""
        return [
            RESET if m is None else [m.name, m.sha256 if pins else m.observed_sha256()]
            for m in self.sequence
        ]

    def observed_sha256(self) -> str | None:
        """The input's sha256 as it is now (a sequence: of its members' files), None when a
        file is missing; drift compares it with :attr:`sha256`."""
        if not self.sequence:
            return sha256_file(self.path) if self.path.is_file() else None
        steps = self.steps(pins=False)
        if any(s != RESET and s[1] is None for s in steps):
            return None
        return sequence_sha256(steps)

    @property
    def missing(self) -> str:
        """What is missing when :meth:`observed_sha256` is None, in words."""
        for m in self.sequence or (self,):
            if m is not None and not m.path.is_file():
                member = f"member {m.name}'s " if self.sequence else ""
                return f"{member}input file {m.path} is missing"
        return "input file is missing"

    @property
    def label(self) -> Any:
        return self.labels.get("label")

    @property
    def pin_mismatch(self) -> str:
        """Why the input's sha256 differs from its pin, in words for a drift report."""
        if self.sequence:
            return (
                f"sequence {self.describe_sequence()} differs from its pin: a member's input or "
                f"the order changed; check the change, then pin the new sha256 (`paritygate "
                "cases add --sweep` pins a sequence it writes)"
            )
        if self.generated is None:
            return "input differs from its pin"
        return (
            f"generated input ({self.generated.describe()}) differs from its pin: the generator, "
            "its seed or the declaration changed; check the change, then pin the new sha256"
        )

    def describe_sequence(self) -> str:
        return "[" + ", ".join(RESET if m is None else m.name for m in self.sequence) + "]"

    def load(self) -> Any:
        """The case's inputs (a sequence: its last member's): a dict of arrays (npz /
        safetensors), an array (npy), parsed JSON, or the raw bytes for any other file type."""
        return load_case(self.path)


@dataclass(frozen=True)
class OutputMap:
    """How one runner output becomes the canonical output ``name``."""

    name: str
    source: str  # the name the runner produces
    transpose: tuple[int, ...] | None = None
    slice: tuple[Any, ...] | None = None
    slice_text: str | None = None
    cast: str | None = None


@dataclass(frozen=True)
class Runner:
    """A reference, a candidate, or an adapter (another entry point of a candidate)."""

    name: str
    role: str
    kind: str  # "python" or "subprocess"
    callable: str | None = None  # module:function (python)
    factory: str | None = None  # module:function returning the callable (python)
    options: dict[str, Any] = field(default_factory=dict)  # keyword arguments of the factory
    pass_as: str = "case"
    command: tuple[str, ...] | None = None  # argv template (subprocess)
    output_format: str | None = None
    timeout: float | None = 600.0  # seconds per case; None: an in-process runner without a watchdog
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    adapter_of: str | None = None
    maps: dict[str, OutputMap] = field(default_factory=dict)  # by canonical name
    cast: str = "none"  # "none", "reference" or a dtype name
    pins: dict[str, Any] = field(default_factory=dict)
    seed: int | None = None
    # Scale-out (format 7): the BLAS / OpenMP threads one run uses (``--jobs auto`` divides the
    # cores by it), and what a Ray actor of this runner asks for (num_cpus, num_gpus, memory,
    # custom resources such as a hardware class).
    threads: int = 1
    resources: dict[str, float] = field(default_factory=dict)

    @property
    def package_pins(self) -> dict[str, str]:
        return dict(self.pins.get("packages", {}))

    @property
    def file_pins(self) -> dict[str, str]:
        return dict(self.pins.get("files", {}))


# The keys a [claims.<id>] table may hold.
_CLAIM_KEYS = (
    "outputs",
    "metric",
    "bound",
    "unit",
    "scope",
    "oracle",
    "mode",
    "status",
    "basis",
    "hardware",
    "candidates",
    "published",
    "description",
    "params",
    "activity",
)


@dataclass(frozen=True)
class Claim:
    """A published number: the gate's bound is the claim's bound; there is no second number."""

    id: str
    outputs: tuple[str, ...]
    metric: str
    bound: float
    unit: str
    scope: str
    direction: str  # "max" or "min"
    oracle: str
    mode: str
    status: str
    hardware: str
    candidates: tuple[str, ...]
    basis: dict[str, Any] = field(default_factory=dict)
    published: tuple[str, ...] = ()
    description: str = ""
    params: dict[str, Any] = field(
        default_factory=dict
    )  # metric parameters (bins, data_range, label)
    # A counter the candidate reports (a scalar output of that name) must lie in this band, so
    # that an optimization that does nothing fails instead of matching the baseline perfectly.
    activity: ActivityBand | None = None

    @property
    def metric_entry(self) -> claim_metrics.ClaimMetric:
        """The claim's metric in the registry (:mod:`paritygate.claim_metrics`)."""
        return claim_metrics.get(self.metric)

    def covers(self, output: str) -> bool:
        return any(fnmatch.fnmatchcase(output, pattern) for pattern in self.outputs)

    def covered(self, tree: dict[str, Any]) -> dict[str, Any]:
        """The outputs of a flat tree this claim covers."""
        return {k: v for k, v in tree.items() if self.covers(k)}

    def holds(self, observed: float | None) -> bool:
        if observed is None or (isinstance(observed, float) and math.isnan(observed)):
            return False
        return observed <= self.bound if self.direction == "max" else observed >= self.bound

    def excess(self, observed: float) -> float:
        """How far ``observed`` is past the bound (positive when the claim fails)."""
        return observed - self.bound if self.direction == "max" else self.bound - observed


@dataclass(frozen=True)
class Execution:
    """How the units of a run (a runner on a case) are scheduled: ``[execution]`` (format 7;
    :mod:`paritygate.execution`). The command line's ``--jobs`` / ``--ray`` override it."""

    engine: str = "serial"  # "serial", "pool" or "ray"
    jobs: int | str = 1  # workers of the pool, or "auto"
    retries: int = 0  # how many times a unit whose worker died runs again
    address: str | None = None  # a Ray cluster's address (None: a local one)


@dataclass(frozen=True)
class HardwareClass:
    """Conditions (globs) the current machine must meet to belong to the class."""

    name: str
    conditions: dict[str, str]


@dataclass
class Spec:
    path: Path  # the file the spec was read from (parity.toml or pyproject.toml)
    root: Path  # the spec's folder: every path is relative to it and stays inside it
    table: tuple[str, ...]  # () for a standalone file, ("tool", "paritygate") in pyproject.toml
    format_version: int
    name: str
    references: Path
    reports: Path
    outputs: tuple[str, ...]
    cases: dict[str, Case]
    runners: dict[str, Runner]
    claims: dict[str, Claim]
    hardware: dict[str, HardwareClass]
    pins: dict[str, Any] = field(default_factory=dict)  # project-wide pins recorded with references
    # Declared outputs deliberately not gated: output name or glob -> the reason (format 2).
    waived: dict[str, str] = field(default_factory=dict)
    execution: Execution = field(default_factory=Execution)  # format 7

    @property
    def reference(self) -> Runner:
        return next(r for r in self.runners.values() if r.role == "reference")

    @property
    def candidates(self) -> list[Runner]:
        return [r for r in self.runners.values() if r.role == "candidate"]

    def adapters_of(self, candidate: str) -> list[Runner]:
        return [
            r for r in self.runners.values() if r.role == "adapter" and r.adapter_of == candidate
        ]

    def declared(self, output: str) -> bool:
        return any(fnmatch.fnmatchcase(output, pattern) for pattern in self.outputs)

    def not_produced(self, produced: Iterable[str]) -> list[str]:
        """The declared outputs named literally (no glob) that ``produced`` lacks."""
        names = set(produced)
        return [d for d in self.outputs if not any(ch in d for ch in "*?[") and d not in names]

    def key(self, *parts: str) -> str:
        """The dotted key of a spec entry as written in the file (for messages)."""
        return ".".join((*self.table, *parts))


# --------------------------------------------------------------------------------------------
# Loading


def find_spec(start: str | Path = ".") -> Path:
    """The spec to use when none is named: parity.toml, else a pyproject.toml with
    [tool.paritygate]."""
    folder = Path(start)
    for candidate in (folder / "parity.toml", folder / "pyproject.toml"):
        if candidate.name == "parity.toml" and candidate.is_file():
            return candidate
        if candidate.is_file():
            try:
                data = parse_toml(candidate.read_text(encoding="utf-8"), candidate)
            except (SpecError, UnicodeDecodeError):
                continue
            if "paritygate" in data.get("tool", {}):
                return candidate
    raise SpecError(
        "no spec found (parity.toml, or [tool.paritygate] in pyproject.toml)", where=str(folder)
    )


def load_spec(path: str | Path) -> Spec:
    """Read and validate a spec. Raises :class:`SpecError` naming file, key and expectation."""
    path = Path(path)
    if path.is_dir():
        path = find_spec(path)
    text = read_text(path, "spec", error=SpecError, missing="spec file not found")
    return spec_from_text(text, path)


def spec_from_text(text: str, path: str | Path) -> Spec:
    """Validate spec ``text`` as if it were the file ``path`` (paths resolve against its folder):
    how a command that writes a spec checks it before the file is replaced."""
    path = Path(path)
    data, table = _paritygate_table(text, path)
    return _Validator(path.resolve(), table).spec(data)


def read_spec_document(path: str | Path) -> tuple[str, dict[str, Any], tuple[str, ...]]:
    """A spec file's text, its paritygate table (not yet validated) and where that table sits
    (``()`` for parity.toml, ``("tool", "paritygate")`` in a pyproject.toml). Raises SpecError
    for a missing or unreadable file, malformed TOML, or a pyproject.toml without the table."""
    path = Path(path)
    text = read_text(path, "spec", error=SpecError, missing="spec file not found")
    data, table = _paritygate_table(text, path)
    return text, data, table


#: How deep a spec may nest arrays and tables: a spec is a few levels of tables (claims.<id>.params)
#: over short lists; a deeper document is refused before anything walks it.
MAX_SPEC_DEPTH = 64


def parse_toml(text: str, path: str | Path, **options: Any) -> dict[str, Any]:
    """A spec document parsed by :mod:`tomllib` (``options`` go to :func:`tomllib.loads`);
    malformed TOML, or TOML nested deeper than :data:`MAX_SPEC_DEPTH`, is one SpecError naming
    the file (tomllib recurses per level: a deep document would overflow Python's stack)."""
    try:
        data = tomllib.loads(text, **options)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"malformed TOML: {exc}", where=str(path)) from None
    except RecursionError:
        raise SpecError(
            f"TOML nested too deeply (more than {MAX_SPEC_DEPTH} levels)", where=str(path)
        ) from None
    except ValueError as exc:  # e.g. an integer past int()'s digit limit
        raise SpecError(f"malformed TOML: {exc}", where=str(path)) from None
    check_nesting(
        data,
        str(path),
        limit=MAX_SPEC_DEPTH,
        what="TOML",
        error=SpecError,
    )
    return data


def _paritygate_table(text: str, path: Path) -> tuple[dict[str, Any], tuple[str, ...]]:
    data = parse_toml(text, path)
    table: tuple[str, ...] = ()
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        if not isinstance(tool, dict) or not isinstance(tool.get("paritygate"), dict):
            raise SpecError("no [tool.paritygate] table", where=str(path))
        data = tool["paritygate"]
        table = ("tool", "paritygate")
    return data, table


class _Validator:
    def __init__(self, path: Path, table: tuple[str, ...]):
        self.path = path
        self.root = path.parent
        self.table = table

    # -- helpers ---------------------------------------------------------------------------
    def error(self, key: str, message: str) -> SpecError:
        full = ".".join((*self.table, key)) if key else ".".join(self.table)
        where = f"{self.path}: {full}" if full else str(self.path)
        return SpecError(message, where=where)

    def table_of(self, value: Any, key: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.error(key, f"expected a table, got {_kind(value)}")
        return value

    def keys(
        self, data: dict[str, Any], key: str, allowed: Iterable[str], required: Iterable[str] = ()
    ):
        allowed = set(allowed)
        for name in data:
            if name not in allowed:
                prefix = f"{key}." if key else ""
                raise self.error(
                    f"{prefix}{name}",
                    f"unknown key{did_you_mean(name, allowed)}; expected one of: "
                    f"{', '.join(sorted(allowed))}",
                )
        for name in required:
            if name not in data:
                prefix = f"{key}." if key else ""
                raise self.error(f"{prefix}{name}", "required key is missing")

    def string(self, data: dict[str, Any], key: str, name: str, default: Any = ...) -> Any:
        if name not in data:
            if default is ...:
                raise self.error(f"{key}.{name}" if key else name, "required key is missing")
            return default
        value = data[name]
        if not isinstance(value, str) or not value:
            raise self.error(
                f"{key}.{name}" if key else name, f"expected a non-empty string, got {_kind(value)}"
            )
        return value

    def choice(
        self, data: dict[str, Any], key: str, name: str, choices: Iterable[str], default: Any = ...
    ) -> Any:
        value = self.string(data, key, name, default)
        choices = tuple(choices)
        if value is not default and value not in choices:
            raise self.error(
                f"{key}.{name}", f"expected one of {', '.join(choices)}, got {value!r}"
            )
        return value

    def strings(self, value: Any, key: str) -> tuple[str, ...]:
        if isinstance(value, str):
            value = [value]
        if (
            not isinstance(value, list)
            or not value
            or not all(isinstance(v, str) and v for v in value)
        ):
            raise self.error(key, f"expected a non-empty list of strings, got {_kind(value)}")
        return tuple(value)

    def number(self, value: Any, key: str) -> float:
        if isinstance(value, int) and not isinstance(value, bool):
            return self._integer_as_float(value, key)
        if not isinstance(value, float) or not math.isfinite(value):
            raise self.error(key, f"expected a finite number, got {_kind(value)}")
        return value

    def _integer_as_float(self, value: int, key: str) -> float:
        """An integer the float64 it is compared as holds exactly; any other is refused rather
        than silently rounded (``99999999999999999999`` would be read as 1e20)."""
        try:
            as_float = float(value)
        except OverflowError:
            raise self.error(
                key, f"the integer {_digits(value)} is beyond the largest float64 number"
            ) from None
        if int(as_float) != value:
            raise self.error(
                key,
                f"the integer {_digits(value)} has no exact float64 value (it would be read as "
                f"{as_float!r}); write it as a float ({as_float!r}) if that is meant",
            )
        return as_float

    def inside(self, value: Any, key: str, *, must_exist: bool = False) -> Path:
        if not isinstance(value, str) or not value:
            raise self.error(key, f"expected a relative path (string), got {_kind(value)}")
        candidate = Path(value)
        if candidate.is_absolute():
            raise self.error(
                key, f"path {value!r} is absolute; paths are relative to the spec's folder"
            )
        resolved = (self.root / candidate).resolve()
        try:
            resolved.relative_to(self.root)
        except ValueError:
            raise self.error(key, f"path {value!r} escapes the spec's folder {self.root}") from None
        if must_exist and not resolved.exists():
            raise self.error(key, f"path {value!r} does not exist (in {self.root})")
        return resolved

    def option_paths(self, data: dict[str, Any], key: str, options: dict[str, Any]) -> dict:
        """``paths = ["weights"]``: factory options that are paths relative to the spec's folder,
        handed to the factory as absolute paths, so a spec works from any working folder (the
        process's working folder is never changed)."""
        if "paths" not in data:
            return {}
        if getattr(self, "version", SPEC_FORMAT_VERSION) < 4:
            raise self.error(f"{key}.paths", "needs format_version = 4")
        resolved = {}
        for name in self.strings(data["paths"], f"{key}.paths"):
            if name not in options:
                raise self.error(
                    f"{key}.paths",
                    f"{name!r} is not an option{did_you_mean(name, options)}; options: "
                    f"{', '.join(options) or 'none'}",
                )
            resolved[name] = str(self.inside(options[name], f"{key}.options.{name}"))
        return resolved

    def target(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or value.count(":") != 1 or not all(value.split(":")):
            raise self.error(key, f"expected 'module:function', got {value!r}")
        return value

    # -- sections --------------------------------------------------------------------------
    def spec(self, data: Any) -> Spec:
        data = self.table_of(data, "")
        self.keys(
            data,
            "",
            # [bootstrap] is read and validated by paritygate.bootstrap (docs/bootstrap.md),
            # [benchmarks] by paritygate.bench (docs/bench.md), [locate] by paritygate.locate
            # (docs/locate.md)
            (
                "format_version",
                "name",
                "references",
                "reports",
                "outputs",
                "cases",
                "runners",
                "claims",
                "hardware",
                "pins",
                "bootstrap",
                "waived",
                "benchmarks",
                "locate",
                "execution",
            ),
            required=("format_version", "outputs", "cases", "runners", "claims"),
        )
        version = data["format_version"]
        self.version = version if isinstance(version, int) else SPEC_FORMAT_VERSION
        if version not in READABLE_SPEC_VERSIONS or isinstance(version, bool):
            raise self.error(
                "format_version",
                "this paritygate reads spec format_version "
                f"{' or '.join(map(str, READABLE_SPEC_VERSIONS))}, got {version!r}",
            )
        for section, needs in (("benchmarks", 5), ("locate", 6), ("execution", 8), ("waived", 2)):
            if section in data and version < needs:
                raise self.error(section, f"[{section}] needs format_version = {needs}")
        name = self.string(data, "", "name", self.root.name)
        references = self.inside(data.get("references", "references"), "references")
        reports = self.inside(data.get("reports", default_reports(self.path)), "reports")
        outputs = self.strings(data["outputs"], "outputs")
        pins = self.table_of(data.get("pins", {}), "pins")
        hardware = {
            hw_name: self.hardware(hw_name, value)
            for hw_name, value in self.table_of(data.get("hardware", {}), "hardware").items()
        }
        cases_table = self.table_of(data["cases"], "cases")
        if not cases_table:
            raise self.error("cases", "expected at least one case")
        cases: dict[str, Case] = {}
        sequences = {
            n: v for n, v in cases_table.items() if isinstance(v, dict) and "sequence" in v
        }
        for case_name, value in cases_table.items():
            if case_name in sequences:
                continue
            for case in self.cases(case_name, value):
                if case.name in cases:
                    raise self.error(f"cases.{case_name}", f"case {case.name!r} is declared twice")
                cases[case.name] = case
        plain = dict(cases)
        for case_name, value in sequences.items():
            case = self.sequence(case_name, value, plain, set(sequences))
            if case.name in cases:
                raise self.error(f"cases.{case_name}", f"case {case.name!r} is declared twice")
            cases[case.name] = case
        if sequences:
            cases = {n: cases[n] for n in _declared_order(cases_table, cases)}
        runners_table = self.table_of(data["runners"], "runners")
        runners = {rn: self.runner(rn, value, outputs) for rn, value in runners_table.items()}
        self.check_runners(runners)
        claims_table = self.table_of(data["claims"], "claims")
        claims = {
            cid: self.claim(cid, value, runners, outputs, hardware, cases)
            for cid, value in claims_table.items()
        }
        waived = self.waived(data.get("waived", {}), outputs)
        self.check_coverage(outputs, claims, waived)
        return Spec(
            path=self.path,
            root=self.root,
            table=self.table,
            format_version=version,
            waived=waived,
            name=name,
            references=references,
            reports=reports,
            outputs=outputs,
            cases=cases,
            runners=runners,
            claims=claims,
            hardware=hardware,
            pins=dict(pins),
            execution=self.execution(data.get("execution", {})),
        )

    def execution(self, value: Any) -> Execution:
        data = self.table_of(value, "execution")
        self.keys(data, "execution", ("engine", "jobs", "retries", "address"))
        engine = self.choice(data, "execution", "engine", ENGINES, "serial")
        jobs = data.get("jobs", 1)
        if jobs != "auto" and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1):
            raise self.error("execution.jobs", f'expected a number >= 1 or "auto", got {jobs!r}')
        retries = data.get("retries", 0)
        if isinstance(retries, bool) or not isinstance(retries, int) or not 0 <= retries <= 10:
            raise self.error("execution.retries", f"expected 0 to 10, got {retries!r}")
        address = self.string(data, "execution", "address", None)
        if address is not None and engine != "ray":
            raise self.error("execution.address", 'a cluster address needs engine = "ray"')
        return Execution(engine=engine, jobs=jobs, retries=retries, address=address)

    def scale_out(self, data: dict[str, Any], key: str) -> tuple[int, dict[str, float]]:
        """A runner's ``threads`` and ``resources`` (format 8)."""
        for name in ("threads", "resources"):
            if name in data and self.version < 8:
                raise self.error(f"{key}.{name}", "needs format_version = 8")
        threads = data.get("threads", 1)
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise self.error(f"{key}.threads", f"expected a whole number >= 1, got {threads!r}")
        resources = {}
        for name, amount in self.table_of(data.get("resources", {}), f"{key}.resources").items():
            amount = self.number(amount, f"{key}.resources.{name}")
            if amount < 0:
                raise self.error(f"{key}.resources.{name}", "expected an amount >= 0")
            resources[name] = amount
        return threads, resources

    def waived(self, value: Any, outputs: tuple[str, ...]) -> dict[str, str]:
        table = self.table_of(value, "waived")
        for name, reason in table.items():
            key = f"waived.{name}"
            if not any(fnmatch.fnmatchcase(name, d) or name == d for d in outputs):
                raise self.error(
                    key, f"not a declared output (declared outputs: {', '.join(outputs)})"
                )
            if not isinstance(reason, str) or not reason.strip():
                raise self.error(
                    key, "expected the reason the output is not gated, as a non-empty string"
                )
        return dict(table)

    def check_coverage(
        self, outputs: tuple[str, ...], claims: dict[str, Claim], waived: dict[str, str]
    ) -> None:
        """Every declared output is covered by a claim's outputs or waived with a reason: an output
        nothing covers is never compared, so a port that never produces it would pass."""
        uncovered = [
            d
            for d in outputs
            if not any(c.covers(d) for c in claims.values())
            and not any(fnmatch.fnmatchcase(d, w) for w in waived)
        ]
        if uncovered:
            raise self.error(
                "outputs",
                f"declared output(s) {', '.join(map(repr, uncovered))} covered by no claim: "
                "nothing would compare them; add a claim that covers them, or waive them with a "
                'reason (format_version = 2, [waived] "name" = "why it is not gated")',
            )

    def name_ok(self, value: str, key: str) -> None:
        if not _NAME.match(value):
            raise self.error(
                key,
                "names may use letters, digits, '_', '-' and '.', starting with a letter or digit",
            )

    def hardware(self, name: str, value: Any) -> HardwareClass:
        key = f"hardware.{name}"
        self.name_ok(name, key)
        data = self.table_of(value, key)
        self.keys(data, key, ("system", "machine", "cpu", "gpu", "hostname"))
        if not data:
            raise self.error(
                key, "expected at least one condition (system, machine, cpu, gpu, hostname)"
            )
        return HardwareClass(name, {k: self.string(data, key, k) for k in data})

    def cases(self, name: str, value: Any) -> list[Case]:
        """A ``[cases.NAME]`` table: one case from a file, or one generated case per sweep value
        (format 6)."""
        key = f"cases.{name}"
        data = self.table_of(value, key)
        if "generate" not in data:
            return [self.case(name, value)]
        self.name_ok(name, key)
        if self.version < 6:
            raise self.error(f"{key}.generate", "generated cases need format_version = 6")
        self.keys(data, key, ("generate", "sweep", "sha256", "label", "labels"))
        from .seeded import check_declaration

        declared = self.table_of(data["generate"], f"{key}.generate")
        generation, bad, message = check_declaration(declared)
        if generation is None:
            raise self.error(f"{key}.generate.{bad}", message)
        labels = dict(self.table_of(data.get("labels", {}), f"{key}.labels"))
        if "label" in data:
            labels["label"] = data["label"]
        if "sweep" not in data:
            return [
                self.generated(name, key, generation, data.get("sha256"), f"{key}.sha256", labels)
            ]
        sweep = self.table_of(data["sweep"], f"{key}.sweep")
        self.keys(sweep, f"{key}.sweep", ("axis", "values"), required=("axis", "values"))
        axis, values = sweep["axis"], sweep["values"]
        rank = len(generation.shape)
        if isinstance(axis, bool) or not isinstance(axis, int) or not -rank <= axis < rank:
            raise self.error(
                f"{key}.sweep.axis", f"expected an axis of the shape {list(generation.shape)}"
            )
        if (
            not isinstance(values, list)
            or not values
            or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values)
            or len(set(values)) != len(values)
        ):
            raise self.error(
                f"{key}.sweep.values", f"expected distinct non-negative lengths, got {values!r}"
            )
        pins = data.get("sha256")
        if pins is not None and (not isinstance(pins, list) or len(pins) != len(values)):
            raise self.error(
                f"{key}.sha256",
                f"a sweep pins each case: expected a list of {len(values)} sha256 strings, "
                "in the order of sweep.values",
            )
        import dataclasses

        found = []
        for i, length in enumerate(values):
            shape = list(generation.shape)
            shape[axis] = length
            checked, bad, message = check_declaration({**declared, "shape": shape})
            if checked is None:
                raise self.error(f"{key}.sweep.values", f"length {length}: {message}")
            one = dataclasses.replace(generation, shape=tuple(shape))
            pin = pins[i] if pins is not None else None
            found.append(
                self.generated(
                    f"{name}.{length}", key, one, pin, f"{key}.sha256[{i}]", labels, swept=True
                )
            )
        if pins is None:
            listed = ", ".join(f'"{c.sha256}"' for c in found)
            raise self.error(
                f"{key}.sha256",
                f"required key is missing; the generated inputs have sha256 = [{listed}] "
                "(check them first)",
            )
        return found

    def generated(
        self,
        name: str,
        key: str,
        generation: Generation,
        pin: Any,
        pin_key: str,
        labels: dict[str, Any],
        swept: bool = False,
    ) -> Case:
        """A generated case: its input made and written under ``.paritygate/cases/`` (only when
        the bytes changed), checked against its pin by the drift checks like any case file."""
        import hashlib

        from .seeded import generate, input_bytes

        try:
            data, suffix = input_bytes(generate(generation, root=self.root))
        except Exception as exc:  # a custom generator's failure, reported in one line
            raise self.error(
                f"{key}.generate", f"the generator failed: {type(exc).__name__}: {exc}"
            ) from None
        digest = hashlib.sha256(data).hexdigest()
        path = self.root / GENERATED_FOLDER / f"{name}{suffix}"
        if not (path.is_file() and path.stat().st_size == len(data) and path.read_bytes() == data):
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_bytes(path, data)
            except OSError as exc:
                raise self.error(
                    f"{key}.generate",
                    f"cannot write the generated input to {path}: {exc.strerror or exc}",
                ) from None
        if pin is None:
            if not swept:
                raise self.error(
                    pin_key,
                    f'required key is missing; the generated input has sha256 = "{digest}" '
                    "(check it first)",
                )
            pin = digest  # a sweep without pins: the caller refuses with every pin listed
        if not isinstance(pin, str) or not _HEX64.match(pin):
            raise self.error(
                pin_key, "expected 64 lowercase hex digits (the generated file's sha256)"
            )
        return Case(name, path, pin, labels, generation)

    def sequence(self, name: str, value: Any, cases: dict[str, Case], sequences: set[str]) -> Case:
        """A call-sequence case (format 10): member cases and ``"reset"``, pinned by
        :func:`sequence_sha256` of the members' names and pins."""
        key = f"cases.{name}"
        self.name_ok(name, key)
        data = self.table_of(value, key)
        if self.version < 10:
            raise self.error(f"{key}.sequence", "needs format_version = 10")
        self.keys(data, key, ("sequence", "sha256", "label", "labels"))
        listed = data["sequence"]
        where = f"{key}.sequence"
        if not isinstance(listed, list) or not all(isinstance(s, str) for s in listed):
            raise self.error(
                where, f'expected a list of case names and "{RESET}", got {_kind(listed)}'
            )
        members: list[Case | None] = []
        for step in listed:
            if step == RESET:
                members.append(None)
            elif step in sequences:
                raise self.error(
                    where, f"{step!r} is itself a sequence; list its members and switches instead"
                )
            elif step not in cases:
                raise self.error(
                    where,
                    f"{step!r} is neither a case of the spec nor a switch (the switch is "
                    f'"{RESET}"){did_you_mean(step, [*cases, RESET])}',
                )
            else:
                members.append(cases[step])
        if not any(m is not None for m in members):
            raise self.error(where, "expected at least one member case (the calls to make)")
        if members[-1] is None:
            raise self.error(
                where,
                f"ends with \"{RESET}\": the case's outputs are its last call's; end with a member",
            )
        last = members[-1]
        digest = sequence_sha256(RESET if m is None else [m.name, m.sha256] for m in members)
        if "sha256" not in data:
            raise self.error(
                f"{key}.sha256",
                f'required key is missing; the sequence is pinned with sha256 = "{digest}" '
                "(the sha256 of its members' names and pins, in order)",
            )
        sha = self.string(data, key, "sha256")
        if not _HEX64.match(sha):
            raise self.error(
                f"{key}.sha256",
                "expected 64 lowercase hex digits; the sequence is pinned with "
                f'sha256 = "{digest}"',
            )
        labels = dict(self.table_of(data.get("labels", {}), f"{key}.labels"))
        if "label" in data:
            labels["label"] = data["label"]
        return Case(name, last.path, sha, labels, sequence=tuple(members))

    def case(self, name: str, value: Any) -> Case:
        key = f"cases.{name}"
        self.name_ok(name, key)
        data = self.table_of(value, key)
        if "sweep" in data:
            raise self.error(f"{key}.sweep", "a sweep needs a generated case (generate = ...)")
        self.keys(data, key, ("path", "sha256", "label", "labels"), required=("path",))
        path = self.inside(data["path"], f"{key}.path")
        if path.exists() and not path.is_file():
            # A FIFO or a device would block every reader (hashing, loading) forever.
            raise self.error(
                f"{key}.path", f"{data['path']!r} is not a regular file ({_file_kind(path)})"
            )
        if "sha256" not in data:
            raise self.error(f"{key}.sha256", "required key is missing" + _pin_hint(path))
        sha = self.string(data, key, "sha256")
        if not _HEX64.match(sha):
            raise self.error(
                f"{key}.sha256",
                "expected 64 lowercase hex digits (the file's sha256)" + _pin_hint(path),
            )
        labels = dict(self.table_of(data.get("labels", {}), f"{key}.labels"))
        if "label" in data:
            labels["label"] = data["label"]
        return Case(name, path, sha, labels)

    def runner(self, name: str, value: Any, outputs: tuple[str, ...]) -> Runner:
        key = f"runners.{name}"
        self.name_ok(name, key)
        data = self.table_of(value, key)
        self.keys(
            data,
            key,
            (
                "role",
                "callable",
                "factory",
                "options",
                "pass",
                "command",
                "format",
                "timeout",
                "env",
                "cwd",
                "adapter_of",
                "map",
                "cast",
                "pins",
                "seed",
                "paths",
                "threads",
                "resources",
            ),
            required=("role",),
        )
        role = self.choice(data, key, "role", ROLES)
        has_python = "callable" in data or "factory" in data
        if has_python and "command" in data:
            raise self.error(
                key, "a runner is either in-process (callable/factory) or a command, not both"
            )
        if "callable" in data and "factory" in data:
            raise self.error(key, "give either callable or factory, not both")
        if not has_python and "command" not in data:
            raise self.error(
                key, "expected callable = 'module:function', factory = ..., or command = [...]"
            )
        kind = "python" if has_python else "subprocess"
        python_only = ("options", "pass", "paths")
        command_only = ("format", "env", "cwd")
        for k in python_only if kind == "subprocess" else command_only:
            if k in data:
                raise self.error(
                    f"{key}.{k}",
                    f"only meaningful for {'in-process' if kind == 'subprocess' else 'command'} "
                    "runners",
                )
        command = None
        if kind == "subprocess":
            raw = data["command"]
            if isinstance(raw, str):
                try:
                    raw = shlex.split(raw)
                except ValueError as exc:
                    raise self.error(f"{key}.command", f"cannot split the command: {exc}") from None
            command = self.strings(raw, f"{key}.command")
            if not any("{out}" in part for part in command):
                raise self.error(
                    f"{key}.command",
                    "the argv template must contain {out} (where the runner writes its outputs)",
                )
            if not any("{case}" in part for part in command):
                raise self.error(
                    f"{key}.command", "the argv template must contain {case} (the case file's path)"
                )
        output_format = None
        if "format" in data:
            output_format = self.choice(data, key, "format", OUTPUT_FORMATS)
        # Commands are killed after 600 s unless told otherwise; an in-process call gets a
        # watchdog only when the spec asks for one (it runs the call on a worker thread).
        timeout: float | None = None
        if "timeout" in data or kind == "subprocess":
            timeout = self.number(data.get("timeout", 600), f"{key}.timeout")
            if timeout <= 0:
                raise self.error(f"{key}.timeout", "expected a number of seconds > 0")
        env = self.table_of(data.get("env", {}), f"{key}.env")
        for k, v in env.items():
            if not isinstance(v, str):
                raise self.error(f"{key}.env.{k}", f"expected a string, got {_kind(v)}")
        cwd = self.inside(data["cwd"], f"{key}.cwd", must_exist=True) if "cwd" in data else None
        adapter_of = data.get("adapter_of")
        if role == "adapter":
            if not isinstance(adapter_of, str):
                raise self.error(
                    f"{key}.adapter_of", "an adapter names the candidate it is an entry point of"
                )
        elif adapter_of is not None:
            raise self.error(
                f"{key}.adapter_of", 'only runners with role = "adapter" have adapter_of'
            )
        cast = data.get("cast", "none")
        if not isinstance(cast, str) or not (cast in ("none", "reference") or _is_dtype(cast)):
            raise self.error(
                f"{key}.cast", f"expected 'none', 'reference' or a numpy dtype name, got {cast!r}"
            )
        maps = {}
        for out_name, spec_value in self.table_of(data.get("map", {}), f"{key}.map").items():
            maps[out_name] = self.output_map(f"{key}.map.{out_name}", out_name, spec_value, outputs)
        pins = self.pins(data.get("pins", {}), f"{key}.pins")
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise self.error(f"{key}.seed", f"expected an integer, got {_kind(seed)}")
        options = dict(self.table_of(data.get("options", {}), f"{key}.options"))
        options.update(self.option_paths(data, key, options))
        threads, resources = self.scale_out(data, key)
        return Runner(
            name=name,
            role=role,
            kind=kind,
            callable=self.target(data["callable"], f"{key}.callable")
            if "callable" in data
            else None,
            factory=self.target(data["factory"], f"{key}.factory") if "factory" in data else None,
            options=dict(options),
            pass_as=self.choice(data, key, "pass", PASS_STYLES, "case"),
            command=command,
            output_format=output_format,
            timeout=timeout,
            env=dict(env),
            cwd=cwd,
            adapter_of=adapter_of,
            maps=maps,
            cast=cast,
            pins=pins,
            seed=seed,
            threads=threads,
            resources=resources,
        )

    def output_map(self, key: str, name: str, value: Any, outputs: tuple[str, ...]) -> OutputMap:
        data = self.table_of(value, key)
        self.keys(data, key, ("from", "transpose", "slice", "cast"))
        if not any(fnmatch.fnmatchcase(name, p) for p in outputs):
            raise self.error(
                key, f"maps to {name!r}, which is not among the declared outputs {list(outputs)}"
            )
        transpose = None
        if "transpose" in data:
            axes = data["transpose"]
            if (
                not isinstance(axes, list)
                or not all(isinstance(a, int) and not isinstance(a, bool) for a in axes)
                or sorted(axes) != list(range(len(axes)))
            ):
                raise self.error(
                    f"{key}.transpose",
                    f"expected a permutation of axes such as [0, 2, 3, 1], got {axes!r}",
                )
            transpose = tuple(axes)
        slice_value = slice_text = None
        if "slice" in data:
            slice_text = data["slice"]
            if not isinstance(slice_text, str):
                raise self.error(
                    f"{key}.slice",
                    f"expected a numpy index such as '0, :, 1:-1', got {_kind(slice_text)}",
                )
            try:
                slice_value = parse_slice(slice_text)
            except ValueError as exc:
                raise self.error(f"{key}.slice", str(exc)) from None
        cast = None
        if "cast" in data:
            cast = data["cast"]
            if not isinstance(cast, str) or not _is_dtype(cast):
                raise self.error(
                    f"{key}.cast", f"expected a numpy dtype name such as 'float32', got {cast!r}"
                )
        source = self.string(data, key, "from", name)
        return OutputMap(name, source, transpose, slice_value, slice_text, cast)

    def pins(self, value: Any, key: str) -> dict[str, Any]:
        data = self.table_of(value, key)
        for group in ("packages", "files"):
            if group in data:
                table = self.table_of(data[group], f"{key}.{group}")
                for k, v in table.items():
                    if not isinstance(v, str) or not v:
                        raise self.error(f"{key}.{group}.{k}", f"expected a string, got {_kind(v)}")
                    if group == "files":
                        if k.startswith(PACKAGE_PIN_PREFIX):
                            # A file inside an installed package, by package-relative path.
                            module, _, rel = k[len(PACKAGE_PIN_PREFIX) :].partition("/")
                            if not module.isidentifier() or not rel or ".." in rel.split("/"):
                                raise self.error(
                                    f"{key}.files.{k}",
                                    "expected 'package:<import name>/<path inside the package>'",
                                )
                        else:
                            self.inside(k, f"{key}.files.{k}")
                        if not _HEX64.match(v):
                            raise self.error(
                                f"{key}.files.{k}",
                                "expected the file's sha256 (64 lowercase hex digits)",
                            )
        return _plain(data)

    def check_runners(self, runners: dict[str, Runner]) -> None:
        references = [r.name for r in runners.values() if r.role == "reference"]
        if len(references) != 1:
            raise self.error(
                "runners",
                f'expected exactly one runner with role = "reference", found {len(references)}',
            )
        if not any(r.role == "candidate" for r in runners.values()):
            raise self.error("runners", 'expected at least one runner with role = "candidate"')
        for r in runners.values():
            if r.role == "adapter":
                target = runners.get(r.adapter_of)
                if target is None or target.role != "candidate":
                    raise self.error(
                        f"runners.{r.name}.adapter_of",
                        f"{r.adapter_of!r} is not a candidate runner",
                    )

    def claim(
        self,
        cid: str,
        value: Any,
        runners: dict[str, Runner],
        outputs: tuple[str, ...],
        hardware: dict[str, HardwareClass],
        cases: dict[str, Case],
    ) -> Claim:
        key = f"claims.{cid}"
        self.name_ok(cid, key)
        data = self.table_of(value, key)
        self.keys(
            data,
            key,
            _CLAIM_KEYS,
            required=("outputs", "metric", "bound", "oracle", "status"),
        )
        metric, entry = self._claim_metric(data, key)
        bound = self._claim_bound(data, key, metric, entry)
        oracle, mode = self._claim_oracle_and_mode(data, key, metric, entry.scope)
        status = self.choice(data, key, "status", STATUSES)
        basis = dict(self.table_of(data.get("basis", {}), f"{key}.basis"))
        if status == "calibrated" and not basis:
            raise self.error(
                f"{key}.basis",
                "a calibrated claim states its basis (what was measured, when, on which hardware, "
                "over how many cases)",
            )
        hw = self._claim_hardware(data, key, entry.scope, hardware)
        chosen = self._claim_candidates(data, key, runners)
        patterns = self.strings(data["outputs"], f"{key}.outputs")
        for pattern in patterns:
            if not _produced(pattern, outputs, runners):
                raise self.error(
                    f"{key}.outputs",
                    f"{pattern!r} matches no output any runner produces (declared outputs: "
                    f"{', '.join(outputs)})",
                )
        params = self._claim_params(data, key, metric, entry, cases)
        for param, default in entry.siblings.items():
            sibling = params.get(param, default)
            if not _produced(str(sibling), outputs, runners):
                raise self.error(
                    f"{key}.params.{param}",
                    f"{metric} reads output {sibling!r} beside the covered ones; no runner "
                    f"produces it (declared outputs: {', '.join(outputs)})",
                )
        published = (
            self.strings(data["published"], f"{key}.published") if "published" in data else ()
        )
        activity = self._claim_activity(data, key, chosen, runners, mode)
        return Claim(
            id=cid,
            outputs=patterns,
            metric=metric,
            bound=bound,
            unit=self.string(data, key, "unit", "") if "unit" in data else "",
            scope=entry.scope,
            direction=entry.direction,
            oracle=oracle,
            mode=mode,
            status=status,
            hardware=hw,
            candidates=chosen,
            basis=_plain(basis),
            published=published,
            description=data.get("description", "")
            if isinstance(data.get("description", ""), str)
            else "",
            params=_plain(params),
            activity=activity,
        )

    def _claim_metric(self, data: dict[str, Any], key: str) -> tuple[str, Any]:
        """The claim's metric and its registry entry; a declared scope must be the metric's."""
        metric = self.choice(data, key, "metric", METRICS)
        entry = claim_metrics.get(metric)
        if "scope" in data:
            declared_scope = self.choice(data, key, "scope", SCOPES)
            if declared_scope != entry.scope:
                raise self.error(
                    f"{key}.scope",
                    f"metric {metric!r} is measured per {entry.scope}, not per {declared_scope}",
                )
        return metric, entry

    def _claim_bound(self, data: dict[str, Any], key: str, metric: str, entry: Any) -> float:
        """The bound, refused where no measurement of the metric could meet it."""
        bound = self.number(data["bound"], f"{key}.bound")
        if entry.direction == "max" and bound < 0:
            raise self.error(
                f"{key}.bound",
                f"{metric} is an upper bound on a quantity that cannot be negative: got {bound:g}, "
                "which no measurement can meet",
            )
        # accuracy has no range: it may be stated in percent
        if entry.bound_range is not None and not (
            entry.bound_range[0] <= bound <= entry.bound_range[1]
        ):
            low, high = entry.bound_range
            raise self.error(f"{key}.bound", f"{metric} lies in [{low:g}, {high:g}], got {bound:g}")
        if metric == "speedup" and bound <= 0:
            raise self.error(f"{key}.bound", f"a speedup is a positive ratio, got {bound:g}")
        if metric == "ulp" and bound != int(bound):
            raise self.error(f"{key}.bound", f"ULP distance is a whole number, got {bound:g}")
        if entry.fixed_bound is not None and bound != entry.fixed_bound:
            raise self.error(
                f"{key}.bound",
                f"metric {metric!r} is {entry.summary.split(':')[0].split(' (')[0]}: the bound "
                f"must be {entry.fixed_bound:g}",
            )
        return bound

    def _claim_oracle_and_mode(
        self, data: dict[str, Any], key: str, metric: str, scope: str
    ) -> tuple[str, str]:
        """The oracle and the mode, and the combinations that cannot hold."""
        oracle = self.choice(data, key, "oracle", ORACLES)
        mode = self.choice(data, key, "mode", MODES, "stored")
        if oracle == "no-op":
            if mode == "stored":
                raise self.error(
                    f"{key}.mode", f"a no-op claim cannot run in stored mode: {NOOP_STORED_REASON}"
                )
            if metric != "exact":
                raise self.error(
                    f"{key}.metric",
                    'a no-op claim is byte equality: use metric = "exact" with bound = 0',
                )
        if mode == "paired" and scope not in ("element", "edge", "output"):
            raise self.error(
                f"{key}.mode",
                f"paired mode compares one case at a time; a {scope} claim runs in stored mode",
            )
        return oracle, mode

    def _claim_hardware(
        self, data: dict[str, Any], key: str, scope: str, hardware: dict[str, HardwareClass]
    ) -> str:
        """The hardware class the claim holds for (``any``, except for a speed claim)."""
        hw = self.string(data, key, "hardware", "any")
        if hw != "any" and hw not in hardware:
            raise self.error(
                f"{key}.hardware",
                f"unknown hardware class {hw!r}; declare it under [hardware.{hw}] or use 'any'",
            )
        if scope == "speed" and hw == "any":
            raise self.error(
                f"{key}.hardware",
                "a speed claim holds for one hardware class; name it (timings are meaningless "
                "across machines)",
            )
        return hw

    def _claim_candidates(
        self, data: dict[str, Any], key: str, runners: dict[str, Runner]
    ) -> tuple[str, ...]:
        """The candidate runners the claim holds for (default: every candidate)."""
        candidate_names = [r.name for r in runners.values() if r.role == "candidate"]
        chosen = (
            self.strings(data["candidates"], f"{key}.candidates")
            if "candidates" in data
            else tuple(candidate_names)
        )
        for c in chosen:
            if c not in candidate_names:
                raise self.error(
                    f"{key}.candidates",
                    f"{c!r} is not a candidate runner (candidates: {', '.join(candidate_names)})",
                )
        return chosen

    def _claim_params(
        self, data: dict[str, Any], key: str, metric: str, entry: Any, cases: dict[str, Case]
    ) -> dict[str, Any]:
        """The metric's params: only those its registry entry accepts, every one it requires,
        each of the right form."""
        params = dict(self.table_of(data.get("params", {}), f"{key}.params"))
        allowed_params = entry.params
        for p in params:
            if p not in allowed_params:
                raise self.error(
                    f"{key}.params.{p}",
                    f"unknown parameter for metric {metric!r}; expected one of: "
                    f"{', '.join(sorted(allowed_params)) or 'none'}",
                )
        for required in sorted(entry.required_params - set(params)):
            raise self.error(
                f"{key}.params.{required}",
                _REQUIRED_PARAM_REASONS.get(required, "").format(metric=metric)
                or f"metric {metric!r} needs params.{required}",
            )
        if "edges" in params:
            edges = params["edges"]
            if (
                not isinstance(edges, list)
                or not edges
                or len(set(map(str, edges))) != len(edges)
                or not all(isinstance(e, str) and e for e in edges)
            ):
                raise self.error(
                    f"{key}.params.edges",
                    'expected a list of distinct edge names (e.g. ["start", "end"] for segments), '
                    f"got {_kind(edges)}",
                )
        self._check_sequence_params(params, key)
        if metric == "max_edge_delta" and ("match" in params or "min_iou" in params):
            self._check_box_matching(params, key)
        if metric == "accuracy_noninferiority":
            self._check_noninferiority_params(params, key)
        if metric in ("accuracy", "ece", "accuracy_noninferiority"):
            label = params.get("label", "label")
            unlabelled = [c.name for c in cases.values() if label not in c.labels]
            if unlabelled:
                raise self.error(
                    f"{key}.metric",
                    f"{metric} needs a label {label!r} on every case; missing on "
                    f"{', '.join(unlabelled)}",
                )
        return params

    def _check_noninferiority_params(self, params: dict[str, Any], key: str) -> None:
        """The non-inferiority claim (format 9): ``confidence`` in [0.5, 0.999], ``resamples``
        and ``seed`` whole numbers (resamples 100 to 100000)."""
        if self.version < 9:
            raise self.error(f"{key}.metric", "accuracy_noninferiority needs format_version = 9")
        confidence = params.get("confidence", 0.95)
        if (
            isinstance(confidence, bool)
            or not isinstance(confidence, (int, float))
            or not 0.5 <= confidence <= 0.999
        ):
            raise self.error(
                f"{key}.params.confidence", f"expected a number in [0.5, 0.999], got {confidence!r}"
            )
        for name, low, high in (("resamples", 100, 100_000), ("seed", 0, 2**32 - 1)):
            value = params.get(name, low)
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                raise self.error(
                    f"{key}.params.{name}",
                    f"expected a whole number {low} to {high}, got {value!r}",
                )

    def _check_sequence_params(self, params: dict[str, Any], key: str) -> None:
        """The params of sequence metrics (docs/spec.md): ``top_k`` and ``context`` whole
        numbers, ``near_tie`` pass or fail, ``logits`` and ``targets`` output names, and
        ``tokenizer`` a tokenizer.json inside the spec's folder, kept as an absolute path."""
        for name, low in (("top_k", 1), ("context", 0)):
            if name in params:
                value = params[name]
                if isinstance(value, bool) or not isinstance(value, int) or value < low:
                    raise self.error(
                        f"{key}.params.{name}", f"expected a whole number >= {low}, got {value!r}"
                    )
        if "near_tie" in params and params["near_tie"] not in ("pass", "fail"):
            raise self.error(
                f"{key}.params.near_tie",
                f"expected 'pass' (a near-tie is reported) or 'fail', got {params['near_tie']!r}",
            )
        for name in ("logits", "targets"):
            if name in params and (not isinstance(params[name], str) or not params[name]):
                raise self.error(
                    f"{key}.params.{name}", f"expected an output name, got {params[name]!r}"
                )
        if "tokenizer" in params:
            where = f"{key}.params.tokenizer"
            if not isinstance(params["tokenizer"], str):
                raise self.error(where, f"expected a path, got {params['tokenizer']!r}")
            path = self.inside(params["tokenizer"], where, must_exist=True)
            if not path.is_file():
                raise self.error(where, f"{params['tokenizer']!r} is {_file_kind(path)}")
            params["tokenizer"] = str(path)

    def _check_box_matching(self, params: dict[str, Any], key: str) -> None:
        """``match`` (by label or by IoU) and ``min_iou`` of an edge claim on boxes."""
        match = params.get("match", "label")
        if match not in ("label", "iou"):
            raise self.error(
                f"{key}.params.match",
                f"expected 'label' (boxes keyed by output name) or 'iou' (unlabelled boxes "
                f"paired by IoU), got {match!r}",
            )
        if "min_iou" in params and match != "iou":
            raise self.error(f"{key}.params.min_iou", "min_iou needs match = 'iou'")
        if match == "iou" and "edges" in params:
            raise self.error(f"{key}.params.edges", "IoU matching pairs boxes (x1, y1, x2, y2)")
        min_iou = params.get("min_iou", 0.5)
        if (
            isinstance(min_iou, bool)
            or not isinstance(min_iou, (int, float))
            or not 0 <= min_iou <= 1
        ):
            raise self.error(
                f"{key}.params.min_iou", f"expected a number in [0, 1], got {min_iou!r}"
            )

    def _claim_activity(
        self,
        data: dict[str, Any],
        key: str,
        chosen: tuple[str, ...],
        runners: dict[str, Runner],
        mode: str,
    ) -> ActivityBand | None:
        """The activity band of an approximation claim, counted inside in-process runners."""
        if "activity" not in data:
            return None
        where = self.error(f"{key}.activity", "").where
        activity = ActivityBand.from_mapping(data["activity"], where=where)
        outside = [c for c in chosen if runners[c].kind != "python"]
        if outside:
            raise self.error(
                f"{key}.activity.calls",
                f"paritygate counts calls inside an in-process runner; candidate(s) "
                f"{', '.join(outside)} run as a command",
            )
        if activity.measure == "skipped" and mode != "paired":
            raise self.error(
                f"{key}.activity.measure",
                "'skipped' counts the reference's calls and the candidate's in one process: "
                'it needs mode = "paired"',
            )
        return activity


def _declared_order(table: dict[str, Any], cases: dict[str, Case]) -> list[str]:
    """The cases in the order the spec declares them (a sweep's cases where its table is)."""
    order = []
    for name in table:
        order.extend(n for n in cases if n == name or (n.startswith(name + ".") and n not in table))
    return list(dict.fromkeys([*order, *cases]))


def _file_kind(path: Path) -> str:
    import stat

    mode = path.stat().st_mode
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def _produced(pattern: str, outputs: tuple[str, ...], runners: dict[str, Runner]) -> bool:
    """Whether a claim's output glob can match an output the runners produce (the declared
    outputs)."""
    for declared in outputs:
        if fnmatch.fnmatchcase(declared, pattern) or fnmatch.fnmatchcase(pattern, declared):
            return True
        # both globs: compare their literal prefixes
        lit_d = re.split(r"[*?\[]", declared)[0]
        lit_p = re.split(r"[*?\[]", pattern)[0]
        if (
            any(ch in declared for ch in "*?[")
            and any(ch in pattern for ch in "*?[")
            and (lit_d.startswith(lit_p) or lit_p.startswith(lit_d))
        ):
            return True
    return False


def _is_dtype(name: str) -> bool:
    import numpy as np

    if name in ML_DTYPES_NAMES:
        return True
    try:
        np.dtype(name)
    except TypeError:
        return False
    return np.dtype(name).kind in "biuf"


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return f"a boolean ({value})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return f"a string ({value!r})"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a table"
    return type(value).__name__


def _digits(value: int) -> str:
    text = str(abs(value)) if abs(value) < 10**40 else None
    if text is None:
        return f"{'-' if value < 0 else ''}of {len(str(abs(value)))} digits"
    return str(value)


def _plain(value: Any) -> Any:
    """tomllib values (datetimes included) as plain JSON-compatible data."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def parse_slice(text: str) -> tuple[Any, ...]:
    """A numpy basic index written as text ('0, :, 1:-1', '..., ::2') as a tuple of slices."""
    parts: list[Any] = []
    for raw in text.split(","):
        part = raw.strip()
        if part == "...":
            parts.append(Ellipsis)
            continue
        if ":" in part:
            pieces = part.split(":")
            if len(pieces) > 3:
                raise ValueError(f"cannot read {part!r} as a slice")
            try:
                values = [int(p) if p.strip() else None for p in pieces]
            except ValueError:
                raise ValueError(f"cannot read {part!r} as a slice (integers only)") from None
            parts.append(slice(*values))
            continue
        try:
            parts.append(int(part))
        except ValueError:
            raise ValueError(
                f"cannot read {part!r} as an index (integers, ':' slices or '...')"
            ) from None
    if sum(p is Ellipsis for p in parts) > 1:
        raise ValueError("at most one '...' in an index")
    return tuple(parts)


# --------------------------------------------------------------------------------------------
# Editing (comments and layout kept)


def basis_table(basis: dict[str, Any]) -> Any:
    """The basis as a TOML table: nested maps inline, one blank line after it so the next table
    keeps its spacing. TOML has no null, so absent values are left out."""
    import tomlkit

    table = tomlkit.table()
    for key, value in basis.items():
        if value is None or (isinstance(value, dict) and not value):
            continue
        if isinstance(value, dict):
            inline = tomlkit.inline_table()
            inline.update(value)
            value = inline
        table.add(key, value)
    table.add(tomlkit.nl())
    return table


def update_claim(spec_path: str | Path, claim_id: str, **fields: Any) -> None:
    """Set keys of ``[claims.<claim_id>]`` (e.g. ``bound``, ``status``, ``basis``) in place.

    Uses tomlkit so comments and layout survive; the file is replaced atomically, and re-validated
    before it is: an edit that would make the spec invalid raises SpecError and changes nothing.
    """
    import tomlkit

    path = Path(spec_path)
    document = tomlkit.parse(path.read_text(encoding="utf-8"))
    root = document
    if path.name == "pyproject.toml":
        root = document["tool"]["paritygate"]
    claims = root.get("claims", {})
    if claim_id not in claims:
        raise SpecError(f"no claim {claim_id!r}", where=f"{path}: claims")
    for key, value in fields.items():
        if key == "basis" and type(value) is dict:
            value = basis_table(value)  # a plain mapping gets the layout calibration writes
        claims[claim_id][key] = value
    text = tomlkit.dumps(document)
    data = tomllib.loads(text)
    table: tuple[str, ...] = ()
    if path.name == "pyproject.toml":
        data = data["tool"]["paritygate"]
        table = ("tool", "paritygate")
    _Validator(path.resolve(), table).spec(data)
    atomic_write_text(path, text)
