"""Runners turn a case into named outputs, with one lifecycle: activate, run(case), deactivate.

Two kinds are equal citizens:

- in-process Python callables (``module:function``, or a ``factory`` called once at activation
  that returns the callable), imported with the spec's folder on ``sys.path`` or, when that
  folder is a package (it holds ``__init__.py``), as that package's modules (see
  :func:`import_name`); with a ``timeout``
  import, factory and calls run on a watched thread of the runner (a call past it fails, but
  cannot be stopped);
- commands run as subprocesses under the versioned protocol of ``docs/subprocess-protocol.md``
  (argv template with ``{case}`` and ``{out}``; named outputs written as JSON, npz or safetensors),
  so a Swift or C++ port takes part without Python.

Outputs come back flattened by :func:`paritygate.outputs.flatten_outputs` and copied to the host
(:func:`paritygate._host.host_arrays`, bfloat16 kept) to ``{"name/inner": numpy array}`` and pass
through the runner's output
mapping (rename, transpose, slice, cast) so that implementations with different layouts compare
element for element. A failing run raises :class:`RunFailure` (crash, timeout, unparseable output)
with the runner's stderr: the gate records it as a failure, never as a spec error.
"""

from __future__ import annotations

import importlib
import os
import queue
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from . import children
from ._dtypes import numpy_dtype
from ._host import host_arrays
from .backends import seed_frameworks
from .errors import InputError, RunFailure, failure_site
from .files import load_outputs
from .spec import Case, OutputMap, Runner, Spec

__all__ = [
    "PROTOCOL_VERSION",
    "RunFailure",
    "RunResult",
    "ActiveRunner",
    "PythonRunner",
    "SubprocessRunner",
    "make_runner",
    "import_name",
    "import_project_module",
    "use_project",
    "BARE_OUTPUT",
    "apply_maps",
    "suggested_pass",
    "in_spec_folder",
]

# The subprocess protocol's version, handed to commands as PARITYGATE_PROTOCOL.
# History: 1 — argv template with {case} {out}; outputs as JSON / npz / safetensors at {out}.
# 2 — an optional request: with PARITYGATE_CAPTURE set (paritygate locate), the command also
# writes its named intermediates there (npz, in execution order); otherwise as 1.
PROTOCOL_VERSION = 2
#: The name of a runner's output when it returns a single array or number.
BARE_OUTPUT = "output"
STDERR_KEEP = 8192  # bytes of stderr kept for the report (the tail, where the error usually is)


@dataclass
class RunResult:
    outputs: dict[str, Any]  # canonical name -> numpy array
    seconds: float
    stderr: str = ""


# --------------------------------------------------------------------------------------------
# Output mappings


def apply_maps(
    outputs: dict[str, Any], maps: dict[str, OutputMap], cast: str = "none"
) -> dict[str, Any]:
    """Rename, transpose, slice and cast a runner's flattened outputs into canonical names."""
    import numpy as np

    result = dict(outputs)
    for m in maps.values():
        if m.source not in outputs:
            raise InputError(
                f"output mapping for {m.name!r} reads {m.source!r}, which the runner did not "
                f"produce (it produced: {', '.join(sorted(outputs))})"
            )
    for m in maps.values():
        result.pop(m.source, None)
    for m in maps.values():
        array = outputs[m.source]
        if m.transpose is not None:
            if array.ndim != len(m.transpose):
                raise InputError(
                    f"output {m.source!r} has {array.ndim} axes; transpose {list(m.transpose)} "
                    f"needs {len(m.transpose)}"
                )
            array = np.transpose(array, m.transpose)
        if m.slice is not None:
            try:
                array = array[m.slice]
            except IndexError as exc:
                raise InputError(
                    f"slice {m.slice_text!r} does not fit output {m.source!r} of shape "
                    f"{array.shape}: {exc}"
                ) from None
        if m.cast:
            array = array.astype(numpy_dtype(m.cast))
        result[m.name] = np.ascontiguousarray(array)
    if cast not in ("none", "reference"):
        result = {k: v.astype(numpy_dtype(cast)) for k, v in result.items()}
    return result


# --------------------------------------------------------------------------------------------
# Runners


