"""Slow transfers end early (#29): a server on 127.0.0.1 that drips a store's records (marker, tag, manifest, run)
and blobs a few bytes a second, to the http store, the GCS client and the index's GET. With the rate window made
small (REPROBUNDLE_HTTP_RATE_WINDOW=1) and the total deadline left long, each read ends with StoreTimeoutError naming
the URL and the rate, well before that deadline; a record that arrives above the floor but takes too long ends at
the record deadline; a marker served as an endless stream ends at its size cap. Bounds are generous (60 s), never
tight: what is asserted is that the floor, not the deadline, ended the read."""

from __future__ import annotations

import http.server
import json
import re
import time
import urllib.parse
from pathlib import Path

import pytest
from cli_runner import cli
from http_servers import send_file, serve
from small_bundle import copy_of

from reprobundle.bundle import manifest as mf
from reprobundle.bundle.registry import Registry, blob_key
from reprobundle.errors import CorruptBundleError, StoreTimeoutError

DEADLINE_S = 200  # REPROBUNDLE_HTTP_DEADLINE here: far above every bound asserted, so it never ends a read
WINDOW_S = 1  # REPROBUNDLE_HTTP_RATE_WINDOW here
BOUND_S = 60  # a generous bound on each read the floor ends
DRIP = (2, 0.25)  # bytes, seconds between them: 8 bytes/s, under any sensible floor
STREAM = (4096, 0.1)  # an endless stream at ~40 KiB/s: above the floor, so only a size cap or a deadline ends it
RUN_KEY = "runs/" + "ab" * 32 + "/drip.msgpack"
RECORDS = {"marker": "reprobundle-store.json", "tag": "tags/small/good", "manifest": "bundles/small/1.msgpack"}


def _send_slowly(handler: http.server.BaseHTTPRequestHandler, data: bytes | None, pace: tuple[int, float], *,
                 status: int = 200, headers: dict | None = None) -> None:
    """`data` (None: endless) at `pace` (bytes, seconds between them), with its length when it has one."""
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    if data is not None:
        handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    size, gap = pace
    try:
        for start in range(0, len(data) if data is not None else 1 << 40, size):
            time.sleep(gap)  # before each piece: a record of one byte still takes `gap`
            handler.wfile.write(data[start:start + size] if data is not None else b"{" * size)
            handler.wfile.flush()
    except OSError:
        pass  # the client went away: what the floor makes it do


class _SlowStore(http.server.BaseHTTPRequestHandler):
    """GET /MODE/TARGET/PATH: the file at PATH under `root`; when PATH is TARGET's (a record's key, or any blob for
    `blobs`) it goes at the pace of MODE: `drip` (its real bytes at DRIP), `trickle` (endless at DRIP: a tag's
    bytes are too few to drip for long) or `stream` (endless at STREAM). HEAD is honest."""

    root: Path
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        send_file(self, self.root / self.path.split("/", 3)[3], False)

    def do_GET(self):
        _, mode, target, rest = self.path.split("/", 3)
        if not (rest.endswith(RECORDS.get(target, "\0")) or (target == "blobs" and "/blobs/" in f"/{rest}")):
            return send_file(self, self.root / rest, True)
        if mode == "drip":
            return _send_slowly(self, (self.root / rest).read_bytes(), DRIP)
        _send_slowly(self, None, STREAM if mode == "stream" else DRIP)


class _SlowGcs(http.server.BaseHTTPRequestHandler):
    """The few GCS JSON API calls a read makes (an object's metadata; its bytes by range) over the folder `root` as
    one bucket; the object `slow` (a key) goes at `pace`, every other honestly."""

    root: Path
    slow: str
    pace: tuple[int, float]
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def do_GET(self):
        url = urllib.parse.urlsplit(self.path)
        media = url.path.startswith("/download/")
        name = urllib.parse.unquote(url.path.rsplit("/o/", 1)[1])
        path = self.root / name
        if not path.is_file():
            return self.send_error(404)
        data = path.read_bytes()
        if not media:
            body = json.dumps({"name": name, "size": str(len(data)), "generation": "1"}).encode()
            return _send_slowly(self, body, (len(body), 0), headers={"Content-Type": "application/json"})
        first, last = (int(x) for x in self.headers["Range"].removeprefix("bytes=").split("-"))
        part = data[first:last + 1]
        headers = {"Content-Range": f"bytes {first}-{first + len(part) - 1}/{len(data)}", "X-Goog-Generation": "1"}
        _send_slowly(self, part, self.pace if name == self.slow else (len(part) or 1, 0), status=206,
                     headers=headers)


