"""Stores: bytes in, bytes out, under '/'-separated keys. They know nothing of manifests.

Contract every backend keeps (tests/test_store_contract.py runs it against each):
- `put` is atomic: a reader sees the whole new value or nothing, never a prefix.
- `put(..., create_only=True)` raises AlreadyExistsError if the key exists, and of two racing writers exactly one
  wins. Versions of a bundle are allocated with it.
- `put_if(key, data, expected=...)` writes only over the value the caller read (None: no value): of two racing
  writers that read the same value at most one writes, the other is told (False). Tags are moved with it.
- `get` of a missing key raises NotFoundError; `list(prefix)` yields keys below `prefix`, sorted.
- Keys are validated: no '..', no absolute paths, no odd characters, so nothing read from a bundle escapes the root.
- `get_bounded` never reads more than its limit, whatever the value's size: records (manifests, runs, tags, the
  marker) are read with it, so a hostile value cannot exhaust memory before its size is judged.
- Garbage collection (see bundle/registry.py): `modified` and `touch` give the age a grace period judges, and
  `lease` / `collecting` let a running writer hold the keys it has not yet published where the backend can (a
  local folder); the base versions are what a backend without them gets (no lease: the grace period alone).
"""

from __future__ import annotations

import io
import os
import re
import shutil
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Callable, ClassVar, ContextManager, Iterable, Iterator, TypeVar

from ..errors import AlreadyExistsError, CorruptBundleError, NotFoundError, ReadOnlyStoreError, UsageError
from ..text import quoted

_KEY_PART_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+=-]{0,199}$")
COPY_CHUNK = 8 << 20
DEFAULT_JOBS = 8  # concurrent transfers of a batch on backends without a native batch path


def check_key(key: str) -> str:
    """Return `key` if it is a safe relative key, else raise UsageError."""
    if not isinstance(key, str) or not key or len(key) > 1024:
        raise UsageError(f"invalid store key {quoted(key)}")
    for part in key.split("/"):
        if part in ("", ".", "..") or not _KEY_PART_RE.fullmatch(part):
            raise UsageError(f"invalid store key {quoted(key)}: part {quoted(part, 40)} is not allowed")
    return key


@dataclass(frozen=True)
class Capabilities:
    """What a backend can do, declared by its class (callers never guess from types or URLs)."""

    writable: bool = True
    local: bool = False  # the bytes are on this machine: reading is cheap, a read-through cache would only copy
    shareable: bool = False  # its URL reaches the same bytes from another machine (a bucket, not a folder)
    single_file: bool = False  # one file holding a bundle (a zip): the file is its URL, a ref may leave the name out
    folder: bool = False  # a folder on this machine: its bundles have file:// URLs


