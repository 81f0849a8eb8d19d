"""A one-block transformer (layernorm, one-head causal attention, an MLP with exact GELU) trained by SGD for a few
steps in a `lax.scan`: the loss, `jax.grad` through the block and the update in the scan's body, the mean loss out
as a scalar. Small sizes (a sequence of 8 tokens of width 16): it compiles in a second. The CPU thunk runtime (jaxlib
0.4.33's default) computes its float32 reductions and dots in another order than 0.4.31's compiler did, so the
frozen module's outputs differ from 0.4.31's in their last bits on 0.4.33 (the compiler's change: both lower the
program to the same StableHLO)."""
import jax
import jax.numpy as jnp
import numpy as np

SEQ, WIDTH, HIDDEN, STEPS = 8, 16, 32, 4


def _layernorm(x, scale, bias):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * scale + bias


def _block(p, x):
    """Pre-norm: x + attention(layernorm(x)), then + mlp(layernorm(x)), one layernorm's parameters for both."""
    q, k, v = jnp.split(_layernorm(x, p["ln_s"], p["ln_b"]) @ p["wqkv"], 3, axis=-1)
    mask = jnp.tril(jnp.ones((SEQ, SEQ), bool))
    logits = jnp.where(mask, q @ k.T / np.float32(np.sqrt(WIDTH)), -1e9)
    x = x + jax.nn.softmax(logits, axis=-1) @ v @ p["wo"]
    h = jax.nn.gelu(_layernorm(x, p["ln_s"], p["ln_b"]) @ p["w1"], approximate=False)
    return x + h @ p["w2"]


def _loss(p, x, y):
    return jnp.mean((_block(p, x) - y) ** 2)


def train(params, xs, ys, lr):
    """SGD over the batches of xs and ys, one step each: the trained parameters and the mean loss."""
    def step(p, batch):
        loss, g = jax.value_and_grad(_loss)(p, *batch)
        return jax.tree_util.tree_map(lambda p, g: p - lr * g, p, g), loss

    params, losses = jax.lax.scan(step, params, (xs, ys))
    return params, losses.mean()


def make():
    rng = np.random.default_rng(0)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    params = {"ln_s": np.ones(WIDTH, np.float32), "ln_b": np.zeros(WIDTH, np.float32), "wqkv": w(WIDTH, 3 * WIDTH),
              "wo": w(WIDTH, WIDTH), "w1": w(WIDTH, HIDDEN), "w2": w(HIDDEN, WIDTH)}
    xs = rng.standard_normal((STEPS, SEQ, WIDTH)).astype(np.float32)
    ys = rng.standard_normal((STEPS, SEQ, WIDTH)).astype(np.float32)
    return jax.jit(train), (params, xs, ys, np.float32(1e-2))
