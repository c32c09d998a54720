"""The default effect threshold: what A/A pairs on this machine and workload show.

Seed 003 asks that a change count only when it exceeds the run-to-run variability the pairing
leaves. Here that is measured directly: the baseline is run against itself (A/A) with the same
harness, and the threshold is the largest A/A shift the data cannot exclude at the run's level,
``max(|lo|, |hi|)`` of the A/A interval, and never below 0.5 %. It is cached per machine
(hardware facts), workload name, harness version and level, never per source revision: the
revision under test must not move its own yardstick.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any

from ..errors import InputError

__all__ = ["aa_threshold", "cache_path", "FLOOR"]

FLOOR = 0.005  # no shared machine resolves less than 0.5 % between two identical sides


def cache_path(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    base = cache_dir or os.environ.get("PARITYGATE_CACHE_DIR")
    root = Path(base) if base else Path.home() / ".cache" / "paritygate"
    return root / "bench-aa-thresholds.json"


def _key(workload: str, alpha: float, mode: str) -> tuple[str, dict[str, Any]]:
    from ..provenance import machine_facts
    from ._run import HARNESS_VERSION

    facts = machine_facts()
    basis = {
        "machine": {k: facts.get(k) for k in ("system", "machine", "cpu", "cpu_count", "hostname")},
        "gpu": facts.get("gpu"),
        "workload": workload,
        "harness_version": HARNESS_VERSION,
        "alpha": alpha,
        "mode": mode,
    }
    text = json.dumps(basis, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16], basis


def _load(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError):
        return {}  # an unreadable cache is recomputed, never trusted
    return data if isinstance(data, dict) and data.get("format_version") == 1 else {}


def aa_threshold(
    baseline: Any,
    *,
    workload: str,
    budget: float | None,
    blocks: int | None,
    alpha: float,
    sync: Any = None,
    recalibrate: bool = False,
    cache_dir: str | None = None,
    processes: int = 0,
    import_name: str | None = None,
) -> tuple[float, str]:
    """(threshold, where it came from): cached, or measured now by an A/A run of ``baseline``."""
    from . import _stats
    from ._run import _Design, _measure, make_side

    mode = f"{processes} processes" if processes else "in-process"
    path = cache_path(cache_dir)
    key, basis = _key(workload, alpha, mode)
    cache = _load(path)
    entry = (cache.get("entries") or {}).get(key)
    if entry and not recalibrate:
        return float(entry["threshold"]), (
            f"(A/A on this machine, {entry['blocks']} block pairs, {entry['date']}, cached)"
        )
    # the calibration runs once per machine and workload: give it at least 20 s so that its own
    # interval (which bounds the threshold) is narrow
    design = _Design(None if budget is None else max(budget, 20.0), blocks, None, 0, alpha)
    sides = []
    try:
        for name in ("A", "A'"):  # the same baseline twice; in workers, separate processes
            sides.append(make_side(name, baseline, processes, import_name))
        run = _measure(
            sides[0],
            sides[1],
            workload=f"{workload} (A/A)",
            design=design,
            threshold=None,
            sync=sync,
            check_outputs=None,
            memory_probe=None,
        )
    finally:
        for side in sides:
            side.close()
    logs = run["logs"]
    needed = _stats.min_pairs(alpha)
    if len(logs) < needed:
        raise InputError(
            f"the A/A calibration of {workload!r} got {len(logs)} block pairs; "
            f"its interval needs {needed}",
            hint="raise the budget, or state the smallest change worth calling (threshold)",
        )
    _, ci = _stats.hodges_lehmann_interval(logs, alpha)
    assert ci is not None
    shift = max(abs(ci[0]), abs(ci[1]))
    threshold = max(math.expm1(shift), FLOOR)
    date = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    entries = dict(cache.get("entries") or {})
    entries[key] = {
        "threshold": threshold,
        "blocks": len(logs),
        "ratio_ci": [math.exp(ci[0]), math.exp(ci[1])],
        "date": date,
        "basis": basis,
    }
    try:
        from ..files import atomic_write_bytes

        path.parent.mkdir(parents=True, exist_ok=True)
        payload = {"format": "paritygate-bench-aa", "format_version": 1, "entries": entries}
        atomic_write_bytes(path, json.dumps(payload, indent=1).encode())
    except OSError:
        pass  # an unwritable cache only costs the next run a calibration
    return threshold, f"(A/A on this machine, {len(logs)} block pairs, {date})"
