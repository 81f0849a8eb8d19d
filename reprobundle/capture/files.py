"""The files a user hands pack: inputs in an .npz, a serialized artifact, a StableHLO module."""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Sequence

import numpy as np

from ..errors import UsageError
from ..run.execution import dtype_of


def load_npz(path: str | Path, expected: Sequence[dict] | None = None) -> list[np.ndarray]:
    """Input leaves from an .npz: keys arr_0..arr_N-1 (np.savez(*leaves)) in numeric order, else file order.

    Arrays saved from ml_dtypes types (bfloat16...) come back as raw void data; they are reinterpreted as the
    expected dtype when the item size matches.
    """
    try:
        with np.load(path, allow_pickle=False) as npz:
            keys = list(npz.files)
            if keys and all(k.startswith("arr_") and k[4:].isdigit() for k in keys):
                keys.sort(key=lambda k: int(k[4:]))
            leaves = [npz[k] for k in keys]
    except FileNotFoundError:
        raise UsageError(f"inputs file {path} does not exist") from None
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as e:
        raise UsageError(f"cannot read inputs from {path}: {e}",
                         hint="save the inputs with numpy.savez(path, *leaves), without object arrays") from None
    if expected:
        for i, (leaf, aval) in enumerate(zip(leaves, expected)):
            want = dtype_of(aval["dtype"])
            if leaf.dtype.kind == "V" and leaf.dtype.itemsize == want.itemsize:
                leaves[i] = leaf.view(want)
    return leaves


def read_user_file(path: str | Path, what: str) -> bytes:
    """The bytes of a file the user named; one UsageError naming `what` when it cannot be read."""
    try:
        return Path(path).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read the {what} {path}: {e.strerror}") from None
