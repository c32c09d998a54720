"""The gate's terminal output: one line per claim and candidate, failures expanded under it.

A run prints, in this order: run errors (grouped: a runner that crashed on 20 cases is one line
with one traceback), drift, one line per claim and candidate ("probability-max-abs  mlx
20/20 cases  worst 7.7e-07 @ clean_speech  bound 1.9e-05  25x margin") with its failing cases
under it, claims not evaluated, one line summing up what changed in the environment without a
pin, and the path of report.html last. ``verbose`` adds a row per case under every claim.

Nothing here splits a name or a number across lines: when the columns do not fit the console's
width, a claim's line breaks between cells, never inside one.
"""

from __future__ import annotations

import math
import re
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import claim_metrics
from .._format import display_text
from ._common import (
    as_float,
    case_label,
    failure_text,
    fmt,
    held_count,
    summary_counts,
    unit_of,
    verdict_message,
    verdict_word,
    verdicts,
)

__all__ = [
    "verdict_table",
    "verdict_line",
    "render_lines",
    "claim_summaries",
    "run_error_groups",
    "ClaimSummary",
    "console",
    "wrap_lines",
    "terminal_width",
    "fitted",
]

# Metrics whose interesting part is the distance from 1 (the registry's ``near_one``): a cosine of
# 0.9999999999999932 against a bound of 0.99999999932 prints as "1-cosine 6.8e-15, bound 6.8e-10".
# A fraction of rows (agreement, accuracy) is shown as a percentage instead: "agreement 100%"
# against "bound ≥ 100%", never "1-agreement 0".
ONE_MINUS = claim_metrics.MetricView(lambda m: m.near_one, lambda m: m.near_one and not m.percent)
PERCENT = claim_metrics.MetricView(lambda m: m.percent, lambda m: m.percent)
INDENT = "     "
MAX_EXPANDED = 3  # failing cases expanded under a claim; the rest are named on one line


def _direction(metric: str) -> str:
    """ "max" (a ceiling) or "min" (a floor), from the claim-metric registry."""
    return claim_metrics.direction_of(metric) or "max"


def _one_minus(metric: str, value: Any) -> float | None:
    number = as_float(value)
    if metric in ONE_MINUS and number is not None:
        return 1.0 - number
    return None


def distance_from_one(metric: str, verdict: dict[str, Any]) -> float | None:
    """1 - x of a cosine-like verdict: the backends' ``one_minus_cosine`` (exact near 1, from the
    elementwise difference) when the evidence holds it, else 1 - observed."""
    if metric not in ONE_MINUS:
        return None
    evidence = verdict.get("evidence")
    if metric == "cosine" and isinstance(evidence, dict):
        found = [
            as_float(item.get("one_minus_cosine"))
            for item in evidence.values()
            if isinstance(item, dict) and as_float(item.get("one_minus_cosine")) is not None
        ]
        if found:
            return max(found)  # type: ignore[type-var]
    return _one_minus(metric, verdict.get("observed"))


