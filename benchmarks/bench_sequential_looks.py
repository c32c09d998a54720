"""Where the sequential rule's false calls come from: simulated block pairs through its looks.

Block-pair log ratios are drawn i.i.d. from a Student t (3 degrees of freedom, heavy-tailed like
a busy machine's pairs) scaled to ``--spread`` and shifted by ``--effect``; each simulated run
takes the harness's looks (pair counts and levels from ``paritygate.bench``'s alpha spending)
against ``--threshold`` and stops at its first decisive look, as ``run_bench`` does with a
budget. Printed: the share of runs called each way, and at which look the calls came.

``--first-look N`` skips the looks before N pairs: a design the harness does not use, simulated
to show what a later first look would change. No machine is timed; the figures depend only on
the rule and the assumed distribution.

    python benchmarks/bench_sequential_looks.py --spread 0.17 --threshold 0.0135
    python benchmarks/bench_sequential_looks.py --spread 0.17 --threshold 0.0135 --first-look 11
"""

from __future__ import annotations

import argparse
import math
from collections import Counter

import numpy as np

from paritygate.bench import decide
from paritygate.bench._stats import look_alpha, look_schedule


def simulate(
    spread: float,
    threshold: float,
    effect: float = 0.0,
    runs: int = 2000,
    max_pairs: int = 201,
    first_look: int = 0,
    alpha: float = 0.05,
    seed: int = 1,
) -> tuple[Counter, Counter, list[int]]:
    """(verdict counts, counts of decisive calls by look pair count, the looks' pair counts)."""
    rng = np.random.default_rng(seed)
    looks = look_schedule(alpha, max_pairs)
    verdicts: Counter = Counter()
    decided_at: Counter = Counter()
    for _ in range(runs):
        logs = math.log1p(effect) + spread * rng.standard_t(3, size=looks[-1])
        verdict = "inconclusive"
        for index, pairs in enumerate(looks):
            if pairs < first_look:
                continue
            verdict = decide(list(logs[:pairs]), threshold, look_alpha(alpha, index)).verdict.value
            if verdict != "inconclusive":
                decided_at[(verdict, pairs)] += 1
                break
        verdicts[verdict] += 1
    return verdicts, decided_at, looks


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spread", type=float, default=0.17, help="scale of the log ratios")
    parser.add_argument("--threshold", type=float, default=0.0135)
    parser.add_argument("--effect", type=float, default=0.0, help="true change, 0.03 for 3%%")
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--max-pairs", type=int, default=201, help="the budget, in block pairs")
    parser.add_argument("--first-look", type=int, default=0)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    verdicts, decided_at, looks = simulate(
        args.spread,
        args.threshold,
        args.effect,
        args.runs,
        args.max_pairs,
        args.first_look,
        seed=args.seed,
    )
    print(
        f"spread {args.spread:g}, threshold {args.threshold:.2%}, effect {args.effect:+.1%}, "
        f"{args.runs} runs of up to {looks[-1]} pairs; looks at {looks}"
        + (f", those below {args.first_look} pairs skipped" if args.first_look else "")
    )
    for verdict in ("slower", "faster", "equivalent", "inconclusive"):
        print(f"  {verdict:<12} {verdicts[verdict] / args.runs:7.2%}")
    calls = dict(sorted(decided_at.items(), key=lambda item: item[0][1]))
    print(f"  decisive calls by (verdict, pairs): {calls or 'none'}")
    first = next(p for p in looks if p >= args.first_look)
    level = look_alpha(0.05, looks.index(first))
    line = f"  first look: {first} pairs at level {level:.4g}"
    if 2 * 2.0**-first <= level < 4 * 2.0**-first:
        # the interval is [smallest, largest] pair: a call needs every pair beyond the threshold
        line += (
            "; a call there needs every pair on one side of the threshold, "
            f"at most {2 * 2.0**-first:.2%} of A/A runs (either side)"
        )
    print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
