"""The JSON report: every datum of a gate run, the input of ``paritygate report``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..files import read_text
from ._common import FORMAT, FORMAT_VERSION

__all__ = ["render_json", "load_result"]


def render_json(result: dict[str, Any]) -> str:
    """The result as indented JSON (strict: no NaN or infinity literals)."""
    return json.dumps(result, indent=2, sort_keys=False, allow_nan=False) + "\n"


def load_result(path: str | Path) -> dict[str, Any]:
    """Read a gate result written by ``write_all`` (or ``GateResult.to_dict``) and check its format.

    A file that is not JSON, not a paritygate gate result, or of another format version is an
    :class:`~paritygate.errors.InputError` naming the file and what was found.
    """
    path = Path(path)
    text = read_text(path, "result file")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})", where=str(path)
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, dict) else type(data).__name__
        raise InputError(
            f"not a paritygate gate result (format {found!r}, expected {FORMAT!r})",
            where=str(path),
            hint="pass the result.json that `paritygate gate` wrote",
        )
    version = data.get("format_version")
    if version != FORMAT_VERSION:
        raise InputError(
            f"gate result format_version {version!r} is not supported "
            f"(this paritygate reads version {FORMAT_VERSION})",
            where=str(path),
            hint="re-run the gate with this paritygate version",
        )
    for key, kind in (
        ("verdicts", list),
        ("not_evaluated", list),
        ("drift", list),
        ("errors", list),
    ):
        if key in data and not isinstance(data[key], kind):
            raise InputError(f"key {key!r} must be a list", where=str(path))
    for index, verdict in enumerate(data.get("verdicts") or []):
        if not isinstance(verdict, dict) or "claim_id" not in verdict or "passed" not in verdict:
            raise InputError(f"verdicts[{index}] lacks claim_id or passed", where=str(path))
    return data
