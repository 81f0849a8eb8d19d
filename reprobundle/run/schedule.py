"""Interleaved measurement: time several workers (JAX versions) in rounds, alternating step by step.

On a shared machine, speed drifts within minutes by more than the differences worth reporting, and one process
runs the same code faster or slower than the next. So the contenders are never timed one after the other:

- A round starts one lockstep worker per contender (in the first round one after another, so that compiles
  never overlap), then alternates timed steps between them in ABBA order, so that every contender meets the
  same drift, then lets them finish one at a time (so their profiles never overlap).
- A step is a batch of calls lasting about STEP_TARGET_NS (one call for anything slower), so a tiny function
  is not measured against the cost of switching processes.
- Rounds repeat all of this in fresh processes: the process-to-process variation becomes the spread between
  rounds, which is what the verdict (compare.timing_verdict) tests a difference against.
- Contenders of several bundles that agree on their interpreter and settings (`Contender.shares`) are served by one
  process a round (shared_worker.py): each bundle still meets a new process every round, and one round's process
  serves each version's side of a bundle alike, so starting processes costs a round, not a bundle.
- Where only one process may hold the device (a TPU), the rounds are *alternated* instead (`alternate`): a round
  visits the contenders one after another, in the round's rotated order (A B, then B A, ...), each visit one process
  that loads, compiles and times the round's steps, then ends before the next opens the device. The device's
  opening is never inside a timed call, and the verdict pairs the adjacent visits of a round as it pairs the
  interleaved steps of a concurrent one; the run records say the versions were alternated, not concurrent.
"""

from __future__ import annotations

import math
import shutil
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from ..config import DEFAULT_STEPS as DEFAULT_STEPS  # defined there for the CLI, with its reason
from ..logs import Status
from . import spent
from .execution import PhaseLimits, WorkerOutcome, WorkerProcess, compile_cache_env, pinned_env
from .shared_worker import JobView, SharedWorker

STEP_TARGET_NS = 50_000_000
MAX_CALLS_PER_STEP = 512
DEFAULT_ROUNDS = 8

JobWriter = Callable[[Path, int], Path]  # (empty work folder, round index) -> job file for a lockstep worker
# (the measurements so far, rounds done) -> keys of the contenders that must take another round
MoreRounds = Callable[[dict[str, "Measurement"], int], Sequence[str]]


@dataclass(frozen=True)
class Pin:
    """Every worker of a measurement on the same CPUs with the same number of threads: steadier timings, at the
    price of realism (XLA then uses `threads` threads however many CPUs the machine has; a change that shows only
    with more threads, or only under contention, is not seen). `cpus` is the affinity mask the workers get (set before
    the worker starts, so XLA sizes its pools to it), `threads` the count every thread setting gets
    (execution.pinned_env)."""

    cpus: tuple[int, ...]
    threads: int

    def describe(self) -> str:
        return f"pinned to CPUs {','.join(map(str, self.cpus))} with {self.threads} thread(s)"


@dataclass(frozen=True)
class Contender:
    key: str  # unique among the contenders
    python: str | Path
    write_job: JobWriter
    label: str = ""  # for progress lines (default: the key)
    # Contenders compared with each other share a group: each of its steps makes the same number of calls.
    group: str = ""
    limits: PhaseLimits | None = None  # how long each phase of its workers may run (None: only the timeout)
    # Contenders with the same non-empty `shares` may be served by one process in a round (shared_worker.py): the
    # same interpreter, settings, platform and 64-bit mode, so that the first job's setting up holds for every job.
    shares: str = ""


@dataclass
class Measurement:
    """One contender's measurement. `outcome` is its first round's (result, outputs and artifacts in its work
    folder), or the outcome of the round where it failed; `failed_round` says which (None: every round ran)."""

    outcome: WorkerOutcome | None = None
    failed_round: int | None = None
    samples_ns: list[int] = field(default_factory=list)
    per_op_tables: list[list[dict]] = field(default_factory=list)  # the per-op table of each round that profiled
    steps: list[int] = field(default_factory=list)  # calls in each step, consecutive in samples_ns
    rounds: list[int] = field(default_factory=list)  # steps in each round, consecutive in steps
    calls_per_step: int = 0
    spent: dict[str, float] = field(default_factory=dict)  # its workers' seconds by category, every round (spent.py)


