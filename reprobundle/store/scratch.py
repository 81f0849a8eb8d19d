"""What lives only as long as the process that made it, marked by a lock the kernel drops when that process ends.

- Scratch folders (`scratch_dir`): the work folders of pack and replay, transfer staging, cache downloads. Each holds
  a lock file its process keeps locked (flock), so a folder whose lock nobody holds was left by a killed process
  (SIGKILL included: the kernel releases the lock), and `sweep` removes it whatever its age, while a running one's
  folder is never touched, however old.
- Leases (`FileLease`): a running writer's hold on the store keys it is about to reference before its manifest or
  run record names them (a pack's blobs). gc keeps every key a live lease names (see LocalStore.collecting).
- `sweep` also removes loose files (temp files of killed writers) once they are older than `stale_s`.

Where flock is unavailable (another OS, some network filesystems) leases hold nothing and scratch folders are
judged by age alone; the grace period of gc still protects writers then.

flock directly, not the `filelock` package (which envs/env_folders.py uses for its plain exclusive lock): this module
needs what filelock does not offer: shared locks (the gc gate), a lock on a folder's own descriptor (no file left
behind), a lock file created with O_EXCL and kept for the process's lifetime, and probing another process's lock
(`is_held`) without creating or following the file.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Iterator

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX
    fcntl = None  # type: ignore[assignment]

from ..errors import StoreError, disk_full, is_no_space, space_for
from .base import Lease
from .watchdog import remove_tracked, track, untrack

log = logging.getLogger(__name__)

LOCK_FILE = ".reprobundle-lock"
LEASE_PREFIX = "lease-"
STAGING_SUFFIX = ".new"  # a lock file or lease being created: not yet locked, so judged by its age
STALE_TEMP_S = 3600.0  # a loose temp file (an unlocked writer's) older than this was left by a killed process
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def _flock(fd: int, how: int) -> bool:
    """Lock `fd`; False where the lock is taken (non-blocking) or the filesystem has no locks."""
    if fcntl is None:
        return False
    try:
        fcntl.flock(fd, how)
        return True
    except OSError:  # BlockingIOError: taken; ENOLCK/EOPNOTSUPP: no locks here
        return False


def _locked_new_file(path: Path) -> int | None:
    """A new file at `path`, locked by this process; None where it cannot be created or locked.

    It is created and locked under a staging name (`path` + STAGING_SUFFIX, which `sweep` judges by age alone) and
    only then renamed to `path`: a sweep that tests the lock at `path` never finds it unlocked, and never holds its
    own test lock there at the moment this process takes the lock (either would end a live process's folder or
    lease; seen with 8 concurrent packs beside a gc loop)."""
    staging = path.with_name(path.name + STAGING_SUFFIX)
    try:
        fd = os.open(staging, os.O_RDWR | os.O_CREAT | os.O_EXCL | _O_CLOEXEC, 0o644)
    except OSError:
        return None
    if _flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB if fcntl else 0):
        try:
            os.rename(staging, path)
            return fd
        except OSError:
            pass
    os.close(fd)
    try:
        os.unlink(staging)
    except OSError:
        pass
    return None


def is_held(path: str | Path) -> bool | None:
    """Whether a live process holds the lock file at `path`: True, False (its process is gone), or None (no such
    file, or locks cannot be tested here)."""
    if fcntl is None:
        return None
    try:
        fd = os.open(path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        except OSError:
            return None
        return False
    finally:
        os.close(fd)  # releases the test lock


def temp_folder() -> Path:
    """Where pack, replay and isolate make their work folders: TMPDIR when it names a folder, even a full one (Python's
    tempfile would quietly pick another folder where it cannot write a probe file, and a full TMPDIR must be said,
    not dodged); else the system's temp folder."""
    named = os.environ.get("TMPDIR")
    if named and os.path.isdir(named):
        return Path(os.path.abspath(named))  # as tempfile's: a worker runs in another folder
    return Path(tempfile.gettempdir())


def no_room(folder: str | Path) -> bool:
    """Whether the filesystem of `folder` has (next to) no space left: under 64 KiB for this user. Asked after a
    process that writes there ended abnormally without saying why (its stderr may be on that disk too)."""
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < 64 << 10


@contextmanager
def scratch_dir(parent: str | Path, prefix: str) -> Iterator[Path]:
    """A new private folder under `parent` (mode 0700), locked while the block runs, removed after it (and by
    `sweep` if this process is killed before)."""
    parent = Path(parent)
    try:
        parent.mkdir(parents=True, exist_ok=True)
        path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    except OSError as e:
        if is_no_space(e):
            raise disk_full(parent, None, "a work folder", work=True) from None
        raise StoreError(f"cannot create a work folder in {parent}: {e.strerror}",
                         hint="make it writable, or point TMPDIR (work folders) or REPROBUNDLE_CACHE_DIR (the cache) "
                              "elsewhere") from None
    track(path)
    fd = _locked_new_file(path / LOCK_FILE)
    try:
        with space_for(parent, None, "the work files written there", work=True):  # a write that found no room
            yield path
    finally:
        remove_tracked(path)
        if fd is not None:
            os.close(fd)


