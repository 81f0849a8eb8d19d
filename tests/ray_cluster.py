"""A real Ray cluster on this machine for tests and benchmarks: a head and more nodes, each its own
`ray start --block` process tree with its own ports, temp folder and loopback address (the head 127.0.0.2, the
next nodes 127.0.0.3, ...; Ray would otherwise announce the machine's interface address, and it replaces
127.0.0.1 with that). `connect()` attaches this process's Ray driver to the head's raylet: Ray before ~2.5x
attaches a driver to any node of its host, and a test that kills a node must not kill its own driver's raylet.

A node is killed as a machine dies: SIGKILL to its whole process tree (the `ray start` process, the raylet, its
agents, the Ray workers the raylet started, and what they started, such as replay workers). `stop()` kills every
node the same way and checks that nothing of theirs is left.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

HOST = "127.0.0.2"  # the head; node k (k >= 1) is 127.0.0.(2 + k)
RAY = Path(sys.executable).with_name("ray")
# A node is up when its log says "Ray runtime started" (or it failed when its process ended): this limit only ends a
# start that hangs, generous enough for a 2-core machine under a load of 10 (where ~2 min was seen and not enough).
START_TIMEOUT_S = 600.0
_IGNORING_SIGINT = "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); os.execv(sys.argv[1], sys.argv[1:])"
PORTS_PER_NODE = 40  # fixed services (<= 12) and the range its Ray workers listen on
HEAD_ENV = {
    # the GCS declares a node dead after ~5-15 s without answers to its health checks instead of ~15-30 s: a killed
    # node's task fails sooner, and a node starved for a few seconds on a loaded machine is not taken for dead
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "1000",
    "RAY_health_check_failure_threshold": "10",
}


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        kids.setdefault(ppid, []).append(int(entry))
    return kids


def process_tree(pid: int) -> list[int]:
    """`pid` and every process below it, now."""
    kids = _children()
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo.extend(kids.get(p, ()))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
    except OSError:
        return ""


def _free_block(count: int) -> int:
    """The first port of `count` consecutive ports free on every interface now."""
    for _ in range(200):
        base = random.randrange(20000, 60000 - count)
        socks = []
        try:
            for port in range(base, base + count):
                s = socket.socket()
                s.bind(("", port))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no block of free ports found")


@dataclass
class RayNode:
    name: str
    process: subprocess.Popen
    log: Path
    pids: set[int] = field(default_factory=set)  # every process of the node seen so far

    def tree(self) -> list[int]:
        # Only while the node's own process is unreaped: once it is reaped its pid may belong to anything (pids wrap
        # at 32768 here, and the suite starts thousands of processes), and killing that tree killed other tests'
        # servers.
        found = process_tree(self.process.pid) if self.process.poll() is None and alive(self.process.pid) else []
        self.pids.update(found)
        return found

    def kill(self) -> None:
        """SIGKILL the whole node at once, as a dying machine."""
        for pid in self.tree():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait(timeout=30)


class LocalRayCluster:
    """A head (`start`) and further nodes (`add_node`), each with `cpus` CPUs declared to Ray."""

    def __init__(self, root: Path | None = None, env: dict[str, str] | None = None) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rbray-", dir="/tmp")) if root is None else root  # short: sockets
        # a loaded 2-core machine can take more than Ray's default 30 s to register a raylet
        # Ray >= 2.5x turns token authentication on when ~/.ray/auth_token exists (any earlier local `ray.init()`
        # writes one) and then refuses nodes started without it: the test cluster keeps a token path of its own.
        isolated = {"RAY_AUTH_MODE": "disabled", "RAY_AUTH_TOKEN_PATH": str(self.root / "auth_token")}
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_raylet_start_wait_time_s": "180", **isolated,
                    **(env or {})}
        self.nodes: list[RayNode] = []
        self.gcs_port: int | None = None

    @property
    def address(self) -> str:
        return f"{HOST}:{self.gcs_port}"

    def _start(self, name: str, ip: str, args: list[str], env: dict[str, str], timeout_s: float) -> RayNode:
        base = _free_block(PORTS_PER_NODE)
        ports = iter(range(base, base + 12))
        temp = self.root / name
        temp.mkdir(parents=True, exist_ok=True)
        log = self.root / f"{name}.log"
        command = [str(RAY), "start", "--block", "--node-ip-address", ip, "--temp-dir", str(temp),
                   "--disable-usage-stats", "--object-store-memory", str(80 << 20),
                   "--node-manager-port", str(next(ports)), "--object-manager-port", str(next(ports)),
                   "--dashboard-agent-listen-port", str(next(ports)), "--dashboard-agent-grpc-port", str(next(ports)),
                   "--runtime-env-agent-port", str(next(ports)), "--metrics-export-port", str(next(ports)),
                   "--min-worker-port", str(base + 12), "--max-worker-port", str(base + PORTS_PER_NODE - 1), *args]
        if "--head" in args:
            self.gcs_port = next(ports)
            command += ["--port", str(self.gcs_port), "--ray-client-server-port", str(next(ports)),
                        "--dashboard-port", str(next(ports))]
        # SIGINT ignored, as in a node started by a background job of a script (a shell's `&`): Ray's cancel of
        # a running task must still reach it
        command = [sys.executable, "-c", _IGNORING_SIGINT, *command]
        with open(log, "wb") as out:
            process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                       env=env, start_new_session=True, cwd=self.root)
        node = RayNode(name, process, log)
        self.nodes.append(node)
        deadline = time.monotonic() + timeout_s
        while b"Ray runtime started" not in log.read_bytes():
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"ray node {name} did not start (rc {process.poll()}):\n{tail}")
            time.sleep(0.2)
        node.tree()
        return node

    def start(self, cpus: int = 1, timeout_s: float = START_TIMEOUT_S) -> RayNode:
        return self._start("head", HOST, ["--head", "--num-cpus", str(cpus), "--include-dashboard", "false"],
                           {**self.env, **HEAD_ENV}, timeout_s)

    def add_node(self, cpus: int = 1, timeout_s: float = START_TIMEOUT_S) -> RayNode:
        assert self.gcs_port is not None, "start the head first"
        k = len(self.nodes)
        return self._start(f"node{k}", f"127.0.0.{2 + k}", ["--address", self.address, "--num-cpus", str(cpus)],
                           self.env, timeout_s)

    def connect(self, ray) -> None:
        """ray.init in this process, attached to the head's raylet."""
        for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN_PATH"):
            os.environ[key] = self.env[key]
        ray.init(address=self.address, _node_ip_address=HOST, logging_level="warning", log_to_driver=False)

    def start_in_background(self, nodes: int = 2, cpus: int = 1) -> None:
        """Start the head and `nodes - 1` more in a thread (`ready()` waits for them): the caller works meanwhile."""
        def boot() -> None:
            try:
                self.start(cpus)
                for _ in range(nodes - 1):
                    self.add_node(cpus)
            except BaseException as e:  # noqa: BLE001 - handed to ready()
                self._boot_error = e

        self._boot_error: BaseException | None = None
        self._boot = threading.Thread(target=boot, daemon=True)
        self._boot.start()

    def ready(self) -> None:
        self._boot.join()
        if self._boot_error is not None:
            raise self._boot_error

    def stop(self) -> list[int]:
        """Kill every node; returns the pids of theirs still alive after (none, normally)."""
        if getattr(self, "_boot", None) is not None:
            self._boot.join()
        for node in reversed(self.nodes):
            if node.process.poll() is None:
                node.kill()
            for pid in node.tree():
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        left = [pid for node in self.nodes for pid in node.pids if alive(pid)]
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = [pid for pid in left if alive(pid)]
        shutil.rmtree(self.root, ignore_errors=True)
        return left
