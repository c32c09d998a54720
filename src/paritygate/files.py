"""Files on disk: every file paritygate reads or writes goes through this module.

Named outputs are loaded and saved without pickle; case inputs are loaded with the same hardened
readers; every write (outputs, references, reports, specs) is atomic; sha256 fingerprints and the
"read a text file or raise one clear line" step live here too.

Supported formats, chosen by extension:

- ``.safetensors``: flat name -> array; every dtype safetensors knows, bfloat16 and float8 included
  (through ml_dtypes). The preferred format: dtypes survive the round trip.
- ``.npz`` / ``.npy``: read with ``allow_pickle=False`` always. Object arrays, pickles renamed to
  ``.npy`` and archive members that are not plain ``.npy`` arrays are refused before anything is
  unpickled.
- ``.json``: a nested tree of dicts, lists and numbers (and strings, e.g. decoded text). The tree
  is returned as is; :func:`paritygate.compare.compare` turns numeric lists into arrays. JSON keeps
  values, not dtypes.

Every problem with a file (missing, unknown extension, truncated, garbage, pickled) is an
:class:`~paritygate.errors.InputError` whose one line names the file and what is wrong.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import stat
import struct
import tempfile
import zipfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ._dtypes import is_numeric, numpy_dtype
from .errors import InputError, UserError
from .outputs import flatten_outputs, nest_outputs

__all__ = [
    "SUPPORTED_SUFFIXES",
    "load_outputs",
    "load_case",
    "save_outputs",
    "atomic_write_bytes",
    "atomic_write_text",
    "read_text",
    "open_regular",
    "sha256_file",
    "check_nesting",
]

SUPPORTED_SUFFIXES = (".safetensors", ".npz", ".npy", ".json")

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = b"PK\x03\x04"
_EMPTY_ZIP_MAGIC = b"PK\x05\x06"
# Protocol 2+ pickles start with PROTO (0x80); torch.save writes a zip holding ``data.pkl``.
_PICKLE_PROTO = 0x80
_PICKLED = "is a pickle file, refused"
_NO_PICKLE_HINT = (
    "paritygate never unpickles; save outputs as safetensors, npz of plain arrays or JSON"
)

# safetensors dtype tag -> numpy dtype name (bfloat16 / float8 come from ml_dtypes)
_SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "F8_E4M3": "float8_e4m3fn",
    "F8_E5M2": "float8_e5m2",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U64": "uint64",
    "U32": "uint32",
    "U16": "uint16",
    "U8": "uint8",
    "BOOL": "bool",
    "C64": "complex64",
}


# ---------------------------------------------------------------------------------------------
# hashing and atomic writes


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes, read in chunks."""
    path = Path(path)
    with _reading(path, "a file"):
        with open_regular(path) as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest()


@contextmanager
def _reading(path: Path, expected: str) -> Iterator[None]:
    """An OS error of reading ``path`` (missing, a directory where ``expected`` was, not a
    regular file, unreadable) as one InputError naming it."""
    try:
        yield
    except FileNotFoundError:
        raise InputError("file not found", where=str(path)) from None
    except IsADirectoryError:
        raise InputError(f"is a directory, expected {expected}", where=str(path)) from None
    except NotRegularFile:
        raise InputError(NOT_REGULAR, where=str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or exc}", where=str(path)) from None


# Opening a FIFO for reading waits for a writer: the one reader opens without waiting.
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
NOT_REGULAR = "is not a regular file (a FIFO, socket or device)"


class NotRegularFile(OSError):
    """A path that names a FIFO, socket or device, refused before any read could block."""


