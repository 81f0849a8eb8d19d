"""The "installed" pseudo-version: the host's own interpreter (or the one --python names) and the jax installed
there, used as it is; no environment is created."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

from ..errors import EnvironmentCreationError, NoSuitablePythonError
from .build import clean_env
from .env_folders import JaxEnvironment
from .interpreters import InterpreterFinder, requested_python


def keeps_pythonpath(python: str | Path) -> bool:
    """Whether a process of `python` runs with this process's PYTHONPATH (and -s, not -I): where `python` is this
    process's own interpreter, the "installed" release, as invoked (a virtual environment's link to the same binary
    is another interpreter), and PYTHONPATH is set. It then sees the jax that `python -c "import jax"` sees here,
    where a cluster or a container puts JAX on PYTHONPATH; the environments reprobundle builds stay isolated."""
    same = os.path.abspath(os.path.expanduser(str(python))) == os.path.abspath(sys.executable)
    return same and bool(os.environ.get("PYTHONPATH"))


def installed(python: str | None, interpreters: InterpreterFinder) -> JaxEnvironment:
    """The host's interpreter and its jax; with --python, that interpreter (as given) and its jax."""
    if python:
        return _installed_in_user_python(python, interpreters)
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

def _installed_in_user_python(spec: str, interpreters: InterpreterFinder) -> JaxEnvironment:
    if requested_python(spec) is not None:
        interp = interpreters.user_interpreter()
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
                           timeout=60, stdin=subprocess.DEVNULL, env=clean_env())
        jax_v, jaxlib_v, numpy_v, py_v = json.loads(r.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        raise NoSuitablePythonError(f"--python {spec}: could not run {path}",
                                    hint="pass the path of a working Python interpreter") from None
    if not jax_v:
        raise EnvironmentCreationError(f"jax is not installed in --python {spec} ({path})",
                                       hint="install jax there, or ask for a released version such as 0.8.0")
    return JaxEnvironment(jax_v, Path(os.path.expanduser(path)), py_v, None, None, None, jaxlib_v, numpy_v)
