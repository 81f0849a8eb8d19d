"""End to end: the attention example on two and three JAX versions with warm environments, and a new environment from
a warm package cache, each against a baseline measured in the same run.

- compare: `reprobundle replay attention --jax 0.7.2 --jax 0.8.0 [--jax installed]` wall time with the adaptive
  budget (goals: three versions <= 45 s, two <= 25 s), against the old fixed budget (`--rounds 8`, 100 steps) in
  the same session; each replay prints its verdicts, rounds and the conditions it was measured under (a busy
  machine makes every figure slower and the adaptive budget longer);
- environment: `EnvironmentManager.ensure(V)` into an empty root while the uv cache is warm (goal <= 5 s),
  against a bare `uv venv` + `uv pip install` of the same packages.

Usage: .venv/bin/python benchmarks/bench_e2e.py [--versions 0.7.2 0.8.0 installed] [--env-version 0.8.0]
       [--no-fixed] [--no-env] [--pin CPUS]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reprobundle import api  # noqa: E402
from reprobundle.analysis.busy import summary  # noqa: E402
from reprobundle.envs.manager import EnvironmentManager  # noqa: E402
from reprobundle.run.schedule import DEFAULT_STEPS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", nargs="+", default=["0.7.2", "0.8.0", "installed"])
    parser.add_argument("--env-version", default="0.8.0")
    parser.add_argument("--repeat", type=int, default=DEFAULT_STEPS)
    parser.add_argument("--no-fixed", dest="fixed", action="store_false", help="skip the fixed 8-round replays")
    parser.add_argument("--no-env", dest="env", action="store_false", help="skip the new-environment figure")
    parser.add_argument("--pin", default=None, help="replay --pin")
    opts = parser.parse_args()

    manager = EnvironmentManager()
    for v in opts.versions:  # warm environments: this benchmark is about the steady state
        if v != "installed":
            manager.ensure(v)

    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        api.pack_script(str(ROOT / "examples/attention.py"), name="attention", store=store, repeat=5, warmup=2)
        sets = [opts.versions] + ([opts.versions[:2]] if len(opts.versions) > 2 else [])
        for versions in sets:
            goal = {3: 45, 2: 25}.get(len(versions))
            walls = {}
            for rounds in (None, 8) if opts.fixed else (None,):
                t0 = time.perf_counter()
                result = api.replay("attention", versions, store=store, repeat=opts.repeat, rounds=rounds, pin=opts.pin)
                walls[rounds] = time.perf_counter() - t0
                comparison = api.replay_comparison(result)
                timed = sum(sum((r.get("timing") or {}).get("samples_ns") or []) for r in result.runs) / 1e9
                cond = result.runs[0]["environment"].get("conditions") or {}
                schedule = cond.get("schedule") or {}
                verdicts = "; ".join(f"{r['label']}: {r['verdict']} {r['ratio']:.2f}x" + (
                    f" (settled at {r['decided_at']})" if r.get("decided_at") else "")
                    for r in comparison["rows"] if r["verdict"] not in (None, "baseline"))
                print(f"{len(versions)} versions ({', '.join(versions)}), "
                      f"{'adaptive' if rounds is None else f'fixed {rounds} rounds'}: {walls[rounds]:.1f} s wall, "
                      f"{schedule.get('rounds')} rounds ({schedule.get('stopped')}), {timed:.1f} s in timed calls"
                      + (f"  goal <= {goal} s" if rounds is None and goal else "") + f"; {verdicts}")
                print(f"  measured under: {summary(cond)}", flush=True)
            if len(walls) > 1:
                print(f"  adaptive / fixed 8 rounds: {walls[None] / walls[8]:.2f}x")
        if not opts.env:
            return

        root = Path(tmp) / "envs"
        fresh = EnvironmentManager(root)
        t0 = time.perf_counter()
        env = fresh.ensure(opts.env_version)
        ensure_s = time.perf_counter() - t0
        uv = fresh._uv_bin()
        bare = Path(tmp) / "bare"
        t0 = time.perf_counter()
        subprocess.run([uv, "venv", "-q", "-p", str(env.python_executable.resolve()), str(bare)], check=True,
                       env={**os.environ, "UV_PYTHON_DOWNLOADS": "never"})
        subprocess.run([uv, "pip", "install", "-q", "--python", str(bare / "bin" / "python"),
                        f"jax=={opts.env_version}", f"jaxlib=={opts.env_version}", "numpy", "msgpack", "flatbuffers"],
                       check=True)
        subprocess.run([str(bare / "bin" / "python"), "-c", "import jax; jax.devices()"], check=True)
        bare_s = time.perf_counter() - t0
        print(f"new environment for jax {opts.env_version} from a warm uv cache: {ensure_s:.1f} s; bare uv venv + "
              f"install + import jax: {bare_s:.1f} s ({ensure_s / bare_s:.2f}x)  goal <= 5 s")
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
