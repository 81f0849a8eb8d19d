"""A single-file bundle: the store layout inside a zip, read in place."""

from __future__ import annotations

import os
import shutil
import struct
import uuid
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO, Iterator

from ..errors import CorruptBundleError, NotFoundError, StoreError, UsageError
from .base import COPY_CHUNK, Capabilities, Store, check_key, unlink_quietly

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

    capabilities = Capabilities(writable=False, local=True)

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
        self.check_writable()

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
        self.check_writable()

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
        unlink_quietly(tmp)
        raise


