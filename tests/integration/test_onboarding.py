"""paritygate init and paritygate cases add: a spec from a folder of cases, pinned by command."""

from __future__ import annotations

import hashlib
import tomllib

import numpy as np
import pytest

from paritygate.cli import main
from paritygate.onboarding import add_cases, init_spec
from paritygate.spec import load_spec

MODEL = """
import numpy as np

W = np.random.default_rng(1).standard_normal((8, 3))


def reference(case):
    x = case.load()["x"].astype(np.float64)
    return {"logits": x @ W, "label": np.argmax(x @ W, axis=-1)}


def port(case):
    x = case.load()["x"].astype(np.float64)
    return {"logits": x @ W, "label": np.argmax(x @ W, axis=-1)}


def port32(case):
    x = case.load()["x"]
    z = x @ W.astype(np.float32)
    return {"logits": z, "label": np.argmax(z, axis=-1)}
"""

CLI = """
import sys
import numpy as np
W = np.random.default_rng(1).standard_normal((8, 3))
x = np.load(sys.argv[1], allow_pickle=False)["x"].astype(np.float64)
np.savez(sys.argv[2], logits=x @ W, label=np.argmax(x @ W, axis=-1))
"""


@pytest.fixture
def folder(tmp_path):
    rng = np.random.default_rng(0)
    (tmp_path / "cases").mkdir()
    for i in range(20):
        np.savez(tmp_path / "cases" / f"batch_{i:02d}.npz", x=rng.standard_normal((4, 8)))
    (tmp_path / "model.py").write_text(MODEL)
    (tmp_path / "model_cli.py").write_text(CLI)
    return tmp_path


def _sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_init_writes_a_spec_that_records_and_passes(folder, capsys, monkeypatch):
    monkeypatch.chdir(folder)
    args = ["init", "--cases", "cases/*.npz", "--reference", "model:reference"]
    assert main([*args, "--candidate", "model:port"]) == 0
    assert "wrote" in capsys.readouterr().out
    spec = load_spec(folder / "parity.toml")
    assert spec.outputs == ("label", "logits")  # found by running the reference
    assert len(spec.cases) == 20
    assert spec.cases["batch_07"].sha256 == _sha(folder / "cases" / "batch_07.npz")
    (claim,) = spec.claims.values()
    assert (claim.metric, claim.bound, claim.status) == ("exact", 0, "provisional")
    # compact: one line per case
    text = (folder / "parity.toml").read_text()
    assert text.count("\n") <= 45 and text.count("sha256 = ") == 20
    assert main(["record", "."]) == 0
    assert main(["gate", "."]) == 0


def test_init_with_a_float32_port_fails_exactly_and_passes_with_atol(folder, monkeypatch):
    monkeypatch.chdir(folder)
    args = ["init", "--cases", "cases/*.npz", "--reference", "model:reference"]
    assert main([*args, "--candidate", "model:port32"]) == 0
    assert main(["record", "."]) == 0
    assert main(["gate", "."]) == 1  # exact: the float32 port differs
    # an existing spec is never replaced silently
    assert main([*args, "--candidate", "model:port32", "--atol", "1e-5"]) == 2
    assert main([*args, "--candidate", "model:port32", "--atol", "1e-5", "--force"]) == 0
    assert main(["record", "."]) == 0
    assert main(["gate", "."]) == 0


def test_init_with_commands(folder, monkeypatch):
    monkeypatch.chdir(folder)
    command = "python model_cli.py {case} {out}"
    assert (
        main(
            ["init", "--cases", "cases/batch_0*.npz", "--reference", "model:reference"]
            + ["--candidate", command.replace("python", "{python}")]
        )
        == 0
    )
    spec = load_spec(folder / "parity.toml")
    assert spec.runners["candidate"].command[1:] == ("model_cli.py", "{case}", "{out}")
    assert main(["record", "."]) == 0
    assert main(["gate", "."]) == 0


def test_init_refuses_bad_input_in_one_line(folder, capsys, monkeypatch):
    monkeypatch.chdir(folder)
    assert (
        main(
            [
                "init",
                "--cases",
                "nope/*.npz",
                "--reference",
                "model:reference",
                "--candidate",
                "model:port",
            ]
        )
        == 2
    )
    assert "no file matches 'nope/*.npz'" in capsys.readouterr().err
    assert (
        main(
            [
                "init",
                "--cases",
                "cases/*.npz",
                "--reference",
                "model:missing",
                "--candidate",
                "model:port",
            ]
        )
        == 2
    )
    assert (
        "reference model:missing failed to start (import): 'model' has no attribute 'missing'"
        in capsys.readouterr().err
    )
    assert (
        main(
            [
                "init",
                "--cases",
                "cases/*.npz",
                "--reference",
                "model:reference",
                "--candidate",
                "run the port",
            ]
        )
        == 2
    )
    assert "neither 'module:function' nor a command" in capsys.readouterr().err
    assert not (folder / "parity.toml").exists()


