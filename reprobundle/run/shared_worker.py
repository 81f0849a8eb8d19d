"""One lockstep worker process serving several jobs of one contender (worker/shared.py's protocol): a measurement of
many bundles starts a process per contender and round, not one per bundle and contender (schedule.py decides who
shares).

Each job is seen through a JobView, which is a WorkerProcess to the schedule (wait_ready, time_calls, finish, kill)
watching its own job: its result file's phase, its phase limits, its working time. A job that runs past a limit or
its working time kills the process, as a worker of its own would be killed, and its outcome says so. The other jobs
of a process that died are each retried once in a new process (its successor), with a line in the log; a job that
loses a second process fails with that reason.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from pathlib import Path

from ..store.watchdog import untrack_group
from .execution import PhaseLimits, WorkerOutcome, WorkerProcess, batch_times, stderr_tail
from .worker_launch import close_pipes, kill_group, start_worker

log = logging.getLogger(__name__)
_CLOSE_WAIT_S = 60.0  # a process whose jobs all ended exits at the end of its stdin; past this it is killed


class SharedWorker:
    """The process, the line buffer its views read from, and which view's command it died on (`culprit`)."""

    def __init__(self, python: str | Path, folder: Path, *, timeout_s: float, memory_limit_bytes: int | None,
                 extra_env: dict[str, str] | None = None, cpus=None) -> None:
        self._spec = (python, folder, timeout_s, memory_limit_bytes, extra_env, cpus)
        folder.mkdir(parents=True, exist_ok=True)
        self.timeout_s = timeout_s
        self.memory_limit_bytes = memory_limit_bytes
        self.stderr_path = folder / "worker-stderr.txt"
        self.proc = start_worker(python, ["jobs", str(folder)], self.stderr_path, memory_limit_bytes=memory_limit_bytes,
                                 extra_env=extra_env, lockstep=True, cpus=cpus)
        self.buffer = b""
        self.views: list[JobView] = []
        self.culprit: JobView | None = None
        self.successor: SharedWorker | None = None

    def add(self, job_path: Path, limits: PhaseLimits | None, label: str) -> "JobView":
        view = JobView(self, str(len(self.views)), job_path, limits, label)
        self.views.append(view)
        return view

    @property
    def lost(self) -> bool:
        return self.culprit is not None or self.proc.poll() is not None

    def replacement(self) -> "SharedWorker":
        """The process that takes over the jobs this one left when it died (one for all of them)."""
        if self.successor is None:
            python, folder, timeout_s, memory_limit_bytes, extra_env, cpus = self._spec
            self.successor = SharedWorker(python, folder / "replaced", timeout_s=timeout_s,
                                          memory_limit_bytes=memory_limit_bytes, extra_env=extra_env, cpus=cpus)
        return self.successor

    def close(self) -> None:
        """End the process (and its successors) once their jobs ended: the end of stdin, then its exit."""
        for worker in self._chain():
            close_pipes(worker.proc)
            try:
                worker.proc.wait(timeout=_CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                kill_group(worker.proc)
            worker.proc.wait()
            untrack_group(worker.proc.pid)

    def kill(self) -> None:
        """Kill the process and its successors now and reap them (the host was interrupted)."""
        for worker in self._chain():
            kill_group(worker.proc)
            worker.proc.wait()
            untrack_group(worker.proc.pid)

    def _chain(self) -> list["SharedWorker"]:
        chain: list[SharedWorker] = [self]
        while chain[-1].successor is not None:
            chain.append(chain[-1].successor)
        return chain


class JobView(WorkerProcess):
    """One job of a SharedWorker, with WorkerProcess's lockstep interface and watch (see the module docstring)."""

    def __init__(self, shared: SharedWorker, key: str, job_path: Path, limits: PhaseLimits | None,
                 label: str) -> None:
        self.shared = shared
        self.key = key
        self.job_path = job_path
        self.label = label
        self.state = "new"  # loading, ready, ended (its result final), done (finished), lost (its process died)
        self.retried = False
        # how long the host waited on this job's replies (its outcome's duration): the first job's include its
        # process's start
        self.waited_s = 0.0
        self.memory_limit_bytes = shared.memory_limit_bytes
        self.watch_job(job_path, limits, shared.timeout_s, lockstep=True)

    # The process's parts, shared by its views (WorkerProcess's methods use them as a worker of its own).
    @property
    def proc(self) -> subprocess.Popen:  # type: ignore[override]
        return self.shared.proc

    @property
    def _stderr_path(self) -> Path:  # type: ignore[override]
        return self.shared.stderr_path

    @property
    def _buffer(self) -> bytes:  # type: ignore[override]
        return self.shared.buffer

    @_buffer.setter
    def _buffer(self, value: bytes) -> None:
        self.shared.buffer = value

    # -- lockstep ------------------------------------------------------------------------------------------------
    def request_load(self) -> None:
        if self.state == "new":
            self._working_since = time.perf_counter()
            paths = json.dumps({"job": str(self.job_path), "result": str(self.result_path)})
            if self._send(f"load {self.key} {paths}"):
                self.state = "loading"
            else:
                self._lose()

    def wait_ready(self) -> int | None:
        if not self._carry_on():
            return None
        self.request_load()
        line = self._reply()
        if line is None:
            return None
        fields = line.split()
        if len(fields) == 3 and fields[:2] == ["ready", self.key] and fields[2].isdigit():
            self.state, self._ready = "ready", True
            return int(fields[2])
        self._refuse(line)
        return None

    def time_calls(self, n: int) -> list[int] | None:
        if not self._carry_on():
            return None
        self._working_since = time.perf_counter()
        self._command = (time.time(), n)
        if not self._send(f"time {self.key} {n}"):
            self._lose()
            return None
        line = self._reply()
        self._command = None
        times = None if line is None else batch_times(line, n)
        if line is not None and times is None:
            self._refuse(line)
        return times

    def finish(self) -> WorkerOutcome:
        if self.state == "ready" and self._carry_on():
            self._closed_at = time.time()
            self._working_since = time.perf_counter()
            if not self._send(f"finish {self.key}"):
                self._lose()
            else:
                line = self._reply()
                if line is not None and line != f"done {self.key}":
                    self._refuse(line)
                elif line is not None:
                    self.state = "done"
        return self._within_memory_limit(self._outcome())

    # -- the process, and its loss -----------------------------------------------------------------------------
    def _reply(self) -> str | None:
        """The process's next line; None (the job lost its process, or ended: its result is final) otherwise."""
        asked = time.perf_counter()
        line = self._read_line()
        self.waited_s += time.perf_counter() - asked
        if line is None:
            self._lose()
            return None
        if line == f"ended {self.key}":
            self.state = "ended"
            return None
        return line

    def _refuse(self, line: str) -> None:
        """Not the worker speaking as the protocol says: kill it; this job is what it failed on."""
        log.debug("%s: unexpected reply from its shared worker: %r", self.label, line[:200])
        self._kill()
        self._lose()

    def _lose(self) -> None:
        if self.shared.culprit is None:
            self.shared.culprit = self
        self.state = "lost"

    def _carry_on(self) -> bool:
        """Whether this job can go on: its process is alive, or (once) a new one took it over and loaded it."""
        if self.state in ("ended", "lost"):
            return False
        if not self.shared.lost:
            return True
        if self.retried:
            self.state = "lost"
            return False
        self.retried = True
        log.warning("%s: the worker process it shared with other bundles ended while serving another of them; "
                    "retrying it in a new process", self.label)
        was_ready = self.state == "ready"
        self.shared = self.shared.replacement()
        self.shared.views.append(self)
        self.state = "new"
        self.watch_job(self.job_path, self.limits, self.shared.timeout_s, lockstep=True)
        # the dead process's last provisional result would date the new one's phases from its own checkpoints
        self.result_path.unlink(missing_ok=True)
        return not was_ready or self.wait_ready() is not None

    def _outcome(self) -> WorkerOutcome:
        duration = self.waited_s  # its share of the process's wall time (spent.worker_spent)
        tail = stderr_tail(self._stderr_path)
        if self.state in ("done", "ended"):
            return self._result_outcome(duration, tail)
        if self.shared.culprit is self:
            try:  # killed, or dying: its exit status says how
                self.proc.wait(timeout=_CLOSE_WAIT_S)
            except subprocess.TimeoutExpired:
                self._kill()
                self.proc.wait()
            return self._killed_outcome(duration, tail) or self._exit_outcome(duration, tail) or \
                self._result_outcome(duration, tail)
        return WorkerOutcome("crashed", "its worker process, shared with other bundles, ended twice while serving "
                             "others (retried once in a new one)", self._last_result("crashed"), duration, tail,
                             self.workdir)
