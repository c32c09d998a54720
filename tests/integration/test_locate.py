"""paritygate.locate: capture (torch hooks, MLX proxies put back), matching across module trees
(names, name rules with layouts, order and shape), per-layer bounds, the command line."""

from __future__ import annotations

import mlx.core as mx  # noqa: E402 - the frameworks are installed for these tests: never skipped
import mlx.nn as mnn  # noqa: E402
import numpy as np
import pytest
import torch  # noqa: E402

from paritygate.cli import main
from paritygate.errors import InputError
from paritygate.locate import bisect_models, capture, locate, locate_models, parse_rule

# -- two small models of one function, in two frameworks, with different module trees ----------


class TorchNet(torch.nn.Module):
    """x -> a(x) and b(x) (two branches), summed, then a head."""

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


class MlxNet(mnn.Module):
    """The same function with other names, branch b computed first, and a stored transpose."""

    def __init__(self, twin: TorchNet, scale_first: float = 1.0) -> None:
        super().__init__()
        self.second = mnn.Linear(8, 16)
        self.first = mnn.Linear(8, 16)
        self.out = mnn.Linear(16, 4)
        for mine, theirs in ((self.first, twin.a), (self.second, twin.b), (self.out, twin.head)):
            mine.weight = mx.array(theirs.weight.detach().numpy())
            mine.bias = mx.array(theirs.bias.detach().numpy())
        self.first.weight = self.first.weight * scale_first  # a planted bug inside one branch

    def __call__(self, x):
        b = mx.tanh(self.second(x))
        a = mx.tanh(self.first(x))
        return self.out(a + b)


@pytest.fixture(scope="module")
def pair():
    torch.manual_seed(0)
    net = TorchNet().eval()
    x = np.random.default_rng(1).standard_normal((3, 8)).astype(np.float32)
    return net, x


def _torch_run(net, x):
    def run():
        with torch.no_grad():
            return net(torch.from_numpy(x)).numpy()

    return run


def _mlx_run(net, x):
    return lambda: np.array(net(mx.array(x)))


RULES = ["first -> a", "second -> b", "out -> head"]


def test_name_rules_match_a_pair_whose_orders_differ(pair):
    net, x = pair
    twin = MlxNet(net)
    found = locate_models(_torch_run(net, x), net, _mlx_run(twin, x), twin, bound=1e-5, rules=RULES)
    assert found, found.message
    assert [(p.reference, p.candidate, p.how) for p in found.pairs] == [
        ("a", "first", "map"),
        ("b", "second", "map"),
        ("head", "out", "map"),
        ("(root)", "(root)", "name"),
    ]
    assert found.unmatched_reference == [] and found.unmatched_candidate == []
    assert "no divergence: 4 matched pairs within their scaled bounds" in found.message


def test_a_bug_in_one_branch_is_located_there_through_the_rules(pair):
    net, x = pair
    bugged = MlxNet(net, scale_first=1.01)
    found = locate_models(
        _torch_run(net, x), net, _mlx_run(bugged, x), bugged, bound=1e-5, rules=RULES
    )
    assert not found
    assert found.first.reference == "a" and found.first.candidate == "first"
    assert found.message.startswith("first divergence at a#0 (candidate first): max_abs ")
    assert "(scaled)" in found.message


def test_without_rules_order_and_shape_pair_them_with_a_confidence_below_one(pair):
    net, x = pair
    twin = MlxNet(net)
    found = locate_models(_torch_run(net, x), net, _mlx_run(twin, x), twin, bound=1e-5)
    by_ref = {p.reference: p for p in found.pairs}
    # a and b have one shape: by order the candidate's first activation (second = b) pairs
    # with the reference's first (a), with confidence 1/2, and the comparison shows it
    assert by_ref["a"].candidate == "second" and by_ref["a"].how == "order"
    assert by_ref["a"].confidence == 0.5
    assert by_ref["head"].candidate == "out" and by_ref["head"].confidence == 1.0
    assert not found and found.first.reference == "a"


