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
import struct
import tempfile
import threading
import uuid
import zipfile
import zlib
from abc import ABC, abstractmethod
from pathlib import Path
from typing import BinaryIO, Iterator

from ..errors import (
    AlreadyExistsError,
    CorruptBundleError,
    NotFoundError,
    ReadOnlyStoreError,
    StoreError,
    StoreUnreachableError,
    UsageError,
)

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


class Store(ABC):
    """A flat key -> bytes map rooted at `url`."""

    url: str
    read_only: bool = False

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
            _unlink_quietly(tmp)
            raise

    def local_path(self, key: str) -> Path | None:
        """A path to read the value in place, when the backend is a local folder."""
        return None

    def _check_writable(self) -> None:
        if self.read_only:
            raise ReadOnlyStoreError(
                f"the store {self.url} is read-only",
                hint="zip bundles are read-only: `reprobundle pull` or `copy` it into a folder store first",
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.url!r})"


def _unlink_quietly(path: str | Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


class LocalStore(Store):
    """A folder. Writes go to a temp file in `<root>/.tmp` and are renamed into place (create-only: hard link)."""

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
            _unlink_quietly(tmp)
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
            _unlink_quietly(tmp)

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
            _unlink_quietly(self._path(key))
        except (IsADirectoryError, NotADirectoryError):
            pass  # a folder, or below a file: no value under this key

    def remove_stale_temp_files(self, older_than_s: float = 3600.0) -> int:
        """Delete temp files left by killed writers; returns how many."""
        import time

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


class FsspecStore(Store):
    """Any fsspec filesystem (memory://, gs://, ...). Subclasses make create-only writes atomic on their backend."""

    def __init__(self, fs, root: str, url: str) -> None:
        self.fs = fs
        self.root = root.rstrip("/")
        self.url = url
        self._lock = threading.Lock()

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
        self._check_writable()
        path = self._path(key)
        # One process owns a memory:// filesystem, so a lock makes exists+write atomic there.
        with self._lock:
            if create_only and self.fs.exists(path):
                raise AlreadyExistsError(f"{key} already exists in {self.url}")
            self.fs.pipe_file(path, bytes(data))

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


# A zip bundle is small metadata plus blobs; these bounds keep a hostile zip from exhausting memory or disk.
MAX_ZIP_ENTRIES = 100_000
MAX_ZIP_MEMBER_BYTES = 64 << 30
MAX_COMPRESSION_RATIO = 200
# What zipfile raises on hostile or damaged input (bad headers, CRC, truncation, unsupported methods or versions,
# encryption, undecodable names), at open and while reading a member.
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, ValueError, NotImplementedError,
               RuntimeError, zlib.error, struct.error, IndexError, OverflowError)


