"""The slowdown JAX users report most on the CPU: a training loop of many tiny steps. A `fori_loop` of 2000 SGD
steps on a 4-parameter model with a scalar learning rate, then a `scan` over a short batch of losses. From jaxlib
0.4.33 on, the CPU's thunk runtime (`--xla_cpu_use_thunk_runtime`, true by default there) runs such loops several
times slower than 0.4.31 did; `explain` names that default and the line that gives the old speed back.

Pack it:  reprobundle pack examples/train_loop.py --name train-loop
"""

import jax
import jax.numpy as jnp
import numpy as np

STEPS = 2000


def train(w, xs, ys, lr):
    def step(i, w):
        x, y = xs[i % xs.shape[0]], ys[i % ys.shape[0]]
        grad = 2 * (x @ w - y) * x
        return w - lr * grad

    w = jax.lax.fori_loop(0, STEPS, step, w)

    def loss(total, xy):
        x, y = xy
        err = x @ w - y
        return total + err * err, err

    total, errs = jax.lax.scan(loss, jnp.float32(0), (xs, ys))
    return w, total / xs.shape[0], errs


def make():
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((8, 4)).astype(np.float32)
    ys = (xs @ np.array([1.0, -2.0, 0.5, 3.0], np.float32)).astype(np.float32)
    return jax.jit(train), (np.zeros(4, np.float32), xs, ys, np.float32(0.01))
