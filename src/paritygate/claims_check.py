"""Claims check: every number published in Markdown is the number the gate enforces.

A number in a doc is tied to the spec by an HTML comment written right after it (invisible when
the Markdown is rendered):

- ``≤ 2 px <!-- claim: boxes.edge_px -->`` ties the number to the bound of claim
  ``boxes.edge_px``;
- ``0.9987 <!-- measured: results/vad.json#/verdicts/0/observed -->`` ties it to a figure in a
  committed result file, addressed by a JSON pointer (RFC 6901); the path is relative to the doc.

:func:`check_claims` fails (one :class:`Problem` per finding, naming file:line, the claim and
both numbers) when a tied bound differs from the spec's, when the gate's bound is looser than the
published number (the README says 2 px while the gate runs at 30 px), when a published
measured figure differs from the file it cites, when a calibrated claim has no basis, when a
claim lists a doc in ``published`` and that doc has no marker for it, and when a marker names an
unknown claim. A ``published`` entry may name one section of a doc (``README.md#claims``, the
heading's anchor): its markers must be there. With ``unmarked=True`` every figure written in a
published section without a marker (``3.50x``, ``5x faster``, ``≤ 2 px``, ``0.9987``) is a problem
too. The syntax is documented in ``docs/claims-check.md``.
"""

from __future__ import annotations

import json
import math
import os
import re
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from . import claim_metrics
from ._format import format_number
from .errors import InputError, SpecError
from .files import read_text
from .spec import read_spec_document

__all__ = [
    "PublishedNumber",
    "Marker",
    "Problem",
    "SpecClaim",
    "ClaimsCheckResult",
    "parse_number",
    "find_markers",
    "find_unmarked",
    "sections",
    "read_spec_claims",
    "check_claims",
]


# --------------------------------------------------------------------------------------------
# Numbers as they are written in prose

_SUPERSCRIPT = str.maketrans("⁻⁺⁰¹²³⁴⁵⁶⁷⁸⁹", "-+0123456789")
_NUM = (
    r"[-+−]?(?:\d{1,3}(?:[,_\u2009\u202f]\d{3})+(?:\.\d+)?|\d+\.\d*|\.\d+|\d+)"
    r"(?:[eE][-+−]?\d+)?"
)
_COMPARATORS = {
    "≤": "<=",
    "<=": "<=",
    "&le;": "<=",
    "⩽": "<=",
    "<": "<",
    "&lt;": "<",
    "≥": ">=",
    ">=": ">=",
    "&ge;": ">=",
    "⩾": ">=",
    ">": ">",
    "&gt;": ">",
    "=": "=",
    "≈": "~",
    "~": "~",
    "±": "±",
}
_NUMBER_AT_END = re.compile(
    r"(?:(?P<cmp>≤|<=|&le;|⩽|≥|>=|&ge;|⩾|&lt;|&gt;|<|>|=|≈|~|±)\s*)?"
    rf"(?<![\w.,])(?P<num>{_NUM})"
    rf"(?:\s*(?:–|—|-|to)\s*(?P<num2>{_NUM}))?"
    r"(?:\s*[×x·]\s*10\s*\^?\s*(?P<exp>[-+−]?\d+))?"
    r"(?:\s*(?P<unit>%|‰|×|[A-Za-zµμ°][\w/µμ°]*(?:[ \t][A-Za-z][\w/]*)?))?"
    r"$"
)
# Trailing Markdown around a number: emphasis, code spans, a closing parenthesis or bracket.
_TRAILING = " \t*_`)]"

# Units known well enough to call two of them different (anything else is not compared).
_UNIT_ALIASES = {
    "px": "px",
    "pixel": "px",
    "pixels": "px",
    "ms": "ms",
    "msec": "ms",
    "millisecond": "ms",
    "milliseconds": "ms",
    "s": "s",
    "sec": "s",
    "second": "s",
    "seconds": "s",
    "us": "us",
    "µs": "us",
    "μs": "us",
    "microsecond": "us",
    "microseconds": "us",
    "ns": "ns",
    "db": "dB",
    "%": "%",
    "×": "x",
    "x": "x",
    "mb": "MB",
    "mib": "MiB",
    "gb": "GB",
    "gib": "GiB",
    "kb": "kB",
    "kib": "KiB",
    "ulp": "ulp",
    "ulps": "ulp",
}


