"""The two exception roots of paritygate.

``UserError`` is everything a user can fix (bad input, a malformed spec, a missing file, a runner
that crashed): the CLI prints its message on one line with the hint and exits 2 (a runner's
failure, :class:`RunFailure`, exits 1: the gate records it as a failed check; a spec none of
whose claims holds for this machine's hardware class, :class:`WrongHardware`, exits 4), never a
traceback.
``InternalError`` is a
bug in paritygate itself: it keeps its traceback. Library code re-raises lower-level failures with
context (claim, output, shapes) ``from None`` so the message names what and where.
"""

from __future__ import annotations

import re

__all__ = [
    "ParitygateError",
    "UserError",
    "InputError",
    "SpecError",
    "DriftError",
    "RunFailure",
    "WrongHardware",
    "InternalError",
    "shorten",
    "failure_site",
]


# Characters of a wrapped exception's message kept on a one-line error.
MESSAGE_LIMIT = 160

_FRAME = re.compile(r'File "(?P<file>[^"]+)", line (?P<line>\d+)')


def shorten(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """``text`` on one line, cut at a space near ``limit`` characters with an ellipsis."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    cut = text[: limit - 1]
    space = cut.rfind(" ")
    if space > limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:") + "…"


def failure_site(frames: list[tuple[str, int]] | str) -> str | None:
    """``file:line`` where a failure arose in the user's code: of ``frames`` (file, line), outer
    to inner, or of the frames a Python traceback's text names, the innermost outside
    paritygate and outside the installed packages and the standard library (else the innermost
    outside paritygate), the file relative to the working folder where it lies inside it; None
    when there is no such frame."""
    import os
    import sys
    import sysconfig

    if isinstance(frames, str):
        frames = [(m["file"], int(m["line"])) for m in _FRAME.finditer(frames)]
    own = os.path.dirname(os.path.abspath(__file__)) + os.sep
    installed = tuple(
        os.path.abspath(p) + os.sep
        for p in {sys.prefix, sys.base_prefix, sysconfig.get_paths()["purelib"]}
    )
    theirs = [(f, n) for f, n in frames if not os.path.abspath(f).startswith(own)]
    users = [(f, n) for f, n in theirs if not os.path.abspath(f).startswith(installed)]
    chosen = (users or theirs or [None])[-1]
    if chosen is None:
        return None
    path, line = chosen
    try:
        rel = os.path.relpath(path)
        if not rel.startswith(".."):
            path = rel
    except ValueError:
        pass
    return f"{path}:{line}"


class ParitygateError(Exception):
    """Root of every error paritygate raises on purpose."""

    exit_code = 2


class UserError(ParitygateError):
    """Something the user can fix. ``hint`` says how, in one short sentence."""

    exit_code = 2
    label = "error"  # the CLI prints "paritygate: <label>: <message>"

    def __init__(self, message: str, *, hint: str | None = None, where: str | None = None):
        self.message = message
        self.hint = hint
        self.where = where
        text = f"{where}: {message}" if where else message
        super().__init__(text)

    def one_line(self) -> str:
        text = str(self)
        if self.hint:
            text += f" ({self.hint})"
        return " ".join(text.split())


class InputError(UserError):
    """An input (array, file, output tree) cannot be compared as given."""


class SpecError(UserError):
    """A spec file is malformed: names the file, the key and what was expected."""


class DriftError(UserError):
    """A pinned artifact or the environment changed (exit 3): re-record deliberately."""

    exit_code = 3


class RunFailure(UserError):
    """A runner did not produce usable outputs (crash, timeout, unparseable output, import).

    A gate failure (exit 1), not a spec error: the gate records it and goes on. The message names
    runner, case and kind, and carries the tail of the runner's stderr.
    """

    exit_code = 1

    def __init__(
        self,
        runner: str,
        case: str | None,
        kind: str,
        message: str,
        stderr: str = "",
        *,
        suggested_pass: str | None = None,
        site: str | None = None,
    ):
        self.runner = runner
        self.case = case
        self.kind = kind  # "crash", "timeout", "unparseable", "import"
        self.stderr = stderr
        # An in-process runner that failed as if handed the wrong argument: the ``pass`` style
        # its function seems to expect ("inputs", "path", "case").
        self.suggested_pass = suggested_pass
        self.site = site  # file:line of the user's code that raised, where known
        hint = f'set pass = "{suggested_pass}" in [runners.{runner}]' if suggested_pass else None
        where = f"runner {runner}" + (f", case {case}" if case else "")
        super().__init__(message, where=where, hint=hint)
        self.args = (self.describe(),)

    def __str__(self) -> str:
        return self.describe()

    def __reduce__(self):  # survives pickling to and from worker processes
        return (
            type(self),
            (self.runner, self.case, self.kind, self.message, self.stderr),
            {"suggested_pass": self.suggested_pass, "hint": self.hint, "site": self.site},
        )

    def describe(self) -> str:
        text = f"{self.where}: {self.kind}: {self.message}"
        if self.hint:
            text += f" ({self.hint})"
        if self.stderr.strip():
            text += "\n--- stderr ---\n" + self.stderr.rstrip()
        return text

    def one_line(self, limit: int = MESSAGE_LIMIT) -> str:
        """What failed and where, on one short line: runner, case, kind, the line of the
        runner's own code that raised (from the traceback), the exception cut at ``limit``
        characters, and the hint. The traceback or stderr stays in :meth:`describe` (and the
        gate's reports)."""
        at = self.site or failure_site(self.stderr)
        message = " ".join(self.message.split())
        last = self.stderr.strip().splitlines()[-1].strip() if self.stderr.strip() else ""
        if self.kind == "crash" and last and last not in message:
            # A command's own last words (its exception) say more than its exit status.
            message = f"{message}: {last}"
        text = f"{self.where}: {self.kind}" + (f" at {at}" if at else "") + ": "
        text += shorten(message, limit)
        if self.hint:
            text += f" ({self.hint})"
        return text


class WrongHardware(UserError):
    """Every claim the run would evaluate holds for another hardware class than this machine's
    (exit 4): nothing was violated, and nothing can be checked here."""

    exit_code = 4
    label = "cannot run here"


class InternalError(ParitygateError):
    """A bug in paritygate: reported with its traceback."""

    exit_code = 70
