"""Flax Linen: `model.apply` of a small convolutional classifier, jitted with the module as a static argument.

Pack it (flax must be installed where you pack; the bundle does not need it to replay):
  reprobundle pack examples/flax_linen.py --name linen-cnn
"""

import jax
from flax import linen as nn


class CNN(nn.Module):
    classes: int = 10

    @nn.compact
    def __call__(self, x, train: bool = False):
        x = nn.relu(nn.Conv(16, (3, 3))(x))
        x = nn.avg_pool(x, (2, 2), strides=(2, 2))
        x = nn.relu(nn.Conv(32, (3, 3))(x))
        x = x.reshape((x.shape[0], -1))
        x = nn.Dropout(0.1, deterministic=not train)(x)
        return nn.Dense(self.classes)(x)


def make():
    model = CNN()
    x = jax.random.normal(jax.random.PRNGKey(0), (8, 28, 28, 1))
    variables = model.init(jax.random.PRNGKey(1), x)
    apply = jax.jit(model.apply, static_argnames="train")
    return apply, (variables, x), {"train": False}