class Store(ABC):
    """A flat key -> bytes map rooted at `url`."""

    url: str
    capabilities: ClassVar[Capabilities] = Capabilities()

    @property
    def read_only(self) -> bool:
        return not self.capabilities.writable

    @abstractmethod
    def get(self, key: str) -> bytes: ...

    def remove_stale_temp_files(self) -> int:
        """Delete what killed writers left behind (temporary files, leases, scratch folders); how many. A backend
        whose writes leave nothing behind has nothing to delete."""
        return 0

    def check_folders(self) -> None:  # noqa: B027 - a no-op by design: only folder stores have folders
        """Raise StoreFolderError naming an internal folder that is not the real folder inside the store (a link,
        a file), before anything walks or deletes there. A backend without folders has none to check."""

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

    def is_empty(self) -> bool:
        """Whether the store holds no key at all (a folder: no visible entry at its top)."""
        return next(iter(self.list()), None) is None

    def open_read(self, key: str) -> BinaryIO:
        """A readable binary stream; backends override to avoid holding large values in memory."""
        return io.BytesIO(self.get(key))

    def get_bounded(self, key: str, max_bytes: int) -> bytes:
        """The value, read while counting: CorruptBundleError as soon as it exceeds `max_bytes`, having read at
        most `max_bytes + 1` bytes of it."""
        with self.open_read(key) as f:
            data = read_at_most(f, max_bytes + 1)
        if len(data) > max_bytes:
            raise too_large(key, self.url, max_bytes)
        return data

    def put_if(self, key: str, data: bytes | memoryview, *, expected: bytes | None, max_bytes: int) -> bool:
        """Write `data` under `key` only if the value there is still `expected` (None: no value), reading at most
        `max_bytes` of it; False, having written nothing, where it is not. Of writers racing from the same value at
        most one writes where the backend can make it so (GCS: a generation precondition; a folder: a lock on the
        key's folder; memory: a lock); this base one compares, then writes (create-only where `expected` is None)."""
        self.check_writable()
        try:
            current: bytes | None = self.get_bounded(key, max_bytes)
        except NotFoundError:
            current = None
        except CorruptBundleError:  # larger than `max_bytes`: not the value expected
            return False
        if current != expected:
            return False
        try:
            self.put(key, data, create_only=expected is None)
        except AlreadyExistsError:
            return False
        return True

    def put_file(self, key: str, path: str | Path, *, create_only: bool = False) -> None:
        with open(path, "rb") as f:
            self.put(key, f.read(), create_only=create_only)

    def get_file(self, key: str, path: str | Path) -> None:
        """Copy the value to a local file, atomically (temp file + rename)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = make_temp_file(path.parent, ".part-")
        try:
            with os.fdopen(fd, "wb") as out, self.open_read(key) as src:
                shutil.copyfileobj(src, out, COPY_CHUNK)
            os.replace(tmp, path)
        except BaseException:
            unlink_quietly(tmp)
            raise

    # Batches: many keys at once, `jobs` at a time. Backends with a native batch path override these (GCS: its own
    # concurrency setting, REPROBUNDLE_GCS_CONCURRENCY, takes the place of `jobs`).
    def get_many(self, items: Iterable[tuple[str, str | Path]], *, progress: Callable[[int], None] | None = None,
                 jobs: int = DEFAULT_JOBS, sha256: dict[str, str] | None = None) -> None:
        """Download [(key, local path), ...]; NotFoundError names the first missing key. `progress(nbytes)` is
        called from I/O threads as files complete; keep it cheap. `sha256`: a backend that hashes what it writes
        as it writes it puts each key's hex sha256 there (GCS); a key it leaves out is for the caller to hash."""
        def one(item: tuple[str, str | Path]) -> None:
            self.get_file(item[0], item[1])
            if progress:
                progress(Path(item[1]).stat().st_size)

        _each(one, list(items), jobs)

    def put_many(self, items: Iterable[tuple[str, str | Path]], *, progress: Callable[[int], None] | None = None,
                 jobs: int = DEFAULT_JOBS, move: bool = False) -> None:
        """Upload [(key, local path), ...] of content-addressed values: a key that exists already keeps its value
        (the same bytes, by construction). `move`: the files are the caller's to give away (a folder store moves
        those in its `staging_folder` into place instead of copying them; they are gone afterwards either way)."""
        self.check_writable()

        def one(item: tuple[str, str | Path]) -> None:
            size = Path(item[1]).stat().st_size
            try:
                if move:
                    self.move_in(item[0], item[1])
                else:
                    self.put_file(item[0], item[1], create_only=True)
            except AlreadyExistsError:
                pass  # a concurrent writer stored the same content
            if progress:
                progress(size)

        _each(one, list(items), jobs)

    def move_in(self, key: str, path: str | Path) -> None:
        """put_file(create_only=True) of a file that is the caller's to give away: it is gone afterwards, stored or
        not (a folder store links it into place when it is on the store's disk)."""
        try:
            self.put_file(key, path, create_only=True)
        finally:
            unlink_quietly(path)

    def staging_folder(self) -> Path | None:
        """A folder on this store's own disk where a writer may put files that `move_in` then takes without a
        copy; None where every value is sent or copied."""
        return None

    def stage(self, data: bytes | memoryview) -> "Staged | None":
        """Write a value whose key is not known yet (a blob's key is its hash, which the caller computes meanwhile),
        to `publish` under its key or `discard`; invisible until published. None where the backend cannot (then
        `put` writes it once the key is known)."""
        return None

    def exists_many(self, keys: Iterable[str], *, jobs: int = DEFAULT_JOBS) -> set[str]:
        """The subset of `keys` present in the store."""
        keys = list(keys)
        return {k for k, present in zip(keys, _each(self.exists, keys, jobs)) if present}

    def local_path(self, key: str) -> Path | None:
        """A path to read the value in place, when the backend is a local folder."""
        return None

    # Garbage collection: what a backend can tell about age and running writers (see the module docstring).
    def modified(self, key: str) -> float | None:
        """When the value was last written or touched (seconds since the epoch); None where the backend cannot
        say, or the key is missing."""
        return None

    def touch(self, key: str) -> bool:
        """Mark a value as just used (a writer that found it already stored is about to reference it), so a grace
        period counts from now; False if the key is missing. Backends that cannot refresh a time only check."""
        return self.exists(key)

    def lease(self) -> "Lease":
        """A running writer's hold on the keys it is about to reference (the base: none, the grace period alone)."""
        return Lease()

    @contextmanager
    def collecting(self, *, exclude: "Lease | None" = None) -> Iterator[set[str]]:
        """gc's delete phase: yields the keys running writers hold (their leases, except `exclude`), and keeps
        writers from taking new keys until it ends. The base: no leases, nothing to wait for."""
        yield set()

    def delete_if_stale(self, key: str, cutoff: float | None) -> bool:
        """Delete `key` unless it was modified or touched at or after `cutoff` (None: whatever its age); True if it
        was deleted. A value of unknown age is kept when there is a cutoff."""
        if cutoff is not None:
            when = self.modified(key)
            if when is None or when >= cutoff:
                return False
        self.delete(key)
        return True

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


