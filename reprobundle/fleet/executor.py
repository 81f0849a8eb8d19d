"""Where replay tasks run: one after another on this machine, or fanned out over a Ray cluster (fleet/ray_executor.py).

A task is data (a `ReplayTask`: store URL, bundle ref, versions, ReplayOptions, EnvConfig, mode) and `run_replay_task`
(fleet/sweep.py) is the one function that carries it out, on whichever machine: it replays the bundle on the versions
timed together, stores the runs in the task's registry and returns a plain, JSON-able summary (`TaskResult`, keys
below). Executors only decide where and when tasks run; none times anything itself, and on one machine they never
run two tasks at once (timings taken beside another job on the same CPUs are not clean).

Contract for fleet/ray_executor.py (engineer D's side; this file is the only thing both sides share):
- `fleet/connect.executor_for(address)` creates `ray_executor.RayExecutor(address)` (address: "auto",
  "ray://host:10001", "host:6379"), importing that module only then; an ImportError there (Ray not installed)
  becomes the typed "install reprobundle[ray]" UsageError. The factory is in fleet/connect.py, not here: ray_executor
  imports this module, so a factory here that imports ray_executor would close an import cycle (tests/test_layers).
- `RayExecutor.run(fn, tasks)` calls `fn(task)` remotely (fn is `run_replay_task`, importable on every node) and
  yields `(index, result)` as each finishes, every index exactly once. A task that raised, or whose node died, and
  that still fails after its retry, is yielded as `failed_result(task, error, host=..., attempts=...)`.
- A task crosses machines as plain JSON (`ReplayTask.to_dict`/`from_dict`): its options are run/replay_options.py's
  ReplayOptions, its environments envs/env_config.py's EnvConfig (root None: the node's default environment cache),
  its mode frozen or retrace. `options.platform` is what a task needs of its node (e.g. a GPU resource for "cuda").
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping, NotRequired, Protocol, Sequence, TypedDict

from ..envs.env_config import EnvConfig
from ..errors import DiskFullError, ReproBundleError
from ..run.replay_options import ReplayOptions
from ..text import exception_line


@dataclass(frozen=True)
class ReplayTask:
    """One bundle to replay on `versions` timed together, with `options`, in environments made by `env`, every
    contender in `mode` ("frozen" or "retrace"). Plain data across processes and machines: `to_dict`."""

    store: str
    ref: str
    versions: tuple[str, ...]
    options: ReplayOptions = field(default_factory=ReplayOptions)
    env: EnvConfig = field(default_factory=EnvConfig)
    mode: str = "frozen"

    def to_dict(self) -> dict[str, Any]:
        return {"store": self.store, "ref": self.ref, "versions": list(self.versions),
                "options": self.options.to_dict(), "env": self.env.to_dict(), "mode": self.mode}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ReplayTask":
        return cls(str(data["store"]), str(data["ref"]), tuple(data["versions"]),
                   ReplayOptions.from_dict(data.get("options") or {}), EnvConfig.from_dict(data.get("env") or {}),
                   str(data.get("mode") or "frozen"))

    def with_options(self, **changes: Any) -> "ReplayTask":
        return replace(self, options=replace(self.options, **changes))

    def options_record(self) -> dict[str, Any]:
        """What a result records of the task's settings (its `options` in --json): the timing options
        (ReplayOptions.timing_record), then env_dir, python, index_url and mode."""
        return {**self.options.timing_record(), "env_dir": self.env.root, "python": self.env.python,
                "index_url": self.env.index_url, "mode": self.mode}


class RunSummary(TypedDict):
    """One version's run in a TaskResult."""

    version: str
    jax: str
    run_id: str
    status: str
    reason: str
    created: str | None