@dataclass(frozen=True)
class PublishedNumber:
    """A number as written: its value, an optional range end, comparator and unit.

    ``resolution`` is half a unit of the last written digit (in the value's own scale): a measured
    figure matches a file value that rounds to it. Percentages keep ``value`` as written (97.3 for
    "97.3 %") with ``percent`` set.
    """

    text: str
    value: float
    high: float | None = None
    comparator: str | None = None  # "<=", "<", ">=", ">", "=", "~", "±"
    unit: str = ""
    resolution: float = 0.0
    # The value exactly as written (decimal, scaled by a written power of ten): bounds are
    # compared in decimal, not as floats within a relative tolerance.
    exact: Decimal | None = None

    @property
    def percent(self) -> bool:
        return self.unit == "%"

    def __str__(self) -> str:
        return self.text


def _to_float(text: str) -> tuple[float, int]:
    """A number token as a float and its count of written decimals (of the mantissa)."""
    clean = text.replace("−", "-").replace(",", "").replace("_", "")
    clean = clean.replace("\u2009", "").replace("\u202f", "")
    mantissa, _, exponent = clean.lower().partition("e")
    decimals = len(mantissa.split(".", 1)[1]) if "." in mantissa else 0
    value = float(clean)
    if exponent:
        decimals -= int(exponent)
    return value, decimals


def _scaled(value: float, exponent: int) -> float:
    # Through the decimal text, so that 3.2 × 10^-5 is exactly the float of "3.2e-5".
    return float(f"{value!r}e{exponent}") if "e" not in repr(value) else value * 10.0**exponent


def parse_number(text: str) -> PublishedNumber | None:
    """The number written at the very end of ``text`` (Markdown emphasis allowed), or None.

    Handles comparators (≤ <= ≥ >= < > ≈ and their HTML entities), units ("2 px", "1.3×",
    "99.5 %"), thousands separators (1,234 or thin spaces), scientific notation (1.2e-3,
    3.2 × 10^-5, 3.2×10⁻⁵), ranges ("5–7"), and a unicode minus.
    """
    stripped = text.translate(_SUPERSCRIPT).rstrip(_TRAILING)
    match = _NUMBER_AT_END.search(stripped)
    if match is None:
        return None
    value, decimals = _to_float(match.group("num"))
    high = None
    if match.group("num2"):
        high, decimals2 = _to_float(match.group("num2"))
        decimals = max(decimals, decimals2)
    exact = _to_decimal(match.group("num"))
    if match.group("exp"):
        exponent = int(match.group("exp").replace("−", "-"))
        exact = exact.scaleb(exponent) if exact is not None else None
        value = _scaled(value, exponent)
        high = _scaled(high, exponent) if high is not None else None
        decimals -= exponent
    comparator = _COMPARATORS.get(match.group("cmp") or "", None)
    unit = (match.group("unit") or "").strip()
    if unit and unit[0] in "xX" and (len(unit) == 1):
        unit = "×"
    return PublishedNumber(
        text=match.group(0).strip(),
        value=value,
        high=high,
        comparator=comparator,
        unit=unit,
        resolution=0.5 * 10.0 ** (-decimals),
        exact=exact,
    )


def _to_decimal(text: str) -> Decimal | None:
    clean = text.replace("−", "-").replace(",", "").replace("_", "")
    clean = clean.replace("\u2009", "").replace("\u202f", "")
    try:
        return Decimal(clean)
    except InvalidOperation:
        return None


# --------------------------------------------------------------------------------------------
# Markers in Markdown

_MARKER = re.compile(r"<!--\s*(?P<kind>claim|measured)\b(?P<body>.*?)-->", re.DOTALL)
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)*?<!--.*?\1")


