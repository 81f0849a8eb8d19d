"""The Ray executor on a real Ray cluster of this machine: a head and a second node started with `ray start`
(tests/ray_cluster.py, one CPU each), small bundles replayed on jax 0.8.0 and the installed one by the real
`run_replay_task`, their runs stored in a registry folder both nodes see.

Asserted: every bundle reported once, by which node; the runs in the shared registry; a bundle that fails on one
version (it calls a LAPACK kernel jaxlib 0.8.0 lacks) reported with its reason; a task that raises (its store
refuses connections) retried once on the other node, then failed with both reasons; a task no node can hold; the
`sweep --ray` command resuming and rerunning; a driver that stops early cancelling the replays on the nodes (whose
SIGINT is ignored, as in nodes a background job starts: Ray's cancel goes through SIGINT's handler); a node
SIGKILLed while its replay runs, its task retried on the other node, every bundle still reported once; an
unreachable address is one ClusterError. Nothing about timing.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import replace

import jax
import jax.scipy.linalg as jsl
import numpy as np
import pytest
import quick
from audit import audited
from chain import chain
from ray_cluster import HOST, START_TIMEOUT_S, LocalRayCluster, cmdline

import reprobundle
from reprobundle.bundle.registry import Registry
from reprobundle.errors import ClusterError, UsageError
from reprobundle.fleet.connect import executor_for
from reprobundle.fleet.executor import ReplayTask
from reprobundle.fleet.ray_executor import Node, RayExecutor, alive_nodes, import_ray, placement_for, task_platform
from reprobundle.fleet.sweep import run_replay_task
from reprobundle.run.replay_options import ReplayOptions

pytestmark = [pytest.mark.crossversion, pytest.mark.ray]

VERSIONS = ("0.8.0", "installed")
OPTIONS = ReplayOptions(warmup=1, repeat=4, rounds=1, timeout_s=300, dump=False, profile=False)


def _chain(n):
    return chain(n, rows=16, width=32, seed=n)


def _qr_multiply(a, c):
    return jsl.qr_multiply(a, c, mode="left")  # lowers to lapack_sormqr_ffi, which jaxlib 0.8.0 does not have


@pytest.fixture(scope="module")
def cluster():
    c = LocalRayCluster()
    try:
        c.start_in_background(nodes=2, cpus=1)
        yield c
    finally:
        left = c.stop()
        assert not left, f"processes of the Ray cluster still alive: {[(p, cmdline(p)) for p in left]}"


@pytest.fixture(scope="module")
def executor(cluster):
    """The executor under test, on this process's Ray driver attached to the head (see tests/ray_cluster.py); the
    sweep command's test connects a fresh process of its own."""
    cluster.ready()
    ray = import_ray()
    cluster.connect(ray)
    try:
        ex = RayExecutor(cluster.address)  # connected already: it uses this connection
        deadline = time.monotonic() + START_TIMEOUT_S  # the node's start said it is up: this only ends a hang
        while len(alive_nodes(ex.ray)) < 2:
            assert time.monotonic() < deadline, f"the second node never joined: {alive_nodes(ex.ray)}"
            time.sleep(0.5)
        yield ex
    finally:
        ray.shutdown()


@pytest.fixture(scope="module")
def store(tmp_path_factory, cluster):
    """Four small bundles in a folder store that both nodes see, packed while the cluster boots."""
    root = tmp_path_factory.mktemp("ray-sweep") / "store"
    for n in (1, 2, 3):
        fn, args = _chain(n)
        reprobundle.pack(fn, *args, name=f"chain{n}", store=str(root), **quick.PACK)
    rng = np.random.default_rng(0)
    a, c = rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)
    module = root.parent / "qr_multiply.mlir"
    module.write_text(jax.jit(_qr_multiply).lower(a, c).as_text())  # pack refuses the kernel: a raw module packs
    assert "lapack_sormqr_ffi" in module.read_text()
    reprobundle.api.pack_stablehlo(module, [a, c], name="ormqr", store=str(root), **quick.PACK)
    return str(root)


def _tasks(store, names):
    return [ReplayTask(store, name, VERSIONS, OPTIONS) for name in names]


def _collect(executor, tasks):
    got = list(executor.run(run_replay_task, tasks))
    counts = Counter(i for i, _ in got)
    assert counts == Counter(range(len(tasks))), f"every task reported exactly once: {counts}"
    return {i: r for i, r in got}


