"""Where two runs part: intermediate activations of the reference and the candidate, captured,
matched across their module trees and compared layer by layer.

:func:`locate` runs the reference and a candidate of a claim (in-process runners) on one case
with every submodule's output captured, matches the activations, and reports for every matched
pair, in the reference's execution order: max-abs, the relative error (max-abs over the largest
reference value of that activation), the cosine, and whether the pair is past its per-layer bound.
The first pair past its bound is where the runs part.

**How a runner exposes its model.** The runner's callable (the function a ``callable`` names, or
the object a ``factory`` returns) has an attribute ``model``: the model (a PyTorch ``nn.Module``,
an MLX ``nn.Module``, an ``onnxruntime.InferenceSession`` or :class:`Functions`), or a function
without arguments that returns it (for a model built on first use). Every submodule of that
model is captured while the runner runs the case.

**Capture.** PyTorch: a forward hook on every named module (a TorchScript module has no hooks on
its submodules and is refused; pass the eager module). MLX: ``nn.Module`` has no hooks and
``__call__`` is looked up on the class, so each child is replaced in its parent (its dict entry,
or its slot in a list) by a recording proxy that calls it and delegates every attribute to it;
the originals are put back afterwards, and behaviour is byte-identical once capture is removed.
ONNX Runtime: a copy of the model whose graph outputs its intermediates (:mod:`.onnx_graph`, no
``onnx`` package) runs in a second session that the session's ``run`` is routed through; a
graph exported from PyTorch gives each module scope's output, named like the module. A port
written as functions (:class:`Functions`): the named attributes of an object are wrapped.
An activation is a module's output (its first array when it returns a tuple, list or dict),
named by the module's path and its call number: a diffusion loop calling a block 25 times gives
25 activations of that block. Capture needs eager runs (an ``mx.compile``-d or
``torch.compile``-d forward records traced placeholders).

**Matching.** A candidate activation is paired with the reference activation (1) of the name a
user rule maps its name to (``encoder.layers.(\\d+).attn -> blocks.\\1.attention``, a regular
expression matched against the whole name, with an optional ``transpose``, ``reshape`` and
``slice`` of the candidate's array; rules with a ``slice`` let one candidate activation, a fused
projection, stand for several reference ones, and ``reference_slice`` the other way), else (2)
of the same name and call number with the same shape. Those pairs are anchors; the activations
between two anchors are aligned by execution order and shape (the longest common subsequence of
shapes, ties broken by common trailing name components), with a confidence below 1,
``1 / (reference activations of that shape in the gap)``, raised to 0.9 when the trailing name
components agree (a first divergence at a pair below 0.9 says so). What is left is listed as
unmatched.

**The per-layer bound** (``bound = "scaled"``, the default): the claim's bound scaled by the
reference activation's magnitude, ``claim.bound * max|ref activation| / max|ref outputs|`` over the
outputs the claim covers (max-abs and mean-abs claims judge the layer's max-abs; a cosine claim
bounds ``1 - cosine`` by ``1 - bound`` on every layer; an exact claim bounds max-abs by 0; other
metrics need a calibrated bound). With ``noise_from = "RUNNER"`` (a second run equivalent to the
reference, e.g. the reference on another thread count or another precision path) the bound is
calibrated instead: ``margin * max-abs(noise run, reference)`` per layer (``margin`` 2 by
default), the scaled bound where the noise run has no such activation.

**Bisect.** With ``resume=`` (a candidate module), every output of that module is replaced by
the reference's matched activation (its layout change undone), and only the pairs after each of
its calls, up to the model's next output, are judged: runs that agree there say the error
arises at or before it. :func:`bisect_models` resumes after a list of such points by bisection
and names the first after which the runs agree.

**Memory.** The reference's activations are held (on the host, as numpy arrays); the candidate's
are compared as they arrive and dropped, except those waiting for the next anchor to be aligned
by order. ``keep=True`` keeps every activation of both runs in the result (opt-in).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import InputError

__all__ = [
    "Bisection",
    "Functions",
    "LayerPair",
    "Location",
    "NameRule",
    "capture",
    "locate",
    "locate_models",
    "bisect_models",
    "bisect",
    "parse_rule",
    "model_of",
    "onnx_activations",
    "locate_command_line",
    "locate_report_name",
    "locate_settings",
    "format_location",
    "write_plot",
    "write_html",
]

MARGIN = 2.0
# an order-and-shape pair below this confidence (not unique in shape, no trailing name in
# common) is named as such where it is the first divergence
LOW_CONFIDENCE = 0.9


# --------------------------------------------------------------------------------------------
# Results


@dataclass
class LayerPair:
    """One matched pair of activations and how far apart they are."""

    position: int  # the reference activation's place in its run's execution order
    reference: str  # module path (``blocks.3.attn``; ``(root)`` for the model itself)
    candidate: str
    call: int  # the module's call number in the reference run (0 = first call)
    shape: tuple[int, ...]
    how: str  # "map", "name" or "order"
    confidence: float
    max_abs: float
    rel: float  # max_abs / max|reference|
    cosine: float | None
    judged: float  # the value held against the bound (max_abs, or 1 - cosine)
    bound: float
    bound_from: str  # "scaled" or "calibrated"
    diverged: bool

    @property
    def label(self) -> str:
        return f"{self.reference}#{self.call}"


@dataclass
class Location:
    """What :func:`locate` found; truthy when no pair is past its bound."""

    claim: str
    case: str
    reference_runner: str
    candidate_runner: str
    judged: str  # "max_abs", "mean_abs", "one_minus_cosine"
    bound_method: str  # "scaled" or "calibrated"
    pairs: list[LayerPair] = field(default_factory=list)
    unmatched_reference: list[str] = field(default_factory=list)
    unmatched_candidate: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # captured runs, per side
    activations: dict[str, dict[str, Any]] | None = None  # keep=True: side -> label -> array
    resume: str = ""  # a resumed run: the candidate module whose outputs were replaced
    resumed_from: str = ""  # ... by the reference's activations of this module
    fed: int = 0  # ... at this many calls; only the pairs after each (to the model's output) kept

    @property
    def first(self) -> LayerPair | None:
        """The first pair past its bound, in the reference's execution order."""
        return next((p for p in self.pairs if p.diverged), None)

    def __bool__(self) -> bool:
        # nothing matched proves nothing: a locate that compared no pair does not pass
        return bool(self.pairs) and self.first is None

    @property
    def message(self) -> str:
        if not self.resume:
            return self._verdict()
        source = (
            "" if self.resumed_from == self.resume else f" (the reference's {self.resumed_from})"
        )
        return (
            f"resumed after {self.resume}, fed the reference's activation{source} at "
            f"{self.fed} call{'s' if self.fed != 1 else ''}: {self._verdict()}"
        )

    def _verdict(self) -> str:
        first = self.first
        if self.resume and first is None:
            return (
                f"no divergence downstream ({len(self.pairs)} matched pairs within their "
                f"{self.bound_method} bounds): the error arises at or before {self.resume}"
            )
        if not self.pairs:
            return (
                "nothing compared: no activation of the candidate matched one of the "
                f"reference's ({len(self.unmatched_reference)} reference and "
                f"{len(self.unmatched_candidate)} candidate activations unmatched); map the "
                "candidate's module names to the reference's with name rules"
            )
        if first is None:
            worst = max(
                self.pairs, key=lambda p: p.judged / p.bound if p.bound else 0, default=None
            )
            tail = f"; closest to its bound: {worst.label} at {_ratio(worst)}" if worst else ""
            return (
                f"no divergence: {len(self.pairs)} matched pairs within their {self.bound_method} "
                f"bounds{tail}"
            )
        where = (
            first.label
            if first.reference == first.candidate
            else (f"{first.label} (candidate {first.candidate})")
        )
        caution = (
            f"; that pair is matched by order and shape only, with confidence "
            f"{first.confidence:.2g}: check it, or map the names with a rule"
            if first.how == "order" and first.confidence < LOW_CONFIDENCE
            else ""
        )
        return (
            f"first divergence at {where}: {self.judged} {first.judged:.3g} > bound "
            f"{first.bound:.3g} ({self.bound_method}), rel {first.rel:.3g}, after "
            f"{sum(1 for p in self.pairs if p.position < first.position)} matched pairs "
            f"within bound{caution}"
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON data (non-finite numbers as "inf" / "nan", as in gate results); the kept
        activations are left out."""
        from .results import to_jsonable

        data = to_jsonable(self)
        data.pop("activations")
        data["first"] = to_jsonable(self.first) if self.first else None
        data["message"] = self.message
        data["passed"] = bool(self)
        return data


def _ratio(pair: LayerPair) -> str:
    if pair.bound == 0:
        return "exact" if pair.judged == 0 else "inf x its bound"
    return f"{pair.judged / pair.bound:.2g}x its bound"


# --------------------------------------------------------------------------------------------
# Name rules


@dataclass(frozen=True)
class NameRule:
    """``pattern -> replacement`` on candidate module names, with a layout change of the
    candidate's array before it is compared: ``transpose`` axes, then a ``reshape``, then a
    ``slice`` (a numpy basic index written as text, ``"..., 0:128"``: the part of a fused
    activation that the reference activation stands for). ``reference_slice``: the other way,
    the candidate's activation stands for that part of the reference's (a fused reference)."""

    pattern: str
    replacement: str
    transpose: tuple[int, ...] | None = None
    reshape: tuple[int, ...] | None = None
    slice: tuple[Any, ...] | None = None
    slice_text: str | None = None
    reference_slice: tuple[Any, ...] | None = None
    reference_slice_text: str | None = None

    def apply(self, name: str) -> str | None:
        match = re.fullmatch(self.pattern, name)
        return match.expand(self.replacement) if match else None

    def layout(self, array: Any) -> Any:
        """The candidate's array in the reference's layout."""
        if self.transpose is not None:
            array = array.transpose(self.transpose)
        if self.reshape is not None:
            array = array.reshape(self.reshape)
        if self.slice is not None:
            array = array[self.slice]
        return array

    def label(self, name: str) -> str:
        """The candidate's name as a pair shows it (its slice appended)."""
        return name if self.slice_text is None else f"{name}[{self.slice_text}]"


def parse_rule(value: str | Mapping[str, Any]) -> NameRule:
    """A rule from ``"FROM -> TO"`` or a table ``{ from, to, transpose, reshape, slice,
    reference_slice }``; a bad rule raises InputError."""
    if isinstance(value, str):
        if "->" not in value:
            raise InputError(f"name rule {value!r}: expected 'candidate pattern -> reference name'")
        source, _, target = (part.strip() for part in value.partition("->"))
        data: dict[str, Any] = {"from": source, "to": target}
    elif isinstance(value, Mapping):
        data = dict(value)
    else:
        raise InputError(f"name rule: expected 'FROM -> TO' or a table, got {value!r}")
    unknown = set(data) - {"from", "to", "transpose", "reshape", "slice", "reference_slice"}
    if unknown or not isinstance(data.get("from"), str) or not isinstance(data.get("to"), str):
        raise InputError(
            f"name rule {value!r}: expected from and to (strings), optionally transpose, reshape, "
            "slice or reference_slice"
        )
    try:
        compiled = re.compile(data["from"])
    except re.error as exc:
        raise InputError(f"name rule {data['from']!r}: not a regular expression: {exc}") from None
    groups = [int(g) for g in re.findall(r"\\(\d+)", data["to"])]
    if groups and max(groups) > compiled.groups:
        raise InputError(
            f"name rule {data['from']!r} -> {data['to']!r}: refers to group {max(groups)}, the "
            f"pattern has {compiled.groups}"
        )
    try:
        compiled.sub(data["to"], "")  # the replacement's escapes and group references
    except re.error as exc:
        raise InputError(f"name rule {data['to']!r}: not a valid replacement: {exc}") from None
    layout = {}
    for key in ("transpose", "reshape"):
        if key in data:
            axes = data[key]
            if not isinstance(axes, list) or not all(
                isinstance(a, int) and not isinstance(a, bool) for a in axes
            ):
                raise InputError(f"name rule {data['from']!r}: {key} expects a list of integers")
            if key == "transpose" and sorted(axes) != list(range(len(axes))):
                raise InputError(
                    f"name rule {data['from']!r}: transpose expects a permutation such as [0, 2, 1]"
                )
            layout[key] = tuple(axes)
    indexes: dict[str, tuple[Any, str]] = {}
    for key in ("slice", "reference_slice"):
        if key not in data:
            continue
        from .spec import parse_slice

        text = data[key]
        if not isinstance(text, str):
            raise InputError(
                f"name rule {data['from']!r}: {key} expects a numpy index such as '..., 0:128', "
                f"got {text!r}"
            )
        try:
            indexes[key] = (parse_slice(text), text)
        except ValueError as exc:
            raise InputError(f"name rule {data['from']!r}: {key} {text!r}: {exc}") from None
    if len(indexes) == 2:
        raise InputError(
            f"name rule {data['from']!r}: slice or reference_slice (a part of one side), not both"
        )
    index, text = indexes.get("slice", (None, None))
    reference_index, reference_text = indexes.get("reference_slice", (None, None))
    return NameRule(
        data["from"],
        data["to"],
        layout.get("transpose"),
        layout.get("reshape"),
        index,
        text,
        reference_index,
        reference_text,
    )


# --------------------------------------------------------------------------------------------
# Capture

Sink = Callable[[str, Any], Any]  # returns None, or an output replacing the module's


@dataclass(frozen=True)
class Functions:
    """A model given as named functions of an object (a port written as methods or functions
    rather than modules, in MLX, JAX, numpy or anything else): while captured, each attribute
    of ``owner`` named in ``outputs`` (activation name -> attribute) records its return value
    (its first array), and each named in ``inputs`` its first array argument, before the
    call. The attributes are wrapped on ``owner`` itself (an instance, or a Python module whose
    functions call each other through its globals) and put back afterwards."""

    owner: Any
    outputs: Mapping[str, str]
    inputs: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class _Command:
    """A subprocess runner as a captured model (protocol 2): asked through PARITYGATE_CAPTURE
    to write its named intermediates, which are read back after its run."""

    runner: Any  # runners.SubprocessRunner


def _framework(model: Any) -> str | None:
    import sys

    if isinstance(model, Functions):
        return "functions"
    if isinstance(model, _Command):
        return "command"
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.nn.Module):
        return "torch"
    nn = sys.modules.get("mlx.nn")
    if nn is not None and isinstance(model, nn.Module):
        return "mlx"
    ort = sys.modules.get("onnxruntime")
    if ort is not None and isinstance(model, ort.InferenceSession):
        return "onnx"
    return None


