"""A store on any fsspec filesystem (memory:// here)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import BinaryIO, Iterator

from ..errors import AlreadyExistsError, NotFoundError
from .base import Capabilities, Store, check_key


class FsspecStore(Store):
    """Any fsspec filesystem (memory://, gs://, ...). Subclasses make create-only writes atomic on their backend."""

    capabilities = Capabilities(local=True)  # memory://: this process's memory; remote subclasses declare their own

    def __init__(self, fs, root: str, url: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = url
        self._lock = threading.RLock()

    def _path(self, key: str) -> str:
        return f"{self.root}/{check_key(key)}"

    def get(self, key: str) -> bytes:
        try:
            return self.fs.cat_file(self._path(key))
        except FileNotFoundError:
            raise NotFoundError(f"{key} not found in {self.url}") from None

    def open_read(self, key: str) -> BinaryIO:
        try:
            return self.fs.open(self._path(key), "rb")
        except FileNotFoundError:
            raise NotFoundError(f"{key} not found in {self.url}") from None

    def put(self, key: str, data: bytes | memoryview, *, create_only: bool = False) -> None:
        self.check_writable()
        path = self._path(key)
        # One process owns a memory:// filesystem, so a lock makes exists+write atomic there.
        with self._lock:
            if create_only and self.fs.exists(path):
                raise AlreadyExistsError(f"{key} already exists in {self.url}")
            self.fs.pipe_file(path, bytes(data))

    def put_if(self, key: str, data: bytes | memoryview, *, expected: bytes | None, max_bytes: int) -> bool:
        with self._lock:
            return super().put_if(key, data, expected=expected, max_bytes=max_bytes)

    def exists(self, key: str) -> bool:
        return self.fs.isfile(self._path(key))

    def size(self, key: str) -> int:
        try:
            return int(self.fs.size(self._path(key)))
        except FileNotFoundError:
            raise NotFoundError(f"{key} not found in {self.url}") from None

    def list(self, prefix: str = "") -> Iterator[str]:
        base = self._path(prefix) if prefix else self.root
        try:
            found = self.fs.find(base)
        except FileNotFoundError:
            return iter(())
        root = self.root.lstrip("/") + "/"
        keys = []
        for p in found:
            p = p.lstrip("/")
            if p.startswith(root):
                keys.append(p[len(root):])
        return iter(sorted(keys))

    def delete(self, key: str) -> None:
        try:
            self.fs.rm_file(self._path(key))
        except FileNotFoundError:
            pass

    def modified(self, key: str) -> float | None:
        try:
            return self.fs.modified(self._path(key)).timestamp()
        except (FileNotFoundError, NotImplementedError, AttributeError):
            return None

    def touch(self, key: str) -> bool:
        path = self._path(key)
        entry = getattr(self.fs, "store", {}).get(path.lstrip("/")) or getattr(self.fs, "store", {}).get(path)
        if entry is not None and hasattr(entry, "modified"):  # memory://: the file object keeps its time
            entry.modified = datetime.now(UTC)
            return True
        return self.exists(key)


