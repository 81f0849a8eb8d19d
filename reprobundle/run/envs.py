"""Isolated, cached virtual environments, one per JAX release, for replaying a bundle on that release.

Layout of the environment root (default: $REPROBUNDLE_ENV_DIR, else <user cache>/reprobundle/envs)::

    jax-0.8.0-py3.12/            a finished venv; reprobundle-env.json inside marks it complete
    .tmp-jax-0.8.0-py3.12-<rnd>/ a venv being built (renamed into place when verified)
    .trash-<rnd>/                an environment being removed
    .locks/jax-0.8.0.lock        fcntl lock: one builder per JAX version at a time, across processes
    .index-cache.json            what the package index said about jax and jaxlib (versions, wheels)

Each environment holds `jax==V`, the jaxlib it needs, numpy (numpy<2 for releases built before NumPy 2),
msgpack and flatbuffers (which `jax.export` deserialization imports but jax does not depend on), plus
their dependencies - nothing from reprobundle: the worker is run by path.

Choosing a Python: a jax release is only installable on the CPython versions its jaxlib has wheels for
(intersected with jax's requires-python). Both are read from the package index (simple API, cached; a
table below is the fallback when the index cannot be read). Candidate interpreters are the one given with
`--python` (then only it), else the host's own, pyenv's, uv-managed ones and python3.X on PATH. Of those
that fit, the one whose minor version is closest to the host's wins (ties: the newer), so that by default
a release runs on the host's Python whenever it can.

Environments are built with uv (`uv.find_uv_bin()`, else `uv` on PATH), else with `python -m venv` and pip.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import platform
import re
import secrets
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from datetime import datetime, timezone
from html.parser import HTMLParser
from pathlib import Path
from typing import Callable, Iterator

from ..errors import EnvironmentCreationError, NoSuitablePythonError

__all__ = ["INSTALLED", "LATEST", "JaxEnvironment", "EnvironmentManager", "default_root"]

INSTALLED = "installed"  # pseudo-version: the host's own interpreter and its installed jax; no env is created
LATEST = "latest"  # pseudo-version: the newest jax on the index that some interpreter found here can run

METADATA_FILE = "reprobundle-env.json"
METADATA_SCHEMA = 1
DEFAULT_INDEX = "https://pypi.org/simple"
INDEX_CACHE_TTL_S = 3600.0  # how long available_versions() trusts its cached copy of the index
INDEX_RECHECK_S = 60.0  # a version missing from a cache older than this triggers a refetch
INSTALL_TIMEOUT_S = 1800.0
VERIFY_TIMEOUT_S = 600.0
_TAIL_LINES = 25

# Installed beside jax/jaxlib in every environment. flatbuffers: jax.export.deserialize imports it, and jax
# does not depend on it.
EXTRA_PACKAGES = ("msgpack", "flatbuffers")

# jaxlib releases before 0.4.26 were built against NumPy 1.x: with NumPy 2 they fail at import
# (np.trapz, np.issubsctype removed; "_ARRAY_API not found"). Checked: 0.4.13, 0.4.20, 0.4.23, 0.4.25 fail
# with numpy 2.4, 0.4.26, 0.4.29 and 0.4.30 work.
NUMPY2_FIRST_JAX = (0, 4, 26)

# Fallback only, used when the index cannot be read: CPython minors that jaxlib ships Linux/macOS wheels for,
# by first jax release of each range (read off PyPI's jaxlib wheel tags, 2026). Newest first.
# jax releases older than 0.4.13 have no jaxlib left on PyPI at all.
_FALLBACK_PYTHONS: list[tuple[tuple[int, ...], tuple[int, int]]] = [
    ((0, 11, 0), (12, 15)),
    ((0, 7, 0), (11, 14)),
    ((0, 4, 34), (10, 13)),
    ((0, 4, 31), (10, 12)),
    ((0, 4, 14), (9, 12)),
    ((0, 4, 13), (8, 11)),
]

_VERSION_RE = re.compile(r"^\d+(\.\d+)*$")
_ENV_DIR_RE = re.compile(r"^jax-(\d+(?:\.\d+)*)-py(\d+)\.(\d+)$")
_PY_VERSION_RE = re.compile(r"^(?:python|py)?(\d+)\.(\d+)(?:\.(\d+))?$")
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


def default_root() -> Path:
    env = os.environ.get("REPROBUNDLE_ENV_DIR")
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("reprobundle")) / "envs"
    except ImportError:  # pragma: no cover - platformdirs is a dependency
        return Path.home() / ".cache" / "reprobundle" / "envs"


# ---------------------------------------------------------------------------------------------- versions


def _vtuple(v: str) -> tuple[int, ...]:
    """Numeric release tuple without trailing zeros, so "0.8" == "0.8.0"."""
    t = [int(x) for x in v.split(".")]
    while len(t) > 1 and t[-1] == 0:
        t.pop()
    return tuple(t)


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split("."))


def _normalize_request(version: str) -> str:
    v = version.strip()
    v = re.sub(r"^jax\s*==\s*", "", v)
    if v[:1] in ("v", "V") and _VERSION_RE.match(v[1:]):
        v = v[1:]
    return v


def _parse_pyversion(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v)[:3])


def _spec_allows(spec: str | None, pyver: tuple[int, ...]) -> bool:
    """Whether a requires-python specifier (">=3.9", ">=3.7,<4", "!=3.0.*") admits the version `pyver`."""
    if not spec:
        return True
    for clause in spec.split(","):
        clause = clause.strip()
        if not clause:
            continue
        m = re.match(r"^(~=|===|==|!=|<=|>=|<|>)\s*([0-9][0-9.]*)(\.\*)?$", clause)
        if not m:
            continue  # something exotic: do not exclude on it
        op, ver, star = m.group(1), m.group(2).rstrip("."), bool(m.group(3))
        want = _parse_pyversion(ver)
        have = pyver
        if star:
            match = have[: len(want)] == want
            ok = match if op == "==" else (not match) if op == "!=" else True
        else:
            n = max(len(want), len(have))
            a = have + (0,) * (n - len(have))
            b = want + (0,) * (n - len(want))
            if op in ("==", "==="):
                ok = a == b
            elif op == "!=":
                ok = a != b
            elif op == "<=":
                ok = a <= b
            elif op == ">=":
                ok = a >= b
            elif op == "<":
                ok = a < b
            elif op == ">":
                ok = a > b
            else:  # ~=
                ok = a >= b and have[: len(want) - 1] == want[: len(want) - 1]
        if not ok:
            return False
    return True


# ---------------------------------------------------------------------------------------- package index


def _index_url() -> str:
    """The index uv will install from (its environment settings; PyPI by default)."""
    for var in ("UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        url = os.environ.get(var, "").strip()
        if url:
            return url.split()[0].rstrip("/")
    return DEFAULT_INDEX


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


def _fetch_project_files(index: str, project: str, timeout: float = 30.0) -> list[dict]:
    url = f"{index}/{project}/"
    req = urllib.request.Request(url, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1",
        "User-Agent": "reprobundle-envs",
    })
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        ctype = resp.headers.get("Content-Type", "")
        body = resp.read()
    if "json" in ctype:
        data = json.loads(body)
        return [{"filename": f["filename"], "requires-python": f.get("requires-python"),
                 "yanked": bool(f.get("yanked"))} for f in data.get("files", [])]
    parser = _SimpleHTML()
    parser.feed(body.decode("utf-8", "replace"))
    return parser.files


def _platform_markers() -> tuple[str, tuple[str, ...]]:
    """(os word, machine words) that a wheel's platform tag must contain to install here."""
    machine = platform.machine().lower()
    if sys.platform.startswith("linux"):
        return "linux", ("aarch64",) if machine in ("aarch64", "arm64") else (machine,)
    if sys.platform == "darwin":
        return "macosx", ("arm64", "universal2") if machine == "arm64" else ("x86_64", "universal2", "intel")
    if sys.platform == "win32":
        return "win", ("amd64",) if machine in ("amd64", "x86_64") else (machine,)
    return sys.platform, (machine,)