def model_of(function: Any, runner: str = "runner") -> Any:
    """The model a runner's callable exposes (its ``model`` attribute; a function without
    arguments is called). InputError when there is none."""
    model = getattr(function, "model", None)
    if model is None:
        raise InputError(
            f"runner {runner}: its callable exposes no model; give the function (or the object "
            "its factory returns) a `model` attribute holding the torch or MLX module, or a "
            "function returning it (docs/locate.md)"
        )
    if _framework(model) is None and callable(model):
        model = model()
    _refuse_scripted(model, runner)
    if _framework(model) is None:
        raise InputError(
            f"runner {runner}: its model is a {type(model).__name__}, not a torch.nn.Module, "
            "an mlx.nn.Module, an onnxruntime.InferenceSession or paritygate.locate.Functions"
        )
    return model


def _refuse_scripted(model: Any, runner: str) -> None:
    import sys

    torch = sys.modules.get("torch")
    if torch is not None and isinstance(model, torch.jit.ScriptModule):
        raise InputError(
            f"runner {runner}: its model is a TorchScript module ({type(model).__name__}); "
            "TorchScript runs its submodules without forward hooks, so nothing inside it can be "
            "captured: expose the eager nn.Module it was scripted or traced from as `model` "
            "(or a port's stages as paritygate.locate.Functions), or locate the candidate "
            "against another runner that exposes one"
        )