@pytest.fixture(scope="module")
def folder(small_store_template, tmp_path_factory) -> Path:
    """small@1 tagged `good`, and a run record of 4 KiB beside it, in a folder the servers serve."""
    root = tmp_path_factory.mktemp("slow")
    copy_of(small_store_template, root / "store")
    registry = Registry.open(root / "store")
    registry.tag("small", 1, "good")
    registry.store.put(RUN_KEY, b"\x80" * 4096)  # the store's reads never decode it
    return root


@pytest.fixture(scope="module")
def slow_store(folder):
    with serve(type("S", (_SlowStore,), {"root": folder})) as url:
        yield url


@pytest.fixture(autouse=True)
def _small_window(monkeypatch):
    monkeypatch.setenv("REPROBUNDLE_HTTP_RATE_WINDOW", str(WINDOW_S))
    monkeypatch.setenv("REPROBUNDLE_HTTP_DEADLINE", str(DEADLINE_S))
    monkeypatch.delenv("REPROBUNDLE_HTTP_MIN_RATE", raising=False)
    monkeypatch.delenv("REPROBUNDLE_HTTP_RECORD_DEADLINE", raising=False)


def _timed(*argv, store=None):
    start = time.monotonic()
    code, out, err = cli(*argv, store=store)
    return code, out, err, time.monotonic() - start


def _says_floor(err: str, url_part: str) -> bool:
    """The error line names the URL read and the rate it went at, against the floor."""
    return url_part in err and "bytes/s over the last" in err and "under the 1024 bytes/s" in err


@pytest.mark.parametrize("target", sorted(RECORDS))
def test_a_record_dripped_to_an_http_store_ends_at_the_floor(slow_store, target):
    """Class: the marker, a tag or a manifest at 8 bytes/s (the issue's case: 1 byte/s held `show` for the whole
    300 s deadline): `show` ends with StoreTimeoutError naming the record's URL and its rate, within the bound."""
    mode = "trickle" if target == "tag" else "drip"
    ref = f"{slow_store}/{mode}/{target}/store/small@{'good' if target == 'tag' else 1}"
    code, out, err, seconds = _timed("show", ref)
    assert code == StoreTimeoutError.exit_code, (code, out, err)
    assert _says_floor(err, f"/{mode}/{target}/store/{RECORDS[target]}"), err
    assert len(err.strip().splitlines()) <= 2 and "Traceback" not in err, err
    assert seconds < BOUND_S, seconds


def test_blobs_dripped_to_a_pull_end_at_the_floor_and_nothing_is_published(slow_store, tmp_path):
    """Class: blobs at 8 bytes/s, pulled from an http store: StoreTimeoutError naming a blob's URL and rate; the
    destination gets no manifest."""
    code, out, err, seconds = _timed("pull", f"{slow_store}/drip/blobs/store/small@1", store=tmp_path / "dest")
    assert code == StoreTimeoutError.exit_code, (code, out, err)
    assert _says_floor(err, "/drip/blobs/store/blobs/sha256/"), err
    assert seconds < BOUND_S, seconds
    assert not list((tmp_path / "dest").glob("bundles/*/*.msgpack"))


def test_the_index_get_ends_at_the_floor(slow_store, monkeypatch):
    """The package index, the nightlies and jax's source files are read by http_client.get: the same floor."""
    from reprobundle.store import http_client

    url = f"{slow_store}/drip/manifest/store/bundles/small/1.msgpack"
    start = time.monotonic()
    with pytest.raises(StoreTimeoutError) as caught:
        http_client.get(url)
    assert url in caught.value.message and "bytes/s" in caught.value.message
    assert time.monotonic() - start < BOUND_S


def test_the_floor_can_be_turned_off_and_its_settings_are_checked(slow_store, monkeypatch):
    """REPROBUNDLE_HTTP_MIN_RATE=0: no floor, the record deadline still ends a drip; a bad value is a usage error."""
    monkeypatch.setenv("REPROBUNDLE_HTTP_MIN_RATE", "0")
    monkeypatch.setenv("REPROBUNDLE_HTTP_RECORD_DEADLINE", "1.5")
    code, _, err, seconds = _timed("show", f"{slow_store}/drip/manifest/store/small@1")
    assert code == StoreTimeoutError.exit_code and "a record still arriving after 1.5 s" in err, err
    assert seconds < BOUND_S
    monkeypatch.setenv("REPROBUNDLE_HTTP_MIN_RATE", "fast")
    code, _, err, _ = _timed("show", f"{slow_store}/drip/manifest/store/small@1")
    assert code == 2 and "REPROBUNDLE_HTTP_MIN_RATE='fast' is not a number of bytes per second" in err, err