def open_regular(path: str | os.PathLike[str]) -> Any:
    """``path`` opened for binary reading, only if it is a regular file.

    The one check every reader of a user's path goes through: a FIFO, socket or device (whose
    read could block forever or never end) raises :class:`NotRegularFile` without being read,
    a directory :class:`IsADirectoryError`; the file is checked once it is open, so nothing can
    swap it in between.
    """
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | getattr(os, "O_BINARY", 0))
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(path)
        if not stat.S_ISREG(mode):
            raise NotRegularFile(NOT_REGULAR)
        if _NONBLOCK:
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never a part.

    The bytes go to a temporary file in the same folder, are flushed and fsynced, then moved over
    ``path`` with :func:`os.replace` (atomic on POSIX and Windows); the folder is fsynced where the
    platform allows so that the rename itself survives a crash.
    """
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise InputError("folder does not exist", where=str(folder))
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{path.name}.", suffix=".tmp")
    try:
        # mkstemp creates the file 0600; give it the mode a plain open() would have.
        os.chmod(tmp_name, _mode_for(path))
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    fsync_folder(folder)
    return path


def atomic_write_text(path: str | os.PathLike[str], text: str) -> Path:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8 (newlines written as given)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def read_text(
    path: str | os.PathLike[str],
    what: str = "file",
    *,
    error: type[UserError] = InputError,
    missing: str | None = None,
) -> str:
    """A UTF-8 text file's contents; any problem is one ``error`` naming the file.

    ``what`` names the file in messages (``"no such doc"``, ``"cannot read the doc: ..."``);
    ``missing`` replaces the message for a file that does not exist.
    """
    path = Path(path)
    try:
        with io.TextIOWrapper(open_regular(path), encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        raise error(missing or f"no such {what}", where=str(path)) from None
    except IsADirectoryError:
        raise error(f"is a directory, expected a {what}", where=str(path)) from None
    except NotRegularFile:
        raise error(f"{NOT_REGULAR}, expected a {what}", where=str(path)) from None
    except UnicodeDecodeError as exc:
        raise error(f"not UTF-8 text ({exc.reason})", where=str(path)) from None
    except OSError as exc:
        raise error(f"cannot read the {what}: {exc.strerror or exc}", where=str(path)) from None


def _umask() -> int:
    umask = os.umask(0o022)  # reading the umask means setting it; put it straight back
    os.umask(umask)
    return umask


def _mode_for(path: Path) -> int:
    try:
        return path.stat().st_mode & 0o7777  # keep the mode of the file being replaced
    except OSError:
        pass
    return 0o666 & ~_umask()


def staging_folder(parent: Path, prefix: str) -> Path:
    """A new, empty folder in ``parent`` (a unique name starting with ``prefix``) with the mode a
    plain mkdir gives (mkdtemp makes it private): a whole folder is written there, then put in
    place by one rename (:func:`os.rename`) and :func:`fsync_folder` of ``parent``."""
    folder = Path(tempfile.mkdtemp(dir=parent, prefix=prefix))
    os.chmod(folder, 0o777 & ~_umask())
    return folder


def fsync_folder(folder: Path) -> None:
    """Flush a folder's entries (a rename into it survives a crash) where the platform allows."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open folders
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ---------------------------------------------------------------------------------------------
# loading


def load_outputs(path: str | os.PathLike[str], *, require_names: bool = False) -> dict[str, Any]:
    """Named outputs stored in ``path`` (.safetensors, .npz, .npy or .json).

    Returns an output tree: for the array formats, names written as ``boxes/editor`` come back
    nested (``{"boxes": {"editor": array}}``), the inverse of :func:`save_outputs`, so that
    :func:`paritygate.outputs.flatten_outputs` names them ``boxes/editor`` again; a ``.npy`` file
    holds one array, named by the file's stem. JSON gives its parsed tree (a document whose top
    level is not an object comes back under the file's stem, or is refused with
    ``require_names``, as the runner protocol requires).
    """
    path = Path(path)
    where = str(path)
    suffix = path.suffix.lower()
    if path.is_dir():
        raise InputError("is a directory, expected an output file", where=where)
    if path.exists() and not path.is_file():
        raise InputError(NOT_REGULAR, where=where)  # before the type: the reader checks again
    if suffix not in SUPPORTED_SUFFIXES:
        shown = path.suffix or "no extension"
        raise InputError(
            f"unknown output file type ({shown}); expected one of {', '.join(SUPPORTED_SUFFIXES)}",
            where=where,
        )
    data = _read_bytes(path)
    if suffix == ".npy":
        return {path.stem: _load_arrays(path, data, where)}
    if suffix != ".json":
        return nest_outputs(_load_arrays(path, data, where), where=where)
    if _looks_pickled(data):
        raise InputError(_PICKLED, where=where, hint=_NO_PICKLE_HINT)
    tree = _load_json(data, where)
    if isinstance(tree, dict):
        return tree
    if require_names:
        raise InputError(
            f"the JSON document is a {type(tree).__name__}, not an object of named outputs",
            where=where,
        )
    return {path.stem: tree}


