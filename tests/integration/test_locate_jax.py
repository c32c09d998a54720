"""paritygate.locate on JAX (flax is not installed here: a JAX port written as plain functions,
captured through ``Functions``), against a PyTorch reference: matched by name, a planted bug
located, resumed from the reference's activation, and a jitted run refused."""

from __future__ import annotations

import types

import jax  # noqa: E402 - the frameworks are installed for these tests: never skipped
import jax.numpy as jnp
import numpy as np
import pytest
import torch  # noqa: E402

from paritygate.errors import InputError
from paritygate.locate import Functions, bisect_models, capture, locate_models


class TorchNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(0)
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 16)
        self.head = torch.nn.Linear(16, 4)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g) * 0.5)

    def forward(self, x):
        return self.head(torch.tanh(self.b(torch.tanh(self.a(x)))))


# a JAX port as a module of functions that call each other through the module's globals
PORT = """
import jax.numpy as jnp

PARAMS = {}


def a(x):
    return x @ PARAMS["a.weight"].T + PARAMS["a.bias"]


def b(x):
    return x @ PARAMS["b.weight"].T + PARAMS["b.bias"]


def head(x):
    return x @ PARAMS["head.weight"].T + PARAMS["head.bias"]


def forward(x):
    return head(jnp.tanh(b(jnp.tanh(a(x)))))
"""

NAMES = {"a": "a", "b": "b", "head": "head"}


def jax_port(net: TorchNet, nudge_a: float = 0.0) -> types.ModuleType:
    port = types.ModuleType("jax_port")
    exec(compile(PORT, "jax_port.py", "exec"), port.__dict__)
    port.PARAMS.update({k: jnp.asarray(v.detach().numpy()) for k, v in net.state_dict().items()})
    port.PARAMS["a.bias"] = port.PARAMS["a.bias"] + nudge_a
    return port


@pytest.fixture(scope="module")
def net():
    return TorchNet().eval(), np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)


def _sides(net, port):
    model, x = net

    def torch_run():
        with torch.no_grad():
            return model(torch.from_numpy(x)).numpy()

    return (
        torch_run,
        model,
        lambda: np.asarray(port.forward(jnp.asarray(x))),
        Functions(port, NAMES),
    )


def test_a_jax_port_matches_by_name_and_is_unchanged_once_capture_is_removed(net):
    port = jax_port(net[0])
    found = locate_models(*_sides(net, port), bound=1e-5)
    assert found, found.message
    assert [(p.reference, p.how) for p in found.pairs] == [
        ("a", "name"),
        ("b", "name"),
        ("head", "name"),
    ]
    assert found.unmatched_reference == ["(root)#0"]
    run = _sides(net, port)[2]
    before = run()
    with capture(Functions(port, NAMES), lambda name, out: None):
        during = run()
    assert before.tobytes() == during.tobytes() == run().tobytes()
    assert port.a.__name__ == "a"  # the module's own function is back


def test_a_planted_bug_is_located_and_bisected_in_jax(net):
    port = jax_port(net[0], nudge_a=1e-3)
    found = locate_models(*_sides(net, port), bound=1e-5)
    assert not found and found.first.reference == "a"
    resumed = locate_models(*_sides(net, port), bound=1e-5, resume="a")
    assert resumed.first is None and resumed.fed == 1  # the reference's a fed as a JAX array
    bisected = bisect_models(*_sides(net, port), bound=1e-5, points=["a", "b", "head"])
    assert bisected.layer == "a"


def test_a_jitted_run_is_refused_with_what_to_do(net):
    port = jax_port(net[0])
    model, x = net
    torch_run, _, _, functions = _sides(net, port)
    jitted = jax.jit(port.forward)
    with pytest.raises(InputError, match="capture needs eager runs; run the model without jax.jit"):
        locate_models(
            torch_run, model, lambda: np.asarray(jitted(jnp.asarray(x))), functions, bound=1e-5
        )
