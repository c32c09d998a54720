"""The incident of the README, planted: the port's preprocessing computes its resize scale with
the align-corners convention, ``(n - 1) / (m - 1)`` instead of ``n / m``, so boxes near the
right and bottom edges drift.

``python plant_bug.py [FOLDER]`` edits FOLDER/port_detector.py (this folder by default): run it on
a copy, then ``paritygate gate parity.toml`` there fails the 2 px claim."""

from __future__ import annotations

import sys
from pathlib import Path

CORRECT_TO_BUGGY = {
    "scale_x = width / MODEL_WIDTH": "scale_x = (width - 1) / (MODEL_WIDTH - 1)",
    "scale_y = height / MODEL_HEIGHT": "scale_y = (height - 1) / (MODEL_HEIGHT - 1)",
}


def plant_bug(project: Path) -> None:
    """Plant the align-corners resize scale into ``project``'s port_detector.py."""
    path = Path(project) / "port_detector.py"
    source = path.read_text()
    missing = [line for line in CORRECT_TO_BUGGY if line not in source]
    if missing:
        raise SystemExit(f"{path}: no line {missing[0]!r} to change (planted already?)")
    for correct, buggy in CORRECT_TO_BUGGY.items():
        source = source.replace(correct, buggy)
    path.write_text(source)


if __name__ == "__main__":
    plant_bug(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
