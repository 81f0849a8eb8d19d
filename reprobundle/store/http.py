"""Read-only stores over plain HTTP(S): a store folder served by any web server (a public bucket's https form), or a
bundle zip at an https URL (a GitHub attachment), through fsspec's HTTP filesystem.

- `HttpStore`: `https://host/prefix` holding the store layout. It reads keys by URL; it cannot list, so refs name a
  version or tag (`NAME@3`, `NAME@TAG`), and it holds no runs to show. Its blobs go through the persistent blob
  cache like a bucket's, so a second replay downloads nothing.
- `HttpZipStore`: a zip at an https URL, downloaded once into the cache (`<cache>/http/`; revalidated by size and
  ETag when the server answers a HEAD), then read in place like a local zip. Its URL stays the https one, so what
  reprobundle prints about it is the URL again.
Timeouts: REPROBUNDLE_HTTP_TIMEOUT seconds to connect and between bytes (default 30).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator

from ..config import settings
from ..errors import NotFoundError, StoreUnreachableError, UsageError
from .base import Capabilities, Store, check_key, unlink_quietly
from .zip_store import ZipStore

ENV_TIMEOUT = "REPROBUNDLE_HTTP_TIMEOUT"
DEFAULT_TIMEOUT = 30.0


def _timeout() -> float:
    raw = settings().http_timeout
    try:
        return float(raw) if raw else DEFAULT_TIMEOUT
    except ValueError:
        raise UsageError(f"{ENV_TIMEOUT}={raw!r} is not a number of seconds") from None


def _filesystem():
    import aiohttp
    import fsspec

    t = _timeout()
    return fsspec.filesystem("http", client_kwargs={"timeout": aiohttp.ClientTimeout(total=None, connect=t,
                                                                                      sock_read=t)})


def _unreachable(url: str, e: BaseException) -> StoreUnreachableError:
    return StoreUnreachableError(f"cannot read {url}: {type(e).__name__}: {e}".rstrip(": "),
                                 hint=f"check the URL and the network ({ENV_TIMEOUT} sets the timeout)")


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
        except FileNotFoundError:
            raise NotFoundError(f"{key} not found in {self.url}") from None
        except UsageError:
            raise
        except Exception as e:  # aiohttp and asyncio raise many types for an unreachable or failing server
            raise _unreachable(self._url(key), e) from None

    def get(self, key: str) -> bytes:
        return self._call(key, self.fs.cat_file)

    def open_read(self, key: str) -> BinaryIO:
        import io

        return io.BytesIO(self.get(key))

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
        info = self._call(key, self.fs.info)
        if info.get("size") is None:  # no Content-Length: fetch it to know
            return len(self.get(key))
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

    folder = cache_dir() / "http"
    digest = hashlib.sha256(url.encode()).hexdigest()[:32]
    name = "".join(ch if ch.isalnum() or ch in "._-" else "_" for ch in url.rstrip("/").rsplit("/", 1)[-1])[-80:]
    path, meta_path = folder / f"{digest}-{name}", folder / f"{digest}.json"
    fs = _filesystem()
    try:
        info = fs.info(url)
    except FileNotFoundError:
        raise NotFoundError(f"nothing at {url} (HTTP 404)") from None
    except Exception as e:
        if path.is_file():
            return path  # offline: the copy fetched before (attachment URLs do not change)
        raise _unreachable(url, e) from None
    stamp = {"url": url, "size": info.get("size"), "etag": info.get("ETag") or info.get("etag")}
    if path.is_file() and meta_path.is_file():
        try:
            if json.loads(meta_path.read_text()) == stamp and (stamp["size"] in (None, path.stat().st_size)):
                return path
        except ValueError:
            pass
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".part-")
    os.close(fd)
    try:
        fs.get_file(url, tmp)
        os.replace(tmp, path)
    except FileNotFoundError:
        raise NotFoundError(f"nothing at {url} (HTTP 404)") from None
    except Exception as e:
        raise _unreachable(url, e) from None
    finally:
        unlink_quietly(tmp)
    meta_path.write_text(json.dumps(stamp))
    return path