@dataclass(frozen=True)
class Marker:
    """One marker in a doc: ``kind`` is "claim" or "measured"; ``target`` the claim id or
    ``file#/pointer``; ``number`` what precedes it (None when no number does)."""

    doc: Path
    line: int
    kind: str
    target: str
    number: PublishedNumber | None
    problem: str = ""  # a malformed marker

    @property
    def where(self) -> str:
        return f"{_show(self.doc)}:{self.line}"


def find_markers(doc: str | Path) -> list[Marker]:
    """Every claim / measured marker of a Markdown file, with the number written before it.

    Markers inside fenced code blocks and inline code spans are examples, not markers.
    """
    path = Path(doc)
    text = read_text(path, "doc")
    markers: list[Marker] = []
    for number, line in prose_lines(text):
        # Blank out inline code that shows a marker, keeping columns for the prefix logic.
        visible = _INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line)
        previous_end = 0
        for match in _MARKER.finditer(visible):
            prefix = visible[previous_end : match.start()]
            previous_end = match.end()
            kind = match.group("kind")
            body = match.group("body").strip()
            problem = ""
            if not body.startswith(":"):
                problem = f"malformed marker {match.group(0)!r}: expected '<!-- {kind}: ... -->'"
                target = ""
            else:
                target = body[1:].strip()
                if not target:
                    problem = f"malformed marker {match.group(0)!r}: names no {kind}"
            published = parse_number(prefix)
            if published is None and not problem:
                problem = (
                    f"{kind} marker {target!r} does not follow a number "
                    "(write the marker right after the number it ties)"
                )
            markers.append(Marker(path, number, kind, target, published, problem))
    return markers


def prose_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of every line outside fenced code blocks (1-based): the fences and
    what they enclose are examples, not prose."""
    fence: str | None = None
    for number, line in enumerate(text.splitlines(), start=1):
        opened = _FENCE.match(line)
        if fence is not None:
            if opened and opened.group(1) == fence:
                fence = None
            continue
        if opened:
            fence = opened.group(1)
            continue
        yield number, line


_HEADING = re.compile(r"^\s{0,3}(?P<level>#{1,6})\s+(?P<title>.*?)\s*#*\s*$")


def _anchor(title: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces to '-'."""
    title = re.sub(r"<[^>]*>|`", "", title).strip().lower()
    return re.sub(r"[^\w\- ]", "", title).replace(" ", "-")


def sections(doc: str | Path) -> dict[str, tuple[int, int]]:
    """Each heading's anchor -> its section's first and last line (1-based): from the heading to
    the line before the next heading of the same or a higher level. Headings inside fenced code
    are not headings; a repeated anchor keeps its first section."""
    text = read_text(Path(doc), "doc")
    headings: list[tuple[int, int, str]] = []  # line, level, anchor
    for number, line in prose_lines(text):
        match = _HEADING.match(line)
        if match:
            headings.append((number, len(match.group("level")), _anchor(match.group("title"))))
    found: dict[str, tuple[int, int]] = {}
    for i, (first, level, anchor) in enumerate(headings):
        last = next((h[0] - 1 for h in headings[i + 1 :] if h[1] <= level), len(text.splitlines()))
        found.setdefault(anchor, (first, last))
    return found


# A figure as prose writes it: a number with a comparator, a unit of measure or decimals. Whole
# numbers without either ("5 workload cases", "(1)") are counts and labels, not figures.
_FIGURE = re.compile(
    r"(?:(?P<cmp>≤|<=|&le;|⩽|≥|>=|&ge;|⩾|&lt;|&gt;|<|>|≈|~|±)\s*)?"
    rf"(?<![\w.,/#\-−])(?P<num>{_NUM})"
    rf"(?:\s*(?:–|—|to)\s*{_NUM})?"
    r"(?P<exp>\s*[×x·]\s*10\s*\^?\s*[-+−]?\d+)?"
    r"(?:\s*(?P<unit>%|‰|×|[A-Za-zµμ]+))?"
)
_CODE_SPAN = re.compile(r"(`+).*?\1")
_COMMENT = re.compile(r"<!--.*?-->")
_LINK_TARGET = re.compile(r"\]\([^)]*\)")


