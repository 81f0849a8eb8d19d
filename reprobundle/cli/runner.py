"""Running the app: every outcome becomes one line and an exit code. Loading this module registers the commands
(bundles.py, replays.py and sharing.py, on common.app in that order: the order --help lists them)."""

from __future__ import annotations

import functools
import signal
import sys
import threading
import traceback
import warnings
from typing import Optional

import typer

from .start import is_quiet_handler, start_point

start_point("loading")

from ..config import settings  # noqa: E402
from ..errors import (  # noqa: E402
    EXIT_BUG,
    EXIT_INTERRUPTED,
    EXIT_TERMINATED,
    ReproBundleError,
    is_no_space,
    no_space_error,
)
from ..logs import quiet_unraisable  # noqa: E402
from ..text import clean  # noqa: E402
from . import bundles, replays, sharing  # noqa: E402, F401  (they register their commands)
from .common import app, close_progress  # noqa: E402


class Interrupted(Exception):
    """Ctrl-C during a command, carried past the CLI framework to `main`, which says so: typer turns a
    KeyboardInterrupt into a silent exit 130 in some versions and into Abort (exit 1) in others."""


def _guard(callback):
    @functools.wraps(callback)
    def guarded(*args, **kwargs):
        try:
            return callback(*args, **kwargs)
        except KeyboardInterrupt:
            raise Interrupted() from None

    guarded.reprobundle_guarded = True  # type: ignore[attr-defined]
    return guarded


def _guard_commands() -> None:
    """Every registered command (whoever added it) turns Ctrl-C into Interrupted; idempotent."""
    for info in app.registered_commands:
        if info.callback is not None and not getattr(info.callback, "reprobundle_guarded", False):
            info.callback = _guard(info.callback)


def main(argv: Optional[list[str]] = None) -> int:
    """Entry point: runs the app and maps every outcome to one line and an exit code, never a traceback unless
    REPROBUNDLE_DEBUG=1: reprobundle's errors their own codes, Ctrl-C "interrupted" and 130, a bug 70."""
    debug = settings().debug == "1"
    _guard_commands()
    previous_sigterm = _catch_sigterm()
    previous_sigint = _raise_on_sigint()
    previous_unraisable = sys.unraisablehook
    if not debug:
        sys.unraisablehook = quiet_unraisable
    # JAX warns at every fork once its backend is up; this process forks only to exec a worker or tool at once
    # (subprocess), which is safe: the warning would only be noise between a command's lines
    warnings.filterwarnings("ignore", message=r"os\.fork\(\) was called", category=RuntimeWarning)
    from ..store.watchdog import install_exit_watchdog  # a signal ends the command within seconds, even in C code

    stop_watchdog = install_exit_watchdog(lambda signum: "interrupted" if signum == signal.SIGINT else "terminated")
    try:
        start_point("main")
        code = app(args=argv, prog_name="reprobundle", standalone_mode=False)
        return code if isinstance(code, int) else 0  # click returns typer.Exit codes in this mode
    except (Terminated, KeyboardInterrupt, Exception) as e:
        return _outcome(e, debug)
    finally:
        close_progress()
        sys.unraisablehook = previous_unraisable
        if stop_watchdog is not None:
            stop_watchdog()
        _put_back(signal.SIGTERM, previous_sigterm)
        _put_back(signal.SIGINT, previous_sigint)


def _outcome(e: BaseException, debug: bool) -> int:
    """The exit code of a command that raised `e`, once what happened is said on stderr."""
    if isinstance(e, typer.Exit):
        return e.exit_code
    if isinstance(e, typer.Abort):
        return 1
    close_progress()
    if isinstance(e, ReproBundleError):
        if debug:
            traceback.print_exc()
        typer.echo(f"error: {clean(e.message, 2000)}", err=True)  # one line: what a store holds is escaped, cut
        if e.hint:
            typer.echo(f"hint: {clean(e.hint, 1000)}", err=True)
        return e.exit_code
    if isinstance(e, Terminated):
        typer.echo("terminated", err=True)
        return EXIT_TERMINATED
    if isinstance(e, (KeyboardInterrupt, Interrupted)):
        typer.echo("interrupted", err=True)
        return EXIT_INTERRUPTED
    return _unexpected(e, debug)


def _unexpected(e: BaseException, debug: bool) -> int:
    """Usage errors (typer >= 0.29 bundles click: TyperException is their base), a full disk, and bugs."""
    from ..text import exception_line

    if is_no_space(e):  # a full disk met where no folder was named: still not a bug
        full = no_space_error(e)  # type: ignore[arg-type]
        typer.echo(f"error: {clean(full.message, 2000)}\nhint: {full.hint}", err=True)
        return full.exit_code
    if isinstance(e, typer.TyperException) and hasattr(e, "format_message"):
        typer.echo(f"error: {clean(e.format_message(), 2000)}", err=True)
        typer.echo("hint: reprobundle --help lists the commands; reprobundle COMMAND --help their options", err=True)
        return getattr(e, "exit_code", 2)
    if debug:
        traceback.print_exc()
    typer.echo(f"error: unexpected {exception_line(e)}", err=True)
    typer.echo("hint: this is a bug in reprobundle; rerun with REPROBUNDLE_DEBUG=1 and report the traceback",
               err=True)
    return EXIT_BUG


class Terminated(BaseException):
    """SIGTERM during a command: raised where the command is, so it unwinds like Ctrl-C does (its temporary folders
    and worker processes go with it) instead of dying on the spot; `main` says so and exits 143."""


def _catch_sigterm():
    """Turn SIGTERM into Terminated while the CLI runs (main thread only); returns the handler to put back."""
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum, frame):
        raise Terminated()

    try:
        return signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):
        return None


def _raise_on_sigint():
    """Ctrl-C raises KeyboardInterrupt where the command is (it unwinds: temporary folders and workers go with it)
    instead of the entry's quiet exit, which only covers loading; returns the handler to put back (None: none
    changed, as when main runs inside another program)."""
    if threading.current_thread() is not threading.main_thread():
        return None
    previous = signal.getsignal(signal.SIGINT)
    if not is_quiet_handler(previous):
        return None
    signal.signal(signal.SIGINT, signal.default_int_handler)
    return previous


def _put_back(signum: int, handler) -> None:
    if handler is not None:
        signal.signal(signum, handler)
