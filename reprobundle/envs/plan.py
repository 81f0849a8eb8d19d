"""What an environment of a JAX release holds and for which Pythons: the release checked against the package index,
its build (CPU, a CUDA major the driver runs, ROCm, TPU), its requirements and installer options."""

from __future__ import annotations

import logging
import re
from typing import Callable

from packaging.version import Version

from ..errors import EnvironmentCreationError
from .package_index import PackageIndex, index_url, installable, jaxlib_for
from .platforms import CUDA_BUILDS
from .versions import same_release

log = logging.getLogger(__name__)

INSTALLED = "installed"  # pseudo-version: the host's own interpreter and its installed jax; no env is created
LATEST = "latest"  # pseudo-version: the newest jax on the index that some interpreter found here can run

# Installed beside jax/jaxlib in every environment. flatbuffers: jax.export.deserialize imports it, and jax
# does not depend on it.
EXTRA_PACKAGES = ("msgpack", "flatbuffers")

# jaxlib releases before 0.4.26 were built against NumPy 1.x: with NumPy 2 they fail at import
# (np.trapz, np.issubsctype removed; "_ARRAY_API not found"). Checked: 0.4.13, 0.4.20, 0.4.23, 0.4.25 fail
# with numpy 2.4, 0.4.26, 0.4.29 and 0.4.30 work.
NUMPY2_FIRST_JAX = Version("0.4.26")

# ml_dtypes 0.7 adds its ufunc loops to NumPy, and NumPy before 2.5 adds each after a linear scan of those the ufunc
# has: `import ml_dtypes`, and so `import jax`, then costs 0.55-0.7 s of CPU in every worker that starts (half of
# `import jax`), against 0.01-0.02 s with ml_dtypes 0.6 or with NumPy 2.5 (measured with numpy 2.3 and 2.4 on Python
# 3.11 and 3.12). Every JAX release takes ml_dtypes 0.6, so an environment whose NumPy is older than 2.5 keeps to it:
# one on a Python before 3.12 (NumPy 2.5 needs 3.12) or with numpy<2. No timed call and no output depends on it.
QUICK_ML_DTYPES = "ml_dtypes<0.7"
FIRST_QUICK_NUMPY = Version("2.5")
FIRST_SLOW_ML_DTYPES = Version("0.7")
FIRST_NUMPY_2_5_PYTHON = (3, 12)

VERSION_RE = re.compile(r"^\d+(\.\d+)*$")  # what ensure() accepts: a plain release ("0.8.0", "0.12.0.1")
# The first jax release whose jax[tpu] takes libtpu from PyPI; older ones pin a libtpu-nightly that only Google's
# find-links page has.
TPU_PYPI_FIRST_JAX = Version("0.5.1")
LIBTPU_FIND_LINKS = "https://storage.googleapis.com/jax-releases/libtpu_releases.html"
# Fallback only (the index is unreadable): the first release with jax[cuda13] wheels.
CUDA13_FIRST_JAX = Version("0.7.2")


def plugin_project(build: str) -> str | None:
    """The index project whose releases say whether a jaxlib has wheels for `build` (None: the CPU build)."""
    return f"jax-{build}-plugin" if build.startswith("cuda") else None


def requirements(version: str, jaxlib: str | None, build: str = "cpu",
                 python: tuple[int, int] | None = None) -> tuple[list[str], list[str]]:
    """(requirements, installer options) of the environment of jax `version` with `jaxlib` (None: left to the
    installer) for `build` on Python `python` (major, minor; None: not known yet): jax with the release's own
    accelerator extra, numpy (<2 before NUMPY2_FIRST_JAX), ml_dtypes before 0.7 where NumPy before 2.5 will be
    installed (QUICK_ML_DTYPES), EXTRA_PACKAGES."""
    jax = "jax" if build == "cpu" else f"jax[{build}]"
    reqs = [f"{jax}=={version}", f"jaxlib=={jaxlib}" if jaxlib else f"jaxlib<={version}"]
    old_numpy = Version(version) < NUMPY2_FIRST_JAX
    reqs.append("numpy<2" if old_numpy else "numpy")
    if old_numpy or (python is not None and python < FIRST_NUMPY_2_5_PYTHON):
        reqs.append(QUICK_ML_DTYPES)
    reqs += list(EXTRA_PACKAGES)
    options = []
    if build == "tpu" and Version(version) < TPU_PYPI_FIRST_JAX:
        options = ["--find-links", LIBTPU_FIND_LINKS]
    return reqs, options


def slow_ml_dtypes(packages: dict | None) -> bool:
    """Whether an environment's packages (name -> version, as its metadata records them) import ml_dtypes slowly:
    ml_dtypes 0.7 or later over NumPy before 2.5 (QUICK_ML_DTYPES)."""
    try:
        return packages is not None and Version(str(packages["ml_dtypes"])) >= FIRST_SLOW_ML_DTYPES and \
            Version(str(packages["numpy"])) < FIRST_QUICK_NUMPY
    except (KeyError, ValueError):
        return False


