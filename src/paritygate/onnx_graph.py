"""An ONNX model's nodes read from, and graph outputs added to, its serialized bytes.

ONNX models are protocol buffers; :mod:`paritygate.locate` needs two things of one (the nodes in
graph order with their names and output tensors, and a copy whose graph lists more outputs), so
this module reads and writes the protobuf wire format directly, and the ``onnx`` package is not
needed. Field numbers (onnx.proto): ``ModelProto.graph = 7``; ``GraphProto.node = 1``,
``GraphProto.output = 12``; ``NodeProto.output = 2``, ``name = 3``, ``op_type = 4``;
``ValueInfoProto.name = 1``. An output added without a type is typed by ONNX Runtime's own
inference when the session is made. Only the main graph is read: the nodes inside an ``If`` or
``Loop`` body are not outputs of the main graph and cannot be added.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from .errors import InputError

__all__ = ["Node", "read_graph", "with_outputs"]


@dataclass(frozen=True)
class Node:
    name: str
    op_type: str
    outputs: tuple[str, ...]


def _varint(data: bytes, i: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= len(data):
            raise ValueError("truncated varint")
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, i
        shift += 7


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte, value = value & 0x7F, value >> 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _fields(data: bytes) -> Iterator[tuple[int, int, bytes | int, int, int]]:
    """(field number, wire type, value, start, end) of every field of one message."""
    i = 0
    while i < len(data):
        start = i
        key, i = _varint(data, i)
        number, wire = key >> 3, key & 7
        value: bytes | int
        if wire == 0:
            value, i = _varint(data, i)
        elif wire == 1:
            value, i = data[i : i + 8], i + 8
        elif wire == 5:
            value, i = data[i : i + 4], i + 4
        elif wire == 2:
            length, i = _varint(data, i)
            value, i = data[i : i + length], i + length
        else:
            raise ValueError(f"wire type {wire}")
        if i > len(data):
            raise ValueError("truncated field")
        yield number, wire, value, start, i


def _delimited(number: int, payload: bytes) -> bytes:
    return _encode_varint(number << 3 | 2) + _encode_varint(len(payload)) + payload


def _graph(model: bytes) -> tuple[bytes, int, int]:
    found = None
    try:
        for number, wire, value, start, end in _fields(model):
            if number == 7 and wire == 2:
                found = (bytes(value), start, end)  # type: ignore[arg-type]
    except ValueError as exc:
        raise InputError(f"not an ONNX model: {exc}") from None
    if found is None:
        raise InputError("not an ONNX model: it has no graph")
    return found


def read_graph(model: bytes) -> tuple[list[Node], list[str]]:
    """The main graph's nodes, in graph order (topological, as ONNX requires), and its output
    names."""
    graph, _, _ = _graph(model)
    nodes, outputs = [], []
    try:
        for number, wire, value, _, _ in _fields(graph):
            if wire != 2:
                continue
            if number == 1:
                name, op_type, produced = "", "", []
                for n, w, v, _, _ in _fields(value):  # type: ignore[arg-type]
                    if w != 2 or n not in (2, 3, 4):
                        continue
                    text = bytes(v).decode("utf-8")  # type: ignore[arg-type]
                    if n == 2:
                        produced.append(text)
                    elif n == 3:
                        name = text
                    elif n == 4:
                        op_type = text
                nodes.append(Node(name, op_type, tuple(produced)))
            elif number == 12:
                for n, w, v, _, _ in _fields(value):  # type: ignore[arg-type]
                    if n == 1 and w == 2:
                        outputs.append(bytes(v).decode("utf-8"))  # type: ignore[arg-type]
    except (ValueError, UnicodeDecodeError) as exc:
        raise InputError(f"not an ONNX model: {exc}") from None
    return nodes, outputs


def with_outputs(model: bytes, names: Sequence[str]) -> bytes:
    """A copy of ``model`` whose main graph also outputs the tensors ``names`` (untyped)."""
    graph, start, end = _graph(model)
    added = b"".join(_delimited(12, _delimited(1, name.encode("utf-8"))) for name in names)
    return model[:start] + _delimited(7, graph + added) + model[end:]