def _is_figure(match: re.Match[str]) -> bool:
    return bool(
        match.group("cmp")
        or match.group("exp")
        or _canonical_unit(match.group("unit") or "")
        or re.search(r"\.\d|[eE]", match.group("num"))  # "64." ends a sentence
    )


def find_unmarked(
    doc: str | Path, lines: tuple[int, int] | None = None
) -> list[tuple[int, PublishedNumber]]:
    """Every figure of ``doc`` (within ``lines``, first and last, 1-based) that no marker ties:
    a number with a comparator (``≤ 2 px``), a unit of measure (``3.50x``, ``5x faster``,
    ``12 ms``, ``97 %``) or decimals (``0.9987``), as ``(line, number)`` pairs. Code (fenced or
    inline), HTML comments and link targets are not prose; version numbers (``0.32.4``) and
    numbers inside words (``sha256``, ``h200``) are not figures."""
    path = Path(doc)
    first, last = lines or (1, 10**12)
    found: list[tuple[int, PublishedNumber]] = []
    for number, line in prose_lines(read_text(path, "doc")):
        if not first <= number <= last:
            continue
        visible = line
        for pattern in (_CODE_SPAN, _COMMENT, _LINK_TARGET):
            visible = pattern.sub(lambda m: " " * len(m.group(0)), visible)
        for match in _FIGURE.finditer(visible):
            end = match.end()
            unit = match.group("unit")
            if unit and unit not in "%‰×" and not _canonical_unit(unit):
                end = match.start("unit")  # a word after the number, not its unit
            if re.match(r"\.?\d|\w", visible[match.end() : match.end() + 2]):
                continue  # a version (0.32.4) or a number inside a word (2x2, 3rd)
            if not _is_figure(match) or _MARKER.match(line[end:].lstrip(_TRAILING)):
                continue  # a count, or a figure its marker ties
            parsed = parse_number(line[match.start() : end].rstrip())
            if parsed is not None:
                found.append((number, parsed))
    return found


# --------------------------------------------------------------------------------------------
# The spec's claims


@dataclass(frozen=True)
class SpecClaim:
    """What the claims check needs of one claim of the spec."""

    id: str
    bound: float | None
    unit: str
    metric: str
    direction: str | None  # "max": observed <= bound; "min": observed >= bound
    status: str
    basis: dict[str, Any]
    published: tuple[str, ...]
    line: int | None = None  # the line of its [claims.<id>] table in the spec
    activity: tuple[float, float] | None = None  # the activity band (min, max), if any
    activity_counter: str = ""
    exact_bound: Decimal | None = None  # the bound exactly as the spec writes it


def _claim_lines(text: str, table: tuple[str, ...]) -> dict[str, int]:
    prefix = r"\.".join(re.escape(t) for t in (*table, "claims"))
    header = re.compile(
        rf"^\s*\[\s*{prefix}\s*\.\s*(?:\"(?P<q>[^\"]+)\"|'(?P<s>[^']+)'|(?P<b>[A-Za-z0-9_.\-]+?))\s*\]"
    )
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        match = header.match(line)
        if match:
            name = match.group("q") or match.group("s") or match.group("b")
            lines.setdefault(name, number)
    return lines


