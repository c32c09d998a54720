"""Calibration runs of parity-speed.toml's speed claim (offline; the bound is set from them).

    python calibrate_speed.py --runs 3 --bound 1.2 --out calibration/token-batching-speedup.json

Runs the whole speed gate ``--runs`` times on this machine and writes, per run, the speedup's
estimate and interval (``ci`` is candidate time / baseline time; ``pessimistic_end`` is
``1 / ci[1]``, what the claim judges), the block-pair ratios, the design, the load average and
whether the claim held at the spec's bound; then the lowest pessimistic end and its margin over
``--bound`` (the bound to publish). The bound
in parity-speed.toml is set well below the lowest pessimistic end these runs showed (the margin
is stated in its basis), so that a loaded 2-core CI runner keeps passing while switching batching
off (a ratio of 1) still fails.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from paritygate import load_spec, run_gate

HERE = Path(__file__).resolve().parent
CLAIM = "token-batching-speedup"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--bound", type=float, required=True, help="the bound to publish")
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    runs = []
    for run in range(args.runs):
        start = time.time()
        result = run_gate(load_spec(HERE / "parity-speed.toml"))
        (verdict,) = [v for v in result.verdicts if v.claim_id == CLAIM]
        evidence = verdict.evidence
        ci = evidence.get("ratio_ci")
        runs.append(
            {
                "run": run,
                "passed": verdict.passed,
                "speedup": verdict.observed,
                "ci": ci,  # candidate time / baseline time
                "pairs": len(evidence.get("pair_ratios", [])),
                "ratios": evidence.get("pair_ratios"),
                "design": evidence.get("provenance", {}).get("design"),
                "blocks": evidence.get("blocks"),
                "stop": evidence.get("stop_reason"),
                "summary": evidence.get("summary"),
                "seconds": time.time() - start,
                "load": os.getloadavg(),
                "pessimistic_end": 1.0 / ci[1] if ci and isinstance(ci[1], float) else None,
            }
        )
        print(runs[-1]["summary"], flush=True)
    low = min((r["pessimistic_end"] or 0.0) for r in runs)
    payload = {
        "claim": CLAIM,
        "bound": args.bound,
        "runs": runs,
        "lowest_pessimistic_end": low,
        "margin": low / args.bound,
    }
    args.out.write_text(json.dumps(payload, indent=1) + "\n")


if __name__ == "__main__":
    main()