def rounds_for(contenders: int, steps: int, rounds: int | None) -> int:
    """The number of rounds: `rounds` if given, else DEFAULT_ROUNDS when there is something to alternate with."""
    if rounds is not None:
        return max(1, rounds)
    return max(1, min(DEFAULT_ROUNDS, steps)) if contenders > 1 else 1


def calls_per_step(call_ns: int) -> int:
    return max(1, min(MAX_CALLS_PER_STEP, math.ceil(STEP_TARGET_NS / max(1, call_ns))))


def measure_interleaved(contenders: Sequence[Contender], workdir: Path, *, steps: int, rounds: int,
                        timeout_s: float, memory_limit_bytes: int | None = None,
                        progress: Callable[[str], None] | None = None, more: MoreRounds | None = None,
                        pin: Pin | None = None, concurrent: bool = False,
                        alternate: bool = False) -> dict[str, Measurement]:
    """Measure `contenders` in `rounds` rounds of about steps/rounds steps each; never raises for a worker.

    A contender that fails in a round (crash, hang, error, incompatible) leaves the later rounds; the others go on.
    Every round's worker gets its own folder under `workdir`; only the first round's is kept.
    With `more` the budget is adaptive: `rounds` is the most there may be, and after each round `more(measured,
    rounds done)` names the contenders that take another (a settled one retires; none named: the measurement ends).
    `pin` runs every worker on the same CPUs with the same thread count (see Pin). `concurrent`: the first round's
    workers load and compile together too (a measurement whose times judge nothing: compiles may overlap).
    `alternate`: one process at a time, each contender's round a visit of its own (see the module's docstring).
    """
    session = _Session(contenders, workdir, timeout_s=timeout_s, memory_limit_bytes=memory_limit_bytes, pin=pin,
                       rounds=rounds, say=progress or (lambda _line: None), concurrent=concurrent and not alternate)
    steps_per_round = max(1, math.ceil(steps / rounds))
    active = list(contenders)
    try:
        for round_index in range(rounds):
            if not active:
                break
            order = rotated(active, round_index)
            if alternate:
                session.visit_round(order, steps_per_round, round_index)
            else:
                live = session.start_round(order, round_index)
                session.time_steps(live, steps_per_round, round_index)
                session.finish_round(live, round_index)
            active = [c for c in active if session.measured[c.key].failed_round is None]
            if more is not None and active:
                keep = set(more(session.measured, round_index + 1))
                active = [c for c in active if c.key in keep]
    except BaseException:
        session.kill_started()  # interrupted (Ctrl-C) or failed here: no worker outlives the host's temp folder
        raise
    done = max((len(m.rounds) for m in session.measured.values()), default=0)
    session.say(Status(f"timed {done} round{'s' if done != 1 else ''}", "done", done, done))
    return session.measured


Live = list[tuple[Contender, WorkerProcess]]  # the workers of a round that got ready, in the round's order


def shared_keys(contenders: Sequence[Contender]) -> set[str]:
    """The `shares` keys that more than one of `contenders` have: each is one process a round."""
    counts = Counter(c.shares for c in contenders if c.shares)
    return {key for key, n in counts.items() if n > 1}


def processes_at_once(contenders: Sequence[Contender]) -> int:
    """How many worker processes a round of `contenders` holds at once: one per shared key, one per other."""
    shared = shared_keys(contenders)
    return len(shared) + sum(1 for c in contenders if c.shares not in shared)


