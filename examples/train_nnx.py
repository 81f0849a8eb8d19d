"""An ordinary Flax NNX training script (no reprobundle in it): a small transformer block trained with optax adamw.

Find and pack its train step without editing it:
  reprobundle capture --list -- python examples/train_nnx.py --steps 5          # what it runs, timed
  reprobundle capture --match train_step --call 3 -- python examples/train_nnx.py --steps 5
  reprobundle replay train_step --jax installed --jax 0.7.2

`--save-step N --out FILE.npz` writes the loss of step N and the model's parameters after it (what the tests
compare the captured bundle with).
"""

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

D_MODEL, HEADS, SEQ, BATCH = 32, 4, 16, 8


class Block(nnx.Module):
    def __init__(self, d: int, heads: int, *, rngs: nnx.Rngs):
        self.norm1 = nnx.LayerNorm(d, rngs=rngs)
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


@nnx.jit
def eval_step(model: Block, x, y):
    return loss_fn(model, x, y)


def batches(key, steps: int):
    for _ in range(steps):
        key, kx, ky = jax.random.split(key, 3)
        yield jax.random.normal(kx, (BATCH, SEQ, D_MODEL)), jax.random.normal(ky, (BATCH, SEQ, D_MODEL))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--save-step", type=int, default=0)
    parser.add_argument("--out", default="")
    args = parser.parse_args()

    model = Block(D_MODEL, HEADS, rngs=nnx.Rngs(0))
    optimizer = nnx.Optimizer(model, optax.adamw(1e-3), wrt=nnx.Param)
    for step, (x, y) in enumerate(batches(jax.random.key(1), args.steps), start=1):
        loss = train_step(model, optimizer, x, y)
        if step == args.save_step and args.out:
            params = nnx.state(model, nnx.Param)
            flat = {jax.tree_util.keystr(path): np.asarray(leaf)
                    for path, leaf in jax.tree_util.tree_leaves_with_path(params)}
            np.savez(args.out, loss=np.asarray(loss), **flat)
        print(f"step {step}: loss {float(loss):.5f}")
    print(f"eval loss {float(eval_step(model, x, y)):.5f}")


if __name__ == "__main__":
    main()
