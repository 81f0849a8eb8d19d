"""Bundles over plain HTTP(S): a store folder and a zip served by a real web server on localhost (python's
http.server in a thread; a self-signed https one in a subprocess test), read through fsspec's HTTP filesystem by
replay, show, pull and verify; and every location reprobundle prints is accepted back as a ref."""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import ssl
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import quick
from cli_runner import cli
from http_servers import send_file
from small_bundle import copy_of

from reprobundle.bundle.registry import Registry

EXE = Path(sys.executable).with_name("reprobundle")


class _Handler(http.server.SimpleHTTPRequestHandler):
    requests: list[str]

    def log_message(self, *args):  # quiet; and count what was asked
        self.requests.append(f"{self.command} {self.path}")


def _serve(folder: Path, context: ssl.SSLContext | None = None):
    requests: list[str] = []
    handler = functools.partial(type("H", (_Handler,), {"requests": requests}), directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    if context is not None:
        server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, requests


@pytest.fixture(scope="module")
def served(small_store_template, tmp_path_factory):
    """A folder served over HTTP holding `store/` (small@1 with one run) and `small-1.zip`."""
    root = tmp_path_factory.mktemp("served")
    store = root / "store"
    copy_of(small_store_template, store)
    registry = Registry.open(store)
    registry.export_zip(registry.resolve("small@1"), root / "small-1.zip")
    server, requests = _serve(root)
    yield {"root": root, "url": f"http://127.0.0.1:{server.server_address[1]}", "requests": requests}
    server.shutdown()


@pytest.mark.slow
def test_replay_show_verify_pull_a_store_over_http(served, tmp_path):
    url = f"{served['url']}/store/small@1"
    code, out, err = cli("show", url)
    assert code == 0, err
    assert out.startswith("small@1  sha256:") and f"url:          {url}" in out
    code, out, err = cli("verify", url)
    assert code == 0 and "all blobs intact" in out, err
    code, out, err = cli("replay", url, *quick.REPLAY_ARGS, "--json")
    assert code == 0, err
    (run,) = json.loads(out)["runs"]
    assert run["status"] == "ok"
    blobs_before = sum(r.startswith("GET") and "/blobs/" in r for r in served["requests"])
    code, out, err = cli("replay", url, *quick.REPLAY_ARGS, "--json")  # a second replay downloads no blob again
    assert code == 0, err
    assert sum(r.startswith("GET") and "/blobs/" in r for r in served["requests"]) == blobs_before
    code, out, err = cli("pull", url, "--json", store=tmp_path / "pulled")
    assert code == 0, err
    assert json.loads(out)["outcome"] == "kept" and Registry.open(tmp_path / "pulled").versions("small") == [1]


def test_replay_show_pull_a_zip_over_http(served, tmp_path):
    url = f"{served['url']}/small-1.zip"
    code, out, err = cli("show", url)
    assert code == 0 and f"url:          {url}" in out, err
    code, out, err = cli("replay", url, *quick.REPLAY_ARGS, "--json")
    assert code == 0 and json.loads(out)["runs"][0]["status"] == "ok", err
    assert served["requests"].count("GET /small-1.zip") == 1  # downloaded once, into the cache
    code, out, err = cli("verify", url)  # from the download cache (revalidated by a HEAD): no second download
    assert code == 0, err
    assert served["requests"].count("GET /small-1.zip") == 1
    code, out, err = cli("pull", url, "--json", store=tmp_path / "pulled")
    assert code == 0 and json.loads(out)["name"] == "small", err


def test_http_errors_are_one_line(served):
    code, out, err = cli("replay", f"{served['url']}/store/small", *quick.REPLAY_ARGS)
    assert code == 2 and "cannot be listed" in err and "NAME@3" in err and "Traceback" not in err
    code, out, err = cli("show", f"{served['url']}/store/ghost@1")
    assert code == 4 and "no bundle ghost@1" in err
    code, out, err = cli("show", f"{served['url']}/nothing.zip")
    assert code == 4 and "HTTP 404" in err
    code, out, err = cli("show", "http://127.0.0.1:9/store/small@1")  # nothing listens on port 9
    assert code == 3 and err.startswith("error: cannot read http://127.0.0.1:9/") and len(err.splitlines()) == 2


@pytest.mark.slow
def test_replay_over_https_with_a_trusted_certificate(served, tmp_path):
    """A real TLS server (self-signed, trusted through SSL_CERT_FILE) in front of the same folder."""
    if shutil.which("openssl") is None:
        pytest.skip("no openssl to make a certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
                    "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True, timeout=60)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server, _ = _serve(served["root"], context)
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}/store/small@1"
        env = {**os.environ, "SSL_CERT_FILE": str(cert), "REPROBUNDLE_STORE": str(tmp_path / "local")}
        done = subprocess.run([str(EXE), "replay", url, *quick.REPLAY_ARGS, "--json"], env=env, capture_output=True, text=True,
                              timeout=180)
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["runs"][0]["status"] == "ok"
    finally:
        server.shutdown()


def test_every_location_printed_is_accepted_back(tmp_path):
    """pack, show, export, url and push print where a bundle is: each one, pasted back, names the same bundle."""
    store = tmp_path / "store"
    script = tmp_path / "f.py"
    script.write_text("import jax, jax.numpy as jnp\n"
                      "def make():\n    return jax.jit(lambda x: jnp.sin(x) * 2), (jnp.ones((4, 4)),)\n")
    code, out, err = cli("pack", script, "--name", "loc", "--repeat", "3", "--no-dump", store=store)
    assert code == 0, err
    printed = [out.splitlines()[1]]  # the bundle's location, as pack prints it
    code, out, err = cli("show", printed[0])
    assert code == 0, err
    printed.append(re.search(r"url: +(\S+)", out).group(1))
    code, out, err = cli("url", "loc@1", "--json", store=store)
    printed.append(json.loads(out)["url"])  # file:///.../loc@1
    code, out, err = cli("export", "loc@1", "-o", tmp_path / "loc-1.zip", store=store)
    printed.append(re.match(r"wrote (\S+)", out).group(1))
    code, out, err = cli("push", "loc@1", "--to", tmp_path / "other", store=store)
    printed.append(out.strip().splitlines()[-1].strip())
    for location in printed:
        code, out, err = cli("show", location, "--json")
        assert code == 0, (location, err)
        assert json.loads(out)["ref"]["name"] == "loc", location


# ------------------------------------------------------------------------------------------ hostile servers

DEADLINE_S = 4.0  # REPROBUNDLE_HTTP_DEADLINE of these tests
TARGETS = {"marker": "reprobundle-store.json", "tag": "tags/small/good", "manifest": "bundles/small/1.msgpack",
           "zip": "small-1.zip"}


class _Hostile(http.server.BaseHTTPRequestHandler):
    """GET /SHAPE/TARGET/PATH: the real file at PATH under `root`, except the target's, which is attacked: `forever`
    (no Content-Length, bytes until the client leaves), `lie` (a small Content-Length on a HEAD, then an endless body
    without one), `huge` (claims 64 GiB and streams), `drip` (one byte every 0.3 s: no gap ever times out)."""

    root: Path
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def _parts(self):
        _, shape, target, rest = self.path.split("/", 3)
        return shape, target, rest

    def _redirect(self) -> bool:
        shape, target, rest = self._parts()
        if shape != "redirect" or not rest.endswith(TARGETS.get(target, "\0")):
            return False
        self.send_response(302)
        self.send_header("Location", "file:///etc/passwd")
        self.end_headers()
        return True

    def do_HEAD(self):
        if self._redirect():
            return
        shape, target, rest = self._parts()
        if rest.endswith(TARGETS.get(target, "\0")):
            self.send_response(200)
            if shape in ("lie", "huge", "drip"):
                self.send_header("Content-Length", str(64 << 30 if shape == "huge" else 12))
            self.end_headers()
            return
        self._real(rest, body=False)

    def _real(self, rest: str, body: bool = True):
        send_file(self, self.root / rest, body)

    def do_GET(self):
        import time

        if self._redirect():
            return
        shape, target, rest = self._parts()
        if not rest.endswith(TARGETS.get(target, "\0")):
            return self._real(rest)
        self.send_response(200)
        if shape == "huge":
            self.send_header("Content-Length", str(64 << 30))
        self.end_headers()
        chunk = b"{" * (1 << 16)
        try:
            if shape == "drip":
                for _ in range(100000):
                    self.wfile.write(b"1")
                    self.wfile.flush()
                    time.sleep(0.3)
            else:
                while True:
                    self.wfile.write(chunk)
        except OSError:
            pass  # the client went away: what a bounded reader does


@pytest.fixture(scope="module")
def hostile(served):
    """A hostile server in front of the served folder (small@1 tagged `good`), and the normal one's figures: the
    time and peak memory of `show` on each kind of target, as the baseline of every bound."""
    Registry.open(served["root"] / "store").tag("small", 1, "good")
    handler = type("H", (_Hostile,), {"root": served["root"]})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    yield {"url": url, "served": served}
    server.shutdown()


_PEAK = ("import sys\nfrom reprobundle.cli import main\ncode = main(sys.argv[1:])\n"
         "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')][0].split()[1]\n"
         "sys.stderr.write('\\nVmHWM-KiB %s\\n' % hwm)\nsys.exit(code)\n")


def _show(ref: str, tmp_path: Path) -> tuple[int, str, float, int]:
    """`reprobundle show REF` in a fresh interpreter: (exit code, stderr, seconds, peak resident KiB of its own)."""
    import time

    env = {**os.environ, "REPROBUNDLE_HTTP_DEADLINE": str(DEADLINE_S), "REPROBUNDLE_HTTP_TIMEOUT": "3",
           "REPROBUNDLE_HTTP_MAX_DOWNLOAD": "50M", "REPROBUNDLE_CACHE_DIR": str(tmp_path / "cache"),
           "REPROBUNDLE_STORE": str(tmp_path / "local")}
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _PEAK, "show", ref], env=env, capture_output=True, text=True,
                          timeout=600)
    seconds = time.monotonic() - start
    peak = int(re.search(r"VmHWM-KiB (\d+)", done.stderr).group(1))
    return done.returncode, done.stderr.split("\nVmHWM-KiB")[0], seconds, peak


