"""Replay measurement quality, each figure a ratio against a baseline measured in the same run.

1. Accuracy: a one-version replay's median time against an in-process timing loop of the same jitted function
   (goal: within 3%).
2. Overhead: a one-version replay's wall time beyond a bare subprocess that imports jax, compiles and makes the
   same number of calls (goal: <= 0.3 s per version).
3. Verdict quality under the adaptive budget (run/budget.py: rounds of 13 steps, the group-sequential test after
   each from the third, up to sequential.LAST_LOOK), from real replays:
   - false positives: K copies of the same version timed together for the full LAST_LOOK rounds (K(K-1)/2 identical
     pairs each); the sequential procedure is applied to each pair's real per-round ratios exactly as the adaptive
     schedule applies it (it decides at its first settled look, which is where the schedule would have stopped);
     any verdict but "same" is a false positive (goal <= 1%);
   - power at 5% and 10%: the same pairs with the candidate's per-round log ratios shifted by log 1.05 / log 1.10,
     a pure slowdown (goal >= 95% at 5%);
   - budget spent: the rounds (and seconds) each decision took, median;
   - real slowdown: two bundles timed together by the replay's scheduler with the adaptive budget itself, a chain of
     10 and of 11 dependent matmuls (10% more work), against an in-process A/B of the same two functions (one fresh
     process, calls alternated, pinned alike with --pin); agreement: the paired ratio / the in-process ratio, and
     whether the in-process ratio is in the 95% interval.
   Every replay records its conditions (load, other processes); the figures print them.

Usage: .venv/bin/python benchmarks/bench_replay.py [--accuracy-rounds R] [--replays N] [--copies K] [--pin CPUS]
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
sys.path.insert(0, str(ROOT / "examples"))  # chain.py

import reprobundle  # noqa: E402
from reprobundle.analysis import sequential  # noqa: E402
from reprobundle.analysis.busy import summary  # noqa: E402
from reprobundle.analysis.verdict import paired_log_ratios, timing_verdict  # noqa: E402
from reprobundle.api import open_registry, parse_pin  # noqa: E402
from reprobundle.capture.script import load_factory  # noqa: E402
from reprobundle.run import budget as B  # noqa: E402
from reprobundle.run.conditions import conditions, snapshot  # noqa: E402
from reprobundle.run.execution import Timing, build_job  # noqa: E402
from reprobundle.run.schedule import DEFAULT_STEPS, Contender, measure_interleaved  # noqa: E402

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


IN_PROCESS_AB = r"""
import os, sys, time, statistics
cpus = sys.argv[1]
if cpus:
    os.sched_setaffinity(0, [int(c) for c in cpus.split(",")])
sys.path.insert(0, sys.argv[2])
from bench_replay import chain
import jax
fns = {n: chain(n) for n in (10, 11)}
compiled = {n: (jax.jit(f).lower(*a).compile(), jax.device_put(a)) for n, (f, a) in fns.items()}
for n, (c, a) in compiled.items():
    for _ in range(int(sys.argv[3])):
        jax.block_until_ready(c(*a))
times = {10: [], 11: []}
for i in range(int(sys.argv[4])):  # alternated, ABBA
    for n in ((10, 11) if i % 2 == 0 else (11, 10)):
        c, a = compiled[n]
        t0 = time.perf_counter_ns()
        jax.block_until_ready(c(*a))
        times[n].append(time.perf_counter_ns() - t0)
print(statistics.median(times[11]) / statistics.median(times[10]))
"""


def in_process_ab(opts) -> float:
    """The chains' time ratio measured the ordinary way: both in one fresh process, calls alternated, under the same
    pinning as the replay (affinity and thread settings) when --pin is given."""
    from reprobundle.run.execution import pinned_env

    env = dict(os.environ, **(pinned_env(opts.pin.threads) if opts.pin else {}))
    cpus = ",".join(map(str, opts.pin.cpus)) if opts.pin else ""
    out = subprocess.run([sys.executable, "-c", IN_PROCESS_AB, cpus, str(Path(__file__).parent), str(opts.warmup),
                          str(opts.repeat)], check=True, capture_output=True, text=True, env=env)
    return float(out.stdout.strip().splitlines()[-1])


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
    """examples/chain.py's n-layer chain at this benchmark's size (11 vs 10 layers: a real ~10% difference)."""
    from chain import chain as example_chain  # examples/ is on sys.path (above)

    return example_chain(n, rows=256, width=512)


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


def identical_pairs(opts, tmp: str) -> tuple[list[list[float]], list[float], list[str], list[list[dict]]]:
    """Per identical pair, its per-round paired log ratios over the full LAST_LOOK rounds; the replays' seconds per
    round; the conditions each replay was measured under; each replay's timings (steps and rounds, for --save)."""
    store = os.path.join(tmp, "store")  # the bundle packed by accuracy_and_overhead
    pairs, per_round, measured_under, timings = [], [], [], []
    for i in range(opts.replays):
        t0 = time.perf_counter()
        runs = reprobundle.replay("bench", ["installed"] * opts.copies, store=store, warmup=opts.warmup,
                                  repeat=B.STEPS_PER_ROUND * sequential.LAST_LOOK, rounds=sequential.LAST_LOOK,
                                  dump=False, profile=False, pin=opts.pin).runs
        wall = time.perf_counter() - t0
        assert all(r["status"] == "ok" for r in runs), [r["reason"] for r in runs]
        pairs += [paired_log_ratios(a["timing"], b["timing"]) for a, b in itertools.combinations(runs, 2)]
        timings.append([r["timing"] for r in runs])
        per_round.append(wall / sequential.LAST_LOOK)
        measured_under.append(summary(runs[0]["environment"]["conditions"]))
        print(f"  identical replay {i + 1}/{opts.replays}: {wall:.0f} s; {measured_under[-1]}", file=sys.stderr)
    return pairs, per_round, measured_under, timings


