"""The first bad commit (#51) on JAX's real history, as the CLI runs it (subprocesses, --json), beside one plain
two-release replay of the same bundle measured in the same run:

1. `replay NAME --jax GOOD --jax BAD` with default settings: the unit;
2. `bisect-commits NAME --good GOOD --bad BAD --jax-repo PATH` on a fresh store: the release bisection (retraced,
   with its layer check) and then the commits between the two tags, each JAX at a commit over a released jaxlib.

Cases: `jax.random.randint` with an int8 dtype, 0.7.1 vs 0.7.2 (must end at a7b01146f2, "enable safer_randint by
default"), and `jnp.floor` of an int32 array, 0.4.30 vs 0.4.31 (a lowering change with no changed default).

Warm: the four releases' environments cached (the first run installs them); JAX's history from a local clone.

Usage: .venv/bin/python benchmarks/bench_commits.py --jax-repo /path/to/jax [--case randint8|int_floor]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import tempfile
import time
from pathlib import Path

from bench_bisect import CLI, run  # the same subprocess runner: the CLI as a user runs it, timed

from reprobundle.errors import EXIT_NOT_OK

ROOT = Path(__file__).resolve().parent.parent
CASES = {"randint8": ("0.7.1", "0.7.2", "a7b01146f2"), "int_floor": ("0.4.30", "0.4.31", None)}


def replay(case: str, good: str, bad: str, env: dict[str, str]) -> float:
    """The two releases replayed retraced with default settings: its wall time (exit 9: the outputs differ, as
    they do here)."""
    t0 = time.perf_counter()
    done = subprocess.run([*CLI, "replay", case, "--jax", good, "--jax", bad, "--retrace", "--json"],
                          capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode not in (0, EXIT_NOT_OK):
        raise SystemExit(f"replay {case} failed ({done.returncode}): {done.stderr[-2000:]}")
    return time.perf_counter() - t0


def one(case: str, jax_repo: str) -> dict:
    good, bad, expected = CASES[case]
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "REPROBUNDLE_STORE": str(Path(tmp) / "store")}
        run(["pack", str(ROOT / "tests" / "programs" / "retrace" / f"{case}.py"), "--name", case], env)
        replay_s = replay(case, good, bad, env)
        wall, out = run(["bisect-commits", case, "--good", good, "--bad", bad, "--jax-repo", jax_repo, "--json"], env)
    answer = json.loads(out)
    first = answer["first_bad"] or {}
    if expected and not str(first.get("sha", "")).startswith(expected):
        raise SystemExit(f"{case}: ended at {first.get('sha')}, not {expected}")
    return {"case": case, "good": good, "bad": bad, "replay_s": round(replay_s, 1), "bisect_commits_s": round(wall, 1),
            "ratio": round(wall / replay_s, 2), "commits": answer["commits"], "probes": answer["probes"],
            "commit_search_s": answer["spent"]["wall_s"], "first_bad": first.get("sha"), "title": first.get("title"),
            "pr": first.get("pr"), "skipped": len(answer["skipped"]), "lowering": (answer["lowering"] or {}).get("text"),
            "defaults": [d["name"] for d in answer.get("defaults") or []], "load": [load_before, os.getloadavg()[0]],
            "worker_s": answer["spent"]["total"]}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jax-repo", required=True)
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    args = parser.parse_args()
    for case in args.case or sorted(CASES, reverse=True):
        print(json.dumps(one(case, args.jax_repo)))


if __name__ == "__main__":
    main()
