"""Read-only stores over plain HTTP(S): a store folder served by any web server (a public bucket's https form), or a
bundle zip at an https URL (a GitHub attachment), through fsspec's HTTP filesystem.

- `HttpStore`: `https://host/prefix` holding the store layout. It reads keys by URL; it cannot list, so refs name a
  version or tag (`NAME@3`, `NAME@TAG`), and it holds no runs to show. Its blobs go through the persistent blob
  cache like a bucket's, so a second replay downloads nothing.
- `HttpZipStore`: a zip at an https URL, downloaded once into the cache (`<cache>/http/`; revalidated by size and
  ETag when the server answers a HEAD), then read in place like a local zip. Its URL stays the https one, so what
  reprobundle prints about it is the URL again.
Limits, each a clear error: REPROBUNDLE_HTTP_TIMEOUT seconds to connect and between bytes (default 30);
REPROBUNDLE_HTTP_DEADLINE seconds for a whole request, body included, however steadily a server drips (default 300,
StoreTimeoutError); REPROBUNDLE_HTTP_MAX_DOWNLOAD bytes of a zip download (default 4G, DownloadTooLargeError,
judged from Content-Length first and counted while it arrives); the rate floor of every body and the record
deadline (http_client.RateFloor, StoreTimeoutError). Values are read as streams: a record (marker, tag,
manifest, run) is read with `get_bounded`, which stops one byte past its limit whatever the server sends. A redirect
to anything but http(s) (file://) is refused as such (UnsafeRedirectError). Timeouts and retries (a failed
connection, 429/5xx; a request is not retried past the deadline) are the policy of http_client.py.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable, Iterator, TypeVar

from ..config import settings
from ..errors import (
    DownloadTooLargeError,
    NotFoundError,
    StoreTimeoutError,
    StoreUnreachableError,
    UnsafeRedirectError,
    UsageError,
    space_for,
)
from ..text import quoted
from ..units import human_bytes, parse_size
from .base import COPY_CHUNK, Capabilities, Store, check_key, read_at_most, too_large, unlink_quietly
from .http_client import (
    ENV_DEADLINE,
    ENV_TIMEOUT,
    RateFloor,
    causes,
    client_timeout,
    deadline,
    is_transient_aiohttp,
    timeout,
    with_retries,
)
from .safe_folders import inside, make_inside
from .watchdog import track, untrack
from .zip_store import ZipStore

T = TypeVar("T")

ENV_MAX_DOWNLOAD = "REPROBUNDLE_HTTP_MAX_DOWNLOAD"
DEFAULT_MAX_DOWNLOAD = 4 << 30


def max_download() -> int:
    """The most bytes a zip download may have: $REPROBUNDLE_HTTP_MAX_DOWNLOAD ('500M', '2G', bytes), else 4 GiB."""
    raw = settings().http_max_download
    if not raw:
        return DEFAULT_MAX_DOWNLOAD
    try:
        return parse_size(raw)
    except ValueError:
        raise UsageError(f"{ENV_MAX_DOWNLOAD}={quoted(raw, 40)} is not a size",
                         hint="write bytes, or a number with K, M or G (e.g. 2G)") from None


def _filesystem():
    import fsspec

    return fsspec.filesystem("http", client_kwargs={"timeout": client_timeout()})


def _retried(what: str, op: Callable[[], T]) -> T:
    """`op` (a request that has not yet returned a byte to the caller) with the helper's retries; not past the
    deadline, so REPROBUNDLE_HTTP_DEADLINE still bounds it."""
    return with_retries(op, what, transient=is_transient_aiohttp, give_up_after=deadline())


def _failure(url: str, e: BaseException) -> Exception:
    """The typed error for a failed web request (a 404 is the caller's NotFoundError)."""
    import asyncio

    for cause in causes(e):
        if type(cause).__name__ in ("NonHttpUrlRedirectClientError", "InvalidUrlRedirectClientError"):
            return UnsafeRedirectError(f"{url} redirects to {quoted(cause, 120)}, which is not an http(s) URL: refused",
                                       hint="reprobundle follows redirects to http(s) URLs only; use the final URL "
                                            "if you trust it")
    for cause in causes(e):
        if isinstance(cause, (TimeoutError, asyncio.TimeoutError)):
            return StoreTimeoutError(f"{url} was not read within {deadline():g} s (or a gap between bytes exceeded "
                                     f"{timeout():g} s)",
                                     hint=f"{ENV_DEADLINE} bounds a whole request, {ENV_TIMEOUT} a gap between bytes")
    if isinstance(e, FileNotFoundError):
        return NotFoundError(f"nothing at {url} (HTTP 404)")
    return _unreachable(url, e)


def _unreachable(url: str, e: BaseException) -> StoreUnreachableError:
    return StoreUnreachableError(f"cannot read {url}: {type(e).__name__}: {e}".rstrip(": "),
                                 hint=f"check the URL and the network ({ENV_TIMEOUT} sets the timeout)")


class _Body(io.RawIOBase):
    """A response body as a stream, its failures typed (`_failure`): reads never hold more than they ask for."""

    def __init__(self, fs, url: str, *, record: bool = False) -> None:
        self.url = url
        self._floor = RateFloor(url, record=record)  # started before the request: a record's time includes it
        try:
            # one GET, streamed; size=-1: no HEAD first
            self._f = _retried(f"GET {url}", lambda: fs.open(url, "rb", block_size=0, size=-1))
        except Exception as e:
            raise _failure(url, e) from None
        self._floor.body_started()

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            data = self._f.read(len(b))
        except Exception as e:
            raise _failure(self.url, e) from None
        self._floor.moved(len(data))
        b[:len(data)] = data
        return len(data)

    def close(self) -> None:
        try:
            self._f.close()
        except Exception:
            pass
        super().close()


class HttpStore(Store):
    """A store folder at an http(s) URL: read-only, not listable."""

    capabilities = Capabilities(writable=False, local=False, shareable=True)

    def __init__(self, url: str) -> None:
        self.url = url.rstrip("/")
        self.fs = _filesystem()

    def _url(self, key: str) -> str:
        return f"{self.url}/{check_key(key)}"

    def _call(self, key: str, fn):
        try:
            return fn(self._url(key))
        except UsageError:
            raise
        except Exception as e:  # aiohttp and asyncio raise many types for an unreachable or failing server
            raise self._typed(key, e) from None

    def _typed(self, key: str, e: BaseException) -> Exception:
        failure = e if isinstance(e, (NotFoundError, StoreUnreachableError, UnsafeRedirectError)) \
            else _failure(self._url(key), e)
        if isinstance(failure, NotFoundError):
            return NotFoundError(f"{key} not found in {self.url}")
        return failure

    def get(self, key: str) -> bytes:
        with self.open_read(key) as f:
            return f.read()

    def open_read(self, key: str, *, record: bool = False) -> BinaryIO:
        try:
            return io.BufferedReader(_Body(self.fs, self._url(key), record=record), 1 << 16)  # type: ignore[return-value]
        except UsageError:  # a setting of the HTTP policy that is not a number
            raise
        except Exception as e:
            raise self._typed(key, e) from None

    def get_bounded(self, key: str, max_bytes: int) -> bytes:
        """As the base's, and held to the record deadline besides the rate floor (see http_client.RateFloor)."""
        with self.open_read(key, record=True) as f:
            data = read_at_most(f, max_bytes + 1)
        if len(data) > max_bytes:
            raise too_large(key, self.url, max_bytes)
        return data

    def put(self, key: str, data: bytes | memoryview, *, create_only: bool = False) -> None:
        self.check_writable()

    def delete(self, key: str) -> None:
        self.check_writable()

    def exists(self, key: str) -> bool:
        try:
            self.size(key)
            return True
        except NotFoundError:
            return False

    def size(self, key: str) -> int:
        info = self._call(key, lambda url: _retried(f"HEAD {url}", lambda: self.fs.info(url)))
        if info.get("size") is None:  # no Content-Length: count it as it streams (held to the deadline)
            n = 0
            with self.open_read(key) as f:
                while chunk := f.read(COPY_CHUNK):
                    n += len(chunk)
            return n
        return int(info["size"])

    def list(self, prefix: str = "") -> Iterator[str]:
        raise UsageError(f"{self.url} is an http(s) store, which cannot be listed",
                         hint="name a version or a tag: URL/NAME@3 or URL/NAME@TAG")


class HttpZipStore(ZipStore):
    """A bundle zip at an http(s) URL, read from a cached download."""

    capabilities = Capabilities(writable=False, local=True, shareable=True, single_file=True)

    def __init__(self, url: str) -> None:
        super().__init__(download(url))
        self.url = url


def download(url: str) -> Path:
    """The file at `url` in the download cache (fetched now unless the cached copy still matches); a NotFoundError
    for a 404, StoreUnreachableError when the server cannot be reached and nothing is cached."""
    from ..config import cache_dir

    folder = inside(cache_dir(), "http")
    digest = hashlib.sha256(url.encode()).hexdigest()[:32]
    name = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in url.rstrip("/").rsplit("/", 1)[-1])[-80:]
    path, meta_path = folder / f"{digest}-{name}", folder / f"{digest}.json"
    fs = _filesystem()
    limit = max_download()
    try:
        info = _retried(f"HEAD {url}", lambda: fs.info(url))
    except Exception as e:
        failure = _failure(url, e)
        if isinstance(failure, StoreUnreachableError) and path.is_file():
            return path  # offline: the copy fetched before (attachment URLs do not change)
        raise failure from None
    stamp = {"url": url, "size": info.get("size"), "etag": info.get("ETag") or info.get("etag")}
    if stamp["size"] is not None and int(stamp["size"]) > limit:  # said up front: nothing is downloaded
        raise _too_large(url, limit, f"it says it has {human_bytes(int(stamp['size']))}")
    if path.is_file() and meta_path.is_file():
        try:
            if json.loads(meta_path.read_text()) == stamp and (stamp["size"] in (None, path.stat().st_size)):
                return path
        except ValueError:
            pass
    make_inside(cache_dir(), folder)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".part-")
    track(tmp)
    try:
        with os.fdopen(fd, "wb") as out, space_for(folder, stamp["size"], f"the download of {url}"):
            _copy_capped(_Body(fs, url), out, url, limit)
        os.replace(tmp, path)
    finally:
        unlink_quietly(tmp)
        untrack(tmp)
    meta_path.write_text(json.dumps(stamp))
    return path


def _too_large(url: str, limit: int, why: str) -> DownloadTooLargeError:
    return DownloadTooLargeError(f"{url} is larger than the {human_bytes(limit)} a download may have ({why})",
                                 hint=f"set {ENV_MAX_DOWNLOAD} higher (e.g. 16G) if you expect a zip that large")


def _copy_capped(body: _Body, out: BinaryIO, url: str, limit: int) -> None:
    """Copy the body into `out`, refusing it as soon as it passes `limit` bytes (whatever Content-Length said)."""
    n = 0
    with body:
        while True:
            chunk = body.read(min(COPY_CHUNK, limit + 1 - n))
            if not chunk:
                return
            n += len(chunk)
            if n > limit:
                raise _too_large(url, limit, "it sent more")
            out.write(chunk)
