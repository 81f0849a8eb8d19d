"""Ending on a signal within seconds, even in C code: what this process made that must not outlive it (work
folders, temp files, leases, worker process groups) is tracked here, and a watchdog removes it and exits when the
command does not unwind in time.
"""

from __future__ import annotations

import os
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

# SIGINT and SIGTERM unwind a command (its `finally` blocks remove work folders and kill workers), but Python runs a
# signal's handler only when the main thread is back in the interpreter: a long call in C (an XLA compile, a
# factory's number crunching, a thread pool's shutdown) delays it by as long as it lasts. So the first signal also
# starts a watchdog: if the command has not ended EXIT_GRACE_S later, whatever this process made that must not
# outlive it (tracked here: work folders, temp files, leases, worker process groups) is removed and the process
# exits at once with the usual code (130, 143). While a command handles a signal itself (capture: Ctrl-C stops the
# program and what it captured is still packed), `handling_signals` holds the watchdog off.

EXIT_GRACE_S = 1.5
_exit_now = os._exit  # the real one, whatever user code running meanwhile may have replaced (capture/guard.py)
_tracked_paths: dict[str, None] = {}
_tracked_groups: dict[int, None] = {}
_tracking_lock = threading.Lock()
# Held while a command removes a tracked folder: the watchdog waits for it rather than racing it, since two
# rmtrees of one folder can each fail on what the other is deleting and leave the folder (seen under load).
_removal_lock = threading.Lock()
_REMOVAL_WAIT_S = 10.0
_held_off = 0
_ledger_lock = threading.RLock()  # re-entrant: a second signal's handler may run inside the first one's
_taken_unread = 0
_excused_untaken = 0


def track(path: str | Path) -> None:
    """Remove `path` (a folder or a file) if the process must end on a signal before it is untracked."""
    with _tracking_lock:
        _tracked_paths[str(path)] = None


def untrack(path: str | Path) -> None:
    with _tracking_lock:
        _tracked_paths.pop(str(path), None)


def remove_tracked(path: str | Path) -> None:
    """Remove the tracked folder or file `path` and untrack it; a signal's watchdog waits for this to end."""
    with _removal_lock:
        _remove(str(path))
        untrack(path)


def track_group(pgid: int) -> None:
    """Kill the process group `pgid` (a worker) if the process must end on a signal before it is untracked."""
    with _tracking_lock:
        _tracked_groups[pgid] = None


def untrack_group(pgid: int) -> None:
    with _tracking_lock:
        _tracked_groups.pop(pgid, None)


@contextmanager
def handling_signals() -> Iterator[None]:
    """The block handles SIGINT/SIGTERM itself: a signal it takes does not start the watchdog, however late the
    watchdog thread gets to read it (under load it may read the signal only after the block has unwound)."""
    global _held_off
    put_back = _note_signals_taken()
    _held_off += 1
    try:
        yield
    finally:
        _held_off -= 1
        put_back()


def _note_signals_taken() -> Callable[[], None]:
    """While the block runs (main thread only), SIGINT's and SIGTERM's handlers first note that the block took the
    signal, then do what they did (raise KeyboardInterrupt, Terminated); returns what puts them back."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {signum: signal.getsignal(signum) for signum in (signal.SIGINT, signal.SIGTERM)}

    def noting(handler):
        def note_then_handle(signum, frame):
            _ledger(taken=True)
            return handler(signum, frame)
        return note_then_handle

    for signum, handler in previous.items():
        if callable(handler):
            signal.signal(signum, noting(handler))

    def put_back() -> None:
        for signum, handler in previous.items():
            if callable(handler):
                signal.signal(signum, handler)
    return put_back


def _ledger(*, taken: bool) -> bool:
    """Match the signals holding blocks took with those the watchdog read, in whichever order the two threads get
    to them. taken=True: a block's handler took one. taken=False: the watchdog read one; True when it is excused
    (a block took it, or a block is running and its handler will)."""
    global _taken_unread, _excused_untaken
    with _ledger_lock:
        if taken:
            if _excused_untaken:
                _excused_untaken -= 1
            else:
                _taken_unread += 1
            return True
        if _taken_unread:
            _taken_unread -= 1
            return True
        if _held_off:
            _excused_untaken += 1
            return True
        return False


def _remove_tracked() -> None:
    import signal

    with _tracking_lock:
        groups, paths = list(_tracked_groups), list(_tracked_paths)
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except OSError:
            pass
    for path in reversed(paths):  # the newest first: a temp file before the folder that holds it
        _remove(path)


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def _end_now(signum: int, say: Callable[[int], str]) -> None:
    _removal_lock.acquire(timeout=_REMOVAL_WAIT_S)  # never released: the process ends below
    _remove_tracked()
    try:
        os.write(2, (say(signum) + "\n").encode())
    except OSError:
        pass
    _exit_now(128 + signum)


def install_exit_watchdog(say: Callable[[int], str]) -> Callable[[], None] | None:
    """Start the watchdog (main thread only; see above): on SIGINT or SIGTERM it waits EXIT_GRACE_S, then, if the
    process is still here, removes what is tracked, writes `say(signum)` to stderr and exits with 128 + signum.
    Returns the function that stops it (None where it cannot run)."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return None
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    try:
        previous = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    except (ValueError, OSError):
        os.close(read_fd)
        os.close(write_fd)
        return None
    stopped = threading.Event()
    wanted = {int(signal.SIGINT), int(signal.SIGTERM)}

    def watch() -> None:
        while not stopped.is_set():
            try:
                data = os.read(read_fd, 16)
            except OSError:
                return
            if not data or stopped.is_set():
                return
            for signum in (s for s in data if s in wanted):
                if stopped.wait(EXIT_GRACE_S):
                    return
                if not _ledger(taken=False):
                    _end_now(signum, say)

    thread = threading.Thread(target=watch, name="reprobundle-exit-watchdog", daemon=True)
    thread.start()

    def stop() -> None:
        stopped.set()
        try:
            signal.set_wakeup_fd(previous)
        except (ValueError, OSError):
            pass
        os.close(write_fd)  # the watcher reads EOF and ends
        thread.join(1)
        os.close(read_fd)

    return stop
