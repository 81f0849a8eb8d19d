"""Entry points: run_job and the command line."""
from __future__ import annotations

import sys

from .ending import exit_no_space, guarded, settled, write_result
from .job import Worker
from .protocol import (
    EXIT_NO_SPACE,
    PROTOCOL_VERSION,
    STATUS_ERROR,
    exc_msg,
)
from .records import Result
from .timing import Control


def run_job(job, result_path=None, control=None, outcome=None):
    """Run a job dict and return the result dict (never raises).

    Prefer the CLI (`python worker.py JOB RESULT`) in a fresh process: this
    imports jax and may set XLA_FLAGS for dumps, which only works before jax is
    first imported.
    """
    w = Worker(job, result_path, control)
    guarded(w, w.run)
    return settled(w, outcome)


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv == ["serve"]:  # a long-lived worker of modules (serve.py)
        from .serve import serve

        return serve()
    if len(argv) == 2 and argv[0] == "jobs":  # one lockstep process serving several jobs (shared.py)
        from .shared import serve_jobs

        quick_exit(serve_jobs(argv[1]))
    if len(argv) != 2:
        sys.stderr.write("usage: python worker.py JOB.msgpack RESULT.msgpack | serve | jobs FOLDER\n")
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
        return write_result(result_path, res)
    lockstep = isinstance(job, dict) and isinstance(job.get("timing"), dict) and bool(job["timing"].get("lockstep"))
    outcome = {}  # type: dict
    res = run_job(job, result_path, Control() if lockstep else None, outcome)
    code = write_result(result_path, res)
    if outcome.get("no_space") or code == EXIT_NO_SPACE:
        exit_no_space()
    quick_exit(code)


# A worker's result is written and closed when it ends, so the interpreter's orderly teardown (JAX's and XLA's
# objects freed one by one, libtpu's shutdown) is skipped. On a TPU, where the next process waits for this one to
# let go of the chip, it took 4-5 s of each ~18 s visit on a v5e, 2-3 s with this exit (10 visits: 184 s before,
# 145 s after, 2026-12-05: benchmarks/README.md, "On a TPU"); on a CPU the teardown is a fifth of a small job's
# worker: 1.03-1.10 CPU-s a worker with it, 0.84-0.90 without (jax 0.8.0, 4 workers three times each, alternated,
# the project's 2-core VM, 2026-12-07), and the suite starts over a thousand of them.


def quick_exit(code):
    """Exit now, the result written and closed, without the interpreter's teardown: the device is let go as the
    process ends (a killed process frees the chip the same way)."""
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed pipe: nothing left to say
            pass
    os._exit(code)