@dataclass
class ClaimSummary:
    """One claim for one candidate over the cases it ran on."""

    claim_id: str
    candidate: str
    metric: str
    unit: str
    bound: Any
    verdicts: list[dict[str, Any]]
    worst: dict[str, Any] | None = None  # the verdict nearest to (or furthest past) the bound
    failing: list[dict[str, Any]] = field(default_factory=list)
    no_outputs: list[dict[str, Any]] = field(default_factory=list)  # runner produced nothing

    @property
    def passed(self) -> bool:
        return not self.failing and not self.no_outputs

    @property
    def dataset(self) -> bool:
        return all(v.get("case") is None for v in self.verdicts)

    def cases_cell(self) -> str:
        if self.dataset:
            return "dataset"
        total = len(self.verdicts)
        held = total - len(self.failing) - len(self.no_outputs)
        return f"{held}/{total} cases"

    def _value(self, value: Any) -> str:
        if self.metric in PERCENT:
            return _percent(value)
        one_minus = _one_minus(self.metric, value)
        return fmt(one_minus if one_minus is not None else value, compact=True)

    def _unit(self) -> str:
        unit = self.unit or ""
        if not unit or unit == self.metric or len(unit) > 8:
            return ""
        return f" {unit}"

    def worst_cell(self) -> str:
        if self.worst is None:
            return "no outputs" if self.no_outputs else ""
        observed = self.worst.get("observed")
        if observed is None and self.worst.get("failures"):
            # nothing was measured (a missing output, a shape mismatch): say what failed
            kinds = dict.fromkeys(str(f.get("metric", "")) for f in self.worst["failures"])
            return ", ".join(
                f"{k} undefined" if k == self.metric else k.replace("_", " ") for k in kinds if k
            )
        label = (
            f"1-{self.metric}"
            if self.metric in ONE_MINUS
            else self.metric
            if self.metric in PERCENT
            else "worst"
        )
        shown = distance_from_one(self.metric, self.worst)
        value = fmt(shown, compact=True) if shown is not None else self._value(observed)
        text = f"{label} {value}{self._unit()}"
        exact = (
            as_float(observed) == 0 and self.metric not in ONE_MINUS and self.metric not in PERCENT
        )
        if self.worst.get("case") is not None and len(self.verdicts) > 1 and not exact:
            text += f" @ {self.worst['case']}"
        return text

    def bound_cell(self) -> str:
        if self.metric in PERCENT:
            sign = "≥" if _direction(self.metric) == "min" else "≤"
            return f"bound {sign} {self._value(self.bound)}"
        prefix = (
            "floor"
            if _direction(self.metric) == "min" and self.metric not in ONE_MINUS
            else "bound"
        )
        return f"{prefix} {self._value(self.bound)}{self._unit()}"

    def margin_cell(self) -> str:
        if self.worst is None:
            return ""
        observed, bound = as_float(self.worst.get("observed")), as_float(self.bound)
        if observed is None or bound is None:
            return "" if self.passed else "failed"
        if self.metric in ONE_MINUS:  # a floor near 1: compare the distances from 1
            distance = distance_from_one(self.metric, self.worst)
            observed = distance if distance is not None else 1.0 - observed
            bound = 1.0 - bound
            direction = "max"
        else:
            direction = _direction(self.metric)
        if direction == "max":
            if observed > bound:
                ratio = f" ({_ratio(observed / bound)})" if bound > 0 else ""
                return f"over by {fmt(observed - bound, compact=True)}{ratio}"
            if observed == 0:
                return "exact" if bound == 0 else "zero"
            if bound == observed:
                return "at bound"
            return f"{_ratio(bound / observed)} margin"
        percent = self.metric in PERCENT
        gap = abs(observed - bound)
        shown = _percent(gap) if percent else fmt(gap, compact=True)
        if observed < bound:
            return f"short by {shown}"
        return f"{shown} margin" if observed > bound else "at bound"


def _percent(value: Any) -> str:
    """A fraction as a percentage in at most ~8 characters: 1.0 as "100%", 0.99875 as "99.88%"."""
    number = as_float(value)
    if number is None:
        return fmt(value)
    return f"{number * 100:.4g}%"


def _ratio(value: float) -> str:
    if value >= 1e4:
        return f"{value:.0e}x".replace("e+0", "e").replace("e+", "e")
    if value < 1.1:  # at the bound: the digits that tell how close
        return f"{value:.4f}x"
    return f"{value:.1f}x" if value < 10 else f"{value:.0f}x"


def _closeness(metric: str, verdict: dict[str, Any]) -> float:
    """How near a verdict comes to its bound (larger is nearer or past): picks the worst case."""
    observed = as_float(verdict.get("observed"))
    if observed is None:
        return math.inf if not verdict.get("passed") else -math.inf
    if metric in ONE_MINUS:
        distance = distance_from_one(metric, verdict)
        return distance if distance is not None else 1.0 - observed
    return observed if _direction(metric) == "max" else -observed


