"""minimize --outputs on 250, 500 and 1,000-op programs: wall time and candidates tested; and candidates per second
with the long-lived module workers against a fresh worker process per candidate, measured in the same run.

The programs are examples/minimize_chain.py's float32 chain with one bfloat16 spot, the contenders the
installed jax with and without --xla_allow_excess_precision=false (a difference real on every machine).

    .venv/bin/python benchmarks/bench_minimize.py [--sizes 250,500,1000] [--baseline-candidates 6]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

import jax  # noqa: E402
import minimize_chain  # noqa: E402

import reprobundle  # noqa: E402
from reprobundle.bundle.registry import Registry  # noqa: E402
from reprobundle.capture.export import function_ops  # noqa: E402
from reprobundle.investigate.minimize.fed_values import all_values_cut  # noqa: E402
from reprobundle.investigate.minimize.hlo_cut import bundle_inputs, graph_of  # noqa: E402
from reprobundle.investigate.minimize.reduction import OUTPUTS, Property, candidate  # noqa: E402
from reprobundle.run.contenders import ContenderSpec, parse_variant  # noqa: E402
from reprobundle.run.module_server import ModuleWorker  # noqa: E402

OPS_PER_STEP = 6.1  # the chain's StableHLO ops per step, about


def pack_chain(store: str, ops: int) -> str:
    fn, args = minimize_chain.chain(max(4, round(ops / OPS_PER_STEP)), ("bf16",))
    ref = reprobundle.pack(jax.jit(fn), *args, name=f"chain{ops}", store=store, warmup=1, repeat=2, dump=False,
                           profile=False)
    return f"{ref.name}@{ref.version}"


def candidates_per_second(store: str, ref: str, specs: list[ContenderSpec], count: int) -> dict:
    """The same `count` candidates (slices of the function) judged with one worker per contender kept up, and with
    fresh workers per candidate (the way a replay starts processes)."""
    registry = Registry.open(store)
    bundle = registry.resolve(ref)
    text = registry.get_blob(bundle.manifest["function"]["stablehlo_text"]).decode()
    kept = bundle.manifest["function"]["fields"].get("module_kept_var_idx")
    inputs = bundle_inputs(registry, bundle)
    inputs = [inputs[i] for i in kept] if kept is not None else inputs
    graph = graph_of(function_ops(text), "minimize")
    values = dict(zip(graph.args, inputs))
    prop = Property(OUTPUTS)
    with ModuleWorker(specs[0]) as a, ModuleWorker(specs[1]) as b:
        whole = all_values_cut(graph)
        assert whole is not None
        outcome = a.run(whole.text, [values[v] for v in whole.inputs])
        values.update(zip(whole.outputs, outcome.outputs))
        work = graph.work
        step = max(1, len(work) // count)
        cands = [candidate(work[k * step:(k + 1) * step], graph, values) for k in range(count)]
        cands = [c for c in cands if c is not None]
        t0 = time.perf_counter()
        for c in cands:
            prop.judge(a, b, c.cut.text, c.inputs)
        kept_up = time.perf_counter() - t0
    t0 = time.perf_counter()
    for c in cands:
        with ModuleWorker(specs[0]) as a, ModuleWorker(specs[1]) as b:
            prop.judge(a, b, c.cut.text, c.inputs)
    fresh = time.perf_counter() - t0
    return {"candidates": len(cands), "long_lived_per_s": round(len(cands) / kept_up, 2),
            "fresh_process_per_s": round(len(cands) / fresh, 2), "speedup": round(fresh / kept_up, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="250,500,1000")
    parser.add_argument("--baseline-candidates", type=int, default=6)
    args = parser.parse_args()
    specs = [ContenderSpec("installed"), parse_variant(minimize_chain.EXCESS_PRECISION_OFF)]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-minimize-") as tmp:
        for ops in (int(x) for x in args.sizes.split(",")):
            ref = pack_chain(tmp, ops)
            load = os.getloadavg()[0]
            t0 = time.perf_counter()
            result = reprobundle.api.minimize(ref, ["installed"], variants=[minimize_chain.EXCESS_PRECISION_OFF],
                                              prop="outputs", store=tmp, check=False)
            wall = time.perf_counter() - t0
            row = {"ops": result.ops_before, "ops_after": result.ops_after, "candidates_tested": result.tested,
                   "wall_s": round(wall, 1), "search_s": round(result.elapsed_s, 1), "load_before": round(load, 2),
                   **candidates_per_second(tmp, ref, specs, args.baseline_candidates)}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print(json.dumps({"cpus": os.cpu_count(), "load_after": round(os.getloadavg()[0], 2), "rows": rows}, indent=2))


if __name__ == "__main__":
    main()
