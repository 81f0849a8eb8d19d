"""Replay tasks fanned out over a Ray cluster: one Ray task per bundle (the Executor of fleet/executor.py).

How a task holds its node. Timings are clean only when nothing else runs on the CPUs (or the accelerator) of the
replay, so each task asks Ray for a whole node's worth of resources:
- a CPU replay asks for `num_cpus` = the CPU count of the largest node alive when the sweep starts. On a cluster
  of equal nodes (what `ray up` and a KubeRay worker group make) every node takes one task at a time and nothing
  else Ray schedules shares its CPUs; a smaller node (a head with fewer CPUs, a mixed pool) takes none, which is
  logged. The way to use every node of a mixed cluster is to start each with the same `ray start --num-cpus N`
  (a node then offers N CPUs to Ray, whatever it has), or to give `cpus_per_task`. A head started with
  `--num-cpus 0` takes no task, as Ray intends.
- an accelerator replay holds one GPU (`num_gpus=1`, CUDA or ROCm) with that node's CPUs per GPU, or a whole TPU
  host (`resources={"TPU": chips}`, a TPU admits one process). Which platform a task replays on is decided here,
  on the driver: the task's `platform` option if given, else the bundle's own platforms against the accelerators
  the cluster's nodes declare (platforms.choose_platform, as a replay on one machine does against its devices);
  the choice is written into the task's options, so the node replays on what the task holds.
Sizes are computed from the nodes alive when a task is submitted; a task that no alive node can hold waits
`INFEASIBLE_GRACE_S` for one (an autoscaler may add it) and is then a failed attempt.

Each node creates and caches its own environments: tasks run with the node's environment folder (the EnvConfig's
`root`, a path of the driver's machine, is dropped). Results are the tasks' return values (plain JSON maps) and the
runs each task stores in the shared registry, which every node must reach (a gs:// bucket, or a folder they all
mount).

Retries: Ray's own are off (`max_retries=0`); a task that raised on its node, or whose worker or node died, is
submitted once more by the driver, preferably on another node (a soft node affinity to another node that can hold
it), and reported as failed with both reasons if that fails too. Every task is yielded exactly once. If the
driver stops (Ctrl-C, an error), its unfinished tasks are cancelled, which interrupts their replays.

What crosses the wire: a task carries only the ReplayTask as plain JSON (ReplayTask.to_dict: store URL, ref,
versions, options, environment configuration, mode) and returns a plain dict; no bundle data travels through Ray.
Ray serializes the task function itself (our own code, `run_on_node` and the function it calls) with cloudpickle, by
reference to its module: every node needs the same reprobundle (and Ray, and Python) installed as the driver.
"""

from __future__ import annotations

import logging
import math
import socket
import time
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Iterator, Mapping, Sequence, cast
from urllib.parse import urlsplit

from ..envs.platforms import ACCELERATORS, choose_platform, parse_platform
from ..errors import ClusterError, ReproBundleError, UsageError
from ..text import exception_line, quoted
from .executor import ReplayTask, TaskResult, failed_result

log = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'reprobundle[ray]' (the same reprobundle, Ray and Python on every node of the cluster)"
START_HINT = ("start a cluster with `ray start --head` (and `ray start --address HEAD:6379` on each other node), "
              "then pass its address: --ray HEAD:6379 on a node of the cluster, --ray ray://HEAD:10001 (Ray Client) "
              "from elsewhere, or --ray auto")
ATTEMPTS = 2  # the first run and one retry, preferably on another node
INFEASIBLE_GRACE_S = 60.0  # how long a task no alive node can hold waits for one before its attempt fails
POLL_S = 5.0  # how often the driver looks at the cluster while no task finishes
CONNECT_TIMEOUT_S = 10.0


def import_ray() -> Any:
    """The `ray` module, or a UsageError saying how to install it."""
    try:
        import ray
    except ImportError as e:
        raise UsageError(f"sweeping on a Ray cluster needs Ray, which is not installed here ({exception_line(e, 120)})",
                         hint=INSTALL_HINT) from None
    return ray


# ------------------------------------------------------------------------------------------------ the nodes


