"""Worker processes: the one way paritygate runs callables in other processes.

A :class:`Worker` is a fresh Python process (``paritygate/_worker_main.py``) that runs
functions named ``"module:attribute"`` with JSON arguments and answers in JSON: one request and
one answer per line over its stdin and stdout, no pickle anywhere, so the same protocol can
later travel over a socket to another machine. Functions run in a worker keep per-process
state in :data:`state` (a plain dict), so a caller can load something once (a model, a callable
to benchmark) and use it over many calls. The worker's own stdout is moved to stderr, so
whatever the called code prints cannot corrupt the protocol.

:class:`WorkerPool` holds several workers and maps calls over them concurrently; the benchmark
harness uses workers to give each side fresh processes, and gate execution can use a pool to
run units of work in parallel.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from . import children
from .errors import UserError

__all__ = ["Worker", "WorkerPool", "WorkerError", "importable_name", "state"]

# Per-process store for functions that run inside a worker.
state: dict[str, Any] = {}

# The worker's entry point: a file run by path, so that starting a worker does not import
# paritygate's comparison stack (seconds on a busy machine) before the called function needs it.
_MAIN = Path(__file__).with_name("_worker_main.py")


class WorkerError(UserError):
    """A function run in a worker raised, or the worker died; carries the remote traceback."""

    def __init__(self, message: str, *, remote_traceback: str = "", hint: str | None = None):
        super().__init__(message, hint=hint)
        self.remote_traceback = remote_traceback


def importable_name(fn: Any) -> str | None:
    """``"module:qualname"`` when a fresh process could import ``fn`` by name, else None."""
    if isinstance(fn, str):
        return fn if ":" in fn else None
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or module == "__main__" or "<" in qualname:
        return None
    obj: Any = sys.modules.get(module)
    if obj is None:
        return None
    for part in qualname.split("."):
        obj = getattr(obj, part, None)
    return f"{module}:{qualname}" if obj is fn else None


class Worker:
    """One fresh worker process. ``call("pkg.mod:fn", *args, **kwargs)`` returns fn's JSON
    result or raises :class:`WorkerError`. Use as a context manager, or ``close()``."""

    def __init__(
        self,
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        nice: int = 0,
        python: str | None = None,
    ):
        child_env = dict(os.environ)
        # the worker finds what this process finds (examples, benchmarks, tests on sys.path)
        paths = [p or os.getcwd() for p in sys.path]
        if child_env.get("PYTHONPATH"):
            paths.append(child_env["PYTHONPATH"])
        child_env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
        child_env.update(env or {})
        self._lock = threading.Lock()
        self._next = 0
        self.process = subprocess.Popen(
            [python or sys.executable, "-u", str(_MAIN)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=child_env,
            cwd=cwd,
            text=True,
            bufsize=1,
            preexec_fn=(lambda: os.nice(nice)) if nice and hasattr(os, "nice") else None,
            # a group of its own: an aborted run ends it (paritygate.children), and a Ctrl-C at
            # the terminal reaches paritygate alone instead of every worker's call
            start_new_session=True,
        )
        children.started(self.process, own_group=True)

    @property
    def pid(self) -> int:
        return self.process.pid

    def call(self, target: str, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            if self.process.poll() is not None:
                raise WorkerError(f"worker {self.pid} has exited ({self.process.returncode})")
            self._next += 1
            request = {"id": self._next, "target": target, "args": args, "kwargs": kwargs}
            try:
                assert self.process.stdin is not None and self.process.stdout is not None
                self.process.stdin.write(json.dumps(request) + "\n")
                self.process.stdin.flush()
                line = self.process.stdout.readline()
            except (BrokenPipeError, OSError) as exc:
                raise WorkerError(f"worker {self.pid} is gone ({exc})") from None
            if not line:
                code = self.process.wait()
                raise WorkerError(f"worker {self.pid} died while running {target} (exit {code})")
            answer = json.loads(line)
        if "error" in answer:
            err = answer["error"]
            raise WorkerError(
                f"{target} raised {err['type']} in worker {self.pid}: {err['message']}",
                remote_traceback=err.get("traceback", ""),
            )
        return answer.get("result")

    def close(self) -> None:
        """Close the worker's input, which ends it; one that does not end within 10 s is
        killed."""
        if self.process.poll() is None:
            try:
                assert self.process.stdin is not None
                self.process.stdin.close()
                self.process.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                children.end(self.process)
        children.finished(self.process)

    def kill(self) -> None:
        """End the worker now, whatever it is running (an aborted run)."""
        children.end(self.process)

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        if kind is not None and not issubclass(kind, Exception):
            self.kill()  # Ctrl-C or SIGTERM: do not wait for the call in flight
        else:
            self.close()


class WorkerPool:
    """``size`` workers; ``map`` runs one call per argument tuple, spread over the workers."""

    def __init__(self, size: int, **worker_options: Any):
        if size < 1:
            raise UserError(f"a worker pool needs at least 1 worker, got {size}")
        with ThreadPoolExecutor(size) as starter:
            self.workers = list(starter.map(lambda _: Worker(**worker_options), range(size)))

    def map(self, target: str, arguments: Iterable[tuple[Any, ...]]) -> list[Any]:
        items = list(arguments)
        with ThreadPoolExecutor(len(self.workers)) as pool:
            futures = [
                pool.submit(self.workers[i % len(self.workers)].call, target, *args)
                for i, args in enumerate(items)
            ]
            return [f.result() for f in futures]

    def close(self) -> None:
        for worker in self.workers:
            worker.close()

    def __enter__(self) -> WorkerPool:
        return self

    def __exit__(self, kind: Any, *exc: Any) -> None:
        for worker in self.workers:
            worker.__exit__(kind, *exc)
