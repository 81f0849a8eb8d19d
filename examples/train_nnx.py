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
import numpy as np
import optax
from flax import nnx
from flax_nnx_train import Block, loss_fn, train_step  # the block and step of the pack example, beside this file

D_MODEL, HEADS, SEQ, BATCH = 32, 4, 16, 8


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
