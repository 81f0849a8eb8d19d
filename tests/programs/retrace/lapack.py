"""A program calling jaxlib's LAPACK kernels (cholesky, triangular solves), whose custom-call names changed between
releases: a module lowered by one release may name kernels another lacks; the program traced there does not."""
import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np


def solve(a, b):
    c = jnp.linalg.cholesky(a)
    return jsl.cho_solve((c, True), b)


def make():
    rng = np.random.default_rng(0)
    m = rng.standard_normal((16, 16)).astype(np.float32)
    a = m @ m.T + 16 * np.eye(16, dtype=np.float32)
    b = rng.standard_normal((16, 4)).astype(np.float32)
    return jax.jit(solve), (a, b)
