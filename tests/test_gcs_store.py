"""GCSStore against a real GCS JSON-API server (fake-gcs-server; fixtures in conftest_gcs.py). No mocks."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import pickle
import socket
import subprocess
import sys
import textwrap
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

import pytest
from audit import audited, logged

import reprobundle.store.gcs as gcs_store
from reprobundle.errors import (
    AlreadyExistsError,
    NotFoundError,
    StorePermissionError,
    StoreUnreachableError,
    UsageError,
)
from reprobundle.store import open_store
from reprobundle.store.gcs import GCSStore

REPO = Path(__file__).resolve().parents[1]


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def object_status(server, store: GCSStore, key: str) -> int:
    """HTTP status of the object's metadata, asked directly of the server (not through gcsfs)."""
    name = urllib.parse.quote(store._name(key), safe="")
    try:
        with urllib.request.urlopen(f"{server.endpoint}/storage/v1/b/{server.bucket}/o/{name}", timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


@pytest.fixture
def store(gcs_store_url) -> GCSStore:
    s = open_store(gcs_store_url)
    assert isinstance(s, GCSStore)
    return s


@pytest.fixture
def small_chunks(monkeypatch):
    """Make the resumable / ranged paths kick in for small values, so tests stay fast."""
    monkeypatch.setattr(gcs_store, "SIMPLE_UPLOAD_MAX", 256 << 10)
    monkeypatch.setattr(gcs_store, "CREATE_ONLY_SIMPLE_MAX", 256 << 10)
    monkeypatch.setattr(gcs_store, "UPLOAD_CHUNK", 256 << 10)  # GCS wants multiples of 256 KiB
    monkeypatch.setattr(gcs_store, "DOWNLOAD_CHUNK", 200 << 10)


# -- the Store contract -----------------------------------------------------------------------------------------


def test_put_get_exists_size_delete(store):
    assert not store.exists("a/b")
    store.put("a/b", b"hello")
    assert store.get("a/b") == b"hello"
    assert store.exists("a/b") and store.size("a/b") == 5
    store.put("a/b", memoryview(b"world!"))  # overwrite; memoryview accepted
    assert store.get("a/b") == b"world!"
    store.put("empty", b"")
    assert store.get("empty") == b"" and store.size("empty") == 0
    store.delete("a/b")
    assert not store.exists("a/b")
    store.delete("a/b")  # deleting a missing key is a no-op


def test_missing_key_errors(store):
    for op in (store.get, store.size, store.open_read):
        with pytest.raises(NotFoundError, match="nope not found in gs://"):
            op("nope")
    with pytest.raises(NotFoundError):
        store.get_file("nope", "/nonexistent-dir-never-created/x")


def test_keys_are_validated(store):
    for bad in ("../x", "/abs", "a//b", "a/./b", "sp ace"):
        with pytest.raises(UsageError):
            store.put(bad, b"x")


@pytest.mark.parametrize("size", [0, 1000, 3 << 20])
def test_put_file_get_file_open_read(store, tmp_path, size, small_chunks):
    data = os.urandom(size)
    src = tmp_path / "src"
    src.write_bytes(data)
    store.put_file("blobs/x", src)
    dst = tmp_path / "out" / "deeper" / "dst"
    store.get_file("blobs/x", dst)
    assert sha(dst.read_bytes()) == sha(data)
    assert not [p for p in dst.parent.iterdir() if p.name.startswith(".part-")]
    assert store.get("blobs/x") == data
    with store.open_read("blobs/x") as f:
        assert f.read(7) == data[:7]
        f.seek(size // 2)
        assert f.read() == data[size // 2:]
        f.seek(0)
        assert sha(f.read()) == sha(data)


def test_large_put_uses_resumable_upload_and_is_invisible_until_finalised(gcs_server, store, tmp_path, small_chunks):
    data = os.urandom(5 * (256 << 10) + 123)  # 6 resumable requests
    src = tmp_path / "big"
    src.write_bytes(data)
    seen, sent = [], []

    def progress(n):  # called on the I/O thread as bytes go out: ask the server directly
        sent.append(n)
        seen.append(object_status(gcs_server, store, "big"))

    store.put_many([("big", src)], progress=progress)
    assert sum(sent) == len(data)
    # One call per request as its bytes go out, then one when the server has stored the object. Before the last
    # request is sent, nothing may be visible; the call for the last request's bytes races the server's finalising.
    assert len(seen) == 7
    assert set(seen[:5]) == {404}, "an unfinished upload must not be visible"
    assert seen[-1] == 200, "progress reaches the total only once the object is stored"
    assert store.get("big") == data


def test_failed_upload_leaves_nothing(gcs_server, store, tmp_path, small_chunks):
    src = tmp_path / "big"
    src.write_bytes(os.urandom(4 * (256 << 10)))
    calls = []

    def progress(n):
        calls.append(n)
        if len(calls) == 2:
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        store.put_many([("big", src)], progress=progress)
    assert not store.exists("big")
    assert object_status(gcs_server, store, "big") == 404


# -- create-only ------------------------------------------------------------------------------------------------


def test_create_only(store, tmp_path):
    store.put("v/1", b"first", create_only=True)
    with pytest.raises(AlreadyExistsError, match="v/1 already exists"):
        store.put("v/1", b"second", create_only=True)
    assert store.get("v/1") == b"first"
    f = tmp_path / "f"
    f.write_bytes(b"file")
    with pytest.raises(AlreadyExistsError):
        store.put_file("v/1", f, create_only=True)
    store.put_file("v/2", f, create_only=True)
    assert store.get("v/2") == b"file"


def test_create_only_large_file(store, tmp_path, small_chunks):
    f = tmp_path / "f"
    f.write_bytes(os.urandom(3 * (256 << 10)))
    store.put_file("big", f, create_only=True)
    g = tmp_path / "g"
    g.write_bytes(os.urandom(3 * (256 << 10)))
    with pytest.raises(AlreadyExistsError):
        store.put_file("big", g, create_only=True)
    assert store.get("big") == f.read_bytes()


# One launcher process imports reprobundle once, then forks the racers (importing gcsfs in each of 8 fresh
# interpreters costs ~5 s of CPU apiece). Each racer opens its own store, session and connection after the fork.
RACE_LAUNCHER = textwrap.dedent(
    """
    import os, sys, time
    import reprobundle.store.gcs as g
    from reprobundle.errors import AlreadyExistsError
    from reprobundle.store import open_store

    url, key, go, n, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    if size > 256 << 10:  # force the resumable path
        g.CREATE_ONLY_SIMPLE_MAX = 256 << 10
        g.UPLOAD_CHUNK = 256 << 10

    def race(me):
        store = open_store(url)
        store.exists("warm-up")  # credentials, session and connection before the start line
        payload = (me.encode() * size)[:size]
        open(go + "." + me, "w").close()
        while not os.path.exists(go):
            time.sleep(0.0005)
        try:
            store.put(key, payload, create_only=True)
            return "won"
        except AlreadyExistsError:
            return "lost"

    children = []
    for i in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                os.write(w, race(f"w{i}").encode())
                code = 0
            except BaseException as e:
                os.write(w, f"error {e!r}".encode())
                code = 1
            os._exit(code)
        os.close(w)
        children.append((pid, r))
    for i, (pid, r) in enumerate(children):
        with os.fdopen(r, "rb") as f:
            print(f"w{i}", f.read().decode(), flush=True)
        os.waitpid(pid, 0)
    """
)


@pytest.mark.parametrize("path", ["single-request", "resumable"])
def test_create_only_race_8_processes(gcs_server, gcs_store_url, tmp_path, path):
    if path == "resumable" and not gcs_server.resumable_preconditions:
        pytest.skip("this fake-gcs-server does not enforce ifGenerationMatch on resumable uploads (>= 1.55 does)")
    size = 100 if path == "single-request" else 600 << 10
    n = 8
    go = tmp_path / "go"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    launcher = subprocess.Popen(
        [sys.executable, "-c", RACE_LAUNCHER, gcs_store_url, "versions/1", str(go), str(n), str(size)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(list(tmp_path.glob("go.w*"))) < n:
            assert launcher.poll() is None, launcher.communicate()
            assert time.monotonic() < deadline, "race workers did not get ready"
            time.sleep(0.02)
        go.touch()
        out, err = launcher.communicate(timeout=60)
    finally:
        if launcher.poll() is None:
            os.killpg(launcher.pid, 9)
    assert launcher.returncode == 0, err
    results = dict(line.split(" ", 1) for line in out.splitlines())
    assert len(results) == n, out
    winners = [me for me, r in results.items() if r == "won"]
    assert len(winners) == 1 and all(r == "lost" for me, r in results.items() if me not in winners), results
    assert open_store(gcs_store_url).get("versions/1") == (winners[0].encode() * size)[:size]


class ResponseDroppingProxy:
    """A TCP proxy in front of the server. When armed, it lets the next request through but swallows the reply
    and cuts the connection: the write happened, the client never heard (a lost response on a real network)."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self.armed = threading.Event()
        self.dropped = 0
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(64)
        self.endpoint = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(target=self._pump, args=(client, upstream, False), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client, True), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, is_reply: bool) -> None:
        try:
            while data := src.recv(1 << 16):
                if is_reply and self.armed.is_set():
                    self.armed.clear()
                    self.dropped += 1
                    break
                dst.sendall(data)
        except OSError:
            pass
        for sock in (src, dst):
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()

    def close(self) -> None:
        self.listener.close()


def test_create_only_survives_a_lost_reply(gcs_server, gcs_store_url):
    """Our create-only upload lands but its reply is lost; the retry meets 412. The store sees that the object
    holds exactly our bytes and reports success, not AlreadyExistsError."""
    proxy = ResponseDroppingProxy(gcs_server.port)
    try:
        s = GCSStore(gcs_store_url, endpoint=proxy.endpoint)
        assert not s.exists("v/1")  # connection warmed up through the proxy
        proxy.armed.set()
        s.put("v/1", b"mine", create_only=True)
        assert proxy.dropped == 1
        assert s.get("v/1") == b"mine"
        with pytest.raises(AlreadyExistsError):  # and someone else still loses
            s.put("v/1", b"theirs", create_only=True)
        proxy.armed.set()
        s.put("v/2", b"plain")  # an ordinary write is simply retried
        assert proxy.dropped == 2 and s.get("v/2") == b"plain"
    finally:
        proxy.close()


# -- listing ----------------------------------------------------------------------------------------------------


def test_list_under_prefixes(gcs_server, gcs_store_url, store):
    for k in ("a/1", "a/2", "a/b/3", "ab/4", "c"):
        store.put(k, k.encode())
    assert list(store.list()) == ["a/1", "a/2", "a/b/3", "ab/4", "c"]
    assert list(store.list("a")) == ["a/1", "a/2", "a/b/3"]
    assert list(store.list("a/b")) == ["a/b/3"]
    assert list(store.list("zzz")) == []
    # A store rooted deeper sees only its part, with keys relative to it.
    assert list(open_store(gcs_store_url + "/a").list()) == ["1", "2", "b/3"]
    # A sibling prefix sharing the first letters is not mixed in.
    sibling = open_store(gcs_store_url + "x")
    sibling.put("z", b"z")
    assert list(store.list()) == ["a/1", "a/2", "a/b/3", "ab/4", "c"]
    # Objects whose names are not valid keys (e.g. console "folders") are skipped.
    urllib.request.urlopen(urllib.request.Request(
        f"{gcs_server.endpoint}/upload/storage/v1/b/{gcs_server.bucket}/o?uploadType=media"
        f"&name={urllib.parse.quote(store._name('a') + '/', safe='')}", data=b"", method="POST"), timeout=5).read()
    assert list(store.list("a")) == ["a/1", "a/2", "a/b/3"]


def test_list_paginates(store):
    keys = [f"p/{i:04d}" for i in range(1105)]  # more than one page (1000) of listing
    store._run(_put_empty_many, store, keys)  # concurrently, through the store's own upload path
    assert list(store.list("p")) == keys
    assert store.exists_many(keys + ["p/nope"]) == set(keys)


async def _put_empty_many(store, keys):
    sem = asyncio.Semaphore(32)

    async def one(k):
        async with sem:
            await store._aupload_bytes(store._name(k), b"", False)

    await asyncio.gather(*(one(k) for k in keys))


# -- batch transfers --------------------------------------------------------------------------------------------


def test_put_many_get_many_round_trip(store, tmp_path):
    sizes = [0, 1, 1000, 64 << 10, 1 << 20] * 6 + [20 << 20, 9 << 20]  # the last two: resumable + ranged
    src = tmp_path / "src"
    src.mkdir()
    items, digests, total = [], {}, 0
    for i, size in enumerate(sizes):
        data = os.urandom(size)
        p = src / f"f{i}"
        p.write_bytes(data)
        key = f"blobs/sha256/{sha(data)[:2]}/{i}"
        items.append((key, p))
        digests[key] = sha(data)
        total += size
    sent, lock = [], threading.Lock()

    def count(n):
        with lock:
            sent.append(n)

    store.put_many(items, progress=count)
    assert sum(sent) == total

    assert store.exists_many([k for k, _ in items] + ["blobs/missing"]) == set(digests)
    dst = tmp_path / "dst"
    received = []
    store.get_many([(k, dst / k) for k, _ in items], progress=received.append)
    assert sum(received) == total
    for key, want in digests.items():
        assert sha((dst / key).read_bytes()) == want
    assert not list(dst.rglob(".part-*"))


def test_get_many_hashes_while_writing(store, tmp_path, monkeypatch):
    """Ranges arrive in any order; each object's sha256 is still that of its bytes, computed as they came, with no
    more held back than the window allows (1 MiB ranges, 2 MiB ahead: many out of order)."""
    monkeypatch.setattr(gcs_store, "DOWNLOAD_CHUNK", 1 << 20)
    monkeypatch.setattr(gcs_store._OrderedHash, "AHEAD", 2 << 20)
    blobs = {f"h/{i}": os.urandom(size) for i, size in enumerate([0, 1, 1 << 20, (1 << 20) + 1, 13 << 20])}
    for key, data in blobs.items():
        store.put(key, data)
    hashed: dict[str, str] = {}
    store.get_many([(k, tmp_path / k) for k in blobs], sha256=hashed)
    assert hashed == {k: hashlib.sha256(data).hexdigest() for k, data in blobs.items()}
    assert all((tmp_path / k).read_bytes() == data for k, data in blobs.items())


def test_get_many_missing_key(store, tmp_path):
    store.put("here", b"x")
    with pytest.raises(NotFoundError, match="gone not found"):
        store.get_many([("here", tmp_path / "here"), ("gone", tmp_path / "gone")])
    assert not (tmp_path / "gone").exists()
    assert not list(tmp_path.glob(".part-*"))


def test_exists_many_lists_big_folders(store, monkeypatch):
    monkeypatch.setattr(GCSStore, "LIST_THRESHOLD", 3)
    for k in ("d/1", "d/2", "d/3", "d/4", "d/sub/5", "e/1"):
        store.put(k, b"")
    asked = ["d/1", "d/2", "d/4", "d/9", "d/sub/5", "e/1", "e/2", "top"]
    assert store.exists_many(asked) == {"d/1", "d/2", "d/4", "d/sub/5", "e/1"}
    assert store.exists_many([]) == set()


# -- errors -----------------------------------------------------------------------------------------------------


def test_missing_bucket(gcs_server):
    s = GCSStore(f"gs://no-such-bucket-{uuid.uuid4().hex[:8]}/x")
    for op in (lambda: s.get("k"), lambda: s.exists("k"), lambda: list(s.list()), lambda: s.put("k", b"v")):
        with pytest.raises(StoreUnreachableError, match=r"bucket 'no-such-bucket-\w+' does not exist") as e:
            op()
        assert "gcloud storage buckets create" in e.value.hint


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _retries(records) -> list[float]:
    """The back-off delays (s) of the retries gcs_http logged: "... retry N of M in D s"."""
    return [float(r.args[-1]) for r in records if "retry %d of %d" in str(r.msg)]


def test_unreachable_fails_fast_with_defaults(monkeypatch):
    """Bounded by what it does, not by a clock: at most DEFAULT_RETRIES retries, one connection attempt each, their
    back-off within the connection deadline (gcsfs's own retries would try 6 times over ~33 s)."""
    for name in ("REPROBUNDLE_GCS_TIMEOUT", "REPROBUNDLE_GCS_RETRIES"):
        monkeypatch.delenv(name, raising=False)
    port = _closed_port()
    endpoint = f"http://127.0.0.1:{port}"
    s = GCSStore("gs://some-bucket/p", endpoint=endpoint, token="anon")
    with audited() as did, logged("reprobundle.store.gcs_http") as records:
        with pytest.raises(StoreUnreachableError) as e:
            s.get("k")
    delays = _retries(records)
    assert len(delays) <= gcs_store.DEFAULT_RETRIES, delays
    assert len(did.connects(port)) == len(delays) + 1, did.connects(port)
    assert sum(delays) <= gcs_store.DEFAULT_TIMEOUT
    assert endpoint in str(e.value) and "connection refused" in str(e.value)
    assert "\n" not in str(e.value)


def test_unreachable_retries_are_configurable(monkeypatch):
    monkeypatch.setenv("REPROBUNDLE_GCS_RETRIES", "0")
    port = _closed_port()
    s = GCSStore("gs://some-bucket", endpoint=f"http://127.0.0.1:{port}", token="anon")
    with audited() as did, logged("reprobundle.store.gcs_http") as records:
        with pytest.raises(StoreUnreachableError):
            s.put("k", b"v")
    assert _retries(records) == [] and len(did.connects(port)) == 1  # one attempt, no retry


def test_server_that_never_answers_times_out():
    with socket.socket() as listener:  # accepts TCP connections (kernel backlog) but never replies
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        port = listener.getsockname()[1]
        s = GCSStore("gs://some-bucket", endpoint=f"http://127.0.0.1:{port}", token="anon",
                     read_timeout=0.5, retries=0)
        with pytest.raises(StoreUnreachableError, match="no answer within 0.5s"):
            s.exists("k")
        listener.setblocking(False)
        conn, _ = listener.accept()  # the one request's connection, waiting in the backlog
        conn.close()
        with pytest.raises(BlockingIOError):  # and no other: the timeout was not retried
            listener.accept()


def test_permission_errors_map_to_one_line_with_a_hint(store):
    from reprobundle.store.gcs_http import GCSResponseError, check_status

    for status, body in ((403, b'{"error": {"code": 403, "message": "anon caller does not have storage.objects.get'
                                b' access to the Google Cloud Storage object."}}'),
                         (401, b'{"error": {"code": 401, "message": "Invalid Credentials"}}')):
        with pytest.raises(GCSResponseError) as e:
            check_status(status, body, "http://gcs/b/bucket/o/key")  # the client's own mapping of the response
        raw = e.value
        err = asyncio.run(store._translate(raw, "blobs/k"))
        assert isinstance(err, StorePermissionError), (status, raw, err)
        assert "\n" not in str(err) and f"HTTP {status}" in str(err) and "blobs/k" in str(err)
        assert "gcloud auth application-default login" in err.hint and "REPROBUNDLE_GCS_TOKEN" in err.hint


def test_token_file_that_does_not_exist(monkeypatch, gcs_store_url):
    monkeypatch.setenv("REPROBUNDLE_GCS_TOKEN", "/nonexistent/key.json")
    s = open_store(gcs_store_url)  # cheap and offline: credentials are loaded on first use
    with pytest.raises(StorePermissionError, match="no credentials file at /nonexistent/key.json"):
        s.get("k")


# -- URLs and construction --------------------------------------------------------------------------------------


def test_open_store_urls(gcs_server, gcs_store_url):
    s = open_store(gcs_store_url)
    s.put("k", b"v")
    t = open_store(gcs_store_url.replace("gs://", "gcs://") + "/")
    assert isinstance(t, GCSStore) and t.url == gcs_store_url and t.get("k") == b"v"
    assert open_store(gcs_server.url()).get(gcs_store_url.split("/", 3)[3] + "/k") == b"v"
    assert pickle.loads(pickle.dumps(s)).get("k") == b"v"


@pytest.mark.parametrize("url", ["gs://", "gs://A_B/x", "gs://ab", "gs://bucket/../x", "gs://bucket/a b", "s3://x/y"])
def test_bad_urls(url):
    with pytest.raises(UsageError):
        GCSStore(url)


def test_open_read_is_a_stream(store):
    data = os.urandom(50_000)
    store.put("s", data)
    with store.open_read("s") as f:
        assert isinstance(f, io.BufferedReader)
        out = b"".join(iter(lambda: f.read(7000), b""))
    assert out == data
