"""Per-JAX-version environments: real interpreters, real installs, real processes (no mocks).

The first run downloads jax/jaxlib 0.4.30 (~90 MB) into uv's cache; later runs create environments from
that cache. One session-wide environment root serves most tests.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from audit import audited
from packaging.version import Version

from reprobundle.envs.env_config import EnvConfig
from reprobundle.envs.manager import INSTALLED, EnvironmentManager, JaxEnvironment, requirements
from reprobundle.envs.package_index import (
    fallback_pythons,
    jax_file_version,
    jaxlib_for,
    jaxlib_wheel_pythons,
    summarize_index,
)
from reprobundle.envs.versions import python_allowed, python_release, release_name, same_release, version_key
from reprobundle.errors import EnvironmentCreationError, NoSuitablePythonError

OLD = "0.4.30"  # an old release that still installs (and runs with NumPy 2) on Python 3.9-3.12
REPO = Path(__file__).resolve().parents[1]
HOST = platform.python_version()

# A proxy that refuses connections: a process with these settings cannot reach any index.
NO_NETWORK = {"HTTP_PROXY": "http://127.0.0.1:9", "HTTPS_PROXY": "http://127.0.0.1:9",
              "ALL_PROXY": "http://127.0.0.1:9", "http_proxy": "http://127.0.0.1:9",
              "https_proxy": "http://127.0.0.1:9", "all_proxy": "http://127.0.0.1:9"}


def _subprocess_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    env.update(extra)
    return env


ENSURE_SCRIPT = textwrap.dedent("""
    import json, sys, time
    from reprobundle.envs.manager import EnvironmentManager
    from reprobundle.errors import ReproBundleError
    root, version = sys.argv[1], sys.argv[2]
    t = time.perf_counter()
    try:
        env = EnvironmentManager(root).ensure(version, progress=lambda line: print("PROGRESS", line, flush=True))
    except ReproBundleError as e:
        print("RESULT", json.dumps({"error": type(e).__name__, "message": e.message, "hint": e.hint}))
    else:
        print("RESULT", json.dumps({"path": str(env.path), "created": env.created, "jax": env.jax_version,
                                    "seconds": time.perf_counter() - t}))
""")


def _ensure_in_subprocess(root: Path, version: str, **env: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", ENSURE_SCRIPT, str(root), version], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=_subprocess_env(**env), cwd=root.parent)


def _finish(proc: subprocess.Popen, timeout: float = 900) -> tuple[dict, list[str], str]:
    out, _ = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, out
    result = next(json.loads(line[7:]) for line in out.splitlines() if line.startswith("RESULT "))
    progress = [line[9:] for line in out.splitlines() if line.startswith("PROGRESS ")]
    return result, progress, out


def _leftovers(root: Path) -> list[str]:
    """Everything under root except the lock directory and the index cache."""
    if not root.exists():
        return []
    return sorted(p.name for p in root.iterdir() if p.name not in (".locks", ".index-cache.json"))


def _run_in(env: JaxEnvironment, code: str) -> dict:
    """Run code with the environment's interpreter from a neutral directory, as the worker would."""
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    clean["JAX_PLATFORMS"] = "cpu"
    r = subprocess.run([str(env.python_executable), "-c", code], capture_output=True, text=True, env=clean,
                       cwd=env.path, timeout=300)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="session")
