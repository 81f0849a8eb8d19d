"""Long-lived workers that load one small StableHLO module after another (worker/serve.py), one per contender.

Minimize tests hundreds of candidate modules on each contender; a fresh worker per candidate would spend most of
its time importing jax. A `ModuleWorker` keeps one worker process of a contender's environment, under its settings
(XLA_FLAGS and environment variables are fixed per process, hence one worker per contender), and sends it module
after module. A module that fails to load, compile or run is an outcome like any other; a worker that dies
(segfault, abort, out-of-memory kill) or exceeds a call's time limit is reported as such and replaced,
transparently, at the next call. A worker that dies while loading a module is given it once more in a fresh worker
(a death there may be the process's state as much as the text); the outcome then says how the first one died
(`first_death`). A death is said from its evidence (launch.death_text): the signal, the phase, the
worker's peak resident memory and the limit it ran under, and the last lines of its stderr.

    with ModuleWorker(ContenderSpec("0.8.0")) as worker:
        outcome = worker.run(text, [x, y])       # outcome.outputs: numpy arrays, or outcome.phase/error_type/message
        timed = worker.time(text, [x, y], warmup=2, repeat=20)   # timed.samples_ns
"""

from __future__ import annotations

import os
import select
import signal
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Mapping, Sequence

import msgpack
import numpy as np

from ..errors import ReplayError
from ..store.watchdog import track_group, untrack_group
from ..worker.protocol import LIMIT_COMPILE, LIMIT_LOAD, phase_limit_kind
from .contenders import ContenderSpec, unknown_flag_reason
from .execution import PhaseLimits, dtype_of
from .worker_launch import Ended, death_text, last_words, oom_kills, reap, worker_command, worker_environment

OK = "ok"
ERROR = "error"  # the worker answered: the module failed to load, compile or run
CRASHED = "crashed"  # the worker process died while it worked on the module
TIMEOUT = "timeout"  # the call exceeded its time limit and the worker was killed

# A call's default time limit: generous, since a candidate's compile on a loaded 2-core machine can take a while;
# it is there to end a module that never finishes (a `while` whose condition stays true).
DEFAULT_CALL_TIMEOUT_S = 300.0
DEFAULT_START_TIMEOUT_S = 300.0  # importing jax and initialising its backend
_HEADER = struct.Struct(">I")
_MAX_FRAME = 1 << 34  # a frame longer than this is not the worker speaking
_STDERR_TAIL = 4000
_CLOSE_WAIT_S = 5.0
# A worker that dies while loading a module (parsing its text, rebuilding and lowering it) may die of the process's
# state as much as of the text (what the modules served before it left, what the release loaded into it): the module
# is loaded once more in a fresh worker. A death while compiling or running is the module's (what minimize and
# explain look for): never retried.
_RETRIED_PHASE = "load"
# What last_words adds after the native lines: faulthandler's dump (the worker enables it), not the worker's own words.
_FAULTHANDLER_LINES = ("Fatal Python error:", "innermost Python frame:")


