"""Running the worker: turn a bundle into a job, run the `worker` package by path in some Python, turn its result into data.

The host never imports the measured code or the worker's JAX: the worker is a subprocess of the chosen
environment's interpreter. A crash, a hang or an out-of-memory kill is an outcome like any other.
"""

from __future__ import annotations

import math
import os
import select
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import msgpack
import numpy as np

from ..bundle.redaction import redact, redact_env, scrub, scrub_file, secret_values
from ..bundle.registry import Registry, copy_tree_to_zip_blob
from ..config import DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S  # defined there for the CLI; see it for what counts
from ..config import DEFAULT_WARMUP, REFERENCE_REPEAT
from ..errors import FormatError, disk_full
from ..store.scratch import no_room
from ..store.watchdog import untrack_group
from ..text import clean
from ..worker.dtypes import np_dtype
from ..worker.protocol import EXIT_NO_SPACE, LIMIT_CALLS, LIMIT_LOAD, job_inputs, phase_limit_kind
from .contenders import FROZEN, RETRACE, ContenderSpec, Settings, unknown_flag_reason
from .retrace import write_program
from .worker_launch import Ended, close_pipes, kill_group, memory_said, memory_sign, oom_kills, reap, start_worker

PROTOCOL = 1
_STDERR_TAIL = 4000
_MAX_CONTROL_LINE = 64 << 20  # a reply to `time n` is n numbers
_PHASE_POLL_S = 0.5  # how often the host looks at the phase its worker is in (the provisional result's stamp)

# The phase limits' defaults (see PhaseLimits): generous, since a load or a compile has no reference to go by.
DEFAULT_LOAD_LIMIT_S = 300.0
DEFAULT_COMPILE_LIMIT_S = 600.0
# A call that runs this many times the reference's median call, plus the grace, is a runaway.
RUNAWAY_FACTOR = 100
RUNAWAY_GRACE_S = 60.0
# The default memory limit of a worker: this share of MemAvailable, split between the workers alive together,
# never under the floor (a worker's own jax needs a few hundred MiB).
MEMORY_SHARE = 0.8
MEMORY_FLOOR_BYTES = 1 << 30


@dataclass(frozen=True)
class PhaseLimits:
    """How long each phase of a worker may run (worker/protocol.phase_limit_kind names its phases' limits): loading
    (its inputs, jax), compiling (a route: load, lower, compile), and its calls of the function, where `n` calls in a
    row (the first call, the warmup, a batch of timed calls, the profile) may take `n * call_s + grace_s`
    (`call_s` None: no limit but the worker's timeout). `basis` says where `call_s` came from, for the reason."""

    load_s: float = DEFAULT_LOAD_LIMIT_S
    compile_s: float = DEFAULT_COMPILE_LIMIT_S
    call_s: float | None = None
    grace_s: float = 0.0
    basis: str = ""

    def calls(self, n: int) -> float | None:
        return None if self.call_s is None else n * self.call_s + self.grace_s

    def describe(self, kind: str, n: int = 1) -> str:
        """`the compile limit of 600 s`, `the limit of 4.06 s for 1 call (100 x ...)`."""
        if kind == LIMIT_CALLS:
            return f"the limit of {self.calls(n):.3g} s for {n} call{'s' if n != 1 else ''}" + (
                f" ({self.basis})" if self.basis else "")
        return f"the {kind} limit of {self.load_s if kind == LIMIT_LOAD else self.compile_s:g} s"


