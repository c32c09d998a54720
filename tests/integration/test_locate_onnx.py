"""paritygate.locate on ONNX Runtime: a copy of the model with its intermediates as graph outputs
(read and written in the protobuf wire format, no onnx package), matched against a PyTorch
reference by module scope; the session behaves exactly as before once capture is removed."""

from __future__ import annotations

import numpy as np
import onnxruntime  # noqa: E402 - the frameworks are installed for these tests: never skipped
import pytest
import torch  # noqa: E402

from paritygate.errors import InputError
from paritygate.locate import capture, locate_models, model_of, onnx_activations
from paritygate.onnx_graph import _delimited, _encode_varint, read_graph, with_outputs


def _varint_field(number: int, value: int) -> bytes:
    return _encode_varint(number << 3) + _encode_varint(value)


def _tensor(name: str, array: np.ndarray) -> bytes:
    dims = b"".join(_varint_field(1, d) for d in array.shape)
    return _delimited(
        5,
        dims
        + _varint_field(2, 1)
        + _delimited(8, name.encode())
        + _delimited(9, array.astype("<f4").tobytes()),
    )


def _value_info(number: int, name: str, shape: tuple[int, ...]) -> bytes:
    dims = b"".join(_delimited(1, _varint_field(1, d)) for d in shape)
    tensor_type = _varint_field(1, 1) + _delimited(2, dims)
    typed = _delimited(2, _delimited(1, tensor_type))
    return _delimited(number, _delimited(1, name.encode()) + typed)


def _node(name: str, op: str, inputs: list[str], output: str, trans_b: bool = False) -> bytes:
    body = b"".join(_delimited(1, i.encode()) for i in inputs)
    body += _delimited(2, output.encode()) + _delimited(3, name.encode())
    body += _delimited(4, op.encode())
    if trans_b:
        body += _delimited(5, _delimited(1, b"transB") + _varint_field(3, 1) + _varint_field(20, 2))
    return _delimited(1, body)


class TorchNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(8, 16)
        self.head = torch.nn.Linear(16, 4)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))

    def forward(self, x):
        return self.head(torch.tanh(self.a(x)) + torch.tanh(self.b(x)))


def onnx_of(net: TorchNet, scale_a: float = 1.0, scoped: bool = True) -> bytes:
    """The net as an ONNX model with the node names torch.onnx.export gives (``/a/Gemm``)."""
    weights = {k: v.detach().numpy() for k, v in net.state_dict().items()}
    weights["a.weight"] = weights["a.weight"] * scale_a
    n = (lambda s: s) if scoped else (lambda s: s.strip("/").replace("/", "_"))
    nodes = [
        _node(n("/a/Gemm"), "Gemm", ["x", "a.weight", "a.bias"], "/a/Gemm_output_0", True),
        _node(n("/Tanh"), "Tanh", ["/a/Gemm_output_0"], "/Tanh_output_0"),
        _node(n("/b/Gemm"), "Gemm", ["x", "b.weight", "b.bias"], "/b/Gemm_output_0", True),
        _node(n("/Tanh_1"), "Tanh", ["/b/Gemm_output_0"], "/Tanh_1_output_0"),
        _node(n("/Add"), "Add", ["/Tanh_output_0", "/Tanh_1_output_0"], "/Add_output_0"),
        _node(n("/head/Gemm"), "Gemm", ["/Add_output_0", "head.weight", "head.bias"], "y", True),
    ]
    graph = b"".join(nodes) + _delimited(2, b"net")
    graph += b"".join(_tensor(k, v) for k, v in weights.items())
    graph += _value_info(11, "x", (3, 8)) + _value_info(12, "y", (3, 4))
    opset = _delimited(8, _delimited(1, b"") + _varint_field(2, 13))
    return _varint_field(1, 8) + opset + _delimited(7, graph)


