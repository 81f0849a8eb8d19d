"""Isolation speed: `isolate` of the attention example (full size) on two versions, against the way it timed its
pieces before (one adaptive replay per piece, each with its own worker processes, up to sequential.LAST_LOOK
rounds each: 16 when the figures in benchmarks/README.md were taken), in the same run on the same machine.

- new: `api.isolate` end to end (split, pieces packed, one measurement of every piece on both versions in which a
  piece stops once it cannot hold the largest move, the moved piece packed), as the CLI runs it;
- old: the same steps with the old timing: the pieces packed (investigate/minimize/pieces.pack_pieces), replayed one by one
  (run/replay.replay), the moved piece packed.
- fresh (--fresh-runs N): the new path with `fresh_workers` (each piece its own worker processes every round, as
  before its pieces shared one process per version and round; issue #35).
Each run prints its wall time, how long its phases took, each piece's rounds, ratio and verdict (or the round after
which it was ruled out), the piece it named, and the conditions it ran under (CPU pressure, load). Runs alternate
(new, old, new, ...), so that both meet the same drift of a shared machine.

Usage: .venv/bin/python benchmarks/bench_isolate.py [--versions 0.7.2 0.8.0] [--runs 2] [--old-runs 1]
       [--fresh-runs 0] [--pin CPUS]
       [--example examples/attention.py]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reprobundle import api  # noqa: E402
from reprobundle.analysis.busy import summary  # noqa: E402
from reprobundle.envs.manager import EnvironmentManager  # noqa: E402
from reprobundle.investigate.minimize.pieces import judge, pack_piece, pack_pieces  # noqa: E402
from reprobundle.run.conditions import conditions, snapshot  # noqa: E402
from reprobundle.run.execution import Timing  # noqa: E402
from reprobundle.run.replay import replay  # noqa: E402
from reprobundle.run.schedule import DEFAULT_STEPS  # noqa: E402


class Phases:
    """Seconds from the start to each progress line's phase change (isolate's own lines name what it does)."""

    def __init__(self) -> None:
        self.t0 = time.perf_counter()
        self.marks: list[tuple[str, float]] = []

    def __call__(self, line: str) -> None:
        text = str(line)
        kind = ("timing" if text.startswith("timing the") else "pack moved" if text.startswith("packing piece")
                else "pack pieces" if text.startswith("split @") else None)
        if kind:
            self.marks.append((kind, time.perf_counter() - self.t0))

    def mark(self, kind: str) -> None:
        self.marks.append((kind, time.perf_counter() - self.t0))

    def text(self, wall: float) -> str:
        ends = [t for _, t in self.marks[1:]] + [wall]
        return ", ".join(f"{k} {end - t:.0f} s" for (k, t), end in zip(self.marks, ends))


def pieces_text(iso_pieces, moved) -> str:
    out = []
    for r in iso_pieces:
        v = r.verdict or {}
        what = (f"ruled out after {r.ruled_out}" if r.ruled_out is not None and not v.get("settled") else
                f"{v.get('verdict')}{'' if v.get('settled') else ' (not settled)'}")
        out.append(f"{r.piece.index + 1}{'*' if r is moved else ''} {r.piece.label} {v.get('ratio', float('nan')):.2f}x "
                   f"{len((r.runs[0].get('timing') or {}).get('rounds') or [])} rounds {what}")
    return "; ".join(out)


def run_new(opts, store: str, fresh: bool = False) -> float:
    before = snapshot()
    phases = Phases()
    iso = api.isolate("attention", opts.versions, store=store, pin=opts.pin, progress=phases, fresh_workers=fresh)
    wall = time.perf_counter() - phases.t0
    print(f"new (one measurement, largest-move rule{', fresh workers' if fresh else ''}): {wall:.1f} s "
          f"({phases.text(wall)}); named piece "
          f"{iso.moved.piece.index + 1 if iso.moved else '-'}, packed as {iso.packed}")
    print(f"  pieces: {pieces_text(iso.pieces, iso.moved)}")
    print(f"  measured under: {summary(conditions(before, snapshot()))}", flush=True)
    return wall


def run_old(opts, store: str, manager: EnvironmentManager) -> float:
    before = snapshot()
    phases = Phases()
    registry = api.open_registry(store)
    bundle = registry.resolve("attention")
    pin = api.parse_pin(opts.pin)
    with tempfile.TemporaryDirectory(prefix="bench-isolate-") as tmp:
        scratch = api.open_registry(os.path.join(tmp, "store"))
        _, results = pack_pieces(registry, bundle, scratch, say=phases)
        phases.mark("timing")
        all_runs = [replay(scratch, scratch.resolve(r.ref), opts.versions, timing=Timing(warmup=2, repeat=DEFAULT_STEPS),
                           dump=False, profile=False, env_manager=manager, pin=pin, store_runs=False)
                    for r in results]
        moved = judge(results, all_runs)
        phases.mark("pack moved")
        packed = pack_piece(registry, bundle, moved, opts.versions, "attention-old-piece") if moved else None
    wall = time.perf_counter() - phases.t0
    print(f"old (one adaptive replay per piece): {wall:.1f} s ({phases.text(wall)}); named piece "
          f"{moved.piece.index + 1 if moved else '-'}, packed as {packed}")
    print(f"  pieces: {pieces_text(results, moved)}")
    print(f"  measured under: {summary(conditions(before, snapshot()))}", flush=True)
    return wall


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--versions", nargs=2, default=["0.7.2", "0.8.0"])
    parser.add_argument("--runs", type=int, default=2, help="runs of the new isolate")
    parser.add_argument("--old-runs", type=int, default=1, help="runs of the old per-piece timing")
    parser.add_argument("--fresh-runs", type=int, default=0, help="runs of the new isolate with fresh workers")
    parser.add_argument("--pin", default=None, help="isolate --pin")
    parser.add_argument("--example", default="examples/attention.py")
    opts = parser.parse_args()

    manager = EnvironmentManager()
    for v in opts.versions:  # warm environments: this benchmark is about the steady state
        if v != "installed":
            manager.ensure(v)
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        api.pack_script(str(ROOT / opts.example), name="attention", store=store, repeat=5, warmup=2)
        new, old, fresh = [], [], []
        for i in range(max(opts.runs, opts.old_runs, opts.fresh_runs)):
            if i < opts.runs:
                new.append(run_new(opts, store))
            if i < opts.fresh_runs:
                fresh.append(run_new(opts, store, fresh=True))
            if i < opts.old_runs:
                old.append(run_old(opts, store, manager))
        if new and fresh:
            print(f"fresh workers / shared: {min(fresh) / min(new):.2f}x (best of each: {min(fresh):.0f} s vs "
                  f"{min(new):.0f} s)")
        if new and old:
            print(f"old / new: {min(old) / min(new):.2f}x faster (best of each: {min(old):.0f} s vs {min(new):.0f} s)"
                  f"  goal: new under 90 s")


if __name__ == "__main__":
    main()
