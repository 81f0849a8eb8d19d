"""What a retrace costs: a retraced replay of the attention example on two releases against a frozen one with the same
budget (the same fixed rounds and steps), alternated, each a ratio or difference against the frozen replay measured
in the same run.

Figures:
- extra wall time per version per round: (retraced replay wall - frozen replay wall) / (versions x rounds): each
  round starts a fresh worker per version, and a retraced worker imports the script, runs the factory, exports the
  call and lowers it where a frozen one deserializes the stored module;
- the goal's yardstick, measured here in-process on the host's JAX: the factory's own run (import + call) plus one
  export (trace and lowering) of its call.

Usage: .venv/bin/python benchmarks/bench_retrace.py [--versions 0.7.2 0.8.0] [--rounds 3] [--alternations 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reprobundle import api  # noqa: E402
from reprobundle.capture.script import load_factory  # noqa: E402
from reprobundle.envs.manager import EnvironmentManager  # noqa: E402

SCRIPT = ROOT / "examples" / "attention.py"


def factory_and_export_s(repeats: int = 3) -> float:
    """The yardstick: the script's import and factory call, then one jax.export of the call, in this process."""
    import jax

    from reprobundle.worker.flatten import flatten_call

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _, _, factory = load_factory(str(SCRIPT))
        fn, args = factory()[:2]
        call = flatten_call(fn, tuple(args), {})
        jax.export.export(jax.jit(call.fn_flat))(*call.dynamic)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", nargs="+", default=["0.7.2", "0.8.0"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=24)
    parser.add_argument("--alternations", type=int, default=3)
    opts = parser.parse_args()
    manager = EnvironmentManager()
    for v in opts.versions:
        manager.ensure(v)
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        api.pack_script(str(SCRIPT), name="attention", store=store, warmup=1, repeat=3, profile=False, dump=False)
        walls: dict[str, list[float]] = {"frozen": [], "retrace": []}
        for i in range(opts.alternations):
            for mode in (("frozen", "retrace") if i % 2 == 0 else ("retrace", "frozen")):
                t0 = time.perf_counter()
                result = api.replay("attention", opts.versions, store=store, rounds=opts.rounds, repeat=opts.repeat,
                                    warmup=2, profile=False, dump=False, mode=mode)
                walls[mode].append(time.perf_counter() - t0)
                bad = [r["status"] for r in result.runs if r["status"] not in ("ok", "mismatch")]
                assert not bad, [(r["contender"]["label"], r["reason"]) for r in result.runs]
                print(f"{mode}: {walls[mode][-1]:.1f} s", flush=True)
    yardstick = factory_and_export_s()
    pairs = [(r - f) / (len(opts.versions) * opts.rounds) for f, r in zip(walls["frozen"], walls["retrace"])]
    print(f"frozen replay wall, median: {statistics.median(walls['frozen']):.1f} s; retraced: "
          f"{statistics.median(walls['retrace']):.1f} s ({len(opts.versions)} versions, {opts.rounds} rounds)")
    print(f"extra per version per round: median {statistics.median(pairs):.2f} s (range {min(pairs):.2f}-"
          f"{max(pairs):.2f} s)")
    print(f"yardstick (factory run + one export, in-process on the host's jax): {yardstick:.2f} s")


if __name__ == "__main__":
    main()