@dataclass
class ModuleOutcome:
    """What one module did on one contender.

    status: "ok" (outputs and/or samples_ns are set), "error" (the worker answered that the module failed: `phase`
    "load", "compile" or "execute", `error_type` the exception's class name, `message` its first line), "crashed"
    (the worker process died: `phase` where it was, `error_type` the signal's name, e.g. "SIGABRT", or "exit N",
    `message` how it died from the evidence, `peak_rss_bytes` its peak resident memory), "timeout" (killed after
    `timeout_s`: `phase` where it was, `error_type` "Timeout")."""

    status: str
    outputs: list[np.ndarray] = field(default_factory=list)
    samples_ns: list[int] = field(default_factory=list)
    phase: str | None = None
    error_type: str | None = None
    message: str = ""
    detail: str = ""  # the error's first lines (the message is only its first)
    compile_s: float | None = None
    duration_s: float = 0.0  # the whole call, as the host saw it
    stderr_tail: str = ""  # what the worker wrote to stderr during the call, when it did not succeed
    pid: int | None = None  # the worker process that served the call
    peak_rss_bytes: int | None = None  # a worker that died: its own peak resident memory (wait4's ru_maxrss)
    first_death: str = ""  # a call made again in a fresh worker (the first died loading it): how the first died

    @property
    def ok(self) -> bool:
        return self.status == OK

    @property
    def crashed(self) -> bool:
        return self.status == CRASHED

    @property
    def timed_out(self) -> bool:
        return self.status == TIMEOUT

    @property
    def last_line(self) -> str:
        """A dead worker's own last line on stderr (an LLVM or XLA error), before the Python stack faulthandler
        dumps; that dump's first line where the native code wrote nothing; "" where stderr is empty."""
        lines = last_words(self.stderr_tail)
        native = [line for line in lines if not line.startswith(_FAULTHANDLER_LINES)]
        if native:
            return native[-1]
        return lines[0] if lines else ""

    @property
    def death_words(self) -> str:
        """How a dead worker ended, in words: "aborted" (SIGABRT), "crashed (SIGSEGV)", "was killed (SIGKILL)",
        "exited with code 3"."""
        how = self.error_type or ""
        if how == "SIGABRT":
            return "aborted"
        if how == "SIGKILL":
            return "was killed (SIGKILL)"
        if how.startswith("exit "):
            return f"exited with code {how[5:]}"
        return f"crashed ({how})" if how and how != "running" else "stopped answering"

    @property
    def failure(self) -> tuple[str, str | None, str | None, str] | None:
        """(status, phase, error_type, message) of a failed call, None for one that succeeded: what two calls'
        failures are compared by."""
        return None if self.ok else (self.status, self.phase, self.error_type, self.message)


class _Died(Exception):
    """The worker process ended or stopped speaking the protocol while the host waited for it."""


class _TimedOut(Exception):
    """The worker did not answer within the call's time limit."""


