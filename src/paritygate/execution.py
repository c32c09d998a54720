"""Execution: the one layer that schedules units of work (a runner on a case) on an executor.

``record`` and ``gate`` hand their units to :func:`execute`, which runs them on one of three
engines and hands back one :class:`Outcome` per unit (outputs, or the run failure with its
reason). The caller then reads the outcomes in the serial order (runner by runner, case by
case) and computes every verdict itself, so the answer does not depend on the engine
(docs/scale-out.md lists the fields of a result that do: timings, worker ids).

- ``serial`` (the default; today's behaviour, kept for debugging): in this process, one runner
  activated at a time, its cases in order.
- ``pool`` (``--jobs N``, ``--jobs auto``): :class:`paritygate.workers.Worker` processes (fresh
  interpreters, JSON over pipes, no pickle). A worker activates a runner once and keeps it across
  the cases it is handed (a model loads once per worker) and writes each unit's outputs to a
  scratch file with :func:`paritygate.files.save_outputs`; the parent reads them back with
  :func:`paritygate.files.load_outputs`. BLAS and OpenMP run the runner's declared ``threads``
  per worker, and ``auto`` runs cores / threads workers, so nothing is oversubscribed.
- ``ray`` (``--ray ADDRESS`` or ``[execution] engine = "ray"``; ``pip install paritygate[ray]``):
  one Ray actor per activated runner and slot, asking for the runner's ``resources``; outputs
  travel as safetensors bytes through Ray's object store and are parsed, never unpickled, here.

Faults: a worker that dies (kill -9, out of memory) makes its unit a run failure naming the
worker and its exit; with ``[execution] retries = N`` the unit runs again on a fresh worker up
to N times. A unit past its runner's ``timeout`` is cancelled: its worker is killed. Nothing is
dropped: every unit ends with outputs or a failure.
"""

from __future__ import annotations

import os
import queue
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import RunFailure, UserError
from .spec import ENGINES, Execution, Spec

__all__ = ["Plan", "Outcome", "Executed", "plan", "parse_jobs", "execute", "THREAD_VARIABLES"]

# The variables that size BLAS / OpenMP thread pools, set in every pool worker.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
# Seconds a pool or Ray unit may outlast its runner's timeout before its worker is killed (the
# runner's own watchdog, inside the worker, fires first).
TIMEOUT_GRACE = 5.0


@dataclass(frozen=True)
class Plan:
    """The engine a run uses, resolved from the spec's ``[execution]`` and the command line."""

    engine: str = "serial"
    jobs: int | str = 1
    retries: int = 0
    address: str | None = None

    def describe(self) -> dict[str, Any]:
        return {"engine": self.engine, "jobs": self.jobs, "retries": self.retries}


