"""HTTP to the Google Cloud Storage JSON API: requests, bounded retries, and what a failed request means.

Contracts:
- `GCSClient.send` makes one request and raises for an error status: GCSNotFound (404), GCSPreconditionFailed
  (412), GCSResponseError (any other status >= 400); transport failures stay aiohttp / asyncio exceptions.
- `GCSClient.request` is `send` with retries; every retry in the store goes through `with_retries`, which retries
  only transient failures (connection, timeout, 408/429/5xx, one expired token), at most `RetryPolicy.retries`
  times, gives up on connection failures once `connect_deadline` seconds have passed, and logs each retry on this
  module's logger (INFO: the attempt, the error, the wait).
- Inside `recording_retries()`, each retry appends its error to the list it yields: a create-only write uses it to
  tell "a retry met our own earlier write" from "someone else's object" (see gcs_upload.py).

Why not gcsfs's request methods: gcsfs retries every request 6 times with back-off up to 32 s and no total deadline
(its docs/source/retries.rst), fixed when its class is defined; no public parameter changes it, so an unreachable
endpoint takes ~33 s to fail and REPROBUNDLE_GCS_RETRIES=0 could not hold. Its retries are also invisible to the
caller, which the create-only rule above needs. gcsfs still provides the credentials (see gcs.py). Its own asyncio
client (not http_client's synchronous one) because uploads and ranges run concurrently; the backoff is shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import json
import logging
import os
import time
import weakref
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterator, NamedTuple, TypeVar
from urllib.parse import quote

import aiohttp

from .. import __version__
from ..text import first_line
from .http_client import TRANSIENT_STATUS, RateFloor, backoff  # the package's one backoff, statuses, rate floor

log = logging.getLogger(__name__)

USER_AGENT = f"reprobundle/{__version__}"
MTLS_ENDPOINT = "https://storage.mtls.googleapis.com"

T = TypeVar("T")


# -- what a response or a failure means -------------------------------------------------------------------------


class GCSResponseError(Exception):
    """GCS answered with an error status. `message` is the JSON API's error message (or the body's text)."""

    def __init__(self, status: int, message: str, url: str) -> None:
        super().__init__(f"HTTP {status}: {message}" if message else f"HTTP {status}")
        self.status, self.message, self.url = status, message, url


class GCSNotFound(GCSResponseError):
    """404: no such object (or no such bucket)."""


class GCSPreconditionFailed(GCSResponseError):
    """412: a precondition failed; for `ifGenerationMatch=0`, the object already exists."""


class CredentialsFailed(Exception):
    """The credentials could not produce an access token (a refresh failed); the cause is chained."""


class Response(NamedTuple):
    status: int
    headers: Any  # aiohttp's case-insensitive multidict
    body: bytes


def check_status(status: int, body: bytes, url: str) -> None:
    """Raise the GCSResponseError for an error status. 499 is GCS's answer to cancelling an upload: not an error."""
    if status < 400 or status == 499:
        return
    message = ""
    if body:
        text = body.decode("utf-8", errors="replace")
        try:
            error = json.loads(text)["error"]
            message = error if isinstance(error, str) else str(error.get("message", ""))
        except (ValueError, KeyError, TypeError, AttributeError):
            message = text
    message = message.strip()
    cls = {404: GCSNotFound, 412: GCSPreconditionFailed}.get(status, GCSResponseError)
    raise cls(status, message, url)


def is_connect_error(e: BaseException) -> bool:
    """The TCP connection (or DNS lookup) could not be made at all."""
    return isinstance(e, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError))


def is_network_failure(e: BaseException) -> bool:
    """The endpoint did not answer usefully: transport errors, timeouts, and transient statuses (after retries)."""
    return isinstance(e, (aiohttp.ClientError, asyncio.TimeoutError)) or (
        isinstance(e, GCSResponseError) and e.status in TRANSIENT_STATUS
    )


def is_transient(e: BaseException, attempt: int) -> bool:
    """Worth another try. An expired access token (401 "Invalid Credentials", or a failed refresh) is retried once:
    the credentials refresh before the next request."""
    if isinstance(e, GCSResponseError):
        if e.status == 401:
            return attempt == 0 and "Invalid Credentials" in e.message
        return e.status in TRANSIENT_STATUS
    if isinstance(e, CredentialsFailed):  # gcsfs's credentials report a failed refresh as "Invalid Credentials"
        return attempt == 0 and "Invalid Credentials" in str(e)
    return isinstance(e, (aiohttp.ClientError, asyncio.TimeoutError))


