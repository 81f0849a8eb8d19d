"""Regenerate the real-HLO fixtures in this folder with whatever JAX runs this script.

    /tmp/v-0.7.2/bin/python tests/data/hlo/make_fixtures.py      (run from the repository root; once per version)

Writes, for the installed jax version V:
  attention-V.hlo                optimized HLO of examples/attention.py:make (jit(...).lower(...).compile().as_text())
  attention-V.per_op.json        per-op table from a jax.profiler trace of 10 calls, reduced by the worker's own
                                 per_op_from_trace (so its rows are what a replay's run record holds: name, kind,
                                 time_ns, count, total_count, op_name), plus the wall time of 30 timed calls:
                                 {"samples_ns": [...], "per_op": [...]}
  control-V.hlo                  fori_loop (while) + lax.cond (conditional) + a tuple output, on 16x16 float32
  async-V.hlo                    XLA:CPU emits no async ops, so this one is ASYNC_SOURCE below (hand-written) parsed
                                 and printed back by XLA's own HLO parser/printer (jaxlib's hlo_module_from_text):
                                 the syntax of *-start/*-done pairs as XLA prints it (async-start of a fusion prints
                                 as fusion-start). Not compiled.
"""

import glob
import importlib.util
import json
import os
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
from jax import lax

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
os.chdir(ROOT)
sys.path.insert(0, "examples")
import attention  # noqa: E402


def worker_trace():
    """The worker's trace module, loaded from its folder the way replay environments load it (the package
    `reprobundle_worker`, without the host package, which these JAX environments do not have)."""
    folder = os.path.join(ROOT, "reprobundle", "worker")
    spec = importlib.util.spec_from_file_location("reprobundle_worker", os.path.join(folder, "__init__.py"),
                                                  submodule_search_locations=[folder])
    package = importlib.util.module_from_spec(spec)
    sys.modules["reprobundle_worker"] = package
    spec.loader.exec_module(package)
    return importlib.import_module("reprobundle_worker.trace")


def control(p, x):
    def body(i, c):
        return jnp.tanh(c @ c.T) * 0.5 + c

    y = lax.fori_loop(0, 3, body, x)
    z = lax.cond(p > 0, lambda t: jnp.sin(t).T @ t, lambda t: jnp.exp(t) @ t.T, y)
    return z.sum(0), jnp.cumsum(z * 2, axis=1)


ASYNC_SOURCE = """HloModule async_sample

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%fused_tanh_mul (p0: f32[8,8]) -> f32[8,8] {
  %p0 = f32[8,8]{1,0} parameter(0)
  %t = f32[8,8]{1,0} tanh(%p0)
  ROOT %m = f32[8,8]{1,0} multiply(%t, %t)
}

%async_wrapped (p: f32[8,8]) -> f32[8,8] {
  %p = f32[8,8]{1,0} parameter(0)
  ROOT %f = f32[8,8]{1,0} fusion(%p), kind=kLoop, calls=%fused_tanh_mul
}

ENTRY %main (x: f32[8,8], y: f32[8,8]) -> (f32[8,8], f32[8,8], f32[8,8]) {
  %x = f32[8,8]{1,0} parameter(0)
  %y = f32[8,8]{1,0} parameter(1)
  %ars = f32[8,8]{1,0} all-reduce-start(%x), replica_groups={}, to_apply=%add
  %ard = f32[8,8]{1,0} all-reduce-done(%ars)
  %cs = (f32[8,8]{1,0}, f32[8,8]{1,0}, u32[]) copy-start(%y)
  %cd = f32[8,8]{1,0} copy-done(%cs)
  %as = ((f32[8,8]{1,0}), f32[8,8]{1,0}, s32[]) async-start(%x), calls=%async_wrapped
  %ad = f32[8,8]{1,0} async-done(%as)
  ROOT %r = (f32[8,8]{1,0}, f32[8,8]{1,0}, f32[8,8]{1,0}) tuple(%ard, %cd, %ad)
}
"""


def xla_printed(text):
    """`text` through XLA's HLO parser and printer, or None when this jaxlib does not expose them."""
    try:
        from jax._src.lib import _jax as ext
    except ImportError:
        from jax._src.lib import xla_extension as ext
    parse = getattr(ext, "hlo_module_from_text", None)
    return parse(text).to_string() if parse else None


def per_op_table(compiled, args, iters=10):
    """The rows a replay's profile would record (worker/trace.py: per_op_from_trace on the trace and the HLO)."""
    with tempfile.TemporaryDirectory() as d:
        with jax.profiler.trace(d, create_perfetto_trace=True):
            for _ in range(iters):
                jax.block_until_ready(compiled(*args))
        trace = glob.glob(os.path.join(d, "**", "perfetto_trace.json.gz"), recursive=True)[0]
        rows, _note, _module = worker_trace().per_op_from_trace(trace, compiled.as_text(), iters)
    return rows


def main():
    v = jax.__version__
    fn, args = attention.make()
    compiled = jax.jit(attention.attention).lower(*args).compile()
    with open(os.path.join(HERE, f"attention-{v}.hlo"), "w") as f:
        f.write(compiled.as_text())
    for _ in range(5):
        jax.block_until_ready(compiled(*args))
    samples = []
    for _ in range(30):
        t0 = time.perf_counter_ns()
        jax.block_until_ready(compiled(*args))
        samples.append(time.perf_counter_ns() - t0)
    rows = ",\n  ".join(json.dumps(r) for r in per_op_table(compiled, args))
    with open(os.path.join(HERE, f"attention-{v}.per_op.json"), "w") as f:
        f.write(f'{{"samples_ns": {json.dumps(samples)},\n "per_op": [\n  {rows}]}}\n')
    x = jnp.ones((16, 16), jnp.float32)
    with open(os.path.join(HERE, f"control-{v}.hlo"), "w") as f:
        f.write(jax.jit(control).lower(jnp.float32(1), x).compile().as_text())
    printed = xla_printed(ASYNC_SOURCE)
    if printed:
        with open(os.path.join(HERE, f"async-{v}.hlo"), "w") as f:
            f.write(printed)


if __name__ == "__main__":
    main()