def _ref(url: str, shape: str, target: str, *, attacked: bool = True) -> str:
    base = f"{url}/{shape}/{target if attacked else 'none'}"
    return {"marker": f"{base}/store/small@1", "tag": f"{base}/store/small@good",
            "manifest": f"{base}/store/small@1", "zip": f"{base}/small-1.zip"}[target]


@pytest.mark.slow
@pytest.mark.parametrize("target", sorted(TARGETS))
def test_hostile_servers_are_cut_off_in_bytes_and_time(hostile, tmp_path, target):
    """Class: a marker, tag, manifest or zip served forever, with a lying Content-Length, claiming 64 GiB, or one
    byte at a time. Each ends with one typed error line (a record too large: exit 6; past the deadline: exit 3; a zip
    over REPROBUNDLE_HTTP_MAX_DOWNLOAD: exit 3), within a generous multiple of the deadline over the time the same
    command takes on the honest server, with a peak memory within a margin of that command's (the limits of records
    are 64 KiB to 64 MiB; an unbounded read would reach gigabytes in that time), and no partial download kept."""
    code, err, honest_s, honest_kib = _show(_ref(hostile["url"], "honest", target, attacked=False), tmp_path)
    assert code == 0, err
    for shape in ("forever", "lie", "huge", "drip"):
        code, err, seconds, kib = _show(_ref(hostile["url"], shape, target), tmp_path)
        assert code in (3, 6), (shape, code, err)
        assert "Traceback" not in err and "unexpected" not in err and len(err.strip().splitlines()) <= 2, err
        if shape == "drip":
            assert code == 3 and f"within {DEADLINE_S:g} s" in err, err
        elif target == "zip":
            assert code == 3 and "larger than the 50.0 MiB a download may have" in err, err
        else:
            assert code == 6 and re.search("larger than|not a reprobundle store marker", err), err
        assert seconds < honest_s + 10 * DEADLINE_S, (shape, seconds, honest_s)
        assert kib < honest_kib + (64 << 10) + (128 << 10), (shape, kib, honest_kib)  # the largest limit + 128 MiB
        assert not list((tmp_path / "cache").rglob(".part-*")), "a partial download was kept"