def read_spec_claims(spec: str | Path) -> tuple[dict[str, SpecClaim], Path, list[str]]:
    """The spec's claims, its folder (``published`` paths are relative to it) and load problems.

    The claims table is read leniently so that every doc problem is still reported when the spec
    has others; the full spec is then validated with :func:`paritygate.spec.load_spec` and its
    error, if any, is returned as a problem (a spec that does not load enforces nothing).
    """
    path = Path(spec)
    text, data, table = read_spec_document(path)
    # The same document with every float kept as written: bounds compare in decimal.
    written = tomllib.loads(text, parse_float=Decimal)
    for key in table:
        written = written[key]
    raw_claims = data.get("claims", {})
    if not isinstance(raw_claims, dict):
        raise SpecError("claims must be a table of [claims.<id>] tables", where=str(path))
    directions = claim_metrics.directions()
    lines = _claim_lines(text, table)
    claims: dict[str, SpecClaim] = {}
    for claim_id, value in raw_claims.items():
        if not isinstance(value, dict):
            raise SpecError(f"claims.{claim_id} must be a table", where=str(path))
        bound = value.get("bound")
        if isinstance(bound, bool) or not isinstance(bound, (int, float)):
            bound = None
        published = value.get("published", ())
        if isinstance(published, str):
            published = (published,)
        basis = value.get("basis", {})
        activity = value.get("activity")
        band = None
        if isinstance(activity, dict) and all(
            isinstance(activity.get(k), (int, float)) and not isinstance(activity.get(k), bool)
            for k in ("min", "max")
        ):
            band = (float(activity["min"]), float(activity["max"]))
        exact_bound = None
        if bound is not None:
            raw = (written.get("claims") or {}).get(claim_id, {}).get("bound")
            exact_bound = Decimal(raw) if isinstance(raw, (int, Decimal)) else None
        claims[claim_id] = SpecClaim(
            id=claim_id,
            exact_bound=exact_bound,
            bound=float(bound) if bound is not None else None,
            unit=str(value.get("unit", "") or ""),
            metric=str(value.get("metric", "")),
            direction=directions.get(str(value.get("metric", ""))),
            status=str(value.get("status", "")),
            basis=basis if isinstance(basis, dict) else {"": basis},
            published=tuple(str(p) for p in published if isinstance(p, str)),
            line=lines.get(claim_id),
            activity=band,
            activity_counter=str(activity.get("calls", activity.get("counter", "")))
            if isinstance(activity, dict)
            else "",
        )
    problems: list[str] = []
    from .spec import load_spec

    try:
        load_spec(path)
    except SpecError as exc:
        # A calibrated claim without basis is reported below, once, with its line.
        if not re.search(r"claims\.[^ :]+\.basis", str(exc)):
            problems.append(f"the spec does not load: {exc.one_line()}")
    return claims, path.absolute().parent, problems


# --------------------------------------------------------------------------------------------
# The check


@dataclass(frozen=True)
class Problem:
    """One finding: where (file:line), the claim (if any) and what is wrong, with both numbers."""

    where: str
    claim: str | None
    message: str

    def __str__(self) -> str:
        claim = f" claim {self.claim}:" if self.claim else ""
        return f"{self.where}:{claim} {self.message}"


@dataclass
class ClaimsCheckResult:
    spec: Path
    docs: list[Path]
    markers: list[Marker] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not self.problems

    def __bool__(self) -> bool:
        return self.passed

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1


def _show(path: Path) -> str:
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def _num(value: float | None) -> str:
    return format_number(value, digits=10, none="none")


def _with_unit(value: float | None, unit: str) -> str:
    return f"{_num(value)} {unit}".strip()


def _canonical_unit(unit: str) -> str | None:
    return _UNIT_ALIASES.get(unit.strip().lower())


# Metrics whose bounds sit just below 1, where the digits that matter are those of 1 − x (the
# registry's display form).
ONE_MINUS_METRICS = claim_metrics.MetricView(lambda m: m.near_one, lambda m: m.near_one)


def _decimal_text(value: Decimal) -> str:
    text = format(value.normalize(), "g")
    return text if len(text) <= 24 else f"{value:.10e}"


def _published_text(value: float, exact: Decimal | None) -> str:
    if exact is None:
        return _num(value)
    text = _decimal_text(exact)
    return text if Decimal(_num(value)) != exact else _num(value)