def _session(model: bytes) -> onnxruntime.InferenceSession:
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = 1
    return onnxruntime.InferenceSession(model, options, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def net():
    return TorchNet().eval(), np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)


def _runs(net, session):
    model, x = net

    def torch_run():
        with torch.no_grad():
            return model(torch.from_numpy(x)).numpy()

    return torch_run, lambda: session.run(["y"], {"x": x})[0]


def test_the_graph_is_read_and_outputs_added_in_the_wire_format(net):
    model = onnx_of(net[0])
    nodes, outputs = read_graph(model)
    assert [node.name for node in nodes][:2] == ["/a/Gemm", "/Tanh"] and outputs == ["y"]
    assert onnx_activations(nodes, outputs) == [
        ("/a/Gemm_output_0", "a"),
        ("/b/Gemm_output_0", "b"),
        ("y", "head"),
        ("y", "(root)"),
    ]
    wider = _session(with_outputs(model, ["/Add_output_0"]))
    assert [o.name for o in wider.get_outputs()] == ["y", "/Add_output_0"]
    with pytest.raises(InputError, match="not an ONNX model"):
        read_graph(b"\x0a\xff")


def test_an_onnx_candidate_matches_the_torch_modules_by_scope(net):
    session = _session(onnx_of(net[0]))
    found = locate_models(*_interleave(net, session), bound=1e-5)
    assert found, found.message
    assert [(p.reference, p.candidate, p.how) for p in found.pairs] == [
        ("a", "a", "name"),
        ("b", "b", "name"),
        ("head", "head", "name"),
        ("(root)", "(root)", "name"),
    ]
    # head's output is the graph's output: one tensor, reported as head and as (root), as
    # forward hooks report it
    assert found.unmatched_reference == [] and found.unmatched_candidate == []


def test_a_bug_in_the_onnx_model_is_located_at_its_scope(net):
    session = _session(onnx_of(net[0], scale_a=1.001))
    found = locate_models(*_interleave(net, session), bound=1e-5)
    assert not found and found.first.reference == "a"
    assert found.message.startswith("first divergence at a#0: max_abs ")


def test_unscoped_graphs_give_every_node_output_paired_by_order(net):
    session = _session(onnx_of(net[0], scoped=False))
    found = locate_models(*_interleave(net, session), bound=1e-5)
    assert [(p.reference, p.candidate, p.how) for p in found.pairs] == [
        ("a", "/a/Gemm_output_0", "order"),
        ("b", "/Tanh_output_0", "order"),
        ("head", "y", "order"),
        ("(root)", "(root)", "name"),
    ]
    # by order and shape alone, b pairs with a's tanh (same shape, next in line): a rule fixes it
    assert not found and found.first.reference == "b"
    fixed = locate_models(
        *_interleave(net, session), bound=1e-5, rules=[r"/(\w)/Gemm_output_0 -> \1"]
    )
    assert fixed and [p.how for p in fixed.pairs] == ["map", "map", "order", "name"]


def test_the_session_is_unchanged_once_capture_is_removed_and_cannot_resume(net):
    model, x = net
    session = _session(onnx_of(model))
    before = session.run(None, {"x": x})[0]
    seen = []
    with capture(session, lambda name, out: seen.append(name)):
        during = session.run(None, {"x": x})
    after = session.run(None, {"x": x})[0]
    assert len(during) == 1 and before.tobytes() == during[0].tobytes() == after.tobytes()
    assert seen == ["a", "b", "head", "(root)"] and "run" not in vars(session)
    with pytest.raises(InputError, match="an ONNX Runtime session cannot resume from an interm"):
        locate_models(*_interleave(net, session), bound=1e-5, resume="a")
    assert "run" not in vars(session)

    class Runner:
        pass

    runner = Runner()
    runner.model = session
    assert model_of(runner) is session


def _interleave(net, session):
    torch_run, onnx_run = _runs(net, session)
    return torch_run, net[0], onnx_run, session
