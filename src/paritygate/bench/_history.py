"""Benchmark history: results appended per workload and source revision, the trend printed and
plotted, step changes flagged by a change-point method from ruptures (optional extra
``paritygate[history]``), never a hand-written one.

One JSON-lines file per workload in the history folder; each line is one run: date, source
revision, machine, verdict, the time ratio with its interval, and both sides' median time per
call. The series examined for step changes is the log of the candidate's median time per call
(the number a regression moves); the penalty of ruptures' PELT search (model ``l2``) is
``penalty * log(n) * sigma**2`` with ``sigma`` estimated robustly from successive differences,
a BIC-like choice that does not flag noise as steps.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError, UserError

__all__ = ["append", "load", "change_points", "HistoryPoint", "plot_png", "write_html"]


@dataclass
class HistoryPoint:
    date: str
    revision: str
    verdict: str
    ratio: float
    ratio_ci: tuple[float, float]
    baseline_s: float
    candidate_s: float
    machine: str


def _slug(workload: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", workload).strip("_") or "workload"


def _revision(cwd: Path | None = None) -> str:
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short=12", "HEAD"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=10,
        )
        return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def append(result: Any, folder: str | Path, revision: str | None = None) -> Path:
    """Append one run to ``folder/<workload>.jsonl``; returns the file."""
    from ..files import atomic_write_bytes

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{_slug(result.workload)}.jsonl"
    prov = result.provenance
    record = {
        "format": "paritygate-bench-history",
        "format_version": 1,
        "workload": result.workload,
        "date": (prov.get("noise") or {}).get("before", {}).get("time"),
        "revision": revision or prov.get("source_revision") or _revision(),
        "machine": (prov.get("machine") or {}).get("hostname", "unknown"),
        "verdict": result.verdict.value,
        "ratio": result.ratio,
        "ratio_ci": list(result.ratio_ci),
        "baseline_s": statistics.median(result.baseline.end_to_end_s),
        "candidate_s": statistics.median(result.candidate.end_to_end_s),
    }
    import time

    record["date"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(record["date"] or None))
    old = path.read_bytes() if path.exists() else b""
    atomic_write_bytes(path, old + (json.dumps(record) + "\n").encode())
    return path


def load(path: str | Path) -> list[HistoryPoint]:
    points = []
    file = Path(path)
    try:
        lines = file.read_text().splitlines()
    except FileNotFoundError:
        raise InputError("no such history file", where=str(file)) from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            r = json.loads(line)
            if r.get("format") != "paritygate-bench-history" or r.get("format_version") != 1:
                raise ValueError("not a paritygate bench history record (format version 1)")
            points.append(
                HistoryPoint(
                    date=r["date"],
                    revision=r["revision"],
                    verdict=r["verdict"],
                    ratio=float(r["ratio"]),
                    ratio_ci=(float(r["ratio_ci"][0]), float(r["ratio_ci"][1])),
                    baseline_s=float(r["baseline_s"]),
                    candidate_s=float(r["candidate_s"]),
                    machine=r.get("machine", "unknown"),
                )
            )
        except (ValueError, KeyError, TypeError, IndexError) as exc:
            raise InputError(f"line {number}: {exc}", where=str(file)) from None
    return points


def change_points(values: list[float], penalty: float = 3.0) -> list[int]:
    """Indices where a new level starts (ruptures PELT, l2 cost, BIC-like penalty)."""
    try:
        import numpy as np
        import ruptures
    except ImportError:
        raise UserError(
            "finding step changes needs ruptures",
            hint="pip install 'paritygate[history]'",
        ) from None
    n = len(values)
    if n < 4:
        return []
    signal = np.log(np.asarray(values, dtype=float))
    diffs = np.diff(signal)
    # robust noise level from successive differences (a step moves one difference only)
    sigma = 1.4826 * float(np.median(np.abs(diffs - np.median(diffs)))) / math.sqrt(2)
    sigma = max(sigma, 1e-3 * float(np.median(np.abs(signal))) + 1e-12)
    algo = ruptures.Pelt(model="l2", min_size=2, jump=1).fit(signal.reshape(-1, 1))
    ends = algo.predict(pen=penalty * math.log(n) * sigma**2)
    return [e for e in ends if e < n]


def plot_png(points: list[HistoryPoint], steps: list[int], out: str | Path, title: str) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UserError("plots need matplotlib", hint="pip install 'paritygate[plots]'") from None
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    x = list(range(len(points)))
    top.plot(x, [p.candidate_s * 1e3 for p in points], "o-", label="candidate")
    top.plot(x, [p.baseline_s * 1e3 for p in points], "s--", alpha=0.6, label="baseline")
    top.set_ylabel("median per call (ms)")
    top.legend()
    bottom.errorbar(
        x,
        [p.ratio for p in points],
        yerr=[
            [max(p.ratio - p.ratio_ci[0], 0) for p in points],
            [max(p.ratio_ci[1] - p.ratio, 0) for p in points],
        ],
        fmt="o",
    )
    bottom.axhline(1.0, color="grey", lw=0.8)
    bottom.set_ylabel("time ratio (cand/base)")
    for step in steps:
        for ax in (top, bottom):
            ax.axvline(step - 0.5, color="red", ls=":", lw=1.5)
    bottom.set_xticks(x, [p.revision[:8] for p in points], rotation=60, fontsize=7)
    top.set_title(title + (f" — step changes at {', '.join(map(str, steps))}" if steps else ""))
    fig.tight_layout()
    out = Path(out)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def write_html(
    points: list[HistoryPoint], steps: list[int], png: Path | None, out: str | Path, title: str
) -> Path:
    import base64
    import html

    from ..files import atomic_write_bytes
    from ._stats import format_ratio

    rows = []
    for i, p in enumerate(points):
        mark = "step change" if i in steps else ""
        rows.append(
            f"<tr{' class=step' if mark else ''}><td>{i}</td><td>{html.escape(p.date)}</td>"
            f"<td><code>{html.escape(p.revision)}</code></td><td>{html.escape(p.verdict)}</td>"
            f"<td>{html.escape(format_ratio(p.ratio))}</td>"
            f"<td>{p.baseline_s * 1e3:.4g} ms</td><td>{p.candidate_s * 1e3:.4g} ms</td>"
            f"<td>{mark}</td></tr>"
        )
    image = ""
    if png is not None:
        data = base64.b64encode(Path(png).read_bytes()).decode()
        image = f'<img alt="trend" src="data:image/png;base64,{data}">'
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:2px 8px}}
tr.step{{background:#fdd}}</style></head><body><h1>{html.escape(title)}</h1>{image}
<table><tr><th>#</th><th>date</th><th>revision</th><th>verdict</th><th>ratio</th>
<th>baseline</th><th>candidate</th><th></th></tr>{"".join(rows)}</table></body></html>
"""
    return atomic_write_bytes(Path(out), doc.encode())