def reference_call_limit(samples_ns: Sequence[int]) -> float | None:
    """The longest one call may take by the reference's own timed calls: RUNAWAY_FACTOR times their median, in
    seconds; None without samples."""
    samples = sorted(int(s) for s in samples_ns if int(s) > 0)
    if not samples:
        return None
    return RUNAWAY_FACTOR * samples[len(samples) // 2] / 1e9


def phase_limits(load_s: float, compile_s: float, call_s: float | None, grace_s: float,
                 reference_ns: Sequence[int] | None) -> PhaseLimits:
    """The limits of a contender's workers, n calls in a row taking at most n x call_s + grace_s: `call_s` as given,
    or None: derived from the reference's timed calls (`reference_ns`: None when the replay runs at other sizes than
    the reference's, whose times then say nothing), else no call limit."""
    if call_s is not None:
        return PhaseLimits(load_s, compile_s, call_s, grace_s, f"{call_s:g} s a call + {grace_s:g} s")
    derived = reference_call_limit(reference_ns or [])
    if derived is None:
        return PhaseLimits(load_s, compile_s)
    return PhaseLimits(load_s, compile_s, derived, grace_s, f"{RUNAWAY_FACTOR} x the reference's median call of "
                       f"{derived / RUNAWAY_FACTOR * 1e6:.3g} us, + {grace_s:g} s")


def worker_memory_limit(requested: int | None, together: int = 1, platform: str | None = "cpu") -> int | None:
    """The memory limit of each worker (RLIMIT_DATA, see WorkerProcess): `requested` bytes; 0: none; None: the
    default, MEMORY_SHARE of MemAvailable now split between the `together` workers alive at once, at least
    MEMORY_FLOOR_BYTES (None where MemAvailable is unknown). The default holds for CPU workers only: an accelerator's
    driver maps host memory of its own, which no measurement here has sized (its buffers are the device's, and a
    device out of memory is already that version's error)."""
    if requested is not None:
        return int(requested) or None
    if platform != "cpu":
        return None
    from ..worker.memory import mem_available

    available = mem_available()
    if available is None:
        return None
    return max(MEMORY_FLOOR_BYTES, int(available * MEMORY_SHARE / max(1, together)))


def default_jobs(platform: str = "cpu") -> int:
    """How many untimed workers to run at once here, replaying on `platform`: one where it admits one process at a
    time (a TPU: the workers would visit the chip in turn, so an (n+1)-ary step only costs probes), else one per CPU
    this process may use but one (the host's: it reads results, compares outputs and makes environments meanwhile),
    and no more than MEMORY_SHARE of MemAvailable gives each MEMORY_FLOOR_BYTES (the floor of a worker's default
    memory limit). On the 2-core VM, two bisection probes at once took as long as one at a time
    (benchmarks/README.md), so there it is 1."""
    import os

    from ..envs.platforms import one_process_at_a_time
    from ..worker.memory import mem_available

    if one_process_at_a_time(platform):
        return 1
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    available = mem_available()
    by_memory = cpus if available is None else int(available * MEMORY_SHARE // MEMORY_FLOOR_BYTES)
    return max(1, min(cpus - 1, by_memory))


def dtype_of(name: str) -> np.dtype:
    """The numpy dtype of a bundle's dtype name (ml_dtypes included); FormatError for a name no table has."""
    try:
        return np_dtype(name)
    except (TypeError, ValueError):
        raise FormatError(f"unknown dtype {name!r}") from None


@dataclass(frozen=True)
class Timing:
    """Untimed calls per worker, timed steps in all (a step is one call, or a batch for fast functions, see
    schedule.py), and rounds of fresh worker processes (None: schedule.rounds_for decides)."""

    warmup: int = DEFAULT_WARMUP
    repeat: int = REFERENCE_REPEAT
    rounds: int | None = None


@dataclass
class WorkerOutcome:
    status: str  # ok / incompatible / error (from the worker) or crashed / timeout (from here)
    reason: str
    result: dict | None  # crashed / timeout: the last (provisional) result the worker wrote, if any
    duration_s: float
    stderr_tail: str = ""
    workdir: Path | None = None
    limit: dict | None = None  # a limit it ran into: {"kind": "load"|"compile"|"calls", "phase", "limit_s"} or memory


def build_job(registry: Registry, function: dict, input_leaves: Sequence[dict], workdir: Path, *,
              timing: Timing, dump: bool, profile: bool, routes: Sequence[str] | None = None,
              describe: bool = False, lockstep: bool = False, platform: str | None = None,
              brief_environment: bool = False, contender: ContenderSpec | None = None,
              retrace_cache: Path | None = None, memory_check: bool = True) -> Path:
    """Write job.msgpack for the worker under `workdir`; blobs are read in place or via `workdir/blobs`.
    `contender`: the mode (frozen or retrace) and the settings the worker applies (run/contenders.py); None is a
    frozen replay without settings.
    `retrace_cache`: where a retrace's first worker leaves the program it traced for later rounds' workers
    (worker/retrace.py), so that a replay traces and lowers once per contender.
    `brief_environment`: the worker leaves out its package list (a replay's later rounds, whose environment the
    host does not keep).
    `platform` ("cpu", "cuda", "rocm", "tpu"): the worker runs there (JAX_PLATFORMS) or fails saying why; None:
    wherever its jax runs by default.
    `memory_check`: the worker refuses inputs and a compiled module that cannot fit in the memory free (see
    worker/memory.py)."""
    cache = workdir / "blobs"

    def path_of(ref: dict | None) -> str | None:
        return None if ref is None else str(registry.blob_file(ref, cache))

    inputs = job_inputs(input_leaves, path_of)
    job = {
        "protocol": PROTOCOL,
        "function": {
            "exported": path_of(function.get("exported")),
            "mlir_module": path_of(function.get("mlir_module")),
            "mlir_module_compat": path_of(function.get("mlir_module_compat")),
            "stablehlo_text": path_of(function.get("stablehlo_text")),
            "fields": function.get("fields"),
        },
        "inputs": inputs,
        "outputs_dir": str(workdir / "outputs"),
        "artifacts_dir": str(workdir / "artifacts"),
        "timing": {"warmup": timing.warmup, "repeat": timing.repeat, "lockstep": lockstep},
        "dump": dump,
        "profile": profile,
        "routes": list(routes) if routes else None,
        "describe": describe,
        "platform": platform,
        "brief_environment": brief_environment,
        "mode": contender.mode if contender else FROZEN,
        "settings": contender.at_start().as_record() if contender else Settings().as_record(),
        "memory_check": memory_check,
    }
    if contender is not None and contender.at_compile:
        job["compile_options"] = dict(contender.at_compile)
    if contender is not None and contender.mode == RETRACE and function.get("program"):
        job["program"] = write_program(registry, function["program"], workdir / "program")
        if retrace_cache is not None:
            job["program"]["cache"] = str(retrace_cache)
    (workdir / "outputs").mkdir(parents=True, exist_ok=True)
    (workdir / "artifacts").mkdir(parents=True, exist_ok=True)
    job_path = workdir / "job.msgpack"
    job_path.write_bytes(msgpack.packb(job, use_bin_type=True))
    return job_path


def check_leaf_size(leaf: dict, index: int, size: int | None) -> int:
    """The bytes an input leaf declares (its shape x its dtype), checked without allocating: dimensions are
    non-negative integers, and `size` (a stored leaf's blob size, None for a synthetic one) is exactly that many
    bytes; CorruptBundleError otherwise. The worker checks each input file's own size again before reading it."""
    from ..errors import CorruptBundleError

    shape = leaf.get("shape")
    if not isinstance(shape, (list, tuple)) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                      for d in shape):
        raise CorruptBundleError(f"input leaf {index} declares the shape {clean(shape, 80)}, not one of "
                                 "non-negative integers", hint="the manifest is malformed; fetch the bundle again")
    declared = math.prod(shape) * dtype_of(str(leaf.get("dtype"))).itemsize
    if size is not None and size != declared:
        blob = leaf.get("blob") or {}
        raise CorruptBundleError(f"input leaf {index} declares {leaf.get('dtype')}{list(shape)} ({declared} bytes), "
                                 f"but its blob {clean(blob.get('digest'), 80)} holds {size} bytes",
                                 hint="the manifest is inconsistent with its blobs; fetch the bundle again")
    return declared


# The variables that fix the threads of XLA:CPU and the libraries of its custom calls when a measurement is pinned
# (schedule.Pin). XLA sizes its intra-op pools to the affinity mask on every release from 0.4.30 to 0.12 (0.7.2: 11
# threads on 2 CPUs, 6 on 1); NPROC and PJRT_NPROC size the PJRT CPU client's own pool on the releases that read
# them (2 threads fewer at NPROC=1 on 0.4.30, 0.7.2, 0.10.2 and 0.12); OpenMP/MKL/OpenBLAS read theirs.
PIN_THREAD_VARS = ("NPROC", "PJRT_NPROC", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def pinned_env(threads: int) -> dict[str, str]:
    return {name: str(threads) for name in PIN_THREAD_VARS}


def compile_cache_env(python: str | Path, contender: str) -> dict[str, str]:
    """What points a visit's JAX (the alternated schedule: one process at a time holds a TPU, each visit a process of
    its own) at JAX's persistent compilation cache, a folder of its own contender's: its interpreter and its label,
    which names its settings (a variant's LIBTPU_INIT_ARGS is no part of JAX's own cache key). A contender's later
    visits load the executable its first visit compiled instead of compiling it again; only the compile time
    changes, never what runs in a timed call. Every compile is kept (no minimum time or size)."""
    import hashlib

    from ..config import cache_dir

    key = hashlib.sha256(f"{Path(python).absolute()}\0{contender}".encode()).hexdigest()[:16]
    return {"JAX_COMPILATION_CACHE_DIR": str(cache_dir() / "compiled" / key),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES": "0"}


def run_worker(python: str | Path, job_path: Path, *, timeout_s: float, memory_limit_bytes: int | None = None,
               extra_env: dict[str, str] | None = None, limits: PhaseLimits | None = None) -> WorkerOutcome:
    """Run the worker on a job in `python`; never raises for what happens inside the subprocess. `memory_limit_bytes`
    None is the default limit (worker_memory_limit), 0 none; `limits` None the default load and compile limits."""
    return WorkerProcess(python, job_path, timeout_s=timeout_s,
                         memory_limit_bytes=worker_memory_limit(memory_limit_bytes, 1, _job_platform(job_path)),
                         extra_env=extra_env,
                         limits=limits or PhaseLimits()).finish()


def batch_times(line: str, n: int) -> list[int] | None:
    """The n call times (ns) a lockstep worker's reply to `time n` holds; None if it is not that reply."""
    fields = line.split()
    if len(fields) != n or not all(f.isdigit() for f in fields):
        return None
    return [int(f) for f in fields]


class WorkerProcess:
    """A worker subprocess, from its start to its outcome; never raises for what happens inside it.

    With `lockstep` (the job must say `timing.lockstep` too) the worker waits after its warmup for `time_calls`,
    so that several of them can be timed in alternation (see schedule.py and the worker's module docstring).
    `timeout_s` bounds the time the worker works: from its start to its ready line, each batch of timed calls, its
    finish; not the time it waits while the host times the others. `limits` bound each phase it goes through (the
    phase its last provisional result names, looked at every _PHASE_POLL_S): a worker past one is killed, and its
    outcome is a "timeout" naming the phase and the limit. `memory_limit_bytes` is its RLIMIT_DATA (None: none):
    RLIMIT_AS, its address space, would count what XLA and the thread stacks reserve without using (1.5 GB of
    address space for 250 MB of data on 2 CPUs, more with more), RLIMIT_DATA counts the private writable memory
    that malloc, numpy and XLA's buffers take.
    """

    ended: Ended | None = None  # how the process ended, with its peak memory, once reaped by _wait_end
    _oom_kills: int | None = None  # the kernel's OOM-kill count at the start: a SIGKILL is its only if it grew

    def __init__(self, python: str | Path, job_path: Path, *, timeout_s: float,
                 memory_limit_bytes: int | None = None, extra_env: dict[str, str] | None = None,
                 lockstep: bool = False, cpus: Sequence[int] | None = None, limits: PhaseLimits | None = None) -> None:
        self.watch_job(job_path, limits, timeout_s, lockstep)
        self.memory_limit_bytes = memory_limit_bytes
        self._oom_kills = oom_kills()
        self._buffer = b""
        self._stderr_path = self.workdir / "worker-stderr.txt"
        self.proc = start_worker(python, [str(job_path), str(self.result_path)], self._stderr_path,
                                 memory_limit_bytes=memory_limit_bytes, extra_env=extra_env, lockstep=lockstep,
                                 cpus=cpus)

    def watch_job(self, job_path: Path, limits: PhaseLimits | None, timeout_s: float, lockstep: bool) -> None:
        """Start watching the job at `job_path`: its result, phase, limits and working time, from now."""
        self.workdir = job_path.parent
        self.limits = limits
        self.lockstep = lockstep
        self.limit_hit: dict | None = None
        self._phase: str | None = None
        self._phase_since = 0.0  # wall clock: the provisional result's mtime
        self._stamp: tuple[int, int] | None = None
        self._ready = False
        self._command: tuple[float, int] | None = None  # (sent, calls) of the `time n` under way
        self._closed_at: float | None = None
        self._calls_of = _calls_of_job(job_path)
        self.result_path = self.workdir / "result.msgpack"
        self.timeout_s = timeout_s
        self.start = time.perf_counter()
        self._budget_s = timeout_s  # working time left
        self._working_since: float | None = self.start
        self.timed_out = False

    # -- lockstep ------------------------------------------------------------------------------------------------
    def wait_ready(self) -> int | None:
        """The worker's median warmup call in ns once it is ready for timed calls; None if it ended instead."""
        line = self._read_line()
        if line is None:
            return None
        fields = line.split()
        if len(fields) != 2 or fields[0] != "ready" or not fields[1].isdigit():
            self._kill()  # not the worker speaking: its outcome will say it crashed
            return None
        self._ready = True
        return int(fields[1])

    def time_calls(self, n: int) -> list[int] | None:
        """Times of `n` calls made now; None if the worker ended (the outcome then says why)."""
        self._working_since = time.perf_counter()
        self._command = (time.time(), n)
        if not self._send(f"time {n}"):
            return None
        line = self._read_line()
        self._command = None
        times = None if line is None else batch_times(line, n)
        if line is not None and times is None:
            self._kill()  # not the worker speaking: its outcome will say it crashed
        return times

    def _send(self, line: str) -> bool:
        try:
            assert self.proc.stdin is not None  # lockstep workers are started with a stdin pipe
            self.proc.stdin.write(line.encode() + b"\n")
            self.proc.stdin.flush()
            return True
        except (BrokenPipeError, OSError, ValueError):
            return False

    def _read_line(self) -> str | None:
        assert self.proc.stdout is not None  # lockstep workers are started with a stdout pipe
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = self._deadline() - time.perf_counter()
            if remaining <= 0:
                self.timed_out = True
                self._kill()
                return None
            if self._past_phase_limit():
                return None
            readable, _, _ = select.select([fd], [], [], remaining if self.limits is None else
                                           min(remaining, _PHASE_POLL_S))
            if not readable:
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                return None
            self._buffer += chunk
            if len(self._buffer) > _MAX_CONTROL_LINE:
                self._kill()
                return None
        line, _, self._buffer = self._buffer.partition(b"\n")
        if self._working_since is not None:  # None: no command started the clock, and the line was already buffered
            self._budget_s -= time.perf_counter() - self._working_since
        self._working_since = None  # it waits for the next command now
        return line.decode("ascii", "replace").strip()

    def _deadline(self) -> float:
        if self._working_since is None:
            self._working_since = time.perf_counter()
        return self._working_since + self._budget_s

    def request_load(self) -> None:
        """A worker of its own job loads it as it starts (a JobView's waits for this: run/shared_worker.py)."""

    # -- end ---------------------------------------------------------------------------------------------------
    def finish(self) -> WorkerOutcome:
        """Let the worker finish (a lockstep one: end of its commands) and return its outcome."""
        if self.proc.stdin:
            try:
                self.proc.stdin.close()
            except OSError:
                pass
        self._closed_at = time.time()
        if not self.timed_out and self.limit_hit is None:
            try:
                self._wait_end()
            except BaseException:  # Ctrl-C, SIGTERM: the worker goes first, so its folder can be removed after it
                self._kill()
                self.proc.wait()
                raise
        self.proc.wait()
        untrack_group(self.proc.pid)
        if self.proc.stdout:
            self.proc.stdout.close()
        return self._within_memory_limit(self._outcome())

    def _within_memory_limit(self, outcome: WorkerOutcome) -> WorkerOutcome:
        """`outcome`, saying so where the memory limit is what ended the worker: where its stderr or reason shows an
        allocation that failed (a death without that evidence says its signal and peak memory, never a guess)."""
        if self.memory_limit_bytes and outcome.status not in ("ok", "mismatch") and \
                (outcome.limit or {}).get("kind") != "memory":
            limit_mib = self.memory_limit_bytes / 2**20
            if _out_of_memory(outcome):  # a thread that could not start may leave the others waiting: a timeout
                outcome.status = "error" if outcome.status == "timeout" else outcome.status
                outcome.reason = f"the worker ran out of its memory limit of {limit_mib:.0f} MiB: {outcome.reason}"
                outcome.limit = {"kind": "memory", "limit_bytes": self.memory_limit_bytes}
        return outcome

    def _wait_end(self) -> None:
        """Wait for the worker to exit, within its working time and the limit of the phase it is in."""
        while True:
            remaining = self._deadline() - time.perf_counter()
            step = remaining if self.limits is None else min(remaining, _PHASE_POLL_S)
            self.ended = reap(self.proc, max(0.0, step))
            if self.ended is not None:
                return
            if remaining <= step:
                self.timed_out = True
                self._kill()
                return
            if self._past_phase_limit():
                return

    # -- phase limits ------------------------------------------------------------------------------------------
    def _past_phase_limit(self) -> bool:
        """Whether the worker ran past the limit of the stretch it is in (then it is killed, `limit_hit` says which)."""
        stretch = self._stretch()
        if stretch is None:
            return False
        since, limit_s, kind, description = stretch
        if time.time() - since <= limit_s:
            return False
        self.limit_hit = {"kind": kind, "phase": self._phase, "limit_s": limit_s, "description": description}
        self._kill()
        return True

    def _stretch(self) -> tuple[float, float, str, str] | None:
        """(since (wall clock), limit in s, limit kind, its description) of the stretch the worker is in; None: no
        limit applies (no limits, a result already written, or a lockstep worker waiting for the host)."""
        self._look_at_phase()
        phase, limits = self._phase, self.limits
        if phase is None or limits is None:
            return None
        kind = phase_limit_kind(phase)
        if kind != LIMIT_CALLS:
            return self._phase_since, limits.load_s if kind == LIMIT_LOAD else limits.compile_s, kind, \
                limits.describe(kind)
        since, calls = self._phase_since, self._calls_of.get(phase, 1)
        if phase == "timing" and self.lockstep and self._ready:
            if self._command is not None:
                since, calls = self._command
            elif self._closed_at is not None:  # after its last batch: the process's state, the result
                since, calls = max(self._closed_at, self._phase_since), 1
            else:
                return None
        limit_s = limits.calls(calls)
        return None if limit_s is None else (since, limit_s, kind, limits.describe(kind, calls))

    def _look_at_phase(self) -> None:
        """The phase of the worker's latest provisional result (None once its result is final), and since when."""
        try:
            st = os.stat(self.result_path)
        except OSError:
            return
        stamp = (st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        try:
            result = msgpack.unpackb(self.result_path.read_bytes(), raw=False, strict_map_key=False)
        except Exception:
            return  # being replaced: the next look reads it
        self._stamp = stamp
        phase = result.get("phase") if isinstance(result, dict) else None
        self._phase = str(phase) if phase is not None else None
        self._phase_since = st.st_mtime_ns / 1e9

    def _kill(self) -> None:
        kill_group(self.proc)

    def kill(self) -> None:
        """Kill the worker and its process group now and reap it (the host was interrupted)."""
        self._kill()
        try:
            self.proc.wait(timeout=10)
            untrack_group(self.proc.pid)
        except subprocess.TimeoutExpired:
            pass
        close_pipes(self.proc)

    def _outcome(self) -> WorkerOutcome:
        duration = time.perf_counter() - self.start
        tail = stderr_tail(self._stderr_path)
        return self._killed_outcome(duration, tail) or self._exit_outcome(duration, tail) or \
            self._result_outcome(duration, tail)

    def _killed_outcome(self, duration: float, tail: str) -> WorkerOutcome | None:
        """The outcome of a worker the host killed (past a phase limit, or its working time); None if it was not."""
        if self.limit_hit is not None:
            result = self._last_result("timeout")
            return WorkerOutcome("timeout", f"the worker ran past {self.limit_hit['description']}{_where(result)} and "
                                 "was killed", result, duration, tail, self.workdir, limit=dict(self.limit_hit))
        if self.timed_out:
            result = self._last_result("timeout")
            return WorkerOutcome("timeout", f"the worker did not finish within {self.timeout_s:g} s and was killed"
                                 f"{_where(result)}", result, duration, tail, self.workdir)
        return None

    def _exit_outcome(self, duration: float, tail: str) -> WorkerOutcome | None:
        """The outcome of a worker whose exit says what happened (a signal, a full disk, an unknown flag, no
        result); None when its result file says it."""
        code, workdir = self.proc.returncode, self.workdir
        # A full disk is the machine's condition, not this version's result: the worker says so (EXIT_NO_SPACE), or
        # it ended abnormally (its stderr, a file on that disk, may have failed too) where no room is left.
        if code == EXIT_NO_SPACE or (code != 0 and no_room(workdir)):
            raise disk_full(workdir.parent, None, "the worker's job, outputs, artifacts and result", work=True)
        unknown_flag = unknown_flag_reason(tail)
        if code != 0 and unknown_flag is not None:
            return WorkerOutcome("error", unknown_flag, self._last_result("error"), duration, tail, workdir)
        if code < 0:
            ended = self.ended if self.ended is not None else Ended(code)
            said = memory_said(ended, tail, memory_limit_bytes=self.memory_limit_bytes,
                               oom_kills_before=self._oom_kills)
            result = self._last_result("crashed")
            return WorkerOutcome("crashed", f"the worker was killed by {ended.how}{_where(result)}{said}", result,
                                 duration, tail, workdir)
        if not self.result_path.is_file():
            last = tail.strip().splitlines()[-1] if tail.strip() else "no output"
            return WorkerOutcome("crashed", f"the worker exited with code {code} without a result: {last}",
                                 None, duration, tail, workdir)
        return None

    def _result_outcome(self, duration: float, tail: str) -> WorkerOutcome:
        """The outcome its result file says."""
        try:
            result = msgpack.unpackb(self.result_path.read_bytes(), raw=False, strict_map_key=False)
        except Exception as e:
            return WorkerOutcome("crashed", f"the worker wrote an unreadable result ({e})", None, duration, tail,
                                 self.workdir)
        limit = result.get("limit") if isinstance(result.get("limit"), dict) else None  # worker/memory.py's refusal
        return WorkerOutcome(str(result.get("status", "error")), str(result.get("reason", "")), result, duration,
                             tail, self.workdir, limit=limit)

    def _last_result(self, status: str) -> dict | None:
        """What a worker that was killed left: the provisional result it writes before each risky phase (see the
        worker's docstring), which names the phase and keeps the route, attempts, notes and environment so far."""
        try:
            result = msgpack.unpackb(self.result_path.read_bytes(), raw=False, strict_map_key=False)
        except Exception:
            return None
        if not isinstance(result, dict):
            return None
        phase = result.get("phase")
        if not result.get("route") and isinstance(phase, str) and phase.startswith("route:"):
            result["route"] = phase[len("route:"):]  # it died loading or compiling via that route
        result["status"] = status
        return result


def _where(result: dict | None) -> str:
    """Where a killed worker had got to, from its last result (see WorkerProcess._last_result)."""
    if not result:
        return ""
    phase, route = result.get("phase"), result.get("route")
    if not phase:
        return " after it wrote its result"
    if str(phase).startswith("route:"):
        return f" while loading and compiling the function via route {route!r}"
    return f" during phase {phase!r}" + (f" (loaded via route {route!r})" if route else "")


def stderr_tail(path: Path) -> str:
    """The last _STDERR_TAIL bytes of a worker's stderr file, as text."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - _STDERR_TAIL))
            return fh.read().decode("utf-8", "replace")
    except OSError:
        return ""


def failed_run_error(outcome: WorkerOutcome, what: str, hint: str = "") -> Exception:
    """The typed error of a worker's run that failed (a ReplayError): PhaseLimitError or MemoryLimitError for one
    that went past a limit (its `limit`), else ReplayError; the message is `what (status): reason`."""
    from ..errors import MemoryLimitError, PhaseLimitError, ReplayError

    kind = (outcome.limit or {}).get("kind")
    cls = MemoryLimitError if kind == "memory" else PhaseLimitError if kind else ReplayError
    return cls(f"{what} ({outcome.status}): {outcome.reason}", hint=hint)


def _job_platform(job_path: Path) -> str | None:
    try:
        platform = msgpack.unpackb(job_path.read_bytes(), raw=False, strict_map_key=False).get("platform")
    except Exception:
        return None
    return str(platform) if platform else None


def _calls_of_job(job_path: Path) -> dict[str, int]:
    """The calls the worker makes in a row in each phase of calls: one in "execute", its warmup (and, unless in
    lockstep, its timed calls) in "timing", its profile's iterations and the trace's own in "profile"."""
    try:
        job = msgpack.unpackb(job_path.read_bytes(), raw=False, strict_map_key=False)
        timing = job.get("timing") or {}
        warmup = max(1, int(timing.get("warmup", 1)))
        lockstep = bool(timing.get("lockstep"))
        timed = warmup if lockstep else warmup + int(timing.get("repeat", 5))
        return {"execute": 1, "timing": timed, "profile": int(job.get("profile_iters", 3)) + 1}
    except Exception:
        return {}


def _out_of_memory(outcome: WorkerOutcome) -> bool:
    return memory_sign(f"{outcome.reason}\n{outcome.stderr_tail}") is not None


def read_outputs(result: dict) -> list[np.ndarray]:
    arrays = []
    for leaf in result.get("outputs") or []:
        arr = np.fromfile(leaf["path"], dtype=dtype_of(leaf["dtype"]))
        arrays.append(arr.reshape(leaf["shape"]))
    return arrays


def environment_of(result: dict | None) -> dict:
    env = dict((result or {}).get("environment") or {})
    if "env_vars" in env:
        env["env_vars"] = redact_env(env["env_vars"])
    return redact(env)


@dataclass
class StoredResult:
    """What a worker result becomes once its bytes are in the registry."""

    outputs: list[dict] = field(default_factory=list)
    arrays: list[np.ndarray] = field(default_factory=list)
    artifacts: dict = field(default_factory=dict)
    timing: dict | None = None
    per_op: list[dict] = field(default_factory=list)


_ARTIFACT_MEDIA = {
    "hlo_before": "text/x-hlo",
    "hlo_after": "text/x-hlo",
    "stablehlo": "text/x-mlir",
    "stablehlo_retraced": "text/x-mlir",
    "profile_trace": "application/vnd.perfetto+json+gzip",
}


def store_result(registry: Registry, result: dict, *, warmup: int) -> StoredResult:
    """Put a worker result's outputs and artifacts into the registry as blobs.

    Artifacts are redacted here, before they are stored: the secrets of the worker's environment (as it recorded
    it, and this process's, which it inherited) are masked in every file of them, and in the XLA dump (which writes
    XLA_FLAGS' values into its debug options) every span shaped like a token too. Here rather than in the worker:
    the worker runs in other environments and cannot import the redaction rules, and every stored artifact of a
    pack and a replay passes this one place, so the environment and the files are judged by one set of rules."""
    stored = StoredResult()
    raw_env = ((result.get("environment") or {}).get("env_vars") or {}) if isinstance(result, dict) else {}
    secrets = secret_values({**os.environ, **{str(k): str(v) for k, v in dict(raw_env).items()}})
    stored.arrays = read_outputs(result)
    for leaf, arr in zip(result.get("outputs") or [], stored.arrays):
        ref = registry.put_blob_file(leaf["path"])
        stored.outputs.append({"shape": [int(d) for d in arr.shape], "dtype": leaf["dtype"], "blob": ref})
    for name, path in sorted((result.get("artifacts") or {}).items()):
        artifact = _stored_artifact(registry, name, Path(path), secrets)
        if artifact is not None:
            stored.artifacts[name] = artifact
    if result.get("samples_ns") is not None:
        stored.timing = {"warmup": int(warmup), "samples_ns": [int(s) for s in result["samples_ns"]],
                         "compile_s": float(result.get("compile_s") or 0.0)}
    stored.per_op = _per_op(result)
    return stored


def _per_op(result: dict) -> list[dict]:
    return [{"name": str(o["name"]), "kind": str(o.get("kind", "")), "time_ns": float(o["time_ns"]),
             "count": int(o.get("count", 0))} for o in result.get("per_op") or []]


def _stored_artifact(registry: Registry, name: str, path: Path, secrets: list[str]) -> dict | None:
    """One artifact, redacted, as a blob: a folder (the XLA dump) zipped; None for an empty folder or nothing."""
    if path.is_dir():
        if not any(path.iterdir()):
            return None
        return {"blob": registry.put_blob(copy_tree_to_zip_blob(path, lambda data: scrub(data, secrets, patterns=True))),
                "media_type": "application/zip"}
    if path.is_file():
        redacted = scrub_file(path, secrets)
        blob = registry.put_blob_file(path) if redacted is None else registry.put_blob(redacted)
        return {"blob": blob, "media_type": _ARTIFACT_MEDIA.get(name, "application/octet-stream")}
    return None