def test_a_rule_transposes_the_candidates_layout(pair):
    net, x = pair

    class Transposed(mnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.proj = mnn.Linear(8, 16)
            self.proj.weight = mx.array(net.a.weight.detach().numpy())
            self.proj.bias = mx.array(net.a.bias.detach().numpy())

        def __call__(self, x):
            return self.proj(x).T  # (16, 3): the other layout

    class Plain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a = net.a

        def forward(self, x):
            return self.a(x)

    ref, cand = Plain(), Transposed()
    rule = {"from": r"\(root\)", "to": "(root)", "transpose": [1, 0]}
    found = locate_models(
        _torch_run(ref, x), ref, _mlx_run(cand, x), cand, bound=1e-5, rules=["proj -> a", rule]
    )
    assert found, found.message
    assert [(p.reference, p.how) for p in found.pairs] == [("a", "map"), ("(root)", "map")]


def test_mlx_capture_is_removed_and_behaviour_is_byte_identical(pair):
    net, x = pair
    twin = MlxNet(net)
    slots = {k: v for k, v in twin.items()}
    before = np.array(twin(mx.array(x)))
    seen = []
    with capture(twin, lambda name, out: seen.append(name)):
        during = np.array(twin(mx.array(x)))
        assert type(twin.first).__name__ == "_MlxRecorder"
        assert twin.first.weight is slots["first"].weight  # attributes reach the module
    after = np.array(twin(mx.array(x)))
    assert seen == ["second", "first", "out", "(root)"]
    assert type(twin) is MlxNet
    assert all(twin[k] is v for k, v in slots.items())
    assert before.tobytes() == during.tobytes() == after.tobytes()
    # nothing records any more
    twin(mx.array(x))
    assert len(seen) == 4


def test_mlx_capture_reaches_modules_in_lists_and_puts_them_back():
    class Stack(mnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = [mnn.Linear(4, 4) for _ in range(3)]
            self.norm = mnn.RMSNorm(4)

        def __call__(self, x):
            for layer in self.layers:
                x = layer(x)
            return self.norm(x)

    mx.random.seed(0)
    stack = Stack()
    layers = list(stack.layers)
    x = mx.ones((2, 4))
    before = np.array(stack(x))
    seen = []
    with capture(stack, lambda name, out: seen.append(name)):
        stack(x)
    assert seen == ["layers.0", "layers.1", "layers.2", "norm", "(root)"]
    assert all(a is b for a, b in zip(stack.layers, layers, strict=True))
    assert np.array(stack(x)).tobytes() == before.tobytes()
    assert len(stack.parameters()["layers"]) == 3


def test_torch_hooks_are_removed(pair):
    net, x = pair
    with capture(net, lambda name, out: None):
        assert all(len(m._forward_hooks) == 1 for m in net.modules())
    assert all(len(m._forward_hooks) == 0 for m in net.modules())


@pytest.mark.filterwarnings("ignore:`torch.jit:DeprecationWarning")
def test_torchscript_is_refused_with_what_to_pass_instead(pair):
    net, x = pair
    scripted = torch.jit.trace(net, torch.from_numpy(x))
    with pytest.raises(InputError, match="TorchScript") as info:
        with capture(scripted, lambda name, out: None):
            pass
    assert "expose the eager nn.Module it was scripted or traced from" in str(info.value)


@pytest.mark.parametrize(
    "rule, message",
    [
        ("a => b", "expected 'candidate pattern -> reference name'"),
        ("a( -> b", "not a regular expression"),
        (r"a(\d) -> b\2", "refers to group 2, the pattern has 1"),
        ({"from": "a", "to": "b", "transpose": [0, 0]}, "transpose expects a permutation"),
        ({"from": "a", "to": "b", "flip": 1}, "optionally transpose, reshape, slice or"),
    ],
)
def test_bad_rules_are_input_errors(rule, message):
    with pytest.raises(InputError, match=None) as info:
        parse_rule(rule)
    assert message in str(info.value)


def test_regex_rule_with_groups():
    rule = parse_rule(r"encoder.layers.(\d+).attn -> blocks.\1.attention")
    assert rule.apply("encoder.layers.12.attn") == "blocks.12.attention"
    assert rule.apply("encoder.layers.12.attn.q") is None


def test_cosine_claims_bound_one_minus_cosine_and_other_metrics_need_a_noise_run(pair):
    net, x = pair
    twin = MlxNet(net)
    found = locate_models(
        _torch_run(net, x), net, _mlx_run(twin, x), twin, metric="cosine", bound=0.9999, rules=RULES
    )
    assert found.judged == "one_minus_cosine"
    assert all(p.bound == pytest.approx(1e-4) for p in found.pairs)
    with pytest.raises(InputError, match="metric 'ssim' has no per-layer bound"):
        locate_models(_torch_run(net, x), net, _mlx_run(twin, x), twin, metric="ssim", bound=0.9)


def test_calibrated_bounds_come_from_a_second_equivalent_reference_run(pair):
    net, x = pair
    double = TorchNet().double().eval()
    double.load_state_dict({k: v.double() for k, v in net.state_dict().items()})
    noise = (lambda: double(torch.from_numpy(x).double()).detach().numpy(), double)
    twin, bugged = MlxNet(net), MlxNet(net, scale_first=1.001)
    good = locate_models(
        _torch_run(net, x),
        net,
        _mlx_run(twin, x),
        twin,
        bound=1.0,
        rules=RULES,
        noise=noise,
        margin=100.0,
    )
    assert good.bound_method == "calibrated" and all(
        p.bound_from == "calibrated" for p in good.pairs
    )
    assert good, good.message
    bad = locate_models(
        _torch_run(net, x),
        net,
        _mlx_run(bugged, x),
        bugged,
        bound=1.0,
        rules=RULES,
        noise=noise,
        margin=100.0,
    )
    assert not bad and bad.first.reference == "a"


# -- the spec and the command line ---------------------------------------------------------------

RUNNERS = """
import numpy as np
import torch

from nets import TorchNet

NET = TorchNet().eval()


def _run(net, case):
    with torch.no_grad():
        return {"y": net(torch.from_numpy(case.load()["x"])).numpy()}


def reference(case):
    return _run(NET, case)


reference.model = NET


class Candidate:
    def __init__(self, bug=False):
        self.model = TorchNet().eval()
        self.model.load_state_dict(NET.state_dict())
        if bug:
            with torch.no_grad():
                self.model.b.weight[0, 0] += 0.05

    def __call__(self, case):
        return _run(self.model, case)


def plain(case):
    return reference(case)
"""

SPEC = """format_version = 6
outputs = ["y"]

[cases.one]
path = "one.npz"
sha256 = "{sha}"

[runners.reference]
role = "reference"
callable = "runners:reference"

[runners.good]
role = "candidate"
factory = "runners:Candidate"

[runners.bad]
role = "candidate"
factory = "runners:Candidate"
options = {{ bug = true }}

[runners.plain]
role = "candidate"
callable = "runners:plain"

[claims.y]
outputs = ["y"]
metric = "max_abs"
bound = 1e-5
oracle = "equivalence"
status = "provisional"
{extra}
"""


@pytest.fixture
def project(tmp_path):
    import hashlib
    import inspect
    import sys

    np.savez(tmp_path / "one.npz", x=np.random.default_rng(0).standard_normal((2, 8)).astype("f4"))
    sha = hashlib.sha256((tmp_path / "one.npz").read_bytes()).hexdigest()
    source = inspect.getsource(sys.modules[__name__])
    models = source[source.index("class TorchNet") : source.index("class MlxNet")]
    (tmp_path / "nets.py").write_text("import torch\n\n\n" + models.replace("torch.nn", "torch.nn"))
    (tmp_path / "runners.py").write_text(RUNNERS)
    path = tmp_path / "parity.toml"

    def write(extra=""):
        path.write_text(SPEC.format(sha=sha, extra=extra))
        return path

    write()
    yield write
    for name in ("runners", "nets"):
        sys.modules.pop(name, None)


def test_cli_locates_a_planted_bug_and_passes_the_good_candidate(project, capsys, tmp_path):
    path = project()
    assert main(["locate", str(path), "--claim", "y", "--case", "one", "--candidate", "good"]) == 0
    out = capsys.readouterr().out
    assert "no divergence: 4 matched pairs within their scaled bounds" in out
    code = main(
        [
            "locate",
            str(path),
            "--claim",
            "y",
            "--case",
            "one",
            "--candidate",
            "bad",
            "--json",
            str(tmp_path / "where.json"),
            "--plot",
            str(tmp_path / "where.png"),
            "--html",
            str(tmp_path / "where.html"),
        ]
    )
    assert code == 1
    out = capsys.readouterr().out
    assert "first divergence at b#0: max_abs" in out and "<- first divergence" in out
    import json

    data = json.loads((tmp_path / "where.json").read_text())
    assert data["first"]["reference"] == "b" and data["passed"] is False
    assert (tmp_path / "where.png").stat().st_size > 1000
    page = (tmp_path / "where.html").read_text()
    assert "data:image/png;base64," in page and "first divergence at b#0" in page
    assert page.count("<tr") == 1 + len(data["pairs"]) and 'style="background:#fdd"' in page


def test_cli_bad_input_is_one_line_exit_2(project, capsys):
    path = project()
    cases = [
        (["--candidate", "plain"], "runner plain: its callable exposes no model"),
        ([], "claim y holds for candidates good, bad, plain: name one with --candidate"),
        (["--candidate", "good", "--map", "a =>"], "expected 'candidate pattern -> reference"),
        (["--candidate", "nope"], "'nope' is not a candidate of claim y"),
    ]
    for extra, message in cases:
        assert main(["locate", str(path), "--claim", "y", "--case", "one", *extra]) == 2
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err


def test_spec_locate_table_rules_and_noise_runner(project, capsys):
    path = project('\n[locate]\nmap = ["bogus -> b"]\nnoise_from = "good"\n')
    found = locate(path, "y", "one", candidate="bad")
    assert found.bound_method == "calibrated"
    # the good candidate is the reference's exact copy: zero noise, so any difference diverges
    assert not found and found.first.reference == "b"
    path = project('\n[locate]\nmap = ["a( -> b"]\n')
    assert main(["locate", str(path), "--claim", "y", "--case", "one", "--candidate", "good"]) == 2
    assert "locate.map[0]: name rule 'a(': not a regular expression" in capsys.readouterr().err


def test_a_slice_in_a_spec_rule_needs_format_7(project, capsys):
    rule = "\n[locate]\nmap = [{ from = 'b', to = 'b', slice = '..., 0:16' }]\n"
    path = project(rule)
    assert main(["locate", str(path), "--claim", "y", "--case", "one", "--candidate", "good"]) == 2
    err = capsys.readouterr().err
    assert "locate.map[0]: slice or reference_slice in a name rule needs format_version = 7" in err
    path.write_text(path.read_text().replace("format_version = 6", "format_version = 7"))
    found = locate(path, "y", "one", candidate="good")
    assert found and ("b", "map") in {(p.reference, p.how) for p in found.pairs}


def test_a_failing_gate_names_the_command_that_locates_it(project, capsys, monkeypatch, tmp_path):
    import shlex

    path = project()
    monkeypatch.chdir(tmp_path)
    assert main(["record", str(path)]) == 0
    capsys.readouterr()
    assert main(["gate", str(path)]) == 1
    out = " ".join(capsys.readouterr().out.split())
    command = "paritygate locate parity.toml --claim y --case one --candidate bad"
    assert f"where: {command}" in out
    assert "--candidate good" not in out  # holding claims get no hint
    summary = (tmp_path / "parity-reports" / "parity" / "summary.md").read_text()
    assert f"where it parts: `{command}`" in summary
    # the named command runs, and locates the planted bug
    assert main(shlex.split(command)[1:]) == 1
    assert "first divergence at b#0" in capsys.readouterr().out


def test_nothing_matched_does_not_pass(pair):
    net, x = pair

    class Other(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.only = torch.nn.Linear(8, 5)

        def forward(self, x):
            return self.only(x)

    other = Other()
    found = locate_models(_torch_run(net, x), net, _torch_run(other, x), other, bound=1e-5)
    assert found.pairs == [] and not found
    assert found.message.startswith("nothing compared: no activation of the candidate matched")
    assert found.unmatched_candidate == ["only#0", "(root)#0"]


# -- bisect: resuming the candidate from the reference's activation -----------------------------


class TorchChain(torch.nn.Module):
    """pre -> a -> b -> head, where b amplifies a's nearly silent channel 7 a hundredfold: an
    error there is small in a and large in b."""

    def __init__(self) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(2)
        self.pre = torch.nn.Linear(8, 8)
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 4)
        with torch.no_grad():
            for p in self.parameters():
                p.copy_(torch.randn(p.shape, generator=g))
            self.a.weight[7] *= 0.01
            self.a.bias[7] = 0.0
            self.b.weight[:, 7] *= 100.0

    def forward(self, x):
        return self.head(torch.tanh(self.b(torch.tanh(self.a(torch.tanh(self.pre(x)))))))


class MlxChain(mnn.Module):
    """The same chain whose ``first`` (a) returns its output transposed, features first."""

    class Transposing(mnn.Module):
        def __init__(self, linear) -> None:
            super().__init__()
            self.linear = linear

        def __call__(self, x):
            return self.linear(x).T

    def __init__(self, twin: TorchChain, nudge_a: float = 0.0, nudge_b: float = 0.0) -> None:
        super().__init__()
        layers = []
        for theirs in (twin.pre, twin.a, twin.b, twin.head):
            mine = mnn.Linear(theirs.in_features, theirs.out_features)
            mine.weight = mx.array(theirs.weight.detach().numpy())
            mine.bias = mx.array(theirs.bias.detach().numpy())
            layers.append(mine)
        self.pre, first, self.second, self.out = layers
        self.first = MlxChain.Transposing(first)
        bias = np.array(first.bias)
        bias[7] += nudge_a  # a planted bug in a, small at a and amplified by b
        first.bias = mx.array(bias)
        bias = np.array(self.second.bias)
        bias[0] += nudge_b  # a planted bug in b itself
        self.second.bias = mx.array(bias)

    def __call__(self, x):
        h = mx.tanh(self.first(mx.tanh(self.pre(x)))).T
        return self.out(mx.tanh(self.second(h)))


CHAIN_RULES = [
    {"from": "first", "to": "a", "transpose": [1, 0]},
    "second -> b",
    "out -> head",
]


@pytest.fixture(scope="module")
def chain():
    net = TorchChain().eval()
    x = np.random.default_rng(3).standard_normal((3, 8)).astype(np.float32)
    return net, x


def _chain(chain, **bugs):
    net, x = chain
    cand = MlxChain(net, **bugs)
    return dict(
        reference_run=_torch_run(net, x),
        reference_model=net,
        candidate_run=_mlx_run(cand, x),
        candidate_model=cand,
        bound=1e-4,
        rules=CHAIN_RULES,
    )


def test_error_growth_alone_points_one_layer_after_the_bug(chain):
    found = locate_models(**_chain(chain, nudge_a=2e-5))
    by_ref = {p.reference: p for p in found.pairs}
    assert 0 < by_ref["a"].judged < by_ref["a"].bound  # the bug is below a's own bound
    assert not found and found.first.reference == "b"


def test_resumed_after_the_buggy_layer_the_runs_agree_downstream(chain):
    sides = _chain(chain, nudge_a=2e-5)
    after = locate_models(**sides, resume="first")
    assert after.first is None and after.fed == 1 and after.resumed_from == "a"
    # fed through the rule's layout: the candidate's (8, 3) output from the reference's (3, 8)
    assert [p.reference for p in after.pairs] == ["b", "head", "(root)"]
    assert after.message == (
        "resumed after first, fed the reference's activation (the reference's a) at 1 call: no "
        "divergence downstream (3 matched pairs within their scaled bounds): the error arises at "
        "or before first"
    )
    before = locate_models(**sides, resume="pre")
    assert before.first.reference == "b" and "pre" not in [p.reference for p in before.pairs]
    assert before.message.startswith("resumed after pre, fed the reference's activation at 1 ")


def test_bisect_names_the_layer_where_the_error_arises(chain):
    found = bisect_models(**_chain(chain, nudge_a=2e-5), points=r"pre|first|second|out")
    assert found.points == ["pre", "first", "second", "out"]
    assert found.layer == "first"
    assert found.message == (
        "the error arises in first: resumed after pre the runs still part (at b#0), resumed "
        "after first they agree; error growth alone points at b#0"
    )
    assert len(found.runs) == 3  # ceil(log2(points + 1)) resumed runs, and one reference run


def test_bisect_tells_a_wrong_layer_from_an_error_that_arrived(chain):
    found = bisect_models(**_chain(chain, nudge_b=1e-3), points=["pre", "first", "second", "out"])
    assert found.layer == "second" and found.plain.first.reference == "b"
    assert found.message.startswith("the error arises in second: resumed after first the runs ")
    good = bisect_models(**_chain(chain), points=["pre", "first"])
    assert good and good.layer is None and good.runs == {}
    assert good.message.startswith("nothing to bisect: no divergence: ")


def test_bad_resume_points_are_input_errors(chain):
    with pytest.raises(InputError, match="resume point nope: the reference has no activation"):
        locate_models(**_chain(chain), resume="nope")
    with pytest.raises(InputError, match="bisect points .* not a regular expression: missing \\)"):
        bisect_models(**_chain(chain, nudge_b=1e-3), points=r"blocks\.(")
    with pytest.raises(InputError, match="no matched candidate module's name matches it"):
        bisect_models(**_chain(chain, nudge_b=1e-3), points=r"blocks\.\d+")


def test_cli_resume_and_bisect(project, capsys, tmp_path):
    import json

    path = project()
    args = ["locate", str(path), "--claim", "y", "--case", "one", "--candidate", "bad"]
    # the bug is in b: resumed after a, b still diverges; resumed after b, nothing does
    assert main([*args, "--resume", "a"]) == 1
    assert "resumed after a, fed the reference's activation at 1 call: first divergence at b#0" in (
        capsys.readouterr().out
    )
    assert main([*args, "--resume", "b"]) == 0
    assert "the error arises at or before b" in capsys.readouterr().out
    assert main([*args, "--bisect", "a|b|head", "--json", str(tmp_path / "bisect.json")]) == 1
    out = capsys.readouterr().out
    assert "the error arises in b: resumed after a the runs still part (at b#0)" in out
    data = json.loads((tmp_path / "bisect.json").read_text())
    assert data["layer"] == "b" and data["points"] == ["a", "b", "head"]
    assert data["plain"]["first"]["reference"] == "b" and set(data["runs"]) <= {"a", "b", "head"}
    assert main([*args, "--bisect", "a", "--resume", "a"]) == 2
    assert "--resume and --bisect: name one" in capsys.readouterr().err
    assert main([*args, "--resume", "zzz"]) == 2
    assert "resume point zzz: the reference has no activation 'zzz'" in capsys.readouterr().err


def test_the_gate_html_report_links_the_locate_page_written_beside_it(
    project, capsys, monkeypatch, tmp_path
):
    path = project()
    monkeypatch.chdir(tmp_path)
    assert main(["record", str(path)]) == 0
    assert main(["gate", str(path)]) == 1
    folder = tmp_path / "parity-reports" / "parity"
    page = (folder / "report.html").read_text()
    command = "paritygate locate parity.toml --claim y --case one --candidate bad"
    # no page yet: the report says how to write one
    assert f"where it parts: <code>{command} --report</code>" in page
    assert 'href="locate-' not in page
    capsys.readouterr()
    assert main([*command.split()[1:], "--report"]) == 1
    written = folder / "locate-y-bad-one.html"
    assert f"report: {written}" in capsys.readouterr().out
    assert "first divergence at b#0" in written.read_text()
    # the next report (a gate run, or `paritygate report`) links it, under the failing claim
    assert main(["report", str(folder / "result.json")]) == 1
    page = (folder / "report.html").read_text()
    assert page.count('href="locate-y-bad-one.html"') == 1
    assert "--report</code>" not in page
    failures = page[page.index("<h2>Failures</h2>") : page.index("<h2>Every case</h2>")]
    assert 'href="locate-y-bad-one.html"' in failures and "good" not in failures


# -- protocol 2: a command runner dumps its intermediates on request -----------------------------

PORT_CLI = """
import os
import sys

import numpy as np
import torch

from nets import TorchNet

net = TorchNet().eval()
if os.environ.get("BUG") == "1":
    with torch.no_grad():
        net.b.weight[0, 0] += 0.05
captured, calls = {}, {}
target = os.environ.get("PARITYGATE_CAPTURE")
if target and os.environ.get("IGNORE_CAPTURE") != "1":
    for name, module in net.named_modules():
        def hook(module, inputs, output, name=name or "(root)"):
            call = calls[name] = calls.get(name, -1) + 1
            captured[f"{name}#{call}"] = output.detach().numpy()
        module.register_forward_hook(hook)
with torch.no_grad():
    y = net(torch.from_numpy(np.load(sys.argv[1])["x"])).numpy()
np.savez(sys.argv[2], y=y)
if captured:
    np.savez(target, **captured)
"""

COMMANDS = """
[runners.cmd]
role = "candidate"
command = "{python} port_cli.py {case} {out}"
format = "npz"
env = { BUG = "1" }

[runners.cmd-v1]
role = "candidate"
command = "{python} port_cli.py {case} {out}"
format = "npz"
env = { IGNORE_CAPTURE = "1" }
"""


def test_a_command_runner_dumps_its_intermediates_under_protocol_2(project, capsys, tmp_path):
    path = project(COMMANDS)
    (tmp_path / "port_cli.py").write_text(PORT_CLI)
    found = locate(path, "y", "one", candidate="cmd")
    assert not found and found.first.label == "b#0"
    assert [(p.reference, p.how) for p in found.pairs] == [
        ("a", "name"),
        ("b", "name"),
        ("head", "name"),
        ("(root)", "name"),
    ]
    # a command that ignores the request: one line, exit 2
    args = ["locate", str(path), "--claim", "y", "--case", "one", "--candidate", "cmd-v1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "runner cmd-v1 wrote no intermediates at PARITYGATE_CAPTURE: its command must " in err
    assert len(err.strip().splitlines()) == 1
    # nor can a command be resumed
    args = ["locate", str(path), "--claim", "y", "--case", "one", "--candidate", "cmd"]
    assert main([*args, "--resume", "a"]) == 2
    assert "runner cmd runs as a command: it cannot resume" in capsys.readouterr().err