@pytest.mark.parametrize("target", sorted(TARGETS))
def test_a_redirect_to_a_file_url_is_refused_as_such(hostile, tmp_path, target):
    """Class: a marker, tag, manifest or zip whose server redirects to file:///etc/passwd: refused with exit 3 saying
    it is a redirect to a non-http URL (never "HTTP 404", never the file's content)."""
    code, out, err = cli("show", _ref(hostile["url"], "redirect", target))
    assert code == 3 and "file:///etc/passwd" in err and "not an http(s) URL: refused" in err, (code, err)
    assert "HTTP 404" not in err and "root:" not in err + out


# ------------------------------------------------------------------------------------ the one HTTP helper


class _Flaky(http.server.BaseHTTPRequestHandler):
    """GET or HEAD /N/PATH: 503 for the first N requests of PATH, then the file at PATH under `root` (404 if none)."""

    root: Path
    seen: dict
    protocol_version = "HTTP/1.0"

    def log_message(self, *args):
        pass

    def _answer(self, body: bool):
        _, failures, rest = self.path.split("/", 2)
        self.seen[rest] = self.seen.get(rest, 0) + 1
        if self.seen[rest] <= int(failures):
            self.send_error(503)
            return
        send_file(self, self.root / rest, body)

    def do_GET(self):
        self._answer(True)

    def do_HEAD(self):
        self._answer(False)


