"""Starting a worker process and ending it: the command line (through the launcher that ties its life to the
host's), its environment, its memory limit and CPUs, its process group tracked and killed, its pipes closed. Every
kind of worker starts here: a job's (execution.WorkerProcess), a shared one's (shared_worker.py), a module worker
(module_server.py)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Sequence

from ..envs.installed import keeps_pythonpath
from ..store.watchdog import track_group

WORKER_PATH = Path(__file__).parent.parent / "worker"  # a package run by path, see worker/__main__.py


def start_worker(python: str | Path, args: Sequence[str], stderr_path: Path, *, memory_limit_bytes: int | None,
                 extra_env: dict[str, str] | None = None, lockstep: bool = False,
                 cpus: Sequence[int] | None = None) -> subprocess.Popen:
    """The worker package started in `python` with `args` (see WorkerProcess for the memory limit and `cpus`), its
    stderr in `stderr_path`, its process group tracked (killed even if a signal ends the host in a C call)."""
    env = worker_environment(extra_env, python, memory_limit_bytes=memory_limit_bytes)
    if cpus:  # the launcher sets the affinity before the worker starts: XLA sizes its thread pools to it
        env[_PIN_VAR] = ",".join(str(int(c)) for c in cpus)
    # stderr goes to a file: a pipe nobody reads while the worker waits for commands could fill and block it.
    with open(stderr_path, "wb") as stderr:
        # -I: isolated mode, so nothing from the host's cwd or user site shadows the environment's packages.
        # The launcher ties the worker's life to the host's first (see _LAUNCHER), then becomes the worker.
        proc = subprocess.Popen(
            worker_command(python, args), stdin=subprocess.PIPE if lockstep else subprocess.DEVNULL,
            stdout=subprocess.PIPE if lockstep else subprocess.DEVNULL, stderr=stderr, env=env,
            cwd=stderr_path.parent, start_new_session=True)
    track_group(proc.pid)
    return proc


def kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL a worker's process group, unless the worker was reaped: its pid (and group id) may be another
    process's by now."""
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def close_pipes(proc: subprocess.Popen) -> None:
    """Close a lockstep worker's stdin (its end of commands) and stdout."""
    for pipe in (proc.stdin, proc.stdout):
        try:
            if pipe:
                pipe.close()
        except OSError:
            pass


# Runs in the worker's interpreter before the worker: on Linux, PR_SET_PDEATHSIG makes the kernel SIGKILL the
# worker when the host dies, so a killed `reprobundle pack/replay` never leaves a worker running (and holding the
# accelerator) in its own session until its timeout. It survives the exec into the worker. Without ctypes or prctl
# (other systems) it just runs the worker. A host that died before prctl took effect is caught by the ppid check.
# A pinned measurement's affinity mask (schedule.Pin) comes in _PIN_VAR: set here, before the worker imports jax.
# _PATH_VAR says the worker keeps PYTHONPATH (the host's own interpreter: see worker_environment): -s instead of -I.
# The worker's memory limit comes in _MEMORY_VAR and is set here too, never by a preexec_fn: Python runs a preexec_fn
# in the forked child of a host that may have JAX's threads up, and JAX warns at such a fork ("os.fork() was called
# ... deadlock") wherever the host is a user's program packing from Python.
_PIN_VAR = "REPROBUNDLE_PIN_CPUS"
_PATH_VAR = "REPROBUNDLE_KEEP_PYTHONPATH"
_MEMORY_VAR = "REPROBUNDLE_WORKER_MEMORY_LIMIT"
_LAUNCHER = """\
import os, sys
try:
    import ctypes
    ctypes.CDLL(None).prctl(1, 9, 0, 0, 0)
except Exception:
    pass
if os.getppid() != int(sys.argv[1]):
    os._exit(1)
cpus = os.environ.pop("REPROBUNDLE_PIN_CPUS", "")
if cpus:
    os.sched_setaffinity(0, [int(c) for c in cpus.split(",")])
limit = int(os.environ.pop("REPROBUNDLE_WORKER_MEMORY_LIMIT", "0") or 0)
if limit:
    import resource
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
isolation = "-s" if os.environ.pop("REPROBUNDLE_KEEP_PYTHONPATH", "") == "1" else "-I"
os.execv(sys.executable, [sys.executable, isolation] + sys.argv[2:])
"""


def worker_command(python: str | Path, args: Sequence[str]) -> list[str]:
    """The command line that runs the worker package in `python` with `args`, through the launcher that ties its
    life to this process's (run/module_server.py starts its long-lived workers so too)."""
    return [str(python), "-I", "-c", _LAUNCHER, str(os.getpid()), str(WORKER_PATH), *args]


def worker_environment(extra_env: dict[str, str] | None = None, python: str | Path | None = None, *,
                       memory_limit_bytes: int | None = None) -> dict[str, str]:
    """A worker's environment: this process's without its Python paths, plus `extra_env`, and the memory limit
    (RLIMIT_DATA) the launcher sets before the worker starts, if any; a worker on this process's own interpreter
    keeps PYTHONPATH (envs/installed.keeps_pythonpath)."""
    keep_path = python is not None and keeps_pythonpath(python)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("VIRTUAL_ENV") and (keep_path or not k.startswith("PYTHONPATH"))}
    env.update(extra_env or {})
    env["PYTHONNOUSERSITE"] = "1"
    for var in (_PIN_VAR, _PATH_VAR, _MEMORY_VAR):
        env.pop(var, None)
    if keep_path:
        env[_PATH_VAR] = "1"
    if memory_limit_bytes:
        env[_MEMORY_VAR] = str(int(memory_limit_bytes))
    return env
