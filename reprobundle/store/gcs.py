"""Google Cloud Storage stores: gs://bucket/prefix (also gcs://), over gcsfs's JSON-API client.

gcsfs gives us credentials, the aiohttp session and the upload protocol helpers; the store drives the requests
itself so that it can promise what the Store contract asks:

- `put(create_only=True)` is atomic on the server: the upload carries `ifGenerationMatch=0` and GCS answers 412 if
  the object exists (-> AlreadyExistsError), so of N racing writers exactly one wins. Values up to 32 MiB go as one
  multipart request; larger ones as a resumable upload with the same precondition (checked at finalisation).
- Every write is atomic for readers: a GCS object becomes visible only when its upload is finalised; a failed
  resumable upload is cancelled, never left half-written.
- Failures surface as one clear reprobundle error each: NotFoundError (no such key), StoreUnreachableError (no
  such bucket, or the endpoint does not answer), StorePermissionError (401/403, with a hint about credentials).
- An unreachable endpoint fails fast: gcsfs alone retries for ~33 s; here connection failures stop after
  REPROBUNDLE_GCS_TIMEOUT seconds (default 5) and other transient errors after REPROBUNDLE_GCS_RETRIES retries.
- A create-only upload whose reply was lost is retried; if the retry meets 412 and the object holds exactly our
  bytes (same MD5), our first attempt landed and the write counts as ours.
- Values over 8 MiB are streamed as resumable uploads (up to 256 MiB per request, 8 MiB in memory at a time) and
  downloaded as parallel 16 MiB byte ranges written straight into a temp file that is renamed into place.
- `put_many`, `get_many` and `exists_many` move or check many keys concurrently on one event loop.

Configuration (constructor arguments win over the environment):
  STORAGE_EMULATOR_HOST        endpoint of an emulator (then credentials default to anonymous)
  REPROBUNDLE_GCS_TOKEN        'google_default' (default: application-default credentials), 'anon', 'cloud'
                               (GCE metadata), or the path of a service-account / authorized-user JSON file
  REPROBUNDLE_GCS_TIMEOUT      seconds to keep trying to connect before StoreUnreachableError (default 5)
  REPROBUNDLE_GCS_READ_TIMEOUT seconds without a byte from the server before a request fails (default 120)
  REPROBUNDLE_GCS_RETRIES      retries of transient failures (connection, 408/429/5xx) per request (default 3)
  REPROBUNDLE_GCS_CONCURRENCY  requests in flight for the *_many methods (default 16)
"""

from __future__ import annotations

import os

# gcsfs >= 2025 asks a gRPC "bucket type" service before operations unless this is off; against an emulator each
# call then stalls 40-60 s. It is read when gcsfs is imported, so set it before the import below.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import asyncio  # noqa: E402
import base64  # noqa: E402
import contextvars  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import random  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import BinaryIO, Callable, Iterable, Iterator  # noqa: E402
from urllib.parse import quote  # noqa: E402

import aiohttp  # noqa: E402
import fsspec.asyn  # noqa: E402
import gcsfs  # noqa: E402
import gcsfs.core  # noqa: E402
import gcsfs.retry  # noqa: E402
import requests.exceptions  # noqa: E402

from ..errors import (  # noqa: E402
    AlreadyExistsError,
    NotFoundError,
    StoreError,
    StorePermissionError,
    StoreUnreachableError,
    UsageError,
)
from .base import Capabilities, check_key, unlink_quietly  # noqa: E402
from .fsspec_store import FsspecStore  # noqa: E402

ENV_TOKEN = "REPROBUNDLE_GCS_TOKEN"
ENV_TIMEOUT = "REPROBUNDLE_GCS_TIMEOUT"
ENV_READ_TIMEOUT = "REPROBUNDLE_GCS_READ_TIMEOUT"
ENV_RETRIES = "REPROBUNDLE_GCS_RETRIES"
ENV_CONCURRENCY = "REPROBUNDLE_GCS_CONCURRENCY"

DEFAULT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 120.0
DEFAULT_RETRIES = 3
DEFAULT_CONCURRENCY = 16

GCS_ENDPOINT = "https://storage.googleapis.com"
GCS_CONSOLE = "https://console.cloud.google.com/storage/browser"
MiB = 1 << 20
SIMPLE_UPLOAD_MAX = 8 * MiB  # one multipart request up to this size; resumable above
CREATE_ONLY_SIMPLE_MAX = 32 * MiB  # create-only writes stay single-request (one precondition check) up to this
UPLOAD_CHUNK = 256 * MiB  # bytes per resumable request (streamed); a multiple of 256 KiB
STREAM_BLOCK = 8 * MiB  # what one resumable upload holds in memory at a time
DOWNLOAD_CHUNK = 16 * MiB  # byte range per GET for large values
RANGES_PER_FILE = 8  # parallel ranges of one large download
BACKOFF_FIRST = 0.5
BACKOFF_MAX = 8.0
CONTENT_TYPE = "application/octet-stream"
TOKEN_KEYWORDS = ("google_default", "anon", "cloud", "cache", "browser")

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_PREFIX_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._@+=~-]{0,199}$")