@dataclass(frozen=True)
class Node:
    """An alive node of the cluster as Ray reports it."""

    node_id: str
    host: str
    resources: Mapping[str, float]

    @property
    def cpus(self) -> float:
        return float(self.resources.get("CPU", 0.0))

    def describe(self) -> str:
        held = [f"{self.cpus:g} CPU{'' if self.cpus == 1 else 's'}"]
        held += [f"{self.resources[k]:g} {k}" for k in ("GPU", "TPU") if self.resources.get(k)]
        return ", ".join(held)

    @property
    def platforms(self) -> set[str]:
        """The platforms this node declares devices for: "cpu" always, "cuda" or "rocm" for GPUs (Ray counts both
        as GPU; an AMD accelerator_type names ROCm), "tpu"."""
        found = {"cpu"}
        if self.resources.get("GPU", 0) >= 1:
            amd = any(k.startswith("accelerator_type:AMD") for k in self.resources)
            found.add("rocm" if amd else "cuda")
        if self.resources.get("TPU", 0) >= 1:
            found.add("tpu")
        return found


def alive_nodes(ray: Any) -> list[Node]:
    return [Node(str(n["NodeID"]), str(n.get("NodeManagerHostname") or n.get("NodeManagerAddress") or "?"),
                 dict(n.get("Resources") or {})) for n in ray.nodes() if n.get("Alive")]


# ------------------------------------------------------------------------------------------------ placement


@dataclass(frozen=True)
class Placement:
    """What one task holds on its node: Ray's resource request for it."""

    platform: str | None  # what the task replays on (None: the node decides, which is its CPU)
    num_cpus: float
    num_gpus: float = 0.0
    resources: Mapping[str, float] = field(default_factory=dict)

    def fits(self, node: Node) -> bool:
        need = {"CPU": self.num_cpus, "GPU": self.num_gpus, **self.resources}
        return all(node.resources.get(k, 0.0) >= v for k, v in need.items() if v > 0)

    def describe(self) -> str:
        parts = [f"{self.num_cpus:g} CPU{'s' if self.num_cpus != 1 else ''}"]
        if self.num_gpus:
            parts.append(f"{self.num_gpus:g} GPU")
        parts += [f"{v:g} {k}" for k, v in sorted(self.resources.items())]
        return " and ".join(parts)

    def ray_options(self) -> dict[str, Any]:
        return {"num_cpus": self.num_cpus, "num_gpus": self.num_gpus, "resources": dict(self.resources)}


def placement_for(platform: str | None, nodes: Sequence[Node], cpus_per_task: float | None = None) -> Placement:
    """What a task replaying on `platform` asks of its node (see the module's docstring), sized from `nodes`:
    `cpus_per_task` if given, else the CPUs of the largest node able to run the platform (for a GPU, that node's
    CPUs per GPU). With no such node the request is sized for the CPUs alone, and no node fits it."""
    base = parse_platform(platform)[0] if platform else "cpu"
    able = [n for n in nodes if base in n.platforms and n.cpus >= 1]
    if base in ("cuda", "rocm"):
        cpus = cpus_per_task or max((math.floor(n.cpus / n.resources["GPU"]) for n in able), default=1) or 1
        return Placement(platform, float(cpus), num_gpus=1.0)
    if base == "tpu":
        chips = max((n.resources["TPU"] for n in able), default=1.0)
        return Placement(platform, float(cpus_per_task or max((n.cpus for n in able), default=1.0)),
                         resources={"TPU": chips})
    return Placement(platform, float(cpus_per_task or max((n.cpus for n in able), default=1.0)))


def task_platform(task: ReplayTask, nodes: Sequence[Node]) -> str | None:
    """The platform `task` replays on: its `platform` option, else (on a cluster with accelerators) the bundle's
    first platform some node has devices for, as platforms.choose_platform picks it on one machine; None on a
    cluster of CPUs only (the node decides: its CPU). A bundle the driver cannot read is left to the node, which
    reports why."""
    wanted = task.options.platform
    if wanted:
        return str(wanted)
    present = set().union(*(n.platforms for n in nodes)) if nodes else {"cpu"}
    if not present & set(ACCELERATORS):
        return None
    from ..bundle.registry import Registry

    try:
        bundle = Registry.open(task.store).resolve(task.ref)
        fields = (bundle.manifest.get("function") or {}).get("fields") or {}
        return choose_platform([str(p) for p in fields.get("platforms") or ["cpu"]], present,
                               what=str(bundle.ref)).platform
    except ReproBundleError as e:
        log.info("platform of %s left to its node: %s", task.ref, e.message)
        return None