class Lease:
    """A writer's hold on keys (see `Store.lease`): `with lease.holding(keys):` around the existence check and the
    write that make a key the writer's, so that gc either sees the hold or has finished. This base one holds
    nothing; LocalStore's is a locked file in the store."""

    def add(self, keys: Iterable[str]) -> None:
        """Hold `keys` from now on: call before checking whether they exist, then write or use them."""

    def holding(self, keys: Iterable[str]) -> ContextManager[None]:
        self.add(keys)
        return nullcontext()

    def close(self) -> None:
        pass

    def __enter__(self) -> "Lease":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Staged(ABC):
    """A value written before its key was known (Store.stage). Used as a context manager, it is discarded on the
    way out unless published."""

    @abstractmethod
    def publish(self, key: str, *, create_only: bool = False) -> None:
        """Make the value visible under `key` (atomically, as `put`); AlreadyExistsError as `put`'s create_only."""

    @abstractmethod
    def discard(self) -> None: ...

    def __enter__(self) -> "Staged":
        return self

    def __exit__(self, *exc) -> None:
        self.discard()


def make_temp_file(folder: str | Path, prefix: str) -> tuple[int, str]:
    """(fd, path) of a new empty file in `folder` opened for writing, created with mode 0666 less the umask (as
    `open` creates files), not mkstemp's 0600: a store or cache shared by a group stays readable to it."""
    for _ in range(100):
        path = os.path.join(folder, f"{prefix}{os.urandom(6).hex()}")
        try:
            return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {folder}")


def read_at_most(f: BinaryIO, n: int) -> bytes:
    """Up to `n` bytes of a stream (raw streams may return less than asked before their end)."""
    chunks = []
    left = n
    while left > 0:
        chunk = f.read(min(left, 1 << 18))  # a read allocates what it asks for, whatever the value's size
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def too_large(key: str, url: str, max_bytes: int) -> CorruptBundleError:
    return CorruptBundleError(f"{key} in {url} is larger than the {max_bytes} bytes such a record may hold",
                              hint="the store holds something reprobundle did not write there; remove it")


def unlink_quietly(path: str | Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


_T = TypeVar("_T")


def _each(fn: Callable[[_T], Any], items: list[_T], jobs: int) -> list[Any]:
    """fn over items, `jobs` at a time; the first failure is raised."""
    if len(items) <= 1 or jobs <= 1:
        return [fn(i) for i in items]
    with ThreadPoolExecutor(max_workers=min(jobs, len(items))) as pool:
        return list(pool.map(fn, items))
