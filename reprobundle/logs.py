"""Logging for what reprobundle decides on its own (retries, route fallbacks, cache hits, interpreter choices).

Every module logs to `logging.getLogger(__name__)`; nothing but warnings is shown unless asked: `--verbose` (INFO,
`-vv` DEBUG) or REPROBUNDLE_LOG=debug|info|warning. Log lines go to stderr, so `--json` output on stdout stays clean.
"""

from __future__ import annotations

import logging

from .config import settings

ENV = "REPROBUNDLE_LOG"
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


class _SafeFormatter(logging.Formatter):
    """Log lines are escaped for the terminal (text.clean): they may quote what a store or bundle holds."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        from .text import clean

        return clean(super().formatMessage(record), 2000)


def configure(verbosity: int = 0) -> None:
    """Show reprobundle's log at the level `verbosity` asks for (1: info, 2+: debug), else $REPROBUNDLE_LOG's; and
    without either, its warnings (a record skipped because it cannot be read...) as `warning: ...` lines."""
    level = {0: None, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    if level is None:
        level = _LEVELS.get(settings().log.lower())
    handler = logging.StreamHandler()
    if level is None:
        level = logging.WARNING
        handler.setFormatter(_SafeFormatter("warning: %(message)s"))
    else:
        handler.setFormatter(_SafeFormatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("reprobundle")
    root.handlers[:] = [handler]
    root.setLevel(level)
    root.propagate = False


def verbose() -> bool:
    """Whether the user asked for reprobundle's log (-v, or REPROBUNDLE_LOG=info|debug): commands then print what
    only a curious reader wants, such as where an investigation's time went."""
    return logging.getLogger("reprobundle").isEnabledFor(logging.INFO)


class Status(str):
    """A progress line that also says where the work is, for a progress display that shows phases, elapsed time and
    an ETA (render/progress.py): `phase` ("environment", "fetch", "compile", "round", "profile", "export",
    "reference", "publish", "done"), `done` of `total` units of the whole job (rounds for a replay). Anything that
    takes plain lines still gets one: a Status is a str."""

    phase: str
    done: int | None
    total: int | None

    def __new__(cls, text: str, phase: str = "", done: int | None = None, total: int | None = None) -> "Status":
        self = super().__new__(cls, text)
        self.phase, self.done, self.total = phase, done, total
        return self


def quiet_unraisable(unraisable) -> None:
    """sys.unraisablehook for the CLI: an exception Python cannot raise where it happened (a finalizer, a gc
    callback: Ctrl-C can land in jax's) prints no traceback. A swallowed interrupt or termination (a BaseException
    that is no Exception) still ends the command: the exit watchdog (store/scratch.py) ends it within seconds of the
    signal. Anything else is logged at debug (REPROBUNDLE_DEBUG=1 keeps Python's own report)."""
    if isinstance(unraisable.exc_value, Exception):
        logging.getLogger(__name__).debug("ignored in %r: %s", unraisable.object, unraisable.exc_value)