def load_case(path: str | os.PathLike[str]) -> Any:
    """A case file's inputs: a dict of arrays (.npz, .safetensors, names as stored), an array
    (.npy), parsed JSON (.json), or the raw bytes of any other file. Pickles are refused."""
    path = Path(path)
    where = str(path)
    suffix = path.suffix.lower()
    data = _read_bytes(path)
    if suffix == ".json":
        return _load_json(data, where)
    if suffix not in (".npz", ".npy", ".safetensors"):
        return data
    return _load_arrays(path, data, where)


def _looks_pickled(data: bytes) -> bool:
    return len(data) > 1 and data[0] == _PICKLE_PROTO and 2 <= data[1] <= 5


def _read_bytes(path: Path) -> bytes:
    with _reading(path, "an output file"):
        with open_regular(path) as handle:
            return handle.read()


def _load_arrays(path: Path, data: bytes, where: str) -> Any:
    """The arrays of a .safetensors or .npz file (flat name -> array) or a .npy file (one
    array); a pickle is refused."""
    suffix = path.suffix.lower()
    if suffix == ".safetensors":
        # The 8-byte header length of a valid file may itself begin with 0x80, so a pickle is
        # recognised only once the bytes fail to parse as safetensors.
        try:
            return _load_safetensors(data, where)
        except InputError:
            if _looks_pickled(data):
                raise InputError(_PICKLED, where=where, hint=_NO_PICKLE_HINT) from None
            raise
    if _looks_pickled(data):
        raise InputError(_PICKLED, where=where, hint=_NO_PICKLE_HINT)
    if suffix == ".npy":
        return _load_npy(data, where)
    return _load_npz(path, data, where)


def _load_safetensors(data: bytes, where: str) -> dict[str, Any]:
    import numpy as np
    import safetensors

    if len(data) < 8:
        raise InputError(f"not a safetensors file: only {len(data)} bytes", where=where)
    (header_len,) = struct.unpack("<Q", data[:8])
    if header_len > len(data) - 8:
        raise InputError(
            f"not a safetensors file or truncated: header claims {header_len} bytes, "
            f"file has {len(data) - 8} after the length field",
            where=where,
        )
    _check_safetensors_names(data[8 : 8 + header_len], where)
    try:
        entries = safetensors.deserialize(data)
    except Exception as exc:  # safetensors raises its own SafetensorError for any corruption
        message = " ".join(str(exc).split())
        raise InputError(f"not a valid safetensors file ({message})", where=where) from None
    outputs: dict[str, Any] = {}
    for name, entry in entries:
        tag = entry["dtype"]
        if tag not in _SAFETENSORS_DTYPES:
            raise InputError(f"tensor {name!r} has unsupported dtype {tag}", where=where)
        dtype = numpy_dtype(_SAFETENSORS_DTYPES[tag])
        shape = tuple(int(n) for n in entry["shape"])
        raw = entry["data"]
        expected_bytes = math.prod(shape) * dtype.itemsize
        if len(raw) != expected_bytes:
            raise InputError(
                f"tensor {name!r} holds {len(raw)} bytes, its shape {list(shape)} and dtype "
                f"{dtype.name} need {expected_bytes}",
                where=where,
            )
        # A writable copy, as safetensors.numpy.load_file gives (callers may work in place).
        outputs[name] = np.frombuffer(bytearray(raw), dtype=dtype).reshape(shape)
    return outputs


