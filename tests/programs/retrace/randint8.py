"""jax.random.randint with an int8 dtype, drawn in a loop: jax 0.7.2 turned `jax_safer_randint` on by default (commit
a7b01146f2 in JAX's history), so the same key draws other int8 numbers than on 0.7.1."""
import jax
import jax.numpy as jnp


def make():
    def f(key, scale):
        def body(i, acc):
            draw = jax.random.randint(jax.random.fold_in(key, i), (32,), -100, 100, dtype=jnp.int8)
            return acc + draw.astype(jnp.int32) * scale

        return jax.lax.fori_loop(0, 4, body, jnp.zeros((32,), jnp.int32))

    return jax.jit(f), (jax.random.key(0), jnp.int32(2))