def _seed(seed: int | None) -> None:
    """Seed the global generators of Python, numpy and of frameworks already imported."""
    if seed is None:
        return
    random.seed(seed)
    import numpy as np

    np.random.seed(seed % 2**32)
    seed_frameworks(seed)


class ActiveRunner:
    """The lifecycle every runner shares. Use as a context manager or call activate/deactivate."""

    def __init__(self, runner: Runner, spec: Spec):
        self.runner = runner
        self.spec = spec
        self.name = runner.name
        self.active = False

    def __enter__(self) -> ActiveRunner:
        self.activate()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.deactivate()

    def activate(self) -> None:
        self.active = True

    def deactivate(self) -> None:
        self.active = False

    def run(self, case: Case) -> RunResult:
        """The runner's outputs for ``case``; a call-sequence case (format 10) calls the runner
        on each member in order, ``reset()`` at each ``"reset"``, and gives the last call's
        outputs (seconds: all calls' together). Every executor runs cases through here."""
        if not case.sequence:
            return self._call(case)
        return self._sequence(case)

    def _call(self, case: Case) -> RunResult:
        """One call of the runner on one (plain) case."""
        raise NotImplementedError

    def reset(self, case: Case) -> None:
        """The ``"reset"`` switch of the sequence case ``case``: the runner forgets the state
        earlier calls left."""
        raise NotImplementedError

    def _sequence(self, case: Case) -> RunResult:
        calls = sum(m is not None for m in case.sequence)
        if any(m is None for m in case.sequence):
            self.check_reset(case)
        seconds, done, last = 0.0, 0, None
        for step, member in enumerate(case.sequence, 1):
            if member is None:
                start = time.perf_counter()
                self.reset(case)
                seconds += time.perf_counter() - start
                continue
            done += 1
            try:
                last = self._call(member)
            except RunFailure as exc:
                raise RunFailure(
                    self.name,
                    case.name,
                    exc.kind,
                    f"call {done} of {calls} (member {member.name}, step {step} of "
                    f"{case.describe_sequence()}): {exc.message}",
                    exc.stderr,
                    suggested_pass=exc.suggested_pass,
                    site=exc.site,
                ) from None
            seconds += last.seconds
        assert last is not None  # the spec refuses a sequence without a member
        return RunResult(last.outputs, seconds, last.stderr)

    def check_reset(self, case: Case) -> None:
        """Refuses (RunFailure) a sequence with ``"reset"`` on a runner that cannot reset,
        before any call is made."""

    def _finish(
        self, raw: dict[str, Any], case: Case, seconds: float, stderr: str = ""
    ) -> RunResult:
        try:
            outputs = apply_maps(raw, self.runner.maps, self.runner.cast)
        except InputError as exc:
            raise RunFailure(self.name, case.name, "unparseable", exc.message, stderr) from None
        return RunResult(outputs, seconds, stderr)


# What each ``pass`` style hands the function, and the error text a function written for another
# style raises when handed it: (style handed, fragment of the error) -> the style it expects.
_WRONG_ARGUMENT = [
    ("case", "'Case' object is not subscriptable", "inputs"),
    ("case", "'Case' object has no attribute 'keys'", "inputs"),
    ("case", "'Case' object has no attribute 'items'", "inputs"),
    ("case", "'Case' object has no attribute 'get'", "inputs"),
    ("case", "not Case", "path"),  # open(case), np.load(case): "... PathLike object, not Case"
    ("inputs", "'dict' object has no attribute 'load'", "case"),
    ("inputs", "'dict' object has no attribute 'path'", "case"),
    ("inputs", "'dict' object has no attribute 'name'", "case"),
    ("inputs", "not dict", "path"),
    ("path", "string indices must be integers", "inputs"),
    ("path", "'str' object has no attribute 'load'", "case"),
    ("path", "'str' object has no attribute 'path'", "case"),
]


def suggested_pass(pass_as: str, exc: BaseException) -> str | None:
    """The ``pass`` style a function seems written for, when it failed on the argument it was
    handed (a function that reads ``inputs["x"]`` handed a Case), else None."""
    if not isinstance(exc, (TypeError, AttributeError, KeyError)):
        return None
    text = str(exc)
    for handed, fragment, wanted in _WRONG_ARGUMENT:
        if handed == pass_as and fragment in text:
            return wanted
    return None


