"""The one error tree of reprobundle.

Every failure a user can cause or meet is a subclass of `ReproBundleError`. Each carries a one-line message
(what is wrong) and a hint (what to do). The CLI maps each type to an exit code and prints both; tracebacks
appear only with REPROBUNDLE_DEBUG=1.
"""

from __future__ import annotations

import re
from typing import Any, overload


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


class StoreError(ReproBundleError):
    """The store could not be reached or misbehaved."""

    exit_code = 3


class StoreUnreachableError(StoreError):
    pass


class StorePermissionError(StoreError):
    pass


class ReadOnlyStoreError(StoreError):
    pass


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


class ClusterError(ReproBundleError):
    """The compute cluster a sweep fans out over (Ray) could not be reached or refused the connection. Exit code 3,
    as a store that cannot be reached."""

    exit_code = 3


# The exit codes that are no error type's (the CLI maps each outcome to one; README "Exit codes").
EXIT_NOT_OK = 9  # a replay or sweep ran, but a version's outputs mismatched or it did not run
EXIT_BUG = 70  # an unexpected exception: a bug in reprobundle (EX_SOFTWARE)
EXIT_INTERRUPTED = 130  # Ctrl-C (128 + SIGINT)
EXIT_TERMINATED = 143  # SIGTERM (128 + SIGTERM)


def clean(text: object, limit: int | None = 200, *, newlines: bool = False) -> str:
    """`text` made safe to print on a terminal, cut to `limit` characters (with "…"; None: no cut).

    Every character that is not printable (control characters, so escape sequences lose their ESC; C1 controls;
    bidirectional overrides and other format characters) is written as its Python escape (`\\x1b`, `\\u202e`); a
    newline too unless `newlines` keeps them (text laid out in lines, not one value). Everything reprobundle prints
    from a bundle, a store or an error message goes through this, or through `terminal_text` for whole outputs.
    """
    s = text if isinstance(text, str) else str(text)
    if s.isprintable():  # the common case, at C speed
        return s if limit is None or len(s) <= limit else s[:max(limit - 1, 0)] + "…"
    if limit is not None and len(s) > limit * 8:  # escaping never shortens: cut what can never be shown first
        s = s[:limit * 8]
    out = []
    size = 0
    for ch in s:
        if ch.isprintable() or ch == " " or (newlines and ch in "\n\t"):
            piece = ch
        else:
            piece = ch.encode("unicode_escape").decode("ascii")
        out.append(piece)
        size += len(piece)
        if limit is not None and size > limit:
            break
    shown = "".join(out)
    return shown if limit is None or len(shown) <= limit else shown[:max(limit - 1, 0)] + "…"


def quoted(value: object, limit: int = 80) -> str:
    """A value from outside (a ref, a name, a key, a file's content) quoted for a message: `'text'`, escaped and cut
    by `clean`, so a message never echoes megabytes or terminal controls."""
    return "'" + clean(value, limit).replace("'", "\\'") + "'"


_SGR_RE = re.compile(r"\x1b\[[0-9;]*m")


def terminal_text(text: str) -> str:
    """A whole output (lines laid out by render/) made safe for a terminal: what `clean` escapes is escaped, except
    newlines, tabs and the SGR colour sequences (`ESC [ ... m`) a renderer adds itself. The net under the per-value
    `clean` calls: it stops screen clearing, cursor moves and titles, not forged lines (only `clean` stops those)."""
    if text.isprintable():
        return text
    def lines(part: str) -> str:
        return "\n".join(clean(line, None, newlines=True) for line in part.split("\n"))

    out = []
    pos = 0
    for m in _SGR_RE.finditer(text):
        out.append(lines(text[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(lines(text[pos:]))
    return "".join(out)


@overload
def clean_values(obj: dict[Any, Any]) -> dict[Any, Any]: ...


@overload
def clean_values(obj: object) -> object: ...


def clean_values(obj: object) -> object:
    """A copy of plain data (maps, lists, strings...) with every string made one safe line by `clean`: what a
    renderer that lays out values from bundles and run records gets, so none of them adds a line or a control."""
    if isinstance(obj, str):
        return clean(obj, None)
    if isinstance(obj, dict):
        return {clean_values(k): clean_values(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean_values(v) for v in obj]
    return obj


def cut(text: str, width: int) -> str:
    """`text` cut to `width` characters, the last one an ellipsis when it had more (a table cell, a status line)."""
    return text if len(text) <= width else text[:max(1, width - 1)] + "…"


def first_line(text: object, limit: int = 200) -> str:
    """The first non-empty line of a message, escaped and cut to `limit` characters by `clean`: what one error line
    shows."""
    lines = [line for line in str(text or "").strip().splitlines() if line.strip()]
    return clean(lines[0].strip() if lines else "", limit)


def exception_line(e: BaseException, limit: int = 200) -> str:
    """`TypeError: the first line of its message`: a foreign exception in one line."""
    return f"{type(e).__name__}: {first_line(e, limit)}"
