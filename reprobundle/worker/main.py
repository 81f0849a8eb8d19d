"""Entry points: run_job and the command line."""
from __future__ import annotations

import sys

from .environment import base_environment
from .job import Worker
from .protocol import (
    PROTOCOL_VERSION,
    STATUS_ERROR,
    JobError,
    RouteFailure,
    exc_msg,
    write_msgpack,
)
from .timing import Control


def run_job(job, result_path=None, control=None):
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
    w.end_phase()
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
    if len(argv) != 2:
        sys.stderr.write("usage: python worker.py JOB.msgpack RESULT.msgpack\n")
        return 2
    job_path, result_path = argv
    try:
        import msgpack

        with open(job_path, "rb") as fh:
            job = msgpack.unpackb(fh.read(), raw=False, strict_map_key=False)
    except BaseException as e:
        res = {"protocol": PROTOCOL_VERSION, "status": STATUS_ERROR,
               "reason": "cannot read job file %s: %s" % (job_path, exc_msg(e)), "route": None,
               "attempts": [], "notes": [], "environment": {}, "compile_s": None, "samples_ns": [],
               "outputs": [], "artifacts": {}, "per_op": []}
        return _write_result(result_path, res)
    lockstep = isinstance(job, dict) and isinstance(job.get("timing"), dict) and bool(job["timing"].get("lockstep"))
    res = run_job(job, result_path, Control() if lockstep else None)
    return _write_result(result_path, res)


def _write_result(result_path, res):
    """Exit code 0 once RESULT is written (whatever its status), 1 when it cannot be."""
    try:
        write_msgpack(result_path, res)
    except BaseException as e:
        sys.stderr.write("worker: cannot write result %s: %s\n" % (result_path, e))
        return 1
    return 0
