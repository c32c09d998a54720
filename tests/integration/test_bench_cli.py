"""paritygate bench run (from [benchmarks.NAME] tables) and bench history (ruptures, plots)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from paritygate.cli import main

WORK = """
import numpy as np


def _work(n):
    total = 0
    for i in range(n):
        total += i * i
    return np.ones(2)


def one():
    return _work(10_000)


def three():
    return _work(30_000)
"""


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PARITYGATE_CACHE_DIR", str(tmp_path / "cache"))


def _project(tmp_path, tables: str):
    (tmp_path / "work_mod.py").write_text(WORK)
    path = tmp_path / "bench.toml"
    path.write_text(tables)
    return path


def test_bench_run_from_a_table_exits_on_the_verdict_and_appends_history(tmp_path, capsys):
    path = _project(
        tmp_path,
        """
[benchmarks.triple]
baseline = "work_mod:one"
candidate = "work_mod:three"
workload = "loop, 10k vs 30k"
blocks = 12
threshold = 0.2
processes = 0
history = "hist"
""",
    )
    assert main(["bench", "run", str(path), "--json", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert "slower: " in out and "x slower" in out and "history: appended" in out
    saved = json.loads((tmp_path / "out" / "triple.json").read_text())
    assert saved["verdict"] == "slower" and saved["provenance"]["benchmark"] == "triple"
    (record,) = (tmp_path / "hist" / "loop_10k_vs_30k.jsonl").read_text().splitlines()
    assert json.loads(record)["verdict"] == "slower"
    # the other way round it is faster: exit 0
    path.write_text(
        path.read_text()
        .replace('"work_mod:one"', "X")
        .replace('"work_mod:three"', '"work_mod:one"')
        .replace("X", '"work_mod:three"')
    )
    assert main(["bench", "run", str(path), "triple"]) == 0


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (
            'baseline = "m:f"\ncandidate = "m:g"\nthreshold = 0',
            "benchmarks.x.threshold: must be > 0",
        ),
        ('baseline = "m:f"', "benchmarks.x: missing 'candidate'"),
        ('baseline = "m:f"\ncandidate = "m:g"\nbudgt = 3', "unknown key 'budgt'"),
        ('baseline = "nocolon"\ncandidate = "m:g"', "expected 'module:function' or a command"),
    ],
)
def test_bad_tables_are_one_line_errors(tmp_path, capsys, table, message):
    path = _project(tmp_path, "[benchmarks.x]\n" + table + "\n")
    assert main(["bench", "run", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_cli_refuses_a_zero_threshold_and_unknown_names(tmp_path, capsys):
    path = _project(
        tmp_path, '[benchmarks.x]\nbaseline = "work_mod:one"\ncandidate = "work_mod:one"\n'
    )
    assert main(["bench", "run", str(path), "--threshold", "0%"]) == 2
    assert "--threshold must be > 0" in capsys.readouterr().err
    assert main(["bench", "run", str(path), "nope"]) == 2
    assert "no [benchmarks.nope] table; the file has: x" in capsys.readouterr().err


def test_a_spec_needs_format_5_for_benchmarks(tmp_path):
    from spec_helpers import make_project

    from paritygate.errors import SpecError
    from paritygate.spec import load_spec

    body = """
outputs = ["y"]

[cases.a]
path = "cases/a.npz"
sha256 = "{sha:a}"

[runners.reference]
role = "reference"
callable = "m:f"

[runners.cand]
role = "candidate"
callable = "m:g"

[claims.c]
outputs = ["y"]
metric = "max_abs"
bound = 0.1
oracle = "equivalence"
status = "provisional"

[benchmarks.b]
baseline = "m:f"
candidate = "m:g"
"""
    cases = {"a": {"x": np.zeros(2)}}
    ok = make_project(tmp_path / "ok", "format_version = 5\n" + body, cases=cases)
    load_spec(ok)
    old = make_project(tmp_path / "old", "format_version = 4\n" + body, cases=cases)
    with pytest.raises(SpecError, match=r"\[benchmarks\] needs format_version = 5"):
        load_spec(old)


def _history(folder, candidate_ms):
    folder.mkdir()
    lines = []
    for i, ms in enumerate(candidate_ms):
        lines.append(
            json.dumps(
                {
                    "format": "paritygate-bench-history",
                    "format_version": 1,
                    "workload": "w",
                    "date": f"2026-11-{i + 1:02d}T00:00:00Z",
                    "revision": f"rev{i:04d}",
                    "machine": "box",
                    "verdict": "equivalent",
                    "ratio": 1.0,
                    "ratio_ci": [0.98, 1.02],
                    "baseline_s": 1e-3,
                    "candidate_s": ms * 1e-3,
                }
            )
        )
    (folder / "w.jsonl").write_text("\n".join(lines) + "\n")


def test_history_flags_a_step_change_and_plots(tmp_path, capsys):
    rng = np.random.default_rng(0)
    series = list(1.0 + rng.normal(0, 0.01, 10)) + list(1.08 + rng.normal(0, 0.01, 8))
    _history(tmp_path / "h", series)
    assert (
        main(
            [
                "bench",
                "history",
                str(tmp_path / "h"),
                "--png",
                str(tmp_path / "p"),
                "--html",
                str(tmp_path / "p"),
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "step change at #10 (rev0010)" in out
    assert (tmp_path / "p" / "w.png").read_bytes()[:4] == b"\x89PNG"
    page = (tmp_path / "p" / "w.html").read_text()
    assert "data:image/png;base64," in page and "<tr class=step><td>10</td>" in page


def test_history_without_a_step_flags_none(tmp_path, capsys):
    rng = np.random.default_rng(1)
    _history(tmp_path / "h", list(1.0 + rng.normal(0, 0.01, 18)))
    assert main(["bench", "history", str(tmp_path / "h")]) == 0
    out = capsys.readouterr().out
    assert "no step change" in out and "step change at" not in out
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "w.jsonl").write_text('{"format": "other"}\n')
    assert main(["bench", "history", str(tmp_path / "bad")]) == 2
