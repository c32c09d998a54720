"""Sequence outputs of language models, compared: token ids, next-token distributions, greedy runs.

- :func:`compare_token_ids`: two token id sequences exactly (prompt ids after a chat template,
  generated ids), with the first differing position, both sides' decoded pieces and context.
- :class:`TeacherForcedAccumulator` / :func:`compare_teacher_forced`: teacher-forced next-token
  distributions from two ``[positions, vocab]`` logit arrays: max-abs over logits,
  ``KL(ref || cand)`` per position (mean, p99, max; through log-softmax in float64), top-1
  agreement and top-k overlap. The accumulator takes one position or a chunk at a time and keeps
  per position only scalars and the two top-k id lists, so memory does not grow with
  vocab x length.
- :func:`greedy_divergence`: the first position where two greedy runs differ, the reference's
  top-1/top-2 logit margin there, and the verdict ``near-tie`` (margin within a noise bound: the
  flip is what numerical noise does) or ``diverged``; with the candidate's logits, a containment
  check (each side's token within the other side's top-k at the divergence).
- :func:`delta_perplexity`: perplexity of a fixed continuation under two sets of logits.

numpy, and numba where installed for the top-k of long logit chunks (imported on first use;
numpy gives the same ids without it). Each result is truthy when it passes, lists every violated
bound as :class:`~paritygate.results.Failure` and serializes with ``to_dict``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ._format import format_number as _fmt
from .errors import InputError
from .results import Failure
from .structured import _bound, _Verdict, _where_label, compare_sequences

__all__ = [
    "TokenIdsResult",
    "TeacherForcedResult",
    "GreedyDivergenceResult",
    "PerplexityResult",
    "TeacherForcedAccumulator",
    "compare_token_ids",
    "compare_teacher_forced",
    "greedy_divergence",
    "delta_perplexity",
    "log_softmax",
    "vocabulary",
]

Decoder = Callable[[Sequence[int]], str] | Sequence[str] | None


def log_softmax(logits: Any) -> np.ndarray:
    """log-softmax over the last axis in float64, stable (max subtracted first)."""
    x = np.asarray(logits, dtype=np.float64)
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def _byte_decoder() -> dict[str, int]:
    """The byte-level BPE alphabet (GPT-2's bytes_to_unicode), inverted: character -> byte."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars)}


def vocabulary(path: Any) -> list[str]:
    """The pieces of a Hugging Face ``tokenizer.json`` (BPE, WordPiece or Unigram vocabulary plus
    added tokens), indexed by token id, as text: byte-level pieces (``Ġthe``) are decoded to the
    bytes they stand for (`` the``), invalid UTF-8 shown with replacement characters. No
    tokenizer library is imported: a decoder for :func:`compare_token_ids` from a file."""
    import json
    from pathlib import Path

    where = str(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        model = data["model"]
        vocab = model["vocab"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise InputError(
            f"cannot read a tokenizer vocabulary: {type(exc).__name__}: {exc}", where=where
        ) from None
    pairs: dict[int, str] = {}
    if isinstance(vocab, dict):
        pairs = {int(i): str(t) for t, i in vocab.items()}
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...]
        pairs = {i: str(entry[0]) for i, entry in enumerate(vocab)}
    else:
        raise InputError("tokenizer.json model.vocab is neither a map nor a list", where=where)
    byte_level = "ByteLevel" in json.dumps(data.get("decoder")) or "ByteLevel" in json.dumps(
        data.get("pre_tokenizer")
    )
    if byte_level:
        table = _byte_decoder()
        for i, t in pairs.items():
            if all(ch in table for ch in t):
                pairs[i] = bytes(table[ch] for ch in t).decode("utf-8", errors="replace")
    for added in data.get("added_tokens") or []:
        if isinstance(added, dict) and "id" in added and "content" in added:
            pairs[int(added["id"])] = str(added["content"])
    size = max(pairs) + 1 if pairs else 0
    return [pairs.get(i, f"<{i}>") for i in range(size)]


def _piece(decode: Decoder, token: int) -> str | None:
    if decode is None:
        return None
    if callable(decode):
        return decode([int(token)])
    return decode[int(token)] if 0 <= int(token) < len(decode) else None


# ---------------------------------------------------------------------------------------------
# token ids


@dataclass(kw_only=True)
class TokenIdsResult(_Verdict):
    """Two token id sequences compared exactly, with decoded pieces at the divergence."""

    kind: str = "token-ids"
    path: str = ""
    passed: bool
    length_actual: int
    length_expected: int
    first_divergence: int | None
    actual_token: int | None
    expected_token: int | None
    actual_piece: str | None  # the decoded token at the divergence
    expected_piece: str | None
    context_start: int | None
    actual_context: list[int] | None
    expected_context: list[int] | None
    actual_context_text: str | None  # the context decoded, to read
    expected_context_text: str | None
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        if self.first_divergence is None:
            return f"{self.length_actual} tokens, identical"
        return (
            f"first divergence at {self.first_divergence}: actual {self.actual_token} "
            f"{self.actual_piece!r} vs expected {self.expected_token} {self.expected_piece!r}"
        )


def _decode_text(decode: Decoder, ids: list[int] | None) -> str | None:
    if decode is None or ids is None:
        return None
    if callable(decode):
        return decode(ids)
    return "".join(_piece(decode, t) or "" for t in ids)


def compare_token_ids(
    actual: Any, expected: Any, *, decode: Decoder = None, context: int = 4, path: str = ""
) -> TokenIdsResult:
    """Compare token ids exactly; ``decode`` (ids -> text, or a vocabulary list) names pieces."""
    for side, value in (("actual", actual), ("expected", expected)):
        array = np.asarray(value)
        if isinstance(value, str) or (array.size and array.dtype.kind not in "iu"):
            raise InputError(f"{side} token ids must be integers", where=_where_label(path))
    base = compare_sequences(actual, expected, context=context, path=path)
    a, e = np.asarray(actual).reshape(-1), np.asarray(expected).reshape(-1)
    first = base.first_divergence
    a_tok = int(a[first]) if first is not None and first < len(a) else None
    e_tok = int(e[first]) if first is not None and first < len(e) else None
    a_piece = _piece(decode, a_tok) if a_tok is not None else None
    e_piece = _piece(decode, e_tok) if e_tok is not None else None
    failures = []
    for f in base.failures:
        if f.metric == "sequence_mismatch" and decode is not None:
            piece = f"actual {a_tok} {a_piece!r} vs expected {e_tok} {e_piece!r}; "
            f = replace(f, detail=piece + f.detail)
        failures.append(f)
    return TokenIdsResult(
        path=path,
        passed=base.passed,
        length_actual=base.length_actual,
        length_expected=base.length_expected,
        first_divergence=first,
        actual_token=a_tok,
        expected_token=e_tok,
        actual_piece=a_piece,
        expected_piece=e_piece,
        context_start=base.context_start,
        actual_context=base.actual_context,
        expected_context=base.expected_context,
        actual_context_text=_decode_text(decode, base.actual_context),
        expected_context_text=_decode_text(decode, base.expected_context),
        failures=failures,
    )


# ---------------------------------------------------------------------------------------------
# teacher-forced distributions


@dataclass(kw_only=True)
class TeacherForcedResult(_Verdict):
    """Next-token distributions at every position of a teacher-forced sequence."""

    kind: str = "teacher-forced"
    path: str = ""
    passed: bool
    n_positions: int
    vocab: int
    top_k: int
    bounds: dict[str, float | None]
    max_abs: float  # over every logit of every position
    max_abs_position: int | None
    kl_mean: float  # KL(ref || cand) per position, statistics over positions
    kl_p99: float
    kl_max: float
    kl_max_position: int | None
    top1_agreement: float  # fraction of positions with the same argmax
    top1_disagreeing_positions: list[int]  # the first few
    topk_overlap: float  # mean |topk(ref) & topk(cand)| / k over positions
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"{self.n_positions} positions, max-abs {_fmt(self.max_abs)}, KL mean "
            f"{_fmt(self.kl_mean)} p99 {_fmt(self.kl_p99)} max {_fmt(self.kl_max)}, top-1 "
            f"{_fmt(self.top1_agreement)}, top-{self.top_k} overlap {_fmt(self.topk_overlap)}"
        )


def _top_k(x: np.ndarray, k: int) -> np.ndarray:
    """The ids of each row's k largest values, largest first ([rows, k] int64; among equal
    values the lower id first, at the k-th place too), on the input's own dtype."""
    vocab = x.shape[1]
    kth = np.take_along_axis(x, np.argpartition(x, vocab - k, axis=1)[:, vocab - k :], axis=1)
    kth = kth.min(axis=1, keepdims=True)  # each row's k-th largest value
    # every id above the k-th value, then the lowest ids equal to it until k are taken
    above = x > kth
    equal = x == kth
    room = k - above.sum(axis=1, keepdims=True)
    chosen = above | (equal & (np.cumsum(equal, axis=1) <= room))
    part = np.nonzero(chosen)[1].reshape(x.shape[0], k)  # ascending ids per row
    order = np.argsort(-np.take_along_axis(x, part, axis=1), axis=1, kind="stable")
    return np.take_along_axis(part, order, axis=1).astype(np.int64)


# Rows x vocab from which the compiled top-k (numba, compiled once and cached on disk) takes over
# from :func:`_top_k`; below it, or without numba, numpy computes the same ids
# (tests/unit/test_sequence.py checks that both paths agree exactly, ties included).
_COMPILED_MIN_ELEMENTS = 1 << 15
_top_k_kernel: Any = None


def _build_top_k() -> Any:
    from numba import njit

    @njit(cache=True, nogil=True)
    def top_k(x, k, top):  # pragma: no cover - compiled
        """Each row's k largest values' ids, largest first, in one pass: a value enters the k
        sorted slots only above the k-th so far, so among equal values the lower id stays."""
        rows, vocab = x.shape
        val = np.empty(k, dtype=np.float64)
        for i in range(rows):
            n = 0
            kth = -np.inf
            for j in range(vocab):
                v = np.float64(x[i, j])
                if n < k or v > kth:
                    p = n if n < k else k - 1
                    while p > 0 and v > val[p - 1]:
                        val[p] = val[p - 1]
                        top[i, p] = top[i, p - 1]
                        p -= 1
                    val[p] = v
                    top[i, p] = j
                    if n < k:
                        n += 1
                    if n == k:
                        kth = val[k - 1]

    return top_k


def _top_k_fast(x: np.ndarray, k: int) -> np.ndarray:
    """:func:`_top_k` of finite float32/float64 rows, compiled where numba is installed and the
    input large enough to repay loading it."""
    global _top_k_kernel
    if x.size < _COMPILED_MIN_ELEMENTS or x.dtype.name not in ("float32", "float64"):
        return _top_k(x, k)
    if _top_k_kernel is None:
        import importlib.util

        if importlib.util.find_spec("numba") is None:
            return _top_k(x, k)
        _top_k_kernel = _build_top_k()
    top = np.empty((x.shape[0], k), dtype=np.int64)
    _top_k_kernel(np.ascontiguousarray(x), k, top)
    return top


class TeacherForcedAccumulator:
    """Streams ``[positions, vocab]`` logits of reference and candidate, chunk by chunk.

    Per position it keeps the max-abs logit difference, KL(ref || cand), both log-sum-exps and
    both top-k id lists; nothing of size vocab outlives :meth:`add`.
    """

    def __init__(self, *, top_k: int = 5, path: str = ""):
        if not (isinstance(top_k, int) and top_k >= 1):
            raise InputError(f"top_k must be a whole number >= 1, got {top_k!r}", where=path)
        self.top_k, self.path = top_k, path
        self.vocab: int | None = None
        self._n = 0  # positions added
        # per chunk, arrays over its positions: kl, max_abs, lse_ref, lse_cand, top_ref, top_cand
        self._parts: list[tuple[np.ndarray, ...]] = []

    def add(self, ref: Any, cand: Any) -> None:
        r, c = np.atleast_2d(np.asarray(ref)), np.atleast_2d(np.asarray(cand))
        where = _where_label(self.path)
        at = self._n
        if r.ndim != 2 or r.shape != c.shape:
            raise InputError(
                f"logits must be [positions, vocab] of one shape, got reference "
                f"{tuple(r.shape)} and candidate {tuple(c.shape)} at position {at}",
                where=where,
            )
        if self.vocab is None:
            self.vocab = r.shape[1]
            if self.top_k > self.vocab:
                raise InputError(f"top_k {self.top_k} exceeds vocab {self.vocab}", where=where)
        elif r.shape[1] != self.vocab:
            raise InputError(
                f"vocab changed from {self.vocab} to {r.shape[1]} at position {at}", where=where
            )
        for side, x in (("reference", r), ("candidate", c)):
            if x.dtype.kind not in "fiu":
                raise InputError(f"{side} logits must be real numbers, got {x.dtype}", where=where)
        # Chunks of positions: the float64 temporaries stay small (in cache, reused by the
        # allocator) whatever the sequence length. Nothing is kept before every chunk is checked.
        rows = max(1, self.CHUNK_ELEMENTS // max(r.shape[1], 1))
        parts = []
        for start in range(0, r.shape[0], rows):
            part = self._chunk(r[start : start + rows], c[start : start + rows])
            if part is None:
                self._raise_nonfinite(r, c, at, where)
            parts.append(part)
        self._parts.extend(parts)
        self._n += r.shape[0]

    # float64 elements of one chunk's temporaries (about 512 KiB each)
    CHUNK_ELEMENTS = 1 << 16

    @staticmethod
    def _raise_nonfinite(r: np.ndarray, c: np.ndarray, at: int, where: str) -> None:
        for side, x in (("reference", r), ("candidate", c)):
            bad = ~np.isfinite(x).all(axis=1)
            if bad.any():
                raise InputError(
                    f"{side} logits hold NaN or infinite values at position "
                    f"{at + int(np.flatnonzero(bad)[0])}",
                    where=where,
                )

    def _chunk(self, ref: np.ndarray, cand: np.ndarray) -> tuple[Any, ...] | None:
        """One chunk's per-position statistics, or None where a logit is NaN or infinite (a
        NaN or +inf shows in a row maximum, a -inf in the difference of the two sides)."""
        f64 = np.float64
        mr, mc = ref.max(axis=1).astype(f64), cand.max(axis=1).astype(f64)
        d = np.subtract(ref, cand, dtype=f64)
        max_abs = np.maximum(d.max(axis=1), -d.min(axis=1))
        if not (np.isfinite(mr).all() and np.isfinite(mc).all() and np.isfinite(max_abs).all()):
            return None
        er = np.subtract(ref, mr[:, None], dtype=f64)
        np.exp(er, out=er)
        zr = er.sum(axis=1)
        ec = np.subtract(cand, mc[:, None], dtype=f64)
        np.exp(ec, out=ec)
        lse_r = mr + np.log(zr)
        lse_c = mc + np.log(ec.sum(axis=1))
        # KL(ref || cand) = sum p_ref (log p_ref - log p_cand) = E_ref[r - c] - (lse_r - lse_c)
        kl = np.maximum(np.einsum("ij,ij->i", er, d) / zr - (lse_r - lse_c), 0.0)
        return (
            kl,
            max_abs,
            lse_r,
            lse_c,
            _top_k_fast(ref, self.top_k),
            _top_k_fast(cand, self.top_k),
        )

    def _joined(self, field: int) -> np.ndarray:
        if not self._parts:
            return np.zeros((0, self.top_k) if field >= 4 else 0)
        return np.concatenate([part[field] for part in self._parts])

    @property
    def kl(self) -> np.ndarray:
        """KL(ref || cand) per position added so far."""
        return self._joined(0).astype(np.float64)

    @property
    def top1(self) -> tuple[np.ndarray, np.ndarray]:
        """(reference, candidate) argmax per position added so far."""
        return self._joined(4)[:, 0].astype(np.int64), self._joined(5)[:, 0].astype(np.int64)

    def result(
        self,
        *,
        max_abs: float | None = None,
        max_kl: float | None = None,
        max_kl_mean: float | None = None,
        min_top1_agreement: float | None = None,
        min_topk_overlap: float | None = None,
        worst_k: int = 10,
    ) -> TeacherForcedResult:
        path = self.path
        bounds = {
            "max_abs": _bound("max_abs", max_abs, path=path),
            "max_kl": _bound("max_kl", max_kl, path=path),
            "max_kl_mean": _bound("max_kl_mean", max_kl_mean, path=path),
            "min_top1_agreement": _bound(
                "min_top1_agreement", min_top1_agreement, high=1.0, path=path
            ),
            "min_topk_overlap": _bound("min_topk_overlap", min_topk_overlap, high=1.0, path=path),
        }
        n = self._n
        if n == 0:
            raise InputError("no positions were added", where=_where_label(path))
        kl, mabs = self._joined(0), self._joined(1)
        top_r, top_c = self._joined(4), self._joined(5)
        agree = top_r[:, 0] == top_c[:, 0]
        # top-k lists hold distinct ids: the overlap counts the ids of one found in the other
        overlap = (top_r[:, :, None] == top_c[:, None, :]).any(axis=2).sum(axis=1) / self.top_k
        stats = {
            "max_abs": float(mabs.max()),
            "kl_max": float(kl.max()),
            "kl_mean": float(kl.mean()),
            "kl_p99": float(np.percentile(kl, 99)),
            "top1": float(agree.mean()),
            "topk": float(overlap.mean()),
        }
        abs_at, kl_at = int(mabs.argmax()), int(kl.argmax())
        disagree = np.flatnonzero(~agree)
        failures: list[Failure] = []

        def over(metric: str, bound: float | None, observed: float, where: str, detail: str):
            if bound is not None and observed > bound:
                failures.append(Failure(metric, bound, observed, observed - bound, where, detail))

        def under(metric: str, bound: float | None, observed: float, where: str, detail: str):
            if bound is not None and observed < bound:
                failures.append(Failure(metric, bound, observed, bound - observed, where, detail))

        over(
            "max_abs",
            bounds["max_abs"],
            stats["max_abs"],
            f"position {abs_at}",
            f"{int((mabs > (bounds['max_abs'] or 0)).sum())} of {n} positions beyond the bound",
        )
        over(
            "kl_divergence",
            bounds["max_kl"],
            stats["kl_max"],
            f"position {kl_at}",
            f"KL(ref || cand); {int((kl > (bounds['max_kl'] or 0)).sum())} of {n} positions "
            f"beyond the bound; reference top-1 {int(top_r[kl_at, 0])}, candidate top-1 "
            f"{int(top_c[kl_at, 0])}",
        )
        over(
            "kl_mean",
            bounds["max_kl_mean"],
            stats["kl_mean"],
            f"{n} positions",
            f"worst at position {kl_at} ({_fmt(stats['kl_max'])})",
        )
        under(
            "top1_agreement",
            bounds["min_top1_agreement"],
            stats["top1"],
            f"{len(disagree)} of {n} positions",
            "first differing positions " + ", ".join(str(int(p)) for p in disagree[:5]),
        )
        under(
            f"top{self.top_k}_overlap",
            bounds["min_topk_overlap"],
            stats["topk"],
            f"{n} positions",
            f"lowest at position {int(overlap.argmin())} ({_fmt(float(overlap.min()))})",
        )
        return TeacherForcedResult(
            path=path,
            passed=not failures,
            n_positions=n,
            vocab=int(self.vocab or 0),
            top_k=self.top_k,
            bounds=bounds,
            max_abs=stats["max_abs"],
            max_abs_position=abs_at,
            kl_mean=stats["kl_mean"],
            kl_p99=stats["kl_p99"],
            kl_max=stats["kl_max"],
            kl_max_position=kl_at,
            top1_agreement=stats["top1"],
            top1_disagreeing_positions=[int(p) for p in disagree[: max(worst_k, 0)]],
            topk_overlap=stats["topk"],
            failures=failures,
        )


def compare_teacher_forced(
    reference: Any, candidate: Any, *, top_k: int = 5, path: str = "", **bounds: Any
) -> TeacherForcedResult:
    """All positions at once through :class:`TeacherForcedAccumulator` (bounds: see result())."""
    acc = TeacherForcedAccumulator(top_k=top_k, path=path)
    acc.add(reference, candidate)
    return acc.result(**bounds)


# ---------------------------------------------------------------------------------------------
# greedy divergence


@dataclass(kw_only=True)
class GreedyDivergenceResult(_Verdict):
    """Two greedy runs: where they part, and whether the reference was torn there."""

    kind: str = "greedy-divergence"
    path: str = ""
    passed: bool
    verdict: str  # "identical", "near-tie" or "diverged"
    noise_bound: float
    first_divergence: int | None
    reference_token: int | None
    candidate_token: int | None
    reference_margin: float | None  # reference logit top-1 minus top-2 at the divergence
    top_k: int
    candidate_in_reference_topk: bool | None
    reference_in_candidate_topk: bool | None  # None without candidate logits
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        if self.first_divergence is None:
            return "identical greedy runs"
        return (
            f"{self.verdict} at step {self.first_divergence}: reference {self.reference_token} vs "
            f"candidate {self.candidate_token}, reference margin {_fmt(self.reference_margin)} "
            f"(noise bound {_fmt(self.noise_bound)})"
        )


def greedy_divergence(
    reference_tokens: Any,
    candidate_tokens: Any,
    reference_logits: Any,
    *,
    noise_bound: float,
    candidate_logits: Any = None,
    top_k: int = 5,
    path: str = "",
) -> GreedyDivergenceResult:
    """Judge the first divergence of two greedy runs.

    ``reference_logits[i]`` is the reference's next-token logits at generation step i (the step
    that chose ``reference_tokens[i]``). At the first differing step the reference's top-1/top-2
    margin decides: ``<= noise_bound`` is a ``near-tie`` (passes: a flip numerical noise can
    make), larger is ``diverged`` (fails). With ``candidate_logits`` (same layout) a containment
    check runs as well: each side's token must lie in the other side's top-``top_k``.
    """
    where = _where_label(path)
    noise = _bound("noise_bound", noise_bound, path=path)
    ref = np.asarray(reference_tokens).reshape(-1)
    cand = np.asarray(candidate_tokens).reshape(-1)
    logits = np.atleast_2d(np.asarray(reference_logits, dtype=np.float64))
    if logits.shape[0] < len(ref):
        raise InputError(
            f"reference logits cover {logits.shape[0]} steps, the reference ran {len(ref)}",
            where=where,
        )
    if not (isinstance(top_k, int) and 1 <= top_k <= logits.shape[1]):
        raise InputError(f"top_k must be in [1, {logits.shape[1]}], got {top_k!r}", where=where)
    common = min(len(ref), len(cand))
    diff = np.flatnonzero(ref[:common] != cand[:common])
    first = int(diff[0]) if diff.size else None
    failures: list[Failure] = []
    if first is None:
        return GreedyDivergenceResult(
            path=path,
            passed=True,
            verdict="identical",
            noise_bound=noise,
            first_divergence=None,
            reference_token=None,
            candidate_token=None,
            reference_margin=None,
            top_k=top_k,
            candidate_in_reference_topk=None,
            reference_in_candidate_topk=None,
        )
    row = logits[first]
    top2 = np.sort(row)[-2:]
    margin = float(top2[1] - top2[0])
    r_tok, c_tok = int(ref[first]), int(cand[first])
    verdict = "near-tie" if margin <= noise else "diverged"
    if verdict == "diverged":
        failures.append(
            Failure(
                metric="greedy_divergence",
                bound=noise,
                observed=margin,
                excess=margin - noise,
                where=f"step {first}",
                detail=f"reference chose {r_tok} by a margin of {_fmt(margin)} over its "
                f"runner-up; the candidate chose {c_tok}",
            )
        )
    topk_ref = set(np.argsort(-row, kind="stable")[:top_k].tolist())
    c_in_r = c_tok in topk_ref
    r_in_c = None
    if candidate_logits is not None:
        cl = np.atleast_2d(np.asarray(candidate_logits, dtype=np.float64))
        if cl.shape[0] <= first or cl.shape[1] != logits.shape[1]:
            raise InputError(
                f"candidate logits {tuple(cl.shape)} do not cover step {first} with vocab "
                f"{logits.shape[1]}",
                where=where,
            )
        r_in_c = r_tok in set(np.argsort(-cl[first], kind="stable")[:top_k].tolist())
        if not (c_in_r and r_in_c):
            failures.append(
                Failure(
                    metric=f"top{top_k}_containment",
                    bound=1,
                    observed=0,
                    excess=1.0,
                    where=f"step {first}",
                    detail=f"candidate token {c_tok} in reference top-{top_k}: {c_in_r}; "
                    f"reference token {r_tok} in candidate top-{top_k}: {r_in_c}",
                )
            )
    return GreedyDivergenceResult(
        path=path,
        passed=not failures,
        verdict=verdict,
        noise_bound=noise,
        first_divergence=first,
        reference_token=r_tok,
        candidate_token=c_tok,
        reference_margin=margin,
        top_k=top_k,
        candidate_in_reference_topk=c_in_r,
        reference_in_candidate_topk=r_in_c,
        failures=failures,
    )


# ---------------------------------------------------------------------------------------------
# perplexity


@dataclass(kw_only=True)
class PerplexityResult(_Verdict):
    """Perplexity of one fixed continuation under reference and candidate logits."""

    kind: str = "delta-perplexity"
    path: str = ""
    passed: bool
    n_tokens: int
    reference_ppl: float
    candidate_ppl: float
    delta: float  # candidate - reference
    relative_delta: float  # delta / reference
    max_relative_delta: float | None
    failures: list[Failure] = field(default_factory=list)

    def summary(self) -> str:
        return (
            f"perplexity {_fmt(self.candidate_ppl)} vs {_fmt(self.reference_ppl)} over "
            f"{self.n_tokens} tokens ({_fmt(100 * self.relative_delta)}%)"
        )


def delta_perplexity(
    reference_logits: Any,
    candidate_logits: Any,
    targets: Any,
    *,
    max_relative_delta: float | None = None,
    path: str = "",
) -> PerplexityResult:
    """Perplexities of ``targets`` where ``logits[i]`` is the distribution that predicts
    ``targets[i]`` (pass the rows before each continuation token); bound on
    ``|ppl_cand - ppl_ref| / ppl_ref``."""
    where = _where_label(path)
    bound = _bound("max_relative_delta", max_relative_delta, path=path)
    t = np.asarray(targets).reshape(-1)
    if t.size == 0 or t.dtype.kind not in "iu":
        raise InputError("targets must be a non-empty sequence of token ids", where=where)
    ppls = []
    for side, logits in (("reference", reference_logits), ("candidate", candidate_logits)):
        x = np.atleast_2d(np.asarray(logits, dtype=np.float64))
        if x.shape[0] != t.size:
            raise InputError(
                f"{side} logits have {x.shape[0]} rows for {t.size} target tokens", where=where
            )
        if t.min() < 0 or t.max() >= x.shape[1]:
            raise InputError(f"targets must lie in [0, {x.shape[1] - 1}]", where=where)
        if not np.isfinite(x).all():
            raise InputError(f"{side} logits hold NaN or infinite values", where=where)
        nll = -log_softmax(x)[np.arange(t.size), t]
        ppls.append(math.exp(float(nll.mean())))
    ref_ppl, cand_ppl = ppls
    rel = (cand_ppl - ref_ppl) / ref_ppl
    failures = []
    if bound is not None and abs(rel) > bound:
        failures.append(
            Failure(
                metric="delta_perplexity",
                bound=bound,
                observed=abs(rel),
                excess=abs(rel) - bound,
                where=f"{t.size} tokens",
                detail=f"candidate {_fmt(cand_ppl)} vs reference {_fmt(ref_ppl)}",
            )
        )
    return PerplexityResult(
        path=path,
        passed=not failures,
        n_tokens=int(t.size),
        reference_ppl=ref_ppl,
        candidate_ppl=cand_ppl,
        delta=cand_ppl - ref_ppl,
        relative_delta=rel,
        max_relative_delta=bound,
        failures=failures,
    )
