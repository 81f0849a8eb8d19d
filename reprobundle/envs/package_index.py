"""The package index (PyPI's simple API, or the index uv is set to use) and what it says about jax and jaxlib.

From the two project listings it keeps what choosing a version and an interpreter needs: each jax release (yanked
or not, its Requires-Python) and, for each jaxlib release, the CPython 3 minors it has wheels for on this platform.
That summary is cached in memory and in a file beside the environments (`.index-cache.json`). When the index cannot
be read, a built-in table of the CPython minors each jax range supports stands in.

File names are read with `packaging.utils` (wheel and sdist names, PEP 427 / PEP 625), versions and Requires-Python
with `packaging` too (see versions.py), and platform tags with `packaging.tags`. Pages come through
store/http_client.py (retries, timeouts).

The PEP 503 HTML page is read with the standard library's HTMLParser (`_SimpleHTML`, 25 lines): packaging has no
index client, and pip's or uv's are not importable APIs; PEP 691 JSON is asked for first.
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import platform
import secrets
import time
import urllib.error
from html.parser import HTMLParser
from pathlib import Path

import packaging.tags
from packaging.tags import Tag
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import InvalidVersion, Version

from ..store.http_client import get
from .versions import is_final_release, parse_version, same_release, version_key

__all__ = ["DEFAULT_INDEX", "INDEX_CACHE_TTL_S", "INDEX_RECHECK_S", "FALLBACK_PYTHONS", "PackageIndex", "index_url",
           "find_links", "use_index",
           "fetch_project_files", "summarize_index", "jax_file_version", "jaxlib_wheel_pythons", "platform_markers",
           "cpython_minor", "is_generic", "jaxlib_for", "installable", "not_installable", "fallback_pythons", "project_wheel",
           "summarize_project", "python_to_name"]

log = logging.getLogger(__name__)

DEFAULT_INDEX = "https://pypi.org/simple"
INDEX_CACHE_TTL_S = 3600.0  # how long available_versions() trusts its cached copy of the index
INDEX_RECHECK_S = 60.0  # a version missing from a cache older than this triggers a refetch
CACHE_FILE = ".index-cache.json"

# Fallback only, used when the index cannot be read: CPython minors that jaxlib ships Linux/macOS wheels for,
# by first jax release of each range (read off PyPI's jaxlib wheel tags, 2026). Newest first.
# jax releases older than 0.4.13 have no jaxlib left on PyPI at all.
FALLBACK_PYTHONS: list[tuple[str, tuple[int, int]]] = [
    ("0.11.0", (12, 15)),
    ("0.7.0", (11, 14)),
    ("0.4.34", (10, 13)),
    ("0.4.31", (10, 12)),
    ("0.4.14", (9, 12)),
    ("0.4.13", (8, 11)),
]

_PURE = Tag("py3", "none", "any")


def index_url() -> str:
    """The index releases come from unless a command names one: $REPROBUNDLE_INDEX_URL, else uv's own settings
    (UV_DEFAULT_INDEX, UV_INDEX_URL), else PyPI. A `file://` simple index (a folder) is one too."""
    for var in ("REPROBUNDLE_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        url = os.environ.get(var, "").strip()
        if url:
            return url.split()[0].rstrip("/")
    return DEFAULT_INDEX


def find_links() -> list[str]:
    """Folders of wheels installs may also take from: $REPROBUNDLE_FIND_LINKS, else uv's UV_FIND_LINKS (several
    separated by the path separator or spaces)."""
    for var in ("REPROBUNDLE_FIND_LINKS", "UV_FIND_LINKS"):
        value = os.environ.get(var, "").strip()
        if value:
            return [part for part in value.replace(os.pathsep, " ").split() if part]
    return []


def use_index(index: str | None = None, links: list[str] | None = None) -> None:
    """Releases from `index` (a URL, or a folder or `file://` URL of a simple index) and `links` (folders of
    wheels) for this process and the processes it starts (uv, the probes): what --index-url and --find-links set,
    as REPROBUNDLE_INDEX_URL and REPROBUNDLE_FIND_LINKS would. A folder is made a `file://` URL; one that is not
    there is a UsageError."""
    from ..errors import UsageError

    for folder in [*([index] if index and _local_folder(index) is not None else []), *(links or [])]:
        path = _local_folder(folder)
        if path is None or not path.is_dir():
            raise UsageError(f"no such folder: {folder}", hint="give a folder of wheels or a simple index's folder, "
                                                              "or the URL of an index")
    if index:
        local = _local_folder(index)
        os.environ["REPROBUNDLE_INDEX_URL"] = local.resolve().as_uri() if local else index.rstrip("/")
    if links:
        os.environ["REPROBUNDLE_FIND_LINKS"] = os.pathsep.join(str(Path(link).resolve()) for link in links)


def _local_folder(url: str) -> Path | None:
    """The folder a `file://` URL or a plain path names; None for a remote URL."""
    if url.startswith("file:"):
        from urllib.parse import urlparse
        from urllib.request import url2pathname

        return Path(url2pathname(urlparse(url).path))
    return None if "://" in url else Path(url)


# ------------------------------------------------------------------------------------------------ the client


class _SimpleHTML(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.files: list[dict] = []
        self._attrs: dict | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self._attrs = dict(attrs)
            self._text = []

    def handle_data(self, data):
        if self._attrs is not None:
            self._text.append(data)

    def handle_endtag(self, tag):
        if tag == "a" and self._attrs is not None:
            a = self._attrs
            name = "".join(self._text).strip() or a.get("href", "").split("#")[0].rsplit("/", 1)[-1]
            self.files.append({"filename": name, "requires-python": a.get("data-requires-python"),
                               "yanked": "data-yanked" in a})
            self._attrs = None


def fetch_project_files(index: str, project: str, timeout: float = 30.0) -> list[dict]:
    """A project's files on a simple index (JSON, PEP 691, else HTML, PEP 503; a `file://` one read from its folder),
    with those of the find-links folders (find_links()): filename, requires-python, yanked."""
    extra = [file for folder in find_links() for file in _folder_files(Path(folder), project)]
    folder = _local_folder(index)
    if folder is not None:
        return _local_index_files(folder, project) + extra
    return _remote_index_files(index, project, timeout) + extra


def _local_index_files(root: Path, project: str) -> list[dict]:
    """A project's files on a simple index laid out in a folder: its page (`NAME/index.html`) where there is one,
    else the files in `NAME/`; a flat folder of wheels lists the project's by name. FileNotFoundError when the
    folder is not there (said as the index being unreachable)."""
    if not root.is_dir():
        raise FileNotFoundError(f"no such index folder: {root}")
    page = root / canonicalize_name(project) / "index.html"
    if page.is_file():
        parser = _SimpleHTML()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        return parser.files
    return _folder_files(root / canonicalize_name(project), project) or _folder_files(root, project)


def _folder_files(folder: Path, project: str) -> list[dict]:
    """The wheels and sdists of `project` in a folder, by their names (a find-links folder)."""
    if not folder.is_dir():
        return []
    prefix = canonicalize_name(project).replace("-", "_")
    return [{"filename": path.name, "requires-python": None, "yanked": False} for path in sorted(folder.iterdir())
            if path.name.endswith((".whl", ".tar.gz", ".zip"))
            and canonicalize_name(path.name.split("-")[0]).replace("-", "_") == prefix]


def _remote_index_files(index: str, project: str, timeout: float) -> list[dict]:
    response = get(f"{index}/{project}/", timeout=timeout, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1", "User-Agent": "reprobundle-envs"})
    ctype, body = response.headers.get("content-type", ""), response.body
    if "json" in ctype:
        data = json.loads(body)
        return [{"filename": f["filename"], "requires-python": f.get("requires-python"),
                 "yanked": bool(f.get("yanked"))} for f in data.get("files", [])]
    parser = _SimpleHTML()
    parser.feed(body.decode("utf-8", "replace"))
    return parser.files


# ------------------------------------------------------------------------------------------ reading file names


@functools.cache
def platform_markers() -> frozenset[str]:
    """The platform tags a wheel installs with here, as `packaging.tags` finds them for this machine
    (manylinux_2_35_x86_64 ... manylinux2014_x86_64, linux_x86_64; macosx_14_0_arm64 ...; win_amd64)."""
    return frozenset(packaging.tags.platform_tags())


def cpython_minor(tag: Tag) -> int | None:
    """X of a regular CPython 3.X ABI tag (cp312-cp312); None for free-threaded (cp313t), abi3, none, others."""
    digits = tag.interpreter[3:]
    if tag.interpreter.startswith("cp3") and digits.isascii() and digits.isdigit() and tag.abi == tag.interpreter:
        return int(digits)
    return None


def is_generic(tag: Tag) -> bool:
    """A tag of a wheel for any Python 3 (py3-none-*)."""
    return tag.interpreter in ("py3", "py2.py3") and tag.abi == "none"


def jax_file_version(filename: str) -> Version | None:
    """The release a jax distribution file holds: a pure-Python wheel or an sdist of a plain release; else None."""
    try:
        if filename.endswith(".whl"):
            name, version, _build, tags = parse_wheel_filename(filename)
            if _PURE not in tags:
                return None
        else:
            name, version = parse_sdist_filename(filename)
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):  # older packaging raises InvalidVersion
        return None
    if name != canonicalize_name("jax") or not is_final_release(version):
        return None
    return version


def _release_wheel(filename: str, project: str) -> tuple[Version, frozenset[Tag]] | None:
    """(version, tags) of a wheel of a plain release of `project`; None for anything else."""
    try:
        name, version, _build, tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion):
        return None
    if name != canonicalize_name(project) or not is_final_release(version):
        return None
    return version, tags


def jaxlib_wheel_pythons(filename: str, markers: frozenset[str] | None = None
                         ) -> tuple[Version, set[int], bool] | None:
    """(release, CPython 3 minors, installable here) of a jaxlib wheel of a plain release; None for anything else.

    Only the wheels of a regular CPython ABI count (cp312-cp312): free-threaded builds (cp313t) are not what a plain
    venv gets, and jaxlib ships no abi3 wheels. "Here": a platform tag is one this machine installs (`markers`, default
    platform_markers()); a compressed tag set (manylinux_2_27_x86_64.manylinux_2_17_x86_64) counts once per tag.
    """
    wheel = _release_wheel(filename, "jaxlib")
    if wheel is None:
        return None
    version, tags = wheel
    platforms = markers or platform_markers()
    regular = [(minor, tag.platform) for tag in tags if (minor := cpython_minor(tag)) is not None]
    minors = {minor for minor, _ in regular}
    here = any(plat in platforms for _, plat in regular)
    return (version, minors, here) if minors else None


def summarize_index(jax_files: list[dict], jaxlib_files: list[dict]) -> dict:
    """Boil the two project listings down to what version and interpreter choice need."""
    jax: dict[str, dict] = {}
    for f in jax_files:
        version = jax_file_version(f["filename"])
        if version is None:
            continue
        e = jax.setdefault(str(version), {"requires_python": None, "yanked": True})
        e["yanked"] = e["yanked"] and f["yanked"]
        if f.get("requires-python") and (e["requires_python"] is None or not f["yanked"]):
            e["requires_python"] = f["requires-python"]
    markers = platform_markers()
    here: dict[str, set[int]] = {}
    anywhere: dict[str, set[int]] = {}
    jaxlib_rp: dict[str, str | None] = {}
    for f in jaxlib_files:
        if f["yanked"]:
            continue
        wheel = jaxlib_wheel_pythons(f["filename"], markers)
        if wheel is None:
            continue
        version, minors, is_here = wheel
        ver = str(version)
        anywhere.setdefault(ver, set()).update(minors)
        jaxlib_rp[ver] = f.get("requires-python")
        if is_here:
            here.setdefault(ver, set()).update(minors)
    wheels = here if here else anywhere  # exotic platform: trust tags from any platform rather than none
    if not here and anywhere:
        log.info("no jaxlib wheel on the index names this platform (%s): trusting wheels for any platform",
                 platform.machine())
    jaxlib = {v: {"pythons": sorted(ms), "requires_python": jaxlib_rp.get(v)} for v, ms in wheels.items()}
    return {"jax": jax, "jaxlib": jaxlib}


# ------------------------------------------------------------------------------------ what the summary says


def jaxlib_for(index: dict, version: str, released: list[str] | None = None) -> str | None:
    """The jaxlib release that goes with jax `version`, per the index; None when it cannot be installed.
    `released`: the index's releases not yanked, ascending (`_released`), where the caller asks of many versions."""
    entry = index["jax"].get(version)
    if entry is None or entry["yanked"]:
        return None
    if version in index["jaxlib"]:
        return version
    # A jax-only patch release (e.g. 0.4.37) runs on the jaxlib of the jax release just before it.
    released = _released(index) if released is None else released
    i = released.index(version)
    if i == 0:
        return None
    prev = released[i - 1]
    if prev in index["jaxlib"] and Version(prev).release[:2] == Version(version).release[:2]:
        return prev
    return None


