"""The package's one HTTP policy: timeouts, bounded retries with exponential backoff on transient failures (a
connection that fails or drops, 408/429/5xx), each retry logged at INFO (shown with --verbose).

- `get(url)`: one synchronous GET with retries, for the package index, the nightly index and jax's source files.
- `with_retries(op, what)`: the retry loop itself, for any synchronous request; the http stores (fsspec over
  aiohttp) run their requests through it with `is_transient_aiohttp`, and take their aiohttp timeouts from
  `client_timeout()` (REPROBUNDLE_HTTP_TIMEOUT, REPROBUNDLE_HTTP_DEADLINE).
- GCS keeps its asyncio client (gcs_http.py: it needs async uploads and to see each retry) with this backoff.

Every body read goes through `RateFloor` (the http stores' streams, GCS's requests): a transfer that averages fewer
than REPROBUNDLE_HTTP_MIN_RATE bytes a second (default 1024) over REPROBUNDLE_HTTP_RATE_WINDOW seconds (default 30)
ends with StoreTimeoutError naming the URL and the rate, as curl's --speed-limit/--speed-time; a record (marker, tag,
manifest, run: read with `get_bounded`, whose limit is its size cap) also ends after REPROBUNDLE_HTTP_RECORD_DEADLINE
seconds (default 60), so a drip just above the floor holds nothing for minutes. The total deadline bounds the rest.

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
from ..errors import StoreTimeoutError, UsageError
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
ENV_MIN_RATE = "REPROBUNDLE_HTTP_MIN_RATE"
DEFAULT_MIN_RATE = 1024.0  # bytes per second: a user on a real link never sees it
ENV_RATE_WINDOW = "REPROBUNDLE_HTTP_RATE_WINDOW"
DEFAULT_RATE_WINDOW = 30.0
ENV_RECORD_DEADLINE = "REPROBUNDLE_HTTP_RECORD_DEADLINE"
DEFAULT_RECORD_DEADLINE = 60.0


@dataclass(frozen=True)
class Response:
    status: int
    headers: dict[str, str]  # names in lower case
    body: bytes


def _seconds(name: str, default: float, *, unit: str = "seconds", zero: bool = False) -> float:
    raw = getattr(settings(), name.removeprefix("REPROBUNDLE_").lower())
    try:
        value = float(raw) if raw else default
    except ValueError:
        value = -1.0
    if not (value >= 0 if zero else value > 0) or value == float("inf"):
        raise UsageError(f"{name}={quoted(raw, 40)} is not a {'' if zero else 'positive '}number of {unit}"
                         + (" (0: no floor)" if zero else ""))
    return value


def timeout() -> float:
    """Seconds to connect and between bytes: $REPROBUNDLE_HTTP_TIMEOUT, else 30."""
    return _seconds(ENV_TIMEOUT, DEFAULT_TIMEOUT)


def deadline() -> float:
    """Seconds one request may take in all, body included: $REPROBUNDLE_HTTP_DEADLINE, else 300."""
    return _seconds(ENV_DEADLINE, DEFAULT_DEADLINE)


def min_rate() -> float:
    """Bytes a second a body must average over the rate window: $REPROBUNDLE_HTTP_MIN_RATE, else 1024; 0: no floor."""
    return _seconds(ENV_MIN_RATE, DEFAULT_MIN_RATE, unit="bytes per second", zero=True)


def rate_window() -> float:
    """Seconds over which the rate is judged: $REPROBUNDLE_HTTP_RATE_WINDOW, else 30."""
    return _seconds(ENV_RATE_WINDOW, DEFAULT_RATE_WINDOW)


def record_deadline() -> float:
    """Seconds one record may take to arrive: $REPROBUNDLE_HTTP_RECORD_DEADLINE, else 60."""
    return _seconds(ENV_RECORD_DEADLINE, DEFAULT_RECORD_DEADLINE)


class RateFloor:
    """The slow-transfer rule of one body (every chunk read is told to `moved`): StoreTimeoutError naming the URL
    and the rate once a whole window went by at fewer than `min_rate()` bytes a second, or, for a record, once it
    took longer than `record_deadline()`. A gap with no byte at all is the read timeout's (it raises between bytes);
    this rule catches the server that keeps a connection alive a byte at a time."""

    def __init__(self, url: str, *, record: bool = False) -> None:
        self.url = url
        self.floor, self.window = min_rate(), rate_window()
        self.record_s = record_deadline() if record else None
        self.started = self.window_start = time.monotonic()
        self.total = self.in_window = 0

    def body_started(self) -> None:
        """A response's headers are in: its rate is judged from now (a record's deadline counts from the start)."""
        self.window_start, self.in_window = time.monotonic(), 0

    def moved(self, n: int) -> None:
        now = time.monotonic()
        self.total += n
        self.in_window += n
        if self.record_s is not None and now - self.started > self.record_s:
            raise StoreTimeoutError(
                f"{self.url}: a record still arriving after {self.record_s:g} s ({self.total} bytes so far, "
                f"{self._rate(self.total, now - self.started)})",
                hint=f"{ENV_RECORD_DEADLINE} bounds a record (marker, tag, manifest, run); {ENV_MIN_RATE} and "
                     f"{ENV_RATE_WINDOW} the slowest transfer")
        elapsed = now - self.window_start
        if elapsed < self.window:
            return
        if self.in_window < self.floor * elapsed:
            raise StoreTimeoutError(
                f"{self.url} sent {self._rate(self.in_window, elapsed)} over the last {elapsed:.0f} s, under the "
                f"{self.floor:g} bytes/s a transfer must keep",
                hint=f"{ENV_MIN_RATE} (bytes/s, 0: no floor) and {ENV_RATE_WINDOW} (seconds) set the floor; "
                     f"{ENV_DEADLINE} bounds a whole request")
        self.window_start, self.in_window = now, 0

    @staticmethod
    def _rate(n: int, seconds: float) -> str:
        return f"{n / max(seconds, 1e-9):.1f} bytes/s"


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
            floor, chunks, n = RateFloor(url), [], 0
            while limit is None or n < limit:
                chunk = r.read1(1 << 16 if limit is None else min(1 << 16, limit - n))  # what one recv brought
                if not chunk:
                    break
                floor.moved(len(chunk))
                chunks.append(chunk)
                n += len(chunk)
            return Response(r.status, {k.lower(): v for k, v in r.headers.items()}, b"".join(chunks))

    return with_retries(once, f"GET {url}", retries=retries)
