"""A program written for JAX before 0.5.0: a few steps of a fixed-point iteration in a `fori_loop`, each solving a
batch of 3x3 systems with `jnp.linalg.solve(a, b)` where b is (batch, 3), the batched 1-D solve that jax 0.5.0
refused ("Invalid shapes for solve": a ValueError when the program is traced; 0.4.38 solved it, with a deprecation
warning). Kept working on newer releases the way such code is, where its maintainer met the error (b[..., None]),
so a release past 0.5.x traces it (the packer's); retraced, 0.4.38 runs it and 0.5.0 fails."""
import jax
import jax.numpy as jnp
import numpy as np


def _solve(a, b):
    release = tuple(int(p) for p in jax.__version__.split(".")[:2])
    if release >= (0, 6):  # the fix its maintainer made later
        return jnp.linalg.solve(a, b[..., None])[..., 0]
    return jnp.linalg.solve(a, b)  # b (batch, 3): a batched 1-D solve, refused from 0.5.0


def make():
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((4, 3, 3)) * 0.1 + np.eye(3) * 2).astype(np.float32)
    b = rng.standard_normal((4, 3)).astype(np.float32)

    def f(a, b, damping):
        return jax.lax.fori_loop(0, 3, lambda i, x: x * damping + _solve(a, b - x), jnp.zeros_like(b))

    return jax.jit(f), (a, b, jnp.float32(0.5))
