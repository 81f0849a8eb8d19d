"""A store in a local folder.

A folder may come from someone else (an unpacked archive, a shared drive), so reading treats what it finds as
hostile: a value is read only from a regular file whose real location is inside the store (a symbolic link out of
it, a FIFO, a device or a socket is refused with a StoreError naming the key, before a byte is read, and a FIFO is
opened without waiting for a writer); records are read with `get_bounded`, which refuses a file larger than its
limit from its size and reads no more than the limit anyway. Files are written with the umask's mode, as `open`
creates them, so a store shared by a group stays readable to it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

from ..errors import (
    AlreadyExistsError,
    DiskFullError,
    NotFoundError,
    StoreError,
    StorePermissionError,
    StoreUnreachableError,
    UsageError,
    disk_full,
    is_no_space,
)
from .base import (
    COPY_CHUNK,
    Capabilities,
    Lease,
    Staged,
    Store,
    check_key,
    make_temp_file,
    read_at_most,
    too_large,
    unlink_quietly,
)
from .safe_folders import inside, make_inside
from .scratch import STALE_TEMP_S, FileLease, gate, leased_keys, sweep
from .watchdog import track, untrack

_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


class LocalStore(Store):
    """A folder. Writes go to a temp file in `<root>/.tmp` and are renamed into place (create-only: hard link)."""

    capabilities = Capabilities(local=True, folder=True)

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root).expanduser().absolute()
        if self.root.exists() and not self.root.is_dir():
            raise StoreError(f"the store {self.root} is a file, not a folder",
                             hint="a store is a folder; a single-file bundle is a .zip (its name ends in .zip)")
        self.url = str(self.root)
        self._tmp = self.root / ".tmp"
        self._real_root: str | None = None

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    # -------------------------------------------------------------------------------------------- reading
    def _root_real(self) -> str:
        if self._real_root is None:
            real = os.path.realpath(self.root)
            if os.path.isdir(real):
                self._real_root = real  # fixed once the folder exists
            return real
        return self._real_root

    def _refuse(self, key: str, what: str) -> StoreError:
        return StoreError(f"{key} in {self.url} is {what}; reprobundle reads only regular files inside the store",
                          hint="the store holds something reprobundle did not write there; remove it")

    def _check_inside(self, key: str, path: Path) -> None:
        real = os.path.realpath(path)
        root = self._root_real()
        if not real.startswith(root.rstrip(os.sep) + os.sep):
            raise self._refuse(key, "a symbolic link out of the store")

    def _open(self, key: str) -> tuple[int, os.stat_result]:
        """A descriptor of the value's regular file inside the store, and its stat."""
        path = self._path(key)
        try:
            # O_NONBLOCK: a FIFO opens at once instead of waiting for a writer (and is refused below).
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _O_CLOEXEC)
        except (FileNotFoundError, NotADirectoryError):
            raise NotFoundError(f"{key} not found in {self.url}") from None
        except PermissionError:
            raise StorePermissionError(f"cannot read {key} in {self.url}: permission denied",
                                       hint="ask the store's owner to make it readable to you") from None
        except OSError as e:  # a symlink loop, a socket...
            raise StoreError(f"cannot read {key} in {self.url}: {e.strerror}") from None
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):  # a folder at the key: no value under it
                raise NotFoundError(f"{key} not found in {self.url}")
            if not stat.S_ISREG(st.st_mode):
                raise self._refuse(key, _kind(st.st_mode))
            self._check_inside(key, path)
        except BaseException:
            os.close(fd)
            raise
        return fd, st

    def _stat(self, key: str) -> tuple[Path, os.stat_result]:
        """The value's path and stat, checked as `_open` checks (without opening it)."""
        path = self._path(key)
        try:
            st = path.stat()
        except (FileNotFoundError, NotADirectoryError):
            raise NotFoundError(f"{key} not found in {self.url}") from None
        except PermissionError:
            raise StorePermissionError(f"cannot read {key} in {self.url}: permission denied") from None
        except OSError as e:
            raise StoreError(f"cannot read {key} in {self.url}: {e.strerror}") from None
        if stat.S_ISDIR(st.st_mode):
            raise NotFoundError(f"{key} not found in {self.url}")
        if not stat.S_ISREG(st.st_mode):
            raise self._refuse(key, _kind(st.st_mode))
        self._check_inside(key, path)
        return path, st

    def local_path(self, key: str) -> Path | None:
        """The file to read in place: only a readable regular file inside the store (else None, and reading
        through `open_read` says why)."""
        try:
            path, _ = self._stat(key)
        except (NotFoundError, StoreError):
            return None
        return path if os.access(path, os.R_OK) else None

    def get(self, key: str) -> bytes:
        fd, _ = self._open(key)
        with os.fdopen(fd, "rb") as f:
            return self._read(key, f, -1)

    def get_bounded(self, key: str, max_bytes: int) -> bytes:
        fd, st = self._open(key)
        with os.fdopen(fd, "rb") as f:
            if st.st_size > max_bytes:
                raise too_large(key, self.url, max_bytes)
            data = self._read(key, f, max_bytes + 1)
        if len(data) > max_bytes:  # it grew meanwhile
            raise too_large(key, self.url, max_bytes)
        return data

    def _read(self, key: str, f: BinaryIO, n: int) -> bytes:
        try:
            return f.read() if n < 0 else read_at_most(f, n)
        except OSError as e:
            raise StoreError(f"cannot read {key} in {self.url}: {e.strerror}") from None

    def open_read(self, key: str) -> BinaryIO:
        fd, _ = self._open(key)
        return os.fdopen(fd, "rb")

    # -------------------------------------------------------------------------------------------- writing
    def _folder(self, folder: Path, *, make: bool = False) -> Path:
        """`folder` if it is the real folder inside the store (see store/safe_folders.py), made when `make`."""
        return make_inside(self.root, folder) if make else inside(self.root, folder)

    def _write_temp(self, writer, key: str = "", size: int | None = None, *, durable: bool = True) -> Path:
        try:
            self._folder(self._tmp, make=True)
            fd, tmp = make_temp_file(self._tmp, "put-")
            track(tmp)  # removed even if a signal ends the process in the middle of the write
        except OSError as e:
            if is_no_space(e):
                raise disk_full(self.root, size, key) from None
            raise StoreUnreachableError(f"cannot write to the store {self.url}: {e.strerror}") from None
        try:
            with os.fdopen(fd, "wb") as f:
                writer(f)
                f.flush()
                if durable:
                    os.fsync(f.fileno())
        except BaseException as e:
            unlink_quietly(tmp)
            untrack(tmp)
            if is_no_space(e) and not isinstance(e, DiskFullError):
                raise disk_full(self.root, size, key) from None
            raise
        return Path(tmp)

    def _publish(self, tmp: Path, key: str, create_only: bool) -> None:
        final = self._path(key)
        try:
            self._folder(final.parent, make=True)
            if create_only:
                try:
                    os.link(tmp, final)  # atomic and fails if taken: exactly one racer wins
                except FileExistsError:
                    raise AlreadyExistsError(f"{key} already exists in {self.url}") from None
            else:
                os.replace(tmp, final)
        except (FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError) as e:
            # a folder at the key, a file above it, a folder we may not write to
            raise StoreError(f"cannot write {key} in {self.url}: {e.strerror}") from None
        except OSError as e:  # a new folder needs a block too
            if is_no_space(e) and not isinstance(e, DiskFullError):
                raise disk_full(self.root, None, key) from None
            raise
        finally:
            unlink_quietly(tmp)
            untrack(tmp)

    def put(self, key: str, data: bytes | memoryview, *, create_only: bool = False) -> None:
        check_key(key)
        self._publish(self._write_temp(lambda f: f.write(data), key, len(data)), key, create_only)

    def put_if(self, key: str, data: bytes | memoryview, *, expected: bytes | None, max_bytes: int) -> bool:
        """Store.put_if under an exclusive lock of the key's folder (flock: released when the process ends), so
        the value compared is the value replaced."""
        folder = self._path(key).parent
        made = [f for f in (folder, *folder.parents) if f != self.root and self.root in f.parents and not f.exists()]
        try:
            with gate(self._folder(folder, make=True), exclusive=True):
                return super().put_if(key, data, expected=expected, max_bytes=max_bytes)
        except BaseException:  # a write that failed (a full disk) leaves no folder it made for it
            for f in made:  # deepest first
                with contextlib.suppress(OSError):
                    f.rmdir()
            raise

    def put_file(self, key: str, path: str | Path, *, create_only: bool = False) -> None:
        check_key(key)

        def copy(out):
            with open(path, "rb") as src:
                shutil.copyfileobj(src, out, COPY_CHUNK)

        try:
            size: int | None = os.path.getsize(path)
        except OSError:
            size = None
        self._publish(self._write_temp(copy, key, size), key, create_only)

    def stage(self, data: bytes | memoryview) -> Staged:
        """A temp file in `<root>/.tmp`, made durable (fsync) only when published: a value found stored already
        costs no flush to disk."""
        return _StagedFile(self, self._write_temp(lambda f: f.write(data), "", len(data), durable=False))

    def staging_folder(self) -> Path | None:
        # scratch folders there are locked while used; `remove_stale_temp_files` sweeps the rest
        return self._folder(self._tmp, make=True)

    def move_in(self, key: str, path: str | Path) -> None:
        """Made durable (fsync) and linked into place when `path` is on the store's disk (no copy), else copied."""
        check_key(key)
        path = Path(path)
        try:
            same_disk = path.stat().st_dev == self.root.stat().st_dev
        except OSError:
            same_disk = False
        if not same_disk:
            return super().move_in(key, path)
        with open(path, "rb") as f:
            os.fsync(f.fileno())
        self._publish(path, key, create_only=True)  # removes `path`, whatever happens

    # ------------------------------------------------------------------------------------------ the rest
    def exists(self, key: str) -> bool:
        try:
            self._stat(key)
        except (NotFoundError, StoreError):  # missing, a folder, below a file, or nothing a value can be read from
            return False
        return True

    def size(self, key: str) -> int:
        return self._stat(key)[1].st_size

    def list(self, prefix: str = "") -> Iterator[str]:
        base = self.root / check_key(prefix) if prefix else self.root
        self._folder(base)  # a linked `blobs` would be walked where it points
        if not base.is_dir():
            return iter(())
        keys = []
        for dirpath, dirnames, filenames in os.walk(base):  # symlinked folders are not followed
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            rel = Path(dirpath).relative_to(self.root)
            for f in filenames:
                if f.startswith("."):
                    continue
                key = str(rel / f) if str(rel) != "." else f
                try:
                    keys.append(check_key(key))
                except UsageError:
                    continue  # a name no key can have: not reprobundle's, and never addressed
        return iter(sorted(keys))

    def is_empty(self) -> bool:
        try:
            with os.scandir(self.root) as entries:  # the top only: a home folder or /proc is not walked
                return not any(not e.name.startswith(".") for e in entries)
        except (FileNotFoundError, NotADirectoryError):
            return True
        except OSError as e:
            raise StoreError(f"cannot read the store {self.url}: {e.strerror}") from None

    def delete(self, key: str) -> None:
        path = self._path(key)
        self._folder(path.parent)
        try:
            unlink_quietly(path)
        except (IsADirectoryError, NotADirectoryError):
            pass  # a folder, or below a file: no value under this key
        except PermissionError:
            raise StorePermissionError(f"cannot delete {key} in {self.url}: permission denied") from None

    # -------------------------------------------------------------------------------- garbage collection
    def modified(self, key: str) -> float | None:
        try:
            return os.lstat(self._path(key)).st_mtime
        except OSError:
            return None

    def touch(self, key: str) -> bool:
        path = self._path(key)
        self._folder(path.parent)
        try:
            os.utime(path, follow_symlinks=False)
            return True
        except (FileNotFoundError, NotADirectoryError):
            return False
        except OSError:  # another user's file in a shared store: it is there, its time stays
            return self.exists(key)

    def lease(self) -> Lease:
        return FileLease(self._folder(self._tmp))

    @contextmanager
    def collecting(self, *, exclude: Lease | None = None) -> Iterator[set[str]]:
        with gate(self._folder(self._tmp, make=True), exclusive=True):
            yield leased_keys(self._tmp, exclude=getattr(exclude, "path", None))

    def delete_if_stale(self, key: str, cutoff: float | None) -> bool:
        path = self._path(key)
        self._folder(path.parent)
        try:
            if cutoff is not None and os.lstat(path).st_mtime >= cutoff:
                return False
            os.unlink(path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return False
        except PermissionError:
            raise StorePermissionError(f"cannot delete {key} in {self.url}: permission denied") from None
        return True

    def check_folders(self, prefixes: tuple[str, ...] = ("blobs", "bundles", "runs", "tags", ".tmp")) -> None:
        """Refuse (StoreFolderError naming it) a store whose folders under `prefixes` hold a symbolic link to a
        folder: gc runs this first, since a linked `bundles/<name>` would hide manifests whose blobs it would then
        delete, and a linked blob folder would be deleted in where it points."""
        for prefix in prefixes:
            base = self._folder(self.root / prefix)
            for dirpath, dirnames, _ in os.walk(base):  # a link to a folder is listed in dirnames, not followed
                for name in dirnames:
                    self._folder(Path(dirpath) / name)
                if prefix == ".tmp":
                    dirnames[:] = []  # scratch folders: swept whole by their lock, never walked

    def remove_stale_temp_files(self, older_than_s: float = STALE_TEMP_S) -> int:
        """Delete what killed writers left in `<root>/.tmp`: temp files older than `older_than_s`, leases and
        scratch folders whose process is gone. Returns how many."""
        return sweep(self._folder(self._tmp), stale_s=older_than_s)


class _StagedFile(Staged):
    def __init__(self, store: LocalStore, path: Path) -> None:
        self.store, self.path = store, path

    def publish(self, key: str, *, create_only: bool = False) -> None:
        check_key(key)
        with open(self.path, "rb") as f:
            os.fsync(f.fileno())
        self.store._publish(self.path, key, create_only)  # removes the temp file, whatever happens

    def discard(self) -> None:
        unlink_quietly(self.path)
        untrack(self.path)
