"""A Flax NNX training step (optax adamw) over a small transformer block, in the two ways NNX code is written.

Pack them (flax and optax must be installed where you pack; the bundle needs neither to replay):
  reprobundle pack examples/flax_nnx_train.py --name nnx-train            # nnx.jit, model and optimizer updated in place
  reprobundle pack examples/flax_nnx_train.py:make_functional --name nnx-train-split   # nnx.split + jax.jit

The exported function takes the model's and the optimizer's arrays as inputs; the state nnx.jit updates in place
becomes outputs named `updated model...` and `updated optimizer...`, so the replay runs the whole update.
"""

import jax
import jax.numpy as jnp
import optax
from flax import nnx

D_MODEL, HEADS, SEQ, BATCH = 64, 4, 32, 8


class Block(nnx.Module):
    """Pre-norm transformer block: self-attention then an MLP, both residual."""

    def __init__(self, d: int, heads: int, *, rngs: nnx.Rngs):
        self.norm1 = nnx.LayerNorm(d, rngs=rngs)
        # No attention biases: the key bias has a zero gradient (softmax ignores it), and Adam's first step turns
        # that gradient's rounding noise into +-lr updates that differ from one XLA release to the next.
        self.attn = nnx.MultiHeadAttention(num_heads=heads, in_features=d, decode=False, use_bias=False, rngs=rngs)
        self.norm2 = nnx.LayerNorm(d, rngs=rngs)
        self.up = nnx.Linear(d, 4 * d, rngs=rngs)
        self.down = nnx.Linear(4 * d, d, rngs=rngs)

    def __call__(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.down(jax.nn.gelu(self.up(self.norm2(x))))


def loss_fn(model: Block, x, y):
    return jnp.mean((model(x) - y) ** 2)


@nnx.jit
def train_step(model: Block, optimizer: nnx.Optimizer, x, y):
    loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
    optimizer.update(model, grads)
    return loss


def _setup():
    model = Block(D_MODEL, HEADS, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    kx, ky = jax.random.split(jax.random.key(1))
    x = jax.random.normal(kx, (BATCH, SEQ, D_MODEL))
    y = jax.random.normal(ky, (BATCH, SEQ, D_MODEL))
    return model, optimizer, x, y


def make():
    model, optimizer, x, y = _setup()
    return train_step, (model, optimizer, x, y)


def make_functional():
    """The same step written functionally: nnx.split once, jax.jit over the (graphdef, state) pair."""
    model, optimizer, x, y = _setup()
    graphdef, state = nnx.split((model, optimizer))

    @jax.jit
    def step(state, x, y):
        model, optimizer = nnx.merge(graphdef, state)
        loss, grads = nnx.value_and_grad(loss_fn)(model, x, y)
        optimizer.update(model, grads)
        return loss, nnx.state((model, optimizer))

    return step, (state, x, y)