def _summarize_index(jax_files: list[dict], jaxlib_files: list[dict]) -> dict:
    """Boil the two project listings down to what version and interpreter choice need."""
    jax: dict[str, dict] = {}
    for f in jax_files:
        m = re.match(r"^jax-(\d+(?:\.\d+)*)(?:-py3-none-any\.whl|\.tar\.gz|\.zip)$", f["filename"])
        if not m:
            continue
        e = jax.setdefault(m.group(1), {"requires_python": None, "yanked": True})
        e["yanked"] = e["yanked"] and f["yanked"]
        if f.get("requires-python") and (e["requires_python"] is None or not f["yanked"]):
            e["requires_python"] = f["requires-python"]
    osword, machines = _platform_markers()
    here: dict[str, set[int]] = {}
    anywhere: dict[str, set[int]] = {}
    jaxlib_rp: dict[str, str | None] = {}
    for f in jaxlib_files:
        m = re.match(r"^jaxlib-(\d+(?:\.\d+)*)-cp(\d)(\d+)-cp\d+(t?)-(.+)\.whl$", f["filename"])
        if not m or f["yanked"]:
            continue
        ver, major, minor, threaded, plat = m.groups()
        if major != "3" or threaded:  # free-threaded builds: not what a plain venv gets
            continue
        anywhere.setdefault(ver, set()).add(int(minor))
        jaxlib_rp[ver] = f.get("requires-python")
        plat = plat.lower()
        if osword in plat and any(w in plat for w in machines):
            here.setdefault(ver, set()).add(int(minor))
    wheels = here if here else anywhere  # exotic platform: trust tags from any platform rather than none
    jaxlib = {v: {"pythons": sorted(ms), "requires_python": jaxlib_rp.get(v)} for v, ms in wheels.items()}
    return {"jax": jax, "jaxlib": jaxlib}