class TaskResult(TypedDict):
    """A task's outcome as `run_replay_task` returns it (plain JSON values, keys in the order of
    `result_skeleton`). "status" is "done" (the replay ran; each version's own status is in "runs") or "failed" (the
    task produced no runs: "error" says why); "stored" marks a result read back from an earlier replay (resume)
    instead of run now. "reproduce" is added by the sweep's report."""

    format: str
    version: int
    ref: str
    bundle_id: str | None
    store: str | None
    function: str | None  # a captured bundle's function and input shapes (a sweep by size)
    input_shapes: list[str]
    versions: list[str]
    status: str
    error: str | None
    stored: bool
    group: str | None
    runs: list[RunSummary]  # in the order of versions
    verdict: str | None
    ratio: float | None
    ci95: Any
    p_value: float | None
    method: str | None
    settled: bool | None
    medians_ns: list[float | None]
    headline: str
    candidates: list[dict[str, Any]]  # per version after the baseline: its verdict, outputs and move
    outputs: str  # "ok", "mismatch" or "failed" across the versions
    outputs_detail: str
    moved: Any  # the op that moved most (one line), and the comparison's sentence
    moved_line: str
    host: str | None
    wall_s: float
    spent: dict[str, float]  # its runs' worker seconds by category (run/spent.py)
    options: dict[str, Any]  # ReplayTask.options_record
    attempts: int
    node: NotRequired[str | None]  # the Ray node that ran it (fleet/ray_executor.py)
    reproduce: NotRequired[dict[str, Any]]


RESULT_FORMAT = "reprobundle.sweep-task"
RESULT_VERSION = 1


def result_skeleton(ref: str, versions: Sequence[str]) -> TaskResult:
    """Every key a TaskResult has, with the values of a task that has not run."""
    return {"format": RESULT_FORMAT, "version": RESULT_VERSION, "ref": ref, "bundle_id": None, "store": None,
            "function": None, "input_shapes": [], "versions": list(versions), "status": "done", "error": None,
            "stored": False, "group": None, "runs": [], "verdict": None, "ratio": None, "ci95": None, "p_value": None,
            "method": None, "settled": None, "medians_ns": [None] * len(versions), "headline": "", "candidates": [],
            "outputs": "ok", "outputs_detail": "", "moved": None, "moved_line": "", "host": None, "wall_s": 0.0,
            "spent": {}, "options": {}, "attempts": 1}


def failed_result(task: ReplayTask, error: str, *, wall_s: float = 0.0, host: str | None = None,
                  attempts: int = 1) -> TaskResult:
    """A task that produced no runs, with its error: the sweep reports the bundle instead of losing it."""
    from ..text import first_line

    result = result_skeleton(task.ref, task.versions)
    result.update({"store": task.store, "status": "failed", "error": first_line(error, 400), "outputs": "failed",
                   "host": host or socket.gethostname(), "wall_s": round(wall_s, 3), "options": task.options_record(),
                   "attempts": attempts})
    return result


class Executor(Protocol):
    """Runs tasks and yields (index in `tasks`, result) as each finishes, in any order. A task that raised is
    reported as a result with status "failed" and its error, never lost; every index is yielded exactly once."""

    name: str

    def run(self, fn: Callable[[ReplayTask], TaskResult], tasks: Sequence[ReplayTask]) -> Iterator[tuple[int, TaskResult]]:
        ...


class LocalExecutor:
    """Every task in this process, one after another (a replay already uses the machine's CPUs)."""

    name = "local"

    def run(self, fn: Callable[[ReplayTask], TaskResult], tasks: Sequence[ReplayTask]) -> Iterator[tuple[int, TaskResult]]:
        for index, task in enumerate(tasks):
            start = time.perf_counter()
            try:
                result = fn(task)
            except DiskFullError:  # the machine's condition, not this bundle's result: the sweep stops
                raise
            except ReproBundleError as e:
                result = failed_result(task, e.message, wall_s=time.perf_counter() - start)
            except Exception as e:  # noqa: BLE001 - one bundle's failure is its result; the sweep goes on
                result = failed_result(task, exception_line(e), wall_s=time.perf_counter() - start)
            yield index, result

