"""Isolated, cached virtual environments, one per JAX release, for replaying a bundle on that release.

Layout of the environment root (default: $REPROBUNDLE_ENV_DIR, else <user cache>/reprobundle/envs)::

    jax-0.8.0-py3.12/            a finished venv; reprobundle-env.json inside marks it complete (CPU build)
    jax-0.8.0-cuda13-py3.12/     the same release built for another platform: cuda12, cuda13, rocm, tpu
    .tmp-jax-0.8.0-py3.12-<rnd>/ a venv being built (renamed into place when verified)
    .trash-<rnd>/                an environment being removed
    .locks/jax-0.8.lock          fcntl lock: one builder per JAX release (and build) at a time, across processes
    .index-cache.json            what the package index said about jax and jaxlib (see package_index.py)

Each environment holds `jax==V`, the jaxlib it needs, numpy (numpy<2 for releases built before NumPy 2),
msgpack and flatbuffers (which `jax.export` deserialization imports but jax does not depend on), plus
their dependencies - nothing from reprobundle: the worker is run by path.

Choosing a Python: a jax release is only installable on the CPython versions its jaxlib has wheels for
(intersected with jax's requires-python). Both are read from the package index (package_index.py: simple API,
cached; a built-in table is the fallback when the index cannot be read); interpreters.py finds the candidate
interpreters and picks the one whose minor version is closest to the host's.

Environments are built with uv (`uv.find_uv_bin()`, else `uv` on PATH), else with `python -m venv` and pip.

Platforms (see platforms.py): an environment is built per (JAX release, build). The CPU build keeps the names it
always had; the others install the release's own accelerator extra from the index: `jax[cuda13]` or `jax[cuda12]`
(the newest CUDA major the release has wheels for and the NVIDIA driver supports), `jax[tpu]` (libtpu; releases
before 0.5.1 take libtpu-nightly from Google's find-links page), `jax[rocm]`. uv links packages from its cache
(hardlinks on Linux), so environments of one build share the CUDA libraries on disk instead of copying ~3 GB each;
`envs` shows how much of each environment is shared that way. The verification imports jax with JAX_PLATFORMS set to
the platform and fails unless that platform's devices are there.
"""

from __future__ import annotations

import builtins
import contextlib
import json
import logging
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Callable, Iterator, Sequence

from packaging.version import Version

from ..errors import EnvironmentCreationError, NoSuitablePythonError
from .interpreters import Interpreter, InterpreterFinder, requested_python
from .local_env import inspect_interpreter, is_path_request
from .nightly import Nightly, find_nightly, list_nightlies, nightly_date, nightly_index_url
from .package_index import CACHE_FILE, INDEX_CACHE_TTL_S, PackageIndex, index_url, installable, jaxlib_for
from .platforms import ACCELERATORS, CUDA_BUILDS, PLATFORMS, build_platform, detect_devices, platform_label
from .versions import python_release, release_name, same_release, version_key

__all__ = ["INSTALLED", "LATEST", "JaxEnvironment", "EnvironmentManager", "default_root"]

log = logging.getLogger(__name__)

INSTALLED = "installed"  # pseudo-version: the host's own interpreter and its installed jax; no env is created
LATEST = "latest"  # pseudo-version: the newest jax on the index that some interpreter found here can run

METADATA_FILE = "reprobundle-env.json"
METADATA_SCHEMA = 1
INSTALL_TIMEOUT_S = 1800.0  # uv/pip install of jax, jaxlib and numpy (not the worker's timeout, see execution.py)
VERIFY_TIMEOUT_S = 600.0
_TAIL_LINES = 25

# Installed beside jax/jaxlib in every environment. flatbuffers: jax.export.deserialize imports it, and jax
# does not depend on it.
EXTRA_PACKAGES = ("msgpack", "flatbuffers")

# jaxlib releases before 0.4.26 were built against NumPy 1.x: with NumPy 2 they fail at import
# (np.trapz, np.issubsctype removed; "_ARRAY_API not found"). Checked: 0.4.13, 0.4.20, 0.4.23, 0.4.25 fail
# with numpy 2.4, 0.4.26, 0.4.29 and 0.4.30 work.
NUMPY2_FIRST_JAX = Version("0.4.26")

_VERSION_RE = re.compile(r"^\d+(\.\d+)*$")  # what ensure() accepts: a plain release ("0.8.0", "0.12.0.1")
# no build: cpu; a nightly's version ends in .devYYYYMMDD
_ENV_DIR_RE = re.compile(r"^jax-(\d+(?:\.\d+)*(?:\.dev\d{8})?)(?:-(cuda\d+|rocm|tpu))?-py(\d+)\.(\d+)$")
_VERIFY_MARK = "REPROBUNDLE-VERIFY "


@dataclass(frozen=True)
class JaxEnvironment:
    jax_version: str  # resolved, e.g. "0.8.0" (INSTALLED: the host's installed jax, read without importing it)
    python_executable: Path  # the environment's own interpreter (run the worker with it, by path)
    python_version: str  # "3.12.1"
    path: Path | None  # the environment's directory; None for INSTALLED
    created: str | None  # ISO 8601, UTC
    size_bytes: int | None
    jaxlib_version: str | None = None
    numpy_version: str | None = None
    build: str = "cpu"  # "cpu", "cuda12", "cuda13", "rocm", "tpu": the wheels it holds (see platforms.py)
    shared_bytes: int | None = None  # of size_bytes, in files linked from uv's cache (shared with other envs)
    nightly: str | None = None  # a nightly's date (ISO), None for a release
    index: str | None = None  # the index its jax came from, when not the default one
    commits: tuple[tuple[str, str], ...] = ()  # (("jax", sha), ("jaxlib", sha)): what the version modules record
    local: bool = False  # --jax PATH: an interpreter reprobundle did not create, used as it is
    source_build: str | None = None  # --jax PATH: why its jaxlib counts as built from source; None: from an index

    @property
    def platform(self) -> str:
        """The platform the environment's jax runs on: "cpu", "cuda", "rocm", "tpu"."""
        return build_platform(self.build)

    def build_record(self) -> dict:
        """What a run records of the build it ran on (its environment's `jax_build`): where it came from ("release",
        "nightly" with its date and index, "local": --jax PATH, with why its jaxlib counts as built from source), and
        the commits its version modules record."""
        origin = "local" if self.local else "nightly" if self.nightly else "release" if self.path else "installed"
        record: dict = {"origin": origin, "commits": dict(self.commits)}
        if self.nightly:
            record.update(nightly=self.nightly, index=self.index)
        if self.local:
            record.update(path=str(self.path), source_build=self.source_build)
        return record