def claim_summaries(result: dict[str, Any]) -> list[ClaimSummary]:
    """Verdicts grouped by (claim, candidate), in the order they first appear, with the worst."""
    groups: dict[tuple[str, str], ClaimSummary] = {}
    for v in verdicts(result):
        key = (str(v.get("claim_id", "")), str(v.get("candidate", "")))
        summary = groups.get(key)
        if summary is None:
            summary = groups[key] = ClaimSummary(
                key[0],
                key[1],
                str(v.get("metric", "")),
                unit_of(v),
                v.get("bound"),
                [],
            )
        summary.verdicts.append(v)
        failures = v.get("failures") or []
        if not v.get("passed") and failures and all(f.get("metric") == "run" for f in failures):
            summary.no_outputs.append(v)
            continue
        if not v.get("passed"):
            summary.failing.append(v)
        if summary.worst is None or _closeness(summary.metric, v) > _closeness(
            summary.metric, summary.worst
        ):
            summary.worst = v
    return list(groups.values())


# --------------------------------------------------------------------------------------------
# Run errors, grouped

_RUN_ERROR = re.compile(
    r"^runner (?P<runner>[^,:]+)(?:, case (?P<case>[^:]+))?: (?P<rest>.*)$", re.S
)
_VERB = {
    "crash": "crashed",
    "timeout": "timed out",
    "unparseable": "gave unparseable output",
    "import": "failed to start",
}


@dataclass
class RunErrorGroup:
    """Errors that say the same thing about one runner, apart from the case."""

    runner: str | None
    kind: str
    message: str  # first line, as the first case said it
    detail: str  # the rest (stderr, traceback), shown once
    cases: list[str]

    def headline(self, total_cases: int) -> str:
        if self.runner is None:
            return self.message
        verb = _VERB.get(self.kind, self.kind)
        if self.cases:
            count = f"{len(self.cases)}/{total_cases}" if total_cases else str(len(self.cases))
            where = f"on {count} cases"
            if len(self.cases) <= 3:
                where += " (" + ", ".join(self.cases) + ")"
            return f"runner {self.runner} {verb} {where}: {self.message}"
        return f"runner {self.runner} {verb}: {self.message}"


def run_error_groups(errors: Iterable[str]) -> list[RunErrorGroup]:
    """Run errors grouped by runner and message (the case's name masked), in first-seen order."""
    groups: dict[tuple[Any, ...], RunErrorGroup] = {}
    for error in errors:
        match = _RUN_ERROR.match(str(error))
        if match is None:
            key: tuple[Any, ...] = (None, str(error))
            groups.setdefault(key, RunErrorGroup(None, "", str(error), "", []))
            continue
        runner, case, rest = match["runner"], match["case"], match["rest"]
        kind, _, message = rest.partition(": ")
        if not message:
            kind, message = "", rest
        first, _, detail = message.partition("\n")
        # Grouped by the first line with the case's name masked; the detail (stderr, traceback)
        # of the first case is shown for the group (every case's is in the report).
        masked = (
            re.sub(rf"(?<![\w.-]){re.escape(case)}(?![\w-])", "{case}", first) if case else first
        )
        key = (runner, kind, masked)
        group = groups.get(key)
        if group is None:
            group = groups[key] = RunErrorGroup(runner, kind, first, detail.strip("\n"), [])
        if case:
            group.cases.append(case)
    return list(groups.values())


def _all_cases(result: dict[str, Any], groups: list[RunErrorGroup]) -> int:
    cases = {v.get("case") for v in verdicts(result) if v.get("case") is not None}
    for group in groups:
        cases.update(group.cases)
    return len(cases)


# --------------------------------------------------------------------------------------------
# Lines


def verdict_line(result: dict[str, Any]) -> str:
    """The run's verdict in one short line."""
    counts = summary_counts(result)
    held, total, what = held_count(result)
    parts = [f"{held}/{total} {what} hold"]
    if counts["verdicts"]:
        parts.append(f"{counts['verdicts']} verdicts")
    for name in ("not_evaluated", "drift", "errors"):
        if counts[name]:
            parts.append(f"{counts[name]} {name.replace('_', ' ')}")
    return f"paritygate: {verdict_word(result)} — " + ", ".join(parts)


def wrap_lines(text: str, width: int, indent: str = "") -> list[str]:
    """Prose wrapped at spaces only (a name or number is never split), the lines after the first
    indented two more; the one wrapper of terminal output (the gate's report, calibrate, the
    pytest plugin)."""
    out: list[str] = []
    for paragraph in str(text).splitlines() or [""]:
        out.extend(
            textwrap.wrap(
                paragraph,
                width=max(width, len(indent) + 20),
                initial_indent=indent,
                subsequent_indent=indent + "  ",
                break_long_words=False,
                break_on_hyphens=False,
            )
            or [indent]
        )
    return out