def _released(index: dict) -> list[str]:
    return sorted((v for v, e in index["jax"].items() if not e["yanked"]), key=version_key)


def installable(index: dict) -> list[str]:
    """The jax releases in the summary that can be installed (not yanked, with a jaxlib), in index order."""
    released = _released(index)
    return [v for v in index["jax"] if jaxlib_for(index, v, released) is not None]


def not_installable(index: dict) -> dict[str, str]:
    """The jax releases in the summary that cannot be installed, with why ("yanked", "no jaxlib for it on the
    index"), ascending: what `installable` leaves out, for an answer that names the releases it never tested."""
    released = _released(index)
    left = {v: "yanked" if e["yanked"] else "no jaxlib for it on the index" for v, e in index["jax"].items()
            if jaxlib_for(index, v, released) is None}
    return {v: left[v] for v in sorted(left, key=version_key)}


def fallback_pythons(version: str) -> list[int]:
    """CPython 3 minors for jax `version` from the built-in table (for when the index cannot be read)."""
    v = parse_version(version)
    if v is not None:
        for first, (lo, hi) in FALLBACK_PYTHONS:
            if v >= Version(first):
                return list(range(lo, hi + 1))
    return []


def project_wheel(filename: str, project: str, markers: frozenset[str] | None = None
                  ) -> tuple[Version, list[int] | None, bool] | None:
    """(release, CPython 3 minors or None for a Python-independent wheel, installable here) of a wheel of `project`
    (a plugin such as jax-cuda12-plugin, or jax-cuda12-pjrt whose wheels are py3-none); None for anything else."""
    wheel = _release_wheel(filename, project)
    if wheel is None:
        return None
    version, tags = wheel
    platforms = markers or platform_markers()
    minors = {minor for tag in tags if (minor := cpython_minor(tag)) is not None}
    generic = any(is_generic(tag) for tag in tags)
    here = any(tag.platform == "any" or tag.platform in platforms for tag in tags
               if is_generic(tag) or cpython_minor(tag) is not None)
    if not minors and not generic:
        return None
    return version, (None if generic and not minors else sorted(minors)), here


