"""Explain speed: `explain` between two releases, end to end as the CLI runs it, beside a plain replay of the same
two releases measured in the same run.

Two bundles:
- `loop` (default): a 2000-step `fori_loop` doing almost nothing, between jaxlib 0.4.31 and 0.4.33 (adjacent
  releases on PyPI: 0.4.32 was yanked), where the CPU thunk runtime became the default and the loop got several times
  slower. Three measurements in one run: `explain` with the experiments from the release delta (#40), `explain`
  without them (`release_delta=False`: passes and curated flags only, the path before #40), and one
  `replay --jax GOOD --jax BAD` with default settings. Goal (#40), warm, 2-core VM: at most 60 s and at most 2x the
  replay.
- `attention`: the attention example (`make_small`), 0.7.2 vs 0.8.0 (#20, #35).

Prints per measurement: wall time, where it went (each probe's worker seconds by category, run/spent.py), the
experiments and their status, the diagnosis, and the conditions it ran under (load before and after, CPU time of
other processes), since a busy machine needs more rounds for the same verdicts.

Usage: .venv/bin/python benchmarks/bench_explain.py [--bundle loop|attention] [--versions A B] [--runs 1]
       [--max-time 240]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import reprobundle  # noqa: E402
from reprobundle import api  # noqa: E402
from reprobundle.analysis.busy import summary  # noqa: E402
from reprobundle.run.conditions import conditions, snapshot  # noqa: E402

VERSIONS = {"loop": ["0.4.31", "0.4.33"], "attention": ["0.7.2", "0.8.0"]}


def tiny_loop(x, lr):
    import jax

    return jax.lax.fori_loop(0, 2000, lambda i, v: v * (1 - lr) + lr, x)


def pack(name: str, store: str) -> None:
    import jax
    import numpy as np

    if name == "loop":
        fn, fargs = jax.jit(tiny_loop), (np.ones(4, np.float32), np.float32(1e-3))
    else:
        import attention

        fn, fargs = attention.make_small()
    reprobundle.pack(fn, *fargs, name=name, store=store, warmup=1, repeat=4, dump=False, profile=False)


def timed_explain(name: str, versions: list[str], store: str, max_time: float, release_delta: bool) -> float:
    before = snapshot()
    t0 = time.perf_counter()
    result = api.explain(name, versions, store=store, max_time_s=max_time, release_delta=release_delta)
    wall = time.perf_counter() - t0
    label = "with the release delta" if release_delta else "passes and curated flags only"
    print(f"explain, {label}: {wall:.1f} s wall, mode {result.get('mode')}, by {result.get('by')}; "
          f"{len(result['experiments'])} experiments: "
          + ", ".join(f"{e['setting']} ({e['status']})"
                      for e in result["experiments"]))
    print(f"  diagnosis ({result['diagnosis']['kind']}): {result['diagnosis']['summary']}")
    for probe in result["spent"]["probes"]:  # where the time went (run/spent.py)
        print(f"  {probe['what']} [{', '.join(probe['versions'])}] {probe['wall_s']:.1f} s wall, "
              f"{probe['at_once']} at once; worker seconds: "
              + ", ".join(f"{k} {v:.1f}" for k, v in probe["spent"].items()))
    print(f"  conditions: {summary(conditions(before, snapshot()))}")
    return wall


def timed_replay(name: str, versions: list[str], store: str) -> float:
    before = snapshot()
    t0 = time.perf_counter()
    runs = api.replay(name, versions, store=store).runs
    wall = time.perf_counter() - t0
    rounds = max((len((r.get("timing") or {}).get("rounds") or []) for r in runs), default=0)
    print(f"replay --jax {versions[0]} --jax {versions[1]} (default settings): {wall:.1f} s wall, {rounds} rounds; "
          f"conditions: {summary(conditions(before, snapshot()))}")
    return wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundle", choices=sorted(VERSIONS), default="loop")
    parser.add_argument("--versions", nargs=2, default=None)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--max-time", type=float, default=240.0)
    args = parser.parse_args()
    versions = args.versions or VERSIONS[args.bundle]
    store = str(Path(tempfile.mkdtemp(prefix="bench-explain-")) / "store")
    pack(args.bundle, store)
    for k in range(args.runs):
        print(f"--- run {k + 1}: {args.bundle}, {versions[0]} vs {versions[1]}")
        plain = timed_replay(args.bundle, versions, store)
        with_delta = timed_explain(args.bundle, versions, store, args.max_time, release_delta=True)
        without = timed_explain(args.bundle, versions, store, args.max_time, release_delta=False)
        print(f"explain with the release delta: {with_delta:.1f} s = {with_delta / plain:.2f}x the replay "
              f"({plain:.1f} s); without it: {without:.1f} s = {without / plain:.2f}x")


if __name__ == "__main__":
    main()
