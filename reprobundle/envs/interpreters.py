"""Python interpreters on this machine: finding them, probing them, and choosing one for a jax release.

Candidates are the one given with `--python` (then only it), else the host's own, pyenv's, uv-managed ones (as
`uv python list` reports them) and python3.X on PATH. Each is probed once (a subprocess with fixed code, -I -S)
for its implementation, version and base executable; only regular (not free-threaded) CPython 3 counts. Of those
that fit a release (a minor its jaxlib has wheels for, admitted by jax's Requires-Python), the one whose minor
version is closest to the host's wins (ties: the newer), so that by default a release runs on the host's Python
whenever it can.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import NoSuitablePythonError
from .versions import python_allowed, python_release

__all__ = ["Interpreter", "InterpreterFinder", "PY_VERSION_RE", "requested_python", "probe", "candidate_paths", "uv_managed",
           "host_interpreter", "interpreter_from", "describe_minors"]

log = logging.getLogger(__name__)

PY_VERSION_RE = re.compile(r"^(?:python|py)?(\d+)\.(\d+)(?:\.(\d+))?$")  # --python 3.12, python3.12, py3.12.1
MIN_MINOR = 8  # older interpreters are not even probed: no jaxlib on the index supports them


@dataclass(frozen=True)
class Interpreter:
    executable: str  # the base interpreter (not a venv's), as the interpreter reports itself
    version: str  # "3.12.1"
    source: str  # where it was found: "--python", "host", "pyenv", "uv", "PATH"

    @property
    def minor(self) -> tuple[int, int]:
        major, minor = python_release(self.version).release[:2]
        return (major, minor)

    def describe(self) -> str:
        return f"{self.version} at {self.executable}"


def requested_python(spec: str) -> tuple[int, ...] | None:
    """The version a --python value asks for ("3.12" -> (3, 12)); None when it names an interpreter (a path, a
    command, or a file that happens to be called like a version)."""
    m = PY_VERSION_RE.match(spec)
    if m is None or os.path.exists(spec):
        return None
    return tuple(int(x) for x in m.groups() if x is not None)


def _has_version_prefix(version: str, want: tuple[int, ...]) -> bool:
    return python_release(version).release[: len(want)] == want


# Run with -I -S: about 40 ms per interpreter. A "t" in abiflags marks a free-threaded build.
_PROBE = (
    "import sys, json\n"
    "print(json.dumps({'impl': sys.implementation.name, 'version': sys.version.split()[0],"
    " 'exe': sys.executable, 'base': getattr(sys, '_base_executable', None) or sys.executable,"
    " 'ft': 't' in getattr(sys, 'abiflags', '')}))\n"
)
_probe_cache: dict[tuple[str, float], dict | None] = {}


def probe(path: str) -> dict | None:
    """What the interpreter at `path` says about itself (cached per file and mtime); None if it does not run."""
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
        else:
            log.debug("probe %s: exit %d", path, out.returncode)
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as e:
        log.debug("probe %s: %s: %s", path, type(e).__name__, e)
        info = None
    _probe_cache[key] = info
    return info


def _numbers_in_name(p: Path) -> list[int]:
    # Directory names, not versions: "3.12.1", "cpython-3.12.1-linux-x86_64-gnu", "3.13.0t".
    return [int(x) for x in re.findall(r"\d+", p.name)][:3]


def uv_managed(uv: str | None) -> list[str]:
    """The uv-managed CPython interpreters (regular builds, 3.MIN_MINOR+), newest first, as `uv python list` reports
    them; [] without uv or when it fails."""
    if not uv:
        return []
    try:
        # PATH emptied: uv otherwise runs every python on PATH to list them, only-managed or not (each pyenv shim is
        # a shell script that fails unless its version is selected: seconds on a machine with pyenv).
        r = subprocess.run([uv, "python", "list", "--only-installed", "--python-preference", "only-managed",
                            "--output-format", "json"], capture_output=True, text=True, timeout=30,
                           stdin=subprocess.DEVNULL, env={**os.environ, "PATH": ""})
        rows = json.loads(r.stdout) if r.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        log.debug("uv python list: %s: %s", type(e).__name__, e)
        return []
    out = []
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict):
            continue
        parts = row.get("version_parts") or {}
        if (row.get("implementation") == "cpython" and row.get("variant") == "default" and row.get("path")
                and parts.get("major") == 3 and isinstance(parts.get("minor"), int) and parts["minor"] >= MIN_MINOR):
            out.append(str(row["path"]))
    return out


def candidate_paths(uv: str | None) -> list[tuple[str, str]]:
    """(path, source) of interpreters worth probing, most preferred first: the host's, pyenv's, uv's, PATH's.

    uv's own discovery (`uv python list`) is used for the interpreters it manages only. It does not look in pyenv's
    versions folder (only at the shims on PATH, which run just the selected version), and listing PATH through it
    runs every shim there (seconds with pyenv installed); both are read here directly, shims skipped."""
    out: list[tuple[str, str]] = [(sys.executable, "host")]
    pyenv_root = Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")
    try:
        dirs = sorted((pyenv_root / "versions").iterdir(), key=_numbers_in_name, reverse=True)
    except OSError:
        dirs = []
    for d in dirs:
        bindir = d / "bin" if os.name != "nt" else d
        with contextlib.suppress(OSError):
            for exe in sorted(bindir.iterdir(), reverse=True):
                m = re.fullmatch(r"python3\.(\d+)(\.exe)?", exe.name)
                if m and int(m.group(1)) >= MIN_MINOR:
                    out.append((str(exe), "pyenv"))
                    break
    out += [(path, "uv") for path in uv_managed(uv)]
    names = [f"python3.{m}" for m in range(20, MIN_MINOR - 1, -1)] + ["python3"]
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        if not folder or Path(folder).name == "shims":  # pyenv/asdf shims: the real interpreters are found above
            continue
        for name in names:
            for suffix in ((".exe",) if os.name == "nt" else ("",)):
                path = os.path.join(folder, name + suffix)
                if os.path.isfile(path) and os.access(path, os.X_OK):
                    out.append((path, "PATH"))
    return out


def host_interpreter() -> Interpreter | None:
    """The interpreter running this code (its base, when it is a venv's), known without a subprocess."""
    if sys.implementation.name != "cpython" or "t" in getattr(sys, "abiflags", "") or sys.version_info[0] != 3:
        return None
    base = getattr(sys, "_base_executable", None) or sys.executable
    if not base or not os.path.exists(base):
        return None
    return Interpreter(os.path.realpath(base), sys.version.split()[0], "host")


def interpreter_from(path: str, source: str) -> Interpreter | None:
    """The interpreter at `path` if it is a regular CPython 3 (its base executable when `path` is a venv's)."""
    info = probe(path)
    if not info or info.get("impl") != "cpython" or info.get("ft"):
        return None
    try:
        if python_release(info["version"]).release[0] != 3:
            return None
    except (ValueError, TypeError, KeyError):
        return None
    base = info.get("base") or info.get("exe") or path
    return Interpreter(os.path.realpath(base), info["version"], source)


def describe_minors(minors: list[int]) -> str:
    if not minors:
        return "(none known)"
    lo, hi = min(minors), max(minors)
    if sorted(minors) == list(range(lo, hi + 1)):
        return f"3.{lo}" if lo == hi else f"3.{lo}-3.{hi}"
    return ", ".join(f"3.{m}" for m in sorted(minors))


class InterpreterFinder:
    """The interpreters one EnvironmentManager may build with: discovered once, then remembered."""

    def __init__(self, python: str | None, uv_bin: Callable[[], str | None]) -> None:
        """`python`: the --python value (a path, a command, or a version such as "3.12"), the only candidate when
        given. `uv_bin`: returns the uv binary, which knows where uv-managed interpreters live."""
        self.python = python
        self._uv_bin = uv_bin
        self._found: list[Interpreter] | None = None

    def user_interpreter(self) -> Interpreter | None:
        """The interpreter named with --python: a path, a command, or a version such as "3.12"."""
        assert self.python is not None
        spec = self.python
        want = requested_python(spec)
        if want is not None:
            for interp in self.discover(include_user=False):
                if _has_version_prefix(interp.version, want):
                    log.debug("--python %s: Python %s", spec, interp.describe())
                    return Interpreter(interp.executable, interp.version, "--python")
            log.info("--python %s: no Python %s among the interpreters found here", spec, spec)
            return None
        path = spec if (os.sep in spec or os.path.exists(spec)) else shutil.which(spec)
        if not path:
            log.info("--python %s: no such file or command", spec)
            return None
        return interpreter_from(os.path.expanduser(path), "--python")

    def discover(self, *, include_user: bool = True) -> list[Interpreter]:
        """Usable CPython interpreters, most preferred first (only the --python one when it was given)."""
        if include_user and self.python:
            interp = self.user_interpreter()
            return [interp] if interp else []
        if self._found is None:
            cands = candidate_paths(self._uv_bin())
            with concurrent.futures.ThreadPoolExecutor(max_workers=8) as pool:
                infos = list(pool.map(lambda c: interpreter_from(*c), cands))
            seen, found = set(), []
            for interp in infos:
                if interp and interp.executable not in seen:
                    seen.add(interp.executable)
                    found.append(interp)
            log.info("found %d CPython interpreters (of %d candidates): %s", len(found), len(cands),
                     "; ".join(f"{i.describe()} ({i.source})" for i in found) or "none")
            self._found = found
        return list(self._found)

    def fits(self, interp: Interpreter, minors: list[int], requires_python: str | None) -> bool:
        return interp.minor[0] == 3 and interp.minor[1] in minors and python_allowed(requires_python, interp.version)

    def runs_any(self, minors: list[int], requires_python: str | None) -> bool:
        """Whether some interpreter found here fits those minors and Requires-Python."""
        return any(interp.minor[1] in minors and python_allowed(requires_python, interp.version)
                   for interp in self.discover())

    def choose(self, version: str, minors: list[int], requires_python: str | None,
               jaxlib: str | None) -> Interpreter:
        """The interpreter to build jax `version`'s environment with, or NoSuitablePythonError saying what to do."""
        need = describe_minors(minors)
        if not self.python:
            host = host_interpreter()  # the host's minor is the closest possible: no need to look further
            if host and host.minor[1] in minors and python_allowed(requires_python, host.version):
                log.info("jax %s: using the host's Python %s (it supports CPython %s)", version, host.describe(),
                         need)
                return host
        found = self.discover()
        fits = [i for i in found if self.fits(i, minors, requires_python)]
        host_minor = sys.version_info[1]
        if fits:
            order = {id(i): n for n, i in enumerate(fits)}
            pick = min(fits, key=lambda i: (abs(i.minor[1] - host_minor), -i.minor[1], order[id(i)]))
            why = ("as given with --python" if self.python else
                   f"the closest to the host's 3.{host_minor} of {len(fits)} that fit")
            log.info("jax %s: using Python %s (%s; it supports CPython %s%s)", version, pick.describe(), why, need,
                     f", requires-python {requires_python}" if requires_python else "")
            return pick
        raise self._none_fits(version, minors, requires_python, jaxlib, found)

    def _none_fits(self, version: str, minors: list[int], requires_python: str | None, jaxlib: str | None,
                   found: list[Interpreter]) -> NoSuitablePythonError:
        """The error when no interpreter found fits: what jax needs, what was found, what to install or pass."""
        need = describe_minors(minors)
        host_minor = sys.version_info[1]
        why = f"jaxlib {jaxlib} has wheels for CPython {need}" if jaxlib else f"it supports CPython {need}"
        if requires_python:
            why += f"; jax requires-python {requires_python}"
        if self.python and found:
            exe = found[0].executable
            seen = f"--python {self.python} is Python {found[0].version}" + (
                f" ({exe})" if os.path.realpath(os.path.expanduser(self.python)) != exe else "")
        elif self.python:
            seen = (f"no Python {self.python} was found" if PY_VERSION_RE.match(self.python)
                    else f"--python {self.python} is not a usable CPython 3 interpreter")
        else:
            seen = "found " + (", ".join(i.describe() for i in found) if found else "no CPython interpreter")
        best = f"3.{min(minors, key=lambda m: (abs(m - host_minor), -m))}" if minors else "3"
        hint = (f"install Python {best} (e.g. `uv python install {best}` or `pyenv install {best}`), "
                f"or pass --python PATH to a Python {need} interpreter")
        if self.python:  # maybe another interpreter here would do
            others = [i for i in self.discover(include_user=False) if i.minor[1] in minors
                      and python_allowed(requires_python, i.version)]
            if others:
                pick = min(others, key=lambda i: (abs(i.minor[1] - host_minor), -i.minor[1]))
                hint = f"pass --python {pick.executable} (Python {pick.version}), or drop --python"
        return NoSuitablePythonError(f"jax {version} needs Python {need} ({why}); {seen}", hint=hint)
