"""A tiny program for capture tests: three jitted functions of very different cost, called in a loop."""
import sys

import jax
import jax.numpy as jnp


@jax.jit
def cheap(x):
    return x + 1.0


@jax.jit
def medium(a, b):
    return jnp.tanh(a @ b)


def make_heavy(layers: int):
    @jax.jit
    def heavy(w, x):
        def body(h, wi):
            return jnp.tanh(h @ wi), None

        h, _ = jax.lax.scan(body, x, w)
        return h.sum()

    return heavy


def main(steps: int) -> None:
    k = jax.random.key(0)
    # heavy takes ~100x medium's time (~13 ms a call on the 2-core VM): on a loaded machine a few stalled calls of
    # medium must not outweigh it, since `capture --top 1` picks by total time
    w = jax.random.normal(k, (16, 256, 256)) / 16
    x = jnp.ones((512, 256))
    a = jnp.ones((64, 64))
    heavy = make_heavy(16)
    total = 0.0
    for _ in range(steps):
        total += float(cheap(jnp.float32(total))) * 0
        a = medium(a, a)
        total += float(heavy(w, x))
    print(f"total {total:.4f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
