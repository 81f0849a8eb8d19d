"""Runs a jitted step a few times, then fails the way real programs do: an uncaught exception (exit code 1)."""
import jax
import jax.numpy as jnp


@jax.jit
def update(x):
    return jnp.sin(x) * 2.0


x = jnp.arange(16.0)
for _ in range(3):
    x = update(x)
raise RuntimeError("the data loader ran dry after step 3")
