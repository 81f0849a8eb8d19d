"""Google Cloud Storage stores: gs://bucket/prefix (also gcs://), over the GCS JSON API.

What the store promises (the Store contract, and more):
- `put(create_only=True)` is atomic on the server: the upload carries `ifGenerationMatch=0` and GCS answers 412 if
  the object exists (-> AlreadyExistsError), so of N racing writers exactly one wins. Values up to 32 MiB go as one
  multipart request; larger ones as a resumable upload with the same precondition (checked at finalisation).
- Every write is atomic for readers: a GCS object becomes visible only when its upload is finalised; a failed
  resumable upload is cancelled, never left half-written.
- Failures surface as one clear reprobundle error each: NotFoundError (no such key), StoreUnreachableError (no
  such bucket, or the endpoint does not answer), StorePermissionError (401/403, with a hint about credentials).
- An unreachable endpoint fails fast: connection failures stop after REPROBUNDLE_GCS_TIMEOUT seconds (default 5)
  and other transient errors after REPROBUNDLE_GCS_RETRIES retries; each retry is logged (gcs_http's logger).
- A create-only upload whose reply was lost is retried; if the retry meets 412 and the object holds exactly our
  bytes (same MD5), our first attempt landed and the write counts as ours.
- Values over 8 MiB are streamed as resumable uploads (up to 256 MiB per request, 8 MiB in memory at a time) and
  downloaded as parallel 16 MiB byte ranges written straight into a temp file that is renamed into place.
- `put_many`, `get_many` and `exists_many` move or check many keys concurrently on one event loop.
- Several machines may write one bucket (gcs_shared.py): tags move at the generation read (`put_if`), a writer's
  `touch` is recorded on the bucket for gc's age, gc deletes at the generation and metageneration it judged.

How: gcs_http.py makes the requests (one aiohttp session per set of settings, bounded and logged retries, error
mapping), gcs_upload.py writes objects (multipart, resumable, create-only); this module maps keys to objects and
failures to reprobundle errors. gcsfs provides only the credentials, through its public API: `GCSFileSystem(token=,
endpoint_url=).credentials`, which understands every REPROBUNDLE_GCS_TOKEN form below and refreshes tokens.
gcsfs's own request methods cannot keep the promises above: their retries are fixed (6 tries, back-off up to 32 s,
no deadline) and hidden from the caller, so neither the bounds nor the lost-reply rule could hold. The official
google-cloud-storage client could, but is synchronous (threads instead of one event loop for the concurrent
transfers) and a second HTTP stack; the JSON API calls needed here are few and stable.

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

# With this option on (gcsfs >= 2025's default), importing gcsfs loads its gRPC clients and GCSFileSystem becomes the
# extended class that asks a "bucket type" service first (40-60 s stalls against an emulator). We only take
# credentials from gcsfs, but the option is read at import, so it is set before the import below.
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import asyncio  # noqa: E402
import hashlib  # noqa: E402
import io  # noqa: E402
import re  # noqa: E402
import threading  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import BinaryIO, Callable, Iterable, Iterator  # noqa: E402
from urllib.parse import quote  # noqa: E402

import fsspec.asyn  # noqa: E402
import gcsfs  # noqa: E402

from ..config import settings
from ..errors import (  # noqa: E402
    AlreadyExistsError,
    NotFoundError,
    StoreError,
    StorePermissionError,
    StoreUnreachableError,
    UsageError,
)
from . import gcs_shared  # noqa: E402
from .base import DEFAULT_JOBS, Capabilities, Store, check_key, make_temp_file, read_at_most, too_large, unlink_quietly  # noqa: E402
from .gcs_http import (  # noqa: E402
    CredentialsFailed,
    GCSClient,
    GCSNotFound,
    GCSPreconditionFailed,
    GCSResponseError,
    failure_reason,
    first_line,
    google_endpoint,
    is_network_failure,
    use_client_certificate,
)
from .gcs_upload import ResumableUpload, md5_b64, md5_b64_file, upload_single  # noqa: E402
from .http_client import RateFloor  # noqa: E402

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
# Read when each transfer starts (tests shrink them to exercise the resumable and ranged paths on small values).
SIMPLE_UPLOAD_MAX = 8 * MiB  # one multipart request up to this size; resumable above
CREATE_ONLY_SIMPLE_MAX = 32 * MiB  # create-only writes stay single-request (one precondition check) up to this
UPLOAD_CHUNK = 256 * MiB  # bytes per resumable request (streamed); a multiple of 256 KiB
STREAM_BLOCK = 8 * MiB  # what one resumable upload holds in memory at a time
DOWNLOAD_CHUNK = 16 * MiB  # byte range per GET for large values
RANGES_PER_FILE = 8  # parallel ranges of one large download
TOKEN_KEYWORDS = ("google_default", "anon", "cloud", "cache", "browser")

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")
_PREFIX_PART_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._@+=~-]{0,199}$")

Progress = Callable[[int], None]


# -- configuration ----------------------------------------------------------------------------------------------


def _env_number(name: str, default: float, kind=float, minimum: float = 0):
    raw = getattr(settings(), name.removeprefix("REPROBUNDLE_").lower())
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


# Stores with the same settings share one client: one credentials lookup (it may take seconds) and one connection
# pool per process. Keyed by process too: after a fork the child makes its own.
_CLIENTS: dict[tuple, GCSClient] = {}
_CLIENTS_LOCK = threading.Lock()


def _shared_client(endpoint: str | None, token: str, timeout: float, read_timeout: float,
                   retries: int) -> GCSClient:
    key = (os.getpid(), endpoint, token, timeout, read_timeout, retries)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            # gcsfs's public credentials object: `apply(headers)` adds the Authorization header, refreshing the
            # token when due ('anon': adds nothing).
            credentials = gcsfs.GCSFileSystem(token=token, endpoint_url=endpoint).credentials
            certificate = endpoint is None and use_client_certificate()
            client = GCSClient(endpoint or google_endpoint(certificate), credentials, connect_timeout=timeout,
                               read_timeout=read_timeout, retries=retries, client_certificate=certificate)
            _CLIENTS[key] = client
        return client


class _NotFound(Exception):
    """Internal: the object (or the bucket) is missing; translated by the caller's guard."""


