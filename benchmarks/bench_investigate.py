"""One investigation (#41) of the README's slowdown: examples/train_loop.py (a 2000-step fori_loop and a scan), from
a good to a bad release five apart, as the CLI runs it (subprocesses, --json), beside one plain replay of the same
two releases measured in the same run:

1. `replay train-loop --jax GOOD --jax BAD` with default settings: the unit the goals are stated in;
2. `bisect train-loop --good GOOD --bad BAD --by time`, the layer check at the boundary included; goal: at most
   (its number of probes + 1) times the replay;
3. `investigate train-loop --good GOOD --bad BAD` (endpoints, bisection, layer, explain, minimize, issue body);
   goal: at most 3 minutes.

Every release between GOOD and BAD must be cached for a warm figure (the first run installs them).

Usage: .venv/bin/python benchmarks/bench_investigate.py [--good 0.4.30] [--bad 0.4.35]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

from bench_bisect import run as run_cli  # the same subprocess runner: the CLI as a user runs it, timed


def run(args: list[str], env: dict[str, str]) -> tuple[float, dict]:
    wall, out = run_cli(args, env)
    return wall, json.loads(out) if out.strip().startswith(("{", "[")) else {}


def probes_text(spent: dict) -> str:
    return "; ".join(f"{p['what']} [{', '.join(p['versions'])}] {p['wall_s']:.1f} s" for p in spent["probes"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--good", default="0.4.30")
    parser.add_argument("--bad", default="0.4.35")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-investigate-"))
    env = {**os.environ, "REPROBUNDLE_STORE": str(scratch / "store")}
    run(["pack", "examples/train_loop.py", "--name", "train-loop", "--no-dump", "--no-profile"], env)
    replay_s, _ = run(["replay", "train-loop", "--jax", args.good, "--jax", args.bad, "--json"], env)
    print(f"replay --jax {args.good} --jax {args.bad} (default settings): {replay_s:.1f} s")
    bisect_s, b = run(["bisect", "train-loop", "--good", args.good, "--bad", args.bad, "--by", "time", "--json"], env)
    probes = len(set(b.get("classes") or {}) - {args.good, args.bad})  # releases tested between the ends
    print(f"bisect --by time: {bisect_s:.1f} s = {bisect_s / replay_s:.2f}x the replay; {probes} releases probed "
          f"between the ends, goal <= {probes + 1}x; first bad {b['first_bad']} (last good {b['last_good']}), layer "
          f"{(b.get('layer') or {}).get('layer')}; {probes_text(b['spent'])}")
    issue = scratch / "issue.md"
    inv_s, inv = run(["investigate", "train-loop", "--good", args.good, "--bad", args.bad, "--issue", str(issue),
                      "--json"], env)
    print(f"investigate: {inv_s:.1f} s (goal <= 180 s)")
    for step in inv.get("steps") or []:
        print(f"  {step['name']}: {step['status']} in {step['spent_s']:.1f} s: {str(step['answer'])[:300]}")
    print(f"  issue body: {issue.stat().st_size if issue.exists() else 0} bytes")


if __name__ == "__main__":
    main()
