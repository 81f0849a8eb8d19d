"""A column sum whose float32 outputs depend on the XLA that compiles it, in the last bits only: the same StableHLO
compiled by jaxlib 0.5.0 and 0.5.1 gives sums that differ by a few ulps (within the replay's tolerance), while
0.4.37, 0.4.38 and 0.5.0 agree bit for bit, and every one of them lowers the program to the same StableHLO."""
import jax
import jax.numpy as jnp
import numpy as np


def make():
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    return jax.jit(lambda x: jnp.sum(x * 1.7, axis=0)), (x,)