def _pack(cells: list[str], width: int, indent: str, first: str = "") -> list[str]:
    """Cells laid out left to right, two spaces apart, starting a new line between cells (never
    inside one) when the next would pass ``width``."""
    lines: list[str] = []
    line = first
    for cell in cells:
        if not cell:
            continue
        candidate = f"{line}  {cell}" if line.strip() else f"{line}{cell}"
        if len(candidate) > width and line.strip():
            lines.append(line)
            line = indent + cell
        else:
            line = candidate
    if line.strip():
        lines.append(line)
    return lines


def _mark(passed: bool) -> str:
    return "pass" if passed else "FAIL"


def _claim_rows(claims: list[ClaimSummary], width: int) -> list[tuple[ClaimSummary, list[str]]]:
    """Each claim's line(s): aligned columns when every row fits, cells packed otherwise."""
    rows = [
        [
            _mark(c.passed),
            c.claim_id,
            c.candidate,
            c.cases_cell(),
            c.worst_cell(),
            c.bound_cell(),
            c.margin_cell(),
        ]
        for c in claims
    ]
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(7)]
    if sum(widths) + 2 * 6 <= width:
        out = []
        for claim, row in zip(claims, rows, strict=True):
            cells = [row[i].ljust(widths[i]) for i in range(4)]
            cells += [row[4].ljust(widths[4]), row[5].ljust(widths[5]), row[6]]
            out.append((claim, ["  ".join(cells).rstrip()]))
        return out
    out = []
    fits = [len(f"{r[0]} {r[1]}  {r[2]}  {r[3]}") <= width for r in rows]
    name_width = max(
        (len(f"{r[1]}  {r[2]}") for r, f in zip(rows, fits, strict=True) if f), default=0
    )
    tail_widths = [
        max((len(r[i]) for r, f in zip(rows, fits, strict=True) if f), default=0) for i in (4, 5, 6)
    ]
    aligned = len(INDENT) + sum(tail_widths) + 4 <= width
    for claim, row, fit in zip(claims, rows, fits, strict=True):
        if not fit:
            # Names too long to align: this row packs its own cells, never splitting one.
            head = _pack([f"{row[0]} {row[1]}", row[2]], width, INDENT)
            out.append((claim, head + _pack(row[3:], width, INDENT, INDENT)))
            continue
        head = f"{row[0]} " + f"{row[1]}  {row[2]}".ljust(name_width) + f"  {row[3]}"
        if aligned:
            cells = [row[4 + i].ljust(tail_widths[i]) for i in range(3)]
            lines = [INDENT + "  ".join(cells).rstrip()]
        else:
            lines = _pack(row[4:], width, INDENT, INDENT)
        out.append((claim, [head.rstrip()] + lines))
    return out


_LONG_FLOAT = re.compile(r"-?\d+\.\d{7,}(?:e[-+]?\d+)?")


def _shorten_numbers(text: str) -> str:
    """Long float reprs inside a failure's detail at 8 significant digits."""
    return _LONG_FLOAT.sub(lambda m: f"{float(m.group()):.8g}", text)


def _compact(value: Any) -> str:
    return fmt(value, compact=True)


def _number_for(metric: str) -> Any:
    """How a failure's numbers are written: a value near 1 (cosine, a correlation) as its
    distance from 1 ("1-1e-06"), which the compact form alone would round to "1"."""
    if metric not in ONE_MINUS:
        return _compact

    def near_one(value: Any) -> str:
        number = as_float(value)
        if number is None or not math.isfinite(number) or not 0 < number < 1:
            return _compact(value)
        return f"1-{_compact(1.0 - number)}"

    return near_one


def _verdict_text(verdict: dict[str, Any], limit: int = 2) -> str:
    """The verdict's first ``limit`` failures in words (the rest counted; all are in the
    report)."""
    failures = verdict.get("failures") or []
    if failures:
        text = "; ".join(
            failure_text(f, _number_for(str(f.get("metric"))), "over by", _compact)
            for f in failures[:limit]
        )
        if len(failures) > limit:
            text += f"; +{len(failures) - limit} more"
        return text
    return verdict_message(verdict)