class ModuleWorker:
    """One long-lived worker process of a contender, serving StableHLO modules one after another.

    `contender`: a ContenderSpec (or a version string) whose JAX is resolved to an interpreter by `env_manager`
    (envs/manager.py, created with the defaults when None; "installed" without one is this interpreter) and whose
    settings the worker applies before jax is imported; its mode is irrelevant (a module is always frozen).
    `python` overrides the interpreter. `platform` ("cpu", "cuda", ...) is where the worker runs (None: jax's
    default). `timeout_s` bounds each call, `start_timeout_s` each start; `limits` (execution.PhaseLimits) bound
    each phase of a call as a replay's workers are bounded (load, compile, n calls of the module), the call then
    ending as a timeout that names the phase's limit. `memory_limit_bytes` caps the worker's memory (RLIMIT_DATA,
    as execution.WorkerProcess's: address space reserved by XLA's threads is not memory spent).
    The process starts at the first call (or `start()`); ReplayError when it cannot start at all (an XLA flag the
    release does not know, an interpreter that is not there). Use it as a context manager, or call `close()`.
    """

    def __init__(self, contender: ContenderSpec | str = "installed", *, python: str | Path | None = None,
                 env_manager: Any = None, platform: str | None = None,
                 timeout_s: float = DEFAULT_CALL_TIMEOUT_S, start_timeout_s: float = DEFAULT_START_TIMEOUT_S,
                 memory_limit_bytes: int | None = None, limits: PhaseLimits | None = None) -> None:
        self.contender = contender if isinstance(contender, ContenderSpec) else ContenderSpec(str(contender))
        self._python = python
        self._env_manager = env_manager
        self.platform = platform
        self.timeout_s = timeout_s
        self.start_timeout_s = start_timeout_s
        self.memory_limit_bytes = memory_limit_bytes
        self.limits = limits
        self._phase_limit: str | None = None  # what ended the call in progress, when a phase's limit did
        self._limit_text = ""  # the limit of the phase in progress, for that message
        self.info: dict = {}  # the running worker's start answer: pid, jax, jaxlib, platform, xla_flags, notes
        self.starts = 0  # processes started so far (1 + the restarts after a crash or a timeout)
        self.calls = 0
        self.lost: list[str] = []  # the workers that died between calls (replaced before the next call)
        self._proc: subprocess.Popen | None = None
        self._stderr: IO[bytes] | None = None
        self._buffer = bytearray()
        self._phase: str | None = None
        self._busy = False
        self._prepared: tuple[dict, int | None] | None = None  # the request that prepared the kept module, its pid
        self._exit: Ended | None = None  # how the last worker process ended, once reaped here
        self._oom_kills: int | None = None  # the kernel's OOM-kill count when the running worker started

    # -- life ----------------------------------------------------------------------------------------------------
    def __enter__(self) -> "ModuleWorker":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pid(self) -> int | None:
        """The running worker's process id (None when none runs)."""
        return self._proc.pid if self._proc is not None else None

    @property
    def phase(self) -> str | None:
        """The phase the call in progress (or the last call) reached: "load", "compile" or "execute"."""
        return self._phase

    @property
    def python(self) -> str:
        """The interpreter of the contender's environment (resolved, and its environment made, once)."""
        if self._python is None:
            self._python = self._resolve_python()
        return str(self._python)

    def _resolve_python(self) -> str:
        manager = self._env_manager
        if manager is None and self.contender.jax == "installed":
            return sys.executable
        if manager is None:
            from ..envs.manager import EnvironmentManager

            manager = self._env_manager = EnvironmentManager()
        on_platform = {} if self.platform in (None, "cpu") else {"platform": self.platform}
        return str(manager.ensure(self.contender.jax, **on_platform).python_executable)

    def start(self) -> None:
        """Start the worker unless one runs (or wait for the one launched); ReplayError when it cannot start."""
        self.launch()
        self.await_start()

    def launch(self) -> None:
        """Start the worker's process and ask it to start, without waiting (`await_start` waits): several workers
        launched before any is awaited import JAX at once. ReplayError when the process cannot be made."""
        if self._proc is not None:
            return
        self._stderr = tempfile.TemporaryFile()  # unlinked already: nothing is left behind, whatever happens
        try:
            self._proc = subprocess.Popen(
                worker_command(self.python, ["serve"]), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=self._stderr, env=worker_environment(python=self.python,
                                                            memory_limit_bytes=self.memory_limit_bytes),
                cwd=tempfile.gettempdir(), start_new_session=True)
        except OSError as e:
            self._stderr.close()
            self._stderr = None
            raise ReplayError(f"cannot start the module worker of {self.contender.label} in {self.python}: {e}",
                              hint="check the contender's environment (reprobundle envs)") from None
        track_group(self._proc.pid)
        self._exit = None
        self._oom_kills = oom_kills()
        self.starts += 1
        self._buffer = bytearray()
        self.info = {}
        try:
            self._send({"op": "start", "settings": self.contender.settings.as_record(), "platform": self.platform})
        except _Died:
            pass  # it ended already: await_start reads why from its stderr

    def await_start(self) -> None:
        """Wait for a launched worker's start answer (launching it first if it was not); ReplayError when it
        refuses the settings, dies or hangs (its process then ended)."""
        self.launch()
        if self.info:
            return
        try:
            answer = self._started()
        except BaseException:  # Ctrl-C while it starts: no worker outlives the call
            self._stop()
            raise
        self.info = answer

    def _started(self) -> dict:
        """The worker's start answer; ReplayError when it refuses the settings, dies or hangs."""
        why = f"the module worker of {self.contender.label} did not start"
        try:
            answer = self._answer(time.perf_counter() + self.start_timeout_s)
        except (_Died, _TimedOut) as e:
            raise ReplayError(f"{why}: {self._start_failure(e)}",
                              hint="check the contender's environment and settings") from None
        if answer.get("status") != OK:
            raise ReplayError(f"{why}: {answer.get('error_type')}: {answer.get('message')}",
                              hint="check the contender's settings")
        return answer

    def _start_failure(self, e: Exception) -> str:
        if isinstance(e, _TimedOut):
            return f"it was not ready within {self.start_timeout_s:g} s"
        tail = self._stderr_tail()
        flag = unknown_flag_reason(tail)
        if flag is not None:
            return flag
        how = self._death()
        if self._exit is not None:
            return death_text(self._exit, "start", tail, memory_limit_bytes=self.memory_limit_bytes,
                              oom_kills_before=self._oom_kills)
        return f"it ended ({how}): {_last_line(tail)}"

    def close(self) -> None:
        """End the worker (stdin closed, then its process group killed if it lingers); nothing is left behind."""
        proc = self._proc
        if proc is None:
            return
        if self._busy:  # interrupted in the middle of a call: no answer will come in time
            self._stop()
            return
        try:
            self._send({"op": "close"})
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait(timeout=_CLOSE_WAIT_S)
        except (_Died, OSError, subprocess.TimeoutExpired):
            pass
        self._stop()

    def _stop(self) -> None:
        """Kill the worker's process group, reap it, and drop its pipes and stderr file."""
        proc = self._proc
        if proc is None:
            return
        if self._reaped(0.0) is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._reaped(None)
        untrack_group(proc.pid)
        for pipe in (proc.stdin, proc.stdout, self._stderr):
            try:
                if pipe is not None:
                    pipe.close()
            except OSError:
                pass
        self._proc = None
        self._stderr = None
        self._busy = False

    # -- calls ---------------------------------------------------------------------------------------------------
    def run(self, text: str, inputs: Sequence[np.ndarray], *, timeout_s: float | None = None,
            compiler_options: Mapping[str, Any] | None = None) -> ModuleOutcome:
        """Load, compile and run the module once on `inputs` (@main's arguments in order): its outputs, or why not.
        `compiler_options` ({DebugOptions field: value}) apply to this module's compile only."""
        self._prepared = None  # the worker keeps one module at most
        return self._call(_request(text, inputs, "outputs", compiler_options), timeout_s)

    def time(self, text: str, inputs: Sequence[np.ndarray], *, warmup: int = 1, repeat: int = 5,
             timeout_s: float | None = None, compiler_options: Mapping[str, Any] | None = None) -> ModuleOutcome:
        """Load and compile the module, call it `warmup` times untimed and `repeat` times timed: `samples_ns` (one
        per timed call, each waited for), or why not."""
        self._prepared = None
        return self._call({**_request(text, inputs, "time", compiler_options), "warmup": int(warmup),
                           "repeat": int(repeat)}, timeout_s)

    def prepare(self, text: str, inputs: Sequence[np.ndarray], *, outputs: bool = False,
                timeout_s: float | None = None, compiler_options: Mapping[str, Any] | None = None) -> ModuleOutcome:
        """Load and compile the module and keep it, with `inputs`, for `time_prepared` (until the next module);
        with `outputs`, also run it once and return its outputs. A worker replaced since prepares it again."""
        request = {**_request(text, inputs, "outputs" if outputs else "none", compiler_options), "keep": True}
        self._prepared = None
        outcome = self._call(request, timeout_s)
        if outcome.ok:
            self._prepared = (request, outcome.pid)
        return outcome

    def time_prepared(self, repeat: int, *, warmup: int = 0, timeout_s: float | None = None,
                      retry: bool = True) -> ModuleOutcome:
        """`repeat` timed calls (after `warmup` untimed ones) of the prepared module, not loaded again: a paired
        timing alternates two contenders' workers batch by batch. `samples_ns`, or why not."""
        if self._prepared is None:
            raise ValueError("time_prepared needs a module: call prepare first")
        request, pid = self._prepared
        if pid != self.pid or (self._proc is not None and self._reaped(0.0) is not None):
            again = self._call(request, timeout_s)
            self._prepared = (request, again.pid) if again.ok else None
            if not again.ok:
                return again
        outcome = self._call({"op": "time", "warmup": int(warmup), "repeat": int(repeat)}, timeout_s)
        if outcome.crashed and outcome.phase is None and retry:  # it died before it read the request
            self.lost.append(f"the worker {outcome.pid} died between calls ({outcome.error_type})")
            return self.time_prepared(repeat, warmup=warmup, timeout_s=timeout_s, retry=False)
        return outcome

    def _call(self, request: dict, timeout_s: float | None, retry: bool = True) -> ModuleOutcome:
        if self._proc is not None and self._reaped(0.0) is not None:  # it died between calls: not this module's doing
            self._lose()
        self.start()
        assert self._proc is not None and self._stderr is not None
        self._stderr.seek(0)
        self._stderr.truncate()
        self._phase = None
        self._phase_limit = None
        self.calls += 1  # after the phase is reset: a watcher that sees the count sees this call's phase
        pid = self._proc.pid
        limit = self.timeout_s if timeout_s is None else timeout_s
        t0 = time.perf_counter()
        self._busy = True  # until the answer: a close meanwhile (Ctrl-C) kills the worker at once
        try:
            self._send(request)
            answer = self._answer(t0 + limit, _calls_in(request))
        except _TimedOut:
            ended = self._phase_limit or f"did not finish within {limit:g} s"
            return self._ended(ModuleOutcome(TIMEOUT, phase=self._phase, error_type="Timeout", message=(
                f"the module {ended}; the worker was killed")), t0, pid)
        except _Died:
            if self._phase is None and retry and request["op"] == "run":  # it died before it read the module
                self._lose()
                return self._call(request, timeout_s, retry=False)
            died = self._ended(ModuleOutcome(CRASHED, phase=self._phase), t0, pid)
            if self._phase == _RETRIED_PHASE and retry and request["op"] == "run":
                self.lost.append(f"the worker {pid} died loading a module ({died.message}); it was loaded again in a "
                                 "fresh worker")
                again = self._call(request, timeout_s, retry=False)
                again.first_death = died.message
                return again
            return died
        self._busy = False
        return self._outcome(answer, time.perf_counter() - t0, pid)

    def _lose(self) -> None:
        """Note a worker that died between calls and drop it."""
        assert self._proc is not None
        pid, how = self._proc.pid, self._death()
        if self._exit is not None:
            how = death_text(self._exit, None, self._stderr_tail(), memory_limit_bytes=self.memory_limit_bytes,
                             oom_kills_before=self._oom_kills)
        self.lost.append(f"the worker {pid} died between calls: {how}")
        self._stop()

    def _ended(self, outcome: ModuleOutcome, t0: float, pid: int) -> ModuleOutcome:
        """A call the worker did not survive: its process group killed (the next call starts a new worker)."""
        outcome.stderr_tail = self._stderr_tail()
        if outcome.status == CRASHED:
            outcome.error_type = self._death()
            if self._exit is not None:
                outcome.peak_rss_bytes = self._exit.peak_rss_bytes
                outcome.message = death_text(self._exit, outcome.phase, outcome.stderr_tail,
                                             memory_limit_bytes=self.memory_limit_bytes,
                                             oom_kills_before=self._oom_kills)
            else:
                outcome.message = f"the worker stopped answering in phase {outcome.phase!r} (still running)"
        self._stop()
        outcome.duration_s = time.perf_counter() - t0
        outcome.pid = pid
        return outcome

    def _outcome(self, answer: dict, duration_s: float, pid: int) -> ModuleOutcome:
        if answer.get("status") == OK:
            return ModuleOutcome(OK, outputs=[_decode(leaf) for leaf in answer.get("outputs") or []],
                                 samples_ns=[int(s) for s in answer.get("samples_ns") or []],
                                 compile_s=answer.get("compile_s"), duration_s=duration_s, pid=pid)
        return ModuleOutcome(ERROR, phase=str(answer.get("phase")), error_type=str(answer.get("error_type")),
                             message=str(answer.get("message", "")), detail=str(answer.get("detail", "")),
                             duration_s=duration_s, stderr_tail=self._stderr_tail(), pid=pid)

    # -- frames --------------------------------------------------------------------------------------------------
    def _send(self, message: dict) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        data = msgpack.packb(message, use_bin_type=True)
        try:
            self._proc.stdin.write(_HEADER.pack(len(data)) + data)
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError, ValueError):
            raise _Died() from None

    def _answer(self, deadline: float, calls: int = 1) -> dict:
        """The worker's answer (its phase frames noted on the way, each phase within its limit)."""
        phase_ends = deadline
        while True:
            try:
                frame = self._frame(min(deadline, phase_ends))
            except _TimedOut:
                if phase_ends < deadline:
                    self._phase_limit = f"ran past {self._limit_text} during phase {self._phase!r}"
                raise
            if frame.get("op") != "phase":
                return frame
            self._phase = str(frame.get("phase"))
            phase_ends = self._phase_deadline(self._phase, calls, deadline)

    def _phase_deadline(self, phase: str, calls: int, deadline: float) -> float:
        """When the phase that starts now must end (`deadline` where nothing bounds it sooner)."""
        limits = self.limits
        if limits is None:
            return deadline
        kind = phase_limit_kind(phase)
        seconds = {LIMIT_LOAD: limits.load_s, LIMIT_COMPILE: limits.compile_s}.get(kind, limits.calls(calls))
        if seconds is None:
            return deadline
        self._limit_text = limits.describe(kind, calls)
        return time.perf_counter() + seconds

    def _frame(self, deadline: float) -> dict:
        size = _HEADER.unpack(self._read(_HEADER.size, deadline))[0]
        if size > _MAX_FRAME:
            raise _Died()
        frame = msgpack.unpackb(self._read(size, deadline), raw=False, strict_map_key=False)
        if not isinstance(frame, dict):
            raise _Died()
        return frame

    def _read(self, size: int, deadline: float) -> bytes:
        assert self._proc is not None and self._proc.stdout is not None
        fd = self._proc.stdout.fileno()
        while len(self._buffer) < size:
            remaining = deadline - time.perf_counter()
            if remaining <= 0:
                raise _TimedOut()
            readable, _, _ = select.select([fd], [], [], remaining)
            if not readable:
                continue
            chunk = os.read(fd, max(65536, size - len(self._buffer)))
            if not chunk:
                raise _Died()
            # a bytearray grows in place: bytes += chunk copied the whole buffer per 64 KiB a pipe gives, which made
            # a 350 MB answer (minimize's intermediate values of examples/attention.py) take minutes
            self._buffer += chunk
        data = bytes(self._buffer[:size])
        del self._buffer[:size]
        return data

    # -- what a dead worker left ---------------------------------------------------------------------------------
    def _reaped(self, timeout_s: float | None) -> Ended | None:
        """How the worker process ended, reaped here (launch.reap: with its peak memory) within `timeout_s`; None
        while it runs."""
        if self._exit is None and self._proc is not None:
            self._exit = reap(self._proc, timeout_s)
        return self._exit

    def _death(self) -> str:
        """How the worker ended: a signal's name ("SIGABRT"), "exit N", or "running"."""
        ended = self._reaped(2.0)  # it closed stdout: it is on its way out
        return "running" if ended is None else ended.how

    def _stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            size = self._stderr.seek(0, os.SEEK_END)
            self._stderr.seek(max(0, size - _STDERR_TAIL))
            return self._stderr.read().decode("utf-8", "replace")
        except (OSError, ValueError):
            return ""


