"""A change of last bits that comes and goes, real on any machine: a running sum with a workaround gated on the JAX
release, as programs carry them. On 0.4.34 and 0.4.35 it adds the rows with `lax.associative_scan` (another order of
additions) instead of `jnp.cumsum`; the float32 sums' last bits differ there (within the tolerance) and are 0.4.33's
again from 0.4.36. Then a `lax.scan` of a few decay steps over the sums and a `lax.cond` on their sign. Window
0.4.33..0.4.36 retraced: bits at 0.4.34, undone at 0.4.36; the endpoints agree bit for bit, so only every release
run once shows it."""
import jax
import jax.numpy as jnp
import numpy as np


def make():
    x = np.random.default_rng(0).standard_normal((256, 32)).astype(np.float32)
    gated = jax.__version__ in ("0.4.34", "0.4.35")

    def f(x, decay):
        sums = jax.lax.associative_scan(jnp.add, x, axis=0) if gated else jnp.cumsum(x, axis=0)

        def step(carry, row):
            carry = decay * carry + row
            return carry, carry

        last, _ = jax.lax.scan(step, jnp.zeros(x.shape[1], jnp.float32), sums)
        return jax.lax.cond(jnp.sum(last) > 0, lambda v: v, lambda v: -v, last)

    return jax.jit(f), (x, jnp.float32(0.9))
