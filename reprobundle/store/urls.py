"""Opening a store from its URL: one entry per scheme; backends are imported only when used."""

from __future__ import annotations

import os

from ..errors import UsageError
from .base import Store


def is_zip_url(url: str) -> bool:
    return url.startswith("zip://") or url.lower().endswith(".zip")


def _zip(url: str) -> Store:
    from .zip_store import ZipStore

    path = url.split("::", 1)[1] if url.startswith("zip://") else url
    return ZipStore(path.removeprefix("file://"))


def _memory(url: str) -> Store:
    import fsspec

    from .fsspec_store import FsspecStore

    return FsspecStore(fsspec.filesystem("memory"), "/" + url[len("memory://"):].strip("/"), url.rstrip("/"))


def _gcs(url: str) -> Store:
    from .gcs import GCSStore

    return GCSStore(url)


def _folder(url: str) -> Store:
    from .local import LocalStore

    return LocalStore(url.removeprefix("file://"))


SCHEMES = {"memory": _memory, "gs": _gcs, "gcs": _gcs, "file": _folder}


def open_store(url: str | os.PathLike | None = None) -> Store:
    """Open the store at `url`: a folder path or file://, memory://, gs://bucket/prefix, or a .zip file
    (also written zip://::path.zip). None means $REPROBUNDLE_STORE or the default local folder."""
    from ..config import default_store_url

    url = os.fspath(url) if url is not None else default_store_url()
    if not url:
        raise UsageError("empty store URL")
    if is_zip_url(url):
        return _zip(url)
    scheme, sep, _ = url.partition("://")
    if not sep:
        return _folder(url)
    if scheme not in SCHEMES:
        raise UsageError(
            f"unsupported store URL {url!r}",
            hint="use a folder path, file://, memory://, gs://bucket/prefix, or a .zip file",
        )
    return SCHEMES[scheme](url)