class _KeyNotFound(_NotFound):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


# -- the store --------------------------------------------------------------------------------------------------


class _OrderedHash:
    """The sha256 of an object that arrives as byte ranges in any order: each range is hashed once every range
    before it is, on a worker thread (hashlib releases the GIL). A range may be fetched at most AHEAD bytes past
    what is hashed, which bounds the ranges held in memory waiting for an earlier one."""

    AHEAD = RANGES_PER_FILE * DOWNLOAD_CHUNK

    def __init__(self) -> None:
        self._hash = hashlib.sha256()
        self._done = 0  # bytes hashed
        self._waiting: dict[int, bytes] = {}
        self._hashing = False  # one caller of `add` hashes at a time, whatever is next in order
        self._turn = asyncio.Condition()

    async def admit(self, offset: int) -> None:
        """Wait until the range at `offset` may be fetched."""
        async with self._turn:
            await self._turn.wait_for(lambda: offset - self._done <= self.AHEAD)

    async def add(self, offset: int, body: bytes) -> None:
        async with self._turn:
            self._waiting[offset] = body
            if self._hashing:
                return
            self._hashing = True
        while True:
            async with self._turn:
                chunk = self._waiting.pop(self._done, None)
                if chunk is None:
                    self._hashing = False
                    return
            await asyncio.to_thread(self._hash.update, chunk)  # the lock is free meanwhile: others keep fetching
            async with self._turn:
                self._done += len(chunk)
                self._turn.notify_all()

    def hexdigest(self) -> str:
        assert not self._waiting, "a range was never hashed"
        return self._hash.hexdigest()


