"""Stores: bytes in, bytes out, under '/'-separated keys. They know nothing of manifests.

Contract every backend keeps (tests/test_store_contract.py runs it against each):
- `put` is atomic: a reader sees the whole new value or nothing, never a prefix.
- `put(..., create_only=True)` raises AlreadyExistsError if the key exists, and of two racing writers exactly one
  wins. Versions of a bundle are allocated with it.
- `get` of a missing key raises NotFoundError; `list(prefix)` yields keys below `prefix`, sorted.
- Keys are validated: no '..', no absolute paths, no odd characters, so nothing read from a bundle escapes the root.
"""

from __future__ import annotations

import io
import os
import re
import shutil
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, ClassVar, Iterator

from ..errors import ReadOnlyStoreError, UsageError

_KEY_PART_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+=-]{0,199}$")
COPY_CHUNK = 8 << 20


def check_key(key: str) -> str:
    """Return `key` if it is a safe relative key, else raise UsageError."""
    if not isinstance(key, str) or not key or len(key) > 1024:
        raise UsageError(f"invalid store key {key!r}")
    for part in key.split("/"):
        if part in ("", ".", "..") or not _KEY_PART_RE.fullmatch(part):
            raise UsageError(f"invalid store key {key!r}: part {part!r} is not allowed")
    return key


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, declared by its class (callers never guess from types or URLs)."""

    writable: bool = True
    local: bool = False  # the bytes are on this machine: reading is cheap, a read-through cache would only copy
    shareable: bool = False  # its URL reaches the same bytes from another machine (a bucket, not a folder)


class Store(ABC):
    """A flat key -> bytes map rooted at `url`."""

    url: str
    capabilities: ClassVar[Capabilities] = Capabilities()

    @property
    def read_only(self) -> bool:
        return not self.capabilities.writable

    @abstractmethod
    def get(self, key: str) -> bytes: ...

    @abstractmethod
    def put(self, key: str, data: bytes | memoryview, *, create_only: bool = False) -> None: ...

    @abstractmethod
    def exists(self, key: str) -> bool: ...

    @abstractmethod
    def size(self, key: str) -> int: ...

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[str]: ...

    @abstractmethod
    def delete(self, key: str) -> None: ...

    def open_read(self, key: str) -> BinaryIO:
        """A readable binary stream; backends override to avoid holding large values in memory."""
        return io.BytesIO(self.get(key))

    def put_file(self, key: str, path: str | Path, *, create_only: bool = False) -> None:
        with open(path, "rb") as f:
            self.put(key, f.read(), create_only=create_only)

    def get_file(self, key: str, path: str | Path) -> None:
        """Copy the value to a local file, atomically (temp file + rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".part-")
        try:
            with os.fdopen(fd, "wb") as out, self.open_read(key) as src:
                shutil.copyfileobj(src, out, COPY_CHUNK)
            os.replace(tmp, path)
        except BaseException:
            unlink_quietly(tmp)
            raise

    def local_path(self, key: str) -> Path | None:
        """A path to read the value in place, when the backend is a local folder."""
        return None

    def object_urls(self, key: str) -> dict[str, str]:
        """https URLs a person can open for one stored object ({} where the backend has none)."""
        return {}

    def check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError(
                f"the store {self.url} is read-only",
                hint="zip bundles are read-only: `reprobundle pull` or `copy` it into a folder store first",
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def unlink_quietly(path: str | Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


