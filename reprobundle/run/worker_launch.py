"""Starting a worker process and ending it: the command line (through the launcher that ties its life to the
host's), its environment, its memory limit and CPUs, its process group tracked and killed, its pipes closed. Every
kind of worker starts here: a job's (execution.WorkerProcess), a shared one's (shared_worker.py), a module worker
(module_server.py)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Ended:
    """How a worker process ended: its exit code (-N: killed by signal N) and its own peak resident memory
    (ru_maxrss from wait4; None where it was reaped elsewhere)."""

    returncode: int
    peak_rss_bytes: int | None = None

    @property
    def how(self) -> str:
        """A signal's name ("SIGABRT"), or "exit N"."""
        if self.returncode >= 0:
            return f"exit {self.returncode}"
        try:
            return signal.Signals(-self.returncode).name
        except ValueError:
            return f"signal {-self.returncode}"


def reap(proc: subprocess.Popen, timeout_s: float | None = None) -> Ended | None:
    """Wait for `proc` to end (at most `timeout_s`; None: as long as it takes) and reap it by wait4, which also
    gives its peak resident memory; None when it still runs. Popen's own returncode is set, so its poll() and
    wait() go on working (they never wait for a pid reaped here)."""
    if proc.returncode is not None:
        return Ended(proc.returncode)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    delay = 0.0005
    while True:
        try:
            pid, status, usage = os.wait4(proc.pid, 0 if deadline is None else os.WNOHANG)
        except ChildProcessError:  # reaped already (by Popen on another path)
            code = proc.poll()
            return None if code is None else Ended(code)
        if pid == proc.pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return Ended(proc.returncode, usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024))
        remaining = (deadline or 0.0) - time.monotonic()
        if remaining <= 0:
            return None
        time.sleep(min(delay, remaining))
        delay = min(2 * delay, 0.05)


# What a worker that ran out of memory leaves on its stderr (lower case): numpy's MemoryError, C++'s std::bad_alloc,
# XLA's RESOURCE_EXHAUSTED, malloc's ENOMEM, LLVM's "out of memory", a thread whose stack or TLS found no room.
OUT_OF_MEMORY_SIGNS = ("memoryerror", "bad_alloc", "resource_exhausted", "resource exhausted",
                       "cannot allocate memory", "out of memory", "pthread_create failed")


def oom_kills() -> int | None:
    """How many processes the kernel's out-of-memory killer has killed since boot (/proc/vmstat), None where it
    does not say: a SIGKILL nobody here sent is the OOM killer's only when this count grew meanwhile."""
    try:
        with open("/proc/vmstat") as fh:
            for line in fh:
                if line.startswith("oom_kill "):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def death_text(ended: Ended, phase: str | None, stderr_tail: str, *, memory_limit_bytes: int | None,
               oom_kills_before: int | None = None) -> str:
    """How a worker died, from the evidence alone: the signal (or exit code) and the phase it was in, its peak
    resident memory and the limit it ran under (memory_said), and the last lines of its stderr."""
    where = f" in phase {phase!r}" if phase else ""
    lines = last_words(stderr_tail)
    return (f"the worker died of {ended.how}{where}"
            f"{memory_said(ended, stderr_tail, memory_limit_bytes=memory_limit_bytes, oom_kills_before=oom_kills_before)}"
            + ("; its stderr ended: " + " | ".join(lines) if lines else "; it wrote nothing to stderr"))


# How a worker's end is worded where it is said (death_text above; run/execution.py's WorkerProcess outcomes: past a
# phase's limit, past its working time, killed by a signal, exited without a result; run/module_server.py's), read
# back by deaths_said: the hang or crash, the seconds, the phase.
_HUNG = re.compile(r"ran past (?:the limit of (?P<calls>[\d.]+) s|the (?:load|compile) limit of (?P<phase_limit>"
                   r"[\d.]+) s)|did not finish within (?P<within>[\d.]+) s|stopped answering")
