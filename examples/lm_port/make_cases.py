"""Write the pinned prompt cases: ``cases/<name>.json`` and ``cases/SHA256SUMS.json``.

    python make_cases.py            # 64 cases: 32 chat, 32 plain

A case holds ``kind`` (``chat`` with ``messages``, or ``plain`` with ``text``), ``continuation``
(the text scored teacher-forced after the prompt) and ``max_new_tokens`` (the greedy length). The
set is fixed text, no randomness: chat questions about standard-library names (one and several
turns, with and without a system message) and plain code prompts chosen for the tokenizer's edge
cases (indentation runs, blank lines, tabs, digits, quotes, contractions, non-ASCII text and the
special-token strings written inside text). Each file is pinned by sha256.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

CASES = Path(__file__).resolve().parent / "cases"
NEW_TOKENS = 16

NAMES = [
    "join", "split", "encode", "decode", "read", "write", "close", "open",
    "copy", "sort", "format", "parse", "update", "get", "run", "wait",
]  # fmt: skip
PLAIN = [
    "def main():\n    parser = argparse.ArgumentParser(",
    "import os\nimport sys\n\n\ndef ",
    "class Queue:\n    def __init__(self, maxsize=0):\n        self.maxsize = ",
    "    for i in range(10):\n        if i % 2 == 0:\n            ",
    "\t\tif x:\n\t\t\treturn None\n",
    "# Copyright 2001-2024 Python Software Foundation\n",
    '"""Return the string obtained by replacing the leftmost\n    non-overlapping ',
    "x = 3.3 + 33 - 333 * 3333 / 33333\n",
    "raise ValueError('I\\'ve been told he\\'s there, \\'RE you sure?')\n",
    "try:\n    pass\nexcept (OSError, ValueError) as exc:\n    ",
    "return {k: v for k, v in self.items() if v is not None}\n",
    "name = 'naïve café — 日本語 🚀'\n",
    "if __name__ == '__main__':\n    main()\n",
    "    @property\n    def name(self):\n        return self._",
    "with open(path, 'rb') as f:\n    data = f.read()\n\n\n\n",
    'assert a == b, f"{a!r} != {b!r}"\n',
    "<|im_start|>user\nExplain join.<|im_end|>\n<|im_start|>assistant\n",
    "text <|im_end|> inside a line, <|endoftext|> too\n",
    "    \n    \n        \n",
    "lambda x, y=1, *args, **kwargs: (x, y, args, kwargs)",
    "async def fetch(url):\n    await asyncio.sleep(0)\n",
    "__all__ = ['a', 'b', 'c']\n",
    "0x1F, 0o17, 0b1010, 1_000_000, 1e-6\n",
    "s = r'\\d+\\s*[\\r\\n]+'\n",
    "yield from self._iter()\n",
    "del self.cache[key]\n",
    "while True:\n    line = f.readline()\n    if not line:\n        break\n",
    "print('hello', end='')\n",
    "return NotImplemented\n",
    "global _default\n_default = None\n",
    "#!/usr/bin/env python3\n",
    "ABC",
]
CONTINUATIONS = [
    "    return os.path.join(path, name)\n",
    "Return a string.<|im_end|>\n",
]


def make_cases() -> dict[str, dict]:
    cases: dict[str, dict] = {}
    for i, name in enumerate(NAMES):
        cases[f"chat-{i:02d}-{name}"] = {
            "kind": "chat",
            "messages": [{"role": "user", "content": f"Explain {name}."}],
            "continuation": CONTINUATIONS[1],
            "max_new_tokens": NEW_TOKENS,
        }
        other = NAMES[(i + 5) % len(NAMES)]
        messages = [
            {"role": "user", "content": f"Explain {name}."},
            {"role": "assistant", "content": f"Return the {name} of the object."},
            {"role": "user", "content": f"Explain {other}."},
        ]
        if i % 2:
            messages.insert(0, {"role": "system", "content": "You document Python."})
        cases[f"chat-{i:02d}-{name}-multi"] = {
            "kind": "chat",
            "messages": messages,
            "continuation": CONTINUATIONS[1],
            "max_new_tokens": NEW_TOKENS,
        }
    for i, text in enumerate(PLAIN):
        cases[f"plain-{i:02d}"] = {
            "kind": "plain",
            "text": text,
            "continuation": CONTINUATIONS[0],
            "max_new_tokens": NEW_TOKENS,
        }
    return cases


def main() -> None:
    CASES.mkdir(exist_ok=True)
    sums = {}
    for name, case in make_cases().items():
        data = (json.dumps(case, indent=2, ensure_ascii=False, sort_keys=True) + "\n").encode()
        (CASES / f"{name}.json").write_bytes(data)
        sums[f"{name}.json"] = hashlib.sha256(data).hexdigest()
    (CASES / "SHA256SUMS.json").write_text(json.dumps(sums, indent=2, sort_keys=True) + "\n")
    print(f"wrote {len(sums)} cases to {CASES}")


if __name__ == "__main__":
    main()