def test_a_record_above_the_floor_still_ends_at_the_record_deadline(slow_store, monkeypatch):
    """A manifest streamed endlessly above the floor: neither the floor nor (here) the 64 MiB cap of a manifest
    would end it for minutes; the record deadline does, naming the URL and the rate."""
    monkeypatch.setenv("REPROBUNDLE_HTTP_RECORD_DEADLINE", "1.5")
    code, out, err, seconds = _timed("show", f"{slow_store}/stream/manifest/store/small@1")
    assert code == StoreTimeoutError.exit_code, (code, out, err)
    assert "/stream/manifest/store/bundles/small/1.msgpack: a record still arriving after 1.5 s" in err, err
    assert "bytes/s" in err and seconds < BOUND_S, (err, seconds)


def test_a_marker_served_as_an_endless_stream_ends_at_its_size_cap(slow_store, monkeypatch):
    """The size cap: an endless marker above the floor, the record deadline long, stops one byte past the
    marker's 64 KiB (a few seconds at this pace), as a record too large."""
    monkeypatch.setenv("REPROBUNDLE_HTTP_RECORD_DEADLINE", str(DEADLINE_S))
    code, out, err, seconds = _timed("show", f"{slow_store}/stream/marker/store/small@1")
    assert code == CorruptBundleError.exit_code, (code, out, err)
    assert re.search("larger than|not a reprobundle store marker", err), err
    assert seconds < BOUND_S, seconds


# ---------------------------------------------------------------------------------------------------------- GCS


@pytest.fixture(scope="module")
def gcs_like(folder):
    """A GCS endpoint over `folder/store` as bucket `slow-bucket`; `store_dripping(key, pace)` is a GCSStore on it
    whose object `key` goes at `pace`."""
    handler = type("G", (_SlowGcs,), {"root": folder / "store", "slow": "", "pace": DRIP})
    with serve(handler) as url:
        def store_dripping(key: str, pace=DRIP):
            from reprobundle.store.gcs import GCSStore

            handler.slow, handler.pace = key, pace
            return GCSStore("gs://slow-bucket", endpoint=url, token="anon", retries=0)
        yield store_dripping


@pytest.mark.parametrize("target", ["marker", "tag", "manifest", "run"])
def test_a_record_dripped_by_gcs_ends_at_the_floor(gcs_like, folder, target):
    """Class: each kind of record read from a GCS store (get_bounded, as the registry reads them) at 8 bytes/s:
    StoreTimeoutError naming the object's URL and the rate."""
    key = RUN_KEY if target == "run" else RECORDS[target]
    store = gcs_like(key, (1, 2.0) if target == "tag" else DRIP)  # a tag's one byte: after 2 s
    start = time.monotonic()
    with pytest.raises(StoreTimeoutError) as caught:
        store.get_bounded(key, mf.MAX_MANIFEST_BYTES)
    assert time.monotonic() - start < BOUND_S
    message = caught.value.message
    assert urllib.parse.quote(key, safe="") in message or key in message, message
    assert "bytes/s over the last" in message, message


def test_a_blob_dripped_by_gcs_ends_at_the_floor(gcs_like, folder, tmp_path):
    """A blob downloaded from a GCS store at 8 bytes/s: StoreTimeoutError naming its URL and rate, no file left."""
    registry = Registry.open(folder / "store")
    blob = registry.resolve("small@1").manifest["function"]["exported"]
    key = blob_key(blob["digest"])
    store = gcs_like(key)
    start = time.monotonic()
    with pytest.raises(StoreTimeoutError) as caught:
        store.get_file(key, tmp_path / "blob")
    assert time.monotonic() - start < BOUND_S
    assert urllib.parse.quote(key, safe="") in caught.value.message and "bytes/s" in caught.value.message
    assert not list(tmp_path.iterdir())


def test_a_gcs_record_above_the_floor_ends_at_the_record_deadline(gcs_like, folder, monkeypatch):
    """A run record at 160 bytes/s (above a 1 byte/s floor): the record deadline ends it."""
    monkeypatch.setenv("REPROBUNDLE_HTTP_MIN_RATE", "1")
    monkeypatch.setenv("REPROBUNDLE_HTTP_RECORD_DEADLINE", "1.5")
    key = RUN_KEY
    store = gcs_like(key, (16, 0.1))
    with pytest.raises(StoreTimeoutError, match="a record still arriving after 1.5 s"):
        store.get_bounded(key, mf.MAX_MANIFEST_BYTES)