def _first_array(value: Any) -> Any:
    if isinstance(value, (tuple, list)):
        for item in value:
            found = _first_array(item)
            if found is not None:
                return found
        return None
    if isinstance(value, Mapping):
        for item in value.values():
            found = _first_array(item)
            if found is not None:
                return found
        return None
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return value
    if hasattr(value, "to_tuple"):  # transformers ModelOutput
        return _first_array(value.to_tuple())
    return None


def _to_host(array: Any) -> Any:
    import numpy as np

    module = type(array).__module__
    if module.startswith("torch"):
        import torch

        tensor = array.detach()
        if tensor.dtype in (torch.bfloat16, torch.float16):
            tensor = tensor.float()
        return tensor.cpu().numpy()
    if module.startswith("mlx"):
        import mlx.core as mx

        if array.dtype in (mx.bfloat16, mx.float16):
            array = array.astype(mx.float32)
        return np.array(array)
    if "Tracer" in type(array).__name__:
        raise InputError(
            f"captured a traced value ({type(array).__name__}): capture needs eager runs; run "
            "the model without jax.jit (or mx.compile, torch.compile) while locating"
        )
    return np.asarray(array)


class _MlxRecorder:
    """Stands in for one MLX module in its parent: calls it, records its output, and delegates
    every other attribute to it."""

    def __init__(self, module: Any, name: str, sink: Sink):
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_name", name)
        object.__setattr__(self, "_sink", sink)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        out = self._module(*args, **kwargs)
        replaced = self._sink(self._name, out)
        return out if replaced is None else replaced

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._module, name, value)


def _mlx_install(model: Any, sink: Sink) -> list[tuple[Any, Any, Any]]:
    """Replace every submodule of ``model`` by a recorder; returns (container, key, original)
    for each replacement, in the order they were made."""
    import mlx.nn as nn

    replaced: list[tuple[Any, Any, Any]] = []

    def visit(module: Any, prefix: str) -> None:
        for key, value in list(module.items()):
            walk(module, key, value, f"{prefix}{key}")

    def walk(container: Any, key: Any, value: Any, name: str) -> None:
        if isinstance(value, nn.Module):
            visit(value, f"{name}.")
            container[key] = _MlxRecorder(value, name, sink)
            replaced.append((container, key, value))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(value, i, item, f"{name}.{i}")
        elif isinstance(value, dict):
            for k, item in list(value.items()):
                walk(value, k, item, f"{name}.{k}")

    visit(model, "")
    return replaced


def _mlx_remove(replaced: list[tuple[Any, Any, Any]]) -> None:
    for container, key, original in reversed(replaced):
        container[key] = original


@contextmanager
def capture(model: Any, sink: Sink) -> Iterator[None]:
    """While inside, every output of every submodule of ``model`` (and of the model itself) is
    handed to ``sink(name, output)`` as it is produced, in execution order (a module's output
    after those of the submodules it called); what ``sink`` returns, unless None, replaces that
    output (how a bisect run resumes from the reference's activation). The model is left
    exactly as it was."""
    framework = _framework(model)
    _refuse_scripted(model, "model")
    if framework == "torch":
        handles = []
        for name, module in model.named_modules():
            label = name or "(root)"
            handles.append(
                module.register_forward_hook(lambda _m, _i, out, label=label: sink(label, out))
            )
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
    elif framework == "mlx":
        replaced = _mlx_install(model, sink)
        root_class = type(model)
        original_call = root_class.__call__
        # The root is called by code outside the model: its output is recorded by a subclass
        # made for this capture only (``__call__`` is looked up on the class).
        recording = type(
            root_class.__name__,
            (root_class,),
            {"__call__": lambda self, *a, **k: _root_call(self, original_call, sink, a, k)},
        )
        model.__class__ = recording
        try:
            yield
        finally:
            model.__class__ = root_class
            _mlx_remove(replaced)
    elif framework == "onnx":
        with _onnx_capture(model, sink):
            yield
    elif framework == "functions":
        with _functions_capture(model, sink):
            yield
    elif framework == "command":
        with _command_capture(model.runner, sink):
            yield
    else:
        raise InputError(
            f"cannot capture a {type(model).__name__}: expected a torch.nn.Module, an "
            "mlx.nn.Module, an onnxruntime.InferenceSession or paritygate.locate.Functions"
        )