@pytest.fixture
def flaky(served):
    seen: dict = {}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("F", (_Flaky,), {"root": served["root"],
                                                                                     "seen": seen}))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}", seen
    server.shutdown()


def test_transient_failures_are_retried_with_backoff_and_logged(flaky, served, caplog):
    """Class: a server answering 503 before it answers. The helper retries it (each retry logged at INFO, what
    --verbose shows), up to its bound; a 404 is an answer, asked once; the http store goes through the same policy."""
    import logging
    import urllib.error

    from reprobundle.store import open_store
    from reprobundle.store.http_client import DEFAULT_RETRIES, get

    url, seen = flaky
    marker = (served["root"] / "store" / "reprobundle-store.json").read_bytes()
    with caplog.at_level(logging.INFO, logger="reprobundle.store.http_client"):
        assert get(f"{url}/2/store/reprobundle-store.json").body == marker
    assert seen["store/reprobundle-store.json"] == 3
    retries = [r.getMessage() for r in caplog.records if "retry" in r.getMessage()]
    assert len(retries) == 2 and all("503" in m for m in retries), retries
    with pytest.raises(urllib.error.HTTPError) as info:
        get(f"{url}/9/store/tags/nothing")
    assert info.value.code == 503 and seen["store/tags/nothing"] == DEFAULT_RETRIES + 1  # bounded
    with pytest.raises(urllib.error.HTTPError) as info:
        get(f"{url}/0/store/missing")
    assert info.value.code == 404 and seen["store/missing"] == 1
    manifest = "bundles/small/1.msgpack"
    store = open_store(f"{url}/1/store")
    assert store.get(manifest) == (served["root"] / "store" / manifest).read_bytes()
    assert seen[f"store/{manifest}"] == 2  # one 503, then the answer
