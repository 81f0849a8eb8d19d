"""The suite's small real bundle `small@1`: `_small` (tanh of a matmul, and a sum) packed in-process into a folder
store. tests/conftest.py packs it once per test process (`small_store_template`); a module copies it before changing
it."""

import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import reprobundle


def _small(x, y):
    return jnp.tanh(x @ y), (x * 3).sum()


def pack_small(store: Path) -> None:
    """`small@1` into the folder store `store` (its XLA dump kept, no profile)."""
    rng = np.random.default_rng(0)
    reprobundle.pack(jax.jit(_small), rng.standard_normal((8, 16), dtype=np.float32),
                     rng.standard_normal((16, 4), dtype=np.float32), name="small", store=str(store),
                     description="tanh of a matmul", warmup=1, repeat=3, profile=False)


def copy_of(template: Path, dest: Path) -> Path:
    """A copy of a store (conftest's `small_store_template`) at `dest`, the caller's to change."""
    shutil.copytree(template, dest)
    return dest
