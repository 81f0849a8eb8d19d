"""Replay measurement quality, each figure a ratio against a baseline measured in the same run.

1. Accuracy: the replay's median time against an in-process timing loop of the same jitted function (goal: within
   3%).
2. Overhead: a replay's wall time beyond a bare subprocess that imports jax, compiles and runs the same calls
   (goal: <= 0.3 s per version).
3. Verdict quality at the default sample budget: false-positive rate between replays of identical versions
   (goal <= 1%) and power to flag a 10% slowdown (goal >= 95%), from all pairs of R independent replays.

Usage: .venv/bin/python benchmarks/bench_replay.py [--rounds R] [--example attention.py:make_small]
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import reprobundle  # noqa: E402
from reprobundle.api import load_factory, open_registry  # noqa: E402
from reprobundle.compare import timing_verdict  # noqa: E402

BARE = r"""
import sys, time
import jax
from jax import export
import numpy as np
exp = export.deserialize(bytearray(open(sys.argv[1], "rb").read()))
args = [np.load(p) for p in sys.argv[2:]]
f = jax.jit(exp.call).lower(*args).compile()
for _ in range({warmup}):
    jax.block_until_ready(f(*args))
for _ in range({repeat}):
    jax.block_until_ready(f(*args))
"""


def in_process_median(fn, args, warmup: int, repeat: int) -> float:
    import jax

    compiled = jax.jit(fn).lower(*args).compile()
    for _ in range(warmup):
        jax.block_until_ready(compiled(*args))
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        jax.block_until_ready(compiled(*args))
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=10, help="independent replays for the verdict statistics")
    parser.add_argument("--example", default="examples/attention.py:make")
    parser.add_argument("--repeat", type=int, default=50, help="the default sample budget")
    parser.add_argument("--warmup", type=int, default=5)
    opts = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        _, _, factory = load_factory(str(ROOT / opts.example))
        fn, args = factory()[:2]
        ref = reprobundle.pack(fn, *args, name="bench", store=store, warmup=opts.warmup, repeat=opts.repeat)

        # 1 + 2: alternate in-process, replay and bare-subprocess measurements so drift hits all of them alike.
        ratios, overheads = [], []
        registry = open_registry(store)
        bundle = registry.resolve(str(ref))
        exported = registry.blob_file(bundle.manifest["function"]["exported"], Path(tmp) / "c")
        inputs = []
        for i, leaf in enumerate(bundle.manifest["inputs"]["leaves"]):
            path = Path(tmp) / f"in{i}.npy"
            np.save(path, np.asarray(args[i]))
            inputs.append(str(path))
        bare = BARE.format(warmup=opts.warmup, repeat=opts.repeat)
        run_samples = []
        for _ in range(opts.rounds):
            inproc = in_process_median(fn, args, opts.warmup, opts.repeat)
            t0 = time.perf_counter()
            run = reprobundle.replay("bench", store=store, warmup=opts.warmup, repeat=opts.repeat, dump=False,
                                     profile=False).run
            replay_wall = time.perf_counter() - t0
            t0 = time.perf_counter()
            subprocess.run([sys.executable, "-c", bare, str(exported), *inputs], check=True)
            bare_wall = time.perf_counter() - t0
            samples = run["timing"]["samples_ns"]
            run_samples.append(samples)
            ratios.append(statistics.median(samples) / inproc)
            overheads.append(replay_wall - bare_wall)

        pairs = list(itertools.combinations(range(len(run_samples)), 2))
        false_pos = sum(timing_verdict(run_samples[i], run_samples[j])["verdict"] != "same" for i, j in pairs)
        power = sum(timing_verdict(run_samples[i], [s * 1.10 for s in run_samples[j]])["verdict"] == "slower"
                    for i, j in pairs)

    print(f"example: {opts.example}, repeat={opts.repeat}, warmup={opts.warmup}, rounds={opts.rounds}")
    print(f"replay median / in-process median: median {statistics.median(ratios):.3f} "
          f"(range {min(ratios):.3f}-{max(ratios):.3f})  goal 0.97-1.03")
    print(f"tool overhead per version (replay wall - bare subprocess wall): median {statistics.median(overheads):.2f} s "
          f"(range {min(overheads):.2f}-{max(overheads):.2f})  goal <= 0.3 s")
    print(f"false-positive rate, identical versions: {false_pos}/{len(pairs)} = {false_pos / len(pairs):.1%}  goal <= 1%")
    print(f"power, 10% slowdown: {power}/{len(pairs)} = {power / len(pairs):.1%}  goal >= 95%")


if __name__ == "__main__":
    main()
