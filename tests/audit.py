"""What a block of code did, from Python's own audit events (sys.addaudithook): the processes it started and the
sockets it connected, in this process, any thread. Deterministic facts a test can assert instead of a wall-clock
bound ("it did not retry", "it started nothing", "it made one connection")."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

EVENTS = ("subprocess.Popen", "socket.connect")
_recorders: list[Recorded] = []
_lock = threading.RLock()
_installed = False


@dataclass
class Recorded:
    events: list[tuple[str, tuple]] = field(default_factory=list)

    @property
    def processes(self) -> list[tuple]:
        """(executable, args, cwd, env) of each subprocess started."""
        return [args for event, args in self.events if event == "subprocess.Popen"]

    def connects(self, port: int | None = None) -> list[tuple]:
        """The addresses connected to (those of one TCP port, when given)."""
        out = [args[1] for event, args in self.events if event == "socket.connect"]
        return [a for a in out if port is None or (isinstance(a, tuple) and len(a) >= 2 and a[1] == port)]


def _hook(event: str, args: tuple) -> None:
    if _recorders and event in EVENTS:
        with _lock:
            for rec in _recorders:
                rec.events.append((event, args))


@contextlib.contextmanager
def audited() -> Iterator[Recorded]:
    """Record the subprocesses started and sockets connected while the block runs."""
    global _installed
    with _lock:
        if not _installed:  # an audit hook cannot be removed: one for the session, idle outside these blocks
            sys.addaudithook(_hook)
            _installed = True
        rec = Recorded()
        _recorders.append(rec)
    try:
        yield rec
    finally:
        with _lock:
            _recorders.remove(rec)


@contextlib.contextmanager
def logged(name: str, level: int = logging.INFO) -> Iterator[list[logging.LogRecord]]:
    """The records logger `name` emits at `level` and above while the block runs, kept from its parents (so the
    CLI's own handlers print nothing more)."""
    logger = logging.getLogger(name)
    records: list[logging.LogRecord] = []
    handler = logging.Handler(level)
    handler.emit = records.append  # type: ignore[method-assign]
    saved = logger.level, logger.propagate
    logger.setLevel(level)
    logger.propagate = False
    logger.addHandler(handler)
    try:
        yield records
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.propagate = saved[1]