class in_spec_folder:  # noqa: N801 - used as a context manager, like contextlib's
    """In-process runners run in their spec's folder, as commands do: the working folder is
    the spec's folder (or the runner's ``cwd``) for the import, the factory, every call and
    ``close()``, and is restored after each, so that a relative path in a runner's code or
    options (``InferenceSession("model.onnx")``) means the same from any working folder."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.previous: str | None = None

    def __enter__(self) -> None:
        try:
            self.previous = os.getcwd()
        except FileNotFoundError:  # the working folder was removed: nothing to restore
            self.previous = None
        os.chdir(self.folder)

    def __exit__(self, *exc: Any) -> None:
        if self.previous is not None:
            try:
                os.chdir(self.previous)
            except OSError:
                pass


class _CallThread:
    """One daemon thread that runs every call of a watched in-process runner, its factory and
    close() included, so that per-thread framework state made at activation (MLX streams and
    lazy arrays, torch's grad mode) holds for the calls. Daemon: a call that outlives its
    timeout never keeps the process from exiting."""

    def __init__(self, name: str):
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            function, outcome, done = job
            try:
                outcome["value"] = function()
            except BaseException as exc:  # handed to the caller's thread as is
                outcome["error"] = exc
            done.set()

    def call(self, function: Callable[[], Any], timeout: float | None = None) -> Any:
        """``function()`` on the thread; TimeoutError when it has not returned within
        ``timeout``."""
        outcome: dict[str, Any] = {}
        done = threading.Event()
        self._jobs.put((function, outcome, done))
        if not done.wait(timeout):
            raise TimeoutError
        if "error" in outcome:
            raise outcome["error"]
        return outcome["value"]

    def stop(self) -> None:
        self._jobs.put(None)


def import_name(root: Path, module: str) -> tuple[str, Path]:
    """How a spec in folder ``root`` imports its ``module``: (import name, ``sys.path`` entry).

    A plain folder is put on ``sys.path`` and ``module`` imported as named. A folder that is a
    package (it holds ``__init__.py``) is imported as one: a module of the folder is the
    package's submodule (``runners`` in ``ports/vad/parity.toml`` is ``vad.runners``) with the
    package's parent on ``sys.path``, so that projects whose modules share a name (``runners``,
    ``model``) live side by side in one process, and the package's modules import each other
    relatively (``from . import postprocess``). A name that is not a module of the folder is
    imported as named."""
    root = Path(root)
    if (root / "__init__.py").is_file():
        top = module.split(".")[0]
        if top != root.name and (
            (root / f"{top}.py").is_file() or (root / top / "__init__.py").is_file()
        ):
            return f"{root.name}.{module}", root.parent
        return module, root.parent
    return module, root


def use_project(root: str | os.PathLike[str]) -> None:
    """Make the project in folder ``root`` the one its plain imports find: every cached module
    named like one of the folder's own (a package folder: the package) that belongs to another
    project, or whose source was edited since it was imported, is dropped, so that the next
    import of that name loads this project's current file."""
    _forget_others(import_name(Path(root).resolve(), "")[1], None)


def import_project_module(root: str | os.PathLike[str], name: str) -> ModuleType:
    """Module ``name`` of the project in folder ``root``, imported exactly as the gate imports a
    runner's module (:func:`import_name`): a package folder's module as the package's submodule;
    a plain folder's by its name, where any cached module named like one of the folder's own
    that is another project's, or was edited since it was imported, is imported afresh. The
    folder (a package's parent) is on ``sys.path`` for the import; a caller whose modules import
    lazily, at call time, keeps it there (pytest: ``monkeypatch.syspath_prepend``)."""
    import_as, entry = import_name(Path(root).resolve(), name)
    _forget_others(entry, import_as.split(".")[0])
    added = str(entry) not in sys.path
    if added:
        sys.path.insert(0, str(entry))
    try:
        module = importlib.import_module(import_as)
    finally:
        if added:
            sys.path.remove(str(entry))
    _remember(entry)
    return module


_IMPORTED: dict[str, int] = {}  # a spec folder's module -> its source's mtime when imported


