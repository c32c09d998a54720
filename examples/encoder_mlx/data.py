"""Framework-free data of the encoder example: items, text, tokenizer and prepared batches.

The task is scikit-learn's bundled handwritten digits (1797 8x8 images, no download; pinned in
``weights/digits.csv.gz``), serialized as text. Every item is one image with one question: the
**action** is the digit (10 classes, read at [CLS]), the **choice** question offers 1 to
``MAX_OPTIONS`` candidate digits behind ``[OPT]`` markers, exactly one of them right (scored at the
marker positions). Every item may carry a *rubric*: an instruction text in front of the grid that
does not change the answer (it makes sequences long enough for the local attention window to matter,
and it is the shared prefix the preparation cache reuses).

Text of one item (word-level tokens)::

    [CLS] <rubric words> grid p00 p13 ... p88 question which digit ? [OPT] d3 [OPT] d7 [SEP]

The grid is 32 words: each word ``p<a><b>`` is a horizontal pair of pixels at ink level
``v // 2`` (0..8), row by row.

Preparation encodes the parts independently and concatenates their ids (never re-tokenizing the
concatenated prompt); ``prepare_items`` is the uncached path, ``PrefixCache`` the cached one, and
both must give byte-identical ids (the gate checks it).
"""

from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
TOKENIZER_PATH = HERE / "weights" / "tokenizer.json"
DIGITS_PATH = HERE / "weights" / "digits.csv.gz"
DIGITS_SHA256 = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22"

MAX_OPTIONS = 5
N_ACTIONS = 10
N_FEATURES = 4
MAX_LEN = 1024
PAD_ID = 0
CHOICE_FILL = -1.0e4  # score of an option slot an item does not use (finite, never the argmax)
SPECIALS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[OPT]"]

# Rubrics: instruction texts that do not change the answer. Index 0 is no rubric.
_RUBRIC_WORDS = (
    "read the grid row by row from the top left ; "
    "each word is a pair of cells with ink levels 0 to 8 ; "
    "the image shows one handwritten digit ; answer with the candidate that names it ; "
    "if unsure still pick exactly one candidate ; ignore this rubric when you score the options ; "
    "a good answer depends only on the grid and the candidates"
).split()
RUBRICS: tuple[str, ...] = (
    "",
    " ".join(_RUBRIC_WORDS[:12]),
    " ".join(_RUBRIC_WORDS[:40]),
    " ".join(_RUBRIC_WORDS * 3),
)
QUESTION = "question which digit ?"
QUESTION_END = "[SEP]"


@dataclass(frozen=True)
class Item:
    """One question about one image."""

    image: tuple[int, ...]  # 64 ink levels 0..16
    options: tuple[int, ...]  # candidate digits, 1..MAX_OPTIONS
    rubric: int = 0  # index into RUBRICS
    digit: int = -1  # the ground truth (-1: unknown)
    words: int = -1  # keep only the rubric's first ``words`` words (-1: all; length sweeps)

    @property
    def answer(self) -> int:
        """Index of the right option (-1 when the digit is not among them or unknown)."""
        return self.options.index(self.digit) if self.digit in self.options else -1

    def to_json(self) -> dict[str, Any]:
        out = {
            "image": list(self.image),
            "options": list(self.options),
            "rubric": self.rubric,
            "digit": self.digit,
        }
        if self.words >= 0:
            out["words"] = self.words
        return out

    @property
    def rubric_text(self) -> str:
        words = RUBRICS[self.rubric].split()
        return " ".join(words if self.words < 0 else words[: self.words])

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Item:
        image = tuple(int(v) for v in data["image"])
        options = tuple(int(v) for v in data["options"])
        if len(image) != 64 or not all(0 <= v <= 16 for v in image):
            raise ValueError("an item's image must hold 64 ink levels in 0..16")
        if not 1 <= len(options) <= MAX_OPTIONS or not all(0 <= v <= 9 for v in options):
            raise ValueError(f"an item needs 1..{MAX_OPTIONS} candidate digits in 0..9")
        rubric = int(data.get("rubric", 0))
        if not 0 <= rubric < len(RUBRICS):
            raise ValueError(f"rubric index {rubric} outside 0..{len(RUBRICS) - 1}")
        return cls(image, options, rubric, int(data.get("digit", -1)), int(data.get("words", -1)))


# ------------------------------------------------------------------------------------------
# The dataset and its split (fixed; the held-out images never reach training).


def digits() -> tuple[np.ndarray, np.ndarray]:
    """(images (1797, 64) int, digits (1797,) int) from the pinned ``weights/digits.csv.gz``.

    The file is scikit-learn's bundled copy of the UCI optical-digits test set (what
    ``sklearn.datasets.load_digits`` reads; the assets test checks both agree), pinned by sha256 so
    that the example runs where scikit-learn is not installed (the GPU machine).
    """
    if sha256_file(DIGITS_PATH) != DIGITS_SHA256:
        raise ValueError(f"{DIGITS_PATH} does not match its pinned sha256 {DIGITS_SHA256}")
    with gzip.open(DIGITS_PATH, "rt") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64)
    return table[:, :-1], table[:, -1]


