"""Equinox: an `eqx.filter_jit` forward pass and an optax (adam) training step of an MLP module.

Pack them (equinox and optax must be installed where you pack; the bundle needs neither to replay):
  reprobundle pack examples/equinox_mlp.py --name eqx-forward
  reprobundle pack examples/equinox_mlp.py:make_train --name eqx-train

The module's arrays are inputs; its other fields (activation functions, sizes) are static, as eqx.filter_jit
treats them, and are recorded in the bundle as baked-in values.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import optax

IN, OUT, WIDTH, DEPTH, BATCH = 32, 8, 128, 3, 64


@eqx.filter_jit
def forward(model: eqx.nn.MLP, x):
    return jax.vmap(model)(x)


def _setup():
    model = eqx.nn.MLP(IN, OUT, WIDTH, DEPTH, activation=jax.nn.gelu, key=jax.random.PRNGKey(0))
    kx, ky = jax.random.split(jax.random.PRNGKey(1))
    return model, jax.random.normal(kx, (BATCH, IN)), jax.random.normal(ky, (BATCH, OUT))


def make():
    model, x, _ = _setup()
    return forward, (model, x)


OPTIMIZER = optax.adam(1e-3)


@eqx.filter_jit
def train_step(model, opt_state, x, y):
    def loss(m):
        return jnp.mean((jax.vmap(m)(x) - y) ** 2)

    value, grads = eqx.filter_value_and_grad(loss)(model)
    updates, opt_state = OPTIMIZER.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return eqx.apply_updates(model, updates), opt_state, value


def make_train():
    model, x, y = _setup()
    opt_state = OPTIMIZER.init(eqx.filter(model, eqx.is_array))
    return train_step, (model, opt_state, x, y)