def _local_modules(entry: Path) -> dict[str, Path]:
    """The top-level modules a ``sys.path`` entry of a spec holds: name -> source file."""
    found = {p.stem: p for p in entry.glob("*.py")}
    found.update({p.parent.name: p for p in entry.glob("*/__init__.py")})
    return found


def _stamp(path: Path) -> int:
    """When a module's source last changed (a package's: its newest file)."""
    if path.name == "__init__.py":
        return max(p.stat().st_mtime_ns for p in path.parent.rglob("*.py"))
    return path.stat().st_mtime_ns


def _forget_others(entry: Path, top: str | None) -> None:
    """Before a spec's module is imported: drop every cached module of the same name as one of
    the spec folder's own that is another project's (another file), or whose source changed
    since it was imported (a long-lived process such as a test session), so that the runner and
    every plain import inside it (``from model import DiT``) get this project's current code.
    The imported module itself is re-imported unless this runner imported it from here."""
    for name, path in _local_modules(entry).items():
        loaded = sys.modules.get(name)
        if loaded is None:
            continue
        origin = Path(getattr(loaded, "__file__", "") or "").resolve()
        stamp = _stamp(path)
        recorded = _IMPORTED.get(str(path.resolve()))
        stale = origin != path.resolve() or (recorded is not None and recorded != stamp)
        if stale or (name == top and recorded is None):
            for cached in [n for n in sys.modules if n == name or n.startswith(name + ".")]:
                del sys.modules[cached]


def _remember(entry: Path) -> None:
    """After an import: the mtimes of the spec folder's modules now loaded from it."""
    for name, path in _local_modules(entry).items():
        loaded = sys.modules.get(name)
        origin = Path(getattr(loaded, "__file__", "") or "").resolve() if loaded else None
        if origin == path.resolve():
            _IMPORTED[str(path.resolve())] = _stamp(path)


