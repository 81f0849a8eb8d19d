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


@pytest.fixture(scope="session", autouse=True)
def _answer_key_of_the_run(tmp_path_factory):
    """One answer key (bundle/answer_seal.py) for the whole run, outside the user's data folder: shared by its xdist
    processes, since tests/shared_stores.py's stores are sealed by whichever process builds them. Set before any
    module's fixtures build a store; a test that plays another machine sets its own."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    before = os.environ.get("REPROBUNDLE_ANSWER_KEY")
    os.environ["REPROBUNDLE_ANSWER_KEY"] = str(root / "answer-key")
    yield
    if before is None:
        os.environ.pop("REPROBUNDLE_ANSWER_KEY", None)
    else:
        os.environ["REPROBUNDLE_ANSWER_KEY"] = before


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


# Each slow module's wall seconds in one process of a whole run of the suite (scripts/test.sh, 3 processes on the
# project's 2-core VM, alone on it, environments cached, 2026-12-07 19:29-19:46 UTC; REPROBUNDLE_TEST_CPU's module
# lines). scripts/test.sh hands whole modules to its processes in collection order (--no-loadscope-reorder): the
# longest go first, so that the last modules handed out are short and the processes end together. Only the order
# depends on these figures; a module not listed (under 18 s) keeps its place after them.
MODULE_SECONDS = {
    "test_reliability.py": 342, "test_minimize.py": 279, "test_commit_bisect.py": 234, "test_explain.py": 185,
    "test_change_chains.py": 160, "test_bisect_layers.py": 158, "test_zip_reproducer.py": 140, "test_script.py": 136,
    "test_frameworks.py": 96, "test_retrace.py": 79, "test_capture_program.py": 64, "test_cli_exit.py": 61,
    "test_sweep_ray.py": 59, "test_http_store.py": 53, "test_pack_replay.py": 50, "test_fuzz.py": 48,
    "test_anybuild.py": 44, "test_envs.py": 42, "test_window_changes.py": 42, "test_report.py": 40,
    "test_issue_body.py": 40, "test_module_server.py": 39, "test_schedule.py": 38, "test_accelerators.py": 36,
    "test_shared_worker.py": 34, "test_crossversion.py": 34, "test_sharing.py": 33, "test_custom_calls.py": 32,
    "test_shared_bucket.py": 31, "test_sweep.py": 30, "test_worker.py": 24, "test_history.py": 21,
    "test_slow_transfers.py": 21, "test_store_contract.py": 20, "test_real_difference.py": 19,
}


def pytest_collection_modifyitems(config, items):
    """A test that uses the GCS server is a `gcs` test (pyproject.toml registers the markers); the longest modules
    run first (MODULE_SECONDS; a stable sort keeps each module's own order)."""
    for item in items:
        if GCS_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.gcs)
    items.sort(key=lambda item: -MODULE_SECONDS.get(item.path.name, 0))


# REPROBUNDLE_TEST_CPU=FILE: each test's and each module's CPU seconds (this process's and its reaped children's: the
# workers, the CLI subprocesses, the releases' environments built) and wall seconds, one JSON line each, appended to
# FILE (a module's line comes after its last test's, its fixtures' teardown included). What a test costs the suite
# whatever else the machine runs, where its wall time on a loaded machine says little.
_CPU_REPORT = os.environ.get("REPROBUNDLE_TEST_CPU")
_module_start: dict[str, tuple[float, float]] = {}


def _cpu_now() -> float:
    import resource

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not _CPU_REPORT:
        yield
        return
    import json
    import time

    name = item.path.name
    _module_start.setdefault(name, (_cpu_now(), time.monotonic()))
    cpu0, wall0 = _cpu_now(), time.monotonic()
    yield
    lines = [{"test": item.nodeid, "cpu_s": round(_cpu_now() - cpu0, 1), "wall_s": round(time.monotonic() - wall0, 1)}]
    if nextitem is None or nextitem.path.name != name:  # the module's last test: its fixtures are torn down
        cpu0, wall0 = _module_start.pop(name)
        lines.append({"module": name, "cpu_s": round(_cpu_now() - cpu0, 1), "wall_s": round(time.monotonic() - wall0, 1)})
    with open(_CPU_REPORT, "a") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