# ------------------------------------------------------------------------------------------------ on the node


def run_on_node(fn: Callable[[ReplayTask], TaskResult], task: dict[str, Any]) -> dict[str, Any]:
    """What a Ray task runs on its node: `fn` on the task rebuilt from its plain data (ReplayTask.to_dict). Returns
    {"result": the TaskResult} or {"error": one line}, with the node's Ray id and host name; never raises for the task's own
    failure, so only a dead worker or node reaches the driver as a Ray error."""
    import ray

    _cancellable()
    where = {"node": ray.get_runtime_context().get_node_id(), "host": socket.gethostname()}
    try:
        result = fn(ReplayTask.from_dict(task))
    except ReproBundleError as e:
        return {"error": e.message, **where}
    except Exception as e:  # noqa: BLE001 - the driver reports it, and retries once elsewhere
        return {"error": exception_line(e, 300), **where}
    if not isinstance(result, dict):
        return {"error": f"the task function returned {type(result).__name__}, not a result map", **where}
    return {"result": result, **where}


def _cancellable() -> None:
    """Ray cancels a running task with `_thread.interrupt_main()`, which does nothing where SIGINT is ignored, and a
    node started from a background job of a non-interactive shell (`nohup ray start ... &` in a script) passes an
    ignored SIGINT on to every worker: the task takes SIGINT as Python does by default, so that a cancel interrupts
    its replay."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread() and \
            signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        signal.signal(signal.SIGINT, signal.default_int_handler)


# ------------------------------------------------------------------------------------------------ the driver


@dataclass
class Attempt:
    index: int
    number: int  # 1, then 2 for the retry
    placement: Placement
    infeasible_since: float | None = None


@dataclass(frozen=True)
class Failure:
    error: str
    node: str | None = None
    host: str | None = None

    def where(self) -> str:
        return f"node {self.node[:12]} ({self.host})" if self.node else "its node"


class RayExecutor:
    """Runs each task as one Ray task on the cluster at `address` ("auto", "HOST:6379" from a node of the cluster,
    "ray://HOST:10001" through Ray Client), yielding (index, result) as tasks finish (see the module's docstring
    for what a task holds, where it runs and how it is retried). Connects at construction: a cluster that cannot be
    reached is a ClusterError there. `cpus_per_task` overrides the CPUs a CPU replay holds; `infeasible_grace_s`
    is how long a task that no alive node can hold waits for one."""

    name = "ray"

    def __init__(self, address: str, *, cpus_per_task: float | None = None,
                 connect_timeout_s: float = CONNECT_TIMEOUT_S, infeasible_grace_s: float = INFEASIBLE_GRACE_S) -> None:
        if not address or not address.strip():
            raise UsageError("no Ray cluster address given", hint=START_HINT)
        if cpus_per_task is not None and not cpus_per_task >= 1:
            raise UsageError(f"cpus_per_task must be at least 1, not {cpus_per_task}")
        self.address = address.strip()
        self.cpus_per_task = cpus_per_task
        self.connect_timeout_s = connect_timeout_s
        self.infeasible_grace_s = infeasible_grace_s
        self.ray = import_ray()
        self._owns_connection = False
        self._connect()

    def _connect(self) -> None:
        ray = self.ray
        gcs = self._check_reachable()
        if ray.is_initialized():  # this process already talks to a cluster (the caller's own ray.init): use it
            current = ray.get_runtime_context().gcs_address
            if gcs and current and gcs != current:
                raise UsageError(f"this process is already connected to the Ray cluster at {quoted(current)}, "
                                 f"not {quoted(self.address)}", hint="call ray.shutdown() first, or pass that address")
            return
        try:
            ray.init(address=self.address, logging_level=logging.WARNING, log_to_driver=False,
                     namespace="reprobundle")
        except Exception as e:  # noqa: BLE001 - Ray raises ConnectionError, RuntimeError (version mismatch), ...
            mismatch = "version mismatch" in str(e).lower()
            raise ClusterError(f"cannot connect to the Ray cluster at {quoted(self.address)}: {exception_line(e, 300)}",
                               hint=INSTALL_HINT if mismatch else START_HINT) from None
        self._owns_connection = True

    def _check_reachable(self) -> str | None:
        """A HOST:PORT or ray://HOST:PORT that refuses connections fails here, in seconds (Ray itself retries for
        a minute and more); returns the HOST:PORT of a GCS address. "auto" and other forms are left to ray.init."""
        text = self.address
        parts = urlsplit(text if "://" in text else "tcp://" + text)
        try:
            host, port = parts.hostname, parts.port
        except ValueError:
            raise UsageError(f"{quoted(text)} is not a Ray cluster address", hint=START_HINT) from None
        if not host or port is None or parts.scheme not in ("tcp", "ray"):
            return None
        try:
            socket.create_connection((host, port), timeout=self.connect_timeout_s).close()
        except OSError as e:
            raise ClusterError(f"cannot reach the Ray cluster at {quoted(text)}: {e.strerror or exception_line(e)}",
                               hint=START_HINT) from None
        return f"{host}:{port}" if parts.scheme == "tcp" else None

    def close(self) -> None:
        """Disconnect, if this executor connected (a connection the caller made stays)."""
        if self._owns_connection and self.ray.is_initialized():
            self.ray.shutdown()
        self._owns_connection = False

    def run(self, fn: Callable[[ReplayTask], TaskResult], tasks: Sequence[ReplayTask]) -> Iterator[tuple[int, TaskResult]]:
        if not tasks:
            return iter(())
        if not self.ray.is_initialized():
            self._connect()
        return Fanout(self.ray, fn, tasks, self.cpus_per_task, self.infeasible_grace_s).results()


class Fanout:
    """One run of the executor: submits every task, retries a failed attempt once, yields each result once."""

    def __init__(self, ray: Any, fn: Callable[[ReplayTask], TaskResult], tasks: Sequence[ReplayTask],
                 cpus_per_task: float | None, infeasible_grace_s: float) -> None:
        self.ray = ray
        self.fn = fn
        self.tasks = tasks
        self.cpus_per_task = cpus_per_task
        self.grace_s = infeasible_grace_s
        self.poll_s = min(POLL_S, max(infeasible_grace_s / 4, 0.1))
        self.remote = ray.remote(run_on_node)
        self.nodes = alive_nodes(ray)
        self.platforms = [task_platform(task, self.nodes) for task in tasks]
        self.started = [0.0] * len(tasks)
        self.failures: list[list[Failure]] = [[] for _ in tasks]
        self.pending: dict[Any, Attempt] = {}

    def results(self) -> Iterator[tuple[int, TaskResult]]:
        ray = self.ray
        warn_about_sizes(self.nodes, self.cpus_per_task)
        try:
            for index in range(len(self.tasks)):
                self.submit(index, 1, None)
            checked = time.monotonic()
            while self.pending:
                ready, _ = ray.wait(list(self.pending), num_returns=1, timeout=self.poll_s)
                for ref in ready:
                    settled = self.collect(ref)
                    if settled is not None:
                        yield settled
                if time.monotonic() - checked >= self.poll_s:
                    checked = time.monotonic()
                    yield from self.give_up_infeasible()
        finally:
            for ref in self.pending:  # the driver stopped early: interrupt the replays still running
                try:
                    ray.cancel(ref)
                except Exception as e:  # noqa: BLE001 - best effort while unwinding
                    log.info("could not cancel a Ray task: %s", e)
            self.pending.clear()

    def collect(self, ref: Any) -> tuple[int, TaskResult] | None:
        """A finished attempt: its result, a retry (None), or the task's failed result."""
        attempt = self.pending.pop(ref)
        try:
            out = self.ray.get(ref)
        except self.ray.exceptions.RayError as e:  # its worker or node died, or it could not start there
            cause = getattr(e, "cause", None)
            return self.settle(attempt, Failure(exception_line(cause if cause is not None else e, 300)))
        if "result" not in out:
            return self.settle(attempt, Failure(str(out["error"]), out["node"], out["host"]))
        result = out["result"]
        return attempt.index, cast(TaskResult, {**result, "host": result.get("host") or out["host"],
                                                "node": out["node"], "attempts": attempt.number})

    def submit(self, index: int, number: int, avoid: str | None) -> None:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = self.tasks[index]
        nodes = alive_nodes(self.ray) if number > 1 else self.nodes
        placement = placement_for(self.platforms[index], nodes, self.cpus_per_task)
        strategy: Any = "SPREAD"
        elsewhere = sorted(n.node_id for n in nodes if n.node_id != avoid and placement.fits(n))
        if avoid and elsewhere:
            strategy = NodeAffinitySchedulingStrategy(elsewhere[0], soft=True)  # soft: that node may die too
        on_node = replace(task, env=replace(task.env, root=None))  # each node replays in its own environment folder
        if placement.platform:
            on_node = on_node.with_options(platform=placement.platform)
        ref = self.remote.options(**placement.ray_options(), max_retries=0, retry_exceptions=False,
                                  scheduling_strategy=strategy, name=f"reprobundle-replay {task.ref}"[:200]
                                  ).remote(self.fn, on_node.to_dict())
        self.pending[ref] = Attempt(index, number, placement)
        self.started[index] = self.started[index] or time.monotonic()

    def settle(self, attempt: Attempt, failure: Failure) -> tuple[int, TaskResult] | None:
        """Retry a failed attempt once; after the last one, the task's failed result."""
        index = attempt.index
        self.failures[index].append(failure)
        if attempt.number < ATTEMPTS:
            log.warning("%s: attempt %d failed on %s: %s; retrying it once%s", self.tasks[index].ref, attempt.number,
                        failure.where(), failure.error, " on another node" if failure.node else "")
            self.submit(index, attempt.number + 1, failure.node)
            return None
        failures = self.failures[index]
        last, first = failures[-1], failures[0]
        reason = last.error
        if len(failures) > 1:
            earlier = "the same" if first.error == last.error else first.error
            reason = f"{last.error} (attempt {len(failures)} on {last.where()}; attempt 1 on {first.where()}: {earlier})"
        wall_s = time.monotonic() - self.started[index]
        return index, {**failed_result(self.tasks[index], reason, wall_s=wall_s, host=last.host or "?",
                                       attempts=len(failures)), "node": last.node}

    def give_up_infeasible(self) -> Iterator[tuple[int, TaskResult]]:
        """Attempts that no alive node can hold: each fails after waiting the grace period for one."""
        nodes = alive_nodes(self.ray)
        now = time.monotonic()
        for ref, attempt in list(self.pending.items()):
            if any(attempt.placement.fits(n) for n in nodes):
                attempt.infeasible_since = None
                continue
            needs = attempt.placement.describe()
            if attempt.infeasible_since is None:
                attempt.infeasible_since = now
                log.warning("%s: no node of the Ray cluster can hold its replay now (it needs %s); waiting up to "
                            "%.0f s for one", self.tasks[attempt.index].ref, needs, self.grace_s)
                continue
            if now - attempt.infeasible_since < self.grace_s:
                continue
            self.ray.cancel(ref)
            del self.pending[ref]
            offered = "; ".join(sorted({n.describe() for n in nodes})) or "no node is alive"
            settled = self.settle(attempt, Failure(f"no node of the Ray cluster can hold it: it needs {needs}; "
                                                   f"the nodes offer {offered}"))
            if settled is not None:
                yield settled


def warn_about_sizes(nodes: Sequence[Node], cpus_per_task: float | None) -> None:
    cpus = sorted({n.cpus for n in nodes if n.cpus >= 1})
    if cpus_per_task is None and len(cpus) > 1:
        smaller = sum(1 for n in nodes if 1 <= n.cpus < cpus[-1])
        log.warning("the Ray cluster's nodes have %g to %g CPUs: a CPU replay holds %g, so %d smaller node(s) take "
                    "none (start every node with the same `ray start --num-cpus N` to use them all)",
                    cpus[0], cpus[-1], cpus[-1], smaller)