def failure_reason(e: BaseException, *, retries: int, connect_timeout: float, read_timeout: float) -> str:
    """Why the endpoint could not be reached, in a few words, for a network failure (see is_network_failure)."""
    if isinstance(e, GCSResponseError):
        return f"HTTP {e.status} after {retries} retries"
    if isinstance(e, aiohttp.ConnectionTimeoutError):
        return f"no connection within {connect_timeout:g}s"
    if isinstance(e, asyncio.TimeoutError):
        return f"no answer within {read_timeout:g}s"
    if isinstance(e, aiohttp.ClientConnectorDNSError):
        return f"cannot resolve host {getattr(e, 'host', '')}"
    if isinstance(e, aiohttp.ClientConnectorError):
        os_error = getattr(e, "os_error", None)
        if isinstance(os_error, ConnectionRefusedError):
            return "connection refused"
        return f"cannot connect ({first_line(getattr(os_error, 'strerror', None) or os_error or e, 120)})"
    return first_line(e, 160) or type(e).__name__


# -- the one retry helper ---------------------------------------------------------------------------------------

# Set by recording_retries(): each retried failure is appended, so a caller can tell whether an answer it got
# answers a *re-sent* request.
_RETRIED: contextvars.ContextVar[list | None] = contextvars.ContextVar("reprobundle_gcs_retried", default=None)


@contextlib.contextmanager
def recording_retries() -> Iterator[list[BaseException]]:
    """Collect the failures that `with_retries` retried within this block (in this task)."""
    retried: list[BaseException] = []
    token = _RETRIED.set(retried)
    try:
        yield retried
    finally:
        _RETRIED.reset(token)


@dataclass(frozen=True)
class RetryPolicy:
    retries: int  # retries after the first attempt
    connect_deadline: float  # seconds after which connection failures are no longer retried


async def with_retries(
    op: Callable[[int], Awaitable[T]],
    policy: RetryPolicy,
    what: str,
    transient: Callable[[BaseException, int], bool] = is_transient,
) -> T:
    """`await op(attempt)` for attempt 0, 1, ... until it returns, or fails in a way `transient` says not to retry,
    or the policy's retries (or its connection deadline) are spent; then the last failure is raised as it is."""
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return await op(attempt)
        except Exception as e:
            if attempt >= policy.retries or not transient(e, attempt):
                raise
            delay = backoff(attempt)
            if is_connect_error(e) and time.monotonic() - started + delay > policy.connect_deadline:
                raise
            log.info("GCS %s: attempt %d failed (%s: %s); retry %d of %d in %.2fs", what, attempt + 1,
                     type(e).__name__, first_line(e, 160), attempt + 1, policy.retries, delay)
            retried = _RETRIED.get()
            if retried is not None:
                retried.append(e)
            attempt += 1
            await asyncio.sleep(delay)


# -- endpoints --------------------------------------------------------------------------------------------------


def google_endpoint(client_certificate: bool) -> str:
    """Google's JSON-API endpoint: in GOOGLE_CLOUD_UNIVERSE_DOMAIN (default googleapis.com), or the mutual-TLS
    endpoint when a client certificate is presented (unless GOOGLE_API_USE_MTLS_ENDPOINT=never)."""
    universe = os.environ.get("GOOGLE_CLOUD_UNIVERSE_DOMAIN", "googleapis.com")
    mtls_mode = os.environ.get("GOOGLE_API_USE_MTLS_ENDPOINT", "auto").lower()
    if client_certificate and universe == "googleapis.com" and mtls_mode != "never":
        return MTLS_ENDPOINT
    return f"https://storage.{universe}"


def use_client_certificate() -> bool:
    """Whether google-auth says to present its default client certificate (GOOGLE_API_USE_CLIENT_CERTIFICATE, or a
    certificate config with a workload section): workloads whose tokens are bound to it need mutual TLS."""
    try:
        from google.auth.transport import mtls
    except ImportError:
        return False
    should_use = getattr(mtls, "should_use_client_cert", None)
    if should_use is None or not hasattr(mtls, "get_default_ssl_context") or not should_use():
        return False
    return bool(mtls.has_default_client_cert_source())


def _client_certificate_context():
    from google.auth.transport import mtls

    return mtls.get_default_ssl_context()


# -- the client -------------------------------------------------------------------------------------------------


