"""`--jax PATH`: a Python interpreter, or a virtual environment, whose JAX is replayed as it is.

PATH is an interpreter (`/opt/conda/envs/x/bin/python`, a container's `python3`) or an environment folder (a venv, a
conda env: its `bin/python`). Nothing is installed into it and nothing is cached: it is asked, by running it, which
jax, jaxlib, numpy and Python it holds, the commits the version modules record (`_git_hash`), and whether its
jaxlib was built from source: a local version label (`0.8.1.dev20251003+abc1234`, what JAX's build/build.py gives a
wheel built from a checkout), an editable install, or an install from a file or folder rather than an index
(PEP 610's direct_url.json). The worker then runs on that interpreter, isolated (-I) as in any environment, so it
needs jax, numpy and msgpack there; a PATH without msgpack is refused with the command that adds it.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from ..errors import EnvironmentCreationError
from .env_folders import JaxEnvironment

__all__ = ["is_path_request", "interpreter_of", "inspect_interpreter", "source_build", "local_environment"]

PROBE_TIMEOUT_S = 120.0

_PROBE = r"""
import importlib, importlib.metadata as md, json, platform, sys
def version(name):
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None
def origin(name):
    try:
        text = md.distribution(name).read_text("direct_url.json")
    except md.PackageNotFoundError:
        return None
    return json.loads(text) if text else None
def git_hash(module):
    try:
        mod = importlib.import_module(module)
        return getattr(mod, "_git_hash", None)
    except Exception:
        return None
print("REPROBUNDLE-LOCAL " + json.dumps({
    "jax": version("jax"), "jaxlib": version("jaxlib"), "numpy": version("numpy"), "msgpack": version("msgpack"),
    "python": platform.python_version(), "executable": sys.executable, "prefix": sys.prefix,
    "jax_git_hash": git_hash("jax.version"), "jaxlib_git_hash": git_hash("jaxlib.version"),
    "jaxlib_origin": origin("jaxlib"), "jax_origin": origin("jax"),
}))
"""
_MARK = "REPROBUNDLE-LOCAL "


def is_path_request(request: str) -> bool:
    """Whether `--jax` names a path (it holds a separator, or starts with ~ or .), not a version or nightly."""
    text = request.strip()
    return os.sep in text or "/" in text or text.startswith(("~", "."))


def interpreter_of(request: str) -> Path:
    """The interpreter a PATH names: itself when it is a file, else the environment's bin/python (Scripts on
    Windows). EnvironmentCreationError when there is none."""
    path = Path(request.strip()).expanduser()
    if path.is_dir():
        for candidate in (path / "bin" / "python", path / "bin" / "python3", path / "Scripts" / "python.exe",
                          path / "python.exe"):
            if candidate.is_file():
                return candidate.absolute()
        raise EnvironmentCreationError(f"--jax {request}: the folder holds no Python interpreter (bin/python)",
                                       hint="name a virtual environment, a conda env, or an interpreter's path")
    if path.is_file() and os.access(path, os.X_OK):
        return path.absolute()  # not resolved: a venv's bin/python is a symlink whose target is another prefix
    raise EnvironmentCreationError(f"--jax {request}: no such interpreter or environment",
                                   hint="name a virtual environment folder or a Python interpreter")


def source_build(info: dict) -> str | None:
    """Why the jaxlib counts as built from source (None: an index's wheel)."""
    version, origin = str(info.get("jaxlib") or ""), info.get("jaxlib_origin") or {}
    if "+" in version:
        return f"jaxlib {version} has a local version label, as a wheel built from a checkout does"
    if (origin.get("dir_info") or {}).get("editable"):
        return f"jaxlib is an editable install of {origin.get('url')}"
    url = str(origin.get("url") or "")
    if url.startswith("file:"):
        return f"jaxlib was installed from {url}, not from an index"
    return None


def inspect_interpreter(request: str) -> dict:
    """What the interpreter PATH names holds: {"python_executable", "prefix", "jax", "jaxlib", "numpy", "python",
    "commits": {"jax", "jaxlib"}, "source_build": why its jaxlib is a local build, or None}. Raises
    EnvironmentCreationError when it cannot run, has no jax, or lacks msgpack (which the worker needs)."""
    python = interpreter_of(request)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"))}
    try:
        r = subprocess.run([str(python), "-I", "-c", _PROBE], capture_output=True, text=True, env=env,
                           timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EnvironmentCreationError(f"--jax {request}: {python} could not run: {e}",
                                       hint="name a working Python interpreter") from None
    line = next((ln for ln in reversed(r.stdout.splitlines()) if ln.startswith(_MARK)), None)
    if line is None:
        tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-5:])
        raise EnvironmentCreationError(f"--jax {request}: {python} is not a Python 3.8+ that runs (exit "
                                       f"{r.returncode}):\n{tail}", hint="name a working Python interpreter")
    info = json.loads(line[len(_MARK):])
    if not info["jax"]:
        raise EnvironmentCreationError(f"--jax {request}: jax is not installed in {python}",
                                       hint=f"{python} -m pip install jax, or name another environment")
    if not info["msgpack"]:
        raise EnvironmentCreationError(
            f"--jax {request}: msgpack is not installed in {python}; the worker reads its job with it "
            "(reprobundle installs nothing into an environment it did not create)",
            hint=f"{python} -m pip install msgpack")
    return {"python_executable": python, "prefix": info["prefix"], "jax": info["jax"], "jaxlib": info["jaxlib"],
            "numpy": info["numpy"], "python": info["python"],
            "commits": {"jax": info["jax_git_hash"], "jaxlib": info["jaxlib_git_hash"]},
            "source_build": source_build(info)}


def local_environment(request: str) -> JaxEnvironment:
    """`--jax PATH`: the interpreter or environment at PATH, its JAX as it is; nothing cached. A JAX commit's
    environment (envs/jax_commit.py) describes itself."""
    from .jax_commit import described

    known = described(request)
    if known is not None:
        return known
    info = inspect_interpreter(request)
    return JaxEnvironment(info["jax"], info["python_executable"], info["python"], Path(info["prefix"]), None, None,
                          info["jaxlib"], info["numpy"], local=True, source_build=info["source_build"],
                          commits=tuple(sorted((k, v) for k, v in info["commits"].items() if v)))
