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
import sys
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import RunFailure, UserError
from .spec import ENGINES, Execution, Spec

__all__ = [
    "Plan",
    "Outcome",
    "Executed",
    "plan",
    "parse_jobs",
    "execute",
    "THREAD_VARIABLES",
    "RUN_SPECIFIC_FIELDS",
    "Variant",
    "mutated_runner",
    "make_unit_runner",
    "listening",
    "timing_alone",
    "timed_on_ray",
]

# The fields of a gate result's JSON that depend on how and when the run was executed; every
# other field is the same serially, on a pool and on Ray (docs/scale-out.md, tested).
RUN_SPECIFIC_FIELDS = (
    "started",
    "finished",
    "provenance.date",
    "provenance.seconds",
    "provenance.execution",
)

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


def auto_jobs(spec: Spec, names: list[str], variants: dict[str, Variant] | None = None) -> int:
    """``--jobs auto``: the cores this process may use divided by the most threads one of the
    runners declares (at least 1)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS
        cores = os.cpu_count() or 1
    threads = max([declared(spec, n, variants).threads for n in names] or [1])
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
    modules: tuple[str, ...] = ()  # what its process had loaded (pool and Ray)


# Who hears of each unit's outcome the moment it arrives, on every engine (the command line's
# partial result, written as a run goes, so that an interrupted run says what it evaluated).
_listeners: list[Callable[[Outcome], None]] = []


@contextmanager
def listening(callback: Callable[[Outcome], None]) -> Iterator[None]:
    """Call ``callback(outcome)`` for every unit's outcome as it arrives (in this process's
    main thread) while the block runs; a runner that could not start arrives once, as an
    outcome with case ``"*"`` and its failure."""
    _listeners.append(callback)
    try:
        yield
    finally:
        _listeners.remove(callback)


class _Arriving(dict):  # type: ignore[type-arg]
    """Outcomes by unit, each told to the listeners as it is stored."""

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        if not isinstance(value, Outcome):  # a runner that could not start
            value = Outcome(key, "*", failure=value)
        for callback in list(_listeners):
            callback(value)


@dataclass
class Executed:
    """Every unit's outcome; runners that could not be activated; whether ``stop`` ended the
    run early (units it did not run have no outcome)."""

    outcomes: dict[tuple[str, str], Outcome] = field(default_factory=_Arriving)
    activation: dict[str, RunFailure] = field(default_factory=_Arriving)
    stopped: bool = False
    workers: list[str] = field(default_factory=list)
    # the top-level modules the units' processes loaded to run them (not to carry outputs)
    modules: set[str] = field(default_factory=set)

    def summary(self, chosen: Plan) -> dict[str, Any]:
        """The run-specific record of how the run was executed (provenance.execution)."""
        retried = sorted(f"{o.runner}/{o.case}" for o in self.outcomes.values() if o.attempts > 1)
        return {**chosen.describe(), "workers": len(self.workers), "retried": retried}


# A unit's runner that is not a runner of the spec, keyed by the name its units carry: (the
# spec's runner it is made from, a model mutation's name, its "module:function"). With a
# mutation it stands in for that runner's model (calibrate --model-mutation); without, it is the
# runner itself under another key (a calibration repeat). Workers are sent these names, never
# code.
Variant = tuple[str, "str | None", "str | None"]


def mutated_runner(base: Any, candidate: str, name: str, target: str) -> Any:
    """The candidate's runner with its model replaced by the mutation ``target``
    ("module:function"): called like the runner it replaces (a factory built with the
    candidate's options stays a factory; otherwise a plain in-process callable)."""
    import dataclasses

    if base.factory:
        return dataclasses.replace(base, name=f"{candidate}[{name}]", factory=target)
    return dataclasses.replace(
        base,
        name=f"{candidate}[{name}]",
        kind="python",
        callable=target,
        factory=None,
        options={},
        command=None,
    )


def declared(spec: Spec, name: str, variants: dict[str, Variant] | None = None) -> Any:
    """The runner declaration a unit's runner name stands for."""
    if variants and name in variants:
        base, mutation, target = variants[name]
        if target is None:
            return spec.runners[base]
        return mutated_runner(spec.runners[base], base, mutation or name, target)
    return spec.runners[name]


def make_unit_runner(spec: Spec, name: str, variants: dict[str, Variant] | None = None) -> Any:
    """The (not yet active) runner of a unit's runner name; a variant counts the activity of the
    runner it is made from."""
    from .runners import make_runner

    active = make_runner(declared(spec, name, variants), spec)
    if variants and name in variants:
        active.count = getattr(make_runner(spec.runners[variants[name][0]], spec), "count", ())
    return active


# progress(stage, done, total), as the gate's
Progress = Callable[[str, int, int], None]
# stop(runner, case, outputs) -> True to stop running (gate -x); outputs None: the unit failed
Stop = Callable[[str, str, Any], bool]


def execute(
    spec: Spec,
    names: list[str],
    cases: list[str],
    chosen: Plan | None = None,
    *,
    progress: Progress | None = None,
    stop: Stop | None = None,
    stop_on_failure: bool = False,
    variants: dict[str, Variant] | None = None,
) -> Executed:
    """Run every runner in ``names`` on every case in ``cases`` on the plan's engine.

    ``variants`` names units' runners that are not the spec's (:data:`Variant`: a model mutation
    or a repeat of a runner, as ``calibrate`` runs them).

    ``stop(runner, case, outputs)`` returning True, or with ``stop_on_failure`` a unit that
    failed, ends the run early as a serial run would: outcomes past the first such unit in serial
    order are dropped (``record`` stops at the reference's first failure)."""
    given = stop

    def judged(runner: str, case: str, outputs: dict[str, Any] | None) -> bool:
        if outputs is None:  # the unit failed
            return stop_on_failure
        return given is not None and given(runner, case, outputs)

    stop = judged if given is not None or stop_on_failure else None

    chosen = chosen or Plan()
    units = [(n, c) for n in names for c in cases]
    if chosen.engine == "serial" or not units:
        done = _serial(spec, names, cases, progress, stop, variants)
    elif chosen.engine == "pool":
        jobs = chosen.jobs if isinstance(chosen.jobs, int) else auto_jobs(spec, names, variants)
        pool = _Pool(spec, names, min(jobs, len(units)), chosen.retries, variants)
        done = pool.run(units, progress, stop)
    else:
        done = run_on_ray(spec, names, units, chosen, progress, stop, variants)
    done.modules = loaded_modules().union(*(o.modules for o in done.outcomes.values()))
    if progress:
        progress("done", len(units), len(units))
    return done


# --------------------------------------------------------------------------------------------
# Timing units: a speed claim or a benchmark never shares its node with other units

# While a run's units run, what runs them (worker ids): a timing unit started meanwhile is
# refused rather than timed beside them.
_running: list[Callable[[], list[str]]] = []


@contextmanager
def _units_running(live: Callable[[], list[str]]) -> Iterator[None]:
    _running.append(live)
    try:
        yield
    finally:
        _running.remove(live)


def timing_alone(what: str) -> None:
    """Refuse (UserError, saying why) to time ``what`` here while units of a run still run in
    this process or its workers: a timing unit gets the node alone, after them."""
    busy = [worker for live in list(_running) for worker in live()]
    if busy:
        shown = ", ".join(busy[:4]) + (f" and {len(busy) - 4} more" if len(busy) > 4 else "")
        raise UserError(
            f"{what} refused: {len(busy)} unit worker(s) of a run still run beside it "
            f"({shown}); timing needs the node alone",
            hint="time after the run's units are done (the gate times speed claims last)",
        )


def timed_on_ray(
    address: str | None, target: str, *args: Any, what: str = "a timing unit"
) -> dict[str, Any]:
    """Run the function named ``target`` (``"module:attribute"``, returning JSON-able data)
    on a node of the Ray cluster that it has alone: a node none of whose resources are taken,
    asked for all of its CPUs and GPUs and pinned there. Refuses (UserError, saying what each
    node has taken) when no node is idle; never times beside other units."""
    ray = _ray()
    started_here = _ray_connect(ray, address)
    try:
        node, whole = _idle_node(ray, what)
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = ray.remote(_call_named).options(
            num_cpus=whole.get("CPU", 0.0),
            num_gpus=whole.get("GPU", 0.0),
            scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
            runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(_paths())}},
            max_retries=0,
        )
        return ray.get(task.remote(target, list(args)))
    finally:
        if started_here:
            ray.shutdown()


