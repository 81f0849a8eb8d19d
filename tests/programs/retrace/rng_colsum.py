"""Two changes at two releases, in two layers: rng.py's draw, whose numbers change beyond the tolerance when jax 0.5.0
retraces it (threefry became partitionable; the frozen module computes the same bits on every release), and
colsum.py's column sum, whose float32 last bits change with jaxlib 0.5.1 (the compiler; within the tolerance), in
one program with a `fori_loop` that scales the sum by a scalar step by step."""
import jax
import jax.numpy as jnp
import numpy as np


def make():
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)

    def f(key, x, s):
        noise = jax.random.normal(key, (64,)) * s
        total = jax.lax.fori_loop(0, 3, lambda i, acc: acc + jnp.sum(x * 1.7, axis=0), jnp.zeros(64, jnp.float32))
        return noise, total

    return jax.jit(f), (jax.random.key(0), x, jnp.float32(2.0))