def _bound_text(claim: SpecClaim, unit: str) -> str:
    if claim.exact_bound is None or Decimal(_num(claim.bound)) == claim.exact_bound:
        return _with_unit(claim.bound, unit)
    return f"{_decimal_text(claim.exact_bound)} {unit}".strip()


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def _claim_marker_problems(marker: Marker, claim: SpecClaim, spec_where: str) -> list[str]:
    number = marker.number
    assert number is not None
    if number.high is not None:
        return _activity_problems(number, claim, spec_where)
    if claim.bound is None:
        return [f"the spec ({spec_where}) gives the claim no numeric bound"]
    published = number.value
    published_exact = number.exact
    if number.percent and _canonical_unit(claim.unit) != "%":
        published = number.value / 100.0  # 2 % of a fraction-valued metric is 0.02
        published_exact = published_exact.scaleb(-2) if published_exact is not None else None
    published_unit = _canonical_unit(number.unit) if not number.percent else None
    claim_unit = _canonical_unit(claim.unit)
    if published_unit and claim_unit and published_unit != claim_unit:
        return [
            f"published {number.text!r} is in {number.unit} but the spec's bound "
            f"{_with_unit(claim.bound, claim.unit)} ({spec_where}) is in {claim.unit}"
        ]
    problems: list[str] = []
    if claim.direction and number.comparator in ("<=", "<", ">=", ">"):
        upper = number.comparator in ("<=", "<")
        if upper != (claim.direction == "max"):
            kind = "upper" if claim.direction == "max" else "lower"
            problems.append(
                f"published {number.text!r} reads as a {'upper' if upper else 'lower'} "
                f"bound, but {claim.metric} is a {kind} bound in the spec ({spec_where})"
            )
    exact = published_exact is not None and claim.exact_bound is not None
    if exact:
        # As written, in decimal: near 1 a cosine bound changed in its ninth digit is a
        # different claim (a float tolerance would call 0.99999999932 and 0.99999999992 equal).
        differs = published_exact != claim.exact_bound
        p_cmp, b_cmp = published_exact, claim.exact_bound
    else:
        differs = not _same(published, claim.bound)
        p_cmp, b_cmp = published, claim.bound
    if differs:
        looser = None
        if claim.direction == "max":
            looser = b_cmp > p_cmp
        elif claim.direction == "min":
            looser = b_cmp < p_cmp
        unit = claim.unit or ("" if number.percent else number.unit)
        gap = ""
        if exact and claim.metric in ONE_MINUS_METRICS:
            gap = (
                f" (as 1 − x: published {_decimal_text(1 - published_exact)}, gate "
                f"{_decimal_text(1 - claim.exact_bound)})"
            )
        if looser:
            problems.append(
                f"the gate's bound {_bound_text(claim, unit)} ({spec_where}) is looser "
                f"than the published {number.text!r} "
                f"({_published_text(published, published_exact)})"
                f"{gap}: the gate does not enforce the number the doc publishes"
            )
        else:
            problems.append(
                f"published {number.text!r} ({_published_text(published, published_exact)}) "
                f"differs from the gate's bound {_bound_text(claim, unit)} ({spec_where})"
                f"{gap}: publish the number the gate enforces"
            )
    return problems


def _activity_problems(number: PublishedNumber, claim: SpecClaim, spec_where: str) -> list[str]:
    """A published range ("5–7 skipped steps") is the claim's activity band."""
    assert number.high is not None
    if claim.activity is None:
        return [
            f"published range {number.text!r} has nothing to tie to: the claim has no "
            f"activity band in the spec ({spec_where}), only the single bound "
            f"{_with_unit(claim.bound, claim.unit)}"
        ]
    low, high = claim.activity
    if _same(low, number.value) and _same(high, number.high):
        return []
    looser = (low < number.value and high >= number.high) or (
        low <= number.value and high > number.high
    )
    band = f"{_num(low)}–{_num(high)}"
    counter = f" of {claim.activity_counter}" if claim.activity_counter else ""
    if looser:
        return [
            f"the gate's activity band{counter} {band} ({spec_where}) is wider than the "
            f"published {number.text!r}: the gate does not enforce the number the doc "
            "publishes"
        ]
    return [
        f"published {number.text!r} differs from the gate's activity band{counter} {band} "
        f"({spec_where}): publish the number the gate enforces"
    ]


