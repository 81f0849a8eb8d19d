"""Python interpreters on this machine, as uv finds them, and the choice of one for a jax release.

Discovery is uv's: `uv python list --only-installed --output-format json` (UV_PYTHON_DOWNLOADS=never: nothing is
downloaded) reports the uv-managed interpreters and those on the search path with their implementation, variant and
version (uv caches what it learns of each); a --python path or command is asked of uv the same way (`uv python list
SPEC`). Candidates are the host's own (known without a subprocess), then uv's list: pyenv's, uv-managed, PATH's. Only
regular (not free-threaded) CPython 3.8+ counts. Of those that fit a release (a minor its jaxlib has wheels for,
admitted by jax's Requires-Python), the one whose minor version is closest to the host's wins (ties: the newer), so
that by default a release runs on the host's Python whenever it can.

Hand-written still: the search path handed to uv (`search_path`): pyenv's versions/*/bin first and shim folders left
out, because uv neither looks in pyenv's versions folder nor skips shims (it runs each: seconds, each failing).
"""

from __future__ import annotations

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

__all__ = ["Interpreter", "InterpreterFinder", "PY_VERSION_RE", "requested_python", "search_path", "uv_interpreters",
           "host_interpreter", "describe_minors"]

log = logging.getLogger(__name__)

PY_VERSION_RE = re.compile(r"^(?:python|py)?(\d+)\.(\d+)(?:\.(\d+))?$")  # --python 3.12, python3.12, py3.12.1
MIN_MINOR = 8  # older interpreters do not count: no jaxlib on the index supports them
SOURCE_ORDER = ("--python", "host", "pyenv", "uv", "PATH")  # preferred first, among interpreters of one minor


@dataclass(frozen=True)
class Interpreter:
    executable: str  # the base interpreter (not a venv's, not a symlink)
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


def _numbers_in_name(p: Path) -> list[int]:
    # Directory names, not versions: "3.12.1", "3.13.0t".
    return [int(x) for x in re.findall(r"\d+", p.name)][:3]


def _pyenv_root() -> Path:
    return Path(os.environ.get("PYENV_ROOT") or Path.home() / ".pyenv")


def search_path() -> str:
    """The PATH uv searches: pyenv's installed versions (newest first), then PATH without shim folders (pyenv's,
    asdf's: the real interpreters are those above)."""
    try:
        versions = sorted((_pyenv_root() / "versions").iterdir(), key=_numbers_in_name, reverse=True)
    except OSError:
        versions = []
    folders = [str(d / "bin" if os.name != "nt" else d) for d in versions]
    folders += [f for f in os.environ.get("PATH", "").split(os.pathsep) if f and Path(f).name != "shims"]
    return os.pathsep.join(folders)


def _source(path: str, key: str) -> str:
    if Path(path).is_relative_to(_pyenv_root()):
        return "pyenv"
    return "uv" if key in Path(path).parts else "PATH"  # uv keeps a managed install in a folder named by its key


def _usable(row: object) -> bool:
    """A row of `uv python list`: a regular CPython 3.MIN_MINOR+ with a path."""
    if not isinstance(row, dict):
        return False
    parts = row.get("version_parts") or {}
    return (row.get("implementation") == "cpython" and row.get("variant") == "default" and bool(row.get("path"))
            and parts.get("major") == 3 and isinstance(parts.get("minor"), int) and parts["minor"] >= MIN_MINOR)


