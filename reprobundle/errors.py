"""The one error tree of reprobundle.

Every failure a user can cause or meet is a subclass of `ReproBundleError`. Each carries a one-line message
(what is wrong) and a hint (what to do). The CLI maps each type to an exit code and prints both; tracebacks
appear only with REPROBUNDLE_DEBUG=1.
"""

from __future__ import annotations

import errno
from contextlib import contextmanager
from typing import Any, Iterator

from .text import clean
from .worker.protocol import NO_SPACE_ERRNOS
from .worker.protocol import is_no_space as is_no_space  # one definition, the worker's: it cannot import the host


class ReproBundleError(Exception):
    """Base of every error reprobundle raises on purpose."""

    exit_code = 1

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class UsageError(ReproBundleError):
    """The user asked for something malformed: a bad name, ref, option or file."""

    exit_code = 2


class InvalidNameError(UsageError):
    pass


class InvalidRefError(UsageError):
    pass


class ScriptError(UsageError):
    """A pack script could not be loaded or its factory is missing or returned the wrong thing."""


class InputMismatchError(UsageError):
    """Arguments do not match the shapes or dtypes of the exported function."""


class TimeSpentError(ReproBundleError):
    """--max-time would be spent before a step could end: it is not started, and what was answered before it is
    kept (run/spent.Ledger refuses the probe; the search says what it had narrowed)."""


class StoreError(ReproBundleError):
    """The store could not be reached or misbehaved."""

    exit_code = 3


class StoreUnreachableError(StoreError):
    pass


class StorePermissionError(StoreError):
    pass


class ReadOnlyStoreError(StoreError):
    pass


class StoreTimeoutError(StoreUnreachableError):
    """A web request did not finish within its total deadline (REPROBUNDLE_HTTP_DEADLINE), however steadily the
    server kept sending; or its body moved slower than the rate floor (REPROBUNDLE_HTTP_MIN_RATE over
    REPROBUNDLE_HTTP_RATE_WINDOW), or a record took longer than REPROBUNDLE_HTTP_RECORD_DEADLINE."""


class DownloadTooLargeError(StoreError):
    """A download (a zip at an https URL) is larger than the most reprobundle fetches (REPROBUNDLE_HTTP_MAX_DOWNLOAD)."""


class UnsafeRedirectError(StoreError):
    """A web server redirected to a URL that is not http(s) (file://, ftp://...): refused."""


class StoreFolderError(StoreError):
    """A folder reprobundle walks, writes or deletes in (a store's `.tmp`, `blobs/sha256/<xx>`, `bundles/`, `runs/`,
    `tags/`, a cache's work folders) is not the real folder inside its root: a symbolic link, or a file. Nothing is
    walked or deleted through it."""


class NotFoundError(ReproBundleError):
    exit_code = 4


class BundleNotFoundError(NotFoundError):
    pass


class BlobNotFoundError(NotFoundError):
    pass


class AlreadyExistsError(ReproBundleError):
    """A create-only write found the key taken (used internally to allocate versions)."""

    exit_code = 5


class FormatError(ReproBundleError):
    """Stored bytes are not what the format says: corrupt, truncated, or from the future."""

    exit_code = 6


class CorruptBundleError(FormatError):
    pass


class CorruptBlobError(FormatError):
    pass


class UnsupportedFormatVersionError(FormatError):
    pass


class StoreLayoutError(UnsupportedFormatVersionError):
    """The store's marker declares a layout this reprobundle does not know (a newer version, or not a reprobundle
    marker at all): nothing in it is read or written."""


class EnvironmentCreationError(ReproBundleError):
    exit_code = 7


class NoSuitablePythonError(EnvironmentCreationError):
    pass


class ReplayError(ReproBundleError):
    exit_code = 8


class WorkerLimitError(ReplayError):
    """A worker went past one of its limits (run/execution.py): a phase's time, or the memory free for it."""


class PhaseLimitError(WorkerLimitError):
    """A worker stayed in one phase (load, compile, its calls of the function) past that phase's limit: a program
    that never returns, or one far slower than its reference."""


class MemoryLimitError(WorkerLimitError):
    """A worker's job could not fit in the memory free for it: refused before running (XLA's memory analysis, the
    inputs' declared sizes), or ended by its memory limit."""


