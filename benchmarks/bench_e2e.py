"""End to end: the attention example on three JAX versions with warm environments, and a new environment from a
warm package cache, each against a baseline measured in the same run.

- compare: `reprobundle replay attention --jax 0.7.2 --jax 0.8.0 --jax installed` wall time (goal <= 60 s) with
  the default interleaved rounds, against the same replay in one round (one worker process per version);
- environment: `EnvironmentManager.ensure(V)` into an empty root while the uv cache is warm (goal <= 5 s),
  against a bare `uv venv` + `uv pip install` of the same packages.

Usage: .venv/bin/python benchmarks/bench_e2e.py [--versions 0.7.2 0.8.0 installed] [--env-version 0.8.0]
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
from reprobundle.run.envs import EnvironmentManager  # noqa: E402
from reprobundle.run.schedule import DEFAULT_STEPS  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", nargs="+", default=["0.7.2", "0.8.0", "installed"])
    parser.add_argument("--env-version", default="0.8.0")
    parser.add_argument("--repeat", type=int, default=DEFAULT_STEPS)
    opts = parser.parse_args()

    manager = EnvironmentManager()
    for v in opts.versions:  # warm environments: this benchmark is about the steady state
        if v != "installed":
            manager.ensure(v)

    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        api.pack_script(str(ROOT / "examples/attention.py"), name="attention", store=store, repeat=5, warmup=2)
        walls = {}
        for rounds in (None, 1):  # the default interleaved schedule, and one round: what interleaving costs
            t0 = time.perf_counter()
            result = api.replay("attention", opts.versions, store=store, repeat=opts.repeat, rounds=rounds)
            walls[rounds] = time.perf_counter() - t0
            timed = sum(sum((r.get("timing") or {}).get("samples_ns") or []) for r in result.runs) / 1e9
            statuses = ", ".join(f"{r['requested']}={r['status']}" for r in result.runs)
            n_rounds = len((result.runs[0].get("timing") or {}).get("rounds") or [])
            print(f"compare on {len(opts.versions)} versions ({statuses}), repeat={opts.repeat}, {n_rounds} rounds: "
                  f"{walls[rounds]:.1f} s wall, of which {timed:.1f} s in timed calls"
                  + ("  goal <= 60 s" if rounds is None else ""))
        print(f"interleaved default / one round: {walls[None] / walls[1]:.2f}x")

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
