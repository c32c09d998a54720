"""The processes a run starts, and how an aborted run ends them.

Every process paritygate starts (a command runner's port, a worker of the benchmark harness or
of a pool) is registered here while it lives. A command runner's port runs in a session and
process group of its own, so that whatever it starts in turn is ended with it; a worker is a
plain child. When a run is aborted (Ctrl-C, or SIGTERM to paritygate, which the command line
turns into :class:`Terminated`), :func:`end_all` kills every registered process, the whole group
for a port, and waits for it: no port outlives the gate that started it.

Only the command line installs the SIGTERM handler (:func:`terminate_as_interrupt`); a library
caller keeps its own signal handling, and the runners still end their port when any exception,
KeyboardInterrupt included, leaves a run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from typing import Any

__all__ = [
    "Terminated",
    "end",
    "end_all",
    "finished",
    "live",
    "started",
    "terminate_as_interrupt",
]


class Terminated(KeyboardInterrupt):
    """SIGTERM reached paritygate: unwinds like Ctrl-C, so that every ``finally`` runs."""


_lock = threading.Lock()
# pid -> (process, whether it leads a process group of its own)
_live: dict[int, tuple[subprocess.Popen[Any], bool]] = {}


def started(process: subprocess.Popen[Any], *, own_group: bool) -> None:
    """Register ``process`` until :func:`finished` or :func:`end` (or :func:`end_all`)."""
    with _lock:
        _live[process.pid] = (process, own_group)


def live() -> list[int]:
    """The pids of the registered processes that have not been waited for."""
    with _lock:
        return [pid for pid, (process, _) in _live.items() if process.returncode is None]


def finished(process: subprocess.Popen[Any]) -> None:
    """Forget ``process``, which its owner has waited for."""
    with _lock:
        _live.pop(process.pid, None)


def end(process: subprocess.Popen[Any]) -> None:
    """Kill ``process`` (its whole group if it leads one), reap it, and forget it. Call it
    before the process was waited for: a reaped leader's group id may be reused."""
    with _lock:
        entry = _live.pop(process.pid, None)
    _kill(process, entry[1] if entry is not None else False)


def end_all() -> int:
    """Kill every registered process (a port with its whole group) and reap it; the number of
    processes that were still running."""
    with _lock:
        entries = list(_live.values())
        _live.clear()
    running = 0
    for process, own_group in entries:
        running += process.poll() is None
        _kill(process, own_group)
    return running


def _kill(process: subprocess.Popen[Any], own_group: bool) -> None:
    if own_group and process.returncode is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if process.poll() is None:
        try:
            process.kill()
        except ProcessLookupError:
            pass
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:  # pragma: no cover - a process SIGKILL cannot end
        pass


def _raise_terminated(signum: int, frame: Any) -> None:
    raise Terminated(signal.Signals(signum).name)


def terminate_as_interrupt() -> None:
    """SIGTERM (and SIGHUP, a closed terminal) raise :class:`Terminated` in the main thread
    instead of ending the process on the spot, so that an aborted run ends its ports first."""
    for name in ("SIGTERM", "SIGHUP"):
        number = getattr(signal, name, None)
        if number is not None:
            signal.signal(number, _raise_terminated)
