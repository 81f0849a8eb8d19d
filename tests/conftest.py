import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parent.parent / "examples"))  # shared programs: chain.py

try:  # the GCS server fixtures, when that backend is present
    from conftest_gcs import gcs_server, gcs_store_url  # noqa: F401
except ImportError:  # pragma: no cover
    pass


@pytest.fixture(autouse=True)
def _isolated_default_store(tmp_path_factory, monkeypatch):
    """No test touches the user's real store or cache."""
    root = tmp_path_factory.mktemp("default")
    monkeypatch.setenv("REPROBUNDLE_STORE", str(root / "store"))
    monkeypatch.setenv("REPROBUNDLE_CACHE_DIR", str(root / "cache"))
    monkeypatch.delenv("REPROBUNDLE_DEBUG", raising=False)


@pytest.fixture
def store_dir(tmp_path):
    return tmp_path / "store"


GCS_FIXTURES = {"gcs_server", "gcs_store_url"}


def pytest_collection_modifyitems(config, items):
    """A test that uses the GCS server is a `gcs` test (pyproject.toml registers the markers)."""
    for item in items:
        if GCS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.gcs)
