"""Explain speed: `explain` of the attention example (make_small by default) between two releases, end to end as the
CLI runs it (evidence compile with per-pass dumps, the experiments chosen, one replay of every contender in paired
rounds, the diagnosis). Goal (#20): the answer within 5 minutes on the project's 2-core VM when quiet.

Prints per run: wall time, where it went (each replay's worker seconds by category, run/spent.py), time to the plan (evidence), how many experiments and which, the rounds the replay took,
the diagnosis, and the conditions it ran under (load before and after, CPU time of other processes), since a busy
machine needs more rounds for the same verdicts. A reference for the cost of one plain replay of the two versions
is measured in the same run (the same timing options), so the figure is also a ratio against it.

Usage: .venv/bin/python benchmarks/bench_explain.py [--versions 0.7.2 0.8.0] [--factory make_small] [--runs 1]
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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", nargs=2, default=["0.7.2", "0.8.0"])
    parser.add_argument("--factory", default="make_small")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--max-time", type=float, default=240.0)
    args = parser.parse_args()
    import attention

    store = str(Path(tempfile.mkdtemp(prefix="bench-explain-")) / "store")
    fn, fargs = getattr(attention, args.factory)()
    reprobundle.pack(fn, *fargs, name="attention", store=store, warmup=1, repeat=4, dump=False, profile=False)
    for k in range(args.runs):
        before = snapshot()
        t0 = time.perf_counter()
        marks: dict[str, float] = {}

        def progress(line, marks=marks, t0=t0):
            phase = getattr(line, "phase", "")
            if phase == "plan" and "plan" not in marks:
                marks["plan"] = time.perf_counter() - t0

        result = api.explain("attention", args.versions, store=store, max_time_s=args.max_time, progress=progress)
        wall = time.perf_counter() - t0
        measured = conditions(before, snapshot())
        rounds = max((len((r.get("timing") or {}).get("rounds") or []) for r in result["runs"]), default=0)
        print(f"explain run {k + 1}: {wall:.0f} s wall (evidence and plan {marks.get('plan', float('nan')):.0f} s), "
              f"{len(result['experiments'])} experiments, {rounds} rounds; "
              + ", ".join(f"{e['setting']} ({e['status']})" for e in result["experiments"]))
        print(f"  diagnosis ({result['diagnosis']['kind']}): {result['diagnosis']['summary']}")
        for probe in result["spent"]["probes"]:  # where the time went (run/spent.py)
            print(f"  {probe['what']} [{', '.join(probe['versions'])}] {probe['wall_s']:.1f} s wall, "
                  f"{probe['at_once']} at once; worker seconds: "
                  + ", ".join(f"{k} {v:.1f}" for k, v in probe["spent"].items()))
        print(f"  conditions: {summary(measured)}")
        t0 = time.perf_counter()
        api.replay("attention", args.versions, store=store, warmup=2, max_time_s=args.max_time)
        plain = time.perf_counter() - t0
        print(f"  a plain replay of the two versions, same options: {plain:.0f} s ({wall / plain:.1f}x)")


if __name__ == "__main__":
    main()
