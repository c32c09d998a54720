"""Histograms of the noise and of each mutation's signal, with the bound drawn in."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from .result import CalibrationResult, _g


def calibration_plot(result: CalibrationResult, path: str | Path) -> Path:
    """Histograms of the noise and of each mutation's signal on the claim's metric, with the
    bound."""
    # A bare Figure (no pyplot): no global backend or figure state is touched.
    from matplotlib.figure import Figure

    dist = result.claim_metric
    log = dist.direction == "max"

    def transform(values: list[float]) -> list[float]:
        out = []
        for v in values:
            if not math.isfinite(v):
                continue
            x = v if log else 1.0 - v
            out.append(max(x, 1e-300))
        return out

    fig = Figure(figsize=(7, 3.6))
    ax = fig.subplots()
    series = [("noise", transform(dist.noise))] + [(n, transform(v)) for n, v in dist.bugs.items()]
    finite = [x for _, values in series for x in values if x > 1e-300]
    low, high = (min(finite), max(finite)) if finite else (1e-12, 1.0)
    bins = np.geomspace(low / 2, high * 2, 40)
    for name, values in series:
        clipped = [max(v, low / 2) for v in values]
        ax.hist(
            clipped,
            bins=bins,
            alpha=0.55 if name == "noise" else 0.4,
            label=name,
            color="black" if name == "noise" else None,
        )
    if result.proposed_bound is not None and result.proposal == "tolerance":
        x = result.proposed_bound if log else 1.0 - result.proposed_bound
        ax.axvline(
            max(x, low / 2), color="red", linestyle="--", label=f"bound {_g(result.proposed_bound)}"
        )
    ax.set_xscale("log")
    ax.set_xlabel(dist.metric if log else f"1 - {dist.metric}")
    ax.set_ylabel("cases")
    title = f"{result.claim_id or result.label or 'calibration'}: noise vs injected bugs"
    if result.refused:
        title += " (refused: no gap)"
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    return out