class _Session:
    """The state of one measurement: each contender's Measurement, and the workers of the round under way."""

    def __init__(self, contenders: Sequence[Contender], workdir: Path, *, timeout_s: float,
                 memory_limit_bytes: int | None, pin: Pin | None, rounds: int, say: Callable[[str], None],
                 concurrent: bool = False):
        self.contenders = contenders
        self.workdir = workdir
        self.timeout_s = timeout_s
        self.memory_limit_bytes = memory_limit_bytes
        self.pin = pin
        self.rounds = rounds
        self.say = say
        self.concurrent = concurrent
        self.measured = {c.key: Measurement() for c in contenders}
        self.started: Live = []
        self.sharing: set[str] = set()  # the `shares` keys served by one process in the round under way
        self.processes: dict[str, SharedWorker] = {}  # their processes

    def kill_started(self) -> None:
        for _, worker in self.started:
            worker.kill()
        for process in self.processes.values():
            process.kill()

    def _where(self, round_index: int) -> str:
        return f"round {round_index + 1}/{self.rounds}"

    def _start(self, c: Contender, round_index: int, *, visit: bool = False) -> WorkerProcess:
        # contender-I/round-R, or a folder of its own beside it where another measurement in `workdir` (a
        # bisection's probes) made that one (I is this measurement's numbering)
        parent = self.workdir / f"contender-{self.contenders.index(c)}"
        parent.mkdir(parents=True, exist_ok=True)
        folder = parent / f"round-{round_index}"
        try:
            folder.mkdir()
        except FileExistsError:
            folder = Path(tempfile.mkdtemp(prefix=f"round-{round_index}-", dir=parent))
        pin = self.pin
        job = c.write_job(folder, round_index)
        cpus, extra_env = (pin.cpus, pinned_env(pin.threads)) if pin else (None, None)
        if visit:  # a visit compiles what the contender's visits before it compiled: load it from JAX's cache
            extra_env = {**(extra_env or {}), **compile_cache_env(c.python, c.label or c.key)}
        worker: WorkerProcess
        if c.shares in self.sharing:
            process = self.processes.get(c.shares)
            if process is None:
                process = self.processes[c.shares] = SharedWorker(
                    c.python, self.workdir / f"shared-{len(self.processes)}" / f"round-{round_index}",
                    timeout_s=self.timeout_s, memory_limit_bytes=self.memory_limit_bytes, cpus=cpus,
                    extra_env=extra_env)
            worker = process.add(job, c.limits, c.label or c.key)
        else:
            worker = WorkerProcess(c.python, job, timeout_s=self.timeout_s, memory_limit_bytes=self.memory_limit_bytes,
                                   lockstep=True, limits=c.limits, cpus=cpus, extra_env=extra_env)
        self.started.append((c, worker))
        return worker

    def start_round(self, order: Sequence[Contender], round_index: int) -> Live:
        """Start a worker per contender and wait until each is ready to time; the ones that got ready."""
        rounds, where = self.rounds, self._where(round_index)
        live: Live = []
        self.started = []
        self.sharing = shared_keys(order)
        if round_index > 0 or self.concurrent:
            # Later rounds only time, so their workers start together, which saves most of a start.
            self.say(Status(f"{where}: starting " + ", ".join(c.label or c.key for c in order), "round",
                            round_index, rounds))
            for c in order:
                self._start(c, round_index)
            for _, worker in self.started:
                worker.request_load()
            for c, worker in self.started:
                _get_ready(c, worker, self.measured, live, round_index, rounds)
        else:
            # The first round's workers load and compile one at a time, so that their compile times and dumps are
            # clean.
            for c in order:
                self.say(Status(f"{where}: loading and compiling {_on_jax(c)}", "compile", 0, rounds))
                worker = self._start(c, round_index)
                _get_ready(c, worker, self.measured, live, round_index, rounds)
        if round_index == 0:
            self._same_calls_per_group(live)
        return live

    def visit_round(self, order: Sequence[Contender], steps_per_round: int, round_index: int) -> None:
        """An alternated round: each contender in `order` gets a process of its own that loads, times the round's
        steps and finishes before the next one starts. In the first round each visit times with its own calls a
        step; the later rounds with the fewest of its group (as concurrent rounds do from the first)."""
        visited: Live = []
        self.sharing = set()
        for c in order:
            live = self._visit_ready(c, round_index)
            self.time_steps(live, steps_per_round, round_index)
            self.finish_round(live, round_index)
            visited += live
        if round_index == 0:
            self._same_calls_per_group(visited)

    def _visit_ready(self, c: Contender, round_index: int) -> Live:
        self.started = []
        live: Live = []
        self.say(Status(f"{self._where(round_index)}: visiting {_on_jax(c)} (one process at a time)", "round",
                        round_index, self.rounds))
        worker = self._start(c, round_index, visit=True)
        _get_ready(c, worker, self.measured, live, round_index, self.rounds)
        return live

    def _same_calls_per_group(self, live: Live) -> None:
        # Every contender of a group makes the same number of calls a step (the fewest any of them needs): a step
        # of 2 calls and one of 3 differ in warm-up and overhead, a bias no number of rounds removes.
        for group in {c.group for c, _ in live}:
            peers = [self.measured[c.key] for c, _ in live if c.group == group]
            common = min(m.calls_per_step for m in peers)
            for m in peers:
                m.calls_per_step = common

    def time_steps(self, live: Live, steps_per_round: int, round_index: int) -> None:
        """The round's timed steps, alternated in ABBA order; a worker that stops answering fails the round."""
        doing = "running (untimed)" if self.concurrent else "timing"
        self.say(Status(f"{self._where(round_index)}: {doing} " + ", ".join(c.label or c.key for c, _ in live),
                        "round", round_index, self.rounds))
        for step in range(steps_per_round):
            for c, worker in (live if step % 2 == 0 else live[::-1]):
                m = self.measured[c.key]
                if m.failed_round is not None:
                    continue
                times = worker.time_calls(m.calls_per_step)
                if times is None:
                    m.failed_round = round_index  # its outcome says why, in finish_round
                    continue
                m.samples_ns.extend(times)
                m.steps.append(len(times))

    def finish_round(self, live: Live, round_index: int) -> None:
        """Let the workers finish one at a time (profiles never overlap) and keep what each round adds."""
        self.say(Status(f"{self._where(round_index)}: finishing (profiles, outputs)", "profile", round_index,
                        self.rounds))
        for c, worker in live:
            m = self.measured[c.key]
            outcome = worker.finish()
            spent.add(m.spent, spent.worker_spent(outcome.duration_s, outcome.result,
                                                  own_process=not isinstance(worker, JobView)))
            if m.failed_round is not None or outcome.status != "ok":
                _fail(m, outcome, round_index, self.rounds)
                continue
            m.rounds.append(len(m.steps) - sum(m.rounds))
            per_op = (outcome.result or {}).get("per_op")
            if per_op:
                m.per_op_tables.append(per_op)
            if round_index == 0:
                m.outcome = outcome
            elif outcome.workdir is not None:
                shutil.rmtree(outcome.workdir, ignore_errors=True)
        for process in self.processes.values():
            process.close()
        self.processes = {}
        self.started = []