def _pointer(data: Any, pointer: str, where: str) -> Any:
    if pointer == "":
        return data
    if not pointer.startswith("/"):
        raise LookupError(f"JSON pointer {pointer!r} must start with '/'")
    current = data
    for raw in pointer[1:].split("/"):
        token = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict):
            if token not in current:
                raise LookupError(f"no key {token!r} (at {pointer!r}) in {where}")
            current = current[token]
        elif isinstance(current, list):
            if not token.isdigit() or int(token) >= len(current):
                raise LookupError(f"no index {token!r} (at {pointer!r}) in {where}")
            current = current[int(token)]
        else:
            raise LookupError(f"{pointer!r} goes below a {type(current).__name__} in {where}")
    return current


def _measured_problems(marker: Marker, cache: dict[Path, Any]) -> list[str]:
    number = marker.number
    assert number is not None
    file_text, _, pointer = marker.target.partition("#")
    file = (marker.doc.parent / file_text).resolve()
    shown = f"{file_text}#{pointer}"
    if file not in cache:
        try:
            cache[file] = json.loads(read_text(file, "result file"))
        except InputError as exc:
            cache[file] = (
                FileNotFoundError if not os.path.lexists(file) else ValueError(exc.message)
            )
        except json.JSONDecodeError as exc:
            cache[file] = ValueError(str(exc))
    data = cache[file]
    if data is FileNotFoundError:
        return [f"published {number.text!r} cites {file_text}, which does not exist"]
    if isinstance(data, ValueError):
        return [f"published {number.text!r} cites {file_text}, which is not JSON ({data})"]
    try:
        value = _pointer(data, pointer, file_text)
    except LookupError as exc:
        return [f"published {number.text!r} cites {shown}: {exc}"]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return [
            f"published {number.text!r} cites {shown}, which holds {value!r}, not a finite number"
        ]
    if number.high is not None:
        return [
            f"published range {number.text!r} cannot be a single measured figure ({shown} "
            f"holds {_num(value)})"
        ]
    readings = [(number.value, number.resolution)]
    if number.percent:
        # 97.3 % is the fraction 0.973; a file may hold either form.
        readings.insert(0, (number.value / 100.0, number.resolution / 100.0))
    for published, resolution in readings:
        if abs(published - value) <= resolution * (1 + 1e-9) + 1e-15:
            return []
    return [
        f"published {number.text!r} differs from {shown}, which holds {_num(value)} "
        f"(it rounds to the written precision as {_round_like(value, number)})"
    ]


def _round_like(value: float, number: PublishedNumber) -> str:
    if number.resolution <= 0:
        return _num(value)
    decimals = max(0, round(-math.log10(number.resolution * 2)))
    if number.percent:
        return f"{value * 100:.{decimals}f} % or {value:.{decimals}f}"
    return f"{value:.{decimals}f}"