def test_sweep_spreads_over_both_nodes_and_stores_every_run(store, executor):
    names = ["chain1", "chain2", "chain3", "ormqr"]
    with socket.socket() as closed:
        closed.bind((HOST, 0))  # a store URL whose server refuses connections: run_replay_task raises StoreError
        unreachable = ReplayTask(f"http://{HOST}:{closed.getsockname()[1]}/store", "chain1", VERSIONS, OPTIONS)
        results = _collect(executor, [*_tasks(store, names), unreachable])
    nodes = {n.node_id for n in alive_nodes(executor.ray)}
    registry = Registry.open(store)
    for i, name in enumerate(names[:3]):
        r = results[i]
        assert r["ref"].startswith(f"{name}@") and r["status"] == "done" and r["outputs"] == "ok", r
        assert [run["status"] for run in r["runs"]] == ["ok", "ok"], r["runs"]
        assert r["attempts"] == 1 and r["node"] in nodes, r
        stored = {run["run_id"] for run in registry.runs(r["bundle_id"])}
        assert {run["run_id"] for run in r["runs"]} <= stored  # written by the node into the shared registry
    # both nodes took replays (four tasks, one CPU each: the second had to run beside the first)
    assert {results[i]["node"] for i in range(4)} == nodes, [results[i]["node"] for i in range(4)]

    ormqr = results[3]
    assert ormqr["status"] == "done" and ormqr["outputs"] == "failed", ormqr
    by_version = {run["version"]: run for run in ormqr["runs"]}
    assert by_version["0.8.0"]["status"] == "incompatible", by_version
    assert "lapack_sormqr_ffi" in by_version["0.8.0"]["reason"] and "lapack_sormqr_ffi" in ormqr["outputs_detail"]
    assert by_version["installed"]["status"] == "ok", by_version

    # a task that raises on its node is retried once, on the other node, then reported with both reasons
    missing = results[4]
    assert missing["status"] == "failed" and missing["attempts"] == 2, missing
    assert "cannot read http://" in missing["error"], missing["error"]
    first, last = missing["error"].split("; attempt 1 on node ")
    assert missing["node"][:12] in first and missing["node"][:12] not in last, missing["error"]
    assert any(n[:12] in last for n in nodes - {missing["node"]}), missing["error"]


def test_a_task_no_node_can_hold_fails_after_the_grace_period(cluster, executor, store):
    """A CUDA replay needs a GPU; this cluster has none: cancelled after the grace, retried once, then failed."""
    impatient = RayExecutor(cluster.address, infeasible_grace_s=1.0)  # the same connection
    [(index, result)] = list(impatient.run(run_replay_task, [ReplayTask(store, "chain1", VERSIONS,
                                                                    replace(OPTIONS, platform="cuda"))]))
    assert index == 0 and result["status"] == "failed" and result["attempts"] == 2, result
    assert "no node of the Ray cluster can hold it: it needs 1 CPU and 1 GPU; the nodes offer 1 CPU" \
        in result["error"], result["error"]


def test_the_sweep_command_on_the_cluster_resumes_and_reruns(cluster, executor, store):
    """`reprobundle sweep --ray`: the bundles the first test replayed (through Ray, same options) are stored
    results; --rerun of one replays it on the cluster (dump and profile on, as the command does)."""
    def sweep(*args: str) -> tuple[int, str, str]:  # a new process: its own Ray driver, as a user's command
        done = subprocess.run([sys.executable, "-m", "reprobundle", "sweep", *args, "--baseline", "0.8.0",
                               "--candidate", "installed", "--ray", cluster.address, "--warmup", "1", "--repeat", "4",
                               "--rounds", "1", "--json", "--store", store], capture_output=True, text=True,
                              timeout=600, stdin=subprocess.DEVNULL)
        return done.returncode, done.stdout, done.stderr

    code, out, err = sweep("chain*", "ormqr")
    assert code == 9, err  # ormqr does not run on 0.8.0
    data = json.loads(out)
    assert data["executor"] == "ray", data
    rows = {r["ref"].split("@")[0]: r for r in data["results"]}
    assert set(rows) == {"chain1", "chain2", "chain3", "ormqr"} and all(r["stored"] for r in rows.values()), rows
    code, out, err = sweep("chain2", "--rerun")
    assert code == 0, err
    [row] = json.loads(out)["results"]
    assert not row["stored"] and row["status"] == "done" and row["outputs"] == "ok", row
    assert row["node"] in {n.node_id for n in alive_nodes(executor.ray)}, row


