"""A factory that works when packed and fails when a retrace's worker imports it (the worker loads the script as
the module `_reprobundle_program`): what a factory failing on another release looks like."""
import jax
import jax.numpy as jnp


def build(n):
    if __name__ == "_reprobundle_program":
        raise RuntimeError("this factory refuses to run here")
    return jnp.ones((n,), jnp.float32)


def make():
    return jax.jit(lambda x: x * 2), (build(8),)
