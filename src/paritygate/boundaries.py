"""Boundary sweeps: the edge cases a port's structure implies, derived from one declaration.

A port that works in chunks or windows of ``n`` goes wrong at the edges: one element short of a
chunk, exactly a chunk, one element into the next; an empty input; a single element; a batch of
one, of two, of an odd size above the largest chunk. ``paritygate cases add --sweep DECL`` writes
those cases, pinned like any case, from a template case::

    TEMPLATE:axis=A,chunk=N[,chunk=M...][,max=K][,empty=false][,batch=B][,batch_chunk=C]
             [,key=NAME...][,name=PREFIX][,after=OTHER...][,reset=true]

- lengths on ``axis`` (``edges``): 0 and 1 (0 left out with ``empty=false``), and
  ``k*n - 1, k*n, k*n + 1`` for every declared ``chunk`` ``n`` and ``k = 1..max`` (default 3);
- batch sizes on ``batch`` (``batch``): 1, 2 and the smallest odd size above ``batch_chunk``
  (default: the largest ``chunk``), at the template's length.

A **generated** template (``generate = ...``) becomes a generated case with ``sweep = { axis,
values }`` (:mod:`paritygate.seeded`): ``PREFIX_edges.<length>`` and ``PREFIX_batch.<size>``, each
pinned by its sha256. A **file** template (``.npy``, ``.npz``, ``.safetensors``, 16-bit PCM
``.wav``) is cut to each length along the axis (its first elements), or repeated cyclically past
its own length, and written as ``<its folder>/PREFIX_edges/PREFIX_edges.<length>.<suffix>``; every
written file is pinned as a case named by its stem. In a file of several arrays, ``key`` names
the arrays that are resized (repeatable: ids and their attention mask together); the others are
copied unchanged. The bytes depend only on the template and the declaration (a fixed zip date for
``.npz``), so running the sweep again adds nothing; a derived file that changed is drift, refused.

The switches of a stateful runner (``after``, ``reset``; format 10) are call-sequence cases
(:attr:`paritygate.spec.Case.sequence`), alone or beside lengths and batch sizes (then ``axis``
is not needed):

- ``after=OTHER`` (repeatable): ``PREFIX_after.OTHER`` = ``sequence = ["OTHER", "TEMPLATE"]``,
  a new stream after a call on another input;
- with ``reset=true`` also ``PREFIX_reset.OTHER`` = ``["OTHER", "reset", "TEMPLATE"]``: the
  runner's ``reset()`` between the two calls.

Each is pinned by :func:`paritygate.spec.sequence_sha256` of its members' names and pins; the
spec's ``format_version`` is raised to 10 when it is lower.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError

__all__ = ["Sweep", "parse_sweep", "edge_lengths", "batch_sizes", "sweep_cases"]

_SUFFIXES = (".npy", ".npz", ".safetensors", ".wav")
_KEYS = ("axis", "chunk", "max", "empty", "batch", "batch_chunk", "key", "name", "after", "reset")


@dataclass(frozen=True)
class Sweep:
    """A parsed ``--sweep`` declaration."""

    template: str
    axis: int | None = None
    chunks: tuple[int, ...] = ()
    max_k: int = 3
    empty: bool = True
    batch: int | None = None
    batch_chunk: int | None = None
    keys: tuple[str, ...] = ()
    name: str = ""
    text: str = field(default="", compare=False)
    after: tuple[str, ...] = ()  # call-sequence cases: a call on each of these, then the template
    reset: bool = False  # ... and with the runner's reset() between the two calls

    @property
    def prefix(self) -> str:
        return self.name or self.template


def parse_sweep(text: str) -> Sweep:
    """``TEMPLATE:key=value,...`` (see the module's docstring); bad input raises InputError
    naming the part at fault."""
    where = f"--sweep {text!r}"
    template, sep, rest = text.partition(":")
    if not sep or not template.strip():
        raise InputError(f"{where}: expected TEMPLATE:axis=A,chunk=N[,...] (a case of the spec)")
    values: dict[str, Any] = {"chunk": [], "key": [], "after": []}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        key, eq, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not eq or key not in _KEYS or not value:
            raise InputError(
                f"{where}: {part!r}: expected KEY=VALUE, KEY one of {', '.join(_KEYS)}"
            )
        if key in ("chunk", "key", "after"):
            values[key].append(value)
        elif key in values:
            raise InputError(f"{where}: {key} given twice")
        else:
            values[key] = value

    def integer(key: str, low: int) -> int | None:
        if key not in values:
            return None
        try:
            number = int(values[key])
        except ValueError:
            number = low - 1
        if number < low:
            raise InputError(f"{where}: {key}={values[key]}: expected an integer >= {low}")
        return number

    axis, batch = integer("axis", -64), integer("batch", -64)
    chunks = []
    for value in values["chunk"]:
        if not value.isdigit() or int(value) < 1:
            raise InputError(f"{where}: chunk={value}: expected an integer >= 1")
        chunks.append(int(value))
    reset = values.get("reset", "false").lower()
    if reset not in ("true", "false"):
        raise InputError(f"{where}: reset={values['reset']}: expected true or false")
    if reset == "true" and not values["after"]:
        raise InputError(f"{where}: reset=true needs after=OTHER (the call before the reset)")
    if axis is None and batch is None and not values["after"]:
        raise InputError(
            f"{where}: declare axis= (lengths), batch= (batch sizes) and/or after=OTHER (a call "
            "on another case first)"
        )
    if axis is not None and not chunks:
        raise InputError(f"{where}: axis={axis} needs chunk=N (the chunk or window size)")
    if axis is not None and axis == batch:
        raise InputError(f"{where}: axis and batch name the same axis")
    empty = values.get("empty", "true").lower()
    if empty not in ("true", "false"):
        raise InputError(f"{where}: empty={values['empty']}: expected true or false")
    batch_chunk = integer("batch_chunk", 1)
    if batch is not None and batch_chunk is None and not chunks:
        raise InputError(f"{where}: batch={batch} needs batch_chunk=C or chunk=N")
    name = values.get("name", "")
    import re

    if name and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_\-]*", name):
        raise InputError(f"{where}: name={name}: letters, digits, '_' and '-' only")
    return Sweep(
        template.strip(),
        axis,
        tuple(chunks),
        integer("max", 1) or 3,
        empty == "true",
        batch,
        batch_chunk,
        tuple(values["key"]),
        name,
        text,
        tuple(dict.fromkeys(values["after"])),
        reset == "true",
    )


def edge_lengths(chunks: tuple[int, ...], max_k: int, *, empty: bool = True) -> list[int]:
    """0 (when ``empty``) and 1, then ``k*n - 1, k*n, k*n + 1`` for each chunk ``n`` and
    ``k = 1..max_k``: sorted, distinct."""
    lengths = {1} | ({0} if empty else set())
    for n in chunks:
        for k in range(1, max_k + 1):
            lengths |= {k * n - 1, k * n, k * n + 1}
    return sorted(x for x in lengths if x >= (0 if empty else 1))


def batch_sizes(largest_chunk: int) -> list[int]:
    """1, 2 and the smallest odd size above ``largest_chunk``."""
    odd = largest_chunk + 1 if largest_chunk % 2 == 0 else largest_chunk + 2
    return sorted({1, 2, odd})


@dataclass(frozen=True)
class SweptCase:
    """One case the sweep adds (or found already pinned)."""

    name: str
    axis: int | None  # None for a call-sequence case
    length: int | None
    path: str  # relative to the spec's folder (a call-sequence case: its steps, in words)
    sha256: str
    added: bool


def _resize(array: Any, axis: int, length: int) -> Any:
    import numpy as np

    array = np.asarray(array)
    size = array.shape[axis]
    if length > 0 and size == 0:
        raise InputError(f"cannot grow an empty axis to {length}")
    index = np.arange(length) % max(size, 1)
    return np.take(array, index, axis=axis)


def _check_axis(array: Any, axis: int, what: str) -> None:
    if not -array.ndim <= axis < array.ndim:
        raise InputError(f"{what} has shape {list(array.shape)}: no axis {axis}")


def _derive(template: Path, sweep: Sweep, axis: int, length: int) -> bytes:
    """The template file cut (or repeated) to ``length`` on ``axis``, as file bytes."""
    import numpy as np

    from .files import load_case
    from .seeded import npy_bytes

    suffix = template.suffix.lower()
    if suffix == ".wav":
        return _wav_bytes(template, axis, length)
    value = load_case(template)
    if suffix == ".npy":
        _check_axis(value, axis, str(template))
        return npy_bytes(_resize(value, axis, length))
    arrays = {k: np.asarray(v) for k, v in value.items()}
    keys = sweep.keys or tuple(arrays)
    if not sweep.keys and len(arrays) > 1:
        raise InputError(
            f"{template} holds {len(arrays)} arrays ({', '.join(sorted(arrays))}): name the "
            "one(s) to resize with key=NAME"
        )
    for key in keys:
        if key not in arrays:
            raise InputError(f"key={key}: {template} holds {', '.join(sorted(arrays))}")
        _check_axis(arrays[key], axis, f"{template}[{key}]")
        arrays[key] = _resize(arrays[key], axis, length)
    if suffix == ".safetensors":
        from safetensors.numpy import save

        return save({k: np.ascontiguousarray(v) for k, v in sorted(arrays.items())})
    return _npz_bytes(arrays)


def _npz_bytes(arrays: dict[str, Any]) -> bytes:
    """An .npz with a fixed date in every entry: the same arrays give the same bytes."""
    import io
    import zipfile

    from .seeded import npy_bytes

    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for key, array in sorted(arrays.items()):
            archive.writestr(zipfile.ZipInfo(f"{key}.npy", (1980, 1, 1, 0, 0, 0)), npy_bytes(array))
    return buffer.getvalue()


def _wav_bytes(template: Path, axis: int, length: int) -> bytes:
    import io
    import wave

    import numpy as np

    if axis not in (0, -2):
        raise InputError(f"{template}: a WAV's samples lie on axis 0 (frames), got axis={axis}")
    try:
        with wave.open(str(template), "rb") as f:
            params = f.getparams()
            raw = f.readframes(f.getnframes())
    except (wave.Error, EOFError) as exc:
        raise InputError(f"{template}: not a PCM WAV file ({exc})") from None
    if params.sampwidth != 2:
        raise InputError(f"{template}: {8 * params.sampwidth}-bit WAV; 16-bit PCM expected")
    frames = np.frombuffer(raw, dtype="<i2").reshape(-1, params.nchannels)
    out = _resize(frames, 0, length)
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as f:
        f.setnchannels(params.nchannels)
        f.setsampwidth(2)
        f.setframerate(params.framerate)
        f.writeframes(np.ascontiguousarray(out, dtype="<i2").tobytes())
    return buffer.getvalue()


def _plan_files(root: Path, sweep: Sweep, case: Any) -> list[tuple]:
    """(name, axis, length, relative path, bytes) of every derived file of a file template."""
    template = Path(case.path)
    suffix = template.suffix.lower()
    if suffix not in _SUFFIXES:
        raise InputError(
            f"cases.{sweep.template}: a {suffix or 'suffixless'} file cannot be swept; "
            f"expected one of {', '.join(_SUFFIXES)} or a generated case"
        )
    out = []
    for group, axis, lengths in _groups(sweep):
        folder = template.parent / f"{sweep.prefix}_{group}"
        for length in lengths:
            name = f"{sweep.prefix}_{group}.{length}"
            path = folder / f"{name}{suffix}"
            out.append((name, axis, length, path.relative_to(root).as_posix(), path))
    return out


def _groups(sweep: Sweep) -> list[tuple[str, int, list[int]]]:
    groups = []
    if sweep.axis is not None:
        groups.append(
            ("edges", sweep.axis, edge_lengths(sweep.chunks, sweep.max_k, empty=sweep.empty))
        )
    if sweep.batch is not None:
        largest = sweep.batch_chunk or max(sweep.chunks)
        groups.append(("batch", sweep.batch, batch_sizes(largest)))
    return groups


def sweep_cases(spec_path: str | Path, sweep: Sweep, *, dry_run: bool = False) -> list[SweptCase]:
    """Add the boundary cases ``sweep`` declares to the spec at ``spec_path`` (see the module's
    docstring). Returns every case of the sweep, added or already pinned; nothing is written
    on error or with ``dry_run``. The spec is validated before it is replaced."""
    path = Path(spec_path)
    if path.is_dir():
        path = path / "parity.toml"
    if not path.is_file():
        raise InputError(f"no spec at {path} (write one with `paritygate init`)")
    result = []
    if sweep.axis is not None or sweep.batch is not None:
        result += _sweep_lengths(path, sweep, dry_run=dry_run)
    if sweep.after:
        result += _sweep_sequences(path, sweep, dry_run=dry_run)
    return result


def _sweep_sequences(path: Path, sweep: Sweep, *, dry_run: bool) -> list[SweptCase]:
    """The call-sequence cases of ``after=`` / ``reset=true``, pinned; a case of the same name
    with another sequence or pin is refused."""
    import tomlkit

    from .onboarding import _write_validated
    from .spec import RESET, SPEC_FORMAT_VERSION, load_spec, sequence_sha256

    spec = load_spec(path)
    for name in (sweep.template, *sweep.after):
        case = spec.cases.get(name)
        if case is None:
            raise InputError(
                f"--sweep: no case {name!r} in {path} (cases: {', '.join(spec.cases) or 'none'})"
            )
        if case.sequence:
            raise InputError(f"--sweep: cases.{name} is itself a call sequence; name one case")
    document = tomlkit.parse(path.read_text(encoding="utf-8"))
    cases = document["cases"]
    result, entries = [], []
    for other in sweep.after:
        plans = [("after", [other, sweep.template])]
        if sweep.reset:
            plans.append(("reset", [other, RESET, sweep.template]))
        for group, steps in plans:
            name = f"{sweep.prefix}_{group}.{other}"
            pin = sequence_sha256(RESET if s == RESET else [s, spec.cases[s].sha256] for s in steps)
            old = cases.get(name)
            old = old.unwrap() if hasattr(old, "unwrap") else old
            if old is not None and (
                not isinstance(old, dict)
                or list(old.get("sequence", [])) != steps
                or old.get("sha256") != pin
            ):
                raise InputError(
                    f"--sweep: case {name} exists with another declaration (or another pin: a "
                    "member changed); pick name=PREFIX, or re-pin it deliberately"
                )
            shown = "sequence [" + ", ".join(steps) + "]"
            result.append(SweptCase(name, None, None, shown, pin, old is None))
            if old is None:
                entries.append((name, steps, pin))
    if dry_run or not entries:
        return result
    compact = not (hasattr(cases, "is_super_table") and cases.is_super_table())
    for name, steps, pin in entries:
        entry = tomlkit.inline_table() if compact else tomlkit.table()
        entry.update({"sequence": steps, "sha256": pin})
        cases[name] = entry
    if document.get("format_version", SPEC_FORMAT_VERSION) < 10:
        document["format_version"] = 10
    _write_validated(path, tomlkit.dumps(document))
    return result


def _sweep_lengths(path: Path, sweep: Sweep, *, dry_run: bool = False) -> list[SweptCase]:
    """Lengths and batch sizes (``axis=``, ``batch=``)."""
    import hashlib

    import tomlkit

    from .files import atomic_write_bytes
    from .onboarding import _write_validated
    from .spec import load_spec

    spec = load_spec(path)
    root = path.resolve().parent
    document = tomlkit.parse(path.read_text(encoding="utf-8"))
    cases = document.get("cases")
    declared = cases.get(sweep.template) if cases is not None else None
    if declared is None:
        known = ", ".join(sorted(cases or {})) or "none"
        raise InputError(f"--sweep: no case {sweep.template!r} in {path} (cases: {known})")
    if "sweep" in declared:
        raise InputError(f"--sweep: cases.{sweep.template} is itself a sweep; name one case")
    if "sequence" in declared:
        raise InputError(
            f"--sweep: cases.{sweep.template} is a call sequence; lengths and batch sizes "
            "sweep a file or generated case"
        )
    if "generate" in declared:
        return _sweep_generated(path, document, sweep, declared, dry_run=dry_run)
    case = spec.cases[sweep.template]
    existing = {
        str((root / e["path"]).resolve()): (n, e.get("sha256"))
        for n, e in cases.unwrap().items()
        if isinstance(e, dict) and isinstance(e.get("path"), str)
    }
    planned = []
    for name, axis, length, rel, file in _plan_files(root, sweep, case):
        try:
            data = _derive(Path(case.path), sweep, axis, length)
        except InputError as exc:
            raise InputError(f"--sweep {sweep.template} length {length}: {exc}") from None
        digest = hashlib.sha256(data).hexdigest()
        pinned = existing.get(str(file.resolve()))
        if pinned is not None and pinned[1] not in (None, digest):
            raise InputError(
                f"cases.{pinned[0]}: {rel} is pinned with another sha256 ({pinned[1]}; the sweep "
                f"derives {digest}): the template or the declaration changed; re-pin deliberately"
            )
        if pinned is None and name in cases:
            raise InputError(f"--sweep: case {name} exists with another path; pick name=PREFIX")
        if pinned is None and file.exists() and file.read_bytes() != data:
            raise InputError(f"{rel} exists with other contents; the sweep does not replace it")
        planned.append((SweptCase(name, axis, length, rel, digest, pinned is None), file, data))
    result = [p[0] for p in planned]
    if dry_run or not any(c.added for c in result):
        return result
    for swept, file, data in planned:
        if swept.added and not file.exists():
            file.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(file, data)
    compact = not (hasattr(cases, "is_super_table") and cases.is_super_table())
    for swept in result:
        if swept.added:
            entry = tomlkit.inline_table() if compact else tomlkit.table()
            entry.update({"path": swept.path, "sha256": swept.sha256})
            cases[swept.name] = entry
    _write_validated(path, tomlkit.dumps(document))
    return result


def _sweep_generated(
    path: Path, document: Any, sweep: Sweep, declared: Any, *, dry_run: bool
) -> list[SweptCase]:
    """A generated template: one generated case per group with ``sweep = { axis, values }`` and
    the sha256 list of its inputs, as the spec's loader writes and checks them."""
    import dataclasses
    import hashlib

    import tomlkit

    from .onboarding import _write_validated
    from .seeded import GENERATED_FOLDER, check_declaration, generate, input_bytes

    generation, bad, message = check_declaration(declared["generate"].unwrap())
    if generation is None:
        raise InputError(f"cases.{sweep.template}.generate.{bad}: {message}")
    cases = document["cases"]
    result: list[SweptCase] = []
    tables = []
    for group, axis, lengths in _groups(sweep):
        rank = len(generation.shape)
        if not -rank <= axis < rank:
            raise InputError(
                f"--sweep {sweep.template}: no axis {axis} in the shape {list(generation.shape)}"
            )
        case_name = f"{sweep.prefix}_{group}"
        pins, suffixes = [], []
        for length in lengths:
            shape = list(generation.shape)
            shape[axis] = length
            checked, bad, message = check_declaration(
                {**declared["generate"].unwrap(), "shape": shape}
            )
            if checked is None:
                raise InputError(f"--sweep {sweep.template} length {length}: {message}")
            one = dataclasses.replace(generation, shape=tuple(shape))
            data, suffix = input_bytes(generate(one, root=path.resolve().parent))
            pins.append(hashlib.sha256(data).hexdigest())
            suffixes.append(suffix)
        old = cases.get(case_name)
        if old is not None:
            same = (
                old.get("generate") is not None
                and old["generate"].unwrap() == declared["generate"].unwrap()
                and old.get("sweep", {}).get("values") == lengths
                and list(old.get("sha256", [])) == pins
            )
            if not same:
                raise InputError(
                    f"--sweep: case {case_name} exists with another declaration; pick name=PREFIX"
                )
        for length, pin, suffix in zip(lengths, pins, suffixes, strict=True):
            rel = f"{GENERATED_FOLDER}/{case_name}.{length}{suffix}"
            result.append(SweptCase(f"{case_name}.{length}", axis, length, rel, pin, old is None))
        if old is None:
            table = tomlkit.table()
            table["generate"] = declared["generate"]
            table["sweep"] = tomlkit.inline_table()
            table["sweep"].update({"axis": axis, "values": lengths})
            table["sha256"] = pins
            tables.append((case_name, table))
    if dry_run or not tables:
        return result
    for case_name, table in tables:
        cases[case_name] = table
    _write_validated(path, tomlkit.dumps(document))
    return result