def _on_jax(c: Contender) -> str:
    """`on jax 0.8.0`, or for a bundle measured beside others (label `NAME on 0.8.0`) `NAME on jax 0.8.0`."""
    label = c.label or c.key
    name, on, version = label.rpartition(" on ")
    return f"{name} on jax {version}" if on else f"on jax {label}"


def rotated(active: Sequence[Contender], k: int) -> list[Contender]:
    """The order of round k: the groups rotated by k, and each group's members rotated by k within it, so that who
    goes first changes from round to round while the members of a group stay side by side (their steps back to
    back)."""
    groups: dict[str, list[Contender]] = {}
    for c in active:
        groups.setdefault(c.group, []).append(c)
    names = list(groups)
    names = names[k % len(names):] + names[:k % len(names)]
    return [c for name in names for c in groups[name][k % len(groups[name]):] + groups[name][:k % len(groups[name])]]


def _get_ready(c: Contender, worker: WorkerProcess, measured: dict[str, Measurement],
               live: list[tuple[Contender, WorkerProcess]], round_index: int, rounds: int) -> None:
    call_ns = worker.wait_ready()
    m = measured[c.key]
    if call_ns is None:
        outcome = worker.finish()
        spent.add(m.spent, spent.worker_spent(outcome.duration_s, outcome.result,
                                                  own_process=not isinstance(worker, JobView)))
        _fail(m, outcome, round_index, rounds)
        return
    if round_index == 0:
        m.calls_per_step = calls_per_step(call_ns)
    live.append((c, worker))


def _fail(m: Measurement, outcome: WorkerOutcome, round_index: int, rounds: int) -> None:
    m.failed_round = round_index
    if outcome.status == "ok":  # it ended its timing before it was asked to
        outcome.status, outcome.reason = "crashed", f"it stopped answering timing requests ({outcome.reason})"
    if round_index > 0:
        outcome.reason = f"in round {round_index + 1} of {rounds}: {outcome.reason}"
    m.outcome = outcome