def summarize_project(files: list[dict], project: str) -> dict:
    """{release: {"pythons": [minors] or None (any Python)}} of the wheels of `project` installable here."""
    out: dict[str, dict] = {}
    markers = platform_markers()
    for f in files:
        if f["yanked"]:
            continue
        wheel = project_wheel(f["filename"], project, markers)
        if wheel is None or not wheel[2]:
            continue
        version, minors, _ = wheel
        entry = out.setdefault(str(version), {"pythons": minors})
        if entry["pythons"] is not None:
            entry["pythons"] = None if minors is None else sorted(set(entry["pythons"]) | set(minors))
    return out


class PackageIndex:
    """The summary of what the index says about jax and jaxlib: from memory, the cache file, or the network."""

    def __init__(self, cache_path: Path, url: str | None = None) -> None:
        """`url`: the index to read (--index-url, a mirror); default: the one uv installs from (index_url())."""
        self.cache_path = cache_path
        self._url = url
        self.error: str | None = None  # why the index could not be read, the last time it was tried
        self._summary: dict | None = None  # {"url", "fetched", "jax", "jaxlib"}
        self._projects: dict[str, dict] = {}  # other projects (plugins): {"url", "fetched", "releases"}

    def project(self, name: str, *, want: str | None = None) -> dict | None:
        """{release: {"pythons"}} of project `name`'s wheels installable here (a plugin: jax-cuda12-plugin...),
        cached beside the jax listing like it; None when the index cannot be read and nothing is cached.
        `want`: a release that should be listed; a cache older than INDEX_RECHECK_S without it is refreshed."""
        url = self._url or index_url()
        path = self.cache_path.with_name(f"{self.cache_path.stem}.{canonicalize_name(name)}.json")

        def fresh(entry: dict | None) -> bool:
            if not entry or entry.get("url") != url:
                return False
            age = time.time() - entry.get("fetched", 0)
            if want and want not in entry["releases"]:
                return age < INDEX_RECHECK_S
            return age < INDEX_CACHE_TTL_S

        entry = self._projects.get(name)
        if not fresh(entry):
            cached = None
            with contextlib.suppress(OSError, ValueError):
                cached = json.loads(path.read_text())
            if fresh(cached):
                entry = cached
            else:
                log.info("package index: fetching the %s listing from %s", name, url)
                try:
                    entry = {"url": url, "fetched": time.time(),
                             "releases": summarize_project(fetch_project_files(url, name), name)}
                except urllib.error.HTTPError as e:
                    if e.code != 404:
                        self.error = f"{type(e).__name__}: {e}"
                        return cached["releases"] if cached and cached.get("url") == url else None
                    entry = {"url": url, "fetched": time.time(), "releases": {}}  # no such project on this index
                except (OSError, ValueError, urllib.error.URLError) as e:
                    self.error = f"{type(e).__name__}: {e}"
                    log.info("package index: %s is unreachable (%s)", url, self.error)
                    return cached["releases"] if cached and cached.get("url") == url else None
                with contextlib.suppress(OSError):
                    path.parent.mkdir(parents=True, exist_ok=True)
                    tmp = path.with_name(f"{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
                    tmp.write_text(json.dumps(entry))
                    os.replace(tmp, path)
            if entry is not None:
                self._projects[name] = entry
        return entry["releases"] if entry is not None else None

    def load(self, *, max_age: float = float("inf"), want: str | None = None) -> dict | None:
        """The summary; None when none can be had.

        `want`: a version that must be in it; a cache older than INDEX_RECHECK_S without it is refreshed.
        """
        url = self._url or index_url()
        wanted = want if want and parse_version(want) is not None else None

        def has_wanted(ix: dict) -> bool:
            return wanted is None or any(same_release(v, wanted) for v in ix["jax"])

        def fresh_enough(ix: dict | None) -> bool:
            if not ix or ix.get("url") != url:
                return False
            age = time.time() - ix.get("fetched", 0)
            if age > max_age:
                return False
            if not has_wanted(ix):
                return age < INDEX_RECHECK_S
            return True

        if fresh_enough(self._summary):
            return self._summary
        cached = None
        with contextlib.suppress(OSError, ValueError):
            cached = json.loads(self.cache_path.read_text())
        if cached is not None and fresh_enough(cached):
            log.debug("package index: using the cached listing of %s (%.0f s old)", url,
                      time.time() - cached.get("fetched", 0))
            self._summary = cached
            return cached
        log.info("package index: fetching the jax and jaxlib listings from %s", url)
        try:
            summary = summarize_index(fetch_project_files(url, "jax"), fetch_project_files(url, "jaxlib"))
        except (OSError, ValueError, urllib.error.URLError) as e:
            self.error = f"{type(e).__name__}: {e}"
            if cached and cached.get("url") == url and (not want or has_wanted(cached)):
                log.info("package index: %s is unreachable (%s); using the stale cached listing (%.0f s old)",
                         url, self.error, time.time() - cached.get("fetched", 0))
                return cached  # stale beats nothing (but does not get to say that `want` does not exist)
            log.info("package index: %s is unreachable (%s) and nothing usable is cached", url, self.error)
            return None
        if not summary["jax"]:
            self.error = "no jax files listed"
            log.info("package index: %s lists no jax files", url)
            return None
        self.error = None
        summary.update(url=url, fetched=time.time())
        self._summary = summary
        with contextlib.suppress(OSError):
            self.cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.cache_path.with_name(f"{CACHE_FILE}.{os.getpid()}.{secrets.token_hex(4)}")
            tmp.write_text(json.dumps(summary))
            os.replace(tmp, self.cache_path)
        return summary

    def supported(self, version: str) -> tuple[list[int], str | None, str | None, bool]:
        """(CPython 3 minors, jax's requires-python, jaxlib version, from_index) for jax `version`."""
        index = self.load(want=version)
        if index is not None:
            jaxlib = jaxlib_for(index, version)
            if jaxlib is None:
                return [], None, None, True
            return (index["jaxlib"][jaxlib]["pythons"], index["jax"][version]["requires_python"], jaxlib, True)
        minors = fallback_pythons(version)
        log.info("jax %s: the index is unreadable; the built-in table says CPython %s", version,
                 ", ".join(f"3.{m}" for m in minors) or "(none)")
        return minors, None, None, False


def python_to_name(index: PackageIndex, version: str, here: tuple[int, int] | None = None) -> str | None:
    """The Python a `uv run --with jax==V` line must name for jax `version` (`3.12`): None where the Python here
    (`here`, default this interpreter's) is one the release takes (admitted by its Requires-Python, with a jaxlib
    wheel for it); else the one that is, closest to here (the newer on a tie); None where the index says nothing of
    the release (a nightly, a commit, an unknown version: uv's own error then says why)."""
    from .versions import python_allowed

    if parse_version(version) is None:
        return None
    major, minor = here or (int(platform.python_version_tuple()[0]), int(platform.python_version_tuple()[1]))
    minors, requires, _jaxlib, _from_index = index.supported(version)
    takes = [m for m in minors if python_allowed(requires, f"{major}.{m}")]
    if not takes or (major == 3 and minor in takes):
        return None
    return f"3.{min(takes, key=lambda m: (abs(m - minor), -m))}"
