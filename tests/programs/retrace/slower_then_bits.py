"""A slowdown at one release and a change of bits at a later one, both real on any machine: a `fori_loop` that rolls
the rows round one at a time, 64 rolls a lap (the input exactly as it was after each lap), runs one lap when a
release before 0.5.0 traces it and 12 from 0.5.0 on (retraced, 0.5.0 takes many times 0.4.38's time); then
colsum.py's column sum, whose float32 last bits change with jaxlib 0.5.1 (the compiler; within the tolerance).
Window 0.4.38..0.5.1 retraced: slower at 0.5.0, bits at 0.5.1 (faster_later.py is the other way round)."""
import jax
import jax.numpy as jnp
import numpy as np


def make():
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    newer = tuple(int(p) for p in jax.__version__.split(".")[:3]) >= (0, 5, 0)
    laps = 12 if newer else 1

    def f(x, scale):
        rolled = jax.lax.fori_loop(0, 64 * laps, lambda i, y: jnp.roll(y, 1, axis=0), x)
        return jax.lax.fori_loop(0, 3, lambda i, acc: acc + jnp.sum(rolled * scale, axis=0),
                                 jnp.zeros(64, jnp.float32))

    return jax.jit(f), (x, jnp.float32(1.7))