def split(n: int = 1797, n_heldout: int = 600, seed: int = 13) -> tuple[np.ndarray, np.ndarray]:
    """(train indices, held-out indices): a fixed permutation, disjoint by image."""
    order = np.random.default_rng(seed).permutation(n)
    return np.sort(order[n_heldout:]), np.sort(order[:n_heldout])


def make_item(
    image: Sequence[int], digit: int, rng: np.random.Generator, n_options: int, rubric: int
) -> Item:
    """A question with ``n_options`` distinct candidates, the right one at a random slot."""
    others = [d for d in range(10) if d != digit]
    options = [digit, *rng.choice(others, size=n_options - 1, replace=False).tolist()]
    rng.shuffle(options)
    return Item(tuple(int(v) for v in image), tuple(int(o) for o in options), rubric, int(digit))


# ------------------------------------------------------------------------------------------
# Tokenizer (tokenizers' WordLevel over the closed vocabulary of the item text).


def corpus() -> list[str]:
    """Every word the item text can contain, once per line (the tokenizer's training text)."""
    lines = [" ".join(RUBRICS), "grid", QUESTION]
    lines += [" ".join(f"p{a}{b}" for a in range(9) for b in range(9))]
    lines += [" ".join(f"d{i}" for i in range(10))]
    return lines


def build_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordLevel(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    trainer = trainers.WordLevelTrainer(special_tokens=SPECIALS, min_frequency=1)
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    return tokenizer


def load_tokenizer(path: Path = TOKENIZER_PATH):
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(path))


def tokenizer_identity(path: Path = TOKENIZER_PATH) -> str:
    """The tokenizer's identity: sha256 of its JSON file."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# ------------------------------------------------------------------------------------------
# Preparation: text parts -> ids, encoded independently and concatenated.


@dataclass
class Prepared:
    """One item prepared for the model (ids unpadded)."""

    ids: np.ndarray  # (L,) int32
    markers: np.ndarray  # (n_options,) int32 positions of [OPT]
    features: np.ndarray  # (N_FEATURES,) float32


def _encode(tokenizer, text: str) -> list[int]:
    if not text:
        return []
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    return list(ids)


def pixel_pairs(image: Sequence[int]) -> list[str]:
    """The grid's 32 words: horizontal pixel pairs at ink level v // 2."""
    return [f"p{image[i] // 2}{image[i + 1] // 2}" for i in range(0, 64, 2)]


def _parts(item: Item) -> tuple[str, str, str]:
    prefix = " ".join(w for w in ("[CLS]", item.rubric_text, "grid") if w)
    image = " ".join(pixel_pairs(item.image))
    options = " ".join(f"[OPT] d{o}" for o in item.options) + f" {QUESTION_END}"
    return prefix, image, f"{QUESTION} {options}"


def _assemble(tokenizer, prefix: list[int], image: list[int], question: list[int], item: Item):
    ids = np.asarray(prefix + image + question, dtype=np.int32)
    if len(ids) > MAX_LEN:
        raise ValueError(f"prepared item has {len(ids)} tokens, more than MAX_LEN {MAX_LEN}")
    opt = tokenizer.token_to_id("[OPT]")
    markers = np.flatnonzero(ids == opt).astype(np.int32)
    if len(markers) != len(item.options):
        raise ValueError("marker count differs from the option count")
    pixels = np.asarray(item.image, dtype=np.float32)
    features = np.asarray(
        [
            pixels.mean() / 16.0,
            (pixels > 0).mean(),
            len(item.options) / MAX_OPTIONS,
            len(ids) / 256,
        ],
        dtype=np.float32,
    )
    return Prepared(ids, markers, features)


def prepare_items(tokenizer, items: Sequence[Item]) -> list[Prepared]:
    """The uncached path: every part of every item encoded on its own."""
    out = []
    for item in items:
        prefix, image, question = _parts(item)
        out.append(
            _assemble(
                tokenizer,
                _encode(tokenizer, prefix),
                _encode(tokenizer, image),
                _encode(tokenizer, question),
                item,
            )
        )
    return out


