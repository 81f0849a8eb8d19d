"""What a block of code did, from Python's own audit events (sys.addaudithook): the processes it started and the
sockets it connected, in this process, any thread. Deterministic facts a test can assert instead of a wall-clock
bound ("it did not retry", "it started nothing", "it made one connection")."""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field

EVENTS = ("subprocess.Popen", "socket.connect")  # what `audited()` records unless told other events
_recorders: list[Recorded] = []
_lock = threading.RLock()
_installed = False


@dataclass
class Recorded:
    events: list[tuple[str, tuple]] = field(default_factory=list)
    watched: frozenset[str] = frozenset(EVENTS)
    skip: Callable[[str, tuple], bool] | None = None  # asked in the hook (the raising code's frames are live)

    @property
    def processes(self) -> list[tuple]:
        """(executable, args, cwd, env) of each subprocess started."""
        return [args for event, args in self.events if event == "subprocess.Popen"]

    def connects(self, port: int | None = None) -> list[tuple]:
        """The addresses connected to (those of one TCP port, when given)."""
        out = [args[1] for event, args in self.events if event == "socket.connect"]
        return [a for a in out if port is None or (isinstance(a, tuple) and len(a) >= 2 and a[1] == port)]


def _hook(event: str, args: tuple) -> None:
    if not _recorders:
        return
    with _lock:
        for rec in _recorders:
            if event in rec.watched and not (rec.skip is not None and rec.skip(event, args)):
                rec.events.append((event, args))


@contextlib.contextmanager
def audited(events: Iterable[str] = EVENTS, skip: Callable[[str, tuple], bool] | None = None) -> Iterator[Recorded]:
    """Record the audit `events` (default: the subprocesses started and sockets connected) raised while the block
    runs, in this process, any thread; `skip(event, args)`, when given, drops an event as it is raised. The one audit
    hook of the test suite: test_fuzz's confinement check records through it too."""
    global _installed
    with _lock:
        if not _installed:  # an audit hook cannot be removed: one for the session, idle outside these blocks
            sys.addaudithook(_hook)
            _installed = True
        rec = Recorded(watched=frozenset(events), skip=skip)
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
