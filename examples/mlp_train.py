"""One SGD training step of a small MLP whose parameters are a nested pytree (a dict holding a list of dicts).

Pack it:  reprobundle pack examples/mlp_train.py --name mlp-train
"""

import jax
import jax.numpy as jnp
import numpy as np

SIZES = (64, 128, 128, 10)


def init_params(rng):
    layers = []
    for fan_in, fan_out in zip(SIZES[:-1], SIZES[1:]):
        layers.append({"w": jnp.asarray(rng.standard_normal((fan_in, fan_out), dtype=np.float32) / np.sqrt(fan_in)),
                       "b": jnp.zeros((fan_out,), jnp.float32)})
    return {"layers": layers, "step": jnp.zeros((), jnp.int32)}


def loss_fn(layers, batch):
    h = batch["x"]
    for i, layer in enumerate(layers):
        h = h @ layer["w"] + layer["b"]
        if i < len(layers) - 1:
            h = jax.nn.relu(h)
    logp = jax.nn.log_softmax(h)
    return -jnp.mean(jnp.take_along_axis(logp, batch["y"][:, None], axis=1))


def train_step(params, batch, lr):
    loss, grads = jax.value_and_grad(loss_fn)(params["layers"], batch)
    new_layers = jax.tree_util.tree_map(lambda p, g: p - lr * g, params["layers"], grads)
    return {"layers": new_layers, "step": params["step"] + 1}, loss


def make():
    rng = np.random.default_rng(0)
    params = init_params(rng)
    batch = {"x": jnp.asarray(rng.standard_normal((32, SIZES[0]), dtype=np.float32)),
             "y": jnp.asarray(rng.integers(0, SIZES[-1], size=(32,), dtype=np.int32))}
    return jax.jit(train_step), (params, batch, jnp.float32(0.01))
