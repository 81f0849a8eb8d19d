"""Multi-head self-attention as in a transformer layer, with the transposes of a real one.

Pack it:  reprobundle pack examples/attention.py --name attention          (float32, the default factory)
          reprobundle pack examples/attention.py:make_bf16 --name attention-bf16
          reprobundle pack examples/attention.py:make_small --name attention-small   (quick: batch 1, seq 128)
"""

import jax
import jax.numpy as jnp
import numpy as np

BATCH, SEQ, HEADS, HEAD_DIM = 4, 512, 8, 64


def attention(x, wq, wk, wv, wo):
    batch, seq, model = x.shape
    heads = HEADS
    head_dim = model // heads

    def split_heads(t):  # [b, s, h*d] -> [b, h, s, d]
        return t.reshape(batch, seq, heads, head_dim).transpose(0, 2, 1, 3)

    q, k, v = split_heads(x @ wq), split_heads(x @ wk), split_heads(x @ wv)
    scores = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.asarray(head_dim, x.dtype))
    probs = jax.nn.softmax(scores.astype(jnp.float32), axis=-1).astype(x.dtype)
    out = jnp.einsum("bhqk,bhkd->bhqd", probs, v)
    out = out.transpose(0, 2, 1, 3).reshape(batch, seq, model)  # [b, h, s, d] -> [b, s, h*d]
    return out @ wo


def _args(batch, seq, dtype):
    rng = np.random.default_rng(0)
    model = HEADS * HEAD_DIM
    x = rng.standard_normal((batch, seq, model), dtype=np.float32)
    ws = [rng.standard_normal((model, model), dtype=np.float32) / np.sqrt(model) for _ in range(4)]
    return tuple(jnp.asarray(a, dtype) for a in (x, *ws))


def make():
    return jax.jit(attention), _args(BATCH, SEQ, jnp.float32)


def make_bf16():
    return jax.jit(attention), _args(BATCH, SEQ, jnp.bfloat16)


def make_small():
    return jax.jit(attention), _args(1, 128, jnp.float32)