def _request(text: str, inputs: Sequence[np.ndarray], want: str,
             compiler_options: Mapping[str, Any] | None) -> dict:
    request: dict[str, Any] = {"op": "run", "text": text, "inputs": [_encode(a) for a in inputs], "want": want}
    if compiler_options:
        request["compiler_options"] = dict(compiler_options)
    return request


def _encode(array: Any) -> dict:
    a = np.asarray(array)
    if not a.dtype.isnative:  # the worker reads the bytes in its own order, which is this machine's
        a = a.astype(a.dtype.newbyteorder("="))
    return {"dtype": a.dtype.name, "shape": [int(d) for d in a.shape], "bytes": np.ascontiguousarray(a).tobytes()}


def _decode(leaf: dict) -> np.ndarray:
    return np.frombuffer(leaf["bytes"], dtype=dtype_of(str(leaf["dtype"]))).reshape(leaf["shape"]).copy()


def _calls_in(request: dict) -> int:
    """How many calls of the module a request makes: one for its outputs, or the first call, the warmup and the
    timed ones."""
    warmup, repeat = int(request.get("warmup") or 0), int(request.get("repeat") or 0)
    if request.get("op") == "time":
        return max(1, warmup + repeat)
    return 1 + warmup + repeat if request.get("want") == "time" else 1


def _last_line(text: str) -> str:
    return text.strip().splitlines()[-1] if text.strip() else "no output"
