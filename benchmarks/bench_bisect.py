"""Bisect speed (#35): where a bisection's wall time goes, and what it costs beside one plain replay of its endpoints.

In one run, on one machine, each as the CLI runs it (a subprocess, --json):
1. `replay REF --jax GOOD --jax BAD --rounds 1`: the unit the goal is stated in;
2. `bisect REF --good GOOD --bad BAD` (the default path: outputs probes untimed, several at once, environments made
   ahead of need), with its breakdown (`spent`: per probe and in total);
3. the same with `--timed-probes` (every probe timed, one version a step: the path before #35);
4. for a program whose flag was `--retrace`, the same bisection with no flag (#41: frozen or retraced chosen from
   the endpoints; goal <= 1.3x the bisection with the right flag);
5. with `--cold`: the default bisect again from an empty environment folder (uv's package cache stays warm, as on a
   machine that installed JAX before), and the creation of one environment alone for the slowest-to-create release.

Programs: `rng` (tests/programs/retrace/rng.py, --retrace: its numbers change at 0.5.0, judged by outputs against the
good release's) and `colsum` (tests/programs/retrace/colsum.py, --by bits: its last bits change with the compiler).
Every release between GOOD and BAD that the index lists is a candidate (the cache holds them all here).

Usage: .venv/bin/python benchmarks/bench_bisect.py [--good 0.4.30] [--bad 0.10.2] [--programs rng colsum] [--cold]
       [--pairs N]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "reprobundle"]
PROGRAMS = {"rng": ("tests/programs/retrace/rng.py", ["--retrace"]),
            "colsum": ("tests/programs/retrace/colsum.py", ["--by", "bits"])}


def run_status(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    """One CLI command as a user runs it (a subprocess from the repository root), timed: (wall s, its result)."""
    t0 = time.perf_counter()
    done = subprocess.run(CLI + args, capture_output=True, text=True, env=env, cwd=ROOT)
    return time.perf_counter() - t0, done


def run(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    wall, done = run_status(args, env)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall, done.stdout


def bisect(name: str, extra: list[str], good: str, bad: str, env: dict[str, str],
           flags: list[str] | None = None) -> tuple[float, dict, int]:
    flags = PROGRAMS[name][1] if flags is None else flags
    wall, out = run(["bisect", name, "--good", good, "--bad", bad, *flags, *extra, "--json"], env)
    return wall, json.loads(out), len(out.encode())


def breakdown(data: dict) -> str:
    spent = data["spent"]
    total = ", ".join(f"{k} {v:.1f}" for k, v in spent["total"].items())
    probes = "; ".join(f"{p['what']} [{', '.join(p['versions'])}] {p['wall_s']:.1f} s" for p in spent["probes"])
    return f"{len(spent['probes'])} probes ({probes}); worker seconds: {total}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--good", default="0.4.30")
    parser.add_argument("--bad", default="0.10.2")
    parser.add_argument("--programs", nargs="+", default=list(PROGRAMS))
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--pairs", type=int, default=1, help="no-flag and flagged bisections alternated N times")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="bench-bisect-"))
    env = {**os.environ, "REPROBUNDLE_STORE": str(scratch / "store"), "REPROBUNDLE_CACHE_DIR": str(scratch / "cache")}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for name in args.programs:
        run(["pack", PROGRAMS[name][0], "--name", name, "--no-dump", "--no-profile"], env)
        replay_s, _ = run(["replay", name, "--jax", args.good, "--jax", args.bad, "--rounds", "1", "--json"], env)
        new_s, new, new_bytes = bisect(name, [], args.good, args.bad, env)
        old_s, old, old_bytes = bisect(name, ["--timed-probes"], args.good, args.bad, env)
        same = (new["first_bad"], new["last_good"], new["criterion"]) == \
            (old["first_bad"], old["last_good"], old["criterion"])
        print(f"{name}: replay --rounds 1 of {args.good} and {args.bad}: {replay_s:.1f} s")
        print(f"  bisect: {new_s:.1f} s ({new_s / replay_s:.2f}x the replay), first bad {new['first_bad']} by "
              f"{new['criterion']}, --json {new_bytes / 1024:.0f} KiB; {breakdown(new)}")
        print(f"  bisect --timed-probes: {old_s:.1f} s ({old_s / replay_s:.2f}x the replay; the default path "
              f"{old_s / new_s:.2f}x faster), first bad {old['first_bad']}, --json {old_bytes / 1024:.0f} KiB; "
              f"{breakdown(old)}")
        print(f"  same answer: {same}")
        if PROGRAMS[name][1] == ["--retrace"]:
            auto_s, auto, _ = bisect(name, [], args.good, args.bad, env, flags=[])
            print(f"  bisect with no flag: {auto_s:.1f} s ({auto_s / new_s:.2f}x the bisection with --retrace; goal "
                  f"<= 1.3x), first bad {auto['first_bad']} by {auto['criterion']}, mode {auto['mode']}: "
                  f"{auto['mode_why']}")
            ratios = [auto_s / new_s]
            for _ in range(args.pairs - 1):  # alternated, so that a drift of the machine meets both alike
                flagged_s = bisect(name, [], args.good, args.bad, env)[0]
                ratios.append(bisect(name, [], args.good, args.bad, env, flags=[])[0] / flagged_s)
            if len(ratios) > 1:
                print(f"  no flag / --retrace over {len(ratios)} alternated pairs: median "
                      f"{statistics.median(ratios):.2f}x ({', '.join(f'{r:.2f}' for r in ratios)})")
        if args.cold:
            cold_env = {**env, "REPROBUNDLE_ENV_DIR": str(scratch / f"envs-{name}")}
            cold_s, cold, _ = bisect(name, [], args.good, args.bad, cold_env)
            created_s = max(create_environment(v, scratch / f"one-env-{name}-{v}", env) for v in (args.good, args.bad))
            print(f"  cold bisect: {cold_s:.1f} s (warm {new_s:.1f} s; goal <= 2 x warm + the slower of the two "
                  f"endpoints' environments made alone, {created_s:.1f} s -> {2 * new_s + created_s:.1f} s), first bad "
                  f"{cold['first_bad']}; {breakdown(cold)}")


def create_environment(version: str, folder: Path, env: dict[str, str]) -> float:
    """Seconds to make one release's environment in an empty folder, alone."""
    code = ("from reprobundle.envs.manager import EnvironmentManager; from reprobundle.envs.env_config import EnvConfig; "
            f"EnvironmentManager(EnvConfig.of({str(folder)!r}, None, None)).ensure({version!r})")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