def _call_named(target: str, args: list[Any]) -> Any:
    import importlib

    module, _, name = target.partition(":")
    value: Any = importlib.import_module(module)
    for part in name.split("."):
        value = getattr(value, part)
    return value(*args)


def _idle_node(ray: Any, what: str) -> tuple[str, dict[str, float]]:
    """(node id, its whole CPU / GPU) of the first alive node with nothing taken."""
    from ray._private.state import available_resources_per_node

    available = available_resources_per_node()  # no public call gives it per node (Ray 2.x)
    taken_by = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        total = {k: v for k, v in node["Resources"].items() if k in ("CPU", "GPU")}
        free = available.get(node["NodeID"], {})
        taken = {k: v - free.get(k, 0.0) for k, v in total.items() if v - free.get(k, 0.0) > 0}
        if not taken and total.get("CPU"):
            return node["NodeID"], total
        where = node.get("NodeManagerAddress", node["NodeID"][:12])
        taken_by.append(
            f"{where}: "
            + (", ".join(f"{v:g} of {total[k]:g} {k}" for k, v in taken.items()) or "no CPU")
            + " taken"
        )
    raise UserError(
        f"{what} refused: no node of the Ray cluster is idle ({'; '.join(taken_by) or 'none'}); "
        "timing needs a node alone",
        hint="run it when a node is free, or add a node",
    )


