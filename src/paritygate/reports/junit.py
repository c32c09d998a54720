"""JUnit XML: one testcase per claim x case, so CI systems show each claim like a test.

Shape (the common JUnit schema most CI systems read): ``<testsuites>`` holding one
``<testsuite>`` per candidate; a ``<testcase classname="paritygate.<candidate>.<claim>"
name="<case>">`` per verdict, with ``<failure>`` when the claim is violated. Claims that were not
evaluated are ``<skipped>`` testcases; drift and run errors are ``<error>`` testcases of a
``paritygate.run`` suite, and so is a result holding no verdict, no error and no drift.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from ._common import case_label, claim_groups, fmt, metric_value, unit_of, verdict_message

__all__ = ["render_junit"]

# XML 1.0 cannot hold most control characters; runner stderr may contain them.
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text: Any) -> str:
    return _INVALID_XML.sub("?", str(text))


def _suite(parent: ET.Element, name: str, timestamp: str) -> ET.Element:
    suite = ET.SubElement(parent, "testsuite", name=_clean(name))
    if timestamp:
        suite.set("timestamp", _clean(timestamp))
    return suite


def _finish_suite(suite: ET.Element) -> tuple[int, int, int, int]:
    cases = suite.findall("testcase")
    failures = sum(1 for c in cases if c.find("failure") is not None)
    errors = sum(1 for c in cases if c.find("error") is not None)
    skipped = sum(1 for c in cases if c.find("skipped") is not None)
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    suite.set("skipped", str(skipped))
    suite.set("time", "0")
    return len(cases), failures, errors, skipped


def render_junit(result: dict[str, Any]) -> str:
    root = ET.Element("testsuites", name="paritygate")
    timestamp = str(result.get("started") or "")

    by_candidate: dict[str, ET.Element] = {}
    for (claim_id, candidate), items in claim_groups(result).items():
        suite = by_candidate.get(candidate)
        if suite is None:
            suite = by_candidate[candidate] = _suite(root, f"paritygate.{candidate}", timestamp)
        for verdict in items:
            case = ET.SubElement(
                suite,
                "testcase",
                classname=_clean(f"paritygate.{candidate}.{claim_id}"),
                name=_clean(case_label(verdict)),
                time="0",
            )
            metric = verdict.get("metric")
            unit = f" {unit_of(verdict)}" if unit_of(verdict) else ""
            observed = metric_value(metric, verdict.get("observed"))
            bound = metric_value(metric, verdict.get("bound"))
            if verdict.get("passed"):
                out = ET.SubElement(case, "system-out")
                out.text = _clean(f"{metric} observed {observed}{unit} within bound {bound}{unit}")
                continue
            message = verdict_message(verdict)
            failure = ET.SubElement(
                case,
                "failure",
                message=_clean(message),
                type=_clean(verdict.get("oracle") or "claim"),
            )
            failure.text = _clean(
                "\n".join(
                    [
                        f"claim {claim_id} ({verdict.get('oracle')}), case {case_label(verdict)}, "
                        f"candidate {candidate}",
                        f"metric {metric}: observed {observed}{unit}, bound {bound}{unit}",
                        f"excess {fmt(verdict.get('excess'))}",
                        message,
                    ]
                )
            )

    run = _suite(root, "paritygate.run", timestamp)
    for item in result.get("not_evaluated") or []:
        case = ET.SubElement(
            run,
            "testcase",
            classname=_clean(f"paritygate.not-evaluated.{item.get('claim_id')}"),
            name="not evaluated",
            time="0",
        )
        ET.SubElement(case, "skipped", message=_clean(item.get("reason", "")))
    for item in result.get("drift") or []:
        case = ET.SubElement(
            run,
            "testcase",
            classname=_clean(f"paritygate.drift.{item.get('kind')}"),
            name=_clean(item.get("subject", "")),
            time="0",
        )
        text = (
            f"{item.get('kind')} {item.get('subject')}: expected {item.get('expected')}, "
            f"observed {item.get('observed')}"
        )
        if item.get("detail"):
            text += f" ({item['detail']})"
        error = ET.SubElement(case, "error", message=_clean(text), type="drift")
        error.text = _clean(text)
    for index, message in enumerate(result.get("errors") or []):
        case = ET.SubElement(
            run, "testcase", classname="paritygate.error", name=f"error {index + 1}", time="0"
        )
        head = str(message).splitlines()[0] if str(message) else "error"
        error = ET.SubElement(case, "error", message=_clean(head), type="run-error")
        error.text = _clean(message)
    if not result.get("verdicts") and not result.get("errors") and not result.get("drift"):
        # Said once: a run error (the gate's own "no claim was evaluated") or drift already
        # fails the file; this testcase is for a result that holds nothing at all.
        case = ET.SubElement(
            run, "testcase", classname="paritygate.run", name="claims evaluated", time="0"
        )
        text = "the gate evaluated no claim: a gate that ran nothing fails"
        ET.SubElement(case, "error", message=text, type="empty-run").text = text
    if not run.findall("testcase"):
        root.remove(run)

    totals = [0, 0, 0, 0]
    for suite in root.findall("testsuite"):
        for i, n in enumerate(_finish_suite(suite)):
            totals[i] += n
    root.set("tests", str(totals[0]))
    root.set("failures", str(totals[1]))
    root.set("errors", str(totals[2]))
    root.set("skipped", str(totals[3]))
    root.set("time", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
