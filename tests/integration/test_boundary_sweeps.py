"""paritygate cases add --sweep: a chunked port's boundary cases from one declaration, pinned;
a chunk-edge bug no template case reaches fails the gate on a swept case, the port passes."""

from __future__ import annotations

import hashlib
import wave

import numpy as np
import pytest

from paritygate.boundaries import batch_sizes, edge_lengths, parse_sweep, sweep_cases
from paritygate.cli import main
from paritygate.errors import InputError
from paritygate.gate import run_gate
from paritygate.spec import load_spec

MODEL = """
import numpy as np

CHUNK = 4


def reference(case):
    x = np.asarray(case.load(), dtype=np.float64)
    return {"y": np.cumsum(x, axis=0)}


def chunked(case, stop_short=False):
    # the port: a running sum computed chunk by chunk, the carry passed between chunks
    x = np.asarray(case.load(), dtype=np.float64)
    out, carry = [], np.zeros(x.shape[1:])
    end = x.shape[0] - 1 if stop_short and x.shape[0] % CHUNK == 1 else x.shape[0]
    for start in range(0, end, CHUNK):
        part = np.cumsum(x[start : min(start + CHUNK, end)], axis=0) + carry
        carry = part[-1]
        out.append(part)
    y = np.concatenate(out) if out else np.zeros((0, *x.shape[1:]))
    return {"y": np.concatenate([y, np.zeros((x.shape[0] - y.shape[0], *x.shape[1:]))])}


def port(case):
    return chunked(case)


def port_bug(case):
    # a lone element after the last full chunk is never summed: lengths k*4 + 1 only
    return chunked(case, stop_short=True)
"""

SPEC = """format_version = 6
name = "chunked"
outputs = ["y"]

[runners.reference]
role = "reference"
callable = "model:reference"

[runners.port]
role = "candidate"
callable = "model:{candidate}"

[claims.y-max-abs]
outputs = ["y"]
metric = "max_abs"
bound = 1e-9
oracle = "equivalence"
mode = "paired"
status = "provisional"

[cases]
t = {{ path = "cases/t.npy", sha256 = "{sha}" }}
"""


def _project(tmp_path, candidate="port"):
    (tmp_path / "cases").mkdir(exist_ok=True)
    template = tmp_path / "cases" / "t.npy"
    np.save(template, np.arange(16, dtype=np.float32).reshape(8, 2) / 7)
    sha = hashlib.sha256(template.read_bytes()).hexdigest()
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "parity.toml").write_text(SPEC.format(candidate=candidate, sha=sha))
    return tmp_path / "parity.toml"


def test_the_declared_edges_and_batch_sizes():
    assert edge_lengths((4,), 2) == [0, 1, 3, 4, 5, 7, 8, 9]
    assert edge_lengths((512, 1536), 1, empty=False) == [1, 511, 512, 513, 1535, 1536, 1537]
    assert (
        batch_sizes(8) == [1, 2, 9] and batch_sizes(7) == [1, 2, 9] and batch_sizes(1) == [1, 2, 3]
    )
    sweep = parse_sweep("x:axis=0,chunk=512,chunk=1536,max=4,batch=1,empty=false,name=xs")
    assert (sweep.template, sweep.chunks, sweep.max_k, sweep.batch, sweep.empty) == (
        "x",
        (512, 1536),
        4,
        1,
        False,
    )
    assert sweep.prefix == "xs"


def test_a_chunk_edge_bug_fails_the_gate_on_a_swept_case_and_the_port_passes(tmp_path):
    path = _project(tmp_path, candidate="port_bug")
    assert run_gate(load_spec(path)).exit_code == 0  # the template (8 = 2 chunks) misses it
    added = sweep_cases(path, parse_sweep("t:axis=0,chunk=4,max=2"))
    assert [c.name for c in added] == [f"t_edges.{n}" for n in (0, 1, 3, 4, 5, 7, 8, 9)]
    assert all(c.added for c in added)
    spec = load_spec(path)
    assert spec.cases["t_edges.5"].path == tmp_path / "cases" / "t_edges" / "t_edges.5.npy"
    assert np.load(spec.cases["t_edges.9"].path).shape == (9, 2)
    assert np.array_equal(
        np.load(spec.cases["t_edges.9"].path)[8], np.load(spec.cases["t"].path)[0]
    )
    result = run_gate(spec)
    assert result.exit_code == 1
    failed = sorted((v.claim_id, v.case) for v in result.verdicts if not v.passed)
    # k*4 + 1 for k = 0, 1, 2: the single element, one past the first and the second chunk
    assert failed == [("y-max-abs", f"t_edges.{n}") for n in (1, 5, 9)]
    # the correct port on the same cases
    (tmp_path / "parity.toml").write_text(
        path.read_text().replace('callable = "model:port_bug"', 'callable = "model:port"')
    )
    assert run_gate(load_spec(path)).exit_code == 0