def _paths() -> list[str]:
    return list(dict.fromkeys(p or os.getcwd() for p in sys.path))


# --------------------------------------------------------------------------------------------
# Serial: this process


def _serial(
    spec: Spec,
    names: list[str],
    cases: list[str],
    progress: Progress | None,
    stop: Stop | None,
    variants: dict[str, Variant] | None = None,
) -> Executed:
    with _units_running(lambda: ["this process (a serial run)"]):
        return _serial_run(spec, names, cases, progress, stop, variants)


def _serial_run(
    spec: Spec,
    names: list[str],
    cases: list[str],
    progress: Progress | None,
    stop: Stop | None,
    variants: dict[str, Variant] | None,
) -> Executed:
    executed = Executed(workers=["main"])
    total, done = len(names) * len(cases), 0
    for name in names:
        active = make_unit_runner(spec, name, variants)
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
                    if stop is not None and stop(name, case, None):
                        executed.stopped = True
                        return executed
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
# The modules a run loaded: the libraries that may have moved its numbers (a calibration's
# environment). The container format that carries outputs between processes is left out: a
# pool run would otherwise list safetensors where a serial one does not.

_TRANSPORT: set[str] = set()


@contextmanager
def _carrying() -> Iterator[None]:
    """Modules first imported inside this block only carried outputs."""
    before = set(sys.modules)
    try:
        yield
    finally:
        _TRANSPORT.update({n.partition(".")[0] for n in set(sys.modules) - before} - set(before))


def loaded_modules() -> set[str]:
    """The top-level modules this process loaded, but for those that only carried outputs."""
    return {name.partition(".")[0] for name in list(sys.modules)} - _TRANSPORT


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
        self.key: tuple[str, str, Any] | None = None
        self.spec: Spec | None = None
        self.active: Any = None

    def get(self, spec_path: str, spec_text: str, runner: str, variant: Any = None) -> Any:
        from .spec import spec_from_text

        # a repeat of a runner (a variant without a mutation) keeps the runner activated
        identity = (variant[0], variant[2]) if variant else (runner, None)
        key = (spec_path, spec_text, identity)
        if self.key == key:
            return self.active
        self.close()
        self.spec = spec_from_text(spec_text, spec_path)
        variants = {runner: tuple(variant)} if variant else None
        active = make_unit_runner(self.spec, runner, variants)
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


def run_unit(
    spec_path: str, spec_text: str, runner: str, case: str, variant: Any = None
) -> dict[str, Any]:
    """One unit in this (worker) process, its runner kept active for the next: the outputs
    (numpy arrays under ``"outputs"``: the caller turns them into a file or bytes), seconds and
    stderr, or the failure (``"activation"`` when the runner could not start), as JSON."""
    from .workers import state

    activated = state.setdefault("execution.activated", _Activated())
    try:
        active = activated.get(spec_path, spec_text, runner, variant)
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
        "modules": sorted(loaded_modules()),
    }


