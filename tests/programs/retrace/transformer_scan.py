"""A one-block transformer (layernorm, one-head attention, an MLP with exact GELU) trained by Adam for a few steps
in a `lax.scan`: the loss, `jax.grad` through the block and the update in the scan's body, the mean loss out as a
scalar. Small sizes (a sequence of 8 tokens of width 16): it compiles in a second. The CPU thunk runtime (jaxlib
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
    h = _layernorm(x, p["ln1_s"], p["ln1_b"])
    q, k, v = h @ p["wq"], h @ p["wk"], h @ p["wv"]
    mask = jnp.tril(jnp.ones((SEQ, SEQ), bool))
    logits = jnp.where(mask, q @ k.T / np.sqrt(WIDTH).astype(np.float32), -1e9)
    x = x + jax.nn.softmax(logits, axis=-1) @ v @ p["wo"]
    h = _layernorm(x, p["ln2_s"], p["ln2_b"])
    return x + jax.nn.gelu(h @ p["w1"], approximate=False) @ p["w2"]


def _loss(p, x, y):
    return jnp.mean((_block(p, x) - y) ** 2)


def train(params, xs, ys, lr):
    """Adam over the batches of xs and ys, one step each; the trained parameters and the mean loss."""
    def step(state, batch):
        p, m, v, t = state
        loss, g = jax.value_and_grad(_loss)(p, *batch)
        t = t + 1.0
        m = jax.tree_util.tree_map(lambda m, g: 0.9 * m + 0.1 * g, m, g)
        v = jax.tree_util.tree_map(lambda v, g: 0.999 * v + 0.001 * g * g, v, g)
        p = jax.tree_util.tree_map(lambda p, m, v: p - lr * (m / (1 - 0.9 ** t)) / (jnp.sqrt(v / (1 - 0.999 ** t))
                                                                                     + 1e-8), p, m, v)
        return (p, m, v, t), loss

    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    (params, _, _, _), losses = jax.lax.scan(step, (params, zeros, zeros, jnp.float32(0)), (xs, ys))
    return params, losses.mean()


def make():
    rng = np.random.default_rng(0)

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[0])).astype(np.float32)

    params = {"ln1_s": np.ones(WIDTH, np.float32), "ln1_b": np.zeros(WIDTH, np.float32), "wq": w(WIDTH, WIDTH),
              "wk": w(WIDTH, WIDTH), "wv": w(WIDTH, WIDTH), "wo": w(WIDTH, WIDTH), "ln2_s": np.ones(WIDTH, np.float32),
              "ln2_b": np.zeros(WIDTH, np.float32), "w1": w(WIDTH, HIDDEN), "w2": w(HIDDEN, WIDTH)}
    xs = rng.standard_normal((STEPS, SEQ, WIDTH)).astype(np.float32)
    ys = rng.standard_normal((STEPS, SEQ, WIDTH)).astype(np.float32)
    return jax.jit(train), (params, xs, ys, np.float32(1e-2))
