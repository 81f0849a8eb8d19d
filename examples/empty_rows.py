"""Rows built in `jnp.empty` buffers, every other slot filled: a program that relied on `jnp.empty` giving zeros.

From JAX commit c36456a817 (2026-06-24; reverted, re-landed as 11cefe9729 the next day) `jnp.empty` lowers to
`lax.empty`: on a TPU or GPU an uninitialized `AllocateBuffer`, on the CPU still zeros. So on a TPU the unfilled slots
hold whatever the buffer held before (seen on a TPU v5e: values up to 96 where 0.10.2 gave 0), and the CHANGELOG of
0.11.0 says so ("now produce uninitialized arrays"): a change of JAX's lowering, intended, that only a TPU or GPU
shows. The story of `scripts/tpu-check.sh`'s commit bisection.

Pack it:  reprobundle pack examples/empty_rows.py --name empty-rows
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

ROWS, WIDTH = 64, 32


def rows_in_empty_buffers(x, scale):
    def step(carry, row):
        buf = jnp.empty((row.shape[0] * 2,), row.dtype).at[::2].set(jnp.sin(row) * scale + carry)
        return carry + buf.sum() * 1e-3, buf

    total, rows = lax.scan(step, jnp.zeros((), x.dtype), x)
    return rows, total


def make():
    x = np.arange(ROWS * WIDTH, dtype=np.float32).reshape(ROWS, WIDTH) / 100.0
    return jax.jit(rows_in_empty_buffers), (jnp.asarray(x), jnp.float32(100.0))