# The design the verdicts used before LAST_LOOK went to 32 (sequential.py): the same data judged by it, its first
# 16 rounds, is the "before" beside each figure.
PREVIOUS = sequential.Design(last_look=16, alpha_look=0.0014, beta_look=0.0100)


def sequential_figures(pairs: list[list[float]], shift: float,
                       design: sequential.Design = sequential.DESIGN) -> tuple[int, list[int], int]:
    """Verdicts other than 'same' (shift 0) or 'slower' (shift > 0) counted as the procedure decides them, the
    rounds each decision took (the cap when unsettled), and how many were unsettled at the cap."""
    hits, rounds, unsettled = 0, [], 0
    for ratios in pairs:
        found = sequential.first_decision([d + shift for d in ratios[:design.last_look]], design=design)
        hits += (found.decision in ("slower", "faster")) if shift == 0 else (found.decision == "slower")
        rounds.append(found.rounds)
        unsettled += found.decision is None
    return hits, rounds, unsettled


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
        budget = B.plan([c.key for c in contenders], opts.repeat, None)
        before = snapshot()
        t0 = time.perf_counter()
        budget.begin()
        with tempfile.TemporaryDirectory(dir=tmp) as work:
            measured = measure_interleaved(contenders, Path(work), steps=budget.steps, rounds=budget.rounds,
                                           timeout_s=600, more=budget.more, pin=opts.pin)
        wall = time.perf_counter() - t0
        t = {}
        for c in contenders:
            m = measured[c.key]
            assert m.failed_round is None, m.outcome.reason
            t[c.key] = {"samples_ns": m.samples_ns, "steps": m.steps, "rounds": m.rounds, "group": str(i)}
        verdicts.append(timing_verdict(t["chain10"], t["chain11"]))
        verdicts[-1]["wall_s"] = wall
        timings.append((t["chain10"], t["chain11"]))
        inproc.append(in_process_ab(opts))
        v = verdicts[-1]
        print(f"  real slowdown {i + 1}/{opts.real_replays}: {v['verdict']} {v['ratio']:.3f}x "
              f"[{v['ci95'][0]:.3f}-{v['ci95'][1]:.3f}] in {v['rounds']} rounds, {wall:.0f} s "
              f"(in-process {inproc[-1]:.3f}x); {summary(conditions(before, snapshot()))}", file=sys.stderr)
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
    parser.add_argument("--pin", default=None, help="pin every worker (replay --pin): CPUS or auto")
    opts = parser.parse_args()
    opts.pin = parse_pin(opts.pin)
    saved: dict = {}

    print(f"example: {opts.example}, warmup={opts.warmup}, adaptive budget ({B.STEPS_PER_ROUND} steps a round, "
          f"{sequential.FIRST_LOOK}-{sequential.LAST_LOOK} rounds), {opts.replays} replays x {opts.copies} copies"
          + (f", {opts.pin.describe()}" if opts.pin else ""), flush=True)
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
            pairs, per_round, measured_under, saved["identical_timings"] = identical_pairs(opts, tmp)
            saved["identical"] = pairs
            spread = [statistics.stdev(r) for r in pairs]
            print(f"identical pairs: {len(pairs)}; per-round spread of the paired log ratio (sd) median "
                  f"{statistics.median(spread):.4f}; {statistics.median(per_round):.1f} s per round "
                  f"({opts.copies} versions)")
            for design in (sequential.DESIGN, PREVIOUS):
                cap = design.last_look
                print(f"{'' if design is sequential.DESIGN else 'before: '}cap {cap} rounds:")
                fp, rounds0, open0 = sequential_figures(pairs, 0.0, design)
                print(f"  false-positive rate, adaptive budget: {fp}/{len(pairs)} = {fp / len(pairs):.1%}  goal <= 1%; "
                      f"median rounds to a decision {statistics.median(rounds0):g} (unsettled at {cap}: {open0})")
                for effect in (1.05, 1.10):
                    hit, rounds, _ = sequential_figures(pairs, math.log(effect), design)
                    print(f"  power, {effect - 1:.0%} slowdown (per-round log ratios + log {effect:g}): {hit}/"
                          f"{len(pairs)} = {hit / len(pairs):.1%}  goal >= 95% at 5%; median rounds "
                          f"{statistics.median(rounds):g}")
            print("  measured under: " + "\n  measured under: ".join(measured_under), flush=True)
        if opts.real_replays:
            real, inproc, saved["real"] = real_slowdown(opts, tmp)
            real_hit = sum(v["verdict"] == "slower" for v in real)
            agree = [v["ratio"] / r for v, r in zip(real, inproc)]
            inside = sum(v["ci95"][0] <= r <= v["ci95"][1] for v, r in zip(real, inproc))
            print(f"real slowdown (11 vs 10 chained matmuls), adaptive budget: {real_hit}/{len(real)} flagged slower; "
                  f"paired ratios " + ", ".join(f"{v['ratio']:.3f}" for v in real)
                  + "; rounds " + ", ".join(str(v["rounds"]) for v in real)
                  + f"; median {statistics.median(v['wall_s'] for v in real):.0f} s each")
            print("agreement with an in-process A/B (in-process ratios "
                  + ", ".join(f"{r:.3f}" for r in inproc) + f"): paired / in-process median "
                  f"{statistics.median(agree):.3f} (range {min(agree):.3f}-{max(agree):.3f}); in-process ratio inside "
                  f"the 95% interval {inside}/{len(real)}")

    if opts.save:
        opts.save.write_text(json.dumps(saved))


if __name__ == "__main__":
    main()