Progress = Callable[[int], None]

# Set per operation by create-only writes: each re-sent request is appended to it, so a 412 that answers a *retry*
# can be told apart (our first attempt may have created the object before its reply was lost).
_RETRY_LOG: contextvars.ContextVar[list | None] = contextvars.ContextVar("reprobundle_gcs_retry_log", default=None)


# -- the gcsfs filesystem with bounded retries ------------------------------------------------------------------

if os.environ.get("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "").lower() in ("true", "1"):
    _GCSFS_BASE = gcsfs.GCSFileSystem  # the user opted into zonal/HNS support: keep gcsfs's extended class
else:
    _GCSFS_BASE = gcsfs.core.GCSFileSystem  # plain JSON API even if gcsfs was imported earlier with it on

# gcsfs wraps _request in a fixed 6-try retry loop (~33 s of back-off); we call the undecorated function and retry
# ourselves, within bounds. (The fallback is the same few lines, should a gcsfs release drop `__wrapped__`.)
# `allow_redirects=False` is for resumable uploads: GCS answers 308 ("resume incomplete", no Location) to each
# partial request, which aiohttp would otherwise treat as a redirect.
async def _raw_request_copy(
    fs, method, path, *args, headers=None, json=None, data=None, allow_redirects=True, **kwargs
):
    await fs._set_session()
    if hasattr(data, "seek"):
        data.seek(0)
    async with fs.session.request(
        method=method, url=fs._format_path(path, args), params=fs._get_params(kwargs), json=json,
        headers=fs._get_headers(headers), data=data, timeout=fs.requests_timeout, allow_redirects=allow_redirects,
    ) as r:
        status, headers, info, contents = r.status, r.headers, r.request_info, await r.read()
        gcsfs.retry.validate_response(status, contents, path, args)
        return status, headers, info, contents


_RAW_REQUEST = getattr(gcsfs.core.GCSFileSystem._request, "__wrapped__", None) or _raw_request_copy


def _is_connect_error(e: BaseException) -> bool:
    """The TCP connection (or DNS lookup) could not be made at all."""
    return isinstance(e, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError))


def _is_transient(e: BaseException, attempt: int) -> bool:
    if isinstance(e, gcsfs.retry.HttpError):
        if e.code == 401:  # an access token that expired in flight; gcsfs refreshes it before the next try
            return attempt == 0 and "Invalid Credentials" in str(e.message)
        return e.code in (408, 429, 500, 502, 503, 504)
    if isinstance(e, gcsfs.retry.NonRetryableError):
        return False
    return isinstance(e, (aiohttp.ClientError, asyncio.TimeoutError, requests.exceptions.ProxyError))


class _BoundedGCSFileSystem(_GCSFS_BASE):
    """gcsfs with our retry policy: exponential back-off with jitter, at most `retries` retries, and connection
    failures given up after `connect_deadline` seconds in all."""

    def __init__(self, *args, retries: int = DEFAULT_RETRIES, connect_deadline: float = DEFAULT_TIMEOUT, **kwargs):
        self.rb_retries = retries
        self.rb_connect_deadline = connect_deadline
        super().__init__(*args, **kwargs)

    async def _request(self, method, path, *args, **kwargs):
        started = time.monotonic()
        attempt = 0
        while True:
            try:
                return await _RAW_REQUEST(self, method, path, *args, **kwargs)
            except Exception as e:
                if attempt >= self.rb_retries or not _is_transient(e, attempt):
                    raise
                delay = min(BACKOFF_FIRST * 2**attempt, BACKOFF_MAX) * random.uniform(0.5, 1.0)
                if _is_connect_error(e) and time.monotonic() - started + delay > self.rb_connect_deadline:
                    raise
                log = _RETRY_LOG.get()
                if log is not None:
                    log.append(e)
                attempt += 1
                await asyncio.sleep(delay)


# -- configuration ----------------------------------------------------------------------------------------------


def _env_number(name: str, default: float, kind=float, minimum: float = 0):
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = kind(raw)
    except ValueError:
        raise UsageError(f"{name}={raw!r} is not a number") from None
    if value < minimum:
        raise UsageError(f"{name}={raw!r} must be at least {minimum}")
    return value


def _emulator_endpoint() -> str | None:
    host = os.environ.get("STORAGE_EMULATOR_HOST", "").strip()
    if not host or host == "default":
        return None
    return host if host.startswith(("http://", "https://")) else f"http://{host}"