@contextmanager
def _functions_capture(model: Functions, sink: Sink) -> Iterator[None]:
    owner = model.owner
    attributes = list(dict.fromkeys([*model.outputs.values(), *model.inputs.values()]))
    output_of = {attr: name for name, attr in model.outputs.items()}
    input_of = {attr: name for name, attr in model.inputs.items()}
    own = getattr(owner, "__dict__", {})
    saved: list[tuple[str, bool, Any]] = []  # (attribute, was in the instance dict, value)

    def wrap(attribute: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            if attribute in input_of:
                given = _first_array((args, kwargs))
                if given is not None:
                    sink(input_of[attribute], given)
            out = function(*args, **kwargs)
            if attribute in output_of:
                replaced = sink(output_of[attribute], out)
                return out if replaced is None else replaced
            return out

        return recorded

    try:
        for attribute in attributes:
            function = getattr(owner, attribute, None)
            if not callable(function):
                raise InputError(
                    f"cannot capture {type(owner).__name__}.{attribute}: no such function"
                )
            saved.append((attribute, attribute in own, own.get(attribute)))
            try:
                setattr(owner, attribute, wrap(attribute, function))
            except (AttributeError, TypeError):
                saved.pop()
                raise InputError(
                    f"cannot capture {type(owner).__name__}.{attribute}: the attribute cannot be "
                    "replaced (slots, or a built-in type)"
                ) from None
        yield
    finally:
        for attribute, had, value in reversed(saved):
            if had:
                setattr(owner, attribute, value)
            else:
                delattr(owner, attribute)


@contextmanager
def _command_capture(runner: Any, sink: Sink) -> Iterator[None]:
    """Protocol 2: the command writes its intermediates as npz at PARITYGATE_CAPTURE (keys in
    execution order, ``name`` or ``name#call``); they are handed to ``sink`` after each run."""
    import tempfile

    import numpy as np

    with tempfile.TemporaryDirectory(prefix="paritygate-capture-") as folder:
        path = Path(folder) / "capture.npz"
        runner.capture_path = path
        original = runner.run

        def run(case: Any) -> Any:
            if path.exists():
                path.unlink()
            result = original(case)
            if not path.is_file():
                raise InputError(
                    f"runner {runner.name} wrote no intermediates at PARITYGATE_CAPTURE: its "
                    "command must support protocol 2's capture (docs/subprocess-protocol.md)"
                )
            try:
                with np.load(path, allow_pickle=False) as data:
                    for key in data.files:
                        name = re.sub(r"#\d+$", "", key)
                        if sink(name, data[key]) is not None:
                            raise InputError(
                                f"runner {runner.name} runs as a command: it cannot resume from "
                                "an intermediate"
                            )
            except (OSError, ValueError) as exc:
                raise InputError(
                    f"runner {runner.name}: its intermediates at PARITYGATE_CAPTURE are not a "
                    f"readable npz file: {exc}"
                ) from None
            return result

        runner.run = run
        try:
            yield
        finally:
            del runner.run
            runner.capture_path = None


def onnx_activations(nodes: Sequence[Any], outputs: Sequence[str]) -> list[tuple[str, str]]:
    """(tensor, activation name) of an ONNX graph's captured tensors, in emission order.

    A graph exported from PyTorch names its nodes by module scope (``/blocks.0/attn/qkv/MatMul``):
    each scope's output is the first output of its last node, named like the module
    (``blocks.0.attn.qkv``), inner scopes first, as forward hooks report them. Another graph
    (no node name starting with ``/``) gives every node output, named by its tensor. The
    graph's first output is also reported, last, as ``(root)``."""
    emitted: list[tuple[str, str]] = []
    scoped = any(node.name.startswith("/") for node in nodes)
    if scoped:
        last: dict[str, int] = {}
        for i, node in enumerate(nodes):
            parts = node.name.strip("/").split("/")[:-1] if node.name.startswith("/") else []
            for depth in range(1, len(parts) + 1):
                last[".".join(parts[:depth])] = i
        ends: dict[int, list[str]] = {}
        for scope, i in last.items():
            ends.setdefault(i, []).append(scope)
        for i, node in enumerate(nodes):
            if node.outputs and node.outputs[0] and i in ends:
                for scope in sorted(ends[i], key=lambda name: -name.count(".")):
                    emitted.append((node.outputs[0], scope))
    else:
        emitted = [(name, name) for node in nodes for name in node.outputs if name]
    if outputs:
        emitted.append((outputs[0], "(root)"))
    return emitted


@contextmanager
def _onnx_capture(session: Any, sink: Sink) -> Iterator[None]:
    """A second session over a copy of the model whose graph outputs the captured tensors; the
    session's ``run`` is routed through it (one run gives the outputs and the intermediates),
    and put back afterwards."""
    import onnxruntime

    from .onnx_graph import read_graph, with_outputs

    if session._model_bytes is not None:
        model = bytes(session._model_bytes)
    else:
        model = Path(session._model_path).read_bytes()
    nodes, outputs = read_graph(model)
    emitted = onnx_activations(nodes, outputs)
    added = list(dict.fromkeys(t for t, _ in emitted if t not in outputs))
    try:
        captured = onnxruntime.InferenceSession(
            with_outputs(model, added),
            sess_options=session._sess_options,
            providers=session.get_providers(),
        )
    except Exception as exc:  # onnxruntime raises its own exception types
        raise InputError(
            f"cannot capture the ONNX model's intermediates: {str(exc).splitlines()[0]} (a model "
            "with external data must be loaded from bytes)"
        ) from None
    names = [o.name for o in captured.get_outputs()]
    original = [o.name for o in session.get_outputs()]

    def run(output_names: Any, input_feed: Any, run_options: Any = None) -> Any:
        values = dict(zip(names, captured.run(None, input_feed, run_options), strict=True))
        for tensor, name in emitted:
            if sink(name, values[tensor]) is not None:
                raise InputError(
                    "an ONNX Runtime session cannot resume from an intermediate: resume a "
                    "torch or MLX candidate"
                )
        return [values[n] for n in (output_names or original)]

    session.run = run  # an instance attribute shadows the class's method
    try:
        yield
    finally:
        del session.run


def _root_call(self: Any, call: Callable[..., Any], sink: Sink, args: Any, kwargs: Any) -> Any:
    out = call(self, *args, **kwargs)
    replaced = sink("(root)", out)
    return out if replaced is None else replaced


# --------------------------------------------------------------------------------------------
# Recording and matching


@dataclass
class _Activation:
    position: int
    name: str
    call: int
    array: Any  # numpy, float64 view made on demand
    matched: bool = False


class _Recorder:
    """The reference side: every activation, on the host, in execution order."""

    def __init__(self) -> None:
        self.items: list[_Activation] = []
        self.by_key: dict[tuple[str, int], _Activation] = {}
        self.calls: dict[str, int] = {}

    def __call__(self, name: str, output: Any) -> None:
        array = _first_array(output)
        if array is None:
            return
        call = self.calls.get(name, 0)
        self.calls[name] = call + 1
        item = _Activation(len(self.items), name, call, _to_host(array))
        self.items.append(item)
        self.by_key[(name, call)] = item


def _suffix_score(a: str, b: str) -> int:
    pa, pb = a.split("."), b.split(".")
    n = 0
    while n < min(len(pa), len(pb)) and pa[-1 - n] == pb[-1 - n]:
        n += 1
    return n


def _align(refs: list[_Activation], cands: list[_Activation]) -> list[tuple[int, int]]:
    """Monotone alignment of two runs of activations by shape (longest common subsequence),
    ties broken by common trailing name components: pairs of indices."""
    n, m = len(refs), len(cands)
    if not n or not m:
        return []
    score = [[0.0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            best = max(score[i + 1][j], score[i][j + 1])
            if refs[i].array.shape == cands[j].array.shape:
                gain = 1.0 + 0.01 * min(_suffix_score(refs[i].name, cands[j].name), 9)
                best = max(best, gain + score[i + 1][j + 1])
            score[i][j] = best
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if refs[i].array.shape == cands[j].array.shape:
            gain = 1.0 + 0.01 * min(_suffix_score(refs[i].name, cands[j].name), 9)
            if math.isclose(score[i][j], gain + score[i + 1][j + 1]):
                pairs.append((i, j))
                i, j = i + 1, j + 1
                continue
        if math.isclose(score[i][j], score[i + 1][j]):
            i += 1
        else:
            j += 1
    return pairs


@dataclass
class _Judge:
    """How a pair is judged: the quantity and its per-layer bound."""

    judged: str  # max_abs, mean_abs, one_minus_cosine
    claim_bound: float
    output_scale: float
    noise: dict[int, float] = field(default_factory=dict)  # reference position -> noise max_abs
    margin: float = MARGIN

    def bound(self, ref: _Activation, ref_max: float) -> tuple[float, str]:
        if ref.position in self.noise and self.judged in ("max_abs", "mean_abs"):
            return self.margin * self.noise[ref.position], "calibrated"
        if self.judged == "one_minus_cosine":
            return self.claim_bound, "scaled"
        return self.claim_bound * ref_max / self.output_scale, "scaled"


def _pair(
    ref: _Activation, cand_name: str, cand: Any, how: str, confidence: float, judge: _Judge
) -> LayerPair:
    import numpy as np

    e = np.asarray(ref.array, dtype=np.float64)
    a = np.asarray(cand, dtype=np.float64).reshape(e.shape)
    diff = np.abs(a - e)
    finite = bool(np.all(np.isfinite(diff)))
    max_abs = float(diff.max()) if diff.size else 0.0
    if not finite:
        max_abs = math.inf
    ref_max = float(np.abs(e).max()) if e.size else 0.0
    rel = max_abs / ref_max if ref_max else (0.0 if max_abs == 0 else math.inf)
    na, ne = float(np.linalg.norm(a)), float(np.linalg.norm(e))
    cosine = float(np.dot(a.ravel(), e.ravel()) / (na * ne)) if na and ne and finite else None
    if judge.judged == "mean_abs":
        value = float(diff.mean()) if diff.size else 0.0
    elif judge.judged == "one_minus_cosine":
        value = 1.0 - cosine if cosine is not None else (0.0 if max_abs == 0 else math.inf)
    else:
        value = max_abs
    bound, source = judge.bound(ref, ref_max)
    return LayerPair(
        position=ref.position,
        reference=ref.name,
        candidate=cand_name,
        call=ref.call,
        shape=tuple(int(d) for d in e.shape),
        how=how,
        confidence=round(confidence, 3),
        max_abs=max_abs,
        rel=rel,
        cosine=cosine,
        judged=value if finite else math.inf,
        bound=bound,
        bound_from=source,
        diverged=not finite or value > bound,
    )


class _Matcher:
    """The candidate side: each activation matched (by rule or name) and compared on arrival;
    the ones between two anchors are aligned by order when the next anchor arrives."""

    def __init__(
        self,
        reference: _Recorder,
        rules: Sequence[NameRule],
        judge: _Judge,
        keep: bool,
        release: bool | None = None,
    ):
        self.reference = reference
        self.rules = rules
        self.judge = judge
        self.keep = keep
        # a matched reference activation's values are dropped unless kept (or needed again)
        self.release = not keep if release is None else release
        self.pairs: list[LayerPair] = []
        self.pending: list[_Activation] = []
        self.unmatched: list[str] = []
        self.last_anchor = -1
        self.calls: dict[str, int] = {}
        self.kept: dict[str, Any] = {}
        self.parts: dict[tuple[str, str, int], _Activation] = {}  # reference_slice rules

    def __call__(self, name: str, output: Any) -> None:
        array = _first_array(output)
        if array is None:
            return
        call = self.calls.get(name, 0)
        self.calls[name] = call + 1
        host = _to_host(array)
        if self.keep:
            self.kept[f"{name}#{call}"] = host
        # the first rule whose pattern matches decides; rules with a slice are all tried (each
        # part of a fused activation stands for its own reference activation)
        sliced = False
        for rule in self.rules:
            target = rule.apply(name)
            if target is None:
                continue
            try:
                part = rule.layout(host)
            except (ValueError, IndexError):  # a layout that does not fit this activation
                part = None
            ref = self._target(rule, target, call)
            if (
                part is not None
                and ref is not None
                and not ref.matched
                and ref.array.shape == part.shape
            ):
                self._anchor(ref, rule.label(name), part, "map")
                if rule.slice is None:
                    return
                sliced = True
            if rule.slice is None:
                break
        if sliced:
            return
        ref = self.reference.by_key.get((name, call))
        if ref is not None and not ref.matched and ref.array.shape == host.shape:
            self._anchor(ref, name, host, "name")
            return
        self.pending.append(_Activation(-1, name, call, host))

    def _anchor(self, ref: _Activation, name: str, array: Any, how: str) -> None:
        if ref.position > self.last_anchor:
            self._fill(ref.position)
            self.last_anchor = ref.position
        ref.matched = True
        self.pairs.append(_pair(ref, name, array, how, 1.0, self.judge))
        if self.release:
            ref.array = _Released(ref.array.shape)

    def _target(self, rule: NameRule, target: str, call: int) -> _Activation | None:
        """The reference activation a rule maps to: the whole, or (``reference_slice``) that
        part of it, made once per run and compared like an activation of its own; the whole is
        then covered (neither unmatched nor aligned by order) and kept until the run ends."""
        whole = self.reference.by_key.get((target, call))
        if whole is None or rule.reference_slice is None:
            return whole
        key = (target, str(rule.reference_slice_text), call)
        part = self.parts.get(key)
        if part is None:
            if isinstance(whole.array, _Released):
                return None
            try:
                array = whole.array[rule.reference_slice]
            except IndexError:  # an index that does not fit this activation
                return None
            name = f"{target}[{rule.reference_slice_text}]"
            part = self.parts[key] = _Activation(whole.position, name, call, array)
            whole.matched = True
        return part

    def _fill(self, end: int) -> None:
        """Align the pending candidate activations with the unmatched reference ones between
        the last anchor and ``end``."""
        if not self.pending:
            return
        gap = [r for r in self.reference.items[self.last_anchor + 1 : end] if not r.matched]
        for i, j in _align(gap, self.pending):
            ref, cand = gap[i], self.pending[j]
            same = sum(1 for r in gap if r.array.shape == ref.array.shape)
            confidence = 1.0 / same
            if _suffix_score(ref.name, cand.name) >= 1:
                confidence = max(confidence, 0.9)
            ref.matched = True
            self.pairs.append(_pair(ref, cand.name, cand.array, "order", confidence, self.judge))
            cand.matched = True
            if self.release:
                ref.array = _Released(ref.array.shape)
        self.unmatched.extend(f"{c.name}#{c.call}" for c in self.pending if not c.matched)
        self.pending = []

    def finish(self) -> None:
        self._fill(len(self.reference.items))
        self.pairs.sort(key=lambda p: p.position)


class _Released:
    """A matched reference activation whose values were dropped (only its shape is kept)."""

    def __init__(self, shape: tuple[int, ...]):
        self.shape = shape


# --------------------------------------------------------------------------------------------
# Entry points


def _judged_metric(metric: str) -> str:
    if metric in ("max_abs", "exact"):
        return "max_abs"
    if metric == "mean_abs":
        return "mean_abs"
    if metric in ("cosine", "min_cosine", "one_minus_cosine"):
        return "one_minus_cosine"
    return ""


class _Session:
    """The reference side of a comparison (and its noise run), recorded once; each candidate
    run is compared against it (a bisect compares several)."""

    def __init__(
        self,
        reference_run: Callable[[], Any],
        reference_model: Any,
        *,
        metric: str,
        bound: float,
        output_scale: float | None,
        rules: Sequence[NameRule | str | Mapping[str, Any]],
        noise: tuple[Callable[[], Any], Any] | None,
        margin: float,
    ):
        import numpy as np

        judged = _judged_metric(metric)
        if not judged and noise is None:
            raise InputError(
                f"metric {metric!r} has no per-layer bound scaled from the claim; calibrate the "
                "bounds from a second run equivalent to the reference (noise_from, --noise-from)"
            )
        self.rules = [r if isinstance(r, NameRule) else parse_rule(r) for r in rules]
        self.reference = _Recorder()
        start = time.perf_counter()
        with capture(reference_model, self.reference):
            outputs = reference_run()
        self.seconds = {"reference": time.perf_counter() - start}
        if output_scale is None:
            from ._host import host_arrays

            leaves = [
                np.asarray(v, dtype=np.float64)
                for v in host_arrays(outputs, root="output").values()
                if np.asarray(v).dtype.kind in "fc" and np.asarray(v).size
            ]
            output_scale = max((float(np.abs(v).max()) for v in leaves), default=1.0)
        self.judge = _Judge(
            judged or "max_abs",
            (1.0 - bound if judged == "one_minus_cosine" else bound) if judged else math.inf,
            output_scale or 1.0,
            margin=margin,
        )
        self.calibrated = noise is not None
        if noise is not None:
            noise_run, noise_model = noise
            probe = _Matcher(
                self.reference, self.rules, _Judge("max_abs", 0.0, 1.0), keep=False, release=False
            )
            start = time.perf_counter()
            with capture(noise_model, probe):
                noise_run()
            probe.finish()
            self.seconds["noise"] = time.perf_counter() - start
            self.judge.noise = {p.position: p.max_abs for p in probe.pairs}

    def target(self, point: str) -> tuple[str, NameRule | None]:
        """The reference module a candidate module stands for, and the rule that says so."""
        for rule in self.rules:
            mapped = rule.apply(point)
            if mapped is not None and (mapped, 0) in self.reference.by_key:
                return mapped, rule
        return point, None

    def compare(
        self,
        candidate_run: Callable[[], Any],
        candidate_model: Any,
        *,
        keep: bool,
        release: bool,
        names: tuple[str, str, str, str],
        resume: str | None = None,
    ) -> Location:
        for item in self.reference.items:
            item.matched = False
        matcher = _Matcher(self.reference, self.rules, self.judge, keep, release=release)
        sink: Sink = matcher
        if resume is not None:
            target, rule = self.target(resume)
            if rule is not None and (rule.slice is not None or rule.reference_slice is not None):
                raise InputError(
                    f"resume point {resume}: its name rule pairs a part of an activation (slice "
                    "or reference_slice), and a part cannot be fed back; resume after a module "
                    "matched whole"
                )
            feeds = {c: r.array for (n, c), r in self.reference.by_key.items() if n == target}
            if not feeds or any(isinstance(a, _Released) for a in feeds.values()):
                raise InputError(
                    f"resume point {resume}: the reference has no activation {target!r} to resume "
                    "from; name a candidate module matched to the reference by name or by a name "
                    "rule"
                )
            sink = _Resumer(matcher, resume, feeds, rule)
        seconds = dict(self.seconds)
        start = time.perf_counter()
        with capture(candidate_model, sink):
            candidate_run()
        seconds["candidate"] = time.perf_counter() - start
        matcher.finish()
        location = Location(
            claim=names[0],
            case=names[1],
            reference_runner=names[2],
            candidate_runner=names[3],
            judged=self.judge.judged,
            bound_method="calibrated" if self.calibrated else "scaled",
            pairs=matcher.pairs,
            unmatched_reference=[
                f"{r.name}#{r.call}" for r in self.reference.items if not r.matched
            ],
            unmatched_candidate=matcher.unmatched,
            seconds=seconds,
        )
        if resume is not None:
            assert isinstance(sink, _Resumer)
            if not sink.fed:
                raise InputError(
                    f"resume point {resume}: the candidate ran no module of that name (it ran "
                    f"{', '.join(sorted({p.candidate for p in matcher.pairs})[:8]) or 'none'}, …)"
                )
            fed = [self.reference.by_key[(target, c)].position for c in sink.fed]
            roots = sorted(r.position for r in self.reference.items if r.name == "(root)")
            windows = [(p, next((r for r in roots if r >= p), math.inf)) for p in fed]
            location.pairs = [
                p for p in location.pairs if any(lo < p.position <= hi for lo, hi in windows)
            ]
            location.resume = resume
            location.resumed_from = target
            location.fed = len(sink.fed)
        if keep:
            location.activations = {
                "reference": {f"{r.name}#{r.call}": r.array for r in self.reference.items},
                "candidate": matcher.kept,
            }
        return location


class _Resumer:
    """A candidate sink that records (through the matcher) and replaces every output of the
    resume point with the reference's activation of that call, in the candidate's layout."""

    def __init__(self, matcher: _Matcher, point: str, feeds: dict[int, Any], rule: NameRule | None):
        self.matcher = matcher
        self.point = point
        self.feeds = feeds
        self.rule = rule
        self.calls = 0
        self.fed: list[int] = []

    def __call__(self, name: str, output: Any) -> Any:
        self.matcher(name, output)
        if name != self.point:
            return None
        call, self.calls = self.calls, self.calls + 1
        feed = self.feeds.get(call)
        like = _first_array(output)
        if feed is None or like is None:
            return None
        self.fed.append(call)
        return _with_first_array(output, _from_host(_candidate_layout(feed, like, self.rule), like))


def _candidate_layout(array: Any, like: Any, rule: NameRule | None) -> Any:
    """The reference's array in the candidate's layout: the rule's layout change undone."""
    import numpy as np

    shape = tuple(int(d) for d in like.shape)
    if rule is not None and rule.transpose is not None:
        permuted = tuple(shape[i] for i in rule.transpose)
        return np.asarray(array).reshape(permuted).transpose(np.argsort(rule.transpose))
    return np.asarray(array).reshape(shape)


def _from_host(array: Any, like: Any) -> Any:
    """A numpy array as an array of ``like``'s framework, dtype and device."""
    module = type(like).__module__
    if module.startswith("torch"):
        import torch

        return torch.from_numpy(array.copy()).to(dtype=like.dtype, device=like.device)
    if module.startswith("mlx"):
        import mlx.core as mx

        return mx.array(array).astype(like.dtype)
    if module.startswith(("jax", "jaxlib")):
        import jax.numpy as jnp

        return jnp.asarray(array, dtype=like.dtype)
    import numpy as np

    return np.asarray(array, dtype=like.dtype)


def _with_first_array(value: Any, new: Any) -> Any:
    """``value`` with its first array (as :func:`_first_array` finds it) replaced by ``new``."""
    if hasattr(value, "shape") and hasattr(value, "dtype"):
        return new
    if isinstance(value, (tuple, list)):
        items = list(value)
        for i, item in enumerate(items):
            if _first_array(item) is not None:
                items[i] = _with_first_array(item, new)
                return type(value)(items) if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        items = dict(value)
        for key, item in items.items():
            if _first_array(item) is not None:
                items[key] = _with_first_array(item, new)
                return items
    raise InputError(
        f"cannot resume from a {type(value).__name__} output: a resume point must return an "
        "array, or a tuple, list or dict holding one"
    )


def locate_models(
    reference_run: Callable[[], Any],
    reference_model: Any,
    candidate_run: Callable[[], Any],
    candidate_model: Any,
    *,
    metric: str = "max_abs",
    bound: float,
    output_scale: float | None = None,
    rules: Sequence[NameRule | str | Mapping[str, Any]] = (),
    noise: tuple[Callable[[], Any], Any] | None = None,
    margin: float = MARGIN,
    keep: bool = False,
    names: tuple[str, str, str, str] = ("", "", "reference", "candidate"),
    resume: str | None = None,
) -> Location:
    """The layer-by-layer comparison of two runs (each a function without arguments that runs
    its model on the case and returns the outputs) over their captured models.

    ``metric`` and ``bound``: the claim's (see the module docstring for the per-layer bound);
    ``output_scale``: the largest magnitude of the outputs the claim covers (default: of the
    reference run's return value). ``noise``: (run, model) of a run equivalent to the reference,
    for calibrated bounds. ``resume``: a candidate module whose every output is replaced by the
    reference's matched activation; only what runs after it is judged (see "Bisect")."""
    session = _Session(
        reference_run,
        reference_model,
        metric=metric,
        bound=bound,
        output_scale=output_scale,
        rules=rules,
        noise=noise,
        margin=margin,
    )
    return session.compare(
        candidate_run, candidate_model, keep=keep, release=not keep, names=names, resume=resume
    )


@dataclass
class Bisection:
    """What :func:`bisect_models` found: the plain comparison, the resumed runs it made (resume
    point -> its Location, in the order made) and where the error arises."""

    plain: Location
    points: list[str]
    runs: dict[str, Location] = field(default_factory=dict)
    layer: str | None = None  # the first resume point after which the runs agree

    def __bool__(self) -> bool:
        return bool(self.plain)

    @property
    def message(self) -> str:
        plain = self.plain
        if plain.first is None:
            return f"nothing to bisect: {plain.message}"
        growth = f"error growth alone points at {plain.first.label}"
        if self.layer is None:
            last = self.runs[self.points[-1]]
            assert last.first is not None
            return (
                f"the error arises after {self.points[-1]}: resumed after it, the runs still "
                f"part at {last.first.label}; {growth}"
            )
        at = self.points.index(self.layer)
        if at == 0:
            return (
                f"the error arises at or before {self.layer}: resumed after it, the runs agree; "
                f"{growth}"
            )
        before = self.runs[self.points[at - 1]]
        assert before.first is not None
        return (
            f"the error arises in {self.layer}: resumed after {self.points[at - 1]} the runs "
            f"still part (at {before.first.label}), resumed after {self.layer} they agree; "
            f"{growth}"
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "layer": self.layer,
            "points": self.points,
            "message": self.message,
            "plain": self.plain.to_dict(),
            "runs": {point: run.to_dict() for point, run in self.runs.items()},
        }


def bisect_models(
    reference_run: Callable[[], Any],
    reference_model: Any,
    candidate_run: Callable[[], Any],
    candidate_model: Any,
    *,
    points: str | Sequence[str],
    metric: str = "max_abs",
    bound: float,
    output_scale: float | None = None,
    rules: Sequence[NameRule | str | Mapping[str, Any]] = (),
    noise: tuple[Callable[[], Any], Any] | None = None,
    margin: float = MARGIN,
    names: tuple[str, str, str, str] = ("", "", "reference", "candidate"),
) -> Bisection:
    """Where the error arises, told apart from where it is first seen: the candidate resumed
    after each of ``points`` (candidate module names in execution order, or a regular
    expression matched against the candidate's module names, e.g. ``blocks\\.\\d+``), by
    bisection. The reference runs once; the candidate once plainly and about log2(points)
    times resumed."""
    session = _Session(
        reference_run,
        reference_model,
        metric=metric,
        bound=bound,
        output_scale=output_scale,
        rules=rules,
        noise=noise,
        margin=margin,
    )

    def run(resume: str | None) -> Location:
        return session.compare(
            candidate_run, candidate_model, keep=False, release=False, names=names, resume=resume
        )

    plain = run(None)
    if isinstance(points, str):
        try:
            pattern = re.compile(points)
        except re.error as exc:
            raise InputError(f"bisect points {points!r}: not a regular expression: {exc}") from None
        seen: dict[str, None] = {}
        for pair in plain.pairs:  # the reference's execution order
            if pattern.fullmatch(pair.candidate):
                seen.setdefault(pair.candidate)
        chosen = list(seen)
        if not chosen:
            raise InputError(
                f"bisect points {points!r}: no matched candidate module's name matches it"
            )
    else:
        chosen = list(points)
        if not chosen:
            raise InputError("bisect: name at least one resume point")
    result = Bisection(plain=plain, points=chosen)
    if plain.first is None:
        return result
    lo, hi = 0, len(chosen)  # the first point after which the runs agree lies in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        resumed = run(chosen[mid])
        result.runs[chosen[mid]] = resumed
        if resumed.first is None:
            hi = mid
        else:
            lo = mid + 1
    result.layer = chosen[lo] if lo < len(chosen) else None
    return result


def locate(
    spec: Any,
    claim: str,
    case: str,
    *,
    candidate: str | None = None,
    rules: Sequence[NameRule | str | Mapping[str, Any]] = (),
    noise_from: str | None = None,
    margin: float = MARGIN,
    keep: bool = False,
    resume: str | None = None,
) -> Location:
    """Where the reference and a candidate of ``claim`` part on ``case`` of ``spec`` (a Spec or
    its path). Each runner runs once with its model captured (a command runner through
    protocol 2); ``rules`` add to the spec's ``[locate] map``; ``noise_from`` names a runner
    equivalent to the reference for calibrated per-layer bounds (default: the spec's
    ``[locate] noise_from``);
    ``resume`` a candidate module to resume after (see "Bisect")."""
    with _spec_sides(spec, claim, case, candidate, rules, noise_from) as sides:
        return locate_models(**sides, margin=margin, keep=keep, resume=resume)


def bisect(
    spec: Any,
    claim: str,
    case: str,
    points: str | Sequence[str],
    *,
    candidate: str | None = None,
    rules: Sequence[NameRule | str | Mapping[str, Any]] = (),
    noise_from: str | None = None,
    margin: float = MARGIN,
) -> Bisection:
    """:func:`bisect_models` on ``case`` of ``spec``, with the runners of :func:`locate`."""
    with _spec_sides(spec, claim, case, candidate, rules, noise_from) as sides:
        return bisect_models(**sides, points=points, margin=margin)


@contextmanager
def _spec_sides(
    spec: Any,
    claim: str,
    case: str,
    candidate: str | None,
    rules: Sequence[NameRule | str | Mapping[str, Any]],
    noise_from: str | None,
) -> Iterator[dict[str, Any]]:
    """The runs and models of a claim's reference and candidate (and noise runner) on a case,
    with the runners active while inside."""
    from .runners import SubprocessRunner, make_runner
    from .spec import Spec, load_spec

    if not isinstance(spec, Spec):
        spec = load_spec(spec)
    if claim not in spec.claims:
        raise InputError(
            f"no claim {claim!r} in {spec.path.name} (claims: {', '.join(spec.claims)})"
        )
    chosen = spec.claims[claim]
    if case not in spec.cases:
        raise InputError(f"no case {case!r} in {spec.path.name} (cases: {', '.join(spec.cases)})")
    if candidate is None:
        if len(chosen.candidates) != 1:
            raise InputError(
                f"claim {claim} holds for candidates {', '.join(chosen.candidates)}: name one "
                "with candidate="
            )
        candidate = chosen.candidates[0]
    elif candidate not in chosen.candidates:
        raise InputError(
            f"{candidate!r} is not a candidate of claim {claim} "
            f"(candidates: {', '.join(chosen.candidates)})"
        )
    settings = locate_settings(spec)
    all_rules = list(settings["rules"]) + [
        r if isinstance(r, NameRule) else parse_rule(r) for r in rules
    ]
    noise_name = noise_from or settings["noise_from"]
    names = [spec.reference.name, candidate] + ([noise_name] if noise_name else [])
    for name in names:
        runner = spec.runners.get(name)
        if runner is None:
            raise InputError(f"no runner {name!r} in {spec.path.name}")
    the_case = spec.cases[case]
    if the_case.sequence:
        raise InputError(
            f"cases.{case} is a call sequence {the_case.describe_sequence()}: locate captures "
            "one call of each side on one input; a sequence's divergence lies in the state its "
            "earlier calls leave, which one capture does not show"
        )
    active = [make_runner(spec.runners[name], spec) for name in names]
    for runner in active:
        runner.activate()
    try:
        models = [
            _Command(r) if isinstance(r, SubprocessRunner) else model_of(r.function, r.name)
            for r in active
        ]
        runs = [lambda r=r: r.run(the_case).outputs for r in active]
        reference_outputs: dict[str, Any] = {}

        def reference_run() -> Any:
            reference_outputs.update(runs[0]())
            return chosen.covered(reference_outputs) or reference_outputs

        yield {
            "reference_run": reference_run,
            "reference_model": models[0],
            "candidate_run": runs[1],
            "candidate_model": models[1],
            "metric": chosen.metric,
            "bound": chosen.bound,
            "output_scale": None,
            "rules": all_rules,
            "noise": (runs[2], models[2]) if noise_name else None,
            "names": (claim, case, names[0], candidate),
        }
    finally:
        for runner in reversed(active):
            runner.deactivate()


def locate_settings(spec: Any) -> dict[str, Any]:
    """The spec's ``[locate]`` table (format 6), validated: ``map`` (a list of rules, each
    ``"FROM -> TO"`` or ``{ from, to, transpose, reshape, slice, reference_slice }``; the
    slices from format 7) and ``noise_from`` (a runner)."""
    from .errors import SpecError
    from .spec import read_spec_document

    _, data, _ = read_spec_document(spec.path)
    table = data.get("locate", {})
    where = f"{spec.path}: {spec.key('locate')}"
    if not isinstance(table, dict):
        raise SpecError("expected a table", where=where)
    unknown = set(table) - {"map", "noise_from"}
    if unknown:
        raise SpecError(
            f"unknown key {sorted(unknown)[0]!r}; expected map or noise_from", where=where
        )
    rules = []
    for i, value in enumerate(table.get("map", [])):
        try:
            rules.append(parse_rule(value))
        except InputError as exc:
            raise SpecError(exc.message, where=f"{where}.map[{i}]") from None
        sliced = rules[-1].slice is not None or rules[-1].reference_slice is not None
        if sliced and spec.format_version < 7:
            raise SpecError(
                "slice or reference_slice in a name rule needs format_version = 7",
                where=f"{where}.map[{i}]",
            )
    noise = table.get("noise_from")
    if noise is not None and noise not in spec.runners:
        raise SpecError(f"no runner {noise!r}", where=f"{where}.noise_from")
    return {"rules": rules, "noise_from": noise}


def locate_command_line(spec_path: str | Path, claim: str, case: str) -> str:
    """The command that locates where ``claim`` fails on ``case``."""
    import shlex

    return (
        f"paritygate locate {shlex.quote(str(spec_path))} --claim {shlex.quote(claim)} "
        f"--case {shlex.quote(case)}"
    )


def locate_report_name(claim: str, candidate: str, case: str) -> str:
    """The file name of the page ``paritygate locate --report`` writes into the gate's report
    folder, and that the gate's HTML report links when it exists:
    ``locate-<claim>-<candidate>-<case>.html`` (characters other than letters, digits, ``.``,
    ``_`` and ``-`` become ``_``)."""
    safe = [re.sub(r"[^A-Za-z0-9._-]", "_", part) for part in (claim, candidate, case)]
    return "locate-" + "-".join(safe) + ".html"


# --------------------------------------------------------------------------------------------
# Presentation


def format_location(location: Location, *, rows: int = 30, every: bool = False) -> str:
    """A compact table of the pairs: every one with ``every``; else those up to the first
    divergence and a few after it (at most ``rows``), or, without a divergence, the ``rows``
    pairs closest to their bounds (in execution order)."""
    pairs = location.pairs
    first = location.first
    if every:
        shown = pairs
    elif first is not None:
        at = pairs.index(first)
        shown = pairs[max(0, at - rows + 6) : at + 6]
    else:
        closest = sorted(pairs, key=lambda p: p.judged / p.bound if p.bound else 0)[-rows:]
        shown = sorted(closest, key=lambda p: p.position)
    width = max((len(p.label) for p in shown), default=10)
    subject = f"locate {location.claim} on {location.case}" if location.claim else "locate"
    lines = [
        f"{subject}: {location.reference_runner} (reference) vs "
        f"{location.candidate_runner}; per-layer bound: {location.bound_method} "
        f"({location.judged})",
        f"{'#':>5}  {'activation':<{width}}  {'max-abs':>9}  {'rel':>9}  {'cosine':>10}  "
        f"{'bound':>9}  {'match':<10}  ",
    ]
    for p in shown:
        cosine = "-" if p.cosine is None else f"{p.cosine:.8f}"
        flag = "  <- first divergence" if p is first else ("  past bound" if p.diverged else "")
        match = p.how if p.confidence == 1 else f"{p.how} {p.confidence:.2f}"
        lines.append(
            f"{p.position:>5}  {p.label:<{width}}  {p.max_abs:>9.3g}  {p.rel:>9.3g}  {cosine:>10}"
            f"  {p.bound:>9.3g}  {match:<10}{flag}"
        )
    if len(shown) < len(pairs):
        lines.append(f"({len(shown)} of {len(pairs)} matched pairs shown; --all shows every one)")
    for side, names in (
        ("reference", location.unmatched_reference),
        ("candidate", location.unmatched_candidate),
    ):
        if names:
            listed = ", ".join(names[:6]) + (f", … ({len(names)} in all)" if len(names) > 6 else "")
            lines.append(f"unmatched in the {side}: {listed}")
    lines.append(location.message)
    return "\n".join(lines)


def write_plot(location: Location, path: str | Path) -> Path:
    """A PNG of the per-layer error against the per-layer bound in execution order, on a linear
    and a log axis (matplotlib, imported here only)."""
    path = Path(path)
    path.write_bytes(_plot_png(location))
    return path


def write_html(location: Location, path: str | Path) -> Path:
    """A static HTML page: the verdict, the plot (linear and log, embedded as base64 PNG) and a
    row for every matched pair, the first divergence marked; the unmatched activations."""
    import base64
    import html

    from .files import atomic_write_text

    image = base64.b64encode(_plot_png(location)).decode("ascii")
    first = location.first
    rows = []
    for p in location.pairs:
        style = ' style="background:#fdd"' if p is first else ""
        cosine = "-" if p.cosine is None else f"{p.cosine:.8f}"
        rows.append(
            f"<tr{style}><td>{p.position}</td><td>{html.escape(p.label)}</td>"
            f"<td>{html.escape(p.candidate)}</td><td>{p.max_abs:.3g}</td><td>{p.rel:.3g}</td>"
            f"<td>{cosine}</td><td>{p.bound:.3g}</td><td>{p.how} {p.confidence:g}</td>"
            f"<td>{'past bound' if p.diverged else ''}</td></tr>"
        )
    unmatched = "".join(
        f"<p>Unmatched in the {side}: {html.escape(', '.join(names))}</p>"
        for side, names in (
            ("reference", location.unmatched_reference),
            ("candidate", location.unmatched_candidate),
        )
        if names
    )
    title = html.escape(f"locate {location.claim} on {location.case}".strip())
    page = (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
        "<style>body{font-family:sans-serif}td,th{padding:2px 8px;text-align:right}"
        "td:nth-child(2),td:nth-child(3){text-align:left}</style></head><body>"
        f"<h1>{title}</h1><p>{html.escape(location.reference_runner)} (reference) vs "
        f"{html.escape(location.candidate_runner)}; per-layer bound: {location.bound_method} "
        f"({location.judged})</p><p><b>{html.escape(location.message)}</b></p>"
        f'<img alt="per-layer error" src="data:image/png;base64,{image}">'
        "<table><tr><th>#</th><th>activation</th><th>candidate</th><th>max-abs</th><th>rel</th>"
        "<th>cosine</th><th>bound</th><th>match</th><th></th></tr>"
        + "".join(rows)
        + f"</table>{unmatched}</body></html>\n"
    )
    return atomic_write_text(Path(path), page)


def _plot_png(location: Location) -> bytes:
    import io

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [p.position for p in location.pairs]
    judged = [p.judged for p in location.pairs]
    bound = [p.bound for p in location.pairs]
    figure, axes = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    for ax, scale in zip(axes, ("linear", "log"), strict=True):
        ax.plot(x, judged, ".", markersize=3, label=location.judged)
        ax.plot(x, bound, "_", markersize=4, label=f"bound ({location.bound_method})")
        if location.first is not None:
            ax.axvline(location.first.position, color="red", linewidth=0.8)
        if scale == "log":
            positive = [v for v in judged + bound if v > 0]
            if positive:
                ax.set_yscale("log")
        ax.set_ylabel(f"{location.judged} ({scale})")
    axes[0].legend(loc="upper left", fontsize=8)
    axes[0].set_title(
        f"{location.claim} on {location.case}: "
        + (f"first divergence at {location.first.label}" if location.first else "no divergence")
    )
    axes[1].set_xlabel("activation (reference execution order)")
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()