def _load_npy(data: bytes, where: str, member: str | None = None):
    import io

    import numpy as np

    label = f"{where}[{member}]" if member else where
    if not data.startswith(_NPY_MAGIC):
        if data.startswith(_ZIP_MAGIC):
            raise InputError(
                "is a zip archive (.npz or torch.save?), not a .npy array",
                where=label,
                hint=_NO_PICKLE_HINT,
            )
        if not data:
            raise InputError("is empty, not a .npy array", where=label)
        raise InputError("not a .npy file (no NUMPY header)", where=label)
    _check_npy_size(data, label)
    stream = io.BytesIO(data)
    try:
        array = np.load(stream, allow_pickle=False)
    except ValueError as exc:
        text = str(exc)
        if "allow_pickle" in text or "Object arrays" in text:
            raise InputError(
                "holds an object array (pickled data); refused", where=label, hint=_NO_PICKLE_HINT
            ) from None
        raise InputError(f"corrupt or truncated .npy data ({text})", where=label) from None
    except (EOFError, OSError, SyntaxError) as exc:
        raise InputError(f"corrupt or truncated .npy data ({exc})", where=label) from None
    if array.dtype.hasobject:  # defensive: np.load already refuses these without pickle
        raise InputError("holds an object array; refused", where=label, hint=_NO_PICKLE_HINT)
    _check_npy_end(data, stream.tell(), label)
    return array


def _check_npy_end(data: bytes, end: int, label: str) -> None:
    """A .npy file holds one array and nothing after it: np.load reads the first array of two
    concatenated ones and ignores trailing bytes, so either would pass unseen."""
    left = len(data) - end
    if not left:
        return
    if data.startswith(_NPY_MAGIC, end):
        raise InputError(
            f"holds a second .npy array after the first (at byte {end}); a .npy file holds one "
            "array, and which one is the output would be a guess",
            where=label,
            hint="save several arrays as .npz or .safetensors",
        )
    raise InputError(
        f"has {left} byte(s) after the array its header describes (at byte {end}); "
        "corrupt, or two files written into one",
        where=label,
    )


def _load_npz(path: Path, data: bytes, where: str) -> dict[str, Any]:
    import io

    if data.startswith(_EMPTY_ZIP_MAGIC):
        return {}
    if not data.startswith(_ZIP_MAGIC):
        raise InputError("not a .npz file (no zip header)", where=where)
    outputs: dict[str, Any] = {}
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            for info in archive.infolist():
                if info.is_dir():
                    continue
                name = info.filename
                if not name.endswith(".npy"):
                    # torch.save archives hold data.pkl: refuse rather than return raw bytes
                    raise InputError(
                        f"archive member {name!r} is not a .npy array"
                        + (
                            " (pickled data); refused" if name.endswith((".pkl", ".pickle")) else ""
                        ),
                        where=where,
                        hint=_NO_PICKLE_HINT,
                    )
                if name[: -len(".npy")] in outputs:
                    # zip allows two members of one name; np.load would keep one of them
                    raise InputError(
                        f"archive member {name!r} appears twice; which array is the output "
                        "would be a guess",
                        where=where,
                    )
                outputs[name[: -len(".npy")]] = _load_npy(archive.read(info), where, name[:-4])
    except InputError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as exc:
        raise InputError(f"corrupt or truncated .npz archive ({exc})", where=where) from None
    return outputs


class _DuplicateKey(Exception):
    pass


def _object_without_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _DuplicateKey(key)
        obj[key] = value
    return obj


