"""`python path/to/reprobundle/worker jobs FOLDER`: one lockstep worker process serving several jobs of one contender
(one JAX, its settings, one platform), so that a measurement of many bundles starts a process per contender and
round instead of one per bundle and contender (the host's side: run/shared_worker.py).

Protocol: command lines on stdin, replies on a private copy of stdout (timing.Control), as a single job's lockstep:
- ``load K {"job": PATH, "result": PATH}``: job K (a job file as ``python worker JOB RESULT`` takes, and its result
  file) runs up to its timed calls: ``ready K NS`` (its median warm-up call), or ``ended K`` (its result is final:
  an error, incompatible, its first call failed).
- ``time K N``: N timed calls of job K: their times in ns, space-separated; or ``ended K`` (they failed; final).
- ``finish K``: job K ends (its profile, the process's state): ``done K``, its result final.
- the end of stdin: exit 0.
Each job writes its provisional results as a single job does, so the host sees the phase of the job it waits on.
The first job sets the process up (environment variables, XLA_FLAGS, the platform, before jax is imported), so the
host gives one process only jobs whose settings, platform, 64-bit mode and dump agree. A dump goes into
FOLDER/xla_dump, and each job takes the files its own load and finish added.
"""
from __future__ import annotations

import json
import os
import shutil

from .job import Worker
from .protocol import EXIT_NO_SPACE, JobError
from .timing import Control


class SharedProcess:
    """What the jobs of one process share: the dump folder, and how the first job set the process up."""

    def __init__(self, folder):
        self.dump_dir = os.path.join(folder, "xla_dump")
        self.user_flags = None  # the XLA_FLAGS the environments record; None until the first job set jax up
        self.setup_notes = []  # what setting the process up noted, in every job's notes

    def collect_dump(self, worker):
        """Move what XLA dumped since the last collection into `worker`'s own dump folder."""
        target = worker.result["artifacts"].get("xla_dump") if worker.job.get("dump") else None
        if not target or not os.path.isdir(self.dump_dir):
            return
        for name in os.listdir(self.dump_dir):
            shutil.move(os.path.join(self.dump_dir, name), os.path.join(target, name))


class _Served:
    """One job of the process: its Worker and, once loaded, what it times."""

    def __init__(self, worker):
        self.worker = worker
        self.route = None
        self.compiled = None


def serve_jobs(folder):
    import msgpack

    from .ending import exit_no_space, guarded, settled, write_result

    control = Control()
    shared = SharedProcess(folder)
    jobs = {}  # type: dict

    def end(key, reply):
        served = jobs.pop(key)
        outcome = {}  # type: dict
        code = write_result(served.worker.result_path, settled(served.worker, outcome))
        if code == EXIT_NO_SPACE or outcome.get("no_space"):
            exit_no_space()  # as a single job's process: the host reads the exit status and the last result
        if code != 0:
            os._exit(code)
        served.compiled = None
        _clear_caches()
        control.send("%s %s" % (reply, key))

    while True:
        command = control.receive()
        if command is None:
            return 0
        verb, _, rest = command.partition(" ")
        key, _, arg = rest.partition(" ")
        if verb == "load":
            paths = json.loads(arg)
            with open(paths["job"], "rb") as fh:
                job = msgpack.unpackb(fh.read(), raw=False, strict_map_key=False)
            served = jobs[key] = _Served(Worker(job, paths["result"], shared=shared))
            loaded = guarded(served.worker, served.worker.until_timing)
            if loaded is None:
                end(key, "ended")
                continue
            served.route, served.compiled = loaded
            call_ns = guarded(served.worker, _start_timing, served.worker, served.compiled)
            if call_ns is None:
                end(key, "ended")
            else:
                control.send("ready %s %d" % (key, call_ns))
        elif verb == "time" and key in jobs and arg.isdigit():
            served = jobs[key]
            batch = guarded(served.worker, _timed, served.worker, served.compiled, int(arg))
            if batch is None:
                end(key, "ended")
            else:
                control.send(" ".join(str(t) for t in batch))
        elif verb == "finish" and key in jobs:
            served = jobs[key]
            served.worker.end_phase()  # the timing phase
            guarded(served.worker, served.worker.after_timed, served.route, served.compiled)
            shared.collect_dump(served.worker)
            end(key, "done")
        else:
            raise JobError("unknown shared-worker command %r" % command[:100])


def _start_timing(worker, compiled):
    worker.checkpoint("timing")
    timing = worker.job.get("timing") or {}
    return worker.warm_up(compiled, max(1, int(timing.get("warmup", 1))))


def _timed(worker, compiled, count):
    try:
        batch = worker.timed_calls(compiled, count)
    except Exception as e:
        raise JobError(worker.timing_failure(e))
    worker.result["samples_ns"].extend(batch)
    return batch


def _clear_caches():
    """Drop what jax cached for the job that ended: each job is a new function, so its traces only cost memory."""
    import jax

    clear = getattr(jax, "clear_caches", None)
    if clear is not None:
        clear()