def check_claims(
    docs: Iterable[str | Path], spec: str | Path, *, unmarked: bool = False
) -> ClaimsCheckResult:
    """Check every marker of ``docs`` (and of every doc a claim lists in ``published``) against
    ``spec``. With ``unmarked``, every figure of a published section (a ``published`` entry:
    a doc, or one section of it as ``doc#anchor``) that no marker ties is a problem too. Returns
    the result with one problem per finding; raises for unreadable input, and (``unmarked``)
    when no claim lists a doc in ``published``."""
    spec_path = Path(spec)
    claims, root, load_problems = read_spec_claims(spec_path)
    spec_name = _show(spec_path)
    result = ClaimsCheckResult(spec=spec_path, docs=[])
    for message in load_problems:
        result.problems.append(Problem(spec_name, None, message))

    def spec_where(claim: SpecClaim) -> str:
        return f"{spec_name}:{claim.line}" if claim.line else spec_name

    for claim in claims.values():
        if claim.status == "calibrated" and not claim.basis:
            result.problems.append(
                Problem(
                    spec_where(claim),
                    claim.id,
                    "is calibrated but states no basis (what was measured, when, on which "
                    "hardware, "
                    "over how many cases); a calibrated bound without its basis cannot be checked",
                )
            )

    # Docs to scan: those given, plus every doc a claim says it is published in.
    ordered: dict[Path, Path] = {}
    for doc in docs:
        ordered.setdefault(Path(doc).resolve(), Path(doc))
    # doc -> (claim, the published section's lines or None for the whole doc, its label)
    published_in: dict[Path, list[tuple[SpecClaim, tuple[int, int] | None, str]]] = {}
    for claim in claims.values():
        for name in claim.published:
            doc_name, _, anchor = name.partition("#")
            doc = (root / doc_name).resolve()
            if not doc.is_file():
                result.problems.append(
                    Problem(
                        spec_where(claim),
                        claim.id,
                        f"says it is published in {name}, which does not exist",
                    )
                )
                continue
            lines = sections(doc).get(anchor) if anchor else None
            if anchor and lines is None:
                result.problems.append(
                    Problem(
                        spec_where(claim),
                        claim.id,
                        f"says it is published in {name}, but {doc_name} has no heading whose "
                        f"anchor is #{anchor}",
                    )
                )
                continue
            published_in.setdefault(doc, []).append((claim, lines, name))
            ordered.setdefault(doc, doc)
    result.docs = list(ordered.values())
    if unmarked and not published_in:
        raise InputError(
            "unmarked numbers are looked for in the docs (or sections, 'README.md#claims') the "
            "claims list in `published`, and no claim lists one",
            where=spec_name,
        )

    cache: dict[Path, Any] = {}
    marked: dict[Path, set[str]] = {}
    for resolved, doc in ordered.items():
        markers = find_markers(doc)
        result.markers.extend(markers)
        for marker in markers:
            if marker.problem:
                result.problems.append(Problem(marker.where, None, marker.problem))
                continue
            if marker.kind == "measured":
                found = _measured_problems(marker, cache)
                result.problems.extend(Problem(marker.where, None, m) for m in found)
                continue
            claim = claims.get(marker.target)
            if claim is None:
                known = ", ".join(sorted(claims)) or "none"
                result.problems.append(
                    Problem(
                        marker.where,
                        marker.target,
                        f"unknown claim: the spec {spec_name} has no [claims.{marker.target}] "
                        f"(published {marker.number.text!r}; claims in the spec: {known})",
                    )
                )
                continue
            marked.setdefault(resolved, {}).setdefault(claim.id, []).append(marker.line)
            found = _claim_marker_problems(marker, claim, spec_where(claim))
            result.problems.extend(Problem(marker.where, claim.id, m) for m in found)

    for doc, listed in published_in.items():
        for claim, lines, name in listed:
            at = marked.get(doc, {}).get(claim.id, [])
            if lines is not None:
                at = [n for n in at if lines[0] <= n <= lines[1]]
            if not at:
                place = "the doc" if lines is None else f"its section #{name.partition('#')[2]}"
                result.problems.append(
                    Problem(
                        _show(doc) if lines is None else f"{_show(doc)}:{lines[0]}",
                        claim.id,
                        f"the spec ({spec_where(claim)}) says this claim is published here, but "
                        f"{place} has no '<!-- claim: {claim.id} -->' marker after its number "
                        f"(the bound is {_with_unit(claim.bound, claim.unit)})",
                    )
                )
    if unmarked:
        result.problems.extend(_unmarked_problems(published_in))
    return result


def _unmarked_problems(
    published_in: dict[Path, list[tuple[SpecClaim, tuple[int, int] | None, str]]],
) -> list[Problem]:
    """One problem per figure of a published section that no marker ties (once, however many
    claims list the section)."""
    problems: list[Problem] = []
    seen: set[tuple[Path, int, str]] = set()
    for doc, listed in published_in.items():
        for lines, name in dict.fromkeys((lines, name) for _, lines, name in listed):
            for line, number in find_unmarked(doc, lines):
                if (doc, line, number.text) in seen:
                    continue
                seen.add((doc, line, number.text))
                problems.append(
                    Problem(
                        f"{_show(doc)}:{line}",
                        None,
                        f"unmarked number {number.text!r} in {name}, which the spec publishes: "
                        "tie it to its claim (<!-- claim: ID -->) or its result file "
                        "(<!-- measured: FILE#POINTER -->), or move it out of the section",
                    )
                )
    return problems
