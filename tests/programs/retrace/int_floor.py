"""jnp.floor of an integer array, in a loop: jax 0.4.30 lowers the floor of an int32 array to a convert to float, a
floor and a convert back; jax 0.4.31 returns integers unchanged (no floor in its StableHLO). Large values show it in
the outputs: float32 cannot hold every int32, so 0.4.30's round trip changes the numbers and 0.4.31's does not."""
import jax
import jax.numpy as jnp
import numpy as np


def make():
    def step(i, acc):
        return acc + jnp.floor(acc // 3 + i).astype(jnp.int32)

    def f(x, n):
        total = jax.lax.fori_loop(0, 3, step, x)
        return jnp.where(n > 0, total, -total)

    x = (np.arange(64, dtype=np.int32) * 33_554_467 + 16_777_217) % 2_000_000_000
    return jax.jit(f), (x.astype(np.int32), np.int32(1))
