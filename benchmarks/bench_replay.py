"""Replay measurement quality, each figure a ratio against a baseline measured in the same run.

1. Accuracy: a one-version replay's median time against an in-process timing loop of the same jitted function
   (goal: within 3%).
2. Overhead: a one-version replay's wall time beyond a bare subprocess that imports jax, compiles and makes the
   same number of calls (goal: <= 0.3 s per version).
3. Verdict quality at the default budget (100 steps, 8 interleaved rounds), from real replays:
   - false positives: replays of K copies of the same version timed together (K(K-1)/2 identical pairs each);
     any verdict but "same" is a false positive (goal <= 1%);
   - power, exact: the same pairs with the candidate's samples scaled by 1.10, a pure 10% slowdown (goal >= 95%);
   - power, real: two bundles timed together by the same scheduler, a chain of 10 and of 11 dependent matmuls
     (10% more work), whose in-process time ratio is measured alongside.

Usage: .venv/bin/python benchmarks/bench_replay.py [--accuracy-rounds R] [--replays N] [--copies K]
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
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
from reprobundle.analysis.verdict import timing_verdict  # noqa: E402
from reprobundle.run.execution import Timing, build_job  # noqa: E402
from reprobundle.run.schedule import DEFAULT_ROUNDS, DEFAULT_STEPS, Contender, measure_interleaved  # noqa: E402

BARE = r"""
import sys, time
import jax
from jax import export
import numpy as np
exp = export.deserialize(bytearray(open(sys.argv[1], "rb").read()))
args = [jax.device_put(np.load(p)) for p in sys.argv[2:]]  # on the device, as the worker holds them
f = jax.jit(exp.call).lower(*args).compile()
for _ in range({warmup}):
    jax.block_until_ready(f(*args))
for _ in range({calls}):
    jax.block_until_ready(f(*args))