def root(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("envs")


@pytest.fixture(scope="session")
def built(root):
    """The session's environment for OLD: (environment, progress lines, seconds taken)."""
    lines: list[str] = []
    t = time.perf_counter()
    env = EnvironmentManager(root).ensure(OLD, progress=lines.append)
    seconds = time.perf_counter() - t
    print(f"\ncreated the environment for jax {OLD} in {seconds:.1f} s")
    return env, lines, seconds


@pytest.fixture(scope="session")
def raced(tmp_path_factory):
    """Two processes ensure OLD into one fresh root at the same time (built from the warm uv cache)."""
    root = tmp_path_factory.mktemp("race") / "envs"
    root.mkdir()
    procs = [_ensure_in_subprocess(root, OLD) for _ in range(2)]
    results = [_finish(p) for p in procs]
    snapshot = _leftovers(root)
    return root, results, snapshot


# ---------------------------------------------------------------------------------------------- tests


@pytest.mark.crossversion
def test_environment_runs_the_requested_jax(built, root):
    env, lines, _ = built
    assert env.jax_version == OLD
    assert env.path is not None and env.path.parent == root
    assert env.python_executable == env.path / "bin" / "python"
    assert env.size_bytes and env.size_bytes > 10_000_000
    assert env.created and env.created.endswith("+00:00")
    info = _run_in(env, textwrap.dedent("""
        import importlib.metadata as md, importlib.util, json, platform
        import jax, numpy, msgpack, flatbuffers
        print(json.dumps({"jax": jax.__version__, "jaxlib": md.version("jaxlib"), "numpy": numpy.__version__,
                          "python": platform.python_version(), "devices": [d.platform for d in jax.devices()],
                          "sum": float(jax.numpy.arange(4.0).sum()),
                          "reprobundle": importlib.util.find_spec("reprobundle") is not None}))
    """))
    assert info["jax"] == OLD and info["jaxlib"] == OLD
    assert int(info["numpy"].split(".")[0]) >= 2  # 0.4.30 works with NumPy 2
    assert info["python"] == env.python_version
    assert info["devices"] == ["cpu"] and info["sum"] == 6.0
    assert info["reprobundle"] is False  # nothing of ours is installed in the environment
    assert env.jaxlib_version == OLD and env.numpy_version == info["numpy"]
    assert any(line.startswith(f"creating environment for jax {OLD} (Python 3.") for line in lines), lines
    assert any(line.startswith("installing jax==0.4.30 jaxlib==0.4.30") for line in lines), lines
    assert lines[-1].startswith("ready in "), lines


@pytest.mark.crossversion
def test_second_ensure_is_cached(built, root):
    env, _, _ = built
    meta = env.path / "reprobundle-env.json"
    stamp = meta.stat().st_mtime_ns
    lines: list[str] = []
    manager = EnvironmentManager(root)  # a fresh manager: nothing remembered in memory
    with audited() as did:
        again = manager.ensure(OLD, progress=lines.append)
    assert did.processes == [] and did.connects() == []  # no installer, no probe, no index: read from disk
    assert again == env  # same created time: not rebuilt
    assert lines == []
    assert meta.stat().st_mtime_ns == stamp
    assert manager.ensure("v0.4.30.0") == env  # spelled differently, same release
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if env.python_version.startswith(minor + "."):  # built with the host's Python: --python finds it too
        assert EnvironmentManager(EnvConfig.of(root, sys.executable)).ensure(OLD) == env
        assert EnvironmentManager(EnvConfig.of(root, minor)).ensure(OLD) == env

    # And without any network at all (every connection refused), from a new process.
    result, progress, out = _finish(_ensure_in_subprocess(root, OLD, **NO_NETWORK))
    assert result.get("path") == str(env.path), out
    assert result["created"] == env.created and progress == []


@pytest.mark.crossversion
def test_an_environment_imports_ml_dtypes_quickly_and_one_that_does_not_is_made_again(built, root, tmp_path):
    """Where NumPy before 2.5 is installed (every Python before 3.12), ml_dtypes stays before 0.7: NumPy scans each
    ufunc's loops as ml_dtypes 0.7 adds its own, ~0.6 s of CPU at every worker's `import jax` (envs/plan.py). An
    environment that holds the slow pair (made by an older reprobundle) is made again while the index is readable,
    and still used as it is where it cannot be."""
    from reprobundle.envs.plan import requirements, slow_ml_dtypes

    assert "ml_dtypes<0.7" in requirements("0.8.0", "0.8.0", "cpu", (3, 11))[0]
    assert "ml_dtypes<0.7" in requirements("0.4.25", "0.4.25", "cpu", (3, 12))[0]  # numpy<2 there
    assert "ml_dtypes<0.7" not in requirements("0.8.0", "0.8.0", "cpu", (3, 12))[0]
    assert slow_ml_dtypes({"ml_dtypes": "0.7.0", "numpy": "2.4.6"})
    assert not slow_ml_dtypes({"ml_dtypes": "0.7.0", "numpy": "2.5.5"}) and not slow_ml_dtypes({"numpy": "2.4.6"})
    env, _, _ = built
    assert not slow_ml_dtypes(env.packages), env.packages
    # an older reprobundle's environment: the same folder, its metadata saying ml_dtypes 0.7.0 over numpy 2.4.6
    copy = tmp_path / "envs"
    shutil.copytree(env.path, copy / env.path.name, symlinks=True)
    meta_file = copy / env.path.name / "reprobundle-env.json"
    meta = json.loads(meta_file.read_text())
    meta["packages"].update(ml_dtypes="0.7.0", numpy="2.4.6")
    meta["schema"] = 1
    meta_file.write_text(json.dumps(meta))
    offline = EnvironmentManager(EnvConfig.of(copy, index_url="http://127.0.0.1:9/simple"))
    assert offline.ensure(OLD).created == meta["created"]  # no index to make it again: it still runs
    lines: list[str] = []
    again = EnvironmentManager(copy).ensure(OLD, progress=lines.append)
    assert again.created != meta["created"] and not slow_ml_dtypes(again.packages), lines
    assert any(line.startswith("creating environment") for line in lines), lines


@pytest.mark.crossversion
def test_concurrent_ensure_builds_once(raced):
    _, results, snapshot = raced
    (a, pa, _), (b, pb, _) = results
    assert a.get("path") and a["path"] == b["path"], (a, b)
    assert a["created"] == b["created"]
    assert snapshot == [Path(a["path"]).name]  # one environment, no temporary directories left
    creators = [p for p in (pa, pb) if any(line.startswith("creating environment") for line in p)]
    assert len(creators) == 1, (pa, pb)
    print(f"\nrace: {a['seconds']:.1f} s and {b['seconds']:.1f} s; progress {pa} / {pb}")


@pytest.mark.crossversion
def test_creation_from_warm_cache_is_quick(raced, tmp_path):
    """Creating an environment from a warm uv cache costs about what uv itself takes for the same install: compared
    with a bare `uv venv` + `uv pip install` of the same requirements and a first `import jax` with the same
    interpreter, timed in this test right after (a wide margin: the race ran two processes at once)."""
    from uv import find_uv_bin

    root, results, _ = raced
    creator = next(r for r, p, _ in results if any(line.startswith("ready in") for line in p))
    base_python = os.path.realpath(EnvironmentManager(root).list()[0].python_executable)
    uv, bare = find_uv_bin(), tmp_path / "bare"
    reqs, options = requirements(OLD, OLD)
    t = time.perf_counter()
    subprocess.run([uv, "venv", "--quiet", "--python", base_python, str(bare)], check=True, timeout=600)
    subprocess.run([uv, "pip", "install", "--quiet", "--python", str(bare / "bin" / "python"), *options, *reqs],
                   check=True, timeout=600)
    subprocess.run([str(bare / "bin" / "python"), "-c", "import jax"], check=True, timeout=600,
                   env={**os.environ, "JAX_PLATFORMS": "cpu"})
    baseline = time.perf_counter() - t
    print(f"\ncreation from a warm uv cache took {creator['seconds']:.1f} s; bare uv + import jax {baseline:.1f} s")
    assert creator["seconds"] < 4 * baseline


@pytest.mark.crossversion
def test_list_and_remove(raced):
    root, results, _ = raced
    manager = EnvironmentManager(root)
    envs = manager.list()
    assert [(e.jax_version, str(e.path)) for e in envs] == [(OLD, results[0][0]["path"])]
    assert manager.remove("0.4.31") == []
    assert manager.remove(INSTALLED) == []
    removed = manager.remove(OLD)
    assert removed == envs
    assert not envs[0].path.exists()
    assert manager.list() == [] and manager.remove() == []
    assert _leftovers(root) == []


def test_no_suitable_python(tmp_path):
    # A release the host's own Python cannot run; discovery is limited to that Python with python=.
    minor = sys.version_info[1]
    version = {11: "0.12.0.1", 12: "0.4.13"}.get(minor, OLD if minor >= 13 else "0.12.0.1")
    for python in (sys.executable, f"3.{minor}"):
        with pytest.raises(NoSuitablePythonError) as info:
            EnvironmentManager(EnvConfig.of(tmp_path, python)).ensure(version)
        message = info.value.message
        assert f"jax {version} needs Python 3." in message, message
        assert HOST in message, message
        assert "--python" in info.value.hint, info.value.hint  # install Python 3.X, or use one found here
    with pytest.raises(NoSuitablePythonError):
        EnvironmentManager(EnvConfig.of(tmp_path, "3.99")).ensure(OLD)
    assert _leftovers(tmp_path) == []


def test_uv_managed_pythons_are_found_through_uv(tmp_path, monkeypatch):
    """A uv-managed install (here: a folder in uv's layout whose python links to the host's base interpreter) is
    listed by `uv python list` with source "uv", by its base executable; pyenv shims on PATH are never run."""
    from uv import find_uv_bin

    from reprobundle.envs.interpreters import InterpreterFinder, search_path, uv_interpreters

    base = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    bindir = tmp_path / f"cpython-{platform.python_version()}-linux-x86_64-gnu" / "bin"
    bindir.mkdir(parents=True)
    (bindir / f"python{minor}").symlink_to(base)
    (bindir / "python3").symlink_to(f"python{minor}")
    (bindir / "python").symlink_to(f"python{minor}")
    monkeypatch.setenv("UV_PYTHON_INSTALL_DIR", str(tmp_path))
    shims = tmp_path / "shims"  # a pyenv shim that fails unless its version is selected
    shims.mkdir()
    (shims / "python3.9").write_text("#!/bin/sh\necho 'pyenv: python3.9: command not found' >&2\nexit 127\n")
    (shims / "python3.9").chmod(0o755)
    monkeypatch.setenv("PATH", f"{shims}{os.pathsep}{os.environ['PATH']}")
    assert str(shims) not in search_path().split(os.pathsep)
    uv = find_uv_bin()
    found = uv_interpreters(uv)
    assert any(i.source == "uv" and i.executable == base and i.version == platform.python_version()
               for i in found), found
    assert len({(i.executable, i.source) for i in found}) == len(found)  # python, python3, python3.X: once
    assert uv_interpreters(None) == [] and uv_interpreters(str(tmp_path / "no-uv")) == []
    interps = InterpreterFinder(None, find_uv_bin).discover()
    assert interps[0].source == "host" and interps[0].executable == base  # the host first, then uv's, each once
    assert len({i.executable for i in interps}) == len(interps)
    given = InterpreterFinder(str(bindir / "python3"), find_uv_bin).discover()
    assert [(i.executable, i.version, i.source) for i in given] == [(base, platform.python_version(), "--python")]
    assert InterpreterFinder(str(tmp_path / "nothing"), find_uv_bin).discover() == []


def test_unknown_version(tmp_path):
    with pytest.raises(EnvironmentCreationError) as info:
        EnvironmentManager(tmp_path).ensure("0.0.999")
    assert not isinstance(info.value, NoSuitablePythonError)
    assert "jax 0.0.999 is not a release" in info.value.message
    assert "e.g. " in info.value.hint  # names the nearest real releases
    assert _leftovers(tmp_path) == [] and not (tmp_path / ".locks").exists()
    with pytest.raises(EnvironmentCreationError):
        EnvironmentManager(tmp_path).ensure("not-a-version")


def test_failed_install_leaves_nothing_behind(tmp_path):
    # An index that refuses connections: the table picks the Python, uv runs --offline, finds nothing in its
    # cache for that index, and fails; its output tail is in the error.
    root = tmp_path / "envs"
    result, _, out = _finish(_ensure_in_subprocess(root, OLD, UV_DEFAULT_INDEX="http://127.0.0.1:9/simple"))
    assert result.get("error") == "EnvironmentCreationError", out
    # the index it used named, then uv's own words
    assert "uv pip install from http://127.0.0.1:9/simple failed" in result["message"], result
    assert len(result["message"].splitlines()) > 2, result
    assert "unreachable" in result["hint"]
    assert _leftovers(root) == []


@pytest.mark.crossversion
def test_offline_creation_from_uv_cache(built, tmp_path):
    # No network at all: Python chosen from the built-in table, packages from uv's cache only.
    root = tmp_path / "envs"
    result, progress, out = _finish(_ensure_in_subprocess(root, OLD, **NO_NETWORK))
    assert result.get("jax") == OLD, out
    assert any("offline" in line for line in progress), progress
    assert [e.jax_version for e in EnvironmentManager(root).list()] == [OLD]


def test_installed_pseudo_version(tmp_path):
    manager = EnvironmentManager(tmp_path)
    try:
        expected = importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        with pytest.raises(EnvironmentCreationError):
            manager.ensure(INSTALLED)
        return
    env = manager.ensure(INSTALLED)
    assert env.jax_version == expected
    assert env.python_executable == Path(sys.executable) and env.python_version == HOST
    assert env.path is None and env.created is None and env.size_bytes is None
    assert _leftovers(tmp_path) == []


def test_available_versions_and_latest(root):
    manager = EnvironmentManager(root)
    versions = manager.available_versions()
    keys = [tuple(int(x) for x in v.split(".")) for v in versions]
    assert keys == sorted(keys) and len(set(versions)) == len(versions)
    assert OLD in versions and "0.4.37" in versions  # 0.4.37 is a jax-only release on jaxlib 0.4.36
    assert "0.4.32" not in versions  # yanked
    assert "0.4.16" not in versions  # its jaxlib is not on PyPI
    assert min(keys) >= (0, 4, 13)
    with audited() as did:
        assert EnvironmentManager(root).available_versions() == versions
    assert did.connects() == [] and did.processes == []  # served from the cache

    assert manager.plan("latest")["version"] == versions[-1]
    assert manager.plan("0.8")["version"] == "0.8.0"  # the index's name of the release


# ------------------------------------------------------------------------ versions and file names (no network)


def test_arbitrary_equality_specifier_is_string_equality():
    # PEP 440 `===` compares the version text, without padding: "===3.12" admits a Python that calls itself "3.12"
    # and no 3.12.x interpreter (they report three numbers). The hand-written parser read it as `==` and let 3.12.0
    # in.
    assert not python_allowed("===3.12", "3.12.0")
    assert not python_allowed("===3.12", "3.12.4")
    assert python_allowed("===3.12.4", "3.12.4")
    assert not python_allowed("===3.12.4", "3.12.5")
    assert python_allowed("==3.12", "3.12.0") and not python_allowed("==3.12", "3.12.4")  # `==` pads, `===` not
    assert python_allowed("==3.12.*", "3.12.4")


def test_requires_python_specifiers():
    assert python_allowed(None, "3.8.0") and python_allowed("", "3.8.0")
    assert python_allowed(">=3.10", "3.12.1") and not python_allowed(">=3.10", "3.9.18")
    assert python_allowed(">=3.7,<4", "3.13.0") and not python_allowed(">=3.7,<4", "4.0.0")
    assert not python_allowed("!=3.0.*,>=3.9", "3.0.1") and python_allowed("!=3.0.*,>=3.9", "3.11.2")
    assert python_allowed("~=3.9", "3.12.0") and not python_allowed("~=3.9.1", "3.10.0")
    assert python_allowed("> 3.10", "3.10.1")  # spaces, and > of a later patch release
    # An interpreter's pre-release counts as its release, as pip and uv check it.
    assert python_allowed(">=3.13", "3.13.0rc1") and not python_allowed("<3.13", "3.13.0rc1")
    assert python_release("3.14.0a1+") == Version("3.14.0")  # a source build's version is not PEP 440
    # A clause that is not PEP 440 does not exclude anything; the others still do.
    assert python_allowed(">=3.9, >=3.*", "3.11.0") and not python_allowed(">=3.9, >=3.*", "3.8.10")


def test_version_order_and_equality():
    assert sorted(["0.10.0", "0.9.2", "installed", "0.4.30", "0.4.4", "0.12.0.1"], key=version_key) == \
        ["installed", "0.4.4", "0.4.30", "0.9.2", "0.10.0", "0.12.0.1"]
    assert same_release("0.8", "0.8.0") and same_release("v0.4.30", "0.4.30.0") and not same_release("0.8", "0.8.1")
    assert not same_release("latest", "latest")  # not a version
    assert release_name("0.8.0") == "0.8" and release_name("0.4.30") == "0.4.30"  # lock file names
    # The fallback table is read with PEP 440 order: 0.11.0 is in the 0.11 range (the tuple comparison put it in the
    # range before: (0, 11) < (0, 11, 0)).
    assert fallback_pythons("0.11.0") == [12, 13, 14, 15]
    assert fallback_pythons("0.7.0") == [11, 12, 13, 14]
    assert fallback_pythons("0.4.30") == [9, 10, 11, 12] and fallback_pythons("0.4.12") == []


# What packaging.tags.platform_tags() gives on an x86-64 Linux with glibc 2.27 (a subset of it).
LINUX_X86 = frozenset({"manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64"})


def test_jaxlib_wheel_names():
    v = Version("0.4.30")
    assert jaxlib_wheel_pythons("jaxlib-0.4.30-cp312-cp312-manylinux2014_x86_64.whl", LINUX_X86) == (v, {12}, True)
    assert jaxlib_wheel_pythons("jaxlib-0.4.30-cp310-cp310-macosx_11_0_arm64.whl", LINUX_X86) == (v, {10}, False)
    assert jaxlib_wheel_pythons("jaxlib-0.4.30-cp311-cp311-manylinux2014_aarch64.whl", LINUX_X86) == (v, {11}, False)
    # A compressed tag set (PEP 425): one wheel, several platform tags.
    assert jaxlib_wheel_pythons("jaxlib-0.7.0-cp313-cp313-manylinux_2_27_x86_64.manylinux_2_17_x86_64.whl",
                                LINUX_X86) == (Version("0.7.0"), {13}, True)
    assert jaxlib_wheel_pythons("jaxlib-0.7.0-1-cp313-cp313-win_amd64.whl", frozenset({"win_amd64"}))[2]  # build tag
    # A manylinux newer than this glibc does not install here (uv would refuse it too).
    assert not jaxlib_wheel_pythons("jaxlib-0.7.0-cp313-cp313-manylinux_2_39_x86_64.whl", LINUX_X86)[2]
    for name in ("jaxlib-0.7.0-cp313-cp313t-manylinux_2_27_x86_64.whl",  # free-threaded
                 "jaxlib-0.7.0-cp39-abi3-manylinux_2_27_x86_64.whl",  # not a per-version ABI
                 "jaxlib-0.7.0-py3-none-any.whl",
                 "jaxlib-0.7.0rc1-cp313-cp313-manylinux_2_27_x86_64.whl",  # not a plain release
                 "jaxlib-0.7.0-cp27-cp27mu-manylinux1_x86_64.whl",  # Python 2
                 "jax_cuda12_plugin-0.7.0-cp313-cp313-manylinux_2_27_x86_64.whl",  # another project
                 "jaxlib-0.7.0.tar.gz", "jaxlib-not-a-wheel.whl"):
        assert jaxlib_wheel_pythons(name, LINUX_X86) is None, name


def test_jax_file_names():
    assert jax_file_version("jax-0.4.30-py3-none-any.whl") == Version("0.4.30")
    assert jax_file_version("jax-0.4.30.tar.gz") == Version("0.4.30")
    assert jax_file_version("jax-0.1.75.zip") == Version("0.1.75")
    for name in ("jax-0.4.30rc1.tar.gz", "jax-0.4.30-cp312-cp312-manylinux2014_x86_64.whl", "jaxlib-0.4.30.tar.gz",
                 "jax-0.4.30.egg", "jax-0.4.30.tar.bz2", "jax.tar.gz", "jax-0.4.30.post1-py3-none-any.whl"):
        assert jax_file_version(name) is None, name


def test_index_summary():
    f = lambda name, yanked=False, rp=None: {"filename": name, "requires-python": rp, "yanked": yanked}
    jax = [f("jax-0.4.36-py3-none-any.whl", rp=">=3.10"), f("jax-0.4.36.tar.gz", rp=">=3.10"),
           f("jax-0.4.37-py3-none-any.whl", rp=">=3.10"),  # a jax-only release, on jaxlib 0.4.36
           f("jax-0.4.32-py3-none-any.whl", yanked=True, rp=">=3.10"), f("jax-0.5.0rc1-py3-none-any.whl")]
    jaxlib = [f(f"jaxlib-0.4.36-cp3{m}-cp3{m}-{plat}.whl", rp=">=3.10")
              for m in (10, 11, 12, 13) for plat in ("manylinux2014_x86_64", "macosx_11_0_arm64", "win_amd64")]
    jaxlib += [f("jaxlib-0.4.36-cp313-cp313t-manylinux2014_x86_64.whl"),
               f("jaxlib-0.4.32-cp312-cp312-manylinux2014_x86_64.whl", yanked=True)]
    index = summarize_index(jax, jaxlib)
    assert sorted(index["jax"]) == ["0.4.32", "0.4.36", "0.4.37"]
    assert index["jax"]["0.4.32"]["yanked"] and not index["jax"]["0.4.36"]["yanked"]
    assert index["jax"]["0.4.36"]["requires_python"] == ">=3.10"
    assert index["jaxlib"] == {"0.4.36": {"pythons": [10, 11, 12, 13], "requires_python": ">=3.10"}}
    assert jaxlib_for(index, "0.4.36") == "0.4.36" and jaxlib_for(index, "0.4.37") == "0.4.36"
    assert jaxlib_for(index, "0.4.32") is None  # yanked


def test_platform_tags_come_from_packaging():
    from packaging.tags import sys_tags

    from reprobundle.envs.package_index import platform_markers, project_wheel

    here = platform_markers()
    assert here == {t.platform for t in sys_tags()} - {"any"}
    plat = next(t.platform for t in sys_tags() if t.platform != "any")
    other = "win_amd64" if not plat.startswith("win") else "manylinux_2_17_x86_64"
    assert jaxlib_wheel_pythons(f"jaxlib-0.4.36-cp312-cp312-{plat}.whl") == (Version("0.4.36"), {12}, True)
    assert jaxlib_wheel_pythons(f"jaxlib-0.4.36-cp312-cp312-{other}.whl")[2] is (other in here)
    assert project_wheel("jax_cuda12_pjrt-0.7.0-py3-none-manylinux_2_27_x86_64.whl", "jax-cuda12-pjrt",
                         LINUX_X86) == (Version("0.7.0"), None, True)
    assert project_wheel("jax_cuda12_plugin-0.7.0-cp313-cp313-manylinux_2_27_aarch64.whl", "jax-cuda12-plugin",
                         LINUX_X86) == (Version("0.7.0"), [13], False)


def test_an_environment_configuration_crosses_machines_as_json_with_a_task(tmp_path):
    """EnvConfig is one value: --index-url sets both indexes, it survives JSON, and the manager is made from it; a
    replay task (ReplayOptions, EnvConfig, mode) comes back from its plain data equal, and refuses unknown keys."""
    from reprobundle.errors import UsageError
    from reprobundle.fleet.executor import ReplayTask
    from reprobundle.run.replay_options import ReplayOptions

    config = EnvConfig.of(tmp_path, "3.12", "http://127.0.0.1:9/simple/")
    assert (config.index_url, config.nightly_index) == ("http://127.0.0.1:9/simple",) * 2
    assert EnvConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    manager = EnvironmentManager(config)
    assert (manager.root, manager.python, manager.index_url) == (tmp_path, "3.12", "http://127.0.0.1:9/simple")
    assert EnvironmentManager(tmp_path).config == EnvConfig(root=str(tmp_path))
    task = ReplayTask("memory://s", "x@1", ("0.4.30", "installed"),
                      ReplayOptions.of(repeat=6, rounds=2, pin="0", retrace_packages=("flax==0.10.4",)), config, "retrace")
    assert ReplayTask.from_dict(json.loads(json.dumps(task.to_dict()))) == task
    with pytest.raises(UsageError, match="unknown environment setting"):
        EnvConfig.from_dict({**config.to_dict(), "uv": "/bin/uv"})
