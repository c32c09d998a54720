"""Write the case files and the [cases] blocks of both specs (offline; deterministic).

    python make_cases.py

* ``cases/heldout-NN.json``: the 600 held-out images of ``data.split()`` (never trained on), one
  question each (2 to 5 candidate digits, the right one at a random slot; rubric none / short /
  medium with probabilities 0.7 / 0.2 / 0.1), 60 items per case. Labels (``action``: the digit,
  ``choice``: the right option's slot) go into ``parity-heldout.toml``.
* ``cases/*.json`` of ``parity.toml``: small workload-shaped cases for the paired claims (mixed
  lengths and option counts, long inputs past two local windows, a repeated rubric, one item
  with one option, deliberately duplicated items).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import data  # noqa: E402

HELDOUT_PER_CASE = 60
HELDOUT_RUBRIC_P = (0.7, 0.2, 0.1, 0.0)


def heldout_items() -> list[data.Item]:
    images, digits = data.digits()
    _, held = data.split()
    rng = np.random.default_rng(2026)
    items = []
    for i in held:
        n = int(rng.integers(2, data.MAX_OPTIONS + 1))
        rubric = int(rng.choice(len(data.RUBRICS), p=HELDOUT_RUBRIC_P))
        items.append(data.make_item(images[i], digits[i], rng, n, rubric))
    return items


def workload_cases() -> dict[str, list[data.Item]]:
    images, digits = data.digits()
    _, held = data.split()
    rng = np.random.default_rng(7)
    pick = [int(i) for i in rng.choice(held, size=24, replace=False)]

    def item(k, n, rubric):
        it = data.make_item(images[pick[k]], digits[pick[k]], rng, n, rubric)
        # the long rubric is cut to 136 words (~180 tokens) to keep the gate's CPU time small
        return data.Item(it.image, it.options, it.rubric, it.digit, 136 if rubric == 3 else -1)

    mixed = [item(k, 1 + k % data.MAX_OPTIONS, (0, 1, 2, 3, 0, 1)[k]) for k in range(6)]
    long = [item(8 + k, 2 + 3 * k, 3) for k in range(2)]
    repeated = [item(11 + k // 2, 2 + k % 2, 2) for k in range(4)]
    single = [item(14, 1, 0), item(15, 1, 0)]
    dup = [item(16, 3, 1), item(17, 4, 0)]
    duplicates = [dup[0], dup[1], dup[0]]
    return {
        "mixed-lengths": mixed,
        "long-inputs": long,
        "repeated-rubric": repeated,
        "one-option": single,
        "duplicated-inputs": duplicates,
    }


def _cases_block(entries: list[str]) -> str:
    return "\n".join(entries)


def _replace_block(spec: Path, block: str) -> None:
    text = spec.read_text()
    start, end = "# --- cases (make_cases.py) ---", "# --- end of cases ---"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"{spec.name}: no '{start}' ... '{end}' block")
    spec.write_text(pattern.sub(lambda _: f"{start}\n\n{block}\n{end}", text))


def main() -> None:
    cases = HERE / "cases"
    cases.mkdir(exist_ok=True)
    entries = []
    for name, items in workload_cases().items():
        path = cases / f"{name}.json"
        data.write_items(path, items)
        entries.append(
            f'[cases.{name}]\npath = "cases/{name}.json"\nsha256 = "{data.sha256_file(path)}"\n'
        )
    _replace_block(HERE / "parity.toml", _cases_block(entries))

    items = heldout_items()
    entries = []
    for k in range(0, len(items), HELDOUT_PER_CASE):
        part = items[k : k + HELDOUT_PER_CASE]
        name = f"heldout-{k // HELDOUT_PER_CASE:02d}"
        path = cases / f"{name}.json"
        data.write_items(path, part)
        actions = ", ".join(str(i.digit) for i in part)
        choices = ", ".join(str(i.answer) for i in part)
        entries.append(
            f'[cases.{name}]\npath = "cases/{name}.json"\nsha256 = "{data.sha256_file(path)}"\n'
            f"labels = {{ action = [{actions}], choice = [{choices}] }}\n"
        )
    _replace_block(HERE / "parity-heldout.toml", _cases_block(entries))


if __name__ == "__main__":
    main()