def test_placement_holds_a_whole_node():
    """What a task asks of Ray, from the nodes Ray reports (plain data)."""
    cpu = lambda i, n: Node(f"c{i}", "h", {"CPU": n, "memory": 1e9})
    gpu = Node("g", "h", {"CPU": 32, "GPU": 8, "accelerator_type:H100": 1})
    amd = Node("a", "h", {"CPU": 16, "GPU": 2, "accelerator_type:AMD-Instinct-MI300X-OAM": 1})
    tpu = Node("t", "h", {"CPU": 96, "TPU": 4})
    head = Node("head", "h", {"CPU": 0})
    nodes = [head, cpu(1, 8), cpu(2, 8), cpu(3, 4)]
    p = placement_for(None, nodes)
    assert (p.num_cpus, p.num_gpus, dict(p.resources)) == (8, 0, {})  # the largest node's CPUs: one task a node
    assert [p.fits(n) for n in nodes] == [False, True, True, False]
    assert placement_for(None, nodes, cpus_per_task=4).fits(nodes[3])
    assert placement_for("cpu", [*nodes, gpu]).num_cpus == 32
    g = placement_for("cuda", [*nodes, gpu, amd])
    assert (g.num_cpus, g.num_gpus) == (4, 1) and g.fits(gpu) and not g.fits(nodes[1])  # 32 CPUs / 8 GPUs
    assert placement_for("cuda12", [gpu]).num_gpus == 1
    assert amd.platforms == {"cpu", "rocm"} and gpu.platforms == {"cpu", "cuda"} and tpu.platforms == {"cpu", "tpu"}
    t = placement_for("tpu", [*nodes, tpu])
    assert (t.num_cpus, dict(t.resources)) == (96, {"TPU": 4}) and t.fits(tpu) and not t.fits(gpu)
    assert not placement_for("cuda", nodes).fits(nodes[1])  # no GPU anywhere: nothing fits, the wait says so


def test_the_platform_is_chosen_against_the_cluster(tmp_path):
    store = str(tmp_path / "store")
    fn, args = _chain(1)
    reprobundle.pack(fn, *args, name="both", store=store, platforms="cuda,cpu", **quick.PACK)
    reprobundle.pack(fn, *args, name="cpu-only", store=store, **quick.PACK)
    cpus = [Node("c", "h", {"CPU": 4})]
    gpus = [*cpus, Node("g", "h", {"CPU": 8, "GPU": 1})]
    task = lambda ref, **o: ReplayTask(store, ref, VERSIONS, replace(OPTIONS, **o))
    assert task_platform(task("both"), cpus) is None  # a CPU cluster: the node decides (its CPU)
    assert task_platform(task("both"), gpus) == "cuda"  # a GPU node exists: the bundle's first platform it has
    assert task_platform(task("cpu-only"), gpus) == "cpu"
    assert task_platform(task("both", platform="cpu"), gpus) == "cpu"  # asked for
    assert task_platform(task("no-such-bundle"), gpus) is None  # left to the node, which reports it


def test_an_unreachable_cluster_is_one_clear_error(cluster, executor):
    with socket.socket() as closed:
        closed.bind((HOST, 0))  # bound, not listening: connections are refused
        port = closed.getsockname()[1]
        with audited() as did, pytest.raises(ClusterError) as info:
            RayExecutor(f"{HOST}:{port}", connect_timeout_s=5)
    assert len(did.connects(port)) == 1  # one refused connection attempt, then the error
    assert f"cannot reach the Ray cluster at '{HOST}:" in info.value.message and "ray start --head" in info.value.hint
    with socket.socket() as other:  # something listens there, but this process is connected to the test's cluster
        other.bind((HOST, 0))
        other.listen()
        with pytest.raises(UsageError) as info:
            RayExecutor(f"{HOST}:{other.getsockname()[1]}")
    assert "already connected to the Ray cluster at" in info.value.message
    assert RayExecutor(cluster.address).name == "ray"  # the same cluster: the connection is shared
    with pytest.raises(UsageError):
        RayExecutor("   ")


