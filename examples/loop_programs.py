"""Programs with control flow for minimize's and isolate's tests: a `lax.while_loop`, a `lax.scan` with its gradient
and a `lax.cond`, each with a scalar input and one odd spot inside its loop body or branch that computes
differently under two contenders of one release (examples/minimize_chain.py's spots and flags), so the difference is
real on every machine:

- `"bf16"`: outputs beyond float32's tolerance with `--xla_allow_excess_precision=false` (minimize_chain.EXCESS_PRECISION_OFF);
- `"reduce"`: several times slower with `--xla_disable_hlo_passes=algsimp` (minimize_chain.NO_ALGSIMP).

The spot acts on a bounded value (a sine) and its result is added to the running value, so a difference there reaches
the outputs undamped and nothing grows. Around the control flow sit plain float32 ops (what a reduction should
drop).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

SIZE = 1024
STEPS = 6


def spot(kind: str, h):
    """One step's odd spot (minimize_chain.py's, at this program's size)."""
    if kind == "bf16":
        hb = h.astype(jnp.bfloat16)
        return (hb * hb + hb).astype(jnp.float32)
    return h + jnp.broadcast_to(h, (512, h.shape[0])).sum(axis=0) * 1e-3


def _around(h, y):
    """Plain float32 work before and after the control flow."""
    for i in range(3):
        h = h + jnp.sin(y + float(i)) * 0.25
    return h


def while_program(kind: str = "bf16"):
    """(fn, args): a `lax.while_loop` of STEPS steps whose body holds the spot, scaled by a scalar `lr`."""

    def fn(x, y, lr):
        h = _around(x, y)

        def body(carry):
            i, v = carry
            return i + 1, v + spot(kind, jnp.sin(v)) * lr + jnp.cos(y) * 0.1

        _, h = jax.lax.while_loop(lambda c: c[0] < STEPS, body, (0, h))
        return _around(h, y) * 0.5

    return fn, _args()


def scan_program(kind: str = "bf16"):
    """(fn, args): the gradient (and value) of a loss through a `lax.scan` whose step holds the spot."""

    def loss(x, y, lr):
        def step(v, yi):
            v = v + spot(kind, jnp.sin(v)) * lr + jnp.cos(yi) * 0.1
            return v, v.sum()

        h, sums = jax.lax.scan(step, _around(x, y), jnp.stack([y * (k + 1) for k in range(STEPS)]))
        return (h * h).sum() * 1e-3 + sums.sum() * 1e-6

    def fn(x, y, lr):
        value, grad = jax.value_and_grad(loss)(x, y, lr)
        return value, _around(grad, y)

    return fn, _args()


def cond_program(kind: str = "bf16"):
    """(fn, args): a `lax.cond` on a boolean scalar whose taken branch holds the spot."""

    def fn(x, y, lr, flag):
        h = _around(x, y)
        h = jax.lax.cond(flag, lambda v: v + spot(kind, jnp.sin(v)) * lr, lambda v: v - lr, h)
        return _around(h, y)

    x, y, lr = _args()
    return fn, (x, y, lr, np.bool_(True))


def _args():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(SIZE).astype(np.float32)
    y = rng.standard_normal(SIZE).astype(np.float32)
    return x, y, np.float32(0.5)


def make():
    """`reprobundle pack examples/loop_programs.py --name loop`: the while-loop program with its bfloat16 spot."""
    return while_program("bf16")