def parse_gcs_url(url: str) -> tuple[str, str]:
    """('bucket', 'prefix') of gs://bucket/prefix (or gcs://); raise UsageError if malformed."""
    m = re.match(r"^(gs|gcs)://([^/]*)(.*)$", url)
    if not m:
        raise UsageError(f"not a GCS URL: {url!r}", hint="write gs://BUCKET/PREFIX")
    bucket, prefix = m.group(2), m.group(3).strip("/")
    if not _BUCKET_RE.fullmatch(bucket) or ".." in bucket:
        raise UsageError(
            f"invalid GCS bucket name {bucket!r} in {url!r}",
            hint="bucket names are 3-63 characters of a-z, 0-9, '-', '_' and '.'; write gs://BUCKET/PREFIX",
        )
    if prefix:
        for part in prefix.split("/"):
            if part in (".", "..") or not _PREFIX_PART_RE.fullmatch(part):
                raise UsageError(f"invalid prefix {prefix!r} in {url!r}: part {part!r} is not allowed")
    return bucket, prefix


def _first_line(text: object, limit: int = 200) -> str:
    s = str(text).strip().splitlines()
    s = s[0] if s else ""
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _persisted_bytes(headers) -> int:
    """Bytes a resumable session holds, from a 308's Range header ('bytes=0-N'); 0 without one."""
    rng = headers.get("Range") or headers.get("range") or ""
    try:
        return int(rng.rsplit("-", 1)[1]) + 1 if "-" in rng else 0
    except ValueError:
        return 0


def _md5_b64(data) -> str:
    return base64.b64encode(hashlib.md5(data).digest()).decode()


def _md5_b64_file(path: str | Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 * MiB), b""):
            h.update(block)
    return base64.b64encode(h.digest()).decode()


class _NotFound(Exception):
    """Internal: the object (or the bucket) is missing; translated by the caller's guard."""


# -- the store --------------------------------------------------------------------------------------------------