def test_a_sweep_again_adds_nothing_and_a_changed_template_is_drift(tmp_path):
    path = _project(tmp_path)
    sweep = parse_sweep("t:axis=0,chunk=4,max=1")
    sweep_cases(path, sweep)
    text = path.read_text()
    assert not any(c.added for c in sweep_cases(path, sweep))
    assert path.read_text() == text
    np.save(tmp_path / "cases" / "t.npy", np.ones((8, 2), dtype=np.float32))
    text = text.replace(
        text.split('sha256 = "')[1].split('"')[0],
        hashlib.sha256((tmp_path / "cases" / "t.npy").read_bytes()).hexdigest(),
        1,
    )
    path.write_text(text)
    with pytest.raises(InputError, match=r"t_edges\.1.*pinned with another sha256"):
        sweep_cases(path, sweep)
    assert path.read_text() == text


def test_dry_run_writes_nothing(tmp_path, capsys):
    path = _project(tmp_path)
    text = path.read_text()
    assert (
        main(["cases", "add", "--sweep", "t:axis=0,chunk=4", "--spec", str(path), "--dry-run"]) == 0
    )
    assert "11 case(s) to add" in capsys.readouterr().out
    assert path.read_text() == text and not (tmp_path / "cases" / "t_edges").exists()


def test_a_generated_template_becomes_a_pinned_generated_sweep(tmp_path, capsys):
    path = _project(tmp_path)
    path.write_text(
        path.read_text() + '\n[cases.g]\ngenerate = { shape = [8, 3], dtype = "float32", '
        'distribution = "normal", seed = 0 }\n'
    )
    from paritygate.errors import SpecError

    with pytest.raises(SpecError, match='sha256 = "') as caught:
        load_spec(path)
    pin = str(caught.value).split('sha256 = "')[1][:64]
    path.write_text(path.read_text() + f'sha256 = "{pin}"\n')
    declaration = "g:axis=0,chunk=4,max=1,batch=1,batch_chunk=2"
    assert main(["cases", "add", "--sweep", declaration, "--spec", str(path)]) == 0
    assert "8 case(s) added" in capsys.readouterr().out
    spec = load_spec(path)
    assert spec.cases["g_edges.5"].generated.shape == (5, 3)
    assert spec.cases["g_batch.3"].sha256 == pin  # the template's own shape, the same input
    assert sorted(n for n in spec.cases if n.startswith("g_batch")) == [
        "g_batch.1",
        "g_batch.2",
        "g_batch.3",
    ]
    assert run_gate(spec).exit_code == 0
    assert main(["cases", "add", "--sweep", declaration, "--spec", str(path)]) == 0
    assert "0 case(s) added, 8 already pinned" in capsys.readouterr().out


def test_npz_with_a_key_and_a_wav_template(tmp_path):
    path = _project(tmp_path)
    np.savez(tmp_path / "cases" / "pair.npz", ids=np.arange(6)[None], scale=np.ones(3))
    with wave.open(str(tmp_path / "cases" / "a.wav"), "wb") as f:
        f.setnchannels(1), f.setsampwidth(2), f.setframerate(16000)
        f.writeframes(np.arange(10, dtype="<i2").tobytes())
    main(["cases", "add", "cases/pair.npz", "cases/a.wav", "--spec", str(path)])
    with pytest.raises(InputError, match="holds 2 arrays.*key=NAME"):
        sweep_cases(path, parse_sweep("pair:axis=1,chunk=4,max=1"))
    sweep_cases(path, parse_sweep("pair:axis=1,chunk=4,max=1,key=ids"))
    five = np.load(tmp_path / "cases" / "pair_edges" / "pair_edges.5.npz")
    assert five["ids"].tolist() == [[0, 1, 2, 3, 4]] and five["scale"].tolist() == [1, 1, 1]
    sweep_cases(path, parse_sweep("a:axis=0,chunk=8,max=2,empty=false"))
    with wave.open(str(tmp_path / "cases" / "a_edges" / "a_edges.17.wav"), "rb") as f:
        assert f.getframerate() == 16000
        samples = np.frombuffer(f.readframes(f.getnframes()), dtype="<i2")
    assert samples.tolist() == [*range(10), *range(7)]
    assert "a_edges.0" not in load_spec(path).cases


@pytest.mark.parametrize(
    ("declaration", "words"),
    [
        ("t", "expected TEMPLATE:axis=A,chunk=N"),
        ("t:axis=0", "needs chunk=N"),
        ("t:axis=0,chunk=0", "chunk=0: expected an integer >= 1"),
        ("t:axis=0,chunk=4,colour=red", "'colour=red': expected KEY=VALUE"),
        ("t:axis=0,chunk=4,max=0", "max=0: expected an integer >= 1"),
        ("t:batch=0", "needs batch_chunk=C or chunk=N"),
        ("t:axis=2,chunk=4", "has shape [8, 2]: no axis 2"),
        ("nope:axis=0,chunk=4", "no case 'nope'"),
    ],
)
def test_bad_declarations_exit_2_in_one_line(tmp_path, capsys, declaration, words):
    path = _project(tmp_path)
    text = path.read_text()
    assert main(["cases", "add", "--sweep", declaration, "--spec", str(path)]) == 2
    err = capsys.readouterr().err
    assert words in err and err.count("\n") == 1 and "Traceback" not in err
    assert path.read_text() == text
