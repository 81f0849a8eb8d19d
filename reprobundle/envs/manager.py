"""Isolated, cached virtual environments, one per JAX release, for replaying a bundle on that release.

Layout of the environment root (default: $REPROBUNDLE_ENV_DIR, else <user cache>/reprobundle/envs)::

    jax-0.8.0-py3.12/            a finished venv; reprobundle-env.json inside marks it complete (CPU build)
    jax-0.8.0-cuda13-py3.12/     the same release built for another platform: cuda12, cuda13, rocm, tpu
    .tmp-jax-0.8.0-py3.12-<rnd>/ a venv being built (renamed into place when verified)
    .trash-<rnd>/                an environment being removed
    .locks/jax-0.8.lock          file lock (filelock): one builder per JAX release (and build) at a time, across processes
    .index-cache.json            what the package index said about jax and jaxlib (see package_index.py)

Each environment holds `jax==V`, the jaxlib it needs, numpy (numpy<2 for releases built before NumPy 2),
msgpack and flatbuffers (which `jax.export` deserialization imports but jax does not depend on), plus
their dependencies - nothing from reprobundle: the worker is run by path.

Choosing a Python: a jax release is only installable on the CPython versions its jaxlib has wheels for
(intersected with jax's requires-python). Both are read from the package index (package_index.py: simple API,
cached; a built-in table is the fallback when the index cannot be read); interpreters.py finds the candidate
interpreters and picks the one whose minor version is closest to the host's.

Environments are built with uv (`uv.find_uv_bin()`, else `uv` on PATH; uv is a dependency, so a normal install
always has it).

The modules: env_plan.py (the release checked against the index, its build, requirements), env_folders.py (names,
metadata, locks, removal), env_build.py (building and verifying one environment), env_installed.py (the host's
own jax); this module chooses among them.

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
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable

from packaging.version import Version

from ..errors import EnvironmentCreationError, NoSuitablePythonError
from .build import EnvironmentBuilder, clean_env, tail
from .env_config import EnvConfig
from .env_folders import (
    ENV_DIR_RE,
    METADATA_FILE,
    JaxEnvironment,
    default_root,
    discard,
    dot_dirs,
    env_dir_name,
    file_lock,
    finished_envs,
    lock_path,
    read_env,
    rmtree,
)
from .installed import installed
from .interpreters import InterpreterFinder, requested_python
from .jax_commit import kept_environments, remove_kept
from .local_jax import is_path_request, local_environment
from .nightly import Nightly, find_nightly, list_nightlies, nightly_date, nightly_index_url
from .package_index import (
    CACHE_FILE,
    INDEX_CACHE_TTL_S,
    PackageIndex,
    index_url,
    installable,
    jaxlib_for,
    not_installable,
)
from .plan import (
    INSTALLED,
    LATEST,
    VERSION_RE,
    build_for,
    build_pythons,
    checked_release,
    choose_cuda_build,
    normalize_request,
    requirements,
    slow_ml_dtypes,
)
from .platforms import PLATFORMS, Devices, build_platform, detect_devices
from .versions import python_release, same_release, version_key

__all__ = ["INSTALLED", "LATEST", "JaxEnvironment", "EnvironmentManager", "default_root", "choose_cuda_build",
           "env_dir_name", "requirements"]

log = logging.getLogger(__name__)
LATEST_TRIES = 3  # releases "latest" tries on an accelerator before it gives up, newest first


# ------------------------------------------------------------------------------------------------ manager


class EnvironmentManager:
    """Creates, finds, lists and removes the per-JAX-version environments under one root directory."""

    def __init__(self, config: EnvConfig | str | os.PathLike | None = None, *, uv: str | None = None) -> None:
        """`config` (envs/env_config.py): the root folder, the interpreter --python names, the package index and the
        nightly index; a path is `EnvConfig(root=path)`, None the defaults. `uv`: the uv binary (default: the `uv`
        package's, else `uv` on PATH)."""
        if not isinstance(config, EnvConfig):
            config = EnvConfig.of(config)
        self.config = config
        self.root = Path(config.root).expanduser() if config.root else default_root()
        self.python = config.python
        self._uv = uv
        self._uv_resolved = uv is not None
        self._interpreters = InterpreterFinder(self.python, self._uv_bin)
        self.index_url = config.index_url.rstrip("/") if config.index_url else None
        self.nightly_index = config.nightly_index
        self._index = PackageIndex(self.root / CACHE_FILE, url=self.index_url)
        self._nightlies: dict[str, tuple[builtins.list[Nightly], dict]] = {}  # index -> list_nightlies(index)
        self._found_devices: Devices | None = None  # detect_devices(), when a choice needs it

    # ------------------------------------------------------------------------------ public API

    def ensure(self, version: str, *, platform: str = "cpu", build: str | None = None,
               progress: Callable[[str], None] | None = None) -> JaxEnvironment:
        """The environment for jax `version` ("0.8.0", "installed", "latest", a nightly: "nightly:2025-10-03" or
        "0.8.0.dev20251003", or the path of an interpreter or environment, used as it is: local_env.py) on `platform`
        ("cpu", "cuda", "rocm", "tpu"), created if not cached. `build` ("cuda12", "cuda13") fixes which CUDA wheels; by default a
        cached environment of the platform is used, else the newest build the release has and the driver runs.
        "installed" is the host's interpreter whatever the platform (its jax runs there or the worker says not)."""
        say = progress or (lambda _line: None)
        requested = normalize_request(version)
        if requested == INSTALLED:
            return installed(self.python, self._interpreters)
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
            latest = self._latest(platform, build)
            if isinstance(latest, JaxEnvironment):
                return latest
            requested = latest
        if not VERSION_RE.match(requested):
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
        requested = normalize_request(version)
        if platform == "cpu":
            build = "cpu"
        if requested == LATEST:
            versions = self.available_versions()
            requested = versions[-1] if platform == "cpu" else \
                self._newest_resolving(versions, versions[-1], platform, build)
        index = self._index.load(want=requested)
        if index is None:
            raise EnvironmentCreationError(f"the package index is unreachable: {self._index.error}",
                                           hint=f"check the index ({self.index_shown}) is reachable")
        canonical = next((v for v in index["jax"] if same_release(v, requested)), None)
        if canonical is None or jaxlib_for(index, canonical) is None:
            raise EnvironmentCreationError(f"jax {requested} is not an installable release on {index['url']}")
        minors, _rp, jaxlib, _ = self._index.supported(canonical)
        build = self._build_for(canonical, jaxlib, platform, build)
        minors = build_pythons(self._index, build, jaxlib or canonical, minors)
        host = sys.version_info[1]
        best = min(minors, key=lambda m: (abs(m - host), -m)) if minors else host
        reqs, options = requirements(canonical, jaxlib, build, (3, best))
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
                               timeout=300, env=clean_env(), cwd=self.root if self.root.is_dir() else None)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise EnvironmentCreationError(f"{what} could not run: {e}") from None
        if r.returncode != 0:
            raise EnvironmentCreationError(f"jax {plan['version']} ({plan['build']}) does not resolve: {what} "
                                           f"failed:\n{tail(r.stderr or r.stdout)}")
        pins = {}
        for line in r.stdout.splitlines():
            name, sep, ver = line.strip().partition("==")
            if sep and not name.startswith("#"):
                pins[name.strip().lower()] = ver.strip()
        return pins

    def list(self) -> builtins.list[JaxEnvironment]:
        """The finished environments under the root, by jax version, build, then Python version."""
        return sorted(finished_envs(self.root),
                      key=lambda e: (version_key(e.jax_version), e.build, python_release(e.python_version)))

    def commit_environments(self) -> builtins.list[JaxEnvironment]:
        """The kept environments of JAX at a commit over a release's (`envs --add-commit`: envs/jax_commit.py)."""
        return kept_environments(self.root)

    def remove(self, version: str | None = None, platform: str | None = None) -> builtins.list[JaxEnvironment]:
        """Remove the environments of jax `version` (all of them when None), of every build or of those of
        `platform` ("cuda", or a build such as "cuda12"); returns what was removed. A kept commit environment goes
        when `version` is its version or path, and with the release environment it runs over."""
        targets = self.list() if version is None else self._environments_of(version)
        if platform:
            targets = [e for e in targets if platform in (e.platform, e.build)]
        removed = self._remove_commits(version, platform, targets)
        for env in targets:
            assert env.path is not None
            with file_lock(lock_path(self.root, env.jax_version, env.build)):
                if not env.path.exists():
                    continue
                discard(self.root, env.path)
                removed.append(env)
        if version is None:  # leftovers of crashed removals
            for d in dot_dirs(self.root, ".trash-"):
                rmtree(d)
        return removed

    def _remove_commits(self, version: str | None, platform: str | None,
                        releases: builtins.list[JaxEnvironment]) -> builtins.list[JaxEnvironment]:
        """The kept commit environments `remove` takes: those `version` names (its version or path), those over a
        release environment being removed; every one (and those whose release is gone) when `version` is None."""
        kept = self.commit_environments()
        if platform:
            kept = [e for e in kept if platform in (e.platform, e.build)]
        under = {(e.jax_version, e.build, e.python_version) for e in releases}
        asked = os.path.realpath(os.path.expanduser(version.strip())) if version and is_path_request(version) else None
        gone = [e for e in kept if version is None or version.strip() == e.jax_version
                or asked == os.path.realpath(str(e.path)) or (e.over, e.build, e.python_version) in under]
        for env in gone:
            remove_kept(self.root, env)
        if version is None and not platform:
            remove_kept(self.root)
        return gone

    def _environments_of(self, version: str) -> builtins.list[JaxEnvironment]:
        """The finished environments a request names ("0.8.0", "latest", a nightly); none for "installed"."""
        requested = normalize_request(version)
        envs = self.list()
        if requested == INSTALLED:
            return []
        if requested == LATEST:
            requested = envs[-1].jax_version if envs else ""
        day = nightly_date(requested)
        if day is not None:
            return [e for e in envs if e.nightly == day.isoformat()]
        if not VERSION_RE.match(requested):
            return []
        return [e for e in envs if same_release(e.jax_version, requested)]

    @property
    def index_shown(self) -> str:
        """The index releases come from, as an error names it: --index-url, else the settings' (index_url())."""
        return self.index_url or index_url()

    def available_versions(self) -> builtins.list[str]:
        """Installable jax releases on the index, ascending (cached for INDEX_CACHE_TTL_S).

        A release counts when it is not yanked and a jaxlib for it is on the index: its own version, or,
        for the jax-only patch releases (0.4.37, 0.5.2), the previous release's. So 0.4.32 (yanked),
        0.4.15-0.4.17 (their jaxlib is gone) and everything before 0.4.13 are left out.
        """
        index = self._index.load(max_age=INDEX_CACHE_TTL_S)
        if index is None:
            raise EnvironmentCreationError(
                f"could not read the list of jax releases from {self.index_shown}: {self._index.error}",
                hint="check the network or the index settings (REPROBUNDLE_INDEX_URL, UV_DEFAULT_INDEX / UV_INDEX_URL)")
        return sorted(installable(index), key=Version)

    def left_out_versions(self) -> dict[str, str]:
        """The jax releases the index lists that available_versions() leaves out, with why ("yanked", "no jaxlib
        for it on the index"), ascending; empty when the index cannot be read (available_versions says so)."""
        index = self._index.load(max_age=INDEX_CACHE_TTL_S)
        return not_installable(index) if index is not None else {}

    def _find_existing(self, version: str, platform: str = "cpu", build: str | None = None) -> JaxEnvironment | None:
        """A usable finished environment for `version` on `platform` (of `build`, when given; else the build the
        driver runs first), and for --python, if given; without the network."""
        matches = self._current(version, self._finished(version, platform, build))
        if not matches:
            return None
        if platform == "cuda" and build is None and len({e.build for e in matches}) > 1:
            fits = choose_cuda_build(sorted({e.build for e in matches}), self._devices().cuda_driver())
            matches = [e for e in matches if e.build == fits] or matches
        if self.python:
            return self._built_with_user_python(version, matches)
        return self._closest_to_host(version, matches)

    def _current(self, version: str, matches: builtins.list[JaxEnvironment]) -> builtins.list[JaxEnvironment]:
        """`matches` but those an older reprobundle made with ml_dtypes that import slowly over their NumPy
        (plan.QUICK_ML_DTYPES): none where only such remain and the index can be read (the caller makes one again),
        and those where it cannot (they still run)."""
        quick = [e for e in matches if e.schema >= 2 or not slow_ml_dtypes(e.packages)]
        if matches and not quick and self._index.load(max_age=INDEX_CACHE_TTL_S) is not None:
            log.info("jax %s: making its environment again: its ml_dtypes over its NumPy costs every worker ~0.6 s "
                     "to import (plan.QUICK_ML_DTYPES)", version)
            return []
        return quick or matches

    def _finished(self, version: str, platform: str, build: str | None) -> builtins.list[JaxEnvironment]:
        """The usable finished environments of `version` on `platform` (of `build`, when given)."""
        want = Version(version)
        matches = []
        try:
            entries = list(self.root.iterdir())
        except OSError:
            return []
        for d in entries:
            m = ENV_DIR_RE.match(d.name)
            if not m or Version(m.group(1)) != want:
                continue
            found = m.group(2) or "cpu"
            if build_platform(found) != platform or (build is not None and found != build):
                continue
            env = read_env(d)
            if env is None or not env.python_executable.exists():  # unfinished, or its base Python is gone
                continue
            matches.append(env)
        return matches

    def _built_with_user_python(self, version: str, matches: builtins.list[JaxEnvironment]) -> JaxEnvironment | None:
        fit = [e for e in matches if self._python_matches(e)]
        if not fit:
            log.info("jax %s: %d cached environment(s), none built with --python %s", version, len(matches),
                     self.python)
            return None
        log.info("jax %s: using the cached environment %s (Python %s, as --python %s asks)", version,
                 fit[0].path, fit[0].python_version, self.python)
        return fit[0]

    def _closest_to_host(self, version: str, matches: builtins.list[JaxEnvironment]) -> JaxEnvironment:
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

    def _latest(self, platform: str, build: str | None) -> JaxEnvironment | str:
        """"latest": the newest release's environment where one is made, else the release to make: the newest an
        interpreter here runs (and, on an accelerator, whose packages resolve)."""
        versions = self.available_versions()
        if not versions:
            raise EnvironmentCreationError("no jax release found on the package index",
                                           hint=f"check the index ({self.index_shown}) is reachable")
        hit = self._find_existing(versions[-1], platform, build)
        if hit is not None:
            return hit
        newest = self._resolve_latest(versions)
        return newest if platform == "cpu" else self._newest_resolving(versions, newest, platform, build)

    def _newest_resolving(self, versions: builtins.list[str], newest: str, platform: str,
                          build: str | None) -> str:
        """"latest" on an accelerator: the newest release up to `newest` whose requirements resolve on the index
        (metadata only). A release comes out before its accelerator's packages at times (jax 0.12.1 pins a
        libtpu the index did not hold yet): the one before it is the newest a user can install; up to
        LATEST_TRIES are tried, newest first, each one skipped said in the log."""
        tried: builtins.list[str] = []
        older = [v for v in versions if version_key(v) <= version_key(newest)]
        for v in reversed(older[-LATEST_TRIES:]):
            try:
                self.resolve(self.plan(v, platform=platform, build=build))
                if tried:
                    log.info("latest on %s: jax %s (%s did not resolve there)", platform, v, ", ".join(tried))
                return v
            except EnvironmentCreationError as e:
                log.info("latest on %s: jax %s skipped: %s", platform, v, e.message.splitlines()[0])
                tried.append(v)
        raise EnvironmentCreationError(
            f"none of the newest jax releases ({', '.join(tried)}) resolves for {build or platform} on the index",
            hint="give a release such as \"0.8.0\" (its packages must be on the index)")

    def _devices(self) -> Devices:
        if self._found_devices is None:
            self._found_devices = detect_devices()
        return self._found_devices

    def _create(self, version: str, platform: str, build: str | None, say: Callable[[str], None]) -> JaxEnvironment:
        index = self._index.load(want=version)
        if index is not None:
            version = checked_release(index, version)
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
            minors = build_pythons(self._index, build, jaxlib or version, minors)
            if not minors:
                raise EnvironmentCreationError(f"jax {version} has no {build} wheels for a CPython that its jaxlib "
                                               "has wheels for", hint="pick another release")
        interp = self._interpreters.choose(version, minors, requires_python, jaxlib)
        what = f"jax {version}" + ("" if build == "cpu" else f" ({build})")
        waiting = f"waiting for another process creating the environment for {what} ..."
        lock = lock_path(self.root, version, build)

        def on_wait() -> None:
            log.info("%s: %s is held by another process; waiting", what, lock)
            say(waiting)

        with contextlib.ExitStack() as stack:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                stack.enter_context(file_lock(lock, on_wait))
            except OSError as e:
                raise EnvironmentCreationError(f"cannot write to the environment directory {self.root}: {e}",
                                               hint="set REPROBUNDLE_ENV_DIR to a writable directory") from None
            hit = self._find_existing(version, platform, build)  # built by someone else while we waited
            if hit is not None:
                return hit
            log.info("%s: no usable environment in %s; building one", what, self.root)
            return self._builder().build(version, interp, jaxlib, say, build=build, index=self.index_url)

    # ------------------------------------------------------------------------------------ nightlies

    def nightlies(self) -> tuple[builtins.list[Nightly], dict]:
        """(the nightlies on the nightly index installable here, oldest first; {date: why incomplete}), read once."""
        index = nightly_index_url(self.nightly_index)
        if index not in self._nightlies:
            log.info("nightly index: reading the jax and jaxlib listings of %s", index)
            self._nightlies[index] = list_nightlies(index)
        return self._nightlies[index]

    def _find_nightly(self, day: str) -> JaxEnvironment | None:
        """A finished CPU environment of the nightly of `day` (ISO), without the network."""
        stamp = day.replace("-", "")
        versions = {m.group(1) for d in dot_dirs(self.root, "jax-") if (m := ENV_DIR_RE.match(d.name))
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
        index = nightly_index_url(self.nightly_index)
        found = find_nightly(requested, self.nightlies()[0], index)
        interp = self._interpreters.choose(found.jax_version, list(found.pythons), None, found.jaxlib_version)
        with contextlib.ExitStack() as stack:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                stack.enter_context(file_lock(lock_path(self.root, found.jax_version), lambda: say(
                    f"waiting for another process creating the environment for jax {found.jax_version} ...")))
            except OSError as e:
                raise EnvironmentCreationError(f"cannot write to the environment directory {self.root}: {e}",
                                               hint="set REPROBUNDLE_ENV_DIR to a writable directory") from None
            hit = self._find_nightly(day.isoformat())
            if hit is not None:
                return hit
            say(f"nightly of {day.isoformat()}: jax {found.jax_version}, jaxlib {found.jaxlib_version} from {index}")
            return self._builder().build(found.jax_version, interp, found.jaxlib_version, say, index=index,
                                         nightly=day.isoformat())

    def _builder(self) -> EnvironmentBuilder:
        uv = self._uv_bin()
        if not uv:
            raise EnvironmentCreationError("no uv found (the uv package's binary or uv on PATH) to build environments "
                                           "with", hint="pip install uv (a dependency of reprobundle)")
        return EnvironmentBuilder(self.root, uv, self._index.error)

    def _build_for(self, version: str, jaxlib: str | None, platform: str, build: str | None) -> str:
        return build_for(self._index, lambda: self._devices().cuda_driver(), version, jaxlib, platform, build)



def releases_of(config: EnvConfig) -> Callable[[], list[str]]:
    """The releases a --jax request is checked against before anything runs: the default index's, as always (an
    --index-url may be a nightly index)."""
    from dataclasses import replace

    return lambda: EnvironmentManager(replace(config, index_url=None, nightly_index=None)).available_versions()