class GCSStore(FsspecStore):
    """A bucket (and optional prefix) of Google Cloud Storage. See the module docstring for the guarantees."""

    capabilities = Capabilities(shareable=True)

    def object_urls(self, key: str) -> dict[str, str]:
        """The JSON/XML API download URL of one object and, on Google's endpoint, its Cloud console page."""
        name = self._name_prefix + check_key(key)
        if self.endpoint.rstrip("/") != GCS_ENDPOINT:  # an emulator or private endpoint: its JSON-API download URL
            endpoint = self.endpoint.rstrip("/")
            return {"https_url": f"{endpoint}/storage/v1/b/{self.bucket}/o/{quote(name, safe='')}?alt=media"}
        return {"https_url": f"{GCS_ENDPOINT}/{self.bucket}/{quote(name)}",
                "console_url": f"{GCS_CONSOLE}/_details/{self.bucket}/{quote(name)}"}

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        endpoint: str | None = None,
        timeout: float | None = None,
        read_timeout: float | None = None,
        retries: int | None = None,
        concurrency: int | None = None,
    ) -> None:
        self.bucket, self.prefix = parse_gcs_url(str(url))
        super().__init__(None, f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket,
                         f"gs://{self.bucket}/{self.prefix}" if self.prefix else f"gs://{self.bucket}")
        self._name_prefix = f"{self.prefix}/" if self.prefix else ""
        self._endpoint = (endpoint.rstrip("/") if endpoint else None) or _emulator_endpoint()
        self.endpoint = self._endpoint or GCS_ENDPOINT
        self.token = token or os.environ.get(ENV_TOKEN, "").strip() or ("anon" if self._endpoint else "google_default")
        self.timeout = float(timeout) if timeout is not None else _env_number(ENV_TIMEOUT, DEFAULT_TIMEOUT)
        self.read_timeout = (
            float(read_timeout) if read_timeout is not None else _env_number(ENV_READ_TIMEOUT, DEFAULT_READ_TIMEOUT)
        )
        self.retries = int(retries) if retries is not None else _env_number(ENV_RETRIES, DEFAULT_RETRIES, int)
        if concurrency is None:
            concurrency = _env_number(ENV_CONCURRENCY, DEFAULT_CONCURRENCY, int, 1)
        self.concurrency = max(1, int(concurrency))
        self._fs_lock = threading.Lock()
        self._bucket_seen = False  # set once the bucket answered; then a 404 can only mean "no such object"

    # The filesystem (and with it the credentials lookup, which may take seconds) is made on first use, so that
    # open_store() stays cheap and offline.
    @property
    def fs(self):
        if self._fs is None:
            with self._fs_lock:
                if self._fs is None:
                    self._fs = self._make_fs()
        return self._fs

    @fs.setter
    def fs(self, value) -> None:
        self._fs = value

    def _make_fs(self):
        token = self.token
        if isinstance(token, str) and token not in TOKEN_KEYWORDS:
            if not Path(token).expanduser().is_file():
                raise StorePermissionError(
                    f"{ENV_TOKEN}: no credentials file at {token}",
                    hint="set it to 'google_default', 'anon', or the path of a service-account JSON key",
                )
            token = str(Path(token).expanduser())
        try:
            return _BoundedGCSFileSystem(
                token=token,
                endpoint_url=self._endpoint,
                requests_timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=self.timeout, sock_read=self.read_timeout
                ),
                use_listings_cache=False,
                retries=self.retries,
                connect_deadline=self.timeout,
            )
        except Exception as e:  # google.auth.exceptions.*, ValueError from gcsfs's credential loading
            raise StorePermissionError(
                f"no usable Google credentials for {self.url}: {_first_line(e)}",
                hint=self._credentials_hint(),
            ) from e

    def __reduce__(self):  # picklable for process pools: reconnects on the other side
        return (
            _rebuild_gcs_store,
            (self.url, dict(token=self.token, endpoint=self._endpoint, timeout=self.timeout,
                            read_timeout=self.read_timeout, retries=self.retries, concurrency=self.concurrency)),
        )

    # -- plumbing ----------------------------------------------------------------------------------------------
    def _name(self, key: str) -> str:
        return self._name_prefix + check_key(key)

    def _media_url(self, name: str) -> str:
        q = gcsfs.core.quote
        return f"{self.fs._location}/download/storage/v1/b/{q(self.bucket)}/o/{q(name)}"

    def _credentials_hint(self) -> str:
        return (
            "log in with `gcloud auth application-default login`, or set "
            f"{ENV_TOKEN} to a service-account JSON key file ('anon' for a public bucket); "
            f"the account needs Storage object access on gs://{self.bucket}"
        )

    def _run(self, coro_fn, *args, key: str | None = None):
        """Run an async operation on gcsfs's I/O loop and translate its failures."""
        fs = self.fs
        return fsspec.asyn.sync(fs.loop, self._guard, coro_fn(*args), key)

    async def _guard(self, coro, key: str | None):
        try:
            return await coro
        except (AlreadyExistsError, NotFoundError, StoreError, UsageError):
            raise
        except Exception as e:
            err = await self._translate(e, key)
            if err is None:
                raise
            raise err from e

    async def _translate(self, e: BaseException, key: str | None):
        """A reprobundle error for a failure of gcsfs/aiohttp, or None to let it through (local I/O errors...)."""
        what = f"{key} in {self.url}" if key else self.url
        if isinstance(e, (aiohttp.ClientError, asyncio.TimeoutError, requests.exceptions.RequestException)) or (
            isinstance(e, gcsfs.retry.HttpError) and e.code in (408, 429, 500, 502, 503, 504)
        ):
            return self._unreachable(e)
        if isinstance(e, _NotFound) or (isinstance(e, FileNotFoundError) and e.errno is None):
            missing = await self._bucket_missing_error()
            key = getattr(e, "key", None) or key
            return missing or NotFoundError(f"{key} not found in {self.url}" if key else f"{self.url} not found")
        if isinstance(e, FileExistsError) and e.errno is None:
            return AlreadyExistsError(f"{key} already exists in {self.url}")
        code = getattr(e, "code", None)
        if (isinstance(e, OSError) and e.errno is None and str(e).startswith("Forbidden")) or code in (401, 403):
            detail = str(e).split("\n", 1)[1] if "\n" in str(e) else str(getattr(e, "message", e))
            return StorePermissionError(
                f"permission denied for {what} (HTTP {code or 403}: {_first_line(detail, 120)})",
                hint=self._credentials_hint(),
            )
        if isinstance(e, gcsfs.retry.NonRetryableError) or type(e).__module__.startswith("google.auth"):
            return StorePermissionError(
                f"Google credentials failed for {what}: {_first_line(e, 160)}", hint=self._credentials_hint()
            )
        if isinstance(e, gcsfs.retry.HttpError):
            return StoreError(f"GCS error for {what}: HTTP {code}: {_first_line(e.message, 160)}")
        if isinstance(e, ValueError) and str(e).startswith(("Bad Request", "Bucket is requester pays")):
            return StoreError(f"GCS rejected a request for {what}: {_first_line(str(e).replace(chr(10), ' '), 200)}")
        return None

    def _unreachable(self, e: BaseException) -> StoreUnreachableError:
        if isinstance(e, gcsfs.retry.HttpError):
            reason = f"HTTP {e.code} after {self.retries} retries"
        elif isinstance(e, aiohttp.ConnectionTimeoutError):
            reason = f"no connection within {self.timeout:g}s"
        elif isinstance(e, asyncio.TimeoutError):
            reason = f"no answer within {self.read_timeout:g}s"
        elif isinstance(e, getattr(aiohttp, "ClientConnectorDNSError", ())):
            reason = f"cannot resolve host {getattr(e, 'host', '')}"
        elif isinstance(e, aiohttp.ClientConnectorError):
            os_error = getattr(e, "os_error", None)
            reason = "connection refused" if isinstance(os_error, ConnectionRefusedError) else (
                f"cannot connect ({_first_line(getattr(os_error, 'strerror', None) or os_error or e, 120)})")
        else:
            reason = _first_line(e, 160) or type(e).__name__
        hint = f"check the network and the URL; {ENV_TIMEOUT} and {ENV_RETRIES} set how long to keep trying"
        if self._endpoint:
            source = "STORAGE_EMULATOR_HOST" if self._endpoint == _emulator_endpoint() else "endpoint="
            hint += f"; {source} points at {self._endpoint}: is that server running?"
        return StoreUnreachableError(f"cannot reach Google Cloud Storage at {self.endpoint} for {self.url}: {reason}",
                                     hint=hint)

    async def _bucket_missing_error(self) -> StoreError | None:
        """A StoreUnreachableError if the bucket itself does not exist; None if it does (or we may not know)."""
        if self._bucket_seen:
            return None
        try:
            # objects.list is what a reader can always do; buckets.get needs more than object roles give
            await self.fs._call("GET", "b/{}/o", self.bucket, maxResults=1, fields="kind", json_out=True)
        except FileNotFoundError:
            return StoreUnreachableError(
                f"GCS bucket {self.bucket!r} does not exist (at {self.endpoint})",
                hint=f"check the store URL {self.url}, or create it: gcloud storage buckets create gs://{self.bucket}",
            )
        except Exception:
            return None  # forbidden or flaky: do not guess, report the object as missing
        self._bucket_seen = True
        return None

    # -- async primitives --------------------------------------------------------------------------------------
    async def _ametadata(self, name: str, fields: str = "name,size,generation,md5Hash") -> dict:
        return await self.fs._call("GET", "b/{}/o/{}", self.bucket, name, fields=fields, json_out=True)

    async def _aupload_bytes(self, name: str, data, create_only: bool, progress: Progress | None = None) -> None:
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        limit = CREATE_ONLY_SIMPLE_MAX if create_only else SIMPLE_UPLOAD_MAX
        if size <= limit:
            log = [] if create_only else None
            token = _RETRY_LOG.set(log)
            try:
                await gcsfs.core.simple_upload(
                    self.fs, self.bucket, name, bytes(data) if isinstance(data, memoryview) else data,
                    content_type=CONTENT_TYPE, mode="create" if create_only else "overwrite",
                )
            except FileExistsError:
                if not (log and await self._holds(name, lambda: _md5_b64(data))):
                    raise
            finally:
                _RETRY_LOG.reset(token)
            if progress:
                progress(size)
            return
        view = memoryview(data).cast("B")

        async def read_at(pos: int, n: int):
            return view[pos: pos + n]

        await self._aresumable(name, size, read_at, create_only, lambda: _md5_b64(view), progress)

    async def _aupload_file(self, name: str, path: str, create_only: bool, progress: Progress | None = None) -> None:
        size = os.path.getsize(path)
        if size <= (CREATE_ONLY_SIMPLE_MAX if create_only else SIMPLE_UPLOAD_MAX):
            data = await asyncio.to_thread(Path(path).read_bytes)
            await self._aupload_bytes(name, data, create_only, progress)
            return
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_BINARY", 0))
        try:

            async def read_at(pos: int, n: int):
                block = await asyncio.to_thread(os.pread, fd, n, pos)
                if len(block) != n:
                    raise StoreError(f"{path} changed size while it was being uploaded to {self.url}")
                return block

            await self._aresumable(name, size, read_at, create_only, lambda: _md5_b64_file(path), progress)
        finally:
            os.close(fd)

    async def _aresumable(self, name, size, read_at, create_only, md5_fn, progress) -> None:
        """A resumable upload, streamed: each request carries up to UPLOAD_CHUNK bytes read STREAM_BLOCK at a time
        (so memory stays small); after a failure it goes on from the last offset the server confirmed.
        The object appears only when the last byte is in; on failure the session is cancelled."""
        fs = self.fs
        if create_only:
            # GCS checks the precondition when the upload is finalised; asking first also saves sending the bytes,
            # and covers emulators that check it only on single-request uploads.
            try:
                await self._ametadata(name, "name")
                raise FileExistsError(name)
            except FileNotFoundError:
                pass
        log = [] if create_only else None
        token = _RETRY_LOG.set(log)
        location = None
        reported = 0

        def sent_up_to(pos: int) -> None:
            # Each byte is counted once, even when a retry sends it again, and the last one only once the server
            # has stored the object: progress reaching the total means "done".
            nonlocal reported
            if progress and pos > reported:
                progress(pos - reported)
                reported = pos

        local_errors: list[BaseException] = []  # raised inside the body (reading the file, progress callback)

        async def body(start: int, end: int):
            pos = start
            try:
                while pos < end:
                    block = await read_at(pos, min(STREAM_BLOCK, end - pos))
                    yield block  # resumed once aiohttp has handed the block to the socket
                    pos += len(block)
                    sent_up_to(min(pos, size - 1))
            except GeneratorExit:
                raise
            except BaseException as e:  # aiohttp would report it as a connection error; keep it as it is
                local_errors.append(e)
                raise

        try:
            location = await gcsfs.core.initiate_upload(
                fs, self.bucket, name, CONTENT_TYPE, mode="create" if create_only else "overwrite"
            )
            offset, failures, ask = 0, 0, False
            while True:
                end = min(offset + UPLOAD_CHUNK, size)
                local_errors.clear()
                try:
                    if ask:  # how much does the server hold? (an empty request with 'bytes */total')
                        status, headers, _, content = await _raw_request_copy(
                            fs, "POST", location, allow_redirects=False,
                            headers={"Content-Range": f"bytes */{size}", "Content-Length": "0"},
                        )
                    else:
                        status, headers, _, content = await _raw_request_copy(
                            fs, "POST", location, data=body(offset, end), allow_redirects=False,
                            headers={"Content-Range": f"bytes {offset}-{end - 1}/{size}",
                                     "Content-Length": str(end - offset), "Content-Type": CONTENT_TYPE},
                        )
                except Exception as e:
                    if local_errors:
                        raise local_errors[0] from None
                    if failures >= self.retries or not _is_transient(e, 1):
                        raise
                    failures += 1
                    if log is not None:
                        log.append(e)
                    await asyncio.sleep(min(BACKOFF_FIRST * 2 ** (failures - 1), BACKOFF_MAX) * random.uniform(0.5, 1))
                    # On GCS, ask where to go on from, as Google's clients do. An emulator (fake-gcs-server)
                    # finalises the object on that question, so there send the range again from the last
                    # confirmed offset (what gcsfs does on GCS too).
                    ask = self._endpoint is None
                    continue
                ask = False
                if status in (200, 201):
                    out = json.loads(content) if content else {}
                    if int(out.get("size", size)) != size:
                        raise StoreError(f"{name}: GCS stored {out.get('size')} bytes of {size}")
                    sent_up_to(size)
                    return
                if status != 308:
                    raise StoreError(f"unexpected HTTP {status} during a resumable upload of {name} to {self.url}")
                persisted = _persisted_bytes(headers)
                if persisted > offset:
                    failures = 0
                else:  # the server took nothing: do not loop forever
                    failures += 1
                    if failures > self.retries:
                        raise StoreError(f"GCS accepted no bytes of {name} at offset {offset}; giving up")
                offset = persisted
        except FileExistsError:
            if not (log and await self._holds(name, md5_fn)):
                raise
        except BaseException:
            if location is not None:
                try:  # cancel the session so nothing is left behind (GCS would expire it after a week anyway)
                    await fs._call("DELETE", location.replace("&ifGenerationMatch=0", ""))
                except Exception:
                    pass
            raise
        finally:
            _RETRY_LOG.reset(token)

    async def _holds(self, name: str, md5_fn) -> bool:
        """After a 412 answered a retried create-only upload: does the object hold our bytes (our first attempt
        landed but its reply was lost)?"""
        try:
            meta = await self._ametadata(name, "md5Hash")
        except Exception:
            return False
        md5 = meta.get("md5Hash")
        return bool(md5) and md5 == await asyncio.to_thread(md5_fn)

    async def _aget_range(self, url: str, start: int, end: int, generation: str | None):
        """(status, headers, body) of GET bytes [start, end) of an object; a 416 (empty object) gives b''."""
        params = {"alt": "media"}
        if generation:
            params["generation"] = generation
        try:
            status, headers, _, body = await self.fs._request(
                "GET", url, headers={"Range": f"bytes={start}-{end - 1}"}, **params
            )
        except gcsfs.retry.HttpError as e:
            if e.code == 416 and start == 0:
                return 416, {}, b""
            raise
        return status, headers, body

    @staticmethod
    def _total_size(status: int, headers, body: bytes) -> int:
        if status == 206:
            cr = headers.get("Content-Range", "")  # bytes 0-99/12345
            if "/" in cr and not cr.endswith("/*"):
                return int(cr.rsplit("/", 1)[1])
        return len(body)

    async def _aget(self, key: str) -> bytes:
        name = self._name(key)
        url = self._media_url(name)
        status, headers, body = await self._aget_range(url, 0, DOWNLOAD_CHUNK, None)
        total = self._total_size(status, headers, body)
        if total <= len(body):
            return body
        generation = headers.get("X-Goog-Generation") or headers.get("x-goog-generation")
        sem = asyncio.Semaphore(RANGES_PER_FILE)

        async def piece(off):
            async with sem:
                return await self._range_body(url, off, min(off + DOWNLOAD_CHUNK, total), generation)

        rest = await _gather_or_cancel([piece(off) for off in range(len(body), total, DOWNLOAD_CHUNK)])
        return b"".join([body, *rest])

    async def _range_body(self, url, start, end, generation) -> bytes:
        status, _, body = await self._aget_range(url, start, end, generation)
        if len(body) != end - start:
            raise StoreError(f"short read from GCS: {len(body)} of {end - start} bytes at offset {start} of {url}")
        return body

    async def _adownload(self, key: str, dest: str | Path, progress: Progress | None, requests: asyncio.Semaphore):
        """Copy an object to `dest` atomically: parallel byte ranges written into a temp file, then renamed."""
        name = self._name(key)
        url = self._media_url(name)
        dest = Path(dest)
        await asyncio.to_thread(dest.parent.mkdir, parents=True, exist_ok=True)
        async with requests:
            status, headers, first = await self._aget_range(url, 0, DOWNLOAD_CHUNK, None)
        total = self._total_size(status, headers, first)
        generation = headers.get("X-Goog-Generation") or headers.get("x-goog-generation")
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".part-")
        try:
            if total > len(first):
                await asyncio.to_thread(os.ftruncate, fd, total)
            await asyncio.to_thread(os.pwrite, fd, first, 0)
            if progress:
                progress(len(first))
            del first
            if total > DOWNLOAD_CHUNK:
                offsets = iter(range(DOWNLOAD_CHUNK, total, DOWNLOAD_CHUNK))

                async def worker():
                    for off in offsets:  # shared iterator: each worker takes the next range
                        end = min(off + DOWNLOAD_CHUNK, total)
                        async with requests:
                            body = await self._range_body(url, off, end, generation)
                        await asyncio.to_thread(os.pwrite, fd, body, off)
                        if progress:
                            progress(len(body))

                n = min(RANGES_PER_FILE, -(-(total - DOWNLOAD_CHUNK) // DOWNLOAD_CHUNK))
                await _gather_or_cancel([worker() for _ in range(n)])
            os.close(fd)
            fd = -1
            await asyncio.to_thread(os.replace, tmp, dest)
        except BaseException:
            if fd >= 0:
                os.close(fd)
            unlink_quietly(tmp)
            raise

    async def _aexists(self, key: str) -> bool:
        try:
            await self._ametadata(self._name(key), "name")
            return True
        except FileNotFoundError:
            missing = await self._bucket_missing_error()
            if missing:
                raise missing from None
            return False

    async def _alist_names(self, prefix: str, delimiter: str | None = None) -> list[str]:
        names: list[str] = []
        page_token = None
        while True:
            out = await self.fs._call(
                "GET", "b/{}/o", self.bucket, prefix=prefix or None, delimiter=delimiter, maxResults=1000,
                pageToken=page_token, fields="items(name),nextPageToken", json_out=True,
            )
            names.extend(item["name"] for item in out.get("items", ()))
            page_token = out.get("nextPageToken")
            if not page_token:
                return names

    async def _alist(self, prefix: str) -> list[str]:
        base = self._name_prefix + (check_key(prefix) + "/" if prefix else "")
        try:
            names = await self._alist_names(base)
        except FileNotFoundError:
            raise _NotFound() from None
        self._bucket_seen = True
        keys = []
        cut = len(self._name_prefix)
        for name in names:
            key = name[cut:]
            try:
                keys.append(check_key(key))
            except UsageError:
                pass  # "folder" placeholders and names reprobundle never writes
        return sorted(keys)

    async def _adelete(self, key: str) -> None:
        try:
            await self.fs._call("DELETE", "b/{}/o/{}", self.bucket, self._name(key))
        except FileNotFoundError:
            pass

    # -- the Store contract ------------------------------------------------------------------------------------
    def get(self, key: str) -> bytes:
        return self._run(self._aget, key, key=key)

    def put(self, key: str, data: bytes | memoryview, *, create_only: bool = False) -> None:
        self.check_writable()
        self._run(self._aupload_bytes, self._name(key), data, create_only, key=key)

    def put_file(self, key: str, path: str | Path, *, create_only: bool = False) -> None:
        self.check_writable()
        self._run(self._aupload_file, self._name(key), os.fspath(path), create_only, key=key)

    def get_file(self, key: str, path: str | Path) -> None:
        self._run(self._adownload_one, key, path, key=key)

    async def _adownload_one(self, key, path):
        await self._adownload(key, path, None, asyncio.Semaphore(RANGES_PER_FILE))

    def exists(self, key: str) -> bool:
        return self._run(self._aexists, key, key=key)

    def size(self, key: str) -> int:
        async def _size():
            return int((await self._ametadata(self._name(key), "size"))["size"])

        return self._run(_size, key=key)

    def list(self, prefix: str = "") -> Iterator[str]:
        return iter(self._run(self._alist, prefix))

    def delete(self, key: str) -> None:
        self.check_writable()
        self._run(self._adelete, key, key=key)

    def open_read(self, key: str) -> BinaryIO:
        meta = self._run(self._ametadata, self._name(key), "size,generation", key=key)
        raw = _RangeReader(self, key, int(meta["size"]), meta.get("generation"))
        return io.BufferedReader(raw, buffer_size=DOWNLOAD_CHUNK)

    # -- batch transfers ---------------------------------------------------------------------------------------
    def put_many(self, items: Iterable[tuple[str, str | Path]], *, progress: Progress | None = None) -> None:
        """Upload local files: [(key, local_path), ...], up to `concurrency` at a time.

        Overwrites (skipping existing keys is the caller's choice: see `exists_many`). Each object is atomic; on the
        first failure the rest is cancelled and that failure raised, so some keys may be written and others not.
        `progress(nbytes)` is called from the I/O thread as bytes are sent; keep it cheap."""
        self.check_writable()
        pairs = [(self._name(k), os.fspath(p)) for k, p in items]
        if pairs:
            self._run(self._aput_many, pairs, progress)

    async def _aput_many(self, pairs, progress):
        files = asyncio.Semaphore(self.concurrency)
        large = asyncio.Semaphore(max(1, self.concurrency // 2))  # a few big streams use the bandwidth best

        async def one(name, path):
            async with files:
                if os.path.getsize(path) > SIMPLE_UPLOAD_MAX:
                    async with large:
                        await self._aupload_file(name, path, False, progress)
                else:
                    await self._aupload_file(name, path, False, progress)

        await _gather_or_cancel([one(n, p) for n, p in pairs])

    def get_many(self, items: Iterable[tuple[str, str | Path]], *, progress: Progress | None = None) -> None:
        """Download [(key, local_path), ...] concurrently; each destination appears whole (temp file + rename) or
        not at all. Large objects come as parallel byte ranges. NotFoundError names the first missing key."""
        pairs = [(check_key(k), Path(p)) for k, p in items]
        if pairs:
            self._run(self._aget_many, pairs, progress)

    async def _aget_many(self, pairs, progress):
        requests = asyncio.Semaphore(self.concurrency)

        async def one(key, path):
            try:
                await self._adownload(key, path, progress, requests)
            except FileNotFoundError as e:
                if e.errno is None:
                    raise _KeyNotFound(key) from None
                raise

        await _gather_or_cancel([one(k, p) for k, p in pairs])

    def exists_many(self, keys: Iterable[str]) -> set[str]:
        """The subset of `keys` present in the store. Keys are checked with concurrent metadata requests, except
        where many share a folder: that folder is listed once instead (one request per 1000 names)."""
        keys = {check_key(k) for k in keys}
        return self._run(self._aexists_many, keys) if keys else set()

    LIST_THRESHOLD = 64  # keys of one folder above which listing the folder is cheaper than asking each

    async def _aexists_many(self, keys: set[str]) -> set[str]:
        by_folder: dict[str, list[str]] = {}
        for k in keys:
            by_folder.setdefault(k.rpartition("/")[0], []).append(k)
        found: set[str] = set()
        sem = asyncio.Semaphore(self.concurrency)

        async def list_folder(folder, members):
            base = self._name_prefix + (folder + "/" if folder else "")
            async with sem:
                try:
                    names = await self._alist_names(base, delimiter="/")
                except FileNotFoundError:
                    raise _NotFound() from None
            present = {n[len(self._name_prefix):] for n in names}
            found.update(k for k in members if k in present)

        async def check(key):
            async with sem:
                if await self._aexists(key):
                    found.add(key)

        tasks = []
        for folder, members in by_folder.items():
            if len(members) > self.LIST_THRESHOLD:
                tasks.append(list_folder(folder, members))
            else:
                tasks.extend(check(k) for k in members)
        await _gather_or_cancel(tasks)
        return found


class _KeyNotFound(_NotFound):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


async def _gather_or_cancel(coros) -> list:
    """Run concurrently; on the first failure cancel the others and raise it."""
    tasks = [asyncio.ensure_future(c) for c in coros]
    try:
        return await asyncio.gather(*tasks)
    except BaseException:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise


def _rebuild_gcs_store(url: str, kwargs: dict) -> GCSStore:
    return GCSStore(url, **kwargs)


class _RangeReader(io.RawIOBase):
    """A seekable reader of one object generation, by byte ranges."""

    def __init__(self, store: GCSStore, key: str, size: int, generation: str | None) -> None:
        self._store, self._key, self._size, self._generation = store, key, size, generation
        self._url = store._media_url(store._name(key))
        self._pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def readinto(self, b) -> int:
        n = min(len(b), self._size - self._pos)
        if n <= 0:
            return 0
        body = self._store._run(self._store._range_body, self._url, self._pos, self._pos + n, self._generation,
                                key=self._key)
        b[: len(body)] = body
        self._pos += len(body)
        return len(body)