def _failure_lines(claim: ClaimSummary, width: int) -> list[str]:
    lines: list[str] = []
    for v in claim.failing[:MAX_EXPANDED]:
        label = case_label(v)
        lines += wrap_lines(f"{label}: {_shorten_numbers(_verdict_text(v))}", width, INDENT)
        passes = (v.get("evidence") or {}).get("bound_that_passes")
        if passes is not None:
            value = _number_for(str(v.get("metric")))(passes)
            lines += wrap_lines(f"a bound of {value} would have held", width, INDENT + "  ")
    rest = claim.failing[MAX_EXPANDED:]
    if rest:
        names = ", ".join(case_label(v) for v in rest[:8]) + (", …" if len(rest) > 8 else "")
        lines += wrap_lines(
            f"… and {len(rest)} more failing: {names} (-v lists every case)", width, INDENT
        )
    if claim.no_outputs:
        lines += wrap_lines(
            f"no outputs on {len(claim.no_outputs)} case(s): the runner failed (see above)",
            width,
            INDENT,
        )
    return lines


def locate_hint(result: dict[str, Any], claim: ClaimSummary, claims: list[ClaimSummary]) -> str:
    """The command that locates where a failing per-case claim's first failing case parts
    (``paritygate locate SPEC --claim ID --case CASE``); empty for dataset and speed claims."""
    from ..locate import locate_command_line

    case = next((v.get("case") for v in claim.failing if v.get("case") is not None), None)
    spec = result.get("spec")
    if claim.passed or case is None or not spec or claim.metric == "speedup":
        return ""
    path = Path(str(spec))
    try:
        path = path.relative_to(Path.cwd())
    except ValueError:
        pass
    command = locate_command_line(path, claim.claim_id, str(case))
    if sum(1 for c in claims if c.claim_id == claim.claim_id) > 1:
        command += f" --candidate {claim.candidate}"
    return command


def _case_rows(claim: ClaimSummary, width: int) -> list[str]:
    lines = []
    for v in claim.verdicts:
        value = claim._value(v.get("observed"))
        lines += _pack(
            [_mark(bool(v.get("passed"))), case_label(v), value], width, INDENT * 2, INDENT
        )
    return lines


def _environment_line(result: dict[str, Any]) -> str:
    differences = (result.get("provenance") or {}).get("unpinned_differences") or []
    if not differences:
        return ""
    subjects = []
    unlisted = 0
    for line in differences:
        if str(line).startswith("the reference also holds case"):
            unlisted += 1
            continue
        subject = str(line).split(": recorded", 1)[0]
        subject = subject.removeprefix("package ")
        subjects.append(subject)
    if unlisted:
        subjects.append(f"{unlisted} recorded case(s) the spec no longer lists")
    return (
        f"info: {len(differences)} unpinned difference(s) since the reference was recorded "
        f"({', '.join(subjects)}); not checked, listed in the report"
    )