def uv_interpreters(uv: str | None, request: str | None = None) -> list[Interpreter]:
    """The regular CPython 3.8+ interpreters uv finds (those fitting `request`, a version, path or command, when
    given), each by its base executable, once per source; [] without uv or when it fails."""
    if not uv:
        return []
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    env.update(PATH=search_path(), UV_PYTHON_DOWNLOADS="never")
    cmd = [uv, "python", "list", "--only-installed", "--output-format", "json", "--no-config",
           *([request] if request else [])]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL, env=env)
        rows = json.loads(r.stdout) if r.returncode == 0 else []
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        log.debug("uv python list: %s: %s", type(e).__name__, e)
        return []
    if r.returncode != 0:
        log.debug("uv python list %s: exit %d: %s", request or "", r.returncode, r.stderr.strip()[-500:])
    found: dict[tuple[str, str], Interpreter] = {}
    for row in rows if isinstance(rows, list) else []:
        if _usable(row):
            base = os.path.realpath(row["path"])  # a venv's python and python3 links lead to the base interpreter
            interp = Interpreter(base, str(row["version"]), _source(row["path"], str(row.get("key"))))
            found.setdefault((base, interp.source), interp)
    return list(found.values())


def host_interpreter() -> Interpreter | None:
    """The interpreter running this code (its base, when it is a venv's), known without a subprocess."""
    if sys.implementation.name != "cpython" or "t" in getattr(sys, "abiflags", "") or sys.version_info[0] != 3:
        return None
    base = getattr(sys, "_base_executable", None) or sys.executable
    if not base or not os.path.exists(base):
        return None
    return Interpreter(os.path.realpath(base), sys.version.split()[0], "host")


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
        found = uv_interpreters(self._uv_bin(), os.path.abspath(os.path.expanduser(path)))
        if not found:
            log.info("--python %s: uv does not find a regular CPython 3.%d+ there", spec, MIN_MINOR)
            return None
        return Interpreter(found[0].executable, found[0].version, "--python")

    def discover(self, *, include_user: bool = True) -> list[Interpreter]:
        """Usable CPython interpreters, most preferred first (only the --python one when it was given)."""
        if include_user and self.python:
            interp = self.user_interpreter()
            return [interp] if interp else []
        if self._found is None:
            host = host_interpreter()
            unique: dict[str, Interpreter] = {}
            for interp in ([host] if host else []) + uv_interpreters(self._uv_bin()):
                unique.setdefault(interp.executable, interp)
            found = sorted(unique.values(), key=lambda i: SOURCE_ORDER.index(i.source))  # stable: uv's order within
            log.info("found %d CPython interpreters: %s", len(found),
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
        why = f"jaxlib {jaxlib} has wheels for CPython {need}" if jaxlib else f"it supports CPython {need}"
        if requires_python:
            why += f"; jax requires-python {requires_python}"
        return NoSuitablePythonError(f"jax {version} needs Python {need} ({why}); {self._what_was_seen(found)}",
                                     hint=self._what_to_do(minors, requires_python))

    def _what_was_seen(self, found: list[Interpreter]) -> str:
        if self.python and found:
            exe = found[0].executable
            return f"--python {self.python} is Python {found[0].version}" + (
                f" ({exe})" if os.path.realpath(os.path.expanduser(self.python)) != exe else "")
        if self.python:
            return (f"no Python {self.python} was found" if PY_VERSION_RE.match(self.python)
                    else f"--python {self.python} is not a usable CPython 3 interpreter")
        return "found " + (", ".join(i.describe() for i in found) if found else "no CPython interpreter")

    def _what_to_do(self, minors: list[int], requires_python: str | None) -> str:
        host_minor = sys.version_info[1]
        need = describe_minors(minors)
        if self.python:  # maybe another interpreter here would do
            others = [i for i in self.discover(include_user=False) if i.minor[1] in minors
                      and python_allowed(requires_python, i.version)]
            if others:
                pick = min(others, key=lambda i: (abs(i.minor[1] - host_minor), -i.minor[1]))
                return f"pass --python {pick.executable} (Python {pick.version}), or drop --python"
        best = f"3.{min(minors, key=lambda m: (abs(m - host_minor), -m))}" if minors else "3"
        return (f"install Python {best} (e.g. `uv python install {best}` or `pyenv install {best}`), "
                f"or pass --python PATH to a Python {need} interpreter")