def test_without_ray_installed_the_error_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets where Ray is not installed
    with pytest.raises(UsageError) as info:
        import_ray()
    assert "reprobundle[ray]" in info.value.hint
    with pytest.raises(UsageError) as info:
        executor_for("127.0.0.2:1")
    assert "reprobundle[ray]" in info.value.hint


def test_a_driver_that_stops_early_cancels_the_replays_on_the_nodes(cluster, executor, store):
    """The sweep's generator closed (Ctrl-C, an error) after the first result: the tasks still running are cancelled,
    their replays stop at once and store nothing."""
    registry = Registry.open(store)
    runs = lambda name: len(registry.runs(registry.resolve(name).ref.bundle_id))
    # far more rounds than any machine gets through before the cancel (they never run out: they are cancelled), so
    # a run stored below can only come from a cancel that did not reach the replay
    long = replace(OPTIONS, rounds=400)
    tasks = [ReplayTask(store, "chain1", VERSIONS, OPTIONS), ReplayTask(store, "chain2", VERSIONS, long),
             ReplayTask(store, "chain3", VERSIONS, long)]
    before = {name: runs(name) for name in ("chain2", "chain3")}
    results = executor.run(run_replay_task, tasks)
    index, first = next(results)
    assert index == 0 and first["status"] == "done", first
    deadline = time.monotonic() + 300
    while not any("reprobundle-replay" in line for line in _running_replays(cluster)):
        assert time.monotonic() < deadline, "no replay task running after the first result"
        time.sleep(0.05)
    results.close()
    # Until the replays' Ray tasks are no longer running (a Ray worker's title names its task while it runs one:
    # "ray::reprobundle-replay chain2"), not just until no replay worker is seen, which a replay between two rounds
    # also shows. Generous for a loaded machine; uncancelled, the replays would run for many minutes.
    deadline = time.monotonic() + 120
    while busy := _running_replays(cluster):
        assert time.monotonic() < deadline, f"replays still running 120 s after the driver stopped: {busy}"
        time.sleep(0.1)
    assert {name: runs(name) for name in ("chain2", "chain3")} == before


def _running_replays(cluster) -> list[str]:
    """The processes of the cluster that run a replay now: a Ray worker executing a replay task, or a replay's
    worker."""
    lines = (cmdline(pid) for node in cluster.nodes for pid in node.tree())
    return [line[:80] for line in lines if "reprobundle-replay" in line or "reprobundle/worker" in line]


def test_a_node_killed_mid_sweep_has_its_task_retried_on_the_other_node(cluster, executor, store):
    """Runs last: the second node does not come back."""
    head, second = cluster.nodes[0], cluster.nodes[1]
    killed = threading.Event()
    seen: list[str] = []  # what the second node ran when it was killed (the failure message shows it)

    def kill_when_replaying() -> None:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            tree = second.tree()
            if any("reprobundle/worker" in cmdline(pid) for pid in tree):
                seen.extend(f"{pid}: {cmdline(pid)[:120]}" for pid in tree)
                second.kill()  # its raylet, agents, Ray worker and the replay's workers, at once
                killed.set()
                return
            time.sleep(0.05)

    nodes_before = {n.node_id for n in alive_nodes(executor.ray)}
    watcher = threading.Thread(target=kill_when_replaying, daemon=True)
    watcher.start()
    names = ["chain1", "chain2", "chain3"]
    results = _collect(executor, [ReplayTask(store, n, VERSIONS, replace(OPTIONS, repeat=6)) for n in names])
    watcher.join(timeout=5)
    assert killed.is_set(), "the second node never ran a replay"
    survivor = {n.node_id for n in alive_nodes(executor.ray)}
    assert len(survivor) == 1 and survivor < nodes_before, survivor
    retried = [r for r in results.values() if r["attempts"] == 2]
    assert len(retried) == 1, ([(r["ref"], r["attempts"], r["node"]) for r in results.values()], nodes_before,
                               survivor, seen)
    for r in results.values():
        assert r["status"] == "done" and [run["status"] for run in r["runs"]] == ["ok", "ok"], r
    assert retried[0]["node"] in survivor  # the retry ran on the node that was left
    assert head.process.poll() is None
