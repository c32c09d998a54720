"""The committed benchmark results are what the README's commands write with today's code.

Every ``bench-results/*.json`` written by this harness version names a README command, a commit
in the history and a clean tree, and has exactly the keys that command writes (checked by
running a shrunken copy of the command: one comparison, a stated threshold, few latency calls;
percentile keys that need more samples than the shrunken run takes are the only difference
allowed). Results from an older harness (the GPU runs) must be named as such in the README.
Every comparison's raw samples sit beside its result and give back its interval."""

from __future__ import annotations

import json
import math
import re
import shlex
import subprocess
import sys

import pytest

from paritygate.bench import (
    HARNESS_VERSION,
    hodges_lehmann_interval,
    load_samples,
    min_decisive_pairs,
)

COMMAND = re.compile(r"^python (bench_encoder\.py .*--out (bench-results/\S+\.json))$", re.M)
OLDER = "**Results from an older harness.**"
PERCENTILES = {f"p{q}_{u}" for q in (90, 95, 99) for u in ("s", "ms")}


def _commands(example_folder) -> dict[str, str]:
    text = (example_folder / "README.md").read_text()
    return {out: command for command, out in COMMAND.findall(text)}


def _results(example_folder):
    for path in sorted((example_folder / "bench-results").rglob("*.json")):
        yield path, json.loads(path.read_text())


def _keys(value, prefix=""):
    """Key paths of a result; workload, comparison and path names are kept, list items not."""
    if isinstance(value, dict):
        out = set()
        for key, sub in value.items():
            out.add(prefix + key)
            out |= _keys(sub, prefix + key + "/")
        return out
    return set()


def _shrunk(argv: list[str], out: str) -> tuple[list[str], str, str]:
    """The command with one workload, one comparison, a stated threshold and few calls."""
    args = argv[1:]
    opts: dict[str, list[str]] = {}
    key = None
    for a in args:
        if a.startswith("--"):
            key = a
            opts[key] = []
        else:
            opts[key].append(a)
    import bench_encoder

    workload = (opts.get("--workloads") or list(bench_encoder.PLANS[opts["--plan"][0]]))[0]
    cand = "token-batching" if workload != "rubric50" else "prefix-cache"
    opts["--workloads"] = [workload]
    opts["--only"] = [cand]
    opts["--threshold"] = ["0.5"]
    opts["--out"] = [out]
    if opts.get("--p95-calls", ["200"]) != ["0"]:
        opts["--p95-calls"] = ["20"]
    if opts.get("--sweep-calls", ["20"]) != ["0"]:
        opts["--sweep-calls"] = ["1"]
        opts["--sweep-lengths"] = ["64"]
    flat = [x for k, v in sorted(opts.items()) for x in (k, *v)]
    return flat, workload, cand


def test_committed_results_are_what_the_readme_commands_write(example_folder, tmp_path):
    commands = _commands(example_folder)
    readme = (example_folder / "README.md").read_text()
    older = " ".join(part.split("\n\n", 1)[0] for part in readme.split(OLDER)[1:])
    current = [(p, r) for p, r in _results(example_folder) if "harness_version" in r]
    written: dict[tuple[str, ...], dict] = {}
    assert current, "no result of today's harness is committed"
    for path, result in _results(example_folder):
        rel = path.relative_to(example_folder).as_posix()
        if "harness_version" not in result:  # an older harness's run: named as such
            assert rel in older, f"{rel} is from an older harness and the README does not say so"
            continue
        assert result["harness_version"] == HARNESS_VERSION, rel
        assert rel in commands, f"{rel}: no README command writes it"
        assert result["command"] == commands[rel], rel
        revision = result["source_revision"]
        assert re.fullmatch(r"[0-9a-f]{40}", revision), f"{rel}: {revision} (a dirty tree?)"
        shallow = subprocess.run(
            ["git", "rev-parse", "--is-shallow-repository"],
            cwd=example_folder,
            capture_output=True,
            text=True,
        ).stdout.strip()
        if shallow == "false":
            known = subprocess.run(
                ["git", "merge-base", "--is-ancestor", revision, "HEAD"], cwd=example_folder
            )
            assert known.returncode == 0, f"{rel}: commit {revision} is not in the history"
        argv = shlex.split(result["command"])
        args, workload, cand = _shrunk(argv, "OUT")
        key = tuple(args)
        if key not in written:  # commands that shrink alike run once
            out = tmp_path / f"run{len(written)}.json"
            command = [str(out) if a == "OUT" else a for a in args]
            run = subprocess.run(
                [sys.executable, "bench_encoder.py", *command],
                cwd=example_folder,
                capture_output=True,
                text=True,
            )
            assert run.returncode == 0, run.stderr[-2000:]
            written[key] = json.loads(out.read_text())
        fresh = written[key]
        assert set(fresh) == set(result), (rel, set(fresh) ^ set(result))
        if "latency" in result:  # the historical drift this catches: latency_fixed vs latency
            planted = {("latency_fixed" if k == "latency" else k): v for k, v in result.items()}
            assert set(fresh) ^ set(planted) == {"latency", "latency_fixed"}
        got = _keys(fresh["workloads"][workload]["comparisons"][cand])
        want = _keys(result["workloads"][workload]["comparisons"][cand])
        assert got == want, (rel, got ^ want)
        for wname, paths in fresh.get("latency", {}).items():
            for name, entry in paths.items():
                want = set(result["latency"][wname][name])
                assert set(entry) - PERCENTILES == want - PERCENTILES, (rel, wname, name)
                assert "p95_s" in want  # the committed run took the 200 calls p95 needs
        # the raw samples beside it give back every interval
        samples = load_samples(path.with_name(result["samples"]))
        for wname, wres in result["workloads"].items():
            for cname, entry in wres["comparisons"].items():
                res = samples[f"{wname}/{cname}"]
                logs = [math.log(r) for r in res.pair_ratios]
                _, (lo, hi) = hodges_lehmann_interval(logs, 1 - res.confidence)
                assert entry["speedup_ci"] == pytest.approx([math.exp(-hi), math.exp(-lo)])
                assert res.blocks >= min_decisive_pairs(0.05)


def test_fewer_blocks_than_a_verdict_needs_are_refused(example_folder, tmp_path):
    run = subprocess.run(
        [sys.executable, "bench_encoder.py", "--blocks", "8", "--out", str(tmp_path / "x.json")],
        cwd=example_folder,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and not (tmp_path / "x.json").exists()
    assert run.stderr.strip() == (
        "bench_encoder.py: --blocks 8: a verdict needs at least 12 block pairs "
        "(min_decisive_pairs at 95 %)"
    )
