"""A slowdown at one release and JAX's lowering of `jnp.arccos` changing its last bits at a later one, both real on
any machine: a `fori_loop` that rolls the rows round one at a time, 64 rolls a lap (the input exactly as it was after
each lap), runs one lap when a release before 0.4.35 traces it and 12 from 0.4.35 on (retraced, 0.4.35 takes many
times 0.4.34's time); then `jnp.arccos` of the rows, summed down the columns in a `lax.scan`: jax 0.4.36 lowers
arccos to `chlo.acos` where 0.4.35 wrote it as 2 * atan2(sqrt(1 - x^2), 1 + x), and the angles' last bits change
(JAX's lowering; within the tolerance). Window 0.4.34..0.4.36 retraced: slower at 0.4.35, bits at 0.4.36."""
import jax
import jax.numpy as jnp
import numpy as np


def make():
    x = np.random.default_rng(0).uniform(-0.99, 0.99, (64, 64)).astype(np.float32)
    newer = tuple(int(p) for p in jax.__version__.split(".")[:3]) >= (0, 4, 35)
    laps = 12 if newer else 1

    def f(x, scale):
        rolled = jax.lax.fori_loop(0, 64 * laps, lambda i, y: jnp.roll(y, 1, axis=0), x)
        angles = jnp.arccos(rolled * scale)
        total, _ = jax.lax.scan(lambda acc, row: (acc + row, None), jnp.zeros(64, jnp.float32), angles)
        return total

    return jax.jit(f), (x, jnp.float32(1.0))
