"""The package's one HTTP policy: timeouts, bounded retries with exponential backoff on transient failures (a
connection that fails or drops, 408/429/5xx), each retry logged at INFO (shown with --verbose).

- `get(url)`: one synchronous GET with retries, for the package index, the nightly index and jax's source files.
- `with_retries(op, what)`: the retry loop itself, for any synchronous request; the http stores (fsspec over
  aiohttp) run their requests through it with `is_transient_aiohttp`, and take their aiohttp timeouts from
  `client_timeout()` (REPROBUNDLE_HTTP_TIMEOUT, REPROBUNDLE_HTTP_DEADLINE).
- GCS keeps its asyncio client (gcs_http.py: it needs async uploads and to see each retry) with this backoff.

A timeout is not retried: a request stays bounded by its deadline. urllib, not requests or httpx: neither is a
dependency, and one GET with headers is all the indexes need.
"""

from __future__ import annotations

import logging
import random
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable, TypeVar

from ..config import settings
from ..errors import UsageError
from ..text import first_line, quoted

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_FIRST = 0.5  # seconds before the first retry; doubled each time, with jitter
BACKOFF_MAX = 8.0
TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
DEFAULT_RETRIES = 2  # retries after the first attempt, for plain web requests (GCS has its own setting)

ENV_TIMEOUT = "REPROBUNDLE_HTTP_TIMEOUT"
DEFAULT_TIMEOUT = 30.0
ENV_DEADLINE = "REPROBUNDLE_HTTP_DEADLINE"
DEFAULT_DEADLINE = 300.0


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


def _seconds(name: str, default: float) -> float:
    raw = getattr(settings(), name.removeprefix("REPROBUNDLE_").lower())
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = -1.0
    if not value > 0:
        raise UsageError(f"{name}={quoted(raw, 40)} is not a positive number of seconds")
    return value


def timeout() -> float:
    """Seconds to connect and between bytes: $REPROBUNDLE_HTTP_TIMEOUT, else 30."""
    return _seconds(ENV_TIMEOUT, DEFAULT_TIMEOUT)


def deadline() -> float:
    """Seconds one request may take in all, body included: $REPROBUNDLE_HTTP_DEADLINE, else 300."""
    return _seconds(ENV_DEADLINE, DEFAULT_DEADLINE)


def client_timeout():
    """The aiohttp timeouts of the http stores: the deadline for a whole request (aiohttp cancels the read at it),
    the timeout to connect and between bytes."""
    import aiohttp

    t = timeout()
    return aiohttp.ClientTimeout(total=deadline(), connect=t, sock_read=t)


def backoff(attempt: int) -> float:
    """Seconds to wait before retry number attempt+1: exponential, capped, with jitter (50-100%)."""
    return min(BACKOFF_FIRST * 2**attempt, BACKOFF_MAX) * random.uniform(0.5, 1.0)


def causes(e: BaseException | None):
    """`e` and the exceptions it was raised from or during, innermost last (at most 10)."""
    seen = 0
    while e is not None and seen < 10:
        yield e
        e = e.__cause__ or e.__context__
        seen += 1


def is_transient(e: BaseException) -> bool:
    """A urllib failure worth another try: a transient status, or a connection refused, reset or dropped."""
    if isinstance(e, urllib.error.HTTPError):
        return e.code in TRANSIENT_STATUS
    reason = e.reason if isinstance(e, urllib.error.URLError) else e
    return isinstance(reason, ConnectionError) and not isinstance(reason, TimeoutError)


def is_transient_aiohttp(e: BaseException) -> bool:
    """An aiohttp failure (as fsspec raises it, possibly wrapped) worth another try: a transient status, or a
    connection that failed or dropped; never a timeout or an unsafe redirect."""
    import aiohttp

    for cause in causes(e):
        if isinstance(cause, TimeoutError):
            return False
        if isinstance(cause, aiohttp.ClientResponseError):
            return cause.status in TRANSIENT_STATUS
        if isinstance(cause, (aiohttp.ClientConnectionError, ConnectionError)):
            return True
    return False


def with_retries(op: Callable[[], T], what: str, *, retries: int = DEFAULT_RETRIES,
                 transient: Callable[[BaseException], bool] = is_transient, give_up_after: float | None = None) -> T:
    """`op()` until it returns, or fails in a way `transient` says not to retry, or `retries` retries are spent, or
    the next one would start more than `give_up_after` seconds after the first; then the last failure is raised."""
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return op()
        except Exception as e:
            delay = backoff(attempt)
            late = give_up_after is not None and time.monotonic() - started + delay > give_up_after
            if attempt >= retries or late or not transient(e):
                raise
            log.info("HTTP %s: attempt %d failed (%s: %s); retry %d of %d in %.2fs", what, attempt + 1,
                     type(e).__name__, first_line(e, 160), attempt + 1, retries, delay)
            attempt += 1
            time.sleep(delay)


def get(url: str, *, headers: dict[str, str] | None = None, timeout: float = DEFAULT_TIMEOUT,
        limit: int | None = None, retries: int = DEFAULT_RETRIES) -> Response:
    """GET `url` (its body, at most `limit` bytes when given), retrying transient failures. Raises what urllib
    raises: HTTPError for an error status (after retries, when transient), URLError or OSError otherwise."""
    head = {"User-Agent": "reprobundle", **(headers or {})}

    def once() -> Response:
        request = urllib.request.Request(url, headers=head)
        with urllib.request.urlopen(request, timeout=timeout) as r:
            body = r.read() if limit is None else r.read(limit)
            return Response(r.status, {k.lower(): v for k, v in r.headers.items()}, body)

    return with_retries(once, f"GET {url}", retries=retries)
