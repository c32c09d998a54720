"""The port's command-line adapter, speaking paritygate's subprocess protocol v1.

    python port_cli.py CASE.npz --out OUT.json

writes ``{"boxes": {"question": [x1, y1, x2, y2], "editor": [...]}}`` to OUT.json.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
from port_detector import detect_image


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("case")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    with np.load(args.case, allow_pickle=False) as data:
        image = data["image"]
    result = detect_image(image)
    with open(args.out, "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
