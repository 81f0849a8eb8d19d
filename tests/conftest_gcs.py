"""pytest fixtures for tests against a real GCS JSON-API server (fake-gcs-server, see gcs_server.py).

Wire them in from conftest.py:

    from conftest_gcs import gcs_server, gcs_store_url  # noqa: F401

`gcs_server` (session): one server for the whole run, with a bucket; while it lives, STORAGE_EMULATOR_HOST,
REPROBUNDLE_GCS_TOKEN=anon and GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT=false are set in os.environ, so
`open_store("gs://...")` and child processes reach it. `gcs_store_url` (function): gs://bucket/<fresh prefix>.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

# Must precede any import of gcsfs (see reprobundle/store/gcs.py).
os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")

import pytest  # noqa: E402

try:  # tests/ as a package, or tests/ on sys.path (pytest's default rootdir-relative import)
    from .gcs_server import GCSServer, start_gcs_server
except ImportError:
    from gcs_server import GCSServer, start_gcs_server


@pytest.fixture(scope="session")
def gcs_server() -> GCSServer:
    try:
        server = start_gcs_server()
    except RuntimeError as e:
        pytest.fail(f"cannot start the GCS test server: {e}", pytrace=False)
    mp = pytest.MonkeyPatch()
    for name, value in server.env().items():
        mp.setenv(name, value)
    for name in ("REPROBUNDLE_GCS_TIMEOUT", "REPROBUNDLE_GCS_READ_TIMEOUT", "REPROBUNDLE_GCS_RETRIES"):
        mp.delenv(name, raising=False)
    try:
        yield server
    finally:
        mp.undo()
        server.stop()


@pytest.fixture
def gcs_store_url(gcs_server: GCSServer) -> Iterator[str]:
    _alive(gcs_server)
    yield gcs_server.url(f"t/{uuid.uuid4().hex[:16]}")
    _alive(gcs_server)


def _alive(server: GCSServer) -> None:
    """Fail saying how the server ended (its exit status: a signal is negative; its log's tail), not with the
    "connection refused" of every test after it."""
    proc = server._proc
    if proc is not None and proc.poll() is not None:
        pytest.fail(f"the GCS test server (pid {proc.pid}) ended with status {proc.returncode}: "
                    f"{server.log_tail()[-1500:]}", pytrace=False)
