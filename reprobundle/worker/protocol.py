"""Protocol constants, the worker's two error types and small helpers shared by its modules."""
from __future__ import annotations

import errno
import os

PROTOCOL_VERSION = 1


# A worker that met no room to write (a full disk, a quota, a file-size limit) exits with this code, whether or not
# it could still write its result: the host then says the disk is full, not that the worker crashed.
EXIT_NO_SPACE = 28
NO_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


# How a no-space error reads once it is text (a route's reason, a capture hook's failure).
NO_SPACE_TEXTS = ("[Errno %d]" % errno.ENOSPC, "[Errno %d]" % errno.EDQUOT, "[Errno %d]" % errno.EFBIG,
                  "No space left on device", "Disk quota exceeded")


def is_no_space(e):
    """Whether `e` says there is no room to write (disk full, quota, file-size limit); the host uses it too."""
    return isinstance(e, OSError) and e.errno in NO_SPACE_ERRNOS


ROUTES = ("deserialize", "rebuild", "rebuild-compat", "stablehlo-text")


STATUS_OK = "ok"


STATUS_INCOMPATIBLE = "incompatible"


STATUS_ERROR = "error"


MAX_MSG = 1500


def first_lines(msg, limit=MAX_MSG):
    msg = str(msg).strip()
    if len(msg) > limit:
        msg = msg[:limit] + " ...[truncated]"
    return msg


def exc_msg(e):
    return "%s: %s%s" % (type(e).__name__, first_lines(str(e)), where_looked(e))


def where_looked(e):
    """For a missing module: where this interpreter looked (its sys.path, PYTHONPATH included or not), so that a
    JAX installed on PYTHONPATH but not seen says why."""
    if not isinstance(e, ImportError):
        return ""
    import os
    import sys

    paths = [p for p in sys.path if p]
    kept = "with" if os.environ.get("PYTHONPATH") and not sys.flags.ignore_environment else "without"
    return " (%s looked in %s, %s PYTHONPATH)" % (sys.executable, os.pathsep.join(paths[:8]) +
                                                  (" ..." if len(paths) > 8 else ""), kept)


def exc_line(e):
    """The exception in one line, every line of its message kept: MLIR's parser says "Unable to parse module
    assembly:" on the first line and what it could not parse (the diagnostics) on the lines after."""
    return "%s: %s" % (type(e).__name__, first_lines(" ".join(str(e).split())))


def plain(obj):
    """Make obj msgpack-friendly."""
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [plain(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if obj is None or isinstance(obj, (str, int, float, bool, bytes)):
        return obj
    return str(obj)


def write_msgpack(path, obj):
    import msgpack

    data = msgpack.packb(plain(obj), use_bin_type=True)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    try:
        with open(tmp, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


class RouteFailure(Exception):
    def __init__(self, stage, message):
        Exception.__init__(self, message)
        self.stage = stage
        self.message = message


class JobError(Exception):
    """A problem with the job or its inputs -> status "error"."""


# Each phase of a job (job.Worker.checkpoint's names) falls under one of the host's limits (run/execution.py
# PhaseLimits): loading (inputs, jax), compiling (a route: load, lower, compile), or calling the function.
LIMIT_LOAD = "load"
LIMIT_COMPILE = "compile"
LIMIT_CALLS = "calls"
_COMPILE_PHASES = ("hlo_text", "memory_check", "compile")  # "compile": the serve worker's (worker/serve.py)
_CALL_PHASES = ("execute", "timing", "profile")


def phase_limit_kind(phase):
    """The limit a job phase runs under: LIMIT_LOAD, LIMIT_COMPILE or LIMIT_CALLS."""
    phase = str(phase)
    if phase.startswith("route:") or phase in _COMPILE_PHASES:
        return LIMIT_COMPILE
    if phase in _CALL_PHASES:
        return LIMIT_CALLS
    return LIMIT_LOAD


STAGE_RANK = {"skipped": 0, "load": 1, "lower": 2, "compile": 3}


def job_inputs(leaves, path_of):
    """The job's ``inputs`` from a manifest's input leaves: stored data by the path ``path_of(blob ref)`` gives,
    or the leaf's synthetic spec (the host's jobs and a self-replaying zip build them alike)."""
    inputs = []
    for leaf in leaves:
        item = {"shape": leaf["shape"], "dtype": leaf["dtype"]}
        if leaf.get("path") is not None:
            item["key_path"] = leaf["path"]  # what a retrace checks the factory's call against
        if "synthetic" in leaf:
            item["synthetic"] = leaf["synthetic"]
        else:
            item["path"] = path_of(leaf["blob"])
        inputs.append(item)
    return inputs
