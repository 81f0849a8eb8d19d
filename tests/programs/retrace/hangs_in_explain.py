"""A program that hangs on one release, and only where a step after the bisection runs it there: jax.random.normal of
a typed key (its numbers change at jax 0.5.0, when threefry became partitionable by default: JAX's lowering), then a
`while_loop` that doubles a counter until it equals a bound read when the program is traced. Where jax 0.5.0 traces
it with XLA's per-pass dump on (explain's evidence: XLA_FLAGS holds --xla_dump_hlo_pass_re), the bound is 7, which a
doubling counter never equals: the loop never ends and the worker hangs in 'execute'. Everywhere else it is 64: six
laps."""
import os

import jax
import jax.numpy as jnp


def make():
    dumped = "xla_dump_hlo_pass_re" in os.environ.get("XLA_FLAGS", "")
    bound = 7 if dumped and jax.__version__ == "0.5.0" else 64

    def f(key, scale):
        x = jax.random.normal(key, (64,)) * scale

        def body(state):
            count, y = state
            return count * 2, jnp.tanh(y) * scale

        return jax.lax.while_loop(lambda state: state[0] != bound, body, (jnp.int32(1), x))[1]

    return jax.jit(f), (jax.random.key(0), jnp.float32(2.0))
