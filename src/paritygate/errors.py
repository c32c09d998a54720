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

__all__ = [
    "ParitygateError",
    "UserError",
    "InputError",
    "SpecError",
    "DriftError",
    "RunFailure",
    "WrongHardware",
    "InternalError",
]


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

    def __init__(self, runner: str, case: str | None, kind: str, message: str, stderr: str = ""):
        self.runner = runner
        self.case = case
        self.kind = kind  # "crash", "timeout", "unparseable", "import"
        self.stderr = stderr
        where = f"runner {runner}" + (f", case {case}" if case else "")
        super().__init__(message, where=where)
        self.args = (self.describe(),)

    def __str__(self) -> str:
        return self.describe()

    def __reduce__(self):  # survives pickling to and from worker processes
        return (type(self), (self.runner, self.case, self.kind, self.message, self.stderr))

    def describe(self) -> str:
        text = f"{self.where}: {self.kind}: {self.message}"
        if self.stderr.strip():
            text += "\n--- stderr ---\n" + self.stderr.rstrip()
        return text


class WrongHardware(UserError):
    """Every claim the run would evaluate holds for another hardware class than this machine's
    (exit 4): nothing was violated, and nothing can be checked here."""

    exit_code = 4
    label = "cannot run here"


class InternalError(ParitygateError):
    """A bug in paritygate: reported with its traceback."""

    exit_code = 70
