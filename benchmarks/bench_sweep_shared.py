"""A local sweep of N small bundles on two releases, its bundles measured together with one worker process per
release and round serving them all (the default), against a worker process of its own per bundle, release and
round (`--fresh-workers`, the path before), in one run, alternated (fresh, shared, shared, fresh, ...).

    .venv/bin/python benchmarks/bench_sweep_shared.py                     # 20 bundles, 0.7.2 vs 0.8.0, adaptive
    .venv/bin/python benchmarks/bench_sweep_shared.py --rounds 2 --repeat 20   # a fixed, small budget

Prints each sweep's wall time and where its worker time went (run/spent.py), the ratio fresh / shared (median of
the passes), and whether the verdicts agree: each bundle's verdict and settledness, fresh against shared (the
bundles are 4-6 chained matmuls, which 0.8.0 runs ~14% faster than 0.7.2 on the project's 2-core VM; any real
difference will do, none is asserted here). The machine's load is printed before and after.
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

from reprobundle.bundle.registry import Registry  # noqa: E402
from reprobundle.envs.manager import EnvironmentManager  # noqa: E402
from reprobundle.fleet import sweep as sweeping  # noqa: E402
from reprobundle.fleet.executor import LocalExecutor, ReplayTask  # noqa: E402
from reprobundle.run.replay_options import ReplayOptions  # noqa: E402
from reprobundle.run.spent import summed  # noqa: E402


def bench_sweep_module():
    """benchmarks/bench_sweep.py (its bundles), loaded by path: the benchmarks are scripts, not a package."""
    spec = importlib.util.spec_from_file_location("reprobundle_bench_sweep", Path(__file__).parent / "bench_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def one_sweep(registry: Registry, options: ReplayOptions, versions: tuple[str, str]) -> tuple[float, list[dict]]:
    bundles = list(registry.iter_bundles())
    template = ReplayTask(registry.url, "", versions, options)
    start = time.perf_counter()
    results = sweeping.sweep(registry, bundles, template, executor=LocalExecutor(), rerun=True)
    wall = time.perf_counter() - start
    failed = [(r["ref"], r.get("error"), [x["status"] for x in r["runs"]]) for r in results
              if r["status"] != "done" or any(x["status"] != "ok" for x in r["runs"])]
    if failed:
        raise SystemExit(f"a replay failed: {failed}")
    return wall, results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bundles", type=int, default=20)
    ap.add_argument("--versions", nargs=2, default=["0.7.2", "0.8.0"])
    ap.add_argument("--rounds", type=int, default=None, help="fixed rounds (default: adaptive, as a sweep's)")
    ap.add_argument("--repeat", type=int, default=None, help="timed steps per version and bundle")
    ap.add_argument("--passes", type=int, default=1, help="fresh then shared, this many times, alternated")
    args = ap.parse_args()
    manager = EnvironmentManager()
    for v in args.versions:
        manager.ensure(v)
    settings = {k: v for k, v in (("rounds", args.rounds), ("repeat", args.repeat)) if v is not None}
    print(f"machine: {os.cpu_count()} CPUs, load {load()}; {args.bundles} bundles on jax "
          f"{' vs '.join(args.versions)}, {settings or 'adaptive rounds'}")
    walls: dict[bool, list[float]] = {True: [], False: []}
    verdicts: dict[bool, dict[str, tuple]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-sweep-shared-") as tmp:
        store = str(Path(tmp) / "store")
        bench_sweep_module().pack_bundles(store, args.bundles)
        registry = Registry.open(store)
        for p in range(args.passes):
            for fresh in ((True, False) if p % 2 == 0 else (False, True)):
                options = ReplayOptions(fresh_workers=fresh, **settings)
                wall, results = one_sweep(registry, options, tuple(args.versions))
                walls[fresh].append(wall)
                verdicts[fresh] = {r["ref"]: (r["verdict"], r["settled"]) for r in results}
                total = summed(r.get("spent") for r in results)
                print(f"pass {p + 1}, {'fresh workers ' if fresh else 'shared workers'}: {wall:.1f} s (load {load()});"
                      " worker seconds: " + ", ".join(f"{k} {v:.1f}" for k, v in total.items()))
    fresh_s, shared_s = statistics.median(walls[True]), statistics.median(walls[False])
    same = sum(verdicts[True][ref] == verdicts[False][ref] for ref in verdicts[True])
    print(f"\nfresh / shared: {fresh_s / shared_s:.2f}x ({fresh_s:.1f} s vs {shared_s:.1f} s, medians of "
          f"{args.passes} pass(es))")
    print(f"verdicts (verdict, settled) equal in the last passes: {same} of {len(verdicts[True])}; fresh "
          f"{sorted(set(verdicts[True].values()))}, shared {sorted(set(verdicts[False].values()))}")
    print(f"load at the end: {load()}")


if __name__ == "__main__":
    main()
