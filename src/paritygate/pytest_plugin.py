"""pytest plugin (registered through the ``pytest11`` entry point): a project's own test suite
enforces its claims.

Fixtures:

- ``paritygate_gate``: a callable ``gate(spec, claim=None, case=None) -> GateResult`` that runs the
  gate on a whole spec, or on one claim and/or one case, and fails the test with the Markdown
  summary when the gate does not pass (a violated claim, drift, a runner error, or a run that
  evaluated nothing). Speed claims are listed as not evaluated: they are measured by
  ``paritygate gate`` on their hardware class, never inside a unit-test suite;
- ``paritygate_claim``: shorthand for gating one claim, ``claim(spec, claim_id, case=None)``;
- ``paritygate_baseline``: ``baseline(name, actual, **bounds)``, the zero-configuration start:
  the first run writes ``baselines/<name>.safetensors`` (with provenance) beside the test file
  and fails; later runs compare (exactly unless bounds are given);
  ``--paritygate-update-baselines`` re-records what differs, fails with the difference, and lists
  baselines no test used;
- ``paritygate_paired``: the paired oracle, ``paired(baseline, candidate, **options) ->
  PairedResult`` (options of :func:`paritygate.paired.paired`): runs both orders in the test's
  process and fails the test with every differing run, output and difference when a check fails.

A relative spec path is resolved against the folder of the test file that gates it.

``--paritygate-record`` re-records the references of every spec gated in the run, deliberately,
and still fails each test that gated (``re-recorded: re-run without --paritygate-record``), so a
re-record is never a silent pass. ``--paritygate-reports DIR`` writes the reports of each gate
run under DIR.

A failed gate's first line (what pytest's short summary shows) names the claim, the case and the
excess; the body is the gate's terminal output. Results are collected into ``config.stash`` while
tests run and reported once, in a ``paritygate`` section of the terminal summary: one line per
claim and candidate, failing cases under it, passing cases only with ``-v``.

Importing :mod:`paritygate` never imports this module or pytest.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

__all__ = ["GatedRun", "PluginState", "state_key"]


@dataclass
class GatedRun:
    """One gate call made by one test."""

    nodeid: str
    spec: Path
    claim: str | None
    case: str | None
    result: dict[str, Any] | None = None  # GateResult.to_dict(); None when re-recorded
    recorded: bool = False


@dataclass
class PluginState:
    """What the plugin keeps for a pytest session (in ``config.stash[state_key]``)."""

    record: bool = False
    reports_dir: Path | None = None
    runs: list[GatedRun] = field(default_factory=list)
    recorded_specs: set[Path] = field(default_factory=set)
    update_baselines: bool = False
    baseline_dirs: set[Path] = field(default_factory=set)


state_key = pytest.StashKey[PluginState]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("paritygate", "paritygate claims")
    group.addoption(
        "--paritygate-record",
        action="store_true",
        default=False,
        help="re-record the references of every spec gated in this run; the tests that gate "
        "still fail, so a re-record is never a silent pass",
    )
    group.addoption(
        "--paritygate-update-baselines",
        action="store_true",
        default=False,
        help="re-record every baseline that differs (paritygate_baseline, assert_parity with "
        "baseline=); those tests fail with the difference to review, and the summary lists "
        "baselines no test used",
    )
    group.addoption(
        "--paritygate-reports",
        metavar="DIR",
        default=None,
        help="write the reports (result.json, summary.md, junit.xml, report.html) of each gate "
        "run under DIR",
    )


def pytest_configure(config: pytest.Config) -> None:
    reports = config.getoption("--paritygate-reports", default=None)
    config.stash[state_key] = PluginState(
        record=bool(config.getoption("--paritygate-record", default=False)),
        reports_dir=Path(reports).absolute() if reports else None,
        update_baselines=bool(config.getoption("--paritygate-update-baselines", default=False)),
    )


def _resolve(spec: str | Path, request: pytest.FixtureRequest) -> Path:
    path = Path(spec)
    if not path.is_absolute():
        path = Path(request.path).parent / path
    return path


def _safe_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_") or "run"


def _run_gate(spec: Path, claim: str | None, case: str | None) -> Any:
    from .gate import run_gate
    from .spec import load_spec

    return run_gate(
        load_spec(spec),
        claims=[claim] if claim is not None else None,
        cases=[case] if case is not None else None,
        speed=False,  # speed claims are gate runs on their hardware class, not unit tests
    )


def _record(spec: Path) -> None:
    from .references import record
    from .spec import load_spec

    record(load_spec(spec))


def _gate_function(request: pytest.FixtureRequest) -> Callable[..., Any]:
    state = request.config.stash[state_key]

    def gate(spec: str | Path, claim: str | None = None, case: str | None = None) -> Any:
        """Gate ``spec`` (one claim and/or one case when given); fail the test unless it passes."""
        from .errors import UserError
        from .reports import write_all

        path = _resolve(spec, request)
        run = GatedRun(request.node.nodeid, path, claim, case)
        state.runs.append(run)
        if state.record:
            # Each spec is recorded once per session, however many tests gate it.
            if path not in state.recorded_specs:
                problem = None
                try:
                    _record(path)
                except UserError as exc:
                    problem = f"paritygate: recording {path} failed: {exc.one_line()}"
                if problem is not None:  # outside the except: one error, not a chained pair
                    pytest.fail(problem, pytrace=False)
                state.recorded_specs.add(path)
            run.recorded = True
            pytest.fail(
                f"re-recorded: re-run without --paritygate-record (references of {path})",
                pytrace=False,
            )
        problem = None
        try:
            result = _run_gate(path, claim, case)
        except UserError as exc:
            problem = f"paritygate: {exc.one_line()}"
            if "`paritygate record" in problem:
                problem += " (in a pytest run: pytest --paritygate-record)"
        if problem is not None:  # outside the except: one error, not a chained pair
            pytest.fail(problem, pytrace=False)
        data = result.to_dict()
        run.result = data
        if state.reports_dir is not None:
            write_all(data, state.reports_dir / _safe_name(request.node.nodeid))
        if not result:
            text = failure_message(data)
            if data.get("drift"):
                text += (
                    "\nOnce the shift is understood, re-record deliberately with "
                    "--paritygate-record (that run fails too, by design).\n"
                )
            pytest.fail(text, pytrace=False)
        return result

    return gate


def headline(data: dict[str, Any]) -> str:
    """The first line of a failed gate: what pytest's short summary shows. Names the first
    violated claim, its case and by how much, and counts the rest."""
    from .reports._common import fmt
    from .reports.terminal import run_error_groups

    failing = [v for v in data.get("verdicts") or [] if not v.get("passed")]
    more = len(failing) - 1
    if data.get("drift"):
        item = data["drift"][0]
        return f"paritygate DRIFT: {item.get('kind')} {item.get('subject')} shifted"
    groups = run_error_groups(data.get("errors") or [])
    if groups and not any(v.get("observed") is not None for v in failing):
        return "paritygate: " + groups[0].headline(0).replace(" on 0/", " on ")
    if not failing:
        return "paritygate FAIL: " + (str((data.get("errors") or ["nothing evaluated"])[0]))
    v = failing[0]
    # Most important first: pytest cuts the short summary at the terminal's width.
    where = f" @ {v['case']}" if v.get("case") is not None else ""
    text = f"{v.get('claim_id')}{where}: "
    failures = v.get("failures") or []
    if v.get("excess") is not None:
        text += (
            f"over by {fmt(v.get('excess'), compact=True)} ({v.get('metric')} "
            f"{fmt(v.get('observed'), compact=True)}, bound {fmt(v.get('bound'), compact=True)})"
        )
    elif failures:
        f = failures[0]
        text += f"{f.get('metric')} {f.get('where', '')} {f.get('detail', '')}".strip()
    text += f" [{v.get('candidate')}]"
    if more > 0:
        text += f" +{more} more failing"
    return text


def failure_message(data: dict[str, Any], width: int = 100) -> str:
    """Headline, then the gate's terminal lines (claims, failures expanded) at ``width``."""
    from .reports.terminal import render_lines

    lines = [text for text, _ in render_lines(data, width=width)]
    return headline(data) + "\n" + "\n".join(lines)