def pool_unit(
    spec_path: str, spec_text: str, runner: str, case: str, scratch: str, variant: Any = None
) -> Any:
    """A pool worker's unit: :func:`run_unit`, the outputs written to a file in ``scratch``
    (JSON carries the path, never the arrays)."""
    answer = run_unit(spec_path, spec_text, runner, case, variant)
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
    with _carrying():
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
        with _carrying():
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
        runner,
        case,
        outputs,
        float(answer["seconds"]),
        answer.get("stderr", ""),
        worker=worker,
        modules=tuple(answer.get("modules", ())),
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
    def __init__(
        self,
        spec: Spec,
        names: list[str],
        size: int,
        retries: int,
        variants: dict[str, Variant] | None = None,
    ):
        self.spec = spec
        self.variants = variants or {}
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
        threads = max([declared(spec, n, variants).threads for n in names] or [1])
        self.env = {name: str(threads) for name in THREAD_VARIABLES}
        self.lock = threading.Lock()
        self.pending: list[tuple[str, str, int]] = []  # (runner, case, attempt)
        self.failed: set[str] = set()  # runners that could not be activated
        self.results: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.halt = threading.Event()
        self.workers: list[Any] = []
        self.pids: list[str] = []

    def _live(self) -> list[str]:
        with self.lock:
            return [f"worker {w.pid}" for w in self.workers if w.process.poll() is None]

    def _start(self) -> Any:
        from .workers import Worker

        worker = Worker(env=self.env)
        with self.lock:
            self.workers.append(worker)
            self.pids.append(f"worker {worker.pid}")
        return worker

    def _identity(self, runner: str | None) -> Any:
        """What a worker keeps activated for a unit's runner (a repeat shares its runner's)."""
        variant = self.variants.get(runner or "")
        return (variant[0], variant[2]) if variant else runner

    def _next(self, last: str | None) -> tuple[str, str, int] | None:
        """The next unit, one of ``last``'s runner first (its worker keeps it active)."""
        with self.lock:
            if self.halt.is_set():
                return None
            kept = self._identity(last) if last is not None else None
            for i, unit in enumerate(self.pending):
                if last is not None and self._identity(unit[0]) == kept:
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
                timeout = declared(self.spec, runner, self.variants).timeout
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
                        self.variants.get(runner),
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
        flagged: set[tuple[str, str]] = set()  # units ``stop`` flagged
        self.pending = [(r, c, 1) for r, c in units]
        total = len(units)
        scratch = tempfile.mkdtemp(prefix="paritygate-units-")
        threads = [
            threading.Thread(target=self._serve, args=(scratch,), daemon=True)
            for _ in range(self.size)
        ]
        done = 0
        live = self._live
        try:
            _running.append(live)
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
                    if runner not in executed.activation:
                        executed.activation[runner] = value
                elif kind == "done":
                    executed.outcomes[(runner, case)] = value
                    if stop is not None and (
                        stop(runner, case, None)
                        if value.failure is not None
                        else stop(runner, case, value.outputs or {})
                    ):
                        flagged.add((runner, case))
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
            _running.remove(live)
            shutil.rmtree(scratch, ignore_errors=True)
        # runners that failed to start: their other units carry nothing
        for key in [k for k in executed.outcomes if k[0] in executed.activation]:
            del executed.outcomes[key]
        if flagged:  # as a serial run: stopped at the first flagged unit in serial order
            first = min(units.index(u) for u in flagged)
            for unit in units[first + 1 :]:
                executed.outcomes.pop(unit, None)
            executed.stopped = True
        executed.workers = list(self.pids)
        return executed


# --------------------------------------------------------------------------------------------
# Ray (imported only when a run asks for it)
#
# Runner by runner, a few actors (one per slot) each activate the runner once and run the cases
# handed to them, one at a time, as the pool's workers do (run_unit). An actor asks Ray for the
# runner's ``resources`` (``num_cpus`` defaults to its ``threads``), so a candidate that names a
# hardware class as a custom resource runs only on nodes offering it. Outputs come back as
# safetensors (or npz) bytes through Ray's object store and are read by
# paritygate.files.load_outputs: Ray pickles its own messages between the project's processes,
# but nothing read from users or stored on disk is unpickled.


def _ray() -> Any:
    try:
        import ray
    except ImportError:
        raise UserError(
            "the Ray engine needs Ray, which is not installed: pip install 'paritygate[ray]'"
        ) from None
    return ray


