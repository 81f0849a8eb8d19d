"""An Equinox inference script: an MLP's eqx.filter_jit forward pass over a few batches (nothing of reprobundle)."""
import sys

import equinox as eqx
import jax
import numpy as np

IN, OUT, WIDTH, DEPTH, BATCH = 16, 4, 64, 2, 32


@eqx.filter_jit
def predict(model, x):
    return jax.vmap(model)(x)


def main(batches: int, out: str) -> None:
    model = eqx.nn.MLP(IN, OUT, WIDTH, DEPTH, activation=jax.nn.gelu, key=jax.random.PRNGKey(0))
    key = jax.random.PRNGKey(1)
    outputs = {}
    for i in range(1, batches + 1):
        key, sub = jax.random.split(key)
        x = jax.random.normal(sub, (BATCH, IN))
        y = predict(model, x)
        outputs[f"x{i}"], outputs[f"y{i}"] = np.asarray(x), np.asarray(y)
    if out:
        np.savez(out, **outputs)
    print("predicted", batches, "batches")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "")
