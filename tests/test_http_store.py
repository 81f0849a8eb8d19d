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

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_runner import cli

import reprobundle
from reprobundle.bundle.registry import Registry

FAST = ["--warmup", "1", "--repeat", "3", "--no-profile"]
EXE = Path(sys.executable).with_name("reprobundle")


def _small(x, y):
    return jnp.tanh(x @ y), (x * 3).sum()


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
def served(tmp_path_factory):
    """A folder served over HTTP holding `store/` (small@1 with one run) and `small-1.zip`."""
    root = tmp_path_factory.mktemp("served")
    store = root / "store"
    rng = np.random.default_rng(0)
    reprobundle.pack(jax.jit(_small), rng.standard_normal((8, 16), dtype=np.float32),
                     rng.standard_normal((16, 4), dtype=np.float32), name="small", store=str(store), warmup=1,
                     repeat=3, profile=False)
    registry = Registry.open(store)
    registry.export_zip(registry.resolve("small@1"), root / "small-1.zip")
    server, requests = _serve(root)
    yield {"root": root, "url": f"http://127.0.0.1:{server.server_address[1]}", "requests": requests}
    server.shutdown()


def test_replay_show_verify_pull_a_store_over_http(served, tmp_path):
    url = f"{served['url']}/store/small@1"
    code, out, err = cli("show", url)
    assert code == 0, err
    assert out.startswith("small@1  sha256:") and f"url:          {url}" in out
    code, out, err = cli("verify", url)
    assert code == 0 and "all blobs intact" in out, err
    code, out, err = cli("replay", url, *FAST, "--json")
    assert code == 0, err
    (run,) = json.loads(out)["runs"]
    assert run["status"] == "ok"
    blobs_before = sum(r.startswith("GET") and "/blobs/" in r for r in served["requests"])
    code, out, err = cli("replay", url, *FAST, "--json")  # a second replay downloads no blob again
    assert code == 0, err
    assert sum(r.startswith("GET") and "/blobs/" in r for r in served["requests"]) == blobs_before
    code, out, err = cli("pull", url, "--json", store=tmp_path / "pulled")
    assert code == 0, err
    assert json.loads(out)["outcome"] == "kept" and Registry.open(tmp_path / "pulled").versions("small") == [1]


def test_replay_show_pull_a_zip_over_http(served, tmp_path):
    url = f"{served['url']}/small-1.zip"
    code, out, err = cli("show", url)
    assert code == 0 and f"url:          {url}" in out, err
    code, out, err = cli("replay", url, *FAST, "--json")
    assert code == 0 and json.loads(out)["runs"][0]["status"] == "ok", err
    assert served["requests"].count("GET /small-1.zip") == 1  # downloaded once, into the cache
    code, out, err = cli("verify", url)  # from the download cache (revalidated by a HEAD): no second download
    assert code == 0, err
    assert served["requests"].count("GET /small-1.zip") == 1
    code, out, err = cli("pull", url, "--json", store=tmp_path / "pulled")
    assert code == 0 and json.loads(out)["name"] == "small", err


def test_http_errors_are_one_line(served):
    code, out, err = cli("replay", f"{served['url']}/store/small", *FAST)
    assert code == 2 and "cannot be listed" in err and "NAME@3" in err and "Traceback" not in err
    code, out, err = cli("show", f"{served['url']}/store/ghost@1")
    assert code == 4 and "no bundle ghost@1" in err
    code, out, err = cli("show", f"{served['url']}/nothing.zip")
    assert code == 4 and "HTTP 404" in err
    code, out, err = cli("show", "http://127.0.0.1:9/store/small@1")  # nothing listens on port 9
    assert code == 3 and err.startswith("error: cannot read http://127.0.0.1:9/") and len(err.splitlines()) == 2


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
        done = subprocess.run([str(EXE), "replay", url, *FAST, "--json"], env=env, capture_output=True, text=True,
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