class UnitActor:
    """A Ray actor: one activated runner, kept across the cases it runs."""

    def run(
        self, spec_path: str, spec_text: str, runner: str, case: str, variant: Any = None
    ) -> dict[str, Any]:
        answer = run_unit(spec_path, spec_text, runner, case, variant)
        if "outputs" in answer:
            outputs = answer.pop("outputs")
            answer["names"] = list(outputs)
            with tempfile.TemporaryDirectory(prefix="paritygate-unit-") as scratch:
                path = _save(Path(scratch), outputs)
                answer["format"] = path.suffix
                answer["payload"] = path.read_bytes()
        return answer

    def close(self) -> None:
        deactivate_unit()


def _read_bytes(answer: dict[str, Any]) -> dict[str, Any]:
    """Outputs from an actor's bytes, through the one reader of output files."""
    from .files import load_outputs

    with tempfile.TemporaryDirectory(prefix="paritygate-unit-") as scratch:
        path = Path(scratch) / f"outputs{answer['format']}"
        path.write_bytes(answer["payload"])
        with _carrying():
            return in_order(load_outputs(path), answer["names"])


def _ray_options(
    spec: Spec, runner: str, variants: dict[str, Variant] | None = None
) -> dict[str, Any]:
    """What the runner's actors ask Ray for, and the environment they start with."""
    declaration = declared(spec, runner, variants)
    resources = dict(declaration.resources)
    options: dict[str, Any] = {"num_cpus": resources.pop("num_cpus", float(declaration.threads))}
    if "num_gpus" in resources:
        options["num_gpus"] = resources.pop("num_gpus")
    if "memory" in resources:
        options["memory"] = int(resources.pop("memory"))
    if resources:
        options["resources"] = resources
    env = {name: str(declaration.threads) for name in THREAD_VARIABLES}
    paths = [p or os.getcwd() for p in sys.path]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    options["runtime_env"] = {"env_vars": env}
    options["max_restarts"] = 0
    return options


def _ray_wanted(
    spec: Spec, runner: str, variants: dict[str, Variant] | None = None
) -> dict[str, float]:
    """What one actor of the runner takes from the cluster, by Ray's resource names."""
    options = _ray_options(spec, runner, variants)
    wanted = {"CPU": float(options["num_cpus"])}
    if options.get("num_gpus"):
        wanted["GPU"] = float(options["num_gpus"])
    if options.get("memory"):
        wanted["memory"] = float(options["memory"])
    wanted.update(options.get("resources", {}))
    return {k: v for k, v in wanted.items() if v > 0}


