"""Sweep wall time: the same N small bundles replayed on two versions by the local executor (one after another in
this process: the baseline), on a one-node Ray cluster of this machine, and on a two-node one, all in one run.

    .venv/bin/python benchmarks/bench_sweep.py                       # 6 bundles, 0.7.2 vs 0.8.0, 2 fixed rounds
    .venv/bin/python benchmarks/bench_sweep.py --bundles 8 --versions 0.8.0 installed --passes 2

Figures (each against the local sweep of the same pass):
- per-bundle overhead of the Ray path: (one-node Ray sweep - local sweep) / N. The one-node cluster's head
  declares every CPU of the machine, so its tasks run one at a time, as the local executor's do; the difference is
  what Ray adds (task submission, a Ray worker that imports reprobundle, results through the object store). Also
  split as driver wall - the sum of the tasks' own wall time (`wall_s`, measured inside run_replay_task).
- two nodes vs one: the two-node sweep / the one-node sweep. On this 2-core machine two nodes each declare one CPU,
  so two replays run at once, each with half the CPUs that one replay had alone (and their timings are not
  clean: a real cluster's nodes are separate machines). What it shows is the fan-out working, not a speed-up a
  cluster of real machines would get (that is N / nodes for equal bundles).
Cluster start-up times are printed apart (one-off, not in the sweeps). Each replay is a fixed number of rounds, so
every configuration does the same work; the machine's load is printed before and after.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import reprobundle  # noqa: E402
from reprobundle.envs.manager import EnvironmentManager  # noqa: E402
from reprobundle.fleet.executor import LocalExecutor, ReplayTask  # noqa: E402
from reprobundle.fleet.sweep import run_replay_task  # noqa: E402
from reprobundle.run.replay_options import ReplayOptions  # noqa: E402
from reprobundle.run.spent import summed  # noqa: E402


def load_cluster_module():
    """tests/ray_cluster.py, loaded by path (the benchmarks are scripts, not a package of the tests)."""
    spec = importlib.util.spec_from_file_location("reprobundle_tests_ray_cluster", ROOT / "tests" / "ray_cluster.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look themselves up there
    spec.loader.exec_module(mod)
    return mod


def pack_bundles(store: str, count: int) -> list[str]:
    import jax
    import jax.numpy as jnp

    names = []
    for i in range(count):
        n = 4 + i % 3  # 4, 5 or 6 chained matmuls: small, unequal bundles

        def f(x, w, n=n):
            for _ in range(n):
                x = jnp.tanh(x @ w)
            return x

        rng = np.random.default_rng(i)
        x = rng.standard_normal((64, 128), dtype=np.float32)
        w = rng.standard_normal((128, 128), dtype=np.float32) / np.float32(12.0)
        reprobundle.pack(jax.jit(f), x, w, name=f"b{i}", store=store, warmup=1, repeat=2, dump=False, profile=False)
        names.append(f"b{i}")
    return names


def sweep_with(executor, tasks) -> tuple[float, list[dict]]:
    start = time.perf_counter()
    results = [r for _, r in executor.run(run_replay_task, tasks)]
    wall = time.perf_counter() - start
    bad = [(r["ref"], r["status"], r.get("error"), [x["status"] for x in r["runs"]]) for r in results
           if r["status"] != "done" or any(x["status"] != "ok" for x in r["runs"])]
    if bad or len(results) != len(tasks):
        raise SystemExit(f"a replay failed: {bad}")
    return wall, results


def spent_line(results: list[dict]) -> str:
    """Where the sweep's worker time went (each task's `spent`, run/spent.py), summed over its bundles."""
    total = summed(r.get("spent") for r in results)
    return "worker seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in total.items())


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundles", type=int, default=6)
    ap.add_argument("--versions", nargs=2, default=["0.7.2", "0.8.0"])
    ap.add_argument("--rounds", type=int, default=2, help="fixed rounds per replay (the same work everywhere)")
    ap.add_argument("--repeat", type=int, default=20, help="timed steps per version and bundle")
    ap.add_argument("--passes", type=int, default=1, help="local, one node, two nodes: this many times")
    args = ap.parse_args()
    from reprobundle.fleet.ray_executor import RayExecutor

    cluster_mod = load_cluster_module()
    manager = EnvironmentManager()
    for v in args.versions:
        if v != "installed":
            manager.ensure(v)
    cpus = os.cpu_count() or 1
    print(f"machine: {cpus} CPUs, load {load()}; {args.bundles} bundles on jax {' vs '.join(args.versions)}, "
          f"{args.rounds} fixed rounds of {args.repeat} steps, dump and profile off")
    options = ReplayOptions(warmup=1, repeat=args.repeat, rounds=args.rounds, dump=False, profile=False)
    figures: dict[str, list[float]] = {"local": [], "ray1": [], "ray2": [], "ray1_inside": [], "ray2_inside": []}
    with tempfile.TemporaryDirectory(prefix="bench-sweep-") as tmp:
        store = str(Path(tmp) / "store")
        names = pack_bundles(store, args.bundles)
        tasks = [ReplayTask(store, name, tuple(args.versions), options) for name in names]
        for p in range(args.passes):
            wall, results = sweep_with(LocalExecutor(), tasks)
            figures["local"].append(wall)
            print(f"pass {p + 1}: local sweep {wall:.1f} s (load {load()}); {spent_line(results)}")
            for nodes in (1, 2):
                cluster = cluster_mod.LocalRayCluster()
                try:
                    t0 = time.perf_counter()
                    cluster.start(cpus=cpus if nodes == 1 else cpus // 2)
                    for _ in range(nodes - 1):
                        cluster.add_node(cpus=cpus // 2)
                    executor = RayExecutor(cluster.address)
                    from reprobundle.fleet.ray_executor import alive_nodes

                    while len(alive_nodes(executor.ray)) < nodes:
                        time.sleep(0.2)
                    started = time.perf_counter() - t0
                    wall, results = sweep_with(executor, tasks)
                    inside = sum(r["wall_s"] for r in results)
                    used = len({r["node"] for r in results})
                    executor.close()
                finally:
                    left = cluster.stop()
                    assert not left, left
                figures[f"ray{nodes}"].append(wall)
                figures[f"ray{nodes}_inside"].append(inside)
                print(f"pass {p + 1}: ray, {nodes} node(s) of {cpus // nodes} CPU(s): sweep {wall:.1f} s on {used} "
                      f"node(s), tasks' own time {inside:.1f} s; cluster start {started:.1f} s (load {load()})")

    med = {k: statistics.median(v) for k, v in figures.items()}
    n = args.bundles
    print()
    print(f"per-bundle overhead of the Ray path (one node - local) / N: {(med['ray1'] - med['local']) / n:+.2f} s "
          f"(local {med['local']:.1f} s, one node {med['ray1']:.1f} s; one-node ratio {med['ray1'] / med['local']:.2f}x)")
    print(f"  of which outside the tasks (driver wall - tasks' own time) / N: "
          f"{(med['ray1'] - med['ray1_inside']) / n:+.2f} s")
    print(f"two nodes / one node: {med['ray2'] / med['ray1']:.2f}x ({med['ray2']:.1f} s vs {med['ray1']:.1f} s; "
          f"tasks' own time {med['ray2_inside']:.1f} s vs {med['ray1_inside']:.1f} s: two replays at once share "
          f"the {cpus} cores)")
    print(f"load at the end: {load()}")


if __name__ == "__main__":
    main()
