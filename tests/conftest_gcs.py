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
def gcs_store_url(gcs_server: GCSServer) -> str:
    return gcs_server.url(f"t/{uuid.uuid4().hex[:16]}")