# The first jax release whose jax[tpu] takes libtpu from PyPI; older ones pin a libtpu-nightly that only Google's
# find-links page has.
TPU_PYPI_FIRST_JAX = Version("0.5.1")
LIBTPU_FIND_LINKS = "https://storage.googleapis.com/jax-releases/libtpu_releases.html"
# Fallback only (the index is unreadable): the first release with jax[cuda13] wheels.
CUDA13_FIRST_JAX = Version("0.7.2")


def env_dir_name(version: str, build: str, pyminor: str) -> str:
    """jax-0.8.0-py3.12 (the CPU build, named as it always was), jax-0.8.0-cuda13-py3.12 (the others)."""
    return f"jax-{version}-py{pyminor}" if build == "cpu" else f"jax-{version}-{build}-py{pyminor}"


def plugin_project(build: str) -> str | None:
    """The index project whose releases say whether a jaxlib has wheels for `build` (None: the CPU build)."""
    return f"jax-{build}-plugin" if build.startswith("cuda") else None


def requirements(version: str, jaxlib: str | None, build: str = "cpu") -> tuple[list[str], list[str]]:
    """(requirements, installer options) of the environment of jax `version` with `jaxlib` (None: left to the
    installer) for `build`: jax with the release's own accelerator extra, numpy (<2 before NUMPY2_FIRST_JAX),
    EXTRA_PACKAGES."""
    jax = "jax" if build == "cpu" else f"jax[{build}]"
    reqs = [f"{jax}=={version}", f"jaxlib=={jaxlib}" if jaxlib else f"jaxlib<={version}"]
    reqs.append("numpy<2" if Version(version) < NUMPY2_FIRST_JAX else "numpy")
    reqs += list(EXTRA_PACKAGES)
    options = []
    if build == "tpu" and Version(version) < TPU_PYPI_FIRST_JAX:
        options = ["--find-links", LIBTPU_FIND_LINKS]
    return reqs, options


def choose_cuda_build(available: list[str], driver_cuda: tuple[int, int] | None) -> str | None:
    """The newest CUDA build of `available` ("cuda13", "cuda12") that the driver supports (its CUDA version
    `driver_cuda`, None when unknown: then the newest); None when none fits."""
    for build in CUDA_BUILDS:
        if build in available and (driver_cuda is None or driver_cuda[0] >= int(build[4:])):
            return build
    return None


def default_root() -> Path:
    env = os.environ.get("REPROBUNDLE_ENV_DIR")
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("reprobundle")) / "envs"
    except ImportError:  # pragma: no cover - platformdirs is a dependency
        return Path.home() / ".cache" / "reprobundle" / "envs"


def local_environment(request: str) -> JaxEnvironment:
    """`--jax PATH`: the interpreter or environment at PATH, its JAX as it is (see local_env.py); nothing cached."""
    info = inspect_interpreter(request)
    prefix = Path(info["prefix"])
    return JaxEnvironment(info["jax"], info["python_executable"], info["python"], prefix, None, None,
                          info["jaxlib"], info["numpy"], local=True, source_build=info["source_build"],
                          commits=tuple(sorted((k, v) for k, v in info["commits"].items() if v)))


def _normalize_request(version: str) -> str:
    v = version.strip()
    v = re.sub(r"^jax\s*==\s*", "", v)
    if v[:1] in ("v", "V") and _VERSION_RE.match(v[1:]):
        v = v[1:]
    return v


# -------------------------------------------------------------------------------------------- utilities


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _dir_size(path: Path) -> int:
    import stat

    total, seen = 0, set()
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
    return total


def _shared_size(path: Path) -> int:
    """Bytes of the regular files under `path` that have other hard links (uv links them from its cache, so other
    environments of the same packages share them on disk)."""
    import stat

    total, seen = 0, set()
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_size
    return total


