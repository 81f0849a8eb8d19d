"""What `reprobundle capture` costs the program it runs, against the same program run plainly, in the same run.

The program is examples/train_nnx.py (a Flax NNX + optax training loop, `--steps` steps of nnx.jit), run as a
child process exactly as `reprobundle capture` runs it (capture/program_launch.py's environment: the capture
sitecustomize first on PYTHONPATH, the options in REPROBUNDLE_CAPTURE); packing, which happens after the program
ended, is not part of the program's time and is not measured. The three variants alternate, in a rotated order,
for --rounds rounds; figures are medians over the rounds of per-round ratios (drift on a shared VM cancels
within a round).

Figures:
- non-matching: wall time under `capture --match <a name nothing has>` / plain wall time (goal <= 1.02);
- one capture: wall time under `capture --match train_step --call 3` - plain wall time, against one export of the
  train step plus a copy and write of its arguments, measured in a fresh process on the same model (goal: the
  capture costs no more than that); with the cost the capture itself reported (export, copy, write).

Usage: .venv/bin/python benchmarks/bench_capture.py [--steps 1000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from reprobundle.capture import program_launch, staging  # noqa: E402
from reprobundle.capture.staging import CaptureOptions  # noqa: E402

PROGRAM = ROOT / "examples" / "train_nnx.py"

BASELINE = r"""
import json, os, sys, tempfile, time
import numpy as np
sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2])
import jax, optax
from flax import nnx
import train_nnx as t
from reprobundle.capture.export import export_function

model = t.Block(t.D_MODEL, t.HEADS, rngs=nnx.Rngs(0))
optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
x, y = next(t.batches(jax.random.key(1), 1))
for _ in range(2):
    t.train_step(model, optimizer, x, y)  # compiled and warm, as at call 3 of the program
t0 = time.perf_counter()
exported, leaves = export_function(t.train_step, (model, optimizer, x, y))
t1 = time.perf_counter()
with tempfile.TemporaryDirectory() as d:
    for i, leaf in enumerate(leaves):
        np.array(leaf, copy=True).tofile(os.path.join(d, f"input-{i}.bin"))
    t2 = time.perf_counter()
