"""Entry points: run_job and the command line."""
from __future__ import annotations

import errno
import os
import sys

from .environment import base_environment
from .job import Worker
from .protocol import (
    EXIT_NO_SPACE,
    PROTOCOL_VERSION,
    STATUS_ERROR,
    JobError,
    RouteFailure,
    exc_msg,
    is_no_space,
    write_msgpack,
)
from .records import Result
from .timing import Control

NO_SPACE_TEXTS = ("[Errno %d]" % errno.ENOSPC, "[Errno %d]" % errno.EDQUOT, "[Errno %d]" % errno.EFBIG,
                  "No space left on device", "Disk quota exceeded")


def run_job(job, result_path=None, control=None, outcome=None):
    """Run a job dict and return the result dict (never raises).

    Prefer the CLI (`python worker.py JOB RESULT`) in a fresh process: this
    imports jax and may set XLA_FLAGS for dumps, which only works before jax is
    first imported.
    """
    import traceback

    w = Worker(job, result_path, control)
    try:
        res = w.run()
    except JobError as e:
        res = w.result
        res["status"] = STATUS_ERROR
        res["reason"] = str(e)
    except RouteFailure as e:  # should not escape, but be safe
        res = w.result
        res["status"] = STATUS_ERROR
        res["reason"] = "%s: %s" % (e.stage, e.message)
    except BaseException as e:  # the result must always be written
        res = w.result
        res["status"] = STATUS_ERROR
        res["reason"] = "internal worker error during phase %r: %s" % (w.phase, exc_msg(e))
        res["detail"] = traceback.format_exc()[-8000:]
        if isinstance(e, KeyboardInterrupt):
            res["reason"] = "interrupted during phase %r" % w.phase
        if is_no_space(e):
            w.no_space = True
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


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["serve"]:  # a long-lived worker of modules (serve.py)
        from .serve import serve

        return serve()
    if len(argv) != 2:
        sys.stderr.write("usage: python worker.py JOB.msgpack RESULT.msgpack | serve\n")
        return 2
    job_path, result_path = argv
    try:
        import msgpack

        with open(job_path, "rb") as fh:
            job = msgpack.unpackb(fh.read(), raw=False, strict_map_key=False)
    except BaseException as e:
        res: Result = {"protocol": PROTOCOL_VERSION, "status": STATUS_ERROR,
               "reason": "cannot read job file %s: %s" % (job_path, exc_msg(e)), "route": None,
               "attempts": [], "notes": [], "environment": {}, "compile_s": None, "samples_ns": [],
               "outputs": [], "artifacts": {}, "per_op": []}
        return _write_result(result_path, res)
    lockstep = isinstance(job, dict) and isinstance(job.get("timing"), dict) and bool(job["timing"].get("lockstep"))
    outcome = {}  # type: dict
    res = run_job(job, result_path, Control() if lockstep else None, outcome)
    code = _write_result(result_path, res)
    if outcome.get("no_space") or code == EXIT_NO_SPACE:
        _exit_no_space()
    return code


def _exit_no_space():
    """Exit with EXIT_NO_SPACE now: at a normal exit Python flushes stderr (a file on the same full disk), fails, and
    exits with 120 instead."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(EXIT_NO_SPACE)


def _write_result(result_path, res):
    """Exit code 0 once RESULT is written (whatever its status), 1 when it cannot be (EXIT_NO_SPACE: no room)."""
    try:
        write_msgpack(result_path, res)
    except BaseException as e:
        sys.stderr.write("worker: cannot write result %s: %s\n" % (result_path, e))
        return EXIT_NO_SPACE if is_no_space(e) else 1
    return 0
