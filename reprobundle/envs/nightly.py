"""JAX nightlies: which index holds them, how a nightly is named, which days have wheels, what each was built from.

A nightly is named by its date (`nightly:2025-10-03`, `nightly:20251003`) or by its version (`0.8.0.dev20251003`,
PEP 440: the next release's number with a `.devYYYYMMDD` suffix, so it sorts after the release before it and
before the release it leads to). Its wheels come from the nightly index: `--index-url`, else
$REPROBUNDLE_NIGHTLY_INDEX, else the index JAX's installation docs name (DEFAULT_NIGHTLY_INDEX). Any PEP 503 / PEP
691 index works the same way (an internal mirror, a folder served over http). A day counts when the index has the
pure-Python jax wheel and a jaxlib wheel of the same version for this platform; the others are missing days.

What a build was made from: JAX's release scripts write the jax commit into the version module of both wheels
(`jax.version._git_hash`, `jaxlib.version._git_hash`; ci/build_artifacts.sh passes `jaxlib_git_hash=$(git rev-parse
HEAD)` for nightlies); releases on PyPI leave it empty, so a release is named by its tag (`jax-v0.7.2`). The XLA
commit is not in the wheels: it is the `XLA_COMMIT` that jax pinned at that commit (third_party/xla/revision.bzl,
before mid-2025 third_party/xla/workspace.bzl), read from $REPROBUNDLE_JAX_SOURCE (default: GitHub's raw files) when
it can be reached.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import re
import urllib.error
from dataclasses import dataclass
from typing import Iterable, Mapping

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from ..errors import EnvironmentCreationError
from ..store.http_client import get
from .package_index import cpython_minor, fetch_project_files, is_generic, platform_markers

__all__ = ["DEFAULT_NIGHTLY_INDEX", "Nightly", "nightly_index_url", "nightly_date", "list_nightlies", "find_nightly",
           "missing_days", "build_ref", "compare_urls", "xla_commit"]

log = logging.getLogger(__name__)

# JAX's installation docs ("Nightly installation"): pip install -U --pre jax jaxlib -i <this>
DEFAULT_NIGHTLY_INDEX = "https://us-python.pkg.dev/ml-oss-artifacts-published/jax/simple"
DEFAULT_JAX_SOURCE = "https://raw.githubusercontent.com/jax-ml/jax"
JAX_REPO = "https://github.com/jax-ml/jax"
XLA_REPO = "https://github.com/openxla/xla"

_DATE_SPEC = re.compile(r"^nightly[:=@](\d{4})-?(\d{2})-?(\d{2})$", re.IGNORECASE)
_XLA_COMMIT = re.compile(r"""^XLA_COMMIT\s*=\s*["']([0-9a-f]{7,40})["']""", re.MULTILINE)
_HEX = re.compile(r"^[0-9a-f]{7,40}$")


@dataclass(frozen=True)
class Nightly:
    """One day's nightly on an index: its date, the jax and jaxlib versions, the CPython 3 minors of its jaxlib."""

    date: dt.date
    jax_version: str
    jaxlib_version: str
    pythons: tuple[int, ...]


def nightly_index_url(explicit: str | None = None) -> str:
    """The index nightlies come from: `explicit` (--index-url), $REPROBUNDLE_NIGHTLY_INDEX, JAX's documented one."""
    url = (explicit or os.environ.get("REPROBUNDLE_NIGHTLY_INDEX", "") or DEFAULT_NIGHTLY_INDEX).strip()
    return url.rstrip("/")


def _dev_date(version: Version) -> dt.date | None:
    """The date of a nightly version (0.8.0.dev20251003); None for anything else."""
    if version.dev is None or version.pre is not None or version.post is not None:
        return None
    text = str(version.dev)
    if len(text) != 8:
        return None
    try:
        return dt.datetime.strptime(text, "%Y%m%d").date()
    except ValueError:
        return None


def nightly_date(request: str) -> dt.date | None:
    """The date a request names: `nightly:2025-10-03`, `nightly:20251003`, `0.8.0.dev20251003`; else None.
    A date that is not a calendar day is a UsageError-worthy request: EnvironmentCreationError."""
    text = re.sub(r"^jax\s*==\s*", "", request.strip())
    m = _DATE_SPEC.match(text)
    if m:
        try:
            return dt.date(int(m[1]), int(m[2]), int(m[3]))
        except ValueError:
            raise EnvironmentCreationError(f"{request!r} does not name a day",
                                           hint="write the date as nightly:YYYY-MM-DD") from None
    try:
        return _dev_date(Version(text))
    except InvalidVersion:
        return None


def _wheels(files: Iterable[Mapping], project: str) -> dict[dt.date, dict]:
    """{date: {"version", "pythons"}} of a project's nightly wheels installable here (jax: the pure wheel)."""
    out: dict[dt.date, dict] = {}
    for f in files:
        wheel = None if f.get("yanked") else _nightly_wheel(f["filename"], project)
        if wheel is None:
            continue
        day, version, minors = wheel
        entry = out.setdefault(day, {"version": str(version), "pythons": set()})
        if Version(entry["version"]) < version:  # two builds on one day (a rebuild): the newer
            entry.update(version=str(version), pythons=set())
        if str(version) == entry["version"]:
            entry["pythons"] |= minors
    return out


def _nightly_wheel(filename: str, project: str) -> tuple[dt.date, Version, set[int]] | None:
    """(day, version, CPython 3 minors it installs with here) of a nightly wheel of `project` that installs here: a
    pure-Python wheel (minors empty) or one for this platform; None for anything else."""
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    day = _dev_date(version) if name == canonicalize_name(project) else None
    if day is None:
        return None
    platforms = platform_markers()
    minors = {minor for tag in tags if (minor := cpython_minor(tag)) is not None and tag.platform in platforms}
    pure = any(is_generic(tag) and tag.platform == "any" for tag in tags)
    return (day, version, minors) if minors or pure else None


def list_nightlies(index: str) -> tuple[list[Nightly], dict[dt.date, str]]:
    """(the nightlies on `index` installable here, oldest first; {date: why it is incomplete} of the days that have
    some wheels but not both). Raises EnvironmentCreationError when the index cannot be read."""
    try:
        jax = _wheels(fetch_project_files(index, "jax"), "jax")
        jaxlib = _wheels(fetch_project_files(index, "jaxlib"), "jaxlib")
    except (OSError, ValueError, urllib.error.URLError) as e:
        raise EnvironmentCreationError(f"could not read the nightly index {index}: {type(e).__name__}: {e}",
                                       hint="check the network, or name another index with --index-url or "
                                            "REPROBUNDLE_NIGHTLY_INDEX") from None
    found, incomplete = [], {}
    for day in sorted(set(jax) | set(jaxlib)):
        if day not in jax:
            incomplete[day] = "a jaxlib wheel but no jax wheel"
        elif day not in jaxlib:
            incomplete[day] = "a jax wheel but no jaxlib wheel for this platform"
        else:
            found.append(Nightly(day, jax[day]["version"], jaxlib[day]["version"],
                                 tuple(sorted(jaxlib[day]["pythons"]))))
    return found, incomplete


def find_nightly(request: str, nightlies: list[Nightly], index: str) -> Nightly:
    """The nightly a request names, or EnvironmentCreationError naming the nearest days the index has."""
    day = nightly_date(request)
    assert day is not None, "find_nightly takes nightly requests only"
    for n in nightlies:
        if n.date == day:
            return n
    before = [n for n in nightlies if n.date < day]
    after = [n for n in nightlies if n.date > day]
    near = [n.date.isoformat() for n in (before[-1:] + after[:1])]
    raise EnvironmentCreationError(
        f"no nightly of {day.isoformat()} on {index}" + ("" if nightlies else " (it lists no nightlies here)"),
        hint=(f"nearest days with wheels: {' and '.join(near)}" if near else
              "name the nightly index with --index-url or REPROBUNDLE_NIGHTLY_INDEX"))


def missing_days(first: dt.date, last: dt.date, have: Iterable[dt.date]) -> list[dt.date]:
    """The calendar days strictly between `first` and `last` without a nightly in `have`."""
    present = set(have)
    days = []
    day = first + dt.timedelta(days=1)
    while day < last:
        if day not in present:
            days.append(day)
        day += dt.timedelta(days=1)
    return days


def build_ref(version: str | None, commit: str | None) -> str | None:
    """How GitHub names the source of a build: its commit, else a release's tag (jax-v0.7.2); None when unknown."""
    if commit and _HEX.match(commit):
        return commit
    try:
        v = Version(version or "")
    except InvalidVersion:
        return None
    return f"jax-v{v}" if v.dev is None and v.local is None and v.pre is None else None


def compare_urls(last_good: Mapping, first_bad: Mapping) -> dict[str, str | None]:
    """{"jax": github.com/jax-ml/jax/compare/A...B (the jaxlib builds' commits), "xla": github.com/openxla/xla/
    compare/A...B} for two builds' commit maps ({"jax", "jaxlib", "xla", "version"}); None where a side is
    unknown."""
    def ref(build: Mapping) -> str | None:
        return build_ref(build.get("version"), build.get("jaxlib") or build.get("jax"))

    a, b = ref(last_good), ref(first_bad)
    xa, xb = last_good.get("xla"), first_bad.get("xla")
    return {"jax": f"{JAX_REPO}/compare/{a}...{b}" if a and b and a != b else None,
            "xla": f"{XLA_REPO}/compare/{xa}...{xb}" if xa and xb and xa != xb else None}


def pinned_xla_commit(text: str) -> str | None:
    """The `XLA_COMMIT = "..."` a revision.bzl or workspace.bzl pins, or None."""
    m = _XLA_COMMIT.search(text)
    return m[1] if m else None


def xla_commit(jax_ref: str, source: str | None = None, timeout: float = 15.0) -> tuple[str | None, str]:
    """(the XLA commit jax pinned at `jax_ref` (a commit or tag), where it was read or why not). Reads
    third_party/xla/revision.bzl, then workspace.bzl, under `source` ($REPROBUNDLE_JAX_SOURCE, default GitHub's raw
    files: `{source}/{ref}/third_party/xla/revision.bzl`)."""
    base = (source or os.environ.get("REPROBUNDLE_JAX_SOURCE", "") or DEFAULT_JAX_SOURCE).rstrip("/")
    why = "not found"
    for name in ("revision.bzl", "workspace.bzl"):
        url = f"{base}/{jax_ref}/third_party/xla/{name}"
        try:
            text = get(url, timeout=timeout, limit=1 << 20, headers={"User-Agent": "reprobundle-nightly"}
                       ).body.decode("utf-8", "replace")
        except urllib.error.HTTPError as e:
            why = f"{url}: HTTP {e.code}"
            continue
        except (OSError, ValueError) as e:
            log.info("XLA commit of jax %s: %s is unreachable (%s)", jax_ref, url, e)
            return None, f"{url} is unreachable ({type(e).__name__})"
        pinned = pinned_xla_commit(text)
        if pinned:
            return pinned, url
        why = f"{url} names no XLA_COMMIT"
    return None, why
