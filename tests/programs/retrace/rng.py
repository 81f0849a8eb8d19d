"""A program whose numbers depend on the release that traces it: threefry became partitionable by default in
jax 0.5.0, so jax.random.normal of the same typed key gives other numbers on 0.4.x."""
import jax
import jax.numpy as jnp


def make():
    f = jax.jit(lambda key, s: jax.random.normal(key, (64,)) * s)
    return f, (jax.random.key(0), jnp.float32(2.0))


if __name__ == "__main__":  # the cross-check: the program run directly, printing its output's bytes
    import numpy as np

    fn, args = make()
    print(np.asarray(fn(*args)).tobytes().hex())
