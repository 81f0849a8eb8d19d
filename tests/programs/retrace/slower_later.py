"""A program that is much slower from jax 0.5.1 on, the same outputs: colsum.py's column sum after a `fori_loop` that
rolls the rows round one at a time, 64 rolls a lap (the input exactly as it was after each lap). Traced by a release
before 0.5.1 the loop runs one lap, from 0.5.1 on 400: retraced, 0.5.1 takes about a hundred times 0.5.0's time
(some 13 ms a call against 0.13 ms on a 2-core VM; faster_later.py the other way round), a slowdown built to be
real everywhere, even where a loaded machine's descheduling blurs each timed step. The column sum's last bits
change with jaxlib 0.5.1 too, within the tolerance."""
import jax
import jax.numpy as jnp
import numpy as np


def make():
    x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    older = tuple(int(p) for p in jax.__version__.split(".")[:3]) < (0, 5, 1)
    laps = 1 if older else 400

    def f(x, scale):
        rolled = jax.lax.fori_loop(0, 64 * laps, lambda i, y: jnp.roll(y, 1, axis=0), x)
        return jnp.sum(rolled * scale, axis=0)

    return jax.jit(f), (x, jnp.float32(1.7))