# ------------------------------------------------------------------------------------------ interpreters


@dataclass(frozen=True)
class _Interpreter:
    executable: str  # the base interpreter (not a venv's), as the interpreter reports itself
    version: str  # "3.12.1"
    source: str  # where it was found: "--python", "host", "pyenv", "uv", "PATH"

    @property
    def minor(self) -> tuple[int, int]:
        v = _parse_pyversion(self.version)
        return (v[0], v[1])

    def describe(self) -> str:
        return f"{self.version} at {self.executable}"


# Run with -I -S: about 40 ms per interpreter. A "t" in abiflags marks a free-threaded build.
_PROBE = (
    "import sys, json\n"
    "print(json.dumps({'impl': sys.implementation.name, 'version': sys.version.split()[0],"
    " 'exe': sys.executable, 'base': getattr(sys, '_base_executable', None) or sys.executable,"
    " 'ft': 't' in getattr(sys, 'abiflags', '')}))\n"
)
_MIN_MINOR = 8  # older interpreters are not even probed: no jaxlib on the index supports them
_probe_cache: dict[tuple[str, float], dict | None] = {}


def _probe(path: str) -> dict | None:
    try:
        key = (os.path.realpath(path), os.stat(path).st_mtime)
    except OSError:
        return None
    if key in _probe_cache:
        return _probe_cache[key]
    info = None
    try:
        out = subprocess.run([path, "-I", "-S", "-c", _PROBE], capture_output=True, text=True, timeout=20,
                             stdin=subprocess.DEVNULL)
        if out.returncode == 0:
            info = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        info = None
    _probe_cache[key] = info
    return info


def _candidate_paths(uv: str | None) -> list[tuple[str, str]]:
    """(path, source) of interpreters worth probing, most preferred first; pyenv shims are skipped."""
    out: list[tuple[str, str]] = [(sys.executable, "host")]
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    roots = [("pyenv", pyenv_root / "versions")]
    uv_dir = os.environ.get("UV_PYTHON_INSTALL_DIR")
    if not uv_dir and uv:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            r = subprocess.run([uv, "python", "dir"], capture_output=True, text=True, timeout=10,
                               stdin=subprocess.DEVNULL)
            if r.returncode == 0:
                uv_dir = r.stdout.strip()
    if uv_dir:
        roots.append(("uv", Path(uv_dir)))
    for source, root in roots:
        try:
            dirs = sorted(root.iterdir(), key=lambda p: [int(x) for x in re.findall(r"\d+", p.name)][:3],
                          reverse=True)
        except OSError:
            continue
        for d in dirs:
            bindir = d / "bin" if os.name != "nt" else d
            with contextlib.suppress(OSError):
                for exe in sorted(bindir.iterdir(), reverse=True):
                    m = re.fullmatch(r"python3\.(\d+)(\.exe)?", exe.name)
                    if m and int(m.group(1)) >= _MIN_MINOR:
                        out.append((str(exe), source))
                        break
    names = [f"python3.{m}" for m in range(20, _MIN_MINOR - 1, -1)] + ["python3"]
    for d in os.environ.get("PATH", "").split(os.pathsep):
        if not d or Path(d).name == "shims":  # pyenv/asdf shims: the real interpreters are found above
            continue
        for name in names:
            for suffix in ((".exe",) if os.name == "nt" else ("",)):
                exe = os.path.join(d, name + suffix)
                if os.path.isfile(exe) and os.access(exe, os.X_OK):
                    out.append((exe, "PATH"))
    return out


def _host_interpreter() -> _Interpreter | None:
    """The interpreter running this code (its base, when it is a venv's), known without a subprocess."""
    if sys.implementation.name != "cpython" or "t" in getattr(sys, "abiflags", "") or sys.version_info[0] != 3:
        return None
    base = getattr(sys, "_base_executable", None) or sys.executable
    if not base or not os.path.exists(base):
        return None
    return _Interpreter(os.path.realpath(base), sys.version.split()[0], "host")


