"""A job's result whatever happens to it: each step guarded (what it raised becomes the result), the result
settled and written, and the exit a full disk asks for. Shared by a job's own process (main.py) and a process
serving several (shared.py)."""
from __future__ import annotations

import os
import sys

from .environment import base_environment
from .protocol import EXIT_NO_SPACE, NO_SPACE_TEXTS, JobError, RouteFailure, exc_msg, is_no_space, write_msgpack


def guarded(w, step, *args):
    """What `step(*args)` returns, or None once w.result is the error result of what it raised (never raises)."""
    import traceback

    try:
        return step(*args)
    except JobError as e:
        w.failed(str(e))
        if getattr(e, "limit", None):  # memory.MemoryRefusal: the sizes, for the host's typed error
            w.result["limit"] = e.limit  # type: ignore[attr-defined]
    except RouteFailure as e:  # should not escape, but be safe
        w.failed("%s: %s" % (e.stage, e.message))
    except BaseException as e:  # the result must always be written
        res = w.failed("internal worker error during phase %r: %s" % (w.phase, exc_msg(e)))
        res["detail"] = traceback.format_exc()[-8000:]
        if isinstance(e, KeyboardInterrupt):
            res["reason"] = "interrupted during phase %r" % w.phase
        if is_no_space(e):
            w.no_space = True
    return None


def settled(w, outcome=None):
    """The job's result once it ends: its last phase timed, the base environment filled in where it got none;
    `outcome["no_space"]` says whether a write found no room on the way."""
    res = w.result
    w.end_phase()
    if outcome is not None:  # a write that found no room, caught on the way as a route's or a phase's error
        text = " ".join([str(res.get("reason", ""))] + [str(n) for n in res.get("notes") or []])
        outcome["no_space"] = w.no_space or any(s in text for s in NO_SPACE_TEXTS)
    if not res.get("environment", {}).get("python"):
        try:
            env = base_environment()
            env.update(res.get("environment") or {})
            res["environment"] = env
        except Exception:
            pass
    return res


def exit_no_space():
    """Exit with EXIT_NO_SPACE now: at a normal exit Python flushes stderr (a file on the same full disk), fails, and
    exits with 120 instead."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(EXIT_NO_SPACE)


def write_result(result_path, res):
    """Exit code 0 once RESULT is written (whatever its status), 1 when it cannot be (EXIT_NO_SPACE: no room)."""
    try:
        write_msgpack(result_path, res)
    except BaseException as e:
        try:  # stderr may be a file on the same full disk: its failure must not replace the exit code
            sys.stderr.write("worker: cannot write result %s: %s\n" % (result_path, e))
        except BaseException:
            pass
        return EXIT_NO_SPACE if is_no_space(e) else 1
    return 0
