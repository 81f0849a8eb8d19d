"""Regenerate the profiler-trace fixtures: run with the Python of each JAX release, from the repository root.

    for v in 0.7.2 0.8.0; do ~/.cache/reprobundle/envs/jax-$v-py3.11/bin/python tests/data/traces/make_traces.py; done
    .venv/bin/python tests/data/traces/make_traces.py      # jax 0.10.2

Each run compiles examples/attention.py:make, makes 3 untimed calls, then traces 3 calls with jax.profiler and
writes, for its JAX version V:
- attention-V.hlo: the compiled module's optimized HLO (`compiled.as_text()`);
- attention-V.trace.json.gz: the perfetto trace, trimmed to what worker/trace.py reads (the op events carrying
  args.hlo_op, the "end: NAME" markers, the "ThunkExecutor::Execute" scopes, process/thread names) and the
  calls' own events (PjitFunction), which frame each call;
- attention-V.json: {"iterations", "traced_wall_ns" (the 3 traced calls, perf_counter), "cpu_model", "cpu_count"}.
"""
import glob
import gzip
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "..", "examples"))
KEEP = ("end: ", "ThunkExecutor::Execute", "PjitFunction")


def main():
    import jax
    from attention import make

    fn, args = make()
    args = jax.device_put(args)
    compiled = jax.jit(fn).lower(*args).compile()
    for _ in range(3):
        jax.block_until_ready(compiled(*args))
    iters = 3
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter_ns()
        with jax.profiler.trace(tmp, create_perfetto_trace=True):
            for _ in range(iters):
                jax.block_until_ready(compiled(*args))
        wall = time.perf_counter_ns() - t0
        path = sorted(glob.glob(os.path.join(tmp, "**", "perfetto_trace.json.gz"), recursive=True))[-1]
        with gzip.open(path, "rt") as fh:
            trace = json.load(fh)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    kept = [e for e in events if isinstance(e, dict) and (
        e.get("ph") == "M" or (isinstance(e.get("args"), dict) and "hlo_op" in e["args"])
        or str(e.get("name", "")).startswith(KEEP))]
    v = jax.__version__
    with gzip.open(os.path.join(HERE, "attention-%s.trace.json.gz" % v), "wt") as fh:
        json.dump({"traceEvents": kept}, fh)
    with open(os.path.join(HERE, "attention-%s.hlo" % v), "w") as fh:
        fh.write(compiled.as_text())
    model = ""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with open(os.path.join(HERE, "attention-%s.json" % v), "w") as fh:
        json.dump({"iterations": iters, "traced_wall_ns": wall, "cpu_model": model, "cpu_count": os.cpu_count()},
                  fh, indent=1)
    print(v, len(kept), "events kept of", len(events), "traced wall per call %.1f ms" % (wall / iters / 1e6))


if __name__ == "__main__":
    main()