def _load_json(data: bytes, where: str) -> Any:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text, so not JSON (byte {exc.start})", where=where) from None
    try:
        tree = json.loads(text, object_pairs_hook=_object_without_duplicate_keys)
    except _DuplicateKey as exc:
        raise InputError(
            f"key {exc.args[0]!r} appears twice in one object; which value is the "
            "output would be a guess",
            where=where,
        ) from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}", where=where
        ) from None
    except RecursionError:
        raise InputError(
            f"JSON nested too deeply (more than {MAX_JSON_DEPTH} levels)", where=where
        ) from None
    check_nesting(tree, where, limit=MAX_JSON_DEPTH, what="JSON")
    return tree


#: How deep a JSON document may nest. An output tree is a few levels of names over arrays of at
#: most 64 dimensions; a deeper document is refused on reading rather than overflowing the
#: recursion of whatever walks it next (the flattener, the comparison).
MAX_JSON_DEPTH = 200


def check_nesting(
    tree: Any, where: str, *, limit: int, what: str, error: type[UserError] = InputError
) -> None:
    """Refuse a parsed document (dicts and lists) nested more than ``limit`` levels deep with one
    ``error`` naming ``where``; walked level by level, so the check itself cannot overflow."""
    level: list[Any] = [tree] if isinstance(tree, (dict, list)) else []
    depth = 0
    while level:
        depth += 1
        if depth > limit:
            raise error(f"{what} nested too deeply (more than {limit} levels)", where=where)
        deeper: list[Any] = []
        for node in level:
            values = node.values() if isinstance(node, dict) else node
            deeper.extend(v for v in values if isinstance(v, (dict, list)))
        level = deeper


# ---------------------------------------------------------------------------------------------
# saving


def save_outputs(
    path: str | os.PathLike[str],
    outputs: Mapping[str, Any],
    *,
    metadata: Mapping[str, str] | None = None,
) -> Path:
    """Write named outputs to ``path`` atomically; the format follows the extension.

    ``.safetensors`` and ``.npz`` take a (possibly nested) tree of arrays, named as the gate
    names outputs (:func:`paritygate.outputs.flatten_outputs`): nested mappings and lists are
    stored under ``/``-joined names (``boxes/editor``, ``layers/0``). ``.json`` takes any tree of
    mappings, lists, numbers and strings (arrays become lists; NaN and infinities are written as
    the ``NaN`` / ``Infinity`` tokens Python's json reads back). ``metadata`` (text only) goes into
    the safetensors header and is refused for other formats.
    """
    path = Path(path)
    where = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".safetensors", ".npz", ".json"):
        raise InputError(
            f"cannot save outputs as {path.suffix or 'a file without extension'}; "
            "use .safetensors, .npz or .json",
            where=where,
        )
    if not isinstance(outputs, Mapping):
        raise InputError(
            f"outputs must be a mapping of names, got {type(outputs).__name__}", where=where
        )
    if metadata is not None and suffix != ".safetensors":
        raise InputError("metadata can only be stored in .safetensors files", where=where)
    if suffix == ".json":
        payload = json.dumps(_json_tree(outputs, where), indent=1, sort_keys=False).encode()
        return atomic_write_bytes(path, payload + b"\n")
    arrays = _flat_arrays(outputs, where)
    if suffix == ".safetensors":
        import safetensors.numpy

        for name, array in arrays.items():
            if array.dtype.name not in _SAFETENSORS_DTYPES.values():
                raise InputError(
                    f"output {name!r} has dtype {array.dtype.name}, which safetensors cannot store",
                    where=where,
                )
        meta = None if metadata is None else {str(k): str(v) for k, v in metadata.items()}
        payload = safetensors.numpy.save(arrays, metadata=meta)
    else:
        import io

        import numpy as np

        for name, array in arrays.items():
            if array.dtype.kind == "V":
                raise InputError(
                    f"output {name!r} has dtype {array.dtype.name}, which .npz "
                    "cannot store faithfully; use .safetensors",
                    where=where,
                )
        buffer = io.BytesIO()
        # The layout np.savez writes ("<name>.npy" members), without its keyword clash on names
        # such as "file"; names with '/' read back unchanged.
        with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_STORED) as archive:
            for name, array in arrays.items():
                with archive.open(name + ".npy", "w", force_zip64=True) as member:
                    np.lib.format.write_array(member, array, allow_pickle=False)
        payload = buffer.getvalue()
    return atomic_write_bytes(path, payload)


