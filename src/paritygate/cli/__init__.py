"""The ``paritygate`` command line. It only parses arguments and calls the library.

Each command lives in its own module of this package and is imported only when it runs (or when
``--help`` lists it), so ``paritygate --help`` starts fast and needs no framework. User errors
end as one line on stderr with exit 2 (3 for drift, 4 for a run this machine cannot make);
internal errors keep their traceback.

This module imports nothing but the standard library: :func:`main` puts its signal handling in
place before click, numpy or any command is imported, so that a Ctrl-C or a SIGTERM at any
moment, start-up included, ends as ``paritygate: aborted (SIGINT)`` with exit 2, after every
process the run started (a command runner's port with its whole process group, a worker) was
ended.
"""

from __future__ import annotations

import sys

__all__ = ["main", "cli", "COMMANDS", "ABORTED"]

# The exit code of an aborted run: like a usage error, nothing was judged.
ABORTED = 2


def main(argv: list[str] | None = None) -> int:
    """Console entry point: user errors become one line and an exit code, never a traceback;
    an abort ends the processes the run started and says so in one line."""
    saved: dict[int, object] = {}
    try:
        # everything, the first import included, inside the try: a Ctrl-C at any moment from
        # here on ends in one line
        import signal

        from ..children import terminate_as_interrupt

        saved = {
            getattr(signal, n): signal.getsignal(getattr(signal, n))
            for n in _HANDLED
            if hasattr(signal, n)
        }
        try:
            terminate_as_interrupt()
        except ValueError:  # not the main thread: the caller keeps its own handling
            saved = {}
        return _run(argv)
    except KeyboardInterrupt as exc:
        from ..children import Terminated, end_all

        end_all()
        name = str(exc) if isinstance(exc, Terminated) else "SIGINT"
        sys.stderr.write(f"paritygate: aborted ({name})\n")
        return ABORTED
    finally:
        if saved:
            import signal

            for number, handler in saved.items():
                signal.signal(number, handler)  # type: ignore[arg-type]


# The signals whose handlers main() sets for its run and restores after it.
_HANDLED = ("SIGINT", "SIGTERM", "SIGHUP")


def _run(argv: list[str] | None) -> int:
    import click

    from ..children import end_all
    from ..errors import UserError
    from ._app import cli, cli_words

    try:
        result = cli.main(args=argv, prog_name="paritygate", standalone_mode=False)
    except UserError as exc:
        click.echo(f"paritygate: {exc.label}: {cli_words(exc.one_line(), argv)}", err=True)
        return exc.exit_code
    except click.exceptions.Abort as exc:
        # click turns a KeyboardInterrupt inside a command into Abort; an end of input at a
        # prompt is an Abort too
        cause = exc.__cause__ or exc.__context__
        if isinstance(cause, KeyboardInterrupt):
            raise cause from None
        click.echo("paritygate: aborted (no answer on standard input)", err=True)
        return ABORTED
    except click.UsageError as exc:
        # One line like every other user error, with where to look instead of the whole usage.
        command = exc.ctx.command_path if exc.ctx is not None else "paritygate"
        message = " ".join(exc.format_message().split())
        click.echo(f"paritygate: error: {message} (see '{command} --help')", err=True)
        return 2
    except click.ClickException as exc:
        exc.show()
        return 2
    finally:
        end_all()  # nothing a command started outlives it
    if isinstance(result, int):
        return result
    return 0


def __getattr__(name: str) -> object:
    if name in ("cli", "COMMANDS"):
        from . import _app

        return getattr(_app, name)
    raise AttributeError(f"module 'paritygate.cli' has no attribute {name!r}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
