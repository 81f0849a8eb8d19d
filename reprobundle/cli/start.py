"""The start of the process, before anything heavy loads (the standard library only): Ctrl-C and SIGTERM end it
quietly, and the tests can pause it at a named moment. Its own module, so that runner.py imports it without
importing back from the package that imports runner."""

from __future__ import annotations

import os
import signal
import sys

START_PAUSE_ENV = "REPROBUNDLE_START_PAUSE"  # the tests' hook: see start_point
_SAID = {signal.SIGINT: b"interrupted\n", signal.SIGTERM: b"terminated\n"}


def _exit_quietly(signum, frame) -> None:
    try:
        os.write(2, _SAID.get(signum, b"terminated\n"))
    except OSError:
        pass
    os._exit(128 + signum)  # 130, 143: what main says for the same signals (errors.EXIT_INTERRUPTED, ...)


def quiet_signals() -> None:
    """Until `main` takes over (and again once it is done), SIGINT and SIGTERM end the process at once with one line
    ("interrupted", "terminated") and 128 + the signal: loading the app takes a moment, and a signal then must not
    print a traceback. A signal the process was started ignoring (a background job's SIGINT) stays ignored."""
    if sys.platform == "win32":
        return
    for signum in _SAID:
        try:
            if signal.getsignal(signum) is not signal.SIG_IGN:
                signal.signal(signum, _exit_quietly)
        except (ValueError, OSError):  # not the main thread
            return


def is_quiet_handler(handler) -> bool:
    return handler is _exit_quietly


def start_point(name: str) -> None:
    """A named moment of the start ("entry": handlers set, nothing loaded; "loading": typer loaded, the commands not
    yet; "main": main has taken over). With REPROBUNDLE_START_PAUSE=NAME the process says "paused at NAME" on stdout
    and waits here for a signal: the tests send Ctrl-C at each moment without racing the start."""
    if os.environ.get(START_PAUSE_ENV) != name:
        return
    os.write(1, f"paused at {name}\n".encode())
    while True:
        signal.pause()
