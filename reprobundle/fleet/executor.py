"""Where replay tasks run: one after another on this machine, or fanned out over a Ray cluster (fleet/ray_executor.py).

A task is data (a `ReplayTask`: store URL, bundle ref, versions, plain replay options) and `run_replay_task`
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
- Task options (`ReplayTask.options`) are fleet/sweep.DEFAULT_OPTIONS' keys: warmup, repeat, rounds, max_time_s,
  pin (a list of CPU ids or None), platform ("cpu", "cuda", ... or None), timeout_s, env_dir (None: the node's
  default environment cache). `platform` is what a task needs of its node (e.g. a GPU resource for "cuda").
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Protocol, Sequence

from ..errors import ReproBundleError
from ..text import exception_line


@dataclass(frozen=True)
class ReplayTask:
    """One bundle to replay on `versions` timed together. `options` are replay's keyword options (warmup, repeat,
    rounds, max_time_s, pin, platform, timeout_s, env_dir) as plain JSON values, so a task crosses processes and
    machines as data."""

    store: str
    ref: str
    versions: tuple[str, ...]
    options: dict[str, Any] = field(default_factory=dict)


# A task's outcome as `run_replay_task` returns it: plain JSON values with the keys of `result_skeleton`.
# "status" is "done" (the replay ran; each version's own status is in "runs") or "failed" (the task produced no
# runs: "error" says why); "stored" marks a result read back from an earlier replay (resume) instead of run now.
TaskResult = dict

RESULT_FORMAT = "reprobundle.sweep-task"
RESULT_VERSION = 1


def result_skeleton(ref: str, versions: Sequence[str]) -> TaskResult:
    """Every key a TaskResult has, with the values of a task that has not run."""
    return {"format": RESULT_FORMAT, "version": RESULT_VERSION, "ref": ref, "bundle_id": None, "store": None,
            "function": None, "input_shapes": [],  # a captured bundle's function and input shapes (a sweep by size)
            "versions": list(versions), "status": "done", "error": None, "stored": False, "group": None,
            "runs": [],  # [{"version", "jax", "run_id", "status", "reason", "created"}] in the order of versions
            "verdict": None, "ratio": None, "ci95": None, "p_value": None, "method": None, "settled": None,
            "medians_ns": [None] * len(versions), "headline": "",
            "candidates": [],  # per version after the baseline: its verdict, outputs and move (sweep.summarize)
            "outputs": "ok", "outputs_detail": "",  # "ok", "mismatch" or "failed" across the versions
            "moved": None, "moved_line": "",  # the op that moved most (one line), and the comparison's sentence
            "host": None, "wall_s": 0.0, "options": {}, "attempts": 1}


def failed_result(task: ReplayTask, error: str, *, wall_s: float = 0.0, host: str | None = None,
                  attempts: int = 1) -> TaskResult:
    """A task that produced no runs, with its error: the sweep reports the bundle instead of losing it."""
    from ..text import first_line

    return {**result_skeleton(task.ref, task.versions), "store": task.store, "status": "failed",
            "error": first_line(error, 400), "outputs": "failed", "host": host or socket.gethostname(),
            "wall_s": round(wall_s, 3), "options": dict(task.options), "attempts": attempts}


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
            except ReproBundleError as e:
                result = failed_result(task, e.message, wall_s=time.perf_counter() - start)
            except Exception as e:  # noqa: BLE001 - one bundle's failure is its result; the sweep goes on
                result = failed_result(task, exception_line(e), wall_s=time.perf_counter() - start)
            yield index, result