def parse_jobs(value: Any) -> int | str:
    """``--jobs``: a whole number >= 1 or ``auto``; anything else is one UserError line."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    text = str(value).strip().lower()
    if text == "auto":
        return "auto"
    if text.isdigit() and int(text) >= 1:
        return int(text)
    raise UserError(f'--jobs expects a number of workers >= 1 or "auto", got {value!r}')


def plan(
    spec: Spec | None = None,
    *,
    jobs: Any = None,
    ray: str | None = None,
    engine: str | None = None,
    retries: int | None = None,
) -> Plan:
    """The run's plan: the spec's ``[execution]``, overridden by the command line (``--jobs``
    selects the pool, ``--ray ADDRESS`` Ray; ``--ray local`` starts a local cluster)."""
    base = spec.execution if spec is not None else Execution()
    chosen = engine or base.engine
    if chosen not in ENGINES:
        raise UserError(f"unknown engine {chosen!r}; expected one of: {', '.join(ENGINES)}")
    count: int | str = base.jobs
    address = base.address
    if jobs is not None:
        count = parse_jobs(jobs)
        if engine is None and ray is None:
            chosen = "serial" if count == 1 else "pool"
    if ray is not None:
        if not str(ray).strip():
            raise UserError("--ray expects a cluster address (host:port, ray://..., or local)")
        chosen = "ray"
        address = None if ray == "local" else ray
    if chosen == "pool" and count == 1 and jobs is None and base.engine == "pool":
        count = "auto"
    return Plan(
        engine=chosen,
        jobs=count,
        retries=base.retries if retries is None else retries,
        address=address,
    )


def auto_jobs(spec: Spec, names: list[str]) -> int:
    """``--jobs auto``: the cores this process may use divided by the most threads one of the
    runners declares (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        cores = os.cpu_count() or 1
    threads = max([spec.runners[n].threads for n in names] or [1])
    return max(1, cores // threads)


@dataclass
class Outcome:
    """What became of one unit: its outputs, seconds and stderr, or its failure."""

    runner: str
    case: str
    outputs: dict[str, Any] | None = None
    seconds: float = 0.0
    stderr: str = ""
    failure: RunFailure | None = None
    worker: str = "main"  # which process ran it (run-specific)
    attempts: int = 1


@dataclass
class Executed:
    """Every unit's outcome; runners that could not be activated; whether ``stop`` ended the
    run early (units it did not run have no outcome)."""

    outcomes: dict[tuple[str, str], Outcome] = field(default_factory=dict)
    activation: dict[str, RunFailure] = field(default_factory=dict)
    stopped: bool = False
    workers: list[str] = field(default_factory=list)

    def summary(self, chosen: Plan) -> dict[str, Any]:
        """The run-specific record of how the run was executed (provenance.execution)."""
        retried = sorted(f"{o.runner}/{o.case}" for o in self.outcomes.values() if o.attempts > 1)
        return {**chosen.describe(), "workers": len(self.workers), "retried": retried}


# progress(stage, done, total), as the gate's
Progress = Callable[[str, int, int], None]
# stop(runner, case, outputs) -> True to stop running (gate -x)
Stop = Callable[[str, str, dict[str, Any]], bool]


def execute(
    spec: Spec,
    names: list[str],
    cases: list[str],
    chosen: Plan | None = None,
    *,
    progress: Progress | None = None,
    stop: Stop | None = None,
) -> Executed:
    """Run every runner in ``names`` on every case in ``cases`` on the plan's engine."""
    chosen = chosen or Plan()
    units = [(n, c) for n in names for c in cases]
    if chosen.engine == "serial" or not units:
        done = _serial(spec, names, cases, progress, stop)
    elif chosen.engine == "pool":
        jobs = chosen.jobs if isinstance(chosen.jobs, int) else auto_jobs(spec, names)
        done = _Pool(spec, names, min(jobs, len(units)), chosen.retries).run(units, progress, stop)
    else:
        from ._ray import run_on_ray

        done = run_on_ray(spec, names, units, chosen, progress, stop)
    if progress:
        progress("done", len(units), len(units))
    return done


# --------------------------------------------------------------------------------------------
# Serial: this process


def _serial(
    spec: Spec, names: list[str], cases: list[str], progress: Progress | None, stop: Stop | None
) -> Executed:
    from .runners import make_runner

    executed = Executed(workers=["main"])
    total, done = len(names) * len(cases), 0
    for name in names:
        active = make_runner(spec.runners[name], spec)
        try:
            active.activate()
        except RunFailure as exc:
            executed.activation[name] = exc
            done += len(cases)
            if progress:
                progress(f"{name}: failed to start", done, total)
            continue
        try:
            for case in cases:
                if progress:
                    progress(f"{name}: {case}", done, total)
                try:
                    run = active.run(spec.cases[case])
                except RunFailure as exc:
                    executed.outcomes[(name, case)] = Outcome(name, case, failure=exc)
                else:
                    executed.outcomes[(name, case)] = Outcome(
                        name, case, run.outputs, run.seconds, run.stderr
                    )
                    if stop is not None and stop(name, case, run.outputs):
                        executed.stopped = True
                        return executed
                done += 1
        finally:
            active.deactivate()
    return executed


# --------------------------------------------------------------------------------------------
# The worker side (runs inside a pool worker or a Ray actor)


def failure_to_json(exc: RunFailure) -> dict[str, Any]:
    return {
        "runner": exc.runner,
        "case": exc.case,
        "kind": exc.kind,
        "message": exc.message,
        "stderr": exc.stderr,
        "suggested_pass": exc.suggested_pass,
        "site": exc.site,
    }


def failure_from_json(data: dict[str, Any]) -> RunFailure:
    return RunFailure(
        data["runner"],
        data.get("case"),
        data["kind"],
        data["message"],
        data.get("stderr", ""),
        suggested_pass=data.get("suggested_pass"),
        site=data.get("site"),
    )


class _Activated:
    """A worker's one active runner, kept across the units it is handed; handing it a unit of
    another runner (or another spec) deactivates it first."""

    def __init__(self) -> None:
        self.key: tuple[str, str, str] | None = None
        self.spec: Spec | None = None
        self.active: Any = None

    def get(self, spec_path: str, spec_text: str, runner: str) -> Any:
        from .runners import make_runner
        from .spec import spec_from_text

        key = (spec_path, spec_text, runner)
        if self.key == key:
            return self.active
        self.close()
        self.spec = spec_from_text(spec_text, spec_path)
        active = make_runner(self.spec.runners[runner], self.spec)
        active.activate()  # a RunFailure goes to the caller; nothing is kept
        self.key, self.active = key, active
        return active

    def close(self) -> None:
        if self.active is not None:
            active, self.active, self.key = self.active, None, None
            try:
                active.deactivate()
            except Exception:  # a failing close() must not take the next unit down
                pass


def run_unit(spec_path: str, spec_text: str, runner: str, case: str) -> dict[str, Any]:
    """One unit in this (worker) process, its runner kept active for the next: the outputs
    (numpy arrays under ``"outputs"``: the caller turns them into a file or bytes), seconds and
    stderr, or the failure (``"activation"`` when the runner could not start), as JSON."""
    from .workers import state

    activated = state.setdefault("execution.activated", _Activated())
    try:
        active = activated.get(spec_path, spec_text, runner)
    except RunFailure as exc:
        return {"activation": failure_to_json(exc), "pid": os.getpid()}
    assert activated.spec is not None
    try:
        run = active.run(activated.spec.cases[case])
    except RunFailure as exc:
        return {"failure": failure_to_json(exc), "pid": os.getpid()}
    return {
        "outputs": run.outputs,
        "seconds": run.seconds,
        "stderr": run.stderr,
        "pid": os.getpid(),
    }


def pool_unit(spec_path: str, spec_text: str, runner: str, case: str, scratch: str) -> Any:
    """A pool worker's unit: :func:`run_unit`, the outputs written to a file in ``scratch``
    (JSON carries the path, never the arrays)."""
    answer = run_unit(spec_path, spec_text, runner, case)
    if "outputs" in answer:
        outputs = answer.pop("outputs")
        answer["names"] = list(outputs)  # the runner's order, kept
        answer["path"] = str(_save(Path(scratch), outputs))
    return answer


def _save(folder: Path, outputs: dict[str, Any]) -> Path:
    """Outputs into a fresh file of ``folder``: safetensors, or npz for a dtype safetensors
    cannot hold."""
    from .errors import InputError
    from .files import save_outputs

    stem = folder / uuid.uuid4().hex
    try:
        return save_outputs(stem.with_suffix(".safetensors"), outputs)
    except InputError:
        return save_outputs(stem.with_suffix(".npz"), outputs)


def deactivate_unit() -> None:
    """Deactivate the worker's runner (the end of a run)."""
    from .workers import state

    activated = state.pop("execution.activated", None)
    if activated is not None:
        activated.close()


def in_order(tree: dict[str, Any], names: list[str]) -> dict[str, Any]:
    """A unit's outputs read back (nested by the file formats) flat again, in the runner's
    order."""
    from .outputs import flatten_outputs

    flat = flatten_outputs(tree)
    if set(flat) != set(names):  # pragma: no cover - the writer and reader disagree
        raise UserError(f"outputs read back as {sorted(flat)}, written as {sorted(names)}")
    return {name: flat[name] for name in names}


def _read(path: str, names: list[str]) -> dict[str, Any]:
    from .files import load_outputs

    try:
        return in_order(load_outputs(path), names)
    finally:
        Path(path).unlink(missing_ok=True)


def answer_to_outcome(
    runner: str, case: str, answer: dict[str, Any], outputs: dict[str, Any] | None, worker: str
) -> Outcome:
    """A worker's JSON answer (outputs already read back) as an :class:`Outcome`."""
    if "failure" in answer:
        return Outcome(runner, case, failure=failure_from_json(answer["failure"]), worker=worker)
    return Outcome(
        runner, case, outputs, float(answer["seconds"]), answer.get("stderr", ""), worker=worker
    )


def died(runner: str, case: str, worker: str, why: str, attempts: int) -> RunFailure:
    """The failure of a unit whose worker died (or was killed at the timeout)."""
    tried = f" (tried {attempts} times)" if attempts > 1 else ""
    return RunFailure(runner, case, "crash", f"{worker} died while running it: {why}{tried}")


def timed_out(runner: str, case: str, timeout: float, worker: str) -> RunFailure:
    return RunFailure(
        runner,
        case,
        "timeout",
        f"no result within {timeout:g} s ({worker} running it was killed)",
    )


# --------------------------------------------------------------------------------------------
# The pool: paritygate.workers processes


class _Pool:
    def __init__(self, spec: Spec, names: list[str], size: int, retries: int):
        self.spec = spec
        self.size = max(1, size)
        self.retries = retries
        self.spec_path = str(spec.path)
        try:
            self.spec_text = spec.path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UserError(
                f"a worker pool reads the spec from its file: {exc.strerror or exc}",
                where=str(spec.path),
            ) from None
        threads = max([spec.runners[n].threads for n in names] or [1])
        self.env = {name: str(threads) for name in THREAD_VARIABLES}
        self.lock = threading.Lock()
        self.pending: list[tuple[str, str, int]] = []  # (runner, case, attempt)
        self.failed: set[str] = set()  # runners that could not be activated
        self.results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.halt = threading.Event()
        self.workers: list[Any] = []
        self.pids: list[str] = []

    def _start(self) -> Any:
        from .workers import Worker

        worker = Worker(env=self.env)
        with self.lock:
            self.workers.append(worker)
            self.pids.append(f"worker {worker.pid}")
        return worker

    def _next(self, last: str | None) -> tuple[str, str, int] | None:
        """The next unit, one of ``last``'s runner first (its worker keeps it active)."""
        with self.lock:
            if self.halt.is_set():
                return None
            for i, unit in enumerate(self.pending):
                if unit[0] == last:
                    return self.pending.pop(i)
            return self.pending.pop(0) if self.pending else None

    def _serve(self, scratch: str) -> None:
        from .workers import WorkerError

        worker = None
        last = None
        try:
            while (unit := self._next(last)) is not None:
                runner, case, attempt = unit
                if runner in self.failed:
                    self.results.put(("skip", unit, None))
                    continue
                if worker is None:
                    worker = self._start()
                name = f"worker {worker.pid}"
                timeout = self.spec.runners[runner].timeout
                timer = None
                expired = threading.Event()
                if timeout is not None:

                    def kill(w: Any = worker, expired: Any = expired) -> None:
                        expired.set()
                        w.kill()

                    timer = threading.Timer(timeout + TIMEOUT_GRACE, kill)
                    timer.daemon = True
                    timer.start()
                try:
                    answer = worker.call(
                        "paritygate.execution:pool_unit",
                        self.spec_path,
                        self.spec_text,
                        runner,
                        case,
                        scratch,
                    )
                except WorkerError as exc:
                    if timer is not None:
                        timer.cancel()
                    code = worker.process.poll()
                    worker.kill()
                    worker, last = None, None
                    if expired.is_set():
                        failure = timed_out(runner, case, timeout or 0, name)
                        self.results.put(("done", unit, Outcome(runner, case, failure=failure)))
                        continue
                    if code is None:  # the worker is alive: the call itself failed
                        why = exc.message
                    else:
                        why = f"exit {code}" + (f" (signal {-code})" if code < 0 else "")
                    if attempt <= self.retries:
                        with self.lock:
                            self.pending.insert(0, (runner, case, attempt + 1))
                        self.results.put(("retry", unit, why))
                        continue
                    failure = died(runner, case, name, why, attempt)
                    self.results.put(("done", unit, Outcome(runner, case, failure=failure)))
                    continue
                if timer is not None:
                    timer.cancel()
                last = runner
                if "activation" in answer:
                    self.failed.add(runner)
                    self.results.put(("activation", unit, failure_from_json(answer["activation"])))
                    continue
                outputs = _read(answer["path"], answer["names"]) if "path" in answer else None
                outcome = answer_to_outcome(runner, case, answer, outputs, name)
                outcome.attempts = attempt
                if outcome.failure is not None and outcome.failure.kind == "timeout":
                    # the stray call still runs inside that worker: end it, start afresh
                    worker.kill()
                    worker, last = None, None
                self.results.put(("done", unit, outcome))
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            self.results.put(("error", None, exc))
        finally:
            if worker is not None:
                try:
                    worker.call("paritygate.execution:deactivate_unit")
                except Exception:
                    pass
                worker.close()

    def run(
        self, units: list[tuple[str, str]], progress: Progress | None, stop: Stop | None
    ) -> Executed:
        executed = Executed()
        self.pending = [(r, c, 1) for r, c in units]
        total = len(units)
        scratch = tempfile.mkdtemp(prefix="paritygate-units-")
        threads = [
            threading.Thread(target=self._serve, args=(scratch,), daemon=True)
            for _ in range(self.size)
        ]
        done = 0
        try:
            for thread in threads:
                thread.start()
            while any(t.is_alive() for t in threads) or not self.results.empty():
                try:
                    kind, unit, value = self.results.get(timeout=0.2)
                except queue.Empty:
                    continue
                if kind == "error":
                    raise value
                runner, case, _ = unit
                if kind == "retry":
                    if progress:
                        progress(f"{runner}: {case} (worker died: {value}; retrying)", done, total)
                    continue
                done += 1
                if kind == "activation":
                    executed.activation.setdefault(runner, value)
                elif kind == "done":
                    executed.outcomes[(runner, case)] = value
                    if (
                        stop is not None
                        and value.outputs is not None
                        and not self.halt.is_set()
                        and stop(runner, case, value.outputs)
                    ):
                        executed.stopped = True
                        self.halt.set()
                if progress:
                    progress(f"{runner}: {case}", done, total)
        except BaseException:
            self.halt.set()
            for worker in list(self.workers):
                worker.kill()
            raise
        finally:
            for thread in threads:
                thread.join(timeout=30)
            shutil.rmtree(scratch, ignore_errors=True)
        # runners that failed to start: their other units carry nothing
        for key in [k for k in executed.outcomes if k[0] in executed.activation]:
            del executed.outcomes[key]
        executed.workers = list(self.pids)
        return executed