def _venv_python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _file_lock(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive inter-process lock held while the block runs (flock; msvcrt on Windows)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        if sys.platform == "win32":  # pragma: no cover
            import msvcrt

            waited = False
            while True:
                try:
                    msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
                    break
                except OSError:
                    if not waited and on_wait:
                        on_wait()
                    waited = True
                    time.sleep(0.2)
        else:
            import fcntl

            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if on_wait:
                    on_wait()
                fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def _clean_env() -> dict[str, str]:
    """The environment for installer and verification subprocesses: nothing from the host's Python leaks in."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "CONDA_PREFIX",
                        "PYTHONDONTWRITEBYTECODE", "__PYVENV_LAUNCHER__")}
    env["UV_PYTHON_DOWNLOADS"] = "never"  # never fetch an interpreter behind the user's back
    env["PYTHONNOUSERSITE"] = "1"
    return env


_VERIFY = """
import importlib, importlib.metadata as md, importlib.util, json, os, platform, sys
import numpy
import jax
import jax.numpy as jnp
want = os.environ["JAX_PLATFORMS"]
devices = jax.devices()
def lowering(d):
    if d.platform != "gpu":
        return d.platform
    version = str(getattr(d.client, "platform_version", "")).lower()
    return "rocm" if ("rocm" in version or "hip" in version) else "cuda"
if not any(lowering(d) == want for d in devices):
    raise SystemExit("no %s device: jax sees %r" % (want, devices))
y = jax.jit(lambda x: x + 1)(jnp.arange(3))
if [int(v) for v in y] != [1, 2, 3]:
    raise SystemExit("jit(x + 1) gave %r" % (y,))
import msgpack
if importlib.util.find_spec("reprobundle") is not None:
    raise SystemExit("reprobundle is importable inside the environment")
print("__MARK__" + json.dumps({
    "jax": jax.__version__, "jaxlib": md.version("jaxlib"), "numpy": numpy.__version__,
    "python": platform.python_version(), "devices": [str(d) for d in devices],
    "device_kind": str(getattr(devices[0], "device_kind", "")),
    "packages": {d.metadata["Name"]: d.version for d in md.distributions()},
    "commits": {name: getattr(importlib.import_module(name + ".version"), "_git_hash", None)
                for name in ("jax", "jaxlib")},
}))
""".replace("__MARK__", _VERIFY_MARK)


# ------------------------------------------------------------------------------------------------ manager


class EnvironmentManager:
    """Creates, finds, lists and removes the per-JAX-version environments under one root directory."""

    def __init__(self, root: Path | None = None, *, python: str | None = None, uv: str | None = None,
                 index_url: str | None = None) -> None:
        """`root`: where environments live (default: $REPROBUNDLE_ENV_DIR, else the user cache's envs/).
        `python`: the interpreter the user named with --python (a path, a command, or a version such as
        "3.12"); when given, it is the only candidate. `uv`: the uv binary (default: the `uv` package's, else
        `uv` on PATH); "" builds with `python -m venv` and pip instead. `index_url`: the PEP 503 index nightlies come
        from (default: $REPROBUNDLE_NIGHTLY_INDEX, else JAX's nightly index) and releases too (a mirror of PyPI).
        """
        self.root = Path(root).expanduser() if root is not None else default_root()
        self.python = str(python) if python else None
        self._uv = uv
        self._uv_resolved = uv is not None
        self._interpreters = InterpreterFinder(self.python, self._uv_bin)
        self.index_url = index_url.rstrip("/") if index_url else None
        self._index = PackageIndex(self.root / CACHE_FILE, url=self.index_url)
        self._nightlies: dict[str, tuple[builtins.list[Nightly], dict]] = {}  # index -> list_nightlies(index)
        self._found_devices = None  # detect_devices(), when a choice needs it

    # ------------------------------------------------------------------------------ public API

    def ensure(self, version: str, *, platform: str = "cpu", build: str | None = None,
               progress: Callable[[str], None] | None = None) -> JaxEnvironment:
        """The environment for jax `version` ("0.8.0", "installed" or "latest") on `platform` ("cpu", "cuda",
        "rocm", "tpu"), created if not cached. `build` ("cuda12", "cuda13") fixes which CUDA wheels; by default a
        cached environment of the platform is used, else the newest build the release has and the driver runs.
        "installed" is the host's interpreter whatever the platform (its jax runs there or the worker says not)."""
        say = progress or (lambda _line: None)
        requested = _normalize_request(version)
        if requested == INSTALLED:
            return self._installed()
        if is_path_request(requested):
            return local_environment(requested)
        if platform not in PLATFORMS or (build is not None and build_platform(build) != platform):
            raise EnvironmentCreationError(f"no {build or platform} build of jax for the platform {platform!r}",
                                           hint="platforms: cpu, cuda (builds cuda12, cuda13), rocm, tpu")
        if platform == "cpu":
            build = "cpu"
        if nightly_date(requested) is not None:
            return self._ensure_nightly(requested, platform, say)
        if requested == LATEST:
            versions = self.available_versions()
            if not versions:
                raise EnvironmentCreationError("no jax release found on the package index",
                                               hint=f"check the index ({self.index_url or index_url()}) is reachable")
            hit = self._find_existing(versions[-1], platform, build)
            if hit is not None:
                return hit
            requested = self._resolve_latest(versions)
        if not _VERSION_RE.match(requested):
            raise EnvironmentCreationError(
                f"{version!r} is not a jax version",
                hint='give a release such as "0.8.0", or "installed" or "latest"')
        hit = self._find_existing(requested, platform, build)
        if hit is not None:
            return hit
        return self._create(requested, platform, build, say)

    def plan(self, version: str, *, platform: str = "cpu", build: str | None = None) -> dict:
        """What `ensure` would install for a new environment, without installing anything (needs the index):
        {"version", "jaxlib", "build", "platform", "pythons" (CPython 3 minors that fit), "requirements",
        "options" (installer options), "name" (of the environment folder, at the Python closest to the host's)}."""
        requested = _normalize_request(version)
        if requested == LATEST:
            requested = self.available_versions()[-1]
        if platform == "cpu":
            build = "cpu"
        index = self._index.load(want=requested)
        if index is None:
            raise EnvironmentCreationError(f"the package index is unreachable: {self._index.error}",
                                           hint=f"check the index ({self.index_url or index_url()}) is reachable")
        canonical = next((v for v in index["jax"] if same_release(v, requested)), None)
        if canonical is None or jaxlib_for(index, canonical) is None:
            raise EnvironmentCreationError(f"jax {requested} is not an installable release on {index['url']}")
        minors, _rp, jaxlib, _ = self._index.supported(canonical)
        build = self._build_for(canonical, jaxlib, platform, build)
        minors = self._build_pythons(build, jaxlib or canonical, minors)
        reqs, options = requirements(canonical, jaxlib, build)
        host = sys.version_info[1]
        best = min(minors, key=lambda m: (abs(m - host), -m)) if minors else host
        return {"version": canonical, "jaxlib": jaxlib, "build": build, "platform": build_platform(build),
                "pythons": minors, "requirements": reqs, "options": options,
                "name": env_dir_name(canonical, build, f"3.{best}")}

    def resolve(self, plan: dict, *, python_minor: int | None = None,
                python_platform: str | None = None) -> dict[str, str]:
        """A dry run of `plan` (see plan()): the packages and versions the installer resolves for it
        ({"jax": "0.7.2", "jax-cuda12-plugin": "0.7.2", "nvidia-cublas-cu12": ...}), read from the index's
        metadata only: `uv pip compile` for Linux (manylinux_2_31) on this machine's architecture, nothing
        downloaded but metadata. Raises EnvironmentCreationError when it does not resolve."""
        uv = self._uv_bin()
        if not uv:
            raise EnvironmentCreationError("resolving needs uv", hint="pip install uv")
        minor = python_minor or (plan["pythons"][len(plan["pythons"]) // 2] if plan["pythons"] else
                                 sys.version_info[1])
        arch = "aarch64" if platform.machine().lower() in ("aarch64", "arm64") else "x86_64"
        target = python_platform or f"{arch}-manylinux_2_31"
        cmd = [uv, "pip", "compile", "-", "--no-header", "--no-annotate", "--quiet", "--python-version",
               f"3.{minor}", "--python-platform", target, *plan["options"]]
        what = f"uv pip compile ({plan['build']}, Python 3.{minor}, {target})"
        try:
            r = subprocess.run(cmd, input="\n".join(plan["requirements"]) + "\n", capture_output=True, text=True,
                               timeout=300, env=_clean_env(), cwd=self.root if self.root.is_dir() else None)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise EnvironmentCreationError(f"{what} could not run: {e}") from None
        if r.returncode != 0:
            raise EnvironmentCreationError(f"jax {plan['version']} ({plan['build']}) does not resolve: {what} "
                                           f"failed:\n{_tail(r.stderr or r.stdout)}")
        pins = {}
        for line in r.stdout.splitlines():
            name, sep, ver = line.strip().partition("==")
            if sep and not name.startswith("#"):
                pins[name.strip().lower()] = ver.strip()
        return pins

    def resolve_version(self, version: str) -> str:
        """What `ensure(version)` would install: "latest" resolved, "0.8" -> "0.8.0"; needs the index."""
        requested = _normalize_request(version)
        if requested == INSTALLED:
            return self._installed().jax_version
        if requested == LATEST:
            return self._resolve_latest(self.available_versions())
        index = self._index.load(want=requested)
        if index and _VERSION_RE.match(requested):
            for v in index["jax"]:
                if same_release(v, requested):
                    return v
        return requested

    def list(self) -> builtins.list[JaxEnvironment]:
        """The finished environments under the root, by jax version, build, then Python version."""
        envs = []
        try:
            entries = list(self.root.iterdir())
        except OSError:
            return []
        for d in entries:
            if _ENV_DIR_RE.match(d.name):
                env = self._read_env(d)
                if env is not None:
                    envs.append(env)
        return sorted(envs, key=lambda e: (version_key(e.jax_version), e.build, python_release(e.python_version)))

    def remove(self, version: str | None = None, platform: str | None = None) -> builtins.list[JaxEnvironment]:
        """Remove the environments of jax `version` (all of them when None), of every build or of those of
        `platform` ("cuda", or a build such as "cuda12"); returns what was removed."""
        if version is None:
            targets = self.list()
        else:
            requested = _normalize_request(version)
            envs = self.list()
            if requested == INSTALLED:
                return []
            if requested == LATEST:
                requested = envs[-1].jax_version if envs else ""
            day = nightly_date(requested)
            if day is not None:
                targets = [e for e in envs if e.nightly == day.isoformat()]
            elif not _VERSION_RE.match(requested):
                return []
            else:
                targets = [e for e in envs if same_release(e.jax_version, requested)]
        if platform:
            targets = [e for e in targets if platform in (e.platform, e.build)]
        removed = []
        for env in targets:
            assert env.path is not None
            with _file_lock(self._lock_path(env.jax_version, env.build)):
                if not env.path.exists():
                    continue
                trash = self.root / f".trash-{secrets.token_hex(6)}"
                os.rename(env.path, trash)  # gone from view at once, then deleted at leisure
                _rmtree(trash)
                removed.append(env)
        if version is None:  # leftovers of crashed removals
            for d in self._dot_dirs(".trash-"):
                _rmtree(d)
        return removed

    def available_versions(self) -> builtins.list[str]:
        """Installable jax releases on the index, ascending (cached for INDEX_CACHE_TTL_S).

        A release counts when it is not yanked and a jaxlib for it is on the index: its own version, or,
        for the jax-only patch releases (0.4.37, 0.5.2), the previous release's. So 0.4.32 (yanked),
        0.4.15-0.4.17 (their jaxlib is gone) and everything before 0.4.13 are left out.
        """
        index = self._index.load(max_age=INDEX_CACHE_TTL_S)
        if index is None:
            raise EnvironmentCreationError(
                f"could not read the list of jax releases from {self.index_url or index_url()}: {self._index.error}",
                hint="check the network or the index settings (UV_DEFAULT_INDEX / UV_INDEX_URL)")
        return sorted(installable(index), key=Version)

    # ------------------------------------------------------------------------------------ nightlies

    def nightlies(self) -> tuple[builtins.list[Nightly], dict]:
        """(the nightlies on the nightly index installable here, oldest first; {date: why incomplete}), read once."""
        index = nightly_index_url(self.index_url)
        if index not in self._nightlies:
            log.info("nightly index: reading the jax and jaxlib listings of %s", index)
            self._nightlies[index] = list_nightlies(index)
        return self._nightlies[index]

    def _find_nightly(self, day: str) -> JaxEnvironment | None:
        """A finished CPU environment of the nightly of `day` (ISO), without the network."""
        stamp = day.replace("-", "")
        versions = {m.group(1) for d in self._dot_dirs("jax-") if (m := _ENV_DIR_RE.match(d.name))
                    and m.group(1).endswith(f".dev{stamp}")}
        for version in sorted(versions, key=Version, reverse=True):
            hit = self._find_existing(version, "cpu", "cpu")
            if hit is not None and hit.nightly == day:
                return hit
        return None

    def _ensure_nightly(self, requested: str, platform: str, say: Callable[[str], None]) -> JaxEnvironment:
        if platform != "cpu":
            raise EnvironmentCreationError(f"jax {requested}: nightly environments are built for the CPU only",
                                           hint="replay nightlies with --platform cpu")
        day = nightly_date(requested)
        assert day is not None
        hit = self._find_nightly(day.isoformat())
        if hit is not None:
            return hit
        index = nightly_index_url(self.index_url)
        found = find_nightly(requested, self.nightlies()[0], index)
        interp = self._interpreters.choose(found.jax_version, list(found.pythons), None, found.jaxlib_version)
        lock = self._lock_path(found.jax_version, "cpu")
        with contextlib.ExitStack() as stack:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                stack.enter_context(_file_lock(lock, lambda: say(f"waiting for another process creating the "
                                                                 f"environment for jax {found.jax_version} ...")))
            except OSError as e:
                raise EnvironmentCreationError(f"cannot write to the environment directory {self.root}: {e}",
                                               hint="set REPROBUNDLE_ENV_DIR to a writable directory") from None
            hit = self._find_nightly(day.isoformat())
            if hit is not None:
                return hit
            say(f"nightly of {day.isoformat()}: jax {found.jax_version}, jaxlib {found.jaxlib_version} from {index}")
            return self._build(found.jax_version, interp, found.jaxlib_version, say, nightly=found)

    # -------------------------------------------------------------------------- host ("installed")

    def _installed(self) -> JaxEnvironment:
        """The host's interpreter and its jax; with --python, that interpreter (as given) and its jax."""
        if self.python:
            return self._installed_in_user_python()
        import importlib.metadata as md

        try:
            jax_version = md.version("jax")
        except md.PackageNotFoundError:
            raise EnvironmentCreationError(
                f"jax is not installed in this Python ({sys.executable})",
                hint="install jax here, or ask for a released version such as 0.8.0") from None
        jaxlib = numpy = None
        with contextlib.suppress(md.PackageNotFoundError):
            jaxlib = md.version("jaxlib")
        with contextlib.suppress(md.PackageNotFoundError):
            numpy = md.version("numpy")
        return JaxEnvironment(jax_version, Path(sys.executable), platform.python_version(), None, None, None,
                              jaxlib, numpy)

    def _installed_in_user_python(self) -> JaxEnvironment:
        spec = self.python
        assert spec is not None
        if requested_python(spec) is not None:
            interp = self._interpreters.user_interpreter()
            path = interp.executable if interp else None
        else:
            path = spec if (os.sep in spec or os.path.exists(spec)) else shutil.which(spec)
        if not path:
            raise NoSuitablePythonError(f"--python {spec}: no such Python interpreter found",
                                        hint="pass the path of an existing interpreter")
        code = ("import importlib.metadata as m, json, platform\n"
                "def v(n):\n"
                "    try:\n        return m.version(n)\n"
                "    except m.PackageNotFoundError:\n        return None\n"
                "print(json.dumps([v('jax'), v('jaxlib'), v('numpy'), platform.python_version()]))")
        try:
            r = subprocess.run([os.path.expanduser(path), "-I", "-c", code], capture_output=True, text=True,
                               timeout=60, stdin=subprocess.DEVNULL, env=_clean_env())
            jax_v, jaxlib_v, numpy_v, py_v = json.loads(r.stdout.strip().splitlines()[-1])
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            raise NoSuitablePythonError(f"--python {spec}: could not run {path}",
                                        hint="pass the path of a working Python interpreter") from None
        if not jax_v:
            raise EnvironmentCreationError(f"jax is not installed in --python {spec} ({path})",
                                           hint="install jax there, or ask for a released version such as 0.8.0")
        return JaxEnvironment(jax_v, Path(os.path.expanduser(path)), py_v, None, None, None, jaxlib_v, numpy_v)

    # ------------------------------------------------------------------------------- existing envs

    def _read_env(self, d: Path) -> JaxEnvironment | None:
        try:
            meta = json.loads((d / METADATA_FILE).read_text())
            return JaxEnvironment(
                jax_version=meta["jax_version"], python_executable=_venv_python(d),
                python_version=meta["python_version"], path=d, created=meta.get("created"),
                size_bytes=meta.get("size_bytes"), jaxlib_version=meta.get("jaxlib_version"),
                numpy_version=meta.get("numpy_version"), build=str(meta.get("build") or "cpu"),
                shared_bytes=meta.get("shared_bytes"), nightly=meta.get("nightly"), index=meta.get("index"),
                commits=tuple(sorted((str(k), str(v)) for k, v in (meta.get("commits") or {}).items() if v)))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _find_existing(self, version: str, platform: str = "cpu", build: str | None = None) -> JaxEnvironment | None:
        """A usable finished environment for `version` on `platform` (of `build`, when given; else the build the
        driver runs first), and for --python, if given; without the network."""
        want = Version(version)
        matches = []
        try:
            entries = list(self.root.iterdir())
        except OSError:
            return None
        for d in entries:
            m = _ENV_DIR_RE.match(d.name)
            if not m or Version(m.group(1)) != want:
                continue
            found = m.group(2) or "cpu"
            if build_platform(found) != platform or (build is not None and found != build):
                continue
            env = self._read_env(d)
            if env is None or not env.python_executable.exists():  # unfinished, or its base Python is gone
                continue
            matches.append(env)
        if not matches:
            return None
        if platform == "cuda" and build is None and len({e.build for e in matches}) > 1:
            fits = choose_cuda_build(sorted({e.build for e in matches}), self._devices().cuda_driver())
            matches = [e for e in matches if e.build == fits] or matches
        if self.python:
            fit = [e for e in matches if self._python_matches(e)]
            if not fit:
                log.info("jax %s: %d cached environment(s), none built with --python %s", version, len(matches),
                         self.python)
                return None
            log.info("jax %s: using the cached environment %s (Python %s, as --python %s asks)", version,
                     fit[0].path, fit[0].python_version, self.python)
            return fit[0]
        host = sys.version_info[:2]

        def distance(e: JaxEnvironment) -> tuple:
            v = python_release(e.python_version).release
            return (abs(v[1] - host[1]) if v[0] == host[0] else 99, -v[1])

        hit = min(matches, key=distance)
        log.info("jax %s: using the cached environment %s (Python %s%s)", version, hit.path, hit.python_version,
                 f"; the closest to the host's of {len(matches)}" if len(matches) > 1 else "")
        return hit

    def _python_matches(self, env: JaxEnvironment) -> bool:
        assert self.python is not None
        want = requested_python(self.python)
        if want is not None:
            return python_release(env.python_version).release[: len(want)] == want
        interp = self._interpreters.user_interpreter()
        if interp is None:
            return False
        try:
            meta = json.loads((env.path / METADATA_FILE).read_text())  # type: ignore[operator]
        except (OSError, ValueError):
            return False
        return os.path.realpath(meta.get("base_python", "")) == interp.executable

    # ------------------------------------------------------------------------------ interpreters

    def _uv_bin(self) -> str | None:
        if not self._uv_resolved:
            self._uv_resolved = True
            try:
                from uv import find_uv_bin

                self._uv = find_uv_bin()
                log.debug("uv: %s (the uv package's binary)", self._uv)
            except (ImportError, FileNotFoundError, OSError):
                self._uv = shutil.which("uv")
                log.debug("uv: the uv package is not usable here; on PATH: %s", self._uv or "none")
        return self._uv

    def _resolve_latest(self, versions: builtins.list[str]) -> str:
        for v in reversed(versions):
            minors, rp, _jaxlib, _ = self._index.supported(v)
            if self._interpreters.runs_any(minors, rp):
                log.info("latest: jax %s (the newest release an interpreter found here can run)", v)
                return v
        found = ", ".join(i.describe() for i in self._interpreters.discover()) or "none"
        raise NoSuitablePythonError(
            f"no jax release on the index runs on the Python interpreters found here ({found})",
            hint="install a recent Python (3.12 or newer) or pass --python PATH")

    # ------------------------------------------------------------------------------ creation

    def _lock_path(self, version: str, build: str = "cpu") -> Path:
        suffix = "" if build == "cpu" else f"-{build}"
        return self.root / ".locks" / f"jax-{release_name(version)}{suffix}.lock"

    def _devices(self):
        if self._found_devices is None:
            self._found_devices = detect_devices()
        return self._found_devices

    def _build_for(self, version: str, jaxlib: str | None, platform: str, build: str | None) -> str:
        """The build of a new environment of jax `version` for `platform`: `build` if given (checked against the
        index), else for CUDA the newest of the release's CUDA builds that the NVIDIA driver supports."""
        if platform != "cuda":
            return build or platform
        release = jaxlib or version
        available = []
        unknown = False
        for candidate in CUDA_BUILDS:
            listing = self._index.project(plugin_project(candidate) or "", want=release)
            if listing is None:  # the index is unreadable: the built-in rule
                unknown = True
                if candidate == "cuda12" or Version(version) >= CUDA13_FIRST_JAX:
                    available.append(candidate)
            elif release in listing:
                available.append(candidate)
        if build is not None:
            if build not in available and not unknown:
                raise EnvironmentCreationError(
                    f"jax {version} has no {build} wheels on {index_url()} (it has: {', '.join(available) or 'none'})",
                    hint="pick another CUDA build with --platform, or another release")
            return build
        driver = self._devices().cuda_driver()
        chosen = choose_cuda_build(available, driver)
        if chosen is None:
            if not available:
                raise EnvironmentCreationError(
                    f"jax {version} has no CUDA wheels on {index_url()} (no jax-cuda12-plugin or jax-cuda13-plugin "
                    f"{release})", hint="pick a newer release: its CUDA build comes from those plugin packages")
            raise EnvironmentCreationError(
                f"jax {version} has CUDA wheels for {', '.join(available)}, and this NVIDIA driver supports CUDA "
                f"{driver[0]}.{driver[1] if driver else ''} only",
                hint="update the NVIDIA driver, or pick another release")
        if driver is None:
            log.info("jax %s: the NVIDIA driver's CUDA version is unknown; building %s", version, chosen)
        else:
            log.info("jax %s: %s (the newest CUDA build of %s that the driver's CUDA %d.%d runs)", version, chosen,
                     ", ".join(available), *driver)
        return chosen

    def _build_pythons(self, build: str, release: str, minors: builtins.list[int]) -> builtins.list[int]:
        """`minors` narrowed to those the build's plugin has wheels for (when the index says)."""
        project = plugin_project(build)
        listing = self._index.project(project, want=release) if project else None
        pythons = (listing or {}).get(release, {}).get("pythons")
        if pythons is None:
            return minors
        narrowed = [m for m in minors if m in pythons]
        if narrowed != minors:
            log.info("jax %s (%s): %s has wheels for CPython %s", release, build, project,
                     ", ".join(f"3.{m}" for m in pythons))
        return narrowed

    def _dot_dirs(self, prefix: str) -> builtins.list[Path]:
        try:
            return [d for d in self.root.iterdir() if d.name.startswith(prefix)]
        except OSError:
            return []

    def _create(self, version: str, platform: str, build: str | None, say: Callable[[str], None]) -> JaxEnvironment:
        index = self._index.load(want=version)
        if index is not None:
            canonical = next((v for v in index["jax"] if same_release(v, version)), None)
            if canonical is None:
                releases = installable(index)
                near = _nearest(version, releases)
                newest = max(releases, key=Version) if releases else None
                raise EnvironmentCreationError(
                    f"jax {version} is not a release on {index['url']}",
                    hint=f"pick a released version{near}" + (f" (newest: {newest})" if newest else ""))
            version = canonical
            if jaxlib_for(index, version) is None:
                entry = index["jax"][version]
                what = "it is yanked" if entry["yanked"] else f"no matching jaxlib is on {index['url']}"
                near = _nearest(version, installable(index))
                raise EnvironmentCreationError(f"jax {version} cannot be installed: {what}",
                                               hint=f"pick another version{near}")
        minors, requires_python, jaxlib, from_index = self._index.supported(version)
        if not minors and from_index:
            raise EnvironmentCreationError(f"jaxlib {jaxlib} has no CPython wheels for this platform",
                                           hint="pick another jax version")
        if not minors:
            raise EnvironmentCreationError(
                f"jax {version} is older than any jaxlib this tool knows of (0.4.13) and the index "
                f"could not be read ({self._index.error})",
                hint="check the network, or pick a jax release >= 0.4.13")
        build = self._build_for(version, jaxlib, platform, build)
        if build != "cpu":
            minors = self._build_pythons(build, jaxlib or version, minors)
            if not minors:
                raise EnvironmentCreationError(f"jax {version} has no {build} wheels for a CPython that its jaxlib "
                                               "has wheels for", hint="pick another release")
        interp = self._interpreters.choose(version, minors, requires_python, jaxlib)
        what = f"jax {version}" + ("" if build == "cpu" else f" ({build})")
        waiting = f"waiting for another process creating the environment for {what} ..."
        lock = self._lock_path(version, build)

        def on_wait() -> None:
            log.info("%s: %s is held by another process; waiting", what, lock)
            say(waiting)

        with contextlib.ExitStack() as stack:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                stack.enter_context(_file_lock(lock, on_wait))
            except OSError as e:
                raise EnvironmentCreationError(f"cannot write to the environment directory {self.root}: {e}",
                                               hint="set REPROBUNDLE_ENV_DIR to a writable directory") from None
            hit = self._find_existing(version, platform, build)  # built by someone else while we waited
            if hit is not None:
                return hit
            log.info("%s: no usable environment in %s; building one", what, self.root)
            return self._build(version, interp, jaxlib, say, build=build)

    def _build(self, version: str, interp: Interpreter, jaxlib: str | None,
               say: Callable[[str], None], *, build: str = "cpu", nightly: Nightly | None = None) -> JaxEnvironment:
        start = time.perf_counter()
        pyminor = f"{interp.minor[0]}.{interp.minor[1]}"
        name = env_dir_name(version, build, pyminor)
        final = self.root / name
        for stale in self._dot_dirs(f".tmp-{name}-"):  # left by a killed builder (we hold the lock)
            log.info("removing %s, left by an interrupted build", stale)
            _rmtree(stale)
        if final.exists():  # unfinished or broken (its base Python vanished): rebuild
            log.info("rebuilding %s: it is unfinished or its base Python is gone", final)
            trash = self.root / f".trash-{secrets.token_hex(6)}"
            os.rename(final, trash)
            _rmtree(trash)
        tmp = self.root / f".tmp-{name}-{secrets.token_hex(4)}"
        on = "" if build == "cpu" else f" for {platform_label(build_platform(build))} ({build})"
        say(f"creating environment for jax {version}{on} (Python {interp.version}) ...")
        reqs, options = requirements(version, jaxlib, build)
        index = nightly_index_url(self.index_url) if nightly else self.index_url
        if index:  # a nightly's index is searched before the default one; a release mirror replaces PyPI
            options = [*options, "--extra-index-url" if nightly else "--index-url", index]
        if not jaxlib:
            log.info("jax %s: the index is unreadable, so the jaxlib is left to the installer (jaxlib<=%s)",
                     version, version)
        if Version(version) < NUMPY2_FIRST_JAX:
            log.info("jax %s: numpy<2 (jaxlib releases before %s fail to import with NumPy 2)", version,
                     NUMPY2_FIRST_JAX)
        try:
            installer = self._install(tmp, interp, reqs, offline=not nightly and self._index.error is not None,
                                      say=say, options=options)
            say(f"verifying: importing jax in the new environment{' on ' + build_platform(build) if on else ''} ...")
            info = self._verify(tmp, version, build_platform(build))
            size, shared = _dir_size(tmp), _shared_size(tmp)
            meta = {
                "schema": METADATA_SCHEMA,
                "jax_version": info["jax"],
                "jaxlib_version": info["jaxlib"],
                "numpy_version": info["numpy"],
                "python_version": info["python"],
                "base_python": interp.executable,
                "requested": version,
                "requirements": reqs,
                "packages": info["packages"],
                "installer": installer,
                "created": _now_iso(),
                "creation_seconds": round(time.perf_counter() - start, 3),
                "size_bytes": size,
                "shared_bytes": shared,
                "platform": build_platform(build),
                "build": build,
                "installer_options": options,
                "device_kind": info.get("device_kind"),
                "commits": info.get("commits") or {},
                "nightly": nightly.date.isoformat() if nightly else None,
                "index": index,
            }
            _fix_paths(tmp, final)
            (tmp / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            os.rename(tmp, final)
        except BaseException:
            _rmtree(tmp)
            raise
        env = self._read_env(final)
        assert env is not None
        say(f"ready in {time.perf_counter() - start:.1f} s: jax {env.jax_version}, jaxlib {env.jaxlib_version}, "
            f"numpy {env.numpy_version}, Python {env.python_version}"
            + (f", {build} on {info.get('device_kind') or build_platform(build)}" if on else "") + f" ({final})")
        return env

    def _run(self, cmd: builtins.list[str], what: str, version: str, *, timeout: float, cwd: Path | None = None,
             env: dict | None = None) -> str:
        unreachable = (f"; the package index was unreachable ({self._index.error}), so only the uv cache "
                       f"was used" if self._index.error else "")
        if log.isEnabledFor(logging.DEBUG):
            shown = " ".join(a if len(a) <= 200 else f"<{len(a)} characters>" for a in cmd)
            log.debug("%s: running %s (timeout %g s)", what, shown, timeout)
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=timeout, cwd=cwd or self.root, env=env or _clean_env(),
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            out = e.output.decode("utf-8", "replace") if isinstance(e.output, bytes) else (e.output or "")
            raise EnvironmentCreationError(
                f"could not create the environment for jax {version}: {what} did not finish in {timeout:g} s\n"
                f"{_tail(out)}", hint="check the network; rerun to retry") from None
        except OSError as e:
            raise EnvironmentCreationError(
                f"could not create the environment for jax {version}: {what} could not start: {e}",
                hint="check that uv (or python -m venv) works here") from None
        if r.returncode != 0:
            raise EnvironmentCreationError(
                f"could not create the environment for jax {version}: {what} failed "
                f"(exit {r.returncode}):\n{_tail(r.stdout)}",
                hint="read the installer output above; check the network and the package index settings"
                     + unreachable)
        return r.stdout

    def _install(self, tmp: Path, interp: Interpreter, reqs: builtins.list[str], *, offline: bool,
                 say: Callable[[str], None], options: Sequence[str] = ()) -> str:
        """Create the venv at `tmp` and install `reqs` (with installer `options`, such as --find-links); returns
        the installer's name and version."""
        version = reqs[0].split("==", 1)[1]
        prompt = f"jax-{version}"
        uv = self._uv_bin()
        if uv:
            log.info("jax %s: building with uv (%s)%s", version, uv,
                     ", offline (the index is unreachable): packages come from uv's cache only" if offline else "")
            uv_version = self._run([uv, "--version"], "uv --version", version, timeout=60).strip()
            self._run([uv, "venv", "--quiet", "--relocatable", "--python-preference", "only-system",
                       "--prompt", prompt, "--python", interp.executable, str(tmp)], "uv venv", version,
                      timeout=300)
            note = " (offline: the index is unreachable)" if offline else ""
            say(f"installing {' '.join(reqs)} with {uv_version}{note} ...")
            t = time.perf_counter()
            cmd = [uv, "pip", "install", "--python", str(_venv_python(tmp)), "--python-preference", "only-system",
                   *options, *reqs]
            if offline:
                cmd.insert(3, "--offline")
            out = self._run(cmd, "uv pip install", version, timeout=INSTALL_TIMEOUT_S)
            n = sum(1 for line in out.splitlines() if line.startswith(" + "))
            say(f"installed {n} packages in {time.perf_counter() - t:.1f} s")
            return uv_version
        log.info("jax %s: %s; building with python -m venv and pip", version,
                 "uv is disabled (uv='')" if self._uv == "" else "no uv found (uv package or uv on PATH)")
        self._run([interp.executable, "-m", "venv", "--prompt", prompt, str(tmp)], "python -m venv", version,
                  timeout=300)
        say(f"installing {' '.join(reqs)} with pip ...")
        t = time.perf_counter()
        self._run([str(_venv_python(tmp)), "-m", "pip", "install", "--disable-pip-version-check",
                   "--no-input", *options, *reqs], "pip install", version, timeout=INSTALL_TIMEOUT_S)
        say(f"installed in {time.perf_counter() - t:.1f} s")
        return "pip"

    def _verify(self, tmp: Path, version: str, platform: str = "cpu") -> dict:
        env = _clean_env()
        env["JAX_PLATFORMS"] = platform  # the verification fails unless that platform's devices are there
        if platform in ACCELERATORS:
            env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # never hold the device's memory to check it
        # -I: no cwd, PYTHONPATH or user site; bytecode is written so later imports are faster.
        what = "verification (import jax)" if platform == "cpu" else f"verification (import jax, {platform} devices)"
        out = self._run([str(_venv_python(tmp)), "-I", "-c", _VERIFY], what, version,
                        timeout=VERIFY_TIMEOUT_S, cwd=tmp, env=env)
        line = next((ln for ln in reversed(out.splitlines()) if ln.startswith(_VERIFY_MARK)), None)
        if line is None:
            raise EnvironmentCreationError(
                f"could not create the environment for jax {version}: verification printed no result:\n"
                f"{_tail(out)}", hint="report this as a bug")
        info = json.loads(line[len(_VERIFY_MARK):])
        if not same_release(info["jax"], version):
            raise EnvironmentCreationError(
                f"could not create the environment for jax {version}: it imports jax {info['jax']}",
                hint="report this as a bug")
        return info


def _nearest(version: str, versions: list[str]) -> str:
    if not versions:
        return ""
    vs = sorted(versions, key=Version)
    t = Version(version)
    below = [v for v in vs if Version(v) < t]
    above = [v for v in vs if Version(v) > t]
    near = ([below[-1]] if below else []) + ([above[0]] if above else [])
    return f", e.g. {' or '.join(near)}" if near else ""


def _fix_paths(tmp: Path, final: Path) -> None:
    """Rewrite mentions of the build directory (venv activate scripts, pip's shebangs, pyvenv.cfg)."""
    old, new = str(tmp).encode(), str(final).encode()
    bindir = tmp / ("Scripts" if os.name == "nt" else "bin")
    with contextlib.suppress(OSError):
        for f in [tmp / "pyvenv.cfg", *bindir.iterdir()]:
            if f.is_symlink() or not f.is_file():
                continue
            with contextlib.suppress(OSError):
                if f.stat().st_size > 1 << 20:
                    continue
                data = f.read_bytes()
                if old in data:
                    f.write_bytes(data.replace(old, new))
