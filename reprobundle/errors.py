"""The one error tree of reprobundle.

Every failure a user can cause or meet is a subclass of `ReproBundleError`. Each carries a one-line message
(what is wrong) and a hint (what to do). The CLI maps each type to an exit code and prints both; tracebacks
appear only with REPROBUNDLE_DEBUG=1.
"""

from __future__ import annotations


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


class EnvironmentCreationError(ReproBundleError):
    exit_code = 7


class NoSuitablePythonError(EnvironmentCreationError):
    pass


class ReplayError(ReproBundleError):
    exit_code = 8