class PythonRunner(ActiveRunner):
    """An in-process callable. The spec's folder is on sys.path while the runner is active, and
    the working folder while its code runs (:class:`in_spec_folder`)."""

    def __init__(self, runner: Runner, spec: Spec):
        super().__init__(runner, spec)
        self.function: Callable[..., Any] | None = None
        self._added_path = False
        self.count: tuple[str, ...] = ()  # callables whose calls each run counts (activity)
        self._stuck: str | None = None  # the case whose call outlived its timeout
        self._thread: _CallThread | None = None  # with a timeout: the thread every call runs on

    def _resolve(self, target: str) -> Callable[..., Any]:
        module_name, attr = target.split(":")
        try:
            module = import_project_module(self.spec.root, module_name)
        except Exception as exc:
            raise RunFailure(
                self.name,
                None,
                "import",
                f"cannot import {module_name!r}: {type(exc).__name__}: {exc}",
            ) from None
        function = module
        for part in attr.split("."):
            function = getattr(function, part, None)
            if function is None:
                raise RunFailure(
                    self.name, None, "import", f"{module_name!r} has no attribute {attr!r}"
                )
        if not callable(function):
            raise RunFailure(self.name, None, "import", f"{target!r} is not callable")
        return function

    def activate(self) -> None:
        with in_spec_folder(self.spec.root):
            self._activate()

    def deactivate(self) -> None:
        with in_spec_folder(self.spec.root):
            self._deactivate()

    def _call(self, case: Case) -> RunResult:
        with in_spec_folder(self.spec.root):
            return self._run(case)

    def check_reset(self, case: Case) -> None:
        if not self._stateless() and not callable(getattr(self.function, "reset", None)):
            made = (
                f"factory {self.runner.factory} returned a {type(self.function).__name__}"
                if self.runner.factory
                else f"{self.runner.callable} is a {type(self.function).__name__}"
            )
            raise RunFailure(
                self.name,
                case.name,
                "import",
                f"runner {self.name} has no reset(): the sequence case {case.name} "
                f"{case.describe_sequence()} needs one (a factory's object with a reset method; "
                f"{made} without one)",
            )

    def _stateless(self) -> bool:
        """A ``callable`` runner naming a plain function keeps no state of its own between
        calls: its reset is nothing to do (a stateless reference runs a sequence as is)."""
        import inspect

        return bool(self.runner.callable) and (
            inspect.isfunction(self.function) or inspect.isbuiltin(self.function)
        )

    def reset(self, case: Case) -> None:
        """Calls ``reset()`` of the runner's object (what its factory returned, or a callable
        object), on the runner's thread when it has one, in the spec's folder; nothing for a
        plain function (:meth:`_stateless`)."""
        if self._stateless():
            return
        reset = self.function.reset  # type: ignore[union-attr]
        with in_spec_folder(self.spec.root):
            try:
                if self._thread is None:
                    reset()
                else:
                    self._thread.call(reset, self.runner.timeout)
            except TimeoutError:
                self._stuck = case.name
                raise RunFailure(
                    self.name,
                    case.name,
                    "timeout",
                    f"reset() gave no result within {self.runner.timeout:g} s (it keeps running "
                    "in this process, and this runner's remaining cases are not run)",
                ) from None
            except Exception as exc:
                raise RunFailure(
                    self.name,
                    case.name,
                    "crash",
                    f"reset() raised {type(exc).__name__}: {exc}",
                ) from None

    def _activate(self) -> None:
        root = str(import_name(self.spec.root, "")[1])
        if root not in sys.path:
            sys.path.insert(0, root)
            self._added_path = True
        if self.runner.timeout is not None:
            # Import, factory and calls on one thread: module-level framework state (an MLX
            # array built at import) belongs to the thread that uses it.
            self._thread = _CallThread(f"paritygate-{self.name}")
        resolve = (
            self._resolve
            if self._thread is None
            else (lambda t: self._thread.call(lambda: self._resolve(t)))
        )
        if self.runner.callable:
            self.function = resolve(self.runner.callable)
        else:
            factory = resolve(self.runner.factory or "")
            options = self.runner.options

            def build() -> Any:
                _seed(self.runner.seed)
                return factory(**options)

            try:
                self.function = build() if self._thread is None else self._thread.call(build)
            except Exception as exc:
                raise RunFailure(
                    self.name,
                    None,
                    "crash",
                    f"factory {self.runner.factory} raised {type(exc).__name__}: {exc}",
                ) from None
            if not callable(self.function):
                raise RunFailure(
                    self.name,
                    None,
                    "import",
                    f"factory {self.runner.factory} returned a {type(self.function).__name__}, not "
                    "a callable",
                )
        super().activate()

    def _deactivate(self) -> None:
        close = getattr(self.function, "close", None)
        if (
            self.runner.factory and callable(close) and self._stuck is None
        ):  # not under a running call
            if self._thread is not None:
                self._thread.call(close)
            else:
                close()
        if self._thread is not None and self._stuck is None:
            self._thread.stop()
        self._thread = None
        self.function = None
        if self._added_path:
            try:
                sys.path.remove(str(import_name(self.spec.root, "")[1]))
            except ValueError:
                pass
            self._added_path = False
        super().deactivate()

    def _run(self, case: Case) -> RunResult:
        if self.function is None:
            raise RuntimeError(f"runner {self.name} is not active")
        if self.runner.pass_as == "path":
            argument: Any = str(case.path)
        elif self.runner.pass_as == "inputs":
            argument = case.load()
        else:
            argument = case
        _seed(self.runner.seed)
        targets = self.count
        if targets:
            inner = self.function

            def counted(argument: Any) -> Any:
                import numpy

                from .approximation import CALLS_PREFIX, count_calls

                # The spec names a target as it names its callables: imported the same way.
                named = {}
                for target in targets:
                    module, _, path = target.partition(":")
                    named[f"{import_name(self.spec.root, module)[0]}:{path}"] = target
                try:
                    counter = count_calls(list(named)).__enter__()
                except InputError as exc:
                    raise RunFailure(self.name, case.name, "import", exc.message) from None
                try:
                    tree = host_arrays(inner(argument), root=BARE_OUTPUT)
                finally:
                    counter.__exit__(None, None, None)
                for target, calls in counter.counts.items():
                    tree[CALLS_PREFIX + named[target]] = numpy.int64(calls)
                return tree
        else:
            counted = None
        if self._stuck is not None:
            raise RunFailure(
                self.name,
                case.name,
                "timeout",
                f"not run: the call for case {self._stuck} timed out and is still running in this "
                "process",
            )
        start = time.perf_counter()
        try:
            function = counted or self.function
            raw = (
                host_arrays(function(argument), root=BARE_OUTPUT)
                if self._thread is None
                else self._watched(function, argument, case)
            )
        except RunFailure:
            raise
        except InputError as exc:
            raise RunFailure(self.name, case.name, "unparseable", exc.message) from None
        except Exception as exc:
            import traceback

            tail = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:])
            frames = [(f.filename, f.lineno or 0) for f in traceback.extract_tb(exc.__traceback__)]
            raise RunFailure(
                self.name,
                case.name,
                "crash",
                f"{type(exc).__name__}: {exc}",
                tail,
                suggested_pass=suggested_pass(self.runner.pass_as, exc),
                site=failure_site(frames),
            ) from None
        seconds = time.perf_counter() - start
        return self._finish(raw, case, seconds)

    def _watched(self, function: Callable[..., Any], argument: Any, case: Case) -> Any:
        """The call (and its conversion to numpy, where lazy frameworks such as MLX evaluate) on
        the runner's thread, awaited for ``timeout`` seconds.

        Python cannot stop a running call from outside, so a call past its timeout fails the case
        and keeps running in the background; the runner refuses its remaining cases (their
        results would race the stray call) and the process exits without waiting for it."""
        assert self._thread is not None  # made at activation for a runner with a timeout
        seed = self.runner.seed

        def call() -> dict[str, Any]:
            _seed(seed)
            return host_arrays(function(argument), root=BARE_OUTPUT)

        try:
            return self._thread.call(call, self.runner.timeout)
        except TimeoutError:
            self._stuck = case.name
            raise RunFailure(
                self.name,
                case.name,
                "timeout",
                f"no result within {self.runner.timeout:g} s (an in-process call cannot be "
                "stopped: it "
                "keeps running in this process, and this runner's remaining cases are not run)",
            ) from None