def render_lines(
    result: dict[str, Any], *, width: int = 80, verbose: bool = False, report: str | None = None
) -> list[tuple[str, str]]:
    """The whole terminal output as (text, style) lines, none longer than ``width`` unless a
    single name or number is."""
    out: list[tuple[str, str]] = []
    groups = run_error_groups(result.get("errors") or [])
    total = _all_cases(result, groups)
    for group in groups:
        for i, line in enumerate(wrap_lines(f"ERROR {group.headline(total)}", width)):
            out.append((line, "red" if i == 0 else ""))
        if group.detail:
            for line in group.detail.splitlines()[-12:]:
                out.append((INDENT + line, "dim"))
    drift = result.get("drift") or []
    if drift:
        out.append(
            (
                "DRIFT: something pinned shifted (this does not say the candidate is wrong):",
                "bold red",
            )
        )
        for item in drift:
            text = f"{item.get('kind')}: {item.get('subject')}"
            if item.get("expected") is not None or item.get("observed") is not None:
                text += f": expected {item.get('expected')}, found {item.get('observed')}"
            if item.get("detail"):
                text += f" ({item['detail']})"
            out += [(line, "") for line in wrap_lines(text, width, "  ")]
    for warning in (result.get("provenance") or {}).get("warnings") or []:
        out += [(line, "yellow") for line in wrap_lines(f"warning: {warning}", width, "")]
    claims = claim_summaries(result)
    for claim, lines in _claim_rows(claims, width) if claims else []:
        style = "" if claim.passed else "bold red"
        for i, line in enumerate(lines):
            out.append((line, style if i == 0 else ""))
        if not claim.passed:
            out += [(line, "") for line in _failure_lines(claim, width)]
            hint = locate_hint(result, claim, claims)
            if hint:
                out += [(line, "") for line in wrap_lines(f"where: {hint}", width, INDENT)]
        if verbose:
            out += [(line, "dim") for line in _case_rows(claim, width)]
    for item in result.get("not_evaluated") or []:
        text = f"not evaluated: {item.get('claim_id')} ({item.get('reason', '')})"
        out += [(line, "yellow") for line in wrap_lines(text, width, "")]
    env = _environment_line(result)
    if env:
        out += [(line, "dim") for line in wrap_lines(env, width, "")]
    # The CPU decides how framework kernels round: its line is shown whole.
    for difference in (result.get("provenance") or {}).get("unpinned_differences") or []:
        if str(difference).startswith("cpu"):
            out += [(line, "dim") for line in wrap_lines(f"info: {difference}", width, "")]
    out += [(line, "bold") for line in wrap_lines(verdict_line(result), width, "")]
    if report:
        out.append((f"report: {display_text(report)}", ""))
    return out


def print_result(
    target: Any, result: dict[str, Any], *, verbose: bool = False, report: str | None = None
) -> None:
    """Print :func:`render_lines` on a rich console at its width."""
    from rich.text import Text

    for text, style in render_lines(result, width=target.width, verbose=verbose, report=report):
        line = Text(text, style=style)
        if text.startswith(("pass ", "FAIL ")):
            line.stylize("green" if text.startswith("pass") else "bold red", 0, 4)
        target.print(line, soft_wrap=True)


def console(stderr: bool = False) -> Any:
    """A rich console for the CLI. On a terminal it takes the terminal's width; piped into a CI
    log or a file it is 100 wide unless COLUMNS says otherwise (the output never needs more)."""
    import os
    import sys

    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    width = None
    if not stream.isatty() and not os.environ.get("COLUMNS"):
        width = PIPED_WIDTH
    return Console(stderr=stderr, highlight=False, soft_wrap=True, width=width)


PIPED_WIDTH = 100  # the CLI's width piped into a CI log or a file, COLUMNS unset


def terminal_width(stderr: bool = False) -> int:
    """The width plain CLI output is wrapped to, by the rule of :func:`console`: COLUMNS when
    set, else the terminal's width, else (piped) :data:`PIPED_WIDTH`."""
    import os
    import shutil
    import sys

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = sys.stderr if stderr else sys.stdout
    if not stream.isatty():
        return PIPED_WIDTH
    return shutil.get_terminal_size((PIPED_WIDTH, 24)).columns


def fitted(text: str, width: int) -> list[str]:
    """Plain text fitted to ``width``: each line wrapped at spaces (:func:`wrap_lines`), its
    continuation indented two past the line's own indent; a path or number is never split."""
    out: list[str] = []
    for line in str(text).splitlines() or [""]:
        stripped = line.lstrip(" ")
        if len(line) <= width or not stripped:
            out.append(line)
        else:
            out.extend(wrap_lines(stripped, width, line[: len(line) - len(stripped)]))
    return out


def verdict_table(result: dict[str, Any], *, verbose: bool = False) -> Any:
    """The run as a rich renderable (a group of lines fitted to the console's width)."""
    from rich.console import Console, ConsoleOptions, RenderResult
    from rich.text import Text

    class _Run:
        def __rich_console__(self, con: Console, options: ConsoleOptions) -> RenderResult:
            for text, style in render_lines(result, width=options.max_width, verbose=verbose):
                line = Text(text, style=style, no_wrap=True, overflow="ignore")
                if text.startswith(("pass ", "FAIL ")):
                    line.stylize("green" if text.startswith("pass") else "bold red", 0, 4)
                yield line

    return _Run()