def choose_cuda_build(available: list[str], driver_cuda: tuple[int, int] | None) -> str | None:
    """The newest CUDA build of `available` ("cuda13", "cuda12") that the driver supports (its CUDA version
    `driver_cuda`, None when unknown: then the newest); None when none fits."""
    for build in CUDA_BUILDS:
        if build in available and (driver_cuda is None or driver_cuda[0] >= int(build[4:])):
            return build
    return None


def normalize_request(version: str) -> str:
    v = version.strip()
    v = re.sub(r"^jax\s*==\s*", "", v)
    if v[:1] in ("v", "V") and VERSION_RE.match(v[1:]):
        v = v[1:]
    return v


def checked_release(index: dict, version: str) -> str:
    """The index's spelling of release `version` ("0.8" -> "0.8.0"); an error naming the nearest releases when it is
    not one, or cannot be installed (yanked, no jaxlib)."""
    canonical = next((v for v in index["jax"] if same_release(v, version)), None)
    if canonical is None:
        releases = installable(index)
        near = nearest(version, releases)
        newest = max(releases, key=Version) if releases else None
        raise EnvironmentCreationError(
            f"jax {version} is not a release on {index['url']}",
            hint=f"pick a released version{near}" + (f" (newest: {newest})" if newest else ""))
    if jaxlib_for(index, canonical) is None:
        entry = index["jax"][canonical]
        what = "it is yanked" if entry["yanked"] else f"no matching jaxlib is on {index['url']}"
        raise EnvironmentCreationError(f"jax {canonical} cannot be installed: {what}",
                                       hint=f"pick another version{nearest(canonical, installable(index))}")
    return canonical


def build_for(index: PackageIndex, cuda_driver: Callable[[], tuple[int, int] | None], version: str,
              jaxlib: str | None, platform: str, build: str | None) -> str:
    """The build of a new environment of jax `version` for `platform`: `build` if given (checked against the
    index), else for CUDA the newest of the release's CUDA builds that the NVIDIA driver supports."""
    if platform != "cuda":
        return build or platform
    release = jaxlib or version
    available, unknown = _cuda_builds(index, version, release)
    if build is not None:
        if build not in available and not unknown:
            raise EnvironmentCreationError(
                f"jax {version} has no {build} wheels on {index_url()} (it has: {', '.join(available) or 'none'})",
                hint="pick another CUDA build with --platform, or another release")
        return build
    return _cuda_build_for_driver(version, release, available, cuda_driver())


def _cuda_builds(index: PackageIndex, version: str, release: str) -> tuple[list[str], bool]:
    """(the CUDA builds jax `version` (its jaxlib: `release`) has plugin wheels for, whether the index was
    unreadable for some of them: then the built-in rule says)."""
    available = []
    unknown = False
    for candidate in CUDA_BUILDS:
        listing = index.project(plugin_project(candidate) or "", want=release)
        if listing is None:  # the index is unreadable: the built-in rule
            unknown = True
            if candidate == "cuda12" or Version(version) >= CUDA13_FIRST_JAX:
                available.append(candidate)
        elif release in listing:
            available.append(candidate)
    return available, unknown


def _cuda_build_for_driver(version: str, release: str, available: list[str],
                           driver: tuple[int, int] | None) -> str:
    """The newest of `available` that the NVIDIA driver (its CUDA version, None: unknown) runs, or why none."""
    chosen = choose_cuda_build(available, driver)
    if chosen is None:
        if not available:
            raise EnvironmentCreationError(
                f"jax {version} has no CUDA wheels on {index_url()} (no jax-cuda12-plugin or jax-cuda13-plugin "
                f"{release})", hint="pick a newer release: its CUDA build comes from those plugin packages")
        assert driver is not None, "without the driver's CUDA version the newest build is chosen"
        raise EnvironmentCreationError(
            f"jax {version} has CUDA wheels for {', '.join(available)}, and this NVIDIA driver supports CUDA "
            f"{driver[0]}.{driver[1]} only",
            hint="update the NVIDIA driver, or pick another release")
    if driver is None:
        log.info("jax %s: the NVIDIA driver's CUDA version is unknown; building %s", version, chosen)
    else:
        log.info("jax %s: %s (the newest CUDA build of %s that the driver's CUDA %d.%d runs)", version, chosen,
                 ", ".join(available), *driver)
    return chosen


def build_pythons(index: PackageIndex, build: str, release: str, minors: list[int]) -> list[int]:
    """`minors` narrowed to those the build's plugin has wheels for (when the index says)."""
    project = plugin_project(build)
    listing = index.project(project, want=release) if project else None
    pythons = (listing or {}).get(release, {}).get("pythons")
    if pythons is None:
        return minors
    narrowed = [m for m in minors if m in pythons]
    if narrowed != minors:
        log.info("jax %s (%s): %s has wheels for CPython %s", release, build, project,
                 ", ".join(f"3.{m}" for m in pythons))
    return narrowed


def nearest(version: str, versions: list[str]) -> str:
    if not versions:
        return ""
    vs = sorted(versions, key=Version)
    t = Version(version)
    below = [v for v in vs if Version(v) < t]
    above = [v for v in vs if Version(v) > t]
    near = ([below[-1]] if below else []) + ([above[0]] if above else [])
    return f", e.g. {' or '.join(near)}" if near else ""
