"""A program that is much faster on a later release, with bits that differ: colsum.py's column sum (its float32
bits change with jaxlib 0.5.1, within the tolerance: the same StableHLO, the compiler), after a `fori_loop` that rolls
the rows round one at a time, 64 rolls a lap (the input exactly as it was after each lap). Traced by a release before
0.5.1 the loop runs 40 laps, from 0.5.1 on one: retraced, 0.5.1 runs about a tenth of 0.5.0's time on any machine.
A speedup, never a regression; the bits are the change to report."""
import jax
import jax.numpy as jnp
import numpy as np


def make():
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    older = tuple(int(p) for p in jax.__version__.split(".")[:3]) < (0, 5, 1)
    laps = 40 if older else 1

    def f(x, scale):
        rolled = jax.lax.fori_loop(0, 64 * laps, lambda i, y: jnp.roll(y, 1, axis=0), x)
        return jnp.sum(rolled * scale, axis=0)

    return jax.jit(f), (x, jnp.float32(1.7))
