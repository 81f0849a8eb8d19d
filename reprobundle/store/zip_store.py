"""A single-file bundle: the store layout inside a zip, read in place."""

from __future__ import annotations

import os
import shutil
import struct
import uuid
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO, Iterable, Iterator, cast

from ..errors import CorruptBundleError, NotFoundError, StoreError, UsageError, space_for
from ..text import exception_line, quoted
from .base import COPY_CHUNK, Capabilities, Store, check_key, read_at_most, too_large, unlink_quietly
from .watchdog import track, untrack

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

    capabilities = Capabilities(writable=False, local=True, single_file=True)

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
            if info.filename.endswith("/") or is_runner_entry(info.filename):  # not is_dir(): it fails on ""
                continue  # the zip's own replay code (`python NAME.zip`): never read as a store key, never run here
            try:
                check_key(info.filename)
            except UsageError:
                raise StoreError(
                    f"{self.path} holds an entry with an unsafe name {quoted(info.filename)}",
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

    def get_bounded(self, key: str, max_bytes: int) -> bytes:
        """A record: refused by its declared size before anything is inflated, and read through a reader that
        stops at the limit (the declared size may lie; zipfile also stops at it)."""
        if self._info(key).file_size > max_bytes:
            raise too_large(key, self.url, max_bytes)
        with self.open_read(key) as f:
            data = read_at_most(f, max_bytes + 1)
        if len(data) > max_bytes:
            raise too_large(key, self.url, max_bytes)
        return data

    def open_read(self, key: str) -> BinaryIO:
        info = self._info(key)
        try:
            return cast(BinaryIO, _ZipMemberReader(self._zip.open(info), key, self.path, info.file_size))
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
    return CorruptBundleError(f"cannot read {key} from {path}: {exception_line(e)}",
                              hint="the zip is corrupt; download or export it again")


class _ZipMemberReader:
    """A zip member's stream whose read errors (bad CRC, truncated or corrupt data) are CorruptBundleError, and
    which never hands out more than the member declares (`left`), whatever its data inflates to."""

    def __init__(self, f, key: str, path: Path, left: int) -> None:
        self._f, self._key, self._path, self._left = f, key, path, left

    def read(self, n: int = -1) -> bytes:
        n = self._left if n is None or n < 0 else min(n, self._left)
        if n <= 0:
            return b""
        try:
            data = self._f.read(n)
        except _ZIP_ERRORS as e:
            raise _zip_corrupt(self._key, self._path, e) from None
        self._left -= len(data)
        return data

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> "_ZipMemberReader":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


RUNNER_PACKAGE = "reprobundle_worker"  # `python NAME.zip` runs __main__.py, which imports this folder of the zip
# what `python NAME.zip` judges where an investigation answered (bundle/zip_expectation.py); zips from before
# 2026-12-06 have none
REPRODUCER_ENTRY = "reproducer.json"


def is_runner_entry(name: str) -> bool:
    """An entry of what lets a zip replay itself (`__main__.py`, `reprobundle_worker/...`, `reproducer.json`):
    outside the store layout, skipped by ZipStore."""
    return name in ("__main__.py", REPRODUCER_ENTRY) or name.startswith(RUNNER_PACKAGE + "/")


def write_zip_store(path: str | Path, entries: Iterator[tuple[str, Store, str]],
                    runner: Iterable[tuple[str, bytes]] = ()) -> None:
    """Write a zip store atomically from (key, source store, source key) triples. Blobs are stored, not deflated:
    they are mostly arrays and compiled text, and a stored entry can be streamed without inflating. `runner`:
    (name, bytes) of the code that makes the zip replay itself (`__main__.py`, `reprobundle_worker/*.py`),
    deflated, written first so that Python finds `__main__.py` quickly."""
    path = Path(path).expanduser().absolute()
    if path.is_dir():
        raise UsageError(f"{path} is a folder; a bundle is exported as one file",
                         hint=f"give a file name, e.g. -o {path / 'bundle.zip'}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UsageError(f"cannot write {path}: {path.parent} is not a folder") from None
    except PermissionError:
        raise UsageError(f"cannot write {path}: permission denied", hint="choose a folder you can write") from None
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.part")
    track(tmp)
    try:
        with space_for(path.parent, None, f"the zip {path.name}"), \
                zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
            for name, data in runner:
                if not is_runner_entry(name):
                    raise ValueError(f"{name!r} is not a runner entry")
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                zf.writestr(info, data)
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
    finally:
        untrack(tmp)


