"""Programs for minimize's tests and benchmark: a long float32 chain in which one spot computes differently under
two contenders of one release, so the difference is real on every machine.

- `odd="bf16"`: a multiply and an add in bfloat16 between two converts. XLA keeps the intermediate in float32
  (excess precision) unless `--xla_allow_excess_precision=false`, which rounds it: the chain's outputs then differ by
  bfloat16 ulps, far beyond float32's tolerance. Every other op is float32, which the flag leaves alone.
- `odd="rng"`: one `rng_bit_generator`, which XLA:CPU cannot compile with
  `--xla_disable_hlo_passes=rng-bit-generator-expander` (UNIMPLEMENTED: RngBitGenerator should be expanded).
- `odd="reduce"`: the sum of a value broadcast 512 times, which XLA's algebraic simplifier turns into a multiply;
  with `--xla_disable_hlo_passes=algsimp` the 512 rows are made and summed: several times slower.

The chain adds each step to the running value (derivative 1), so a difference at the odd spot reaches the output
undamped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

EXCESS_PRECISION_OFF = "installed:XLA_FLAGS=--xla_allow_excess_precision=false"
NO_RNG_EXPANDER = "installed:XLA_FLAGS=--xla_disable_hlo_passes=rng-bit-generator-expander"
NO_ALGSIMP = "installed:XLA_FLAGS=--xla_disable_hlo_passes=algsimp"


def chain(steps: int, odd: tuple[str, ...] = ("bf16",), nested: tuple[str, ...] = ()):
    """(fn, args): `steps` steps of ~6 StableHLO ops each, with each odd spot of `odd` ("bf16", "rng", "reduce")
    placed evenly along the chain; the spots named in `nested` are a jitted function of their own (a `func.call`
    in the StableHLO)."""
    where = {int(steps * (k + 1) / (len(odd) + 1)): kind for k, kind in enumerate(odd)}

    def spot(kind, h, key):
        if kind == "bf16":
            hb = h.astype(jnp.bfloat16)
            return (hb * hb + hb).astype(jnp.float32)
        if kind == "reduce":
            return h + jnp.broadcast_to(h, (512, h.shape[0])).sum(axis=0) * 1e-3
        _, bits = jax.lax.rng_bit_generator(key, h.shape, dtype=jnp.uint32)
        return h + (bits >> 9).astype(jnp.float32) * 1e-7

    def fn(x, y, key):
        h = x
        for i in range(steps):
            kind = where.get(i)
            if kind is not None:
                h = (jax.jit(spot, static_argnums=0) if kind in nested else spot)(kind, h, key)
            h = h + jnp.sin(y + float(i)) * 0.25
        return h

    rng = np.random.default_rng(0)
    x = rng.standard_normal(4096).astype(np.float32)
    y = rng.standard_normal(4096).astype(np.float32)
    key = np.array([1, 2, 3, 4], np.uint32)
    return fn, (x, y, key)


def make():
    """`reprobundle pack examples/minimize_chain.py --name chain`: 36 steps (~220 ops) with one bfloat16 spot, the
    README's minimize example."""
    return chain(36, ("bf16",))