_CRASHED = re.compile(r"(?:killed by|died of) (?P<signal>SIG[A-Z0-9]+|signal \d+)|exited with code (?P<code>-?\d+)")
_PHASE = re.compile(r"phase '(?P<phase>[^']+)'|via route '")


def deaths_said(text: str) -> list[dict]:
    """Each worker end that `text` (a run's reason, an error's message, several joined) says, in order:
    {"at": where in `text`, "how": "hung" (it ran past a limit or stopped answering, and was killed) or "crashed",
    "seconds": the limit it ran past (None where not said), "signal": "SIGABRT" or "exit 3" (crashed), "phase": the
    phase it was in ("compile" while loading and compiling via a route; None where not said)}."""
    found = sorted([*_HUNG.finditer(text), *_CRASHED.finditer(text)], key=lambda m: m.start())
    out = []
    for k, match in enumerate(found):
        clause = text[match.start():found[k + 1].start() if k + 1 < len(found) else len(text)]
        phase = _PHASE.search(clause)
        limit = match.groupdict().get("calls") or match.groupdict().get("phase_limit") or \
            match.groupdict().get("within")
        code = match.groupdict().get("code")
        out.append({"at": match.start(), "how": "crashed" if match.re is _CRASHED else "hung",
                    "seconds": float(limit) if limit else None,
                    "signal": match.groupdict().get("signal") or (f"exit {code}" if code else None),
                    "phase": (phase.group("phase") or "compile") if phase else None})
    return out


def memory_said(ended: Ended, stderr_tail: str, *, memory_limit_bytes: int | None,
                oom_kills_before: int | None = None) -> str:
    """` (peak RSS 412 MiB, under a memory limit of 8192 MiB (RLIMIT_DATA))`, then `: it ran out of memory ...`
    only where the evidence shows it: its stderr names a failed allocation, or a SIGKILL came while the kernel's OOM
    killer killed a process (its count grew since `oom_kills_before`)."""
    memory = f"peak RSS {ended.peak_rss_bytes / 2**20:.0f} MiB" if ended.peak_rss_bytes else "peak RSS unknown"
    memory += (f", under a memory limit of {memory_limit_bytes / 2**20:.0f} MiB (RLIMIT_DATA)" if memory_limit_bytes
               else ", no memory limit")
    text = f" ({memory})"
    sign = memory_sign(stderr_tail)
    now = oom_kills()
    if sign is not None:
        text += f": it ran out of memory (its stderr says {sign!r})"
    elif ended.how == "SIGKILL" and now is not None and oom_kills_before is not None and now > oom_kills_before:
        text += ": the kernel's out-of-memory killer killed a process meanwhile (/proc/vmstat oom_kill)"
    return text


def memory_sign(text: str) -> str | None:
    """The first sign in `text` (a worker's stderr or reason) that memory ran out, None without one."""
    lowered = text.lower()
    return next((sign for sign in OUT_OF_MEMORY_SIGNS if sign in lowered), None)


STDERR_LINES = 3  # of a dead worker's stderr, in the one line that says how it died
_FATAL = "Fatal Python error:"  # faulthandler's dump (the worker enables it) starts so


def last_words(stderr_tail: str) -> list[str]:
    """A dead worker's last lines: what the native code wrote before the end (an XLA `Check failed`, LLVM's
    error), then, where faulthandler dumped the Python stack, its first line and the innermost frame of the thread
    that died (the rest of the dump would hide the native lines)."""
    before, fatal, dump = stderr_tail.partition(_FATAL)
    lines = [line.strip() for line in before.splitlines() if line.strip()][-STDERR_LINES:]
    if fatal:
        dumped = dump.splitlines()
        lines.append(f"{_FATAL}{dumped[0] if dumped else ''}")
        current = next((k for k, line in enumerate(dumped) if line.startswith("Current thread")), 0)
        frame = next((line.strip() for line in dumped[current:] if line.strip().startswith("File ")), None)
        if frame:
            lines.append(f"innermost Python frame: {frame}")
    return lines


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
