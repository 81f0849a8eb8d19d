"""A training step as users write one, over 2.5 MB of float32 inputs made from a seed: a `lax.scan` over
micro-batches, each a forward pass with dropout drawn from a typed key, its loss and gradients, an SGD update with a
scalar learning rate. threefry became partitionable by default in jax 0.5.0, so the dropout masks, and with them
every updated weight, differ from jax 0.4.x's for the same key (a change in JAX's lowering). Written inline, its
inputs and outputs would make a script of megabytes."""
import jax
import jax.numpy as jnp
import numpy as np

WIDTH, BATCH, STEPS = 512, 64, 4


def train_step(params, batch, key, lr):
    def loss(p, x, k):
        h = jnp.tanh(x @ p["w1"])
        keep = jax.random.bernoulli(k, 0.9, h.shape)
        h = jnp.where(keep, h / 0.9, 0.0)
        return jnp.mean((h @ p["w2"] - x) ** 2)

    def step(carry, x):
        p, k = carry
        k, sub = jax.random.split(k)
        value, grads = jax.value_and_grad(loss)(p, x, sub)
        return (jax.tree_util.tree_map(lambda w, g: w - lr * g, p, grads), k), value

    (params, _), losses = jax.lax.scan(step, (params, key), batch)
    return params, losses


def make():
    rng = np.random.default_rng(0)
    params = {"w1": (rng.standard_normal((WIDTH, WIDTH)) * 0.05).astype(np.float32),
              "w2": (rng.standard_normal((WIDTH, WIDTH)) * 0.05).astype(np.float32)}
    batch = rng.standard_normal((STEPS, BATCH, WIDTH)).astype(np.float32)
    return jax.jit(train_step), (params, batch, jax.random.key(0), jnp.float32(0.5))