class GCSStore(Store):
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
        self.url = f"gs://{self.bucket}/{self.prefix}" if self.prefix else f"gs://{self.bucket}"
        self._name_prefix = f"{self.prefix}/" if self.prefix else ""
        self._endpoint = (endpoint.rstrip("/") if endpoint else None) or _emulator_endpoint()
        self.endpoint = self._endpoint or GCS_ENDPOINT
        self.token = token or settings().gcs_token or ("anon" if self._endpoint else "google_default")
        self.timeout = float(timeout) if timeout is not None else _env_number(ENV_TIMEOUT, DEFAULT_TIMEOUT)
        self.read_timeout = (
            float(read_timeout) if read_timeout is not None else _env_number(ENV_READ_TIMEOUT, DEFAULT_READ_TIMEOUT)
        )
        self.retries = int(retries) if retries is not None else _env_number(ENV_RETRIES, DEFAULT_RETRIES, int)
        if concurrency is None:
            concurrency = _env_number(ENV_CONCURRENCY, DEFAULT_CONCURRENCY, int, 1)
        self.concurrency = max(1, int(concurrency))
        self._client: GCSClient | None = None
        self._bucket_seen = False  # set once the bucket answered; then a 404 can only mean "no such object"

    # The client (and with it the credentials lookup, which may take seconds) is made on first use, so that
    # open_store() stays cheap and offline.
    @property
    def client(self) -> GCSClient:
        if self._client is None:
            self._client = self._make_client()
        return self._client

    def _make_client(self) -> GCSClient:
        token = self.token
        if isinstance(token, str) and token not in TOKEN_KEYWORDS:
            if not Path(token).expanduser().is_file():
                raise StorePermissionError(
                    f"{ENV_TOKEN}: no credentials file at {token}",
                    hint="set it to 'google_default', 'anon', or the path of a service-account JSON key",
                )
            token = str(Path(token).expanduser())
        try:
            return _shared_client(self._endpoint, token, self.timeout, self.read_timeout, self.retries)
        except Exception as e:  # google.auth.exceptions.*, ValueError from gcsfs's credential loading
            raise StorePermissionError(
                f"no usable Google credentials for {self.url}: {first_line(e)}",
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
        return self.client.media_url(self.bucket, name)

    def _credentials_hint(self) -> str:
        return (
            "log in with `gcloud auth application-default login`, or set "
            f"{ENV_TOKEN} to a service-account JSON key file ('anon' for a public bucket); "
            f"the account needs Storage object access on gs://{self.bucket}"
        )

    def _run(self, coro_fn, *args, key: str | None = None):
        """Run an async operation on fsspec's I/O loop (one thread shared by all stores) and translate failures."""
        self.client  # noqa: B018  (credentials first: their failure is a StorePermissionError, raised here)
        return fsspec.asyn.sync(fsspec.asyn.get_loop(), self._guard, coro_fn(*args), key)

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
        """A reprobundle error for a failed request, or None to let it through (local I/O errors...)."""
        what = f"{key} in {self.url}" if key else self.url
        if is_network_failure(e):
            return self._unreachable(e)
        if isinstance(e, (_NotFound, GCSNotFound)):
            missing = await self._bucket_missing_error()
            key = getattr(e, "key", None) or key
            return missing or NotFoundError(f"{key} not found in {self.url}" if key else f"{self.url} not found")
        if isinstance(e, GCSPreconditionFailed):
            return AlreadyExistsError(f"{key} already exists in {self.url}")
        if isinstance(e, GCSResponseError) and e.status in (401, 403):
            return StorePermissionError(
                f"permission denied for {what} (HTTP {e.status}: {first_line(e.message, 120)})",
                hint=self._credentials_hint(),
            )
        if isinstance(e, CredentialsFailed) or type(e).__module__.startswith("google.auth"):
            return StorePermissionError(
                f"Google credentials failed for {what}: {first_line(e, 160)}", hint=self._credentials_hint()
            )
        if isinstance(e, GCSResponseError) and e.status == 400:  # a bad request or, say, a requester-pays bucket
            return StoreError(f"GCS rejected a request for {what}: HTTP 400: {first_line(e.message, 200)}")
        if isinstance(e, GCSResponseError):
            return StoreError(f"GCS error for {what}: HTTP {e.status}: {first_line(e.message, 160)}")
        return None

    def _unreachable(self, e: BaseException) -> StoreUnreachableError:
        reason = failure_reason(e, retries=self.retries, connect_timeout=self.timeout, read_timeout=self.read_timeout)
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
            await self.client.get_json(self.client.objects_url(self.bucket), {"maxResults": 1, "fields": "kind"})
        except GCSNotFound:
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
        return await self.client.get_json(self.client.object_url(self.bucket, name), {"fields": fields})

    async def _aupload_bytes(self, name: str, data, create_only: bool, progress: Progress | None = None) -> None:
        size = data.nbytes if isinstance(data, memoryview) else len(data)
        if size <= (CREATE_ONLY_SIMPLE_MAX if create_only else SIMPLE_UPLOAD_MAX):
            await upload_single(self.client, self.bucket, name, data, create_only=create_only)
            if progress:
                progress(size)
            return
        view = memoryview(data).cast("B")

        async def read_at(pos: int, n: int):
            return view[pos: pos + n]

        await self._aresumable(name, size, read_at, create_only, lambda: md5_b64(view), progress)

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

            await self._aresumable(name, size, read_at, create_only, lambda: md5_b64_file(path), progress)
        finally:
            os.close(fd)

    async def _aresumable(self, name, size, read_at, create_only, md5_fn, progress) -> None:
        upload = ResumableUpload(
            self.client, self.bucket, name, size, read_at, create_only=create_only, md5=md5_fn, progress=progress,
            chunk=UPLOAD_CHUNK, block=STREAM_BLOCK, destination=self.url,
            # On GCS, ask where to go on from after a failure, as Google's clients do. An emulator
            # (fake-gcs-server) finalises the object on that question, so there resend from the last confirmed
            # offset instead (what gcsfs does on GCS too).
            ask_offset=self._endpoint is None,
        )
        await upload.run()

    async def _aget_range(self, url: str, start: int, end: int, generation: str | None,
                          floor: RateFloor | None = None):
        """(status, headers, body) of GET bytes [start, end) of an object; a 416 (empty object) gives b''. `floor`:
        a record's rate floor (see get_bounded); None: the request's own."""
        try:
            status, headers, body = await self.client.request(
                "GET", url, params={"alt": "media", "generation": generation},
                headers={"Range": f"bytes={start}-{end - 1}"}, floor=floor,
            )
        except GCSResponseError as e:
            if e.status == 416 and start == 0:
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
        generation = headers.get("X-Goog-Generation")
        sem = asyncio.Semaphore(RANGES_PER_FILE)

        async def piece(off):
            async with sem:
                return await self._range_body(url, off, min(off + DOWNLOAD_CHUNK, total), generation)

        rest = await _gather_or_cancel([piece(off) for off in range(len(body), total, DOWNLOAD_CHUNK)])
        return b"".join([body, *rest])

    async def _range_body(self, url, start, end, generation, floor: RateFloor | None = None) -> bytes:
        status, _, body = await self._aget_range(url, start, end, generation, floor)
        if len(body) != end - start:
            raise StoreError(f"short read from GCS: {len(body)} of {end - start} bytes at offset {start} of {url}")
        return body

    async def _adownload(self, key: str, dest: str | Path, progress: Progress | None, requests: asyncio.Semaphore,
                         sha256: dict[str, str] | None = None):
        """Copy an object to `dest` atomically: parallel byte ranges written into a temp file, then renamed. With
        `sha256`, the hex sha256 of the bytes written is put there under `key`, hashed as the ranges arrive."""
        name = self._name(key)
        url = self._media_url(name)
        dest = Path(dest)
        await asyncio.to_thread(dest.parent.mkdir, parents=True, exist_ok=True)
        async with requests:
            status, headers, first = await self._aget_range(url, 0, DOWNLOAD_CHUNK, None)
        total = self._total_size(status, headers, first)
        generation = headers.get("X-Goog-Generation")
        hashed = _OrderedHash() if sha256 is not None else None
        fd, tmp = make_temp_file(dest.parent, ".part-")
        try:
            if total > len(first):
                await asyncio.to_thread(os.ftruncate, fd, total)
            await asyncio.to_thread(os.pwrite, fd, first, 0)
            if progress:
                progress(len(first))
            if hashed:
                await hashed.add(0, first)
            del first
            if total > DOWNLOAD_CHUNK:
                offsets = iter(range(DOWNLOAD_CHUNK, total, DOWNLOAD_CHUNK))

                async def worker():
                    for off in offsets:  # shared iterator: each worker takes the next range
                        if hashed:
                            await hashed.admit(off)
                        end = min(off + DOWNLOAD_CHUNK, total)
                        async with requests:
                            body = await self._range_body(url, off, end, generation)
                        await asyncio.to_thread(os.pwrite, fd, body, off)
                        if progress:
                            progress(len(body))
                        if hashed:
                            await hashed.add(off, body)

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
        if hashed and sha256 is not None:
            sha256[key] = hashed.hexdigest()

    async def _aexists(self, key: str) -> bool:
        try:
            await self._ametadata(self._name(key), "name")
            return True
        except GCSNotFound:
            missing = await self._bucket_missing_error()
            if missing:
                raise missing from None
            return False

    async def _alist_names(self, prefix: str, delimiter: str | None = None) -> list[str]:
        names: list[str] = []
        page_token = None
        while True:
            out = await self.client.get_json(self.client.objects_url(self.bucket), {
                "prefix": prefix or None, "delimiter": delimiter, "maxResults": 1000, "pageToken": page_token,
                "fields": "items(name),nextPageToken",
            })
            names.extend(item["name"] for item in out.get("items", ()))
            page_token = out.get("nextPageToken")
            if not page_token:
                return names

    async def _alist(self, prefix: str) -> list[str]:
        base = self._name_prefix + (check_key(prefix) + "/" if prefix else "")
        try:
            names = await self._alist_names(base)
        except GCSNotFound:
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
            await self.client.request("DELETE", self.client.object_url(self.bucket, self._name(key)))
        except GCSNotFound:
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

    def modified(self, key: str) -> float | None:
        """When the object was last written or used (gcs_shared.last_use); None if it is missing."""
        try:
            meta = self._run(self._ametadata, self._name(key), "updated,metadata", key=key)
        except NotFoundError:
            return None
        return gcs_shared.last_use(meta)

    def touch(self, key: str) -> bool:
        """Record now as the object's last use on the bucket, where a gc on any machine sees it (gcs_shared)."""
        self.check_writable()  # then missing (or no such bucket: exists raises), or not updatable: exists says
        return self._run(gcs_shared.touch, self.client, self.bucket, self._name(key), key=key) or self.exists(key)

    def delete_if_stale(self, key: str, cutoff: float | None) -> bool:
        """Deleted at the generation and metageneration whose age was judged (gcs_shared.delete_if_stale)."""
        self.check_writable()
        return self._run(gcs_shared.delete_if_stale, self.client, self.bucket, self._name(key), cutoff, key=key)

    def put_if(self, key: str, data: bytes | memoryview, *, expected: bytes | None, max_bytes: int) -> bool:
        """Store.put_if at the generation the value was read from (gcs_shared.put_if)."""
        self.check_writable()
        return self._run(gcs_shared.put_if, self.client, self.bucket, self._name(key), data, expected, max_bytes,
                         key=key)

    def open_read(self, key: str, *, floor: RateFloor | None = None) -> BinaryIO:
        meta = self._run(self._ametadata, self._name(key), "size,generation", key=key)
        raw = _RangeReader(self, key, int(meta["size"]), meta.get("generation"), floor)
        return io.BufferedReader(raw, buffer_size=DOWNLOAD_CHUNK)

    def get_bounded(self, key: str, max_bytes: int) -> bytes:
        """As the base's, and held to the record deadline besides the rate floor (see http_client.RateFloor)."""
        with self.open_read(key, floor=RateFloor(f"{self.url}/{key}", record=True)) as f:
            data = read_at_most(f, max_bytes + 1)
        if len(data) > max_bytes:
            raise too_large(key, self.url, max_bytes)
        return data

    # -- batch transfers ---------------------------------------------------------------------------------------
    def put_many(self, items: Iterable[tuple[str, str | Path]], *, progress: Progress | None = None,
                 jobs: int = DEFAULT_JOBS, move: bool = False) -> None:
        """Upload local files: [(key, local_path), ...], up to `concurrency` at a time.

        Overwrites (skipping existing keys is the caller's choice: see `exists_many`). Each object is atomic; on the
        first failure the rest is cancelled and that failure raised, so some keys may be written and others not.
        `progress(nbytes)` is called from the I/O thread as bytes are sent; keep it cheap."""
        self.check_writable()
        pairs = [(self._name(k), os.fspath(p)) for k, p in items]
        try:
            if pairs:
                self._run(self._aput_many, pairs, progress)
        finally:
            for _, path in pairs if move else ():
                unlink_quietly(path)

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

    def get_many(self, items: Iterable[tuple[str, str | Path]], *, progress: Progress | None = None,
                 jobs: int = DEFAULT_JOBS, sha256: dict[str, str] | None = None) -> None:
        """Download [(key, local_path), ...] concurrently; each destination appears whole (temp file + rename) or
        not at all. Large objects come as parallel byte ranges, hashed in order as they arrive when `sha256` is
        given (every key's hex digest is put there). NotFoundError names the first missing key."""
        pairs = [(check_key(k), Path(p)) for k, p in items]
        if pairs:
            self._run(self._aget_many, pairs, progress, sha256)

    async def _aget_many(self, pairs, progress, sha256=None):
        requests = asyncio.Semaphore(self.concurrency)

        async def one(key, path):
            try:
                await self._adownload(key, path, progress, requests, sha256)
            except GCSNotFound:
                raise _KeyNotFound(key) from None

        await _gather_or_cancel([one(k, p) for k, p in pairs])

    def exists_many(self, keys: Iterable[str], *, jobs: int = DEFAULT_JOBS) -> set[str]:
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
                except GCSNotFound:
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

    def __init__(self, store: GCSStore, key: str, size: int, generation: str | None,
                 floor: RateFloor | None = None) -> None:
        self._store, self._key, self._size, self._generation = store, key, size, generation
        self._floor = floor
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
        body = self._read(min(len(b), self._size - self._pos))
        b[: len(body)] = body
        return len(body)

    def readall(self) -> bytes:
        # RawIOBase's would read the rest 8 KiB (one request) at a time; read(-1) on the buffered reader lands here.
        return self._read(self._size - self._pos)

    def _read(self, n: int) -> bytes:
        if n <= 0:
            return b""
        body = self._store._run(self._store._range_body, self._url, self._pos, self._pos + n, self._generation,
                                self._floor, key=self._key)
        self._pos += len(body)
        return body
