"""A store in a local folder."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import BinaryIO, Iterator

from ..errors import (
    AlreadyExistsError,
    NotFoundError,
    StoreError,
    StoreUnreachableError,
)
from .base import COPY_CHUNK, Capabilities, Store, check_key, unlink_quietly


class LocalStore(Store):
    """A folder. Writes go to a temp file in `<root>/.tmp` and are renamed into place (create-only: hard link)."""

    capabilities = Capabilities(local=True)

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser().absolute()
        self.url = str(self.root)
        self._tmp = self.root / ".tmp"

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def local_path(self, key: str) -> Path | None:
        p = self._path(key)
        return p if p.is_file() else None

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise NotFoundError(f"{key} not found in {self.url}") from None
        except PermissionError as e:
            raise StoreError(f"cannot read {key} in {self.url}: {e.strerror}") from None

    def open_read(self, key: str) -> BinaryIO:
        try:
            return open(self._path(key), "rb")
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            raise NotFoundError(f"{key} not found in {self.url}") from None

    def _write_temp(self, writer) -> Path:
        try:
            self._tmp.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreUnreachableError(f"cannot write to the store {self.url}: {e.strerror}") from None
        fd, tmp = tempfile.mkstemp(dir=self._tmp, prefix="put-")
        try:
            with os.fdopen(fd, "wb") as f:
                writer(f)
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            unlink_quietly(tmp)
            raise
        return Path(tmp)

    def _publish(self, tmp: Path, key: str, create_only: bool) -> None:
        final = self._path(key)
        try:
            final.parent.mkdir(parents=True, exist_ok=True)
            if create_only:
                try:
                    os.link(tmp, final)  # atomic and fails if taken: exactly one racer wins
                except FileExistsError:
                    raise AlreadyExistsError(f"{key} already exists in {self.url}") from None
            else:
                os.replace(tmp, final)
        except (FileExistsError, NotADirectoryError, IsADirectoryError) as e:  # a folder at the key, a file above it
            raise StoreError(f"cannot write {key} in {self.url}: {e.strerror}") from None
        finally:
            unlink_quietly(tmp)

    def put(self, key: str, data: bytes | memoryview, *, create_only: bool = False) -> None:
        check_key(key)
        self._publish(self._write_temp(lambda f: f.write(data)), key, create_only)

    def put_file(self, key: str, path: str | Path, *, create_only: bool = False) -> None:
        check_key(key)

        def copy(out):
            with open(path, "rb") as src:
                shutil.copyfileobj(src, out, COPY_CHUNK)

        self._publish(self._write_temp(copy), key, create_only)

    def exists(self, key: str) -> bool:
        return self._path(key).is_file()

    def size(self, key: str) -> int:
        path = self._path(key)
        if not path.is_file():  # missing, a folder, or below a file: no value under this key
            raise NotFoundError(f"{key} not found in {self.url}")
        try:
            return path.stat().st_size
        except FileNotFoundError:
            raise NotFoundError(f"{key} not found in {self.url}") from None

    def list(self, prefix: str = "") -> Iterator[str]:
        base = self.root / check_key(prefix) if prefix else self.root
        if not base.is_dir():
            return iter(())
        keys = []
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = Path(dirpath).relative_to(self.root)
            keys.extend(str(rel / f) if str(rel) != "." else f for f in filenames if not f.startswith("."))
        return iter(sorted(keys))

    def delete(self, key: str) -> None:
        try:
            unlink_quietly(self._path(key))
        except (IsADirectoryError, NotADirectoryError):
            pass  # a folder, or below a file: no value under this key

    def remove_stale_temp_files(self, older_than_s: float = 3600.0) -> int:
        """Delete temp files left by killed writers; returns how many."""

        if not self._tmp.is_dir():
            return 0
        removed = 0
        for p in self._tmp.iterdir():
            try:
                if time.time() - p.stat().st_mtime > older_than_s:
                    p.unlink()
                    removed += 1
            except FileNotFoundError:
                pass
        return removed


