"""pytest plugin (registered through the ``pytest11`` entry point): a project's own test suite
enforces its claims.

Fixtures:

- ``paritygate_gate``: a callable ``gate(spec, claim=None, case=None) -> GateResult`` that runs the
  gate on a whole spec, or on one claim and/or one case, and fails the test with the Markdown
  summary when the gate does not pass (a violated claim, drift, a runner error, or a run that
  evaluated nothing). Speed claims are listed as not evaluated: they are measured by
  ``paritygate gate`` on their hardware class, never inside a unit-test suite;
- ``paritygate_claim``: shorthand for gating one claim, ``claim(spec, claim_id, case=None)``;
- ``paritygate_paired``: the paired oracle, ``paired(baseline, candidate, **options) ->
  PairedResult`` (options of :func:`paritygate.paired.paired`): runs both orders in the test's
  process and fails the test with every differing run, output and difference when a check fails.

A relative spec path is resolved against the folder of the test file that gates it.

``--paritygate-record`` re-records the references of every spec gated in the run, deliberately,
and still fails each test that gated (``re-recorded: re-run without --paritygate-record``), so a
re-record is never a silent pass. ``--paritygate-reports DIR`` writes the reports of each gate
run under DIR.

Results are collected into ``config.stash`` while tests run and reported once, in a
``paritygate`` section of the terminal summary that lists every claim gated in the session.

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
        from .reports import render_markdown, write_all

        path = _resolve(spec, request)
        run = GatedRun(request.node.nodeid, path, claim, case)
        state.runs.append(run)
        if state.record:
            # Each spec is recorded once per session, however many tests gate it.
            if path not in state.recorded_specs:
                try:
                    _record(path)
                except UserError as exc:
                    pytest.fail(
                        f"paritygate: recording {path} failed: {exc.one_line()}", pytrace=False
                    )
                state.recorded_specs.add(path)
            run.recorded = True
            pytest.fail(
                f"re-recorded: re-run without --paritygate-record (references of {path})",
                pytrace=False,
            )
        try:
            result = _run_gate(path, claim, case)
        except UserError as exc:
            pytest.fail(f"paritygate: {exc.one_line()}", pytrace=False)
        data = result.to_dict()
        run.result = data
        if state.reports_dir is not None:
            write_all(data, state.reports_dir / _safe_name(request.node.nodeid))
        if not result:
            text = render_markdown(data)
            if data.get("drift"):
                text += (
                    "\nOnce the shift is understood, re-record deliberately with "
                    "--paritygate-record (that run fails too, by design).\n"
                )
            pytest.fail(text, pytrace=False)
        return result

    return gate


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
    if state is None or not state.runs:
        return
    from .reports._common import case_label, fmt

    terminalreporter.section("paritygate")

    def shown(path: Path) -> str:
        try:
            return str(path.relative_to(config.rootpath))
        except ValueError:
            return str(path)

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
            terminalreporter.write_line(f"RE-RECORDED {shown(run.spec)} ({scope}) in {run.nodeid}")
            continue
        if run.result is None:
            terminalreporter.write_line(f"ERROR {shown(run.spec)} ({scope}) in {run.nodeid}")
            continue
        terminalreporter.write_line(f"{shown(run.spec)} ({scope}) in {run.nodeid}:")
        for verdict in run.result.get("verdicts") or []:
            unit = f" {verdict['unit']}" if verdict.get("unit") else ""
            word = "pass" if verdict.get("passed") else "FAIL"
            terminalreporter.write_line(
                f"  {word:4} {verdict.get('claim_id')} ({verdict.get('candidate')}) "
                f"{case_label(verdict)}: {verdict.get('metric')} {fmt(verdict.get('observed'))}{unit}"
                f" (bound {fmt(verdict.get('bound'))}{unit})"
            )
        for item in run.result.get("not_evaluated") or []:
            terminalreporter.write_line(
                f"  skip {item.get('claim_id')}: not evaluated ({item.get('reason')})"
            )
        for item in run.result.get("drift") or []:
            terminalreporter.write_line(
                f"  DRIFT {item.get('kind')} {item.get('subject')}: expected {item.get('expected')}, "
                f"observed {item.get('observed')}"
            )
        for message in run.result.get("errors") or []:
            terminalreporter.write_line(f"  ERROR {str(message).splitlines()[0]}")