class ZipStore(Store):
    """A single-file bundle: the store layout inside a zip. Read-only; written whole by `write_zip_store`."""

    read_only = True

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser().absolute()
        self.url = str(self.path)
        try:
            self._zip = zipfile.ZipFile(self.path)
        except FileNotFoundError:
            raise NotFoundError(f"zip bundle {self.path} does not exist") from None
        except _ZIP_ERRORS as e:
            raise StoreError(
                f"{self.path} is not a readable zip bundle ({e})",
                hint="the file is truncated or corrupt; download or export it again",
            ) from None
        infos = self._zip.infolist()
        if len(infos) > MAX_ZIP_ENTRIES:
            raise StoreError(f"{self.path} has {len(infos)} entries, more than {MAX_ZIP_ENTRIES}")
        self._members: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            if info.is_dir():
                continue
            try:
                check_key(info.filename)
            except UsageError:
                raise StoreError(
                    f"{self.path} holds an entry with an unsafe name {info.filename!r}",
                    hint="this zip was not written by reprobundle; do not use it",
                ) from None
            if info.filename in self._members:  # readers disagree on which copy wins: refuse the ambiguity
                raise StoreError(f"{self.path} holds the entry {info.filename} twice",
                                 hint="this zip was not written by reprobundle; do not use it")
            ratio = info.file_size / max(info.compress_size, 1)
            if info.file_size > MAX_ZIP_MEMBER_BYTES or (info.file_size > (1 << 20) and ratio > MAX_COMPRESSION_RATIO):
                raise StoreError(
                    f"{self.path}: entry {info.filename} declares {info.file_size} bytes "
                    f"from {info.compress_size} (looks like a zip bomb)",
                )
            self._members[info.filename] = info

    def _info(self, key: str) -> zipfile.ZipInfo:
        try:
            return self._members[check_key(key)]
        except KeyError:
            raise NotFoundError(f"{key} not found in {self.url}") from None

    def get(self, key: str) -> bytes:
        with self.open_read(key) as f:
            return f.read()

    def open_read(self, key: str) -> BinaryIO:
        info = self._info(key)
        try:
            return _ZipMemberReader(self._zip.open(info), key, self.path)
        except _ZIP_ERRORS as e:
            raise _zip_corrupt(key, self.path, e) from None

    def put(self, key: str, data: bytes | memoryview, *, create_only: bool = False) -> None:
        self._check_writable()

    def exists(self, key: str) -> bool:
        return check_key(key) in self._members

    def size(self, key: str) -> int:
        return self._info(key).file_size

    def list(self, prefix: str = "") -> Iterator[str]:
        if prefix:
            check_key(prefix)
            prefix = prefix.rstrip("/") + "/"
        return iter(sorted(k for k in self._members if k.startswith(prefix)))

    def delete(self, key: str) -> None:
        self._check_writable()

    def close(self) -> None:
        self._zip.close()


def _zip_corrupt(key: str, path: Path, e: BaseException) -> CorruptBundleError:
    return CorruptBundleError(f"cannot read {key} from {path}: {type(e).__name__}: {e}",
                              hint="the zip is corrupt; download or export it again")


class _ZipMemberReader:
    """A zip member's stream whose read errors (bad CRC, truncated or corrupt data) are CorruptBundleError."""

    def __init__(self, f, key: str, path: Path) -> None:
        self._f, self._key, self._path = f, key, path

    def read(self, n: int = -1) -> bytes:
        try:
            return self._f.read(n)
        except _ZIP_ERRORS as e:
            raise _zip_corrupt(self._key, self._path, e) from None

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "_ZipMemberReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def write_zip_store(path: str | Path, entries: Iterator[tuple[str, Store, str]]) -> None:
    """Write a zip store atomically from (key, source store, source key) triples. Blobs are stored, not deflated:
    they are mostly arrays and compiled text, and a stored entry can be streamed without inflating."""
    path = Path(path).expanduser().absolute()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
    try:
        with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for key, source, source_key in entries:
                check_key(key)
                with source.open_read(source_key) as src, zf.open(
                    zipfile.ZipInfo(key, date_time=(1980, 1, 1, 0, 0, 0)), "w", force_zip64=True
                ) as dst:
                    shutil.copyfileobj(src, dst, COPY_CHUNK)
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise


def _is_zip_url(url: str) -> bool:
    return url.startswith("zip://") or url.lower().endswith(".zip")


def open_store(url: str | os.PathLike | None = None) -> Store:
    """Open the store at `url`: a folder path or file://, memory://, gs://bucket/prefix, or a .zip file
    (also written zip://::path.zip). None means $REPROBUNDLE_STORE or the default local folder."""
    from ..config import default_store_url

    url = os.fspath(url) if url is not None else default_store_url()
    if not url:
        raise UsageError("empty store URL")
    if _is_zip_url(url):
        path = url.split("::", 1)[1] if url.startswith("zip://") else url
        return ZipStore(path.removeprefix("file://"))
    if url.startswith("memory://"):
        import fsspec

        fs = fsspec.filesystem("memory")
        return FsspecStore(fs, "/" + url[len("memory://"):].strip("/"), url.rstrip("/"))
    if url.startswith(("gs://", "gcs://")):
        from .gcs import GCSStore

        return GCSStore(url)
    if url.startswith("file://"):
        return LocalStore(url[len("file://"):])
    if "://" in url:
        raise UsageError(
            f"unsupported store URL {url!r}",
            hint="use a folder path, file://, memory://, gs://bucket/prefix, or a .zip file",
        )
    return LocalStore(url)
