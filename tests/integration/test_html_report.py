"""The HTML report: a summary per claim first, failures expanded, cases collapsed, no empty
plots, readable numbers, provenance as a table; checked in a real headless Chromium."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

from paritygate.reports import render_html
from paritygate.results import ClaimVerdict, Failure, GateResult

DEMO_RESULT = Path(__file__).resolve().parents[1] / "data" / "demo-result.json"
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
SCREEN = (1280, 800)  # one screen


def _demo() -> dict:
    return json.loads(DEMO_RESULT.read_text())


def _failing_run() -> dict:
    verdicts = [
        ClaimVerdict(
            "probs-cosine",
            "onnx",
            f"case_{i}",
            True,
            "equivalence",
            "cosine",
            0.99999999932,
            observed=1 - 1e-12 * (i + 1),
        )
        for i in range(20)
    ]
    verdicts.append(
        ClaimVerdict(
            "probs-max-abs",
            "onnx",
            "case_7",
            False,
            "equivalence",
            "max_abs",
            1e-5,
            observed=3e-5,
            excess=2e-5,
            failures=[Failure("max_abs", 1e-5, 3e-5, 2e-5, where="probs at index 4")],
            evidence={"bound_that_passes": 3e-5},
        )
    )
    verdicts += [
        ClaimVerdict(
            "ids-exact", "onnx", f"case_{i}", True, "equivalence", "exact", 0, observed=0.0
        )
        for i in range(20)
    ]
    return GateResult(
        spec="parity.toml",
        verdicts=verdicts,
        provenance={
            "python": {"version": "3.11"},
            "packages": {"numpy": "2.0"},
            "seconds": {"onnx": {"case_0": 0.1}},
        },
    ).to_dict()


def test_summary_first_failures_expanded_cases_collapsed():
    html = render_html(_failing_run())
    claims, failures, every = (
        html.index(h) for h in ("<h2>Claims</h2>", "<h2>Failures</h2>", "<h2>Every case</h2>")
    )
    assert claims < failures < every
    summary = html[claims:failures]
    assert summary.count("<tr") == 1 + 3  # header + one row per claim, not per case
    assert "1 − cosine" in summary and "1-cosine 2e-11 @ case_19" in summary  # readable near 1
    assert "bound 6.8e-10" in summary and "34x margin" in summary
    assert "case_7</b>: max_abs at probs at index 4" in html[failures:every]
    assert "a bound of 3e-05 would have held" in html[failures:every]
    assert html[every:].count("<details>") >= 3 and "<details open" not in html
    # provenance as a table, not raw JSON
    provenance = html[html.index("<h2>Provenance</h2>") :]
    assert "<td>python</td><td>version: 3.11</td>" in provenance and '{"' not in provenance


def test_no_empty_plots():
    html = render_html(_failing_run())
    # cosine and max-abs have values to show; the all-zero exact claim gets no plot
    assert html.count("data:image/png;base64,") == 2
    assert "ids-exact — onnx" not in html


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "chromium is missing: `make test` installs it (apt-get install chromium)"
    return found


def _browser(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    command = [
        _chromium(),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        f"--user-data-dir={tmp_path / 'profile'}",
        *args,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, check=True)


def _measure(html: str, tmp_path: Path, *, open_all: bool = False) -> tuple[int, int]:
    """(page height, page width) in CSS pixels at 1280 px wide, laid out by Chromium."""
    script = (
        "<script>"
        + ("document.querySelectorAll('details').forEach(d => d.open = true);" if open_all else "")
        + "document.body.setAttribute('data-h', document.documentElement.scrollHeight);"
        "document.body.setAttribute('data-w', document.documentElement.scrollWidth);</script>"
    )
    probe = tmp_path / ("probe-open.html" if open_all else "probe.html")
    probe.write_text(html.replace("</body></html>", script + "</body></html>"))
    dom = _browser(
        [f"--window-size={SCREEN[0]},{SCREEN[1]}", "--dump-dom", probe.as_uri()], tmp_path
    ).stdout
    found = re.search(r'data-h="(\d+)" data-w="(\d+)"', dom)
    assert found, dom[-500:]
    return int(found[1]), int(found[2])


def test_demo_report_in_chromium_is_three_screens_at_most_and_never_overflows(tmp_path):
    html = render_html(_demo())
    height, width = _measure(html, tmp_path)
    assert height <= 3 * SCREEN[1], height
    assert width <= SCREEN[0], width
    # the measurement can fail: every section expanded, the same page is far taller
    open_height, open_width = _measure(html, tmp_path, open_all=True)
    assert open_height > 3 * SCREEN[1] and open_width <= SCREEN[0]
    # the screenshots are kept as test artifacts
    ARTIFACTS.mkdir(exist_ok=True)
    page = tmp_path / "report.html"
    page.write_text(html)
    shot = ARTIFACTS / "demo-report-1280.png"
    _browser(
        [f"--window-size={SCREEN[0]},{3 * SCREEN[1]}", f"--screenshot={shot}", page.as_uri()],
        tmp_path,
    )
    assert shot.stat().st_size > 10_000
