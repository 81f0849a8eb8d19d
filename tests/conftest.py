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


# Seconds each slow module took in a whole run of the suite (`.ci/run` on a clean clone, quiet, 2 processes on the
# 2-core VM, 2026-12-02 12:13 UTC, with --durations=0: the sum of each file's setup, call and teardown times).
# scripts/test.sh hands whole modules to its processes in collection order (--no-loadscope-reorder): the longest go
# first, so that the last modules handed out are short and the processes end together. Only the order depends on
# these figures; a module not listed (under ~15 s) keeps its place after them.
MODULE_SECONDS = {
    "test_reliability.py": 225, "test_retrace.py": 170, "test_minimize.py": 180, "test_frameworks.py": 95,
    "test_explain.py": 90, "test_crossversion.py": 75, "test_anybuild.py": 65, "test_cli_exit.py": 60,
    "test_sweep_ray.py": 55, "test_custom_calls.py": 55, "test_report.py": 55, "test_sweep.py": 50,
    "test_http_store.py": 50, "test_capture_program.py": 45, "test_commit_bisect.py": 190, "test_history.py": 45,
    "test_pack_replay.py": 40, "test_offline.py": 40, "test_schedule.py": 35,
    "test_bisect_layers.py": 260, "test_window_changes.py": 290, "test_change_chains.py": 190, "test_fuzz.py": 40, "test_sharing.py": 35,
    "test_script.py": 35, "test_shared_bucket.py": 30, "test_zip_reproducer.py": 110,
    "test_envs.py": 30, "test_issue_body.py": 90, "test_isolate.py": 25, "test_accelerators.py": 25, "test_runaway.py": 25,
    "test_module_server.py": 25, "test_slow_transfers.py": 20, "test_worker.py": 15, "test_real_difference.py": 15, "test_search.py": 20,
}


def pytest_collection_modifyitems(config, items):
    """A test that uses the GCS server is a `gcs` test (pyproject.toml registers the markers); the longest modules
    run first (MODULE_SECONDS; a stable sort keeps each module's own order)."""
    for item in items:
        if GCS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.gcs)
    items.sort(key=lambda item: -MODULE_SECONDS.get(item.path.name, 0))
