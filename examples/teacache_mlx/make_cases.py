"""Write the canonical cases: ``cases/<name>.npz`` holding the initial noise and the digit.

    python make_cases.py            # 16 cases, seeds 0..15, digit = seed % 10

Each file holds ``noise`` (16x16 float32, numpy's default_rng(seed).standard_normal) and
``label`` (int64). The noise bytes are the canonical input: every runtime starts from them, and
``parity.toml`` pins each file by sha256. The script prints the spec's ``[cases.*]`` tables.
"""

from __future__ import annotations

import argparse
import hashlib
import io
from pathlib import Path

import numpy as np
from common import Case, initial_noise, make_cases

CASES = Path(__file__).resolve().parent / "cases"


def case_bytes(case: Case) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, noise=initial_noise(case), label=np.int64(case.label))
    return buffer.getvalue()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=16)
    args = parser.parse_args()
    CASES.mkdir(exist_ok=True)
    for case in make_cases(args.count):
        data = case_bytes(case)
        (CASES / f"{case.name}.npz").write_bytes(data)
        print(f'[cases.{case.name}]\npath = "cases/{case.name}.npz"')
        print(f'sha256 = "{hashlib.sha256(data).hexdigest()}"\nlabel = {case.label}\n')


if __name__ == "__main__":
    main()