print(json.dumps({"export_s": t1 - t0, "write_s": t2 - t1, "bytes": int(sum(l.nbytes for l in leaves))}))
"""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


TINY = "import jax, jax.numpy as jnp\nf = jax.jit(lambda x: x + 1)\nfor _ in range(10):\n    f(jnp.ones(3))\n"


def run_child(cmd: list[str], options: CaptureOptions | None) -> tuple[float, float, dict | None, int | None]:
    """Wall and CPU seconds of one run of the program; with options, under the capture hook, what it staged and
    how many jitted calls reached the hook (every other one ran on jax's C++ fast path)."""
    with tempfile.TemporaryDirectory(prefix="bench-capture-") as d:
        env = program_launch.child_environment(options, Path(d)) if options is not None else dict(os.environ)
        cpu0, t0 = _children_cpu(), time.perf_counter()
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
        wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
        staged = [staging.read_staged_summary(p) for p in staging.staged_dirs(Path(d))]
        if options is not None and options.match == "train_step" and len(staged) != 1:
            raise SystemExit(f"expected one capture, got {len(staged)}")
        reports = staging.read_reports(Path(d))
        hook_calls = sum(int(r.get("hook_calls") or 0) for r in reports) if options is not None else None
        return wall, cpu, (staged[0] if staged else None), hook_calls


def fixed_cost(rounds: int) -> tuple[float, float]:
    """Median extra wall and CPU seconds of a minimal jax program under the hook (non-matching): the hook's
    startup, install and exit, alternated with plain runs."""
    cmd = [sys.executable, "-c", TINY]
    options = CaptureOptions(match="no_function_has_this_name")
    walls, cpus = [], []
    for r in range(rounds):
        runs = [(None, run_child(cmd, None)), (options, run_child(cmd, options))]
        if r % 2:
            runs.reverse()
        (_, plain), (_, hooked) = sorted(runs, key=lambda x: x[0] is not None)
        walls.append(hooked[0] - plain[0])
        cpus.append(hooked[1] - plain[1])
    return statistics.median(walls), statistics.median(cpus)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--fixed-rounds", type=int, default=15, help="alternations of the minimal program")
    args = parser.parse_args()

    variants = {
        "plain": None,
        "non-matching": CaptureOptions(match="no_function_has_this_name"),
        "one capture": CaptureOptions(match="train_step", call=3),
    }
    names = list(variants)
    walls: dict[str, list[float]] = {n: [] for n in names}
    cpus: dict[str, list[float]] = {n: [] for n in names}
    reported: list[dict] = []
    hook_calls: dict[str, list[int]] = {n: [] for n in names}
    program = [sys.executable, str(PROGRAM), "--steps", str(args.steps)]
    for r in range(args.rounds):
        order = names[r % 3:] + names[:r % 3]
        for name in order:
            wall, cpu, staged, seen = run_child(program, variants[name])
            walls[name].append(wall)
            cpus[name].append(cpu)
            if seen is not None:
                hook_calls[name].append(seen)
            if staged is not None:
                reported.append(staged["costs"])
        print(f"round {r + 1}: " + ", ".join(f"{n} {walls[n][-1]:.2f} s ({cpus[n][-1]:.2f} s CPU)" for n in names),
              flush=True)

    fixed_wall, fixed_cpu = fixed_cost(args.fixed_rounds)
    out = subprocess.run([sys.executable, "-c", BASELINE, str(ROOT), str(PROGRAM.parent)], check=True,
                         capture_output=True, text=True).stdout
    baseline = json.loads(out.strip().splitlines()[-1])
    ratio = statistics.median(a / b for a, b in zip(walls["non-matching"], walls["plain"]))
    extra = statistics.median(a - b for a, b in zip(walls["one capture"], walls["plain"]))
    own = {k: statistics.median(c.get(k, 0.0) for c in reported) for k in ("export_s", "copy_s", "write_s")}
    cost = baseline["export_s"] + baseline["write_s"]
    cpu_ratio = statistics.median(a / b for a, b in zip(cpus["non-matching"], cpus["plain"]))
    cpu_extra = statistics.median(a - b for a, b in zip(cpus["one capture"], cpus["plain"]))
    print(json.dumps({"steps": args.steps, "rounds": args.rounds, "walls": walls, "cpus": cpus,
                      "hook_calls": hook_calls, "fixed": [fixed_wall, fixed_cpu], "baseline": baseline,
                      "reported": own}))
    print(f"plain run: median {statistics.median(walls['plain']):.2f} s "
          f"(range {min(walls['plain']):.2f}-{max(walls['plain']):.2f} s)")
    print(f"non-matching / plain: {ratio:.3f}  (per round: "
          + ", ".join(f"{a / b:.3f}" for a, b in zip(walls["non-matching"], walls["plain"])) + ")  goal <= 1.02")
    print(f"  in CPU time (user + sys of the program's process): {cpu_ratio:.3f}")
    print(f"  jitted calls that reached the hook in a {args.steps}-step run: "
          f"{sorted(set(hook_calls['non-matching']))} (non-matching), {sorted(set(hook_calls['one capture']))} "
          f"(one capture); every other call ran on jax's C++ fast path")
    print(f"  fixed cost (hook loaded, installed, report written; minimal jax program, {args.fixed_rounds} "
          f"alternations): {fixed_wall * 1e3:+.0f} ms wall, {fixed_cpu * 1e3:+.0f} ms CPU")
    print(f"one capture - plain: {extra:.3f} s, {cpu_extra:.3f} s CPU  (wall per round: "
          + ", ".join(f"{a - b:+.2f}" for a, b in zip(walls["one capture"], walls["plain"])) + ")")
    print(f"  baseline, one export + copy and write of the arguments ({baseline['bytes']} bytes): {cost:.3f} s "
          f"(export {baseline['export_s']:.3f} s, write {baseline['write_s']:.3f} s); "
          f"ratio {extra / cost:.2f} in wall time, {cpu_extra / cost:.2f} in CPU time  goal <= 1.0")
    print(f"  the capture's own account: export {own['export_s']:.3f} s, copy {own['copy_s']:.3f} s, "
          f"write {own['write_s']:.3f} s")


if __name__ == "__main__":
    main()
