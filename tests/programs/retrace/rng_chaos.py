"""Two changes of the outputs at two releases: rng.py's draw, whose numbers change beyond the tolerance when jax 0.5.0
retraces it (threefry became partitionable), and colsum.py's column sum, whose float32 last bits change with jaxlib
0.5.1 (the compiler), carried beyond the tolerance by a logistic map iterated in a `fori_loop` (each step doubles a
difference in the last bits, so after 40 steps the values differ in their first digits). Window 0.4.38..0.5.1: two
changes of one kind, each at its own release."""
import jax
import jax.numpy as jnp
import numpy as np


def make():
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)

    def f(key, x, r):
        noise = jax.random.normal(key, (64,))
        total = jax.lax.fori_loop(0, 3, lambda i, acc: acc + jnp.sum(x * 1.7, axis=0), jnp.zeros(64, jnp.float32))
        u = jax.nn.sigmoid(total / 8.0)
        chaos = jax.lax.fori_loop(0, 40, lambda i, v: r * v * (1.0 - v), u)
        return noise, chaos

    return jax.jit(f), (jax.random.key(0), x, jnp.float32(3.99))