def _flat_arrays(outputs: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The outputs' leaves named by the one flattener (:func:`paritygate.outputs.flatten_outputs`:
    ``{"a": [x, y]}`` is ``a/0`` and ``a/1``, as the gate names them), each a C-contiguous
    numeric numpy array."""
    import numpy as np

    try:
        leaves = flatten_outputs(outputs)
    except InputError as exc:  # name the file; the flattener names the output
        inner = f"{exc.where}: {exc.message}" if exc.where else exc.message
        raise InputError(inner, where=where, hint=exc.hint) from None
    flat: dict[str, Any] = {}
    for name, value in leaves.items():
        array = value if isinstance(value, np.ndarray) else np.asarray(value)
        if not is_numeric(array.dtype):
            raise InputError(
                f"output {name!r} is not a numeric array (dtype {array.dtype}); "
                "strings and other objects can only be saved as .json",
                where=where,
            )
        # np.ascontiguousarray would turn 0-d outputs into 1-d ones
        flat[name] = array if array.flags.c_contiguous else array.copy(order="C")
    return flat


def _json_tree(value: Any, where: str, name: str = "") -> Any:
    if isinstance(value, Mapping):
        tree = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise InputError(
                    f"JSON keys must be strings, got {key!r} under {name or '/'}", where=where
                )
            tree[key] = _json_tree(item, where, f"{name}/{key}" if name else key)
        return tree
    if isinstance(value, (list, tuple)):
        return [_json_tree(item, where, f"{name}/{i}") for i, item in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    tolist = getattr(value, "tolist", None)  # numpy arrays and scalars
    if callable(tolist):
        dtype = getattr(value, "dtype", None)
        if dtype is not None and not (is_numeric(dtype) or dtype.kind in "US"):
            raise InputError(
                f"output {name!r} has dtype {dtype}, which JSON cannot store", where=where
            )
        return _json_tree(tolist(), where, name)
    raise InputError(
        f"output {name!r} of type {type(value).__name__} cannot be written as JSON", where=where
    )


def _check_npy_size(data: bytes, label: str) -> None:
    """The array a .npy header describes must fit the bytes that follow it: a header claiming
    shape (10**12, 10**6) is refused before anything is allocated."""
    import io

    import numpy as np

    stream = io.BytesIO(data)
    try:
        version = np.lib.format.read_magic(stream)
        read = {
            (1, 0): np.lib.format.read_array_header_1_0,
            (2, 0): np.lib.format.read_array_header_2_0,
        }.get(version)
        if read is None:
            return  # version 3 headers (utf-8 field names): np.load checks them
        shape, _fortran, dtype = read(stream)
    except (ValueError, EOFError, OSError, SyntaxError) as exc:
        raise InputError(f"corrupt or truncated .npy header ({exc})", where=label) from None
    if dtype.hasobject:
        return  # refused by the loader itself, without unpickling
    needed = math.prod(shape) * dtype.itemsize
    held = len(data) - stream.tell()
    if needed > held:
        raise InputError(
            f"corrupt or truncated .npy: the header claims shape {tuple(shape)} of {dtype} "
            f"({needed} bytes), the file holds {held} bytes of data",
            where=label,
        )


def _check_safetensors_names(header: bytes, where: str) -> None:
    """A tensor name may appear once in a safetensors header (JSON would keep the last one)."""
    try:
        json.loads(header.decode("utf-8"), object_pairs_hook=_object_without_duplicate_keys)
    except _DuplicateKey as exc:
        raise InputError(
            f"tensor {exc.args[0]!r} appears twice in the header", where=where
        ) from None
    except (UnicodeDecodeError, ValueError):
        return  # safetensors itself reports a header that is not JSON