class DiskFullError(ReproBundleError, OSError):
    """No space to write: a full disk, a quota, or a file-size limit (ENOSPC, EDQUOT, EFBIG). Also an OSError, so
    code that handles a failed write as one still does; `filename` is the folder that was full."""

    exit_code = 10

    def __init__(self, message: str, *, hint: str = "", folder: str = "") -> None:
        ReproBundleError.__init__(self, message, hint=hint)
        self.errno = errno.ENOSPC
        self.strerror = "No space left on device"
        self.filename = folder

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, tuple[str, str, str]]:  # pickled across processes (Ray, pools) as what it is
        return (_disk_full, (self.message, self.hint, self.filename))


def _disk_full(message: str, hint: str, folder: str) -> "DiskFullError":
    return DiskFullError(message, hint=hint, folder=folder)


def disk_full(folder: object, needed: int | None = None, what: str = "", *, work: bool = False) -> DiskFullError:
    """The DiskFullError for a write into `folder` that found no room; `needed`: the bytes it had to write. `work`:
    `folder` is a work folder, so one in the temp folder also names TMPDIR (where to point them elsewhere)."""
    from .units import human_bytes

    need = f"{human_bytes(needed)} " if needed else ""
    purpose = f" for {what}" if what else ""
    temp = _temp_folder_of(folder) if work else None
    where = f" ({'the' if _inside(temp, folder) else 'in the'} temp folder, TMPDIR={clean(temp, 300)})" if temp else ""
    elsewhere = ", or set TMPDIR to a folder with room" if temp else ""
    return DiskFullError(f"no space left in {clean(folder, 300)}{where}: {need or 'more room '}was needed{purpose}",
                         hint=f"free space there (or raise the quota or file-size limit){elsewhere}, then run the "
                              "command again; nothing half-written was kept", folder=str(folder))


def _temp_folder_of(folder: object) -> str | None:
    """The temp folder (TMPDIR, else the system's) when `folder` is in it: work folders live there."""
    import os
    import tempfile

    temp = os.environ.get("TMPDIR") or tempfile.gettempdir()
    return temp if _inside(folder, temp) else None


def _inside(inner: object, outer: object) -> bool:
    import os

    try:
        inner_path, outer_path = os.path.realpath(os.fspath(str(inner))), os.path.realpath(os.fspath(str(outer)))
    except (OSError, ValueError):
        return False
    return inner_path == outer_path or inner_path.startswith(outer_path.rstrip(os.sep) + os.sep)


@contextmanager
def space_for(folder: object, needed: int | None = None, what: str = "", *, work: bool = False) -> Iterator[None]:
    """Turn a write that finds no room inside the block into `disk_full(folder, needed, what, work=work)`."""
    try:
        yield
    except DiskFullError as e:
        if work and "TMPDIR" not in e.message and _temp_folder_of(e.filename) and _inside(e.filename, folder):
            raise disk_full(e.filename, None, what, work=True) from None  # a store in a work folder: say where
        raise
    except OSError as e:
        if e.errno in NO_SPACE_ERRNOS:
            raise no_space_error(e, folder, needed, what, work=work) from None
        raise


def no_space_error(e: OSError, folder: object = None, needed: int | None = None, what: str = "", *,
                   work: bool = False) -> DiskFullError:
    """The DiskFullError for a no-space OSError: it names `folder`, or the folder of the file it was writing when
    that lies elsewhere (or when no folder is known)."""
    import os

    if isinstance(e, DiskFullError):
        return e
    written = e.filename if isinstance(e.filename, (str, os.PathLike)) else None
    if written is not None and (folder is None or not os.fspath(written).startswith(os.fspath(str(folder)))):
        folder = os.path.dirname(os.fspath(written)) or written
    return disk_full(folder if folder is not None else "a folder being written", needed, what, work=work)


class ClusterError(ReproBundleError):
    """The compute cluster a sweep fans out over (Ray) could not be reached or refused the connection. Exit code 3,
    as a store that cannot be reached."""

    exit_code = 3


# The exit codes that are no error type's (the CLI maps each outcome to one; README "Exit codes").
EXIT_NOT_OK = 9  # a replay or sweep ran, but a version's outputs mismatched or it did not run
EXIT_BUG = 70  # an unexpected exception: a bug in reprobundle (EX_SOFTWARE)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM)