class GCSClient:
    """Requests to one JSON-API endpoint with one set of credentials.

    `credentials` is anything with `apply(headers)` that adds an Authorization header (refreshing the token when
    due), or None for anonymous access. One aiohttp session per event loop, made on first use and closed at exit."""

    def __init__(self, endpoint: str, credentials, *, connect_timeout: float, read_timeout: float, retries: int,
                 client_certificate: bool = False) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.credentials = credentials
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.policy = RetryPolicy(retries=retries, connect_deadline=connect_timeout)
        # No total limit: a large range or upload may take long; a connection or a silent server may not.
        self.timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout, sock_read=read_timeout)
        self.client_certificate = client_certificate
        self._session: aiohttp.ClientSession | None = None
        self._session_loop: asyncio.AbstractEventLoop | None = None

    # -- URLs of the JSON API ----------------------------------------------------------------------------------
    def objects_url(self, bucket: str) -> str:
        return f"{self.endpoint}/storage/v1/b/{quote(bucket, safe='')}/o"

    def object_url(self, bucket: str, name: str) -> str:
        return f"{self.objects_url(bucket)}/{quote(name, safe='')}"

    def media_url(self, bucket: str, name: str) -> str:
        """Download URL of an object's bytes (with ?alt=media)."""
        return f"{self.endpoint}/download/storage/v1/b/{quote(bucket, safe='')}/o/{quote(name, safe='')}"

    def upload_url(self, bucket: str) -> str:
        return f"{self.endpoint}/upload/storage/v1/b/{quote(bucket, safe='')}/o"

    # -- requests ----------------------------------------------------------------------------------------------
    async def session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session_loop is not loop:  # first use, or a new loop after a fork
            connector = None
            if self.client_certificate:
                ssl_context = await asyncio.to_thread(_client_certificate_context)
                if self._session is not None and self._session_loop is loop:  # made while we waited
                    return self._session
                connector = aiohttp.TCPConnector(ssl=ssl_context)
            self._session = aiohttp.ClientSession(connector=connector)
            self._session_loop = loop
            weakref.finalize(self, _close_session, loop, self._session)
        return self._session

    async def send(self, method: str, url: str, *, params: dict | None = None, headers: dict | None = None,
                   data=None, json: Any = None, allow_redirects: bool = True, floor: RateFloor | None = None,
                   ) -> Response:
        """One request; raises GCSResponseError (or a subclass) for an error status.

        `allow_redirects=False` is for resumable uploads: GCS answers 308 ("resume incomplete", no Location) to
        each partial request, which aiohttp would otherwise follow as a redirect. The body is read under the rate
        floor (http_client.RateFloor): `floor`, a record's (held to the record deadline), or one of its own."""
        session = await self.session()
        head = {"User-Agent": USER_AGENT, **(headers or {})}
        if self.credentials is not None:
            try:
                self.credentials.apply(head)  # refreshes the token first when it is (nearly) expired
            except Exception as e:
                raise CredentialsFailed(first_line(e, 160) or type(e).__name__) from e
        params = {k: v for k, v in (params or {}).items() if v is not None}
        async with session.request(method, url, params=params, headers=head, data=data, json=json,
                                   timeout=self.timeout, allow_redirects=allow_redirects) as r:
            body = await _read_body(r, floor or RateFloor(url))
            check_status(r.status, body, url)
            return Response(r.status, r.headers, body)

    async def request(self, method: str, url: str, *, what: str | None = None, **kwargs) -> Response:
        """`send` with retries (see with_retries). The body must be re-sendable: bytes, or None."""
        return await with_retries(lambda attempt: self.send(method, url, **kwargs), self.policy,
                                  what or f"{method} {url}")

    async def get_json(self, url: str, params: dict | None = None, what: str | None = None) -> dict:
        response = await self.request("GET", url, params=params, what=what)
        return json.loads(response.body) if response.body else {}


async def _read_body(response: aiohttp.ClientResponse, floor: RateFloor) -> bytes:
    """The whole body, each chunk as it arrives told to `floor` (a drip ends there, not at the read timeout)."""
    chunks = []
    floor.body_started()
    async for chunk in response.content.iter_any():
        floor.moved(len(chunk))
        chunks.append(chunk)
    return b"".join(chunks)


def _close_session(loop: asyncio.AbstractEventLoop, session: aiohttp.ClientSession) -> None:
    """Close a session on its loop (at exit, or when its client goes away), so aiohttp does not report it unclosed."""
    if session.closed or loop.is_closed() or not loop.is_running():
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        loop.create_task(session.close())
        return
    try:
        asyncio.run_coroutine_threadsafe(session.close(), loop).result(timeout=2)
    except Exception:
        pass