def _interpreter_from(path: str, source: str) -> _Interpreter | None:
    info = _probe(path)
    if not info or info.get("impl") != "cpython" or info.get("ft"):
        return None
    if _parse_pyversion(info["version"])[:1] != (3,):
        return None
    base = info.get("base") or info.get("exe") or path
    return _Interpreter(os.path.realpath(base), info["version"], source)


# -------------------------------------------------------------------------------------------- utilities


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


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
        if os.name == "nt":  # pragma: no cover
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
import importlib.metadata as md, importlib.util, json, platform, sys
import numpy
import jax
import jax.numpy as jnp
devices = jax.devices()
if not any(d.platform == "cpu" for d in devices):
    raise SystemExit("no CPU device: %r" % (devices,))
y = jax.jit(lambda x: x + 1)(jnp.arange(3))
if [int(v) for v in y] != [1, 2, 3]:
    raise SystemExit("jit(x + 1) gave %r" % (y,))
import msgpack
if importlib.util.find_spec("reprobundle") is not None:
    raise SystemExit("reprobundle is importable inside the environment")
print("__MARK__" + json.dumps({
    "jax": jax.__version__, "jaxlib": md.version("jaxlib"), "numpy": numpy.__version__,
    "python": platform.python_version(), "devices": [str(d) for d in devices],
    "packages": {d.metadata["Name"]: d.version for d in md.distributions()},
}))
""".replace("__MARK__", _VERIFY_MARK)


# ------------------------------------------------------------------------------------------------ manager


class EnvironmentManager:
    """Creates, finds, lists and removes the per-JAX-version environments under one root directory."""

    def __init__(self, root: Path | None = None, *, python: str | None = None, uv: str | None = None) -> None:
        """`root`: where environments live (default: $REPROBUNDLE_ENV_DIR, else the user cache's envs/).
        `python`: the interpreter the user named with --python (a path, a command, or a version such as
        "3.12"); when given, it is the only candidate. `uv`: the uv binary (default: the `uv` package's, else
        `uv` on PATH); "" builds with `python -m venv` and pip instead.
        """
        self.root = Path(root).expanduser() if root is not None else default_root()
        self.python = str(python) if python else None
        self._uv = uv
        self._uv_resolved = uv is not None
        self._interpreters: list[_Interpreter] | None = None
        self._index: dict | None = None  # {"url", "fetched", "jax", "jaxlib"}
        self._index_error: str | None = None

    # ------------------------------------------------------------------------------ public API

    def ensure(self, version: str, *, progress: Callable[[str], None] | None = None) -> JaxEnvironment:
        """The environment for jax `version` ("0.8.0", "installed" or "latest"), created if not cached."""
        say = progress or (lambda _line: None)
        requested = _normalize_request(version)
        if requested == INSTALLED:
            return self._installed()
        if requested == LATEST:
            versions = self.available_versions()
            if not versions:
                raise EnvironmentCreationError("no jax release found on the package index",
                                               hint=f"check the index ({_index_url()}) is reachable")
            hit = self._find_existing(versions[-1])
            if hit is not None:
                return hit
            requested = self._resolve_latest(versions)
        if not _VERSION_RE.match(requested):
            raise EnvironmentCreationError(
                f"{version!r} is not a jax version",
                hint='give a release such as "0.8.0", or "installed" or "latest"')
        hit = self._find_existing(requested)
        if hit is not None:
            return hit
        return self._create(requested, say)

    def resolve_version(self, version: str) -> str:
        """What `ensure(version)` would install: "latest" resolved, "0.8" -> "0.8.0"; needs the index."""
        requested = _normalize_request(version)
        if requested == INSTALLED:
            return self._installed().jax_version
        if requested == LATEST:
            return self._resolve_latest(self.available_versions())
        index = self._load_index(want=requested)
        if index and _VERSION_RE.match(requested):
            for v in index["jax"]:
                if _vtuple(v) == _vtuple(requested):
                    return v
        return requested

    def list(self) -> list[JaxEnvironment]:
        """The finished environments under the root, by jax version then Python version."""
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
        return sorted(envs, key=lambda e: (_vkey(e.jax_version), _parse_pyversion(e.python_version)))

    def remove(self, version: str | None = None) -> list[JaxEnvironment]:
        """Remove the environments of jax `version` (all of them when None); returns what was removed."""
        if version is None:
            targets = self.list()
        else:
            requested = _normalize_request(version)
            envs = self.list()
            if requested == INSTALLED:
                return []
            if requested == LATEST:
                requested = envs[-1].jax_version if envs else ""
            if not _VERSION_RE.match(requested):
                return []
            targets = [e for e in envs if _vtuple(e.jax_version) == _vtuple(requested)]
        removed = []
        for env in targets:
            assert env.path is not None
            with _file_lock(self._lock_path(env.jax_version)):
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

    def available_versions(self) -> list[str]:
        """Installable jax releases on the index, ascending (cached for INDEX_CACHE_TTL_S).

        A release counts when it is not yanked and a jaxlib for it is on the index: its own version, or,
        for the jax-only patch releases (0.4.37, 0.5.2), the previous release's. So 0.4.32 (yanked),
        0.4.15-0.4.17 (their jaxlib is gone) and everything before 0.4.13 are left out.
        """
        index = self._load_index(max_age=INDEX_CACHE_TTL_S)
        if index is None:
            raise EnvironmentCreationError(
                f"could not read the list of jax releases from {_index_url()}: {self._index_error}",
                hint="check the network or the index settings (UV_DEFAULT_INDEX / UV_INDEX_URL)")
        return [v for v in sorted(index["jax"], key=_vkey) if self._jaxlib_for(index, v) is not None]

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
        m = _PY_VERSION_RE.match(spec)
        if m and not os.path.exists(spec):
            interp = self._user_interpreter()
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
                numpy_version=meta.get("numpy_version"))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def _find_existing(self, version: str) -> JaxEnvironment | None:
        """A usable finished environment for `version` (and for --python, if given), without the network."""
        want = _vtuple(version)
        matches = []
        try:
            entries = list(self.root.iterdir())
        except OSError:
            return None
        for d in entries:
            m = _ENV_DIR_RE.match(d.name)
            if not m or _vtuple(m.group(1)) != want:
                continue
            env = self._read_env(d)
            if env is None or not env.python_executable.exists():  # unfinished, or its base Python is gone
                continue
            matches.append(env)
        if not matches:
            return None
        if self.python:
            fit = [e for e in matches if self._python_matches(e)]
            return fit[0] if fit else None
        host = sys.version_info[:2]

        def distance(e: JaxEnvironment) -> tuple:
            v = _parse_pyversion(e.python_version)
            return (abs(v[1] - host[1]) if v[0] == host[0] else 99, -v[1])

        return min(matches, key=distance)

    def _python_matches(self, env: JaxEnvironment) -> bool:
        assert self.python is not None
        m = _PY_VERSION_RE.match(self.python)
        if m and not os.path.exists(self.python):
            want = tuple(int(x) for x in m.groups() if x is not None)
            return _parse_pyversion(env.python_version)[: len(want)] == want
        interp = self._user_interpreter()
        if interp is None:
            return False
        try:
            meta = json.loads((env.path / METADATA_FILE).read_text())  # type: ignore[operator]
        except (OSError, ValueError):
            return False
        return os.path.realpath(meta.get("base_python", "")) == interp.executable

    # ------------------------------------------------------------------------------ the index

    def _index_cache_path(self) -> Path:
        return self.root / ".index-cache.json"

    def _load_index(self, *, max_age: float = float("inf"), want: str | None = None) -> dict | None:
        """The index summary: from memory, the on-disk cache, or the network; None when none can be had.

        `want`: a version that must be in it; a cache older than INDEX_RECHECK_S without it is refreshed.
        """
        url = _index_url()

        def fresh_enough(ix: dict | None) -> bool:
            if not ix or ix.get("url") != url:
                return False
            age = time.time() - ix.get("fetched", 0)
            if age > max_age:
                return False
            if want and _VERSION_RE.match(want) and not any(_vtuple(v) == _vtuple(want) for v in ix["jax"]):
                return age < INDEX_RECHECK_S
            return True

        if fresh_enough(self._index):
            return self._index
        cached = None
        with contextlib.suppress(OSError, ValueError):
            cached = json.loads(self._index_cache_path().read_text())
        if fresh_enough(cached):
            self._index = cached
            return cached
        try:
            summary = _summarize_index(_fetch_project_files(url, "jax"), _fetch_project_files(url, "jaxlib"))
        except (OSError, ValueError, urllib.error.URLError) as e:
            self._index_error = f"{type(e).__name__}: {e}"
            if cached and cached.get("url") == url and (
                    not want or any(_vtuple(v) == _vtuple(want) for v in cached["jax"])):
                return cached  # stale beats nothing (but does not get to say that `want` does not exist)
            return None
        if not summary["jax"]:
            self._index_error = "no jax files listed"
            return None
        self._index_error = None
        summary.update(url=url, fetched=time.time())
        self._index = summary
        with contextlib.suppress(OSError):
            self.root.mkdir(parents=True, exist_ok=True)
            tmp = self.root / f".index-cache.json.{os.getpid()}.{secrets.token_hex(4)}"
            tmp.write_text(json.dumps(summary))
            os.replace(tmp, self._index_cache_path())
        return summary

    @staticmethod
    def _jaxlib_for(index: dict, version: str) -> str | None:
        """The jaxlib release that goes with jax `version`, per the index; None when it cannot be installed."""
        entry = index["jax"].get(version)
        if entry is None or entry["yanked"]:
            return None
        if version in index["jaxlib"]:
            return version
        # A jax-only patch release (e.g. 0.4.37) runs on the jaxlib of the jax release just before it.
        released = sorted((v for v, e in index["jax"].items() if not e["yanked"]), key=_vkey)
        i = released.index(version)
        if i == 0:
            return None
        prev = released[i - 1]
        if prev in index["jaxlib"] and _vkey(prev)[:2] == _vkey(version)[:2]:
            return prev
        return None

    # ------------------------------------------------------------------------------ interpreters

    def _uv_bin(self) -> str | None:
        if not self._uv_resolved:
            self._uv_resolved = True
            try:
                from uv import find_uv_bin

                self._uv = find_uv_bin()
            except (ImportError, FileNotFoundError, OSError):
                self._uv = shutil.which("uv")
        return self._uv

    def _user_interpreter(self) -> _Interpreter | None:
        """The interpreter named with --python: a path, a command, or a version such as "3.12"."""
        assert self.python is not None
        spec = self.python
        m = _PY_VERSION_RE.match(spec)
        if m and not os.path.exists(spec):
            want = tuple(int(x) for x in m.groups() if x is not None)
            for interp in self._discover(include_user=False):
                if _parse_pyversion(interp.version)[: len(want)] == want:
                    return _Interpreter(interp.executable, interp.version, "--python")
            return None
        path = spec if (os.sep in spec or os.path.exists(spec)) else shutil.which(spec)
        if not path:
            return None
        return _interpreter_from(os.path.expanduser(path), "--python")

    def _discover(self, *, include_user: bool = True) -> list[_Interpreter]:
        """Usable CPython interpreters, most preferred first (only the --python one when it was given)."""
        if include_user and self.python:
            interp = self._user_interpreter()
            return [interp] if interp else []
        if self._interpreters is None:
            cands = _candidate_paths(self._uv_bin())
            with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
                infos = list(pool.map(lambda c: _interpreter_from(*c), cands))
            seen, found = set(), []
            for interp in infos:
                if interp and interp.executable not in seen:
                    seen.add(interp.executable)
                    found.append(interp)
            self._interpreters = found
        return list(self._interpreters)

    def _supported(self, version: str) -> tuple[list[int], str | None, str | None, bool]:
        """(CPython 3 minors, requires-python, jaxlib version, from_index) for jax `version`."""
        index = self._load_index(want=version)
        if index is not None:
            jaxlib = self._jaxlib_for(index, version)
            if jaxlib is None:
                return [], None, None, True
            return (index["jaxlib"][jaxlib]["pythons"], index["jax"][version]["requires_python"], jaxlib, True)
        t = _vtuple(version)
        for first, (lo, hi) in _FALLBACK_PYTHONS:
            if t >= first:
                return list(range(lo, hi + 1)), None, None, False
        return [], None, None, False

    def _choose_python(self, version: str, minors: list[int], requires_python: str | None,
                       jaxlib: str | None) -> _Interpreter:
        if not self.python:
            host = _host_interpreter()  # the host's minor is the closest possible: no need to look further
            if host and host.minor[1] in minors and _spec_allows(requires_python, _parse_pyversion(host.version)):
                return host
        found = self._discover()
        fits = [i for i in found if i.minor[0] == 3 and i.minor[1] in minors
                and _spec_allows(requires_python, _parse_pyversion(i.version))]
        if fits:
            host = sys.version_info[1]
            order = {id(i): n for n, i in enumerate(fits)}
            return min(fits, key=lambda i: (abs(i.minor[1] - host), -i.minor[1], order[id(i)]))
        need = _describe_minors(minors)
        why = f"jaxlib {jaxlib} has wheels for CPython {need}" if jaxlib else f"it supports CPython {need}"
        if requires_python:
            why += f"; jax requires-python {requires_python}"
        if self.python and found:
            exe = found[0].executable
            seen = f"--python {self.python} is Python {found[0].version}" + (
                f" ({exe})" if os.path.realpath(os.path.expanduser(self.python)) != exe else "")
        elif self.python:
            seen = (f"no Python {self.python} was found" if _PY_VERSION_RE.match(self.python)
                    else f"--python {self.python} is not a usable CPython 3 interpreter")
        else:
            seen = "found " + (", ".join(i.describe() for i in found) if found else "no CPython interpreter")
        host = sys.version_info[1]
        best = f"3.{min(minors, key=lambda m: (abs(m - host), -m))}" if minors else "3"
        hint = (f"install Python {best} (e.g. `uv python install {best}` or `pyenv install {best}`), "
                f"or pass --python PATH to a Python {need} interpreter")
        if self.python:  # maybe another interpreter here would do
            others = [i for i in self._discover(include_user=False) if i.minor[1] in minors
                      and _spec_allows(requires_python, _parse_pyversion(i.version))]
            if others:
                pick = min(others, key=lambda i: (abs(i.minor[1] - host), -i.minor[1]))
                hint = f"pass --python {pick.executable} (Python {pick.version}), or drop --python"
        raise NoSuitablePythonError(f"jax {version} needs Python {need} ({why}); {seen}", hint=hint)

    def _resolve_latest(self, versions: list[str]) -> str:
        for v in reversed(versions):
            minors, rp, _jaxlib, _ = self._supported(v)
            if any(i.minor[1] in minors and _spec_allows(rp, _parse_pyversion(i.version))
                   for i in self._discover()):
                return v
        found = ", ".join(i.describe() for i in self._discover()) or "none"
        raise NoSuitablePythonError(
            f"no jax release on the index runs on the Python interpreters found here ({found})",
            hint="install a recent Python (3.12 or newer) or pass --python PATH")

    # ------------------------------------------------------------------------------ creation

    def _lock_path(self, version: str) -> Path:
        return self.root / ".locks" / f"jax-{'.'.join(map(str, _vtuple(version)))}.lock"

    def _dot_dirs(self, prefix: str) -> list[Path]:
        try:
            return [d for d in self.root.iterdir() if d.name.startswith(prefix)]
        except OSError:
            return []

    def _create(self, version: str, say: Callable[[str], None]) -> JaxEnvironment:
        index = self._load_index(want=version)
        if index is not None:
            canonical = next((v for v in index["jax"] if _vtuple(v) == _vtuple(version)), None)
            if canonical is None:
                installable = self._installable(index)
                near = _nearest(version, installable)
                newest = max(installable, key=_vkey) if installable else None
                raise EnvironmentCreationError(
                    f"jax {version} is not a release on {index['url']}",
                    hint=f"pick a released version{near}" + (f" (newest: {newest})" if newest else ""))
            version = canonical
            if self._jaxlib_for(index, version) is None:
                entry = index["jax"][version]
                what = "it is yanked" if entry["yanked"] else f"no matching jaxlib is on {index['url']}"
                near = _nearest(version, self._installable(index))
                raise EnvironmentCreationError(f"jax {version} cannot be installed: {what}",
                                               hint=f"pick another version{near}")
        minors, requires_python, jaxlib, from_index = self._supported(version)
        if not minors and from_index:
            raise EnvironmentCreationError(f"jaxlib {jaxlib} has no CPython wheels for this platform",
                                           hint="pick another jax version")
        if not minors:
            raise EnvironmentCreationError(
                f"jax {version} is older than any jaxlib this tool knows of (0.4.13) and the index "
                f"could not be read ({self._index_error})",
                hint="check the network, or pick a jax release >= 0.4.13")
        interp = self._choose_python(version, minors, requires_python, jaxlib)
        waiting = f"waiting for another process creating the environment for jax {version} ..."
        with contextlib.ExitStack() as stack:
            try:
                self.root.mkdir(parents=True, exist_ok=True)
                stack.enter_context(_file_lock(self._lock_path(version), lambda: say(waiting)))
            except OSError as e:
                raise EnvironmentCreationError(f"cannot write to the environment directory {self.root}: {e}",
                                               hint="set REPROBUNDLE_ENV_DIR to a writable directory") from None
            hit = self._find_existing(version)  # built by someone else while we waited
            if hit is not None:
                return hit
            return self._build(version, interp, jaxlib, say)

    def _installable(self, index: dict) -> list[str]:
        return [v for v in index["jax"] if self._jaxlib_for(index, v) is not None]

    def _build(self, version: str, interp: _Interpreter, jaxlib: str | None,
               say: Callable[[str], None]) -> JaxEnvironment:
        start = time.perf_counter()
        pyminor = f"{interp.minor[0]}.{interp.minor[1]}"
        name = f"jax-{version}-py{pyminor}"
        final = self.root / name
        for stale in self._dot_dirs(f".tmp-{name}-"):  # left by a killed builder (we hold the lock)
            _rmtree(stale)
        if final.exists():  # unfinished or broken (its base Python vanished): rebuild
            trash = self.root / f".trash-{secrets.token_hex(6)}"
            os.rename(final, trash)
            _rmtree(trash)
        tmp = self.root / f".tmp-{name}-{secrets.token_hex(4)}"
        say(f"creating environment for jax {version} (Python {interp.version}) ...")
        reqs = [f"jax=={version}", f"jaxlib=={jaxlib}" if jaxlib else f"jaxlib<={version}"]
        if _vtuple(version) < NUMPY2_FIRST_JAX:
            reqs.append("numpy<2")
        else:
            reqs.append("numpy")
        reqs += list(EXTRA_PACKAGES)
        try:
            installer = self._install(tmp, interp, reqs, offline=self._index_error is not None, say=say)
            say("verifying: importing jax in the new environment ...")
            info = self._verify(tmp, version)
            size = _dir_size(tmp)
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
            f"numpy {env.numpy_version}, Python {env.python_version} ({final})")
        return env

    def _run(self, cmd: list[str], what: str, version: str, *, timeout: float, cwd: Path | None = None,
             env: dict | None = None) -> str:
        unreachable = (f"; the package index was unreachable ({self._index_error}), so only the uv cache "
                       f"was used" if self._index_error else "")
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

    def _install(self, tmp: Path, interp: _Interpreter, reqs: list[str], *, offline: bool,
                 say: Callable[[str], None]) -> str:
        """Create the venv at `tmp` and install `reqs`; returns the installer's name and version."""
        version = reqs[0].split("==", 1)[1]
        prompt = f"jax-{version}"
        uv = self._uv_bin()
        if uv:
            uv_version = self._run([uv, "--version"], "uv --version", version, timeout=60).strip()
            self._run([uv, "venv", "--quiet", "--relocatable", "--python-preference", "only-system",
                       "--prompt", prompt, "--python", interp.executable, str(tmp)], "uv venv", version,
                      timeout=300)
            note = " (offline: the index is unreachable)" if offline else ""
            say(f"installing {' '.join(reqs)} with {uv_version}{note} ...")
            t = time.perf_counter()
            cmd = [uv, "pip", "install", "--python", str(_venv_python(tmp)), "--python-preference", "only-system",
                   *reqs]
            if offline:
                cmd.insert(3, "--offline")
            out = self._run(cmd, "uv pip install", version, timeout=INSTALL_TIMEOUT_S)
            n = sum(1 for line in out.splitlines() if line.startswith(" + "))
            say(f"installed {n} packages in {time.perf_counter() - t:.1f} s")
            return uv_version
        self._run([interp.executable, "-m", "venv", "--prompt", prompt, str(tmp)], "python -m venv", version,
                  timeout=300)
        say(f"installing {' '.join(reqs)} with pip ...")
        t = time.perf_counter()
        self._run([str(_venv_python(tmp)), "-m", "pip", "install", "--disable-pip-version-check",
                   "--no-input", *reqs], "pip install", version, timeout=INSTALL_TIMEOUT_S)
        say(f"installed in {time.perf_counter() - t:.1f} s")
        return "pip"

    def _verify(self, tmp: Path, version: str) -> dict:
        env = _clean_env()
        env["JAX_PLATFORMS"] = "cpu"
        # -I: no cwd, PYTHONPATH or user site; bytecode is written so later imports are faster.
        out = self._run([str(_venv_python(tmp)), "-I", "-c", _VERIFY], "verification (import jax)", version,
                        timeout=VERIFY_TIMEOUT_S, cwd=tmp, env=env)
        line = next((ln for ln in reversed(out.splitlines()) if ln.startswith(_VERIFY_MARK)), None)
        if line is None:
            raise EnvironmentCreationError(
                f"could not create the environment for jax {version}: verification printed no result:\n"
                f"{_tail(out)}", hint="report this as a bug")
        info = json.loads(line[len(_VERIFY_MARK):])
        if _vtuple(info["jax"]) != _vtuple(version):
            raise EnvironmentCreationError(
                f"could not create the environment for jax {version}: it imports jax {info['jax']}",
                hint="report this as a bug")
        return info


def _describe_minors(minors: list[int]) -> str:
    if not minors:
        return "(none known)"
    lo, hi = min(minors), max(minors)
    if sorted(minors) == list(range(lo, hi + 1)):
        return f"3.{lo}" if lo == hi else f"3.{lo}-3.{hi}"
    return ", ".join(f"3.{m}" for m in sorted(minors))


def _nearest(version: str, versions: list[str]) -> str:
    if not versions:
        return ""
    vs = sorted(versions, key=_vkey)
    t = _vtuple(version)
    below = [v for v in vs if _vtuple(v) < t]
    above = [v for v in vs if _vtuple(v) > t]
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