def test_cases_add_pins_new_files_one_line_each_and_keeps_pinned_ones(folder, capsys):
    init_spec(
        folder, cases=["cases/batch_0*.npz"], reference="model:reference", candidate="model:port"
    )
    before = (folder / "parity.toml").read_text()
    assert main(["cases", "add", "cases/*.npz", "--spec", str(folder / "parity.toml")]) == 0
    out = capsys.readouterr().out
    assert "10 case(s) added, 10 already pinned" in out
    after = (folder / "parity.toml").read_text()
    assert after.startswith(before.rstrip("\n")) and after.count("\n") - before.count("\n") == 10
    spec = load_spec(folder / "parity.toml")
    assert len(spec.cases) == 20
    assert spec.cases["batch_15"].sha256 == _sha(folder / "cases" / "batch_15.npz")
    # again: nothing new, nothing written
    assert [c.added for c in add_cases(folder / "parity.toml", ["cases/*.npz"])] == [False] * 20
    assert (folder / "parity.toml").read_text() == after


def test_cases_add_refuses_a_changed_pinned_file_and_files_outside(folder, tmp_path_factory):
    init_spec(folder, cases=["cases/*.npz"], reference="model:reference", candidate="model:port")
    before = (folder / "parity.toml").read_text()
    np.savez(folder / "cases" / "batch_03.npz", x=np.zeros((4, 8)))
    from paritygate.errors import InputError

    with pytest.raises(InputError, match="batch_03.*pinned with another sha256"):
        add_cases(folder / "parity.toml", ["cases/*.npz"])
    outside = tmp_path_factory.mktemp("elsewhere") / "x.npz"
    np.savez(outside, x=np.zeros(2))
    with pytest.raises(InputError, match="outside the spec's folder"):
        add_cases(folder / "parity.toml", [str(outside)])
    assert (folder / "parity.toml").read_text() == before


def test_cases_add_to_a_spec_written_with_case_tables(folder):
    init_spec(
        folder, cases=["cases/batch_00.npz"], reference="model:reference", candidate="model:port"
    )
    path = folder / "parity.toml"
    text = path.read_text()
    line = next(x for x in text.splitlines() if x.startswith("batch_00 = "))
    digest = _sha(folder / "cases" / "batch_00.npz")
    table = f'[cases.batch_00]\npath = "cases/batch_00.npz"\nsha256 = "{digest}"'
    path.write_text(text.replace("[cases]\n" + line, table))
    add_cases(path, ["cases/batch_01.npz"])
    data = tomllib.loads(path.read_text())
    assert sorted(data["cases"]) == ["batch_00", "batch_01"]
    assert "[cases.batch_01]" in path.read_text()


def test_quick_is_exact_unless_bounds_are_given_and_says_which(folder, capsys, monkeypatch):
    monkeypatch.chdir(folder)
    base = ["quick", "--reference", "model:reference", "--inputs", "cases/batch_0*.npz"]
    assert main([*base, "--candidate", "model:port"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("comparing exactly (no bound given")
    assert "pass  outputs-match  candidate  10/10 cases  worst 0  bound 0  exact" in out
    assert main([*base, "--candidate", "model:port32"]) == 1  # float32 differs: exact fails
    assert "FAIL  outputs-match  candidate  0/10 cases" in capsys.readouterr().out
    assert main([*base, "--candidate", "model:port32", "--atol", "1e-4"]) == 0
    assert capsys.readouterr().out.startswith("comparing with atol 0.0001")
    assert main([*base, "--candidate", "model:port32", "--atol", "1e-12"]) == 1
    # nothing recorded, no spec written
    assert not (folder / "references").exists() and not (folder / "parity.toml").exists()


def test_quick_with_commands_and_save_spec_grows_into_a_gate(folder, capsys, monkeypatch):
    monkeypatch.chdir(folder)
    # two inputs: a paired run calls the command several times per input
    args = ["quick", "--reference", "model:reference", "--inputs", "cases/batch_0[01].npz"]
    args += ["--candidate", "{python} model_cli.py {case} {out}", "--save-spec", "parity.toml"]
    assert main(args) == 0
    assert "spec: parity.toml" in capsys.readouterr().out
    spec = load_spec(folder / "parity.toml")
    assert len(spec.cases) == 2 and spec.claims["outputs-match"].mode == "paired"
    assert main(["gate", "parity.toml"]) == 0
    # --save-spec never replaces a spec
    assert main(args) == 2
    assert "exists: --save-spec never replaces a spec" in capsys.readouterr().err


def test_quick_bad_input_is_one_line(folder, capsys, monkeypatch):
    monkeypatch.chdir(folder)
    args = ["quick", "--reference", "model:reference", "--candidate", "model:port"]
    assert main([*args, "--inputs", "none/*.npz"]) == 2
    assert capsys.readouterr().err.startswith("paritygate: error: no file matches 'none/*.npz'")


def test_init_names_the_claim_it_wrote_in_its_hint(folder, capsys, monkeypatch):
    monkeypatch.chdir(folder)
    args = ["init", "--cases", "cases/*.npz", "--reference", "model:reference"]
    assert main([*args, "--candidate", "model:port", "--atol", "1e-5"]) == 0
    out = capsys.readouterr().out
    assert "--claim outputs-max-abs --write" in out and "outputs-match" not in out