@pytest.fixture
def paritygate_gate(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``gate(spec, claim=None, case=None) -> GateResult``; fails the test when the gate fails."""
    return _gate_function(request)


@pytest.fixture
def paritygate_claim(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``claim(spec, claim_id, case=None) -> GateResult``: gate one claim of ``spec``."""
    gate = _gate_function(request)

    def claim(spec: str | Path, claim_id: str, case: str | None = None) -> Any:
        return gate(spec, claim=claim_id, case=case)

    return claim


@pytest.fixture
def paritygate_baseline(request: pytest.FixtureRequest) -> Callable[..., Any]:
    """``baseline(name, actual, **bounds) -> Comparison``: compare ``actual`` against the stored
    baseline ``name`` in ``baselines/`` beside the test file. The first run writes it (with its
    provenance) and fails ("baseline written; review and re-run"); ``--paritygate-update-baselines``
    re-records a baseline that differs and fails with the difference."""
    from .testing import assert_parity

    state = request.config.stash[state_key]
    folder = Path(request.path).parent / "baselines"
    state.baseline_dirs.add(folder)

    def check(name: str, actual: Any, **bounds: Any) -> Any:
        __tracebackhide__ = True
        return assert_parity(
            actual, baseline=name, baseline_dir=folder, update=state.update_baselines, **bounds
        )

    return check


@pytest.fixture
def paritygate_paired() -> Callable[..., Any]:
    """``paired(baseline, candidate, **options) -> PairedResult``; fails the test unless both
    checks hold in every order (byte equality, or the given tolerance for check (a))."""
    from .paired import paired

    def check(baseline: Callable[[], Any], candidate: Callable[[], Any], **options: Any) -> Any:
        result = paired(baseline, candidate, **options)
        if not result:
            pytest.fail(result.summary(), pytrace=False)
        return result

    return check


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    state = config.stash.get(state_key, None)
    if state is None:
        return
    if state.update_baselines and state.baseline_dirs:
        from .testing import orphaned_baselines

        orphans = orphaned_baselines(sorted(state.baseline_dirs))
        if orphans:
            terminalreporter.section("paritygate baselines")
            terminalreporter.write_line(
                f"{len(orphans)} baseline(s) no test used in this run (delete them if their "
                "tests are gone):"
            )
            for path in orphans:
                terminalreporter.write_line(f"  {path}")
    if not state.runs:
        return
    from .reports._common import case_label, fmt
    from .reports.terminal import claim_summaries, run_error_groups, wrap_lines

    verbose = config.getoption("verbose", 0) > 0
    width = _width(config)

    terminalreporter.section("paritygate")

    def shown(path: Path) -> str:
        try:
            return str(path.relative_to(config.rootpath))
        except ValueError:
            return str(path)

    def write(text: str, indent: str = "") -> None:
        for line in wrap_lines(text, width, indent):
            terminalreporter.write_line(line)

    for run in state.runs:
        scope = " ".join(
            part
            for part in (
                f"claim {run.claim}" if run.claim else "all claims",
                f"case {run.case}" if run.case else "",
            )
            if part
        )
        if run.recorded:
            write(f"RE-RECORDED {shown(run.spec)} ({scope}) in {run.nodeid}")
            continue
        if run.result is None:
            write(f"ERROR {shown(run.spec)} ({scope}) in {run.nodeid}")
            continue
        write(f"{shown(run.spec)} ({scope}) in {run.nodeid}:")
        # A runner that failed first, once per runner and message (not once per case): the
        # claims it leaves unevaluated are counted under them, not listed case by case.
        groups = run_error_groups(run.result.get("errors") or [])
        total = len({v.get("case") for v in run.result.get("verdicts") or []} - {None})
        for group in groups:
            write(f"ERROR {group.headline(total)}", "  ")
        for summary in claim_summaries(run.result):
            word = "pass" if summary.passed else "FAIL"
            cells = [summary.cases_cell(), summary.worst_cell(), summary.bound_cell()]
            cells.append(summary.margin_cell())
            write(
                f"{word} {summary.claim_id} ({summary.candidate}): "
                + "  ".join(c for c in cells if c),
                "  ",
            )
            if verbose or not summary.passed:
                for verdict in summary.verdicts:
                    if verdict in summary.no_outputs:
                        continue
                    if verdict.get("passed") and not verbose:
                        continue  # passing cases only with -v
                    word = "pass" if verdict.get("passed") else "FAIL"
                    write(
                        f"{word} {case_label(verdict)}: {verdict.get('metric')} "
                        f"{fmt(verdict.get('observed'))} (bound {fmt(verdict.get('bound'))})",
                        "    ",
                    )
            if summary.no_outputs:
                write(
                    f"not evaluated on {len(summary.no_outputs)} case(s): the runner failed "
                    "(ERROR above)",
                    "    ",
                )
        for item in run.result.get("not_evaluated") or []:
            write(f"skip {item.get('claim_id')}: not evaluated ({item.get('reason')})", "  ")
        for item in run.result.get("drift") or []:
            write(
                f"DRIFT {item.get('kind')} {item.get('subject')}: expected "
                f"{item.get('expected')}, observed {item.get('observed')}",
                "  ",
            )


def _width(config: pytest.Config) -> int:
    """The terminal's width as pytest sees it (COLUMNS, else the terminal, else 80)."""
    try:
        return int(config.get_terminal_writer().fullwidth)
    except Exception:  # noqa: BLE001 - a writer without a width: pytest's default
        return 80
