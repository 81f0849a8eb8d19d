import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

# The property tests draw the same examples on every run, so a red suite is a change's doing and not a new draw's.
# A fuzzing campaign draws new ones: REPROBUNDLE_FUZZ_EXPLORE=1 (with REPROBUNDLE_FUZZ_SCALE=10 for more of them);
# what it finds becomes a test of its own.
settings.register_profile("repeatable", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile("explore" if os.environ.get("REPROBUNDLE_FUZZ_EXPLORE") == "1" else "repeatable")

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


@pytest.fixture(scope="session")
def small_store_template(tmp_path_factory) -> Path:
    """A folder store holding `small@1` (tests/small_bundle.py), packed once per test process. Never changed:
    tests/small_bundle.py's `copy_of` copies it."""
    from small_bundle import pack_small

    root = tmp_path_factory.mktemp("small-template") / "store"
    pack_small(root)
    return root


GCS_FIXTURES = {"gcs_server", "gcs_store_url"}


def pytest_collection_modifyitems(config, items):
    """A test that uses the GCS server is a `gcs` test (pyproject.toml registers the markers)."""
    for item in items:
        if GCS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.gcs)