class SubprocessRunner(ActiveRunner):
    """A command speaking protocol v2 (docs/subprocess-protocol.md)."""

    def __init__(self, runner: Runner, spec: Spec):
        super().__init__(runner, spec)
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.capture_path: Path | None = None  # set by locate: PARITYGATE_CAPTURE (protocol 2)

    @property
    def output_format(self) -> str:
        return self.runner.output_format or "json"

    def activate(self) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix=f"paritygate-{self.name}-")
        super().activate()

    def deactivate(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        super().deactivate()

    def argv(self, case: Case, out: Path) -> list[str]:
        values = {
            "{case}": str(case.path),
            "{out}": str(out),
            "{case_name}": case.name,
            "{format}": self.output_format,
            "{python}": sys.executable,
            "{root}": str(self.spec.root),
        }
        argv = []
        for part in self.runner.command or ():
            for placeholder, value in values.items():
                part = part.replace(placeholder, value)
            argv.append(part)
        return argv

    def reset(self, case: Case) -> None:
        """Each call of a command is a new process already; a reset also gives the next calls a
        fresh scratch folder (deactivate, activate). State the command keeps elsewhere (files
        it writes) is the command's own to clear."""
        self.deactivate()
        self.activate()

    def _call(self, case: Case) -> RunResult:
        if self._tmp is None:
            raise RuntimeError(f"runner {self.name} is not active")
        folder = Path(tempfile.mkdtemp(dir=self._tmp.name, prefix=f"{case.name}-"))
        out = folder / f"outputs.{self.output_format}"
        env = dict(os.environ)
        env.update(self.runner.env)
        env.update(
            PARITYGATE_PROTOCOL=str(PROTOCOL_VERSION),
            PARITYGATE_CASE=str(case.path),
            PARITYGATE_CASE_NAME=case.name,
            PARITYGATE_OUT=str(out),
            PARITYGATE_FORMAT=self.output_format,
        )
        if self.runner.seed is not None:
            env["PARITYGATE_SEED"] = str(self.runner.seed)
        if self.capture_path is not None:
            env["PARITYGATE_CAPTURE"] = str(self.capture_path)
        argv = self.argv(case, out)
        cwd = self.runner.cwd or self.spec.root
        start = time.perf_counter()
        try:
            process = subprocess.Popen(
                argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,  # the protocol's result is the output file
                stderr=subprocess.PIPE,
                start_new_session=True,  # so a timeout ends the command and its children
            )
        except OSError as exc:
            raise RunFailure(
                self.name, case.name, "crash", f"cannot start {argv[0]!r}: {exc.strerror or exc}"
            ) from None
        children.started(process, own_group=True)
        stderr_reader = _PipeReader(process.stderr)
        try:
            process.wait(timeout=self.runner.timeout)
        except subprocess.TimeoutExpired:
            children.end(process)
            stderr_reader.finish(process.pid)
            raise RunFailure(
                self.name,
                case.name,
                "timeout",
                f"no result within {self.runner.timeout:g} s (killed with its process group)",
                _tail(stderr_reader.data),
            ) from None
        except BaseException:
            # an aborted run (Ctrl-C, SIGTERM to paritygate, an error in another thread's
            # handler) ends the port and everything in its group before it unwinds
            children.end(process)
            raise
        children.finished(process)
        # The command has exited. A child it left behind (in its group, or in a session of its
        # own) may still hold stderr open: the pipe is read for a moment more, never waited on.
        stderr_bytes = stderr_reader.finish(process.pid)
        seconds = time.perf_counter() - start
        stderr = _tail(stderr_bytes)
        if process.returncode != 0:
            raise RunFailure(
                self.name, case.name, "crash", f"exited with status {process.returncode}", stderr
            )
        if not out.is_file():
            raise RunFailure(
                self.name,
                case.name,
                "unparseable",
                f"wrote no output file at {{out}} ({self.output_format})",
                stderr,
            )
        try:
            raw = host_arrays(load_outputs(out, require_names=True), root=BARE_OUTPUT)
        except InputError as exc:
            message = f"not a readable {self.output_format} file: {exc.message}"
            raise RunFailure(self.name, case.name, "unparseable", message, stderr) from None
        return self._finish(raw, case, seconds, stderr)


# Seconds a command's stderr is still read after the command exited (children it left behind
# may hold the pipe open; they are not waited on).
PIPE_GRACE = 1.0


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


class _PipeReader:
    """Reads a pipe on a daemon thread, so that no wait on the pipe can outlast the command."""

    def __init__(self, pipe: Any):
        self._pipe = pipe
        self._chunks: list[bytes] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            while chunk := self._pipe.read1(65536):
                self._chunks.append(chunk)
                if sum(map(len, self._chunks)) > 4 * STDERR_KEEP:
                    self._chunks = [b"".join(self._chunks)[-STDERR_KEEP:]]
        except (OSError, ValueError):
            pass

    @property
    def data(self) -> bytes:
        return b"".join(list(self._chunks))

    def finish(self, pgid: int) -> bytes:
        """What was read once the command exited: EOF within PIPE_GRACE seconds, else the
        command's process group is killed (children it left running) and, if a child in a
        session of its own still holds the pipe, the pipe is abandoned to the daemon thread."""
        self._thread.join(PIPE_GRACE)
        if self._thread.is_alive():
            _kill_group(pgid)
            self._thread.join(PIPE_GRACE)
        return self.data


def _tail(data: bytes | None) -> str:
    if not data:
        return ""
    text = data[-STDERR_KEEP:].decode("utf-8", errors="replace")
    if len(data) > STDERR_KEEP:
        text = "[...]" + text
    return text


def make_runner(runner: Runner, spec: Spec) -> ActiveRunner:
    """The runner for a spec entry (not yet active).

    An in-process runner counts the calls of every callable an activity band of the spec names
    for it (the candidates of the claim, and the reference of a band that measures skipped
    calls), and hands each count on as the output ``@calls:<module:attribute>``."""
    if runner.kind == "python":
        active = PythonRunner(runner, spec)
        targets = []
        for claim in spec.claims.values():
            band = claim.activity
            if band is None or band.calls is None:
                continue
            if runner.name in claim.candidates or (
                runner.role == "reference" and band.measure == "skipped"
            ):
                targets.append(band.calls)
        active.count = tuple(dict.fromkeys(targets))
        return active
    return SubprocessRunner(runner, spec)
