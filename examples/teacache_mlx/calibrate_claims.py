"""Calibrate the claims of parity.toml and write bounds and bases into it (offline, ~3 minutes).

    python calibrate_claims.py                 # every claim
    python calibrate_claims.py twin-max-abs    # one claim

Each claim is measured the way the gate measures it (paritygate.calibration.calibrate_claim: paired
mode, the reference runner live in this process, all 16 cases):

* the three no-op claims: the noise is exactly zero, so calibration proposes an exact claim;
* ``twin-max-abs``: the PyTorch twin against MLX, with the built-in output mutations and two
  model-level ones (body block 3's update scaled by 1.01 / zeroed in the twin); margin x4 for
  another x86-64 CPU or BLAS build;
* ``cache-ssim``: the cache's intended approximation is the "noise"; the bugs are planted cache
  bugs (residual dropped on skipped steps, residual never refreshed) and a one-pixel shift;
  margin x2 for cases beyond these 16. The skip band is the range of skipped steps measured over
  the 16 spec cases and the 16 fit cases of ``fit_rescale.py``.

Evidence goes to ``calibration/<claim>.json`` (raw distributions), ``calibration/<claim>.png``
(noise and bug histograms with the bound) and ``calibration/<claim>.txt`` (the summary).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from paritygate import count_calls, load_spec, update_claim
from paritygate.calibration import (
    DEFAULT_MUTATIONS,
    calibrate_claim,
    calibration_plot,
    shift,
    write_bound,
)

HERE = Path(__file__).resolve().parent
SPEC = HERE / "parity.toml"
OUT = HERE / "calibration"

PLANS = {
    "proxy-noop": {},
    "eager-noop": {},
    "compiled-noop": {},
    "twin-max-abs": {
        "model_mutations": {
            "twin-block3-scaled-1.01": "mutations:torch_block_scaled_case",
            "twin-block3-zeroed": "mutations:torch_block_zeroed_case",
        },
        "mutations": DEFAULT_MUTATIONS,
        "margin_for": {"another x86-64 CPU or BLAS build": 4.0},
    },
    "cache-ssim": {
        "model_mutations": {
            "residual-dropped": "mutations:residual_dropped_case",
            "stale-residual": "mutations:stale_residual_case",
        },
        "candidate": "proxy-cached",  # eager-cached is byte-equal to it (tests check that)
        "mutations": (shift(axis=-1, by=1),),
        "margin_for": {"cases beyond these 16": 2.0},
    },
}


def skip_band() -> dict[str, object]:
    """Skipped steps per case at the default threshold: the 16 spec cases and the fit sweep."""
    import gate_runners
    import teacache

    spec = load_spec(SPEC)
    band = spec.claims["cache-ssim"].activity
    skips = {}
    for name, case in spec.cases.items():
        # Counted the way the gate counts them: calls of the body, vanilla less the cache's.
        with count_calls([band.calls]) as vanilla:
            gate_runners.vanilla(case)
        with count_calls([band.calls]) as cached:
            gate_runners.proxy_cached(case)
        skips[name] = vanilla.counts[band.calls] - cached.counts[band.calls]
    row = next(
        r for r in teacache.RESCALE["sweep"] if r["rel_l1_thresh"] == teacache.DEFAULT_THRESHOLD
    )
    low = min(min(skips.values()), row["skips_min"])
    high = max(max(skips.values()), row["skips_max"])
    return {
        "per_case": skips,
        "fit_cases": [row["skips_min"], row["skips_max"]],
        "band": [low, high],
    }


def main(claims: list[str]) -> None:
    sys.path.insert(0, str(HERE))
    OUT.mkdir(exist_ok=True)
    for claim_id in claims or list(PLANS):
        result = calibrate_claim(SPEC, claim_id, **PLANS[claim_id])
        print(result.summary(), "\n")
        evidence = OUT / f"{claim_id}.json"
        data = result.to_dict()
        extra = {}
        if claim_id == "cache-ssim":
            extra["skips"] = skip_band()
            data["skips"] = extra["skips"]
        evidence.write_text(json.dumps(data, indent=2) + "\n")
        if result.proposal == "tolerance":
            calibration_plot(result, OUT / f"{claim_id}.png")
        fields = write_bound(SPEC, claim_id, result)
        basis = dict(fields["basis"])
        basis["evidence"] = f"calibration/{claim_id}.json"
        basis["cases"] = list(result.cases)
        update = {"basis": basis}
        if extra:
            low, high = extra["skips"]["band"]
            update["activity"] = {
                "calls": "model:DiT.body",
                "measure": "skipped",
                "min": low,
                "max": high,
            }
        update_claim(SPEC, claim_id, **update)
        (OUT / f"{claim_id}.txt").write_text(result.summary() + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