@dataclass
class PrefixCache:
    """Prepared-part reuse keyed by tokenizer identity and configuration.

    Prefixes (``[CLS]`` + rubric + ``grid``) and question tails are immutable per rubric / option
    set; an image shared by several questions is serialized and encoded once per call. A cache
    built for one tokenizer or configuration refuses another (``key``), so a changed tokenizer
    can never reuse old ids.
    """

    tokenizer: Any
    identity: str
    config: tuple = (MAX_LEN, MAX_OPTIONS, QUESTION, tuple(RUBRICS))
    parts: dict[tuple, list[int]] = field(default_factory=dict)
    hits: int = 0
    misses: int = 0

    @property
    def key(self) -> tuple:
        return (self.identity, self.config)

    def reuse(self, key: tuple) -> list[int]:
        """A hit: the ids prepared before for ``key`` (every reuse goes through here)."""
        self.hits += 1
        return self.parts[key]

    def reuse_image(self) -> None:
        """A hit: an image already encoded in this call is shared, not encoded again."""
        self.hits += 1

    def _get(self, kind: str, value: Any, text: str) -> list[int]:
        key = (self.key, kind, value)
        if key in self.parts:
            return self.reuse(key)
        self.misses += 1
        ids = _encode(self.tokenizer, text)
        self.parts[key] = ids
        return ids

    def prepare(self, items: Sequence[Item]) -> list[Prepared]:
        images: dict[tuple[int, ...], list[int]] = {}  # per call: shared state encoded once
        out = []
        for item in items:
            prefix, image, question = _parts(item)
            if item.image not in images:
                images[item.image] = _encode(self.tokenizer, image)
            else:
                self.reuse_image()
            out.append(
                _assemble(
                    self.tokenizer,
                    self._get("prefix", (item.rubric, item.words), prefix),
                    images[item.image],
                    self._get("question", item.options, question),
                    item,
                )
            )
        return out


# ------------------------------------------------------------------------------------------
# Batches: right padding, marker slots padded with position 0 (masked).


@dataclass
class Batch:
    ids: np.ndarray  # (B, L) int32, PAD_ID past each item's length
    lengths: np.ndarray  # (B,) int32
    markers: np.ndarray  # (B, MAX_OPTIONS) int32
    marker_mask: np.ndarray  # (B, MAX_OPTIONS) bool
    features: np.ndarray  # (B, N_FEATURES) float32

    @property
    def useful_tokens(self) -> int:
        return int(self.lengths.sum())

    @property
    def padded_tokens(self) -> int:
        return int(self.ids.size)


def collate(prepared: Sequence[Prepared], length: int | None = None) -> Batch:
    """Right-pad to the longest item (or to ``length``, a shape bucket)."""
    longest = max(len(p.ids) for p in prepared)
    length = longest if length is None else length
    if length < longest:
        raise ValueError(f"bucket length {length} is shorter than an item ({longest} tokens)")
    b = len(prepared)
    ids = np.full((b, length), PAD_ID, dtype=np.int32)
    markers = np.zeros((b, MAX_OPTIONS), dtype=np.int32)
    mask = np.zeros((b, MAX_OPTIONS), dtype=bool)
    for i, p in enumerate(prepared):
        ids[i, : len(p.ids)] = p.ids
        markers[i, : len(p.markers)] = p.markers
        mask[i, : len(p.markers)] = True
    lengths = np.asarray([len(p.ids) for p in prepared], dtype=np.int32)
    features = np.stack([p.features for p in prepared]).astype(np.float32)
    return Batch(ids, lengths, markers, mask, features)


def chunks_in_order(n: int, max_batch: int) -> list[list[int]]:
    """The baseline schedule: insertion order, ``max_batch`` items per chunk."""
    return [list(range(s, min(s + max_batch, n))) for s in range(0, n, max_batch)]


def plan_by_tokens(lengths: Sequence[int], token_budget: int, max_batch: int) -> list[list[int]]:
    """Group items of similar prepared length: sort by length, then fill each batch while
    ``batch size x longest length`` stays within ``token_budget`` (and ``max_batch``).

    Returns lists of original indices; the caller restores the original order.
    """
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = max([lengths[j] for j in current] + [lengths[i]])
        if current and (
            len(current) + 1 > max_batch or (len(current) + 1) * longest > token_budget
        ):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


def padding_waste(batches: Sequence[Sequence[int]], lengths: Sequence[int]) -> float:
    """Fraction of computed (padded) tokens that are padding under a schedule."""
    useful = sum(lengths[i] for b in batches for i in b)
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    return 1.0 - useful / padded if padded else 0.0


# ------------------------------------------------------------------------------------------
# Case files: JSON lists of items.


def write_items(path: Path, items: Sequence[Item]) -> None:
    payload = {"format": "encoder-items", "version": 1, "items": [i.to_json() for i in items]}
    Path(path).write_text(json.dumps(payload, separators=(",", ":")) + "\n")


def read_items(data: Any) -> list[Item]:
    """Items of a case (a path, or the loaded JSON of a case file)."""
    if isinstance(data, (str, Path)):
        data = json.loads(Path(data).read_text())
    if not isinstance(data, dict) or data.get("format") != "encoder-items":
        raise ValueError("not an encoder-items case file")
    if data.get("version") != 1:
        raise ValueError(f"encoder-items version {data.get('version')!r}; this code reads 1")
    return [Item.from_json(x) for x in data["items"]]


def sha256_file(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()
