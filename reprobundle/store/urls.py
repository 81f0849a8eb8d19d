"""Opening a store from its URL: one entry per scheme; backends are imported only when used."""

from __future__ import annotations

import os

from ..errors import UsageError
from ..text import quoted
from .base import Store


def is_zip_url(url: str) -> bool:
    return url.startswith("zip://") or url.lower().endswith(".zip")


def _zip(url: str) -> Store:
    from .zip_store import ZipStore

    path = url
    if url.startswith("zip://"):
        path = url[len("zip://"):]
        path = path.split("::", 1)[1] if "::" in path else path  # zip://::FILE.zip (fsspec's form) or zip://FILE
    path = path.removeprefix("file://")
    if not path.strip():
        raise UsageError(f"{quoted(url)} names no zip file", hint="give the .zip file's path: FILE.zip or zip://::FILE.zip")
    return ZipStore(path)


def _memory(url: str) -> Store:
    import fsspec

    from .fsspec_store import FsspecStore

    return FsspecStore(fsspec.filesystem("memory"), "/" + url[len("memory://"):].strip("/"), url.rstrip("/"))


def _http(url: str) -> Store:
    from .http import HttpStore

    return HttpStore(url)


def _gcs(url: str) -> Store:
    from .gcs import GCSStore

    return GCSStore(url)


def _folder(url: str) -> Store:
    from .local import LocalStore

    path = url.removeprefix("file://")
    if not path.strip():  # "file://" alone would be the current folder
        raise UsageError(f"{quoted(url)} names no folder", hint="give the store folder's path: file:///path/to/store")
    return LocalStore(path)


SCHEMES = {"memory": _memory, "gs": _gcs, "gcs": _gcs, "file": _folder, "http": _http, "https": _http}


def open_store(url: str | os.PathLike | None = None) -> Store:
    """Open the store at `url`: a folder path or file://, memory://, gs://bucket/prefix, https://host/prefix
    (read-only), or a .zip file or https URL (also written zip://::path.zip). None means $REPROBUNDLE_STORE or the
    default local folder."""
    from ..config import default_store_url

    url = os.fspath(url) if url is not None else default_store_url()
    if not url:
        raise UsageError("empty store URL")
    if is_zip_url(url):
        if url.lower().startswith(("https://", "http://")):
            from .http import HttpZipStore

            return HttpZipStore(url)  # downloaded once into the cache, then read like a local zip
        return _zip(url)
    scheme, sep, _ = url.partition("://")
    if not sep:
        return _folder(url)
    if scheme not in SCHEMES:
        raise UsageError(
            f"unsupported store URL {quoted(url)}",
            hint="use a folder path, file://, memory://, gs://bucket/prefix, https://host/prefix, or a .zip file",
        )
    return SCHEMES[scheme](url)