def sweep(parent: str | Path, *, stale_s: float | None = STALE_TEMP_S, prefixes: tuple[str, ...] = ()) -> int:
    """Remove what killed processes left directly under `parent` (only entries named with one of `prefixes`, when
    given): scratch folders and leases whose lock nobody holds, and (unless `stale_s` is None, for folders shared
    with other programs such as the system's temp folder) folders without a lock and loose files older than
    `stale_s`. Entries of other users that cannot be removed are left. Returns how many entries went."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return 0
    now = time.time()
    removed = 0
    for entry in entries:
        if prefixes and not entry.name.startswith(prefixes):
            continue
        if _remove_if_left(entry, now, stale_s) and not os.path.lexists(entry.path):
            removed += 1
            log.info("removed %s, left by a process that is gone", entry.path)
    return removed


def _remove_if_left(entry: os.DirEntry, now: float, stale_s: float | None) -> bool:
    """Remove `entry` when a killed process left it (see `sweep`); whether it tried."""
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        return False
    if stat.S_ISDIR(st.st_mode):
        if _kept(is_held(os.path.join(entry.path, LOCK_FILE)), st.st_mtime, now, stale_s):
            return False
        shutil.rmtree(entry.path, ignore_errors=True)
        return True
    lease = entry.name.startswith(LEASE_PREFIX) and not entry.name.endswith(STAGING_SUFFIX)
    held = is_held(entry.path) if lease else None
    if _kept(held, st.st_mtime, now, stale_s):
        return False
    try:
        os.unlink(entry.path)
    except OSError:
        return False
    return True


def _kept(held: bool | None, mtime: float, now: float, stale_s: float | None) -> bool:
    """Whether an entry stays: its lock is held, or it has no lock and is recent (or the folder is shared with
    other programs: `stale_s` None)."""
    return bool(held or (held is None and (stale_s is None or now - mtime <= stale_s)))


class FileLease(Lease):
    """A lease as a file `lease-<random>` in `folder`, locked by this process for its life, holding one key a line.

    Keys are appended under a shared lock of the gate (the lease folder itself), which gc takes exclusively while
    it reads the leases and deletes: so a key added before gc's look is seen, and one added after finds gc done
    (the writer checks whether the key exists only after adding it)."""

    def __init__(self, folder: Path) -> None:
        self.folder = Path(folder)
        self.path: Path | None = None
        self._fd: int | None = None
        self._keys: set[str] = set()
        self._lock = threading.Lock()
        self._failed = False

    def _open(self) -> None:
        if self._fd is not None or self._failed:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
        except OSError:
            self._failed = True
            return
        final = self.folder / f"{LEASE_PREFIX}{os.urandom(8).hex()}"
        fd = _locked_new_file(final)
        if fd is None:
            self._failed = True
            log.debug("no lease in %s (cannot create or lock a file there): the gc grace period alone", self.folder)
            return
        track(final)
        self._fd, self.path = fd, final

    def add(self, keys: Iterable[str]) -> None:
        """Hold `keys` from now on (call before checking whether they exist, then write or use them)."""
        with self._lock:
            new = [k for k in dict.fromkeys(keys) if k not in self._keys]
            if not new:
                return
            self._open()
            if self._fd is None:
                return
            data = "".join(k + "\n" for k in new).encode()
            with gate(self.folder, exclusive=False), space_for(self.folder, len(data), "a writer's lease"):
                os.write(self._fd, data)
            self._keys.update(new)

    def close(self) -> None:
        with self._lock:
            if self._fd is None:
                return
            if self.path is not None:
                try:
                    os.unlink(self.path)
                except OSError:
                    pass
                untrack(self.path)
            os.close(self._fd)
            self._fd = None
            self.path = None
            self._keys.clear()

    def __del__(self) -> None:  # a registry dropped without close: the lease goes with it
        try:
            self.close()
        except Exception:
            pass


@contextmanager
def gate(folder: Path, *, exclusive: bool) -> Iterator[bool]:
    """The gate between writers adding keys to leases (shared) and gc reading leases and deleting (exclusive): a
    lock on the folder itself, so it leaves no file behind. Yields whether it is held (False where the folder
    cannot be made or locked)."""
    fd = None
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _O_CLOEXEC)
    except OSError:
        fd = None
    try:
        held = fd is not None and _flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) if fcntl else 0)
        yield held
    finally:
        if fd is not None:
            os.close(fd)


def leased_keys(folder: Path, *, exclude: Path | None = None) -> set[str]:
    """Every key named by a live lease in `folder` (dead leases are removed by `sweep`)."""
    keys: set[str] = set()
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return keys
    for entry in entries:
        if not entry.name.startswith(LEASE_PREFIX) or entry.name.endswith(STAGING_SUFFIX):
            continue
        if exclude is not None and os.path.abspath(entry.path) == os.path.abspath(exclude):
            continue
        if is_held(entry.path) is False:
            continue
        try:
            fd = os.open(entry.path, os.O_RDONLY | _O_CLOEXEC | _O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                continue
            with os.fdopen(os.dup(fd), "rb") as f:
                data = f.read(64 << 20)
        finally:
            os.close(fd)
        keys.update(line for line in data.decode("ascii", "replace").split("\n") if line)
    return keys