"""


def in_process_median(fn, args, warmup: int, repeat: int) -> float:
    import jax

    args = jax.device_put(args)  # on the device, as the worker holds them
    compiled = jax.jit(fn).lower(*args).compile()
    for _ in range(warmup):
        jax.block_until_ready(compiled(*args))
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter_ns()
        jax.block_until_ready(compiled(*args))
        samples.append(time.perf_counter_ns() - t0)
    return statistics.median(samples)


def chain(n: int):
    import jax
    import jax.numpy as jnp

    def f(x, w):
        for _ in range(n):
            x = jnp.tanh(x @ w)
        return x

    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 512), dtype=np.float32)
    w = rng.standard_normal((512, 512), dtype=np.float32) / np.float32(np.sqrt(512))
    return jax.jit(f), (x, w)


def scaled(timing: dict, factor: float) -> dict:
    return {**timing, "samples_ns": [int(s * factor) for s in timing["samples_ns"]]}


def pack_example(opts, tmp: str):
    _, _, factory = load_factory(str(ROOT / opts.example))
    fn, args = factory()[:2]
    reprobundle.pack(fn, *args, name="bench", store=os.path.join(tmp, "store"), warmup=opts.warmup,
                     repeat=opts.repeat)
    return fn, args


def accuracy_and_overhead(opts, tmp: str, fn, args) -> tuple[list[float], list[float]]:
    store = os.path.join(tmp, "store")
    registry = open_registry(store)
    bundle = registry.resolve("bench")
    exported = registry.blob_file(bundle.manifest["function"]["exported"], Path(tmp) / "c")
    inputs = []
    for i, _ in enumerate(bundle.manifest["inputs"]["leaves"]):
        path = Path(tmp) / f"in{i}.npy"
        np.save(path, np.asarray(args[i]))
        inputs.append(str(path))
    ratios, overheads = [], []
    for _ in range(opts.accuracy_rounds):  # alternate the three so drift hits them alike
        inproc = in_process_median(fn, args, opts.warmup, opts.repeat)
        t0 = time.perf_counter()
        run = reprobundle.replay("bench", store=store, warmup=opts.warmup, repeat=opts.repeat, dump=False,
                                 profile=False).run
        replay_wall = time.perf_counter() - t0
        calls = len(run["timing"]["samples_ns"])
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", BARE.format(warmup=opts.warmup, calls=calls), str(exported), *inputs],
                       check=True)
        bare_wall = time.perf_counter() - t0
        ratios.append(statistics.median(run["timing"]["samples_ns"]) / inproc)
        overheads.append(replay_wall - bare_wall)
    return ratios, overheads


def identical_pairs(opts, tmp: str) -> list[tuple[dict, dict]]:
    store = os.path.join(tmp, "store")  # the bundle packed by accuracy_and_overhead
    pairs = []
    for i in range(opts.replays):
        t0 = time.perf_counter()
        runs = reprobundle.replay("bench", ["installed"] * opts.copies, store=store, warmup=opts.warmup,
                                  repeat=opts.repeat, dump=False, profile=False).runs
        assert all(r["status"] == "ok" for r in runs), [r["reason"] for r in runs]
        pairs += [(a["timing"], b["timing"]) for a, b in itertools.combinations(runs, 2)]
        print(f"  identical replay {i + 1}/{opts.replays}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return pairs


def real_slowdown(opts, tmp: str) -> tuple[list[dict], list[float], list[tuple[dict, dict]]]:
    store = os.path.join(tmp, "chains")
    for n in (10, 11):
        fn, args = chain(n)
        reprobundle.pack(fn, *args, name=f"chain{n}", store=store, warmup=1, repeat=3, dump=False, profile=False)
    registry = open_registry(store)
    bundles = {n: registry.resolve(f"chain{n}") for n in (10, 11)}
    timing = Timing(warmup=opts.warmup, repeat=opts.repeat)

    def writer(bundle):
        m = bundle.manifest
        return lambda folder, first: build_job(registry, m["function"], m["inputs"]["leaves"], folder, timing=timing,
                                               dump=False, profile=False, lockstep=True)

    verdicts, inproc, timings = [], [], []
    for i in range(opts.real_replays):
        contenders = [Contender(f"chain{n}", sys.executable, writer(bundles[n])) for n in (10, 11)]
        with tempfile.TemporaryDirectory(dir=tmp) as work:
            measured = measure_interleaved(contenders, Path(work), steps=opts.repeat, rounds=DEFAULT_ROUNDS,
                                           timeout_s=600)
        t = {}
        for c in contenders:
            m = measured[c.key]
            assert m.failed_round is None, m.outcome.reason
            t[c.key] = {"samples_ns": m.samples_ns, "steps": m.steps, "rounds": m.rounds, "group": str(i)}
        verdicts.append(timing_verdict(t["chain10"], t["chain11"]))
        timings.append((t["chain10"], t["chain11"]))
        medians = [in_process_median(*chain(n), opts.warmup, opts.repeat) for n in (10, 11)]
        inproc.append(medians[1] / medians[0])
        print(f"  real slowdown {i + 1}/{opts.real_replays}: {verdicts[-1]['verdict']} "
              f"{verdicts[-1]['ratio']:.3f}x (in-process {inproc[-1]:.3f}x)", file=sys.stderr)
    return verdicts, inproc, timings


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--example", default="examples/attention.py:make_small")
    parser.add_argument("--repeat", type=int, default=DEFAULT_STEPS, help="the default budget of timed steps")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--accuracy-rounds", type=int, default=6)
    parser.add_argument("--replays", type=int, default=6, help="replays of --copies identical versions")
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--real-replays", type=int, default=6)
    parser.add_argument("--save", type=Path, help="write the raw timings of the verdict pairs here (JSON)")
    opts = parser.parse_args()
    saved: dict = {}

    print(f"example: {opts.example}, repeat={opts.repeat}, warmup={opts.warmup}, rounds={DEFAULT_ROUNDS} "
          f"(interleaved), {opts.replays} replays x {opts.copies} copies", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        fn, args = pack_example(opts, tmp)
        if opts.accuracy_rounds:
            ratios, overheads = accuracy_and_overhead(opts, tmp, fn, args)
            print(f"replay median / in-process median: median {statistics.median(ratios):.3f} "
                  f"(range {min(ratios):.3f}-{max(ratios):.3f})  goal 0.97-1.03")
            print(f"tool overhead per version (replay wall - bare subprocess wall): median "
                  f"{statistics.median(overheads):.2f} s (range {min(overheads):.2f}-{max(overheads):.2f})  "
                  f"goal <= 0.3 s", flush=True)
        if opts.replays:
            pairs = identical_pairs(opts, tmp)
            saved["identical"] = pairs
            false_pos = [timing_verdict(a, b) for a, b in pairs]
            power = [timing_verdict(a, scaled(b, 1.10)) for a, b in pairs]
            fp = sum(v["verdict"] != "same" for v in false_pos)
            hit = sum(v["verdict"] == "slower" for v in power)
            covered = sum(v["ci95"][0] <= 1.10 <= v["ci95"][1] for v in power)
            spread = [math.log(v["ratio"]) for v in false_pos]
            print(f"false-positive rate, identical versions: {fp}/{len(pairs)} = {fp / len(pairs):.1%}  goal <= 1%; "
                  f"sd of the log ratio {statistics.pstdev(spread):.4f}, pairs with p < 0.05: "
                  f"{sum(v['p_value'] < 0.05 for v in false_pos)}")
            print(f"power, exact 10% slowdown (samples x1.10): {hit}/{len(pairs)} = {hit / len(pairs):.1%}  "
                  f"goal >= 95%; its 95% interval covers 1.10 in {covered}/{len(pairs)}", flush=True)
        if opts.real_replays:
            real, inproc, saved["real"] = real_slowdown(opts, tmp)
            real_hit = sum(v["verdict"] == "slower" for v in real)
            print(f"power, real slowdown (11 vs 10 chained matmuls, in-process ratio {statistics.median(inproc):.3f}):"
                  f" {real_hit}/{len(real)} flagged slower; paired ratios "
                  + ", ".join(f"{v['ratio']:.3f}" for v in real)
                  + "; p " + ", ".join(f"{v['p_value']:.1g}" for v in real))

    if opts.save:
        opts.save.write_text(json.dumps(saved))


if __name__ == "__main__":
    main()