def _ray_slots(
    ray: Any,
    spec: Spec,
    runner: str,
    chosen: Plan,
    cases: int,
    variants: dict[str, Variant] | None = None,
) -> int:
    """How many actors run a runner at once: as many as the cluster's resources hold at what
    one asks for (every one of them can be placed), at most ``jobs`` when it is a number, and
    0 when no node offers what it asks for."""
    total = ray.cluster_resources()
    fits = [
        int(total.get(name, 0.0) // amount)
        for name, amount in _ray_wanted(spec, runner, variants).items()
    ]
    slots = min(fits) if fits else cases
    if isinstance(chosen.jobs, int) and chosen.jobs > 1:
        slots = min(slots, chosen.jobs)
    return max(0, min(slots, cases))


def run_on_ray(
    spec: Spec,
    names: list[str],
    units: list[tuple[str, str]],
    chosen: Plan,
    progress: Progress | None,
    stop: Stop | None,
    variants: dict[str, Variant] | None = None,
) -> Executed:
    ray = _ray()
    started_here = _ray_connect(ray, chosen.address)
    try:
        spec_text = spec.path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UserError(
            f"Ray workers read the spec from its file: {exc.strerror or exc}", where=str(spec.path)
        ) from None
    try:
        run = _RayRun(ray, spec, spec_text, chosen, progress, stop, variants or {})
        return run.all(names, units)
    finally:
        if started_here:
            ray.shutdown()


def _ray_connect(ray: Any, address: str | None) -> bool:
    """Connect to the cluster at ``address`` (None: start a local one) unless this process
    already is; whether it connected here (and so disconnects after)."""
    if ray.is_initialized():
        return False
    try:
        ray.init(
            address=address,
            include_dashboard=False,
            log_to_driver=False,
            logging_level="ERROR",
        )
    except (ConnectionError, ValueError, RuntimeError) as exc:
        where = address or "a local cluster"
        raise UserError(f"cannot reach the Ray cluster {where}: {exc}") from None
    return True


class _RayRun:
    def __init__(
        self,
        ray: Any,
        spec: Spec,
        spec_text: str,
        chosen: Plan,
        progress: Progress | None,
        stop: Stop | None,
        variants: dict[str, Variant],
    ):
        self.variants = variants
        self.ray = ray
        self.spec = spec
        self.spec_text = spec_text
        self.chosen = chosen
        self.progress = progress
        self.stop = stop
        self.actor_class = ray.remote(UnitActor)
        self.executed = Executed()
        self.done = 0
        self.total = 0
        self.flagged: list[tuple[str, str]] = []

    def _actor(self, runner: str) -> Any:
        actor = self.actor_class.options(**_ray_options(self.spec, runner, self.variants)).remote()
        self.executed.workers.append(f"ray actor {actor._actor_id.hex()[:12]}")
        return actor

    def all(self, names: list[str], units: list[tuple[str, str]]) -> Executed:
        with _units_running(lambda: [f"Ray actors of a run ({len(self.executed.workers)})"]):
            return self._all(names, units)

    def _all(self, names: list[str], units: list[tuple[str, str]]) -> Executed:
        """Every runner's units at once, as far as the cluster holds their actors: runners start
        in order, each with as many actors as the resources the runners before it left free
        allow (so that every actor asked for can be placed at once, and a unit's timeout never
        counts time spent waiting for a node); one that fits nowhere now waits for those before
        it to end, one that fits nowhere in the whole cluster fails to start."""
        self.total = len(units)
        waiting = deque(n for n in names if any(r == n for r, _ in units))
        by_runner = {n: [c for r, c in units if r == n] for n in waiting}
        self.active: dict[str, _RayRunner] = {}
        self.inflight: dict[Any, tuple[str, Any, str, int, float]] = {}
        self.taken: dict[str, float] = {}
        try:
            while waiting or self.active:
                while waiting and not self.flagged:
                    if not self._start(waiting[0], by_runner[waiting[0]]):
                        break  # it waits for a runner before it to end
                    waiting.popleft()
                if self.flagged:  # stop: nothing more is handed out
                    waiting.clear()
                    for runner in self.active.values():
                        runner.pending.clear()
                self._submit()
                if self.inflight:
                    self._collect()
                for name in [n for n, r in self.active.items() if r.finished(self.inflight)]:
                    self._finish(name)
        finally:
            for name in list(self.active):
                self._finish(name)
            for _, actor, *_ in self.inflight.values():
                self.ray.kill(actor, no_restart=True)
        if self.flagged:  # as a serial run: stopped at the first flagged unit in serial order
            first = min(units.index(u) for u in self.flagged)
            for unit in units[first + 1 :]:
                self.executed.outcomes.pop(unit, None)
            self.executed.stopped = True
        return self.executed

    def _start(self, name: str, cases: list[str]) -> bool:
        """Start the runner's actors if the resources left hold one; False to wait."""
        ray = self.ray
        whole = _ray_slots(ray, self.spec, name, self.chosen, len(cases), self.variants)
        if whole == 0:
            asked = ", ".join(
                f"{k} {v:g}" for k, v in _ray_wanted(self.spec, name, self.variants).items()
            )
            self.executed.activation[name] = RunFailure(
                name,
                None,
                "import",
                f"the Ray cluster cannot place it: it asks for {asked}; the cluster offers "
                + ", ".join(f"{k} {v:g}" for k, v in sorted(ray.cluster_resources().items())),
            )
            self.done += len(cases)
            return True
        wanted = _ray_wanted(self.spec, name, self.variants)
        total = ray.cluster_resources()
        fits = [
            int((total.get(k, 0.0) - self.taken.get(k, 0.0) + 1e-9) // v) for k, v in wanted.items()
        ]
        slots = min([whole, *fits])
        if slots <= 0:
            if self.active:
                return False
            slots = whole  # nothing else of this run holds the cluster: Ray places them
        for k, v in wanted.items():
            self.taken[k] = self.taken.get(k, 0.0) + v * slots
        runner = _RayRunner(name, cases, slots, wanted, declared(self.spec, name, self.variants))
        runner.idle = [self._actor(name) for _ in range(slots)]
        self.active[name] = runner
        return True

    def _judge(self, runner: str, case: str) -> None:
        """Whether the unit's outcome stops the run (``stop``), then progress."""
        outcome = self.executed.outcomes[(runner, case)]
        outputs = None if outcome.failure is not None else (outcome.outputs or {})
        if self.stop is not None and self.stop(runner, case, outputs):
            self.flagged.append((runner, case))
        self._report(runner, case)

    def _report(self, runner: str, case: str) -> None:
        self.done += 1
        if self.progress:
            self.progress(f"{runner}: {case}", self.done, self.total)

    def _submit(self) -> None:
        for name, runner in self.active.items():
            while runner.idle and runner.pending and not self.flagged:
                actor = runner.idle.pop()
                case, attempt = runner.pending.popleft()
                ref = actor.run.remote(
                    str(self.spec.path), self.spec_text, name, case, self.variants.get(name)
                )
                self.inflight[ref] = (name, actor, case, attempt, time.monotonic())

    def _collect(self) -> None:
        ray = self.ray
        ready, _ = ray.wait(list(self.inflight), num_returns=1, timeout=0.25)
        now = time.monotonic()
        for ref, (name, actor, case, _attempt, began) in list(self.inflight.items()):
            timeout = self.active[name].timeout
            if timeout is None or ref in ready or now - began < timeout + TIMEOUT_GRACE:
                continue
            del self.inflight[ref]
            ray.kill(actor, no_restart=True)
            worker = f"ray actor {actor._actor_id.hex()[:12]}"
            failure = timed_out(name, case, timeout, worker)
            self.executed.outcomes[(name, case)] = Outcome(name, case, failure=failure)
            self._judge(name, case)
            self.active[name].idle.append(self._actor(name))
        for ref in ready:
            name, actor, case, attempt, _ = self.inflight.pop(ref)
            runner = self.active[name]
            worker = f"ray actor {actor._actor_id.hex()[:12]}"
            try:
                answer = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                why = f"the Ray actor died ({type(exc).__name__})"
                runner.idle.append(self._actor(name))
                if attempt <= self.chosen.retries:
                    runner.pending.appendleft((case, attempt + 1))
                    continue
                failure = died(name, case, worker, why, attempt)
                self.executed.outcomes[(name, case)] = Outcome(name, case, failure=failure)
                self._judge(name, case)
                continue
            if "activation" in answer:
                runner.idle.append(actor)
                if name not in self.executed.activation:
                    self.executed.activation[name] = failure_from_json(answer["activation"])
                    runner.pending.clear()
                    self.done += len(runner.cases) - 1
                    self._report(name, case)
                continue
            outputs = _read_bytes(answer) if "payload" in answer else None
            outcome = answer_to_outcome(name, case, answer, outputs, worker)
            outcome.attempts = attempt
            self.executed.outcomes[(name, case)] = outcome
            if outcome.failure is not None and outcome.failure.kind == "timeout":
                ray.kill(actor, no_restart=True)  # the stray call still runs there
                runner.idle.append(self._actor(name))
            else:
                runner.idle.append(actor)
            self._judge(name, case)

    def _finish(self, name: str) -> None:
        """Deactivate the runner in its actors (a model's close()), end them, free what they
        held."""
        runner = self.active.pop(name)
        for actor in runner.idle:
            try:
                self.ray.get(actor.close.remote(), timeout=30)
            except Exception:
                pass
        for actor in runner.idle:
            self.ray.kill(actor, no_restart=True)
        for k, v in runner.wanted.items():
            self.taken[k] = self.taken.get(k, 0.0) - v * runner.slots
        if name in self.executed.activation:
            for key in [k for k in self.executed.outcomes if k[0] == name]:
                del self.executed.outcomes[key]


class _RayRunner:
    """One runner's state on Ray: its cases still to run, its idle actors."""

    def __init__(
        self, name: str, cases: list[str], slots: int, wanted: dict[str, float], declaration: Any
    ):
        self.name = name
        self.cases = cases
        self.slots = slots
        self.wanted = wanted
        self.timeout = declaration.timeout
        self.pending: deque[tuple[str, int]] = deque((case, 1) for case in cases)
        self.idle: list[Any] = []

    def finished(self, inflight: dict[Any, tuple[str, Any, str, int, float]]) -> bool:
        return not self.pending and not any(entry[0] == self.name for entry in inflight.values())
