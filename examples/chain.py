"""n chained `tanh(x @ w)` layers: a difference of work built to be real on any machine (11 layers do 10% more
work than 10, whatever the CPU, release or load), for checking verdicts against a known answer.

Pack it:  reprobundle pack examples/chain.py --name chain10              (10 layers of 128x256 @ 256x256)
          reprobundle pack examples/chain.py:make_11 --name chain11      (the same with 11: ~10% slower)
"""

import jax
import jax.numpy as jnp
import numpy as np


def chain(n: int, rows: int = 128, width: int = 256, seed: int = 0):
    """(jitted fn, (x, w)): `n` layers of tanh(x @ w) on x[rows, width], w[width, width] scaled to keep tanh
    away from saturation."""

    def f(x, w):
        for _ in range(n):
            x = jnp.tanh(x @ w)
        return x

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, width), dtype=np.float32)
    w = rng.standard_normal((width, width), dtype=np.float32) / np.float32(width ** 0.5)
    return jax.jit(f), (x, w)


def make():
    return chain(10)


def make_11():
    return chain(11)
