"""Environments for a retraced program: `jax==V` plus the program's third-party packages, resolved compatible with V.

The release's own environment (envs.py) gives the interpreter and the exact jax, jaxlib and numpy; this module makes
a sibling environment with those pinned and the program's packages (flax, optax, ...) left to uv's resolver, which
takes the newest release of each that installs beside jax V. `overrides` ("flax==0.10.4", from
`--retrace-package`) pin a package instead. Cached under the environment root's `programs/` folder, keyed by the
release, build, Python and the package set, created under a lock like the release environments; the versions uv
chose are recorded there and in each run ("flax 0.10.4 (packed with 0.12.8)").
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ..errors import EnvironmentCreationError, UsageError
from .env_folders import file_lock

log = logging.getLogger(__name__)

METADATA = "reprobundle-program-env.json"
INSTALL_TIMEOUT_S = 1800.0
_REQUIREMENT = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
_TAIL = 15


@dataclass(frozen=True)
class ProgramEnvironment:
    python_executable: Path
    packages: dict[str, dict]  # name -> {"version": resolved here, "packed": version when packed}


def parse_overrides(texts: Sequence[str]) -> dict[str, str]:
    """`["flax==0.10.4"]` -> {"flax": "0.10.4"}; anything else is a UsageError."""
    out = {}
    for text in texts:
        m = _REQUIREMENT.match(text.strip())
        if m is None:
            raise UsageError(f"--retrace-package {text!r} is not NAME==VERSION", hint="e.g. --retrace-package flax==0.10.4")
        out[_canonical(m.group(1))] = m.group(2)
    return out


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _uv() -> str:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found is None:
            raise EnvironmentCreationError("retracing a program with third-party packages needs uv",
                                           hint="pip install uv") from None
        return found


def _run(cmd: list[str], what: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHONPATH", "VIRTUAL_ENV", "UV_PYTHON"))}
    try:
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=INSTALL_TIMEOUT_S,
                           env=env, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise EnvironmentCreationError(f"{what} failed: {e}", hint="check the network; rerun to retry") from None
    if r.returncode != 0:
        raise _Failed(r.stdout)
    return r.stdout


class _Failed(Exception):
    def __init__(self, output: str) -> None:
        super().__init__(output)
        self.output = output


def undeclared_export_needs(base) -> dict[str, str]:
    """Packages the release's own jax.export imports without declaring them: absl-py up to jax 0.5.x (its
    `_export.py` does `from absl import logging`). The worker stands in for it; a program captured in that release
    (`capture --jax`) runs jax.export itself, so its environment installs it. Read from the file, never imported."""
    found = sorted(Path(base.python_executable).parent.parent.glob("lib/python*/site-packages/jax/_src/export/_export.py"))
    if found and "from absl import" in found[0].read_text(errors="replace"):
        return {"absl-py": ""}
    return {}


def program_environment(base, root: Path, packed: Mapping[str, str], overrides: Mapping[str, str] | None = None,
                        say: Callable[[str], None] | None = None) -> ProgramEnvironment:
    """The environment of the release environment `base` (envs.JaxEnvironment) with the program's `packed`
    packages ({name: version when packed}) resolved compatible with its jax, `overrides` pinned."""
    say = say or (lambda _line: None)
    overrides = {_canonical(k): v for k, v in (overrides or {}).items()}
    names = sorted({_canonical(n) for n in packed} | set(overrides))
    wanted = [f"{n}=={overrides[n]}" if n in overrides else n for n in names]
    pins = [f"jax=={base.jax_version}"] + ([f"jaxlib=={base.jaxlib_version}"] if base.jaxlib_version else []) + (
        [f"numpy=={base.numpy_version}"] if base.numpy_version else []) + ["msgpack", "flatbuffers"]
    key = hashlib.sha256(json.dumps([pins, wanted, base.python_version, base.build]).encode()).hexdigest()[:12]
    folder = root / "programs" / f"jax-{base.jax_version}-{base.build}-{key}"
    folder.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(folder.parent / f".{folder.name}.lock",
                   lambda: say(f"waiting for another process building {folder.name} ...")):
        if not (folder / METADATA).is_file():
            _create(base, folder, pins, wanted, packed, say)
        meta = json.loads((folder / METADATA).read_text())
    resolved = meta["resolved"]
    packed_by_name = {_canonical(k): v for k, v in packed.items()}
    return ProgramEnvironment(folder / "bin" / "python",
                              {n: {"version": resolved.get(n, "?"), "packed": packed_by_name.get(n)} for n in names})


def _create(base, folder: Path, pins: list[str], wanted: list[str], packed: Mapping[str, str],
            say: Callable[[str], None]) -> None:
    uv = _uv()
    tmp = folder.with_name(f".tmp-{folder.name}-{secrets.token_hex(4)}")
    python = str(base.python_executable)
    say(f"creating the program's environment for jax {base.jax_version}: {' '.join(wanted)} resolved with it ...")
    try:
        try:
            _run([uv, "venv", "--quiet", "--relocatable", "--python", python, str(tmp)], "uv venv")
            _run([uv, "pip", "install", "--python", str(tmp / "bin" / "python"), *pins, *wanted], "uv pip install")
        except _Failed as e:
            raise _no_solution(base.jax_version, wanted, packed, e.output) from None
        frozen = _run([uv, "pip", "freeze", "--python", str(tmp / "bin" / "python")], "uv pip freeze")
        resolved = {_canonical(name): version for name, _, version in
                    (line.partition("==") for line in frozen.splitlines() if "==" in line)}
        (tmp / METADATA).write_text(json.dumps({"pins": pins, "wanted": wanted, "resolved": resolved}, indent=2,
                                               sort_keys=True) + "\n")
        os.rename(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    shown = ", ".join(f"{n.split('==')[0]} {resolved.get(_canonical(n.split('==')[0]), '?')}" for n in wanted)
    log.info("jax %s: the program's packages resolved to %s", base.jax_version, shown)
    say(f"resolved for jax {base.jax_version}: {shown}")


def _no_solution(jax_version: str, wanted: list[str], packed: Mapping[str, str], output: str) -> EnvironmentCreationError:
    tail = "\n".join(output.strip().splitlines()[-_TAIL:])
    names = [w.split("==")[0] for w in wanted]
    # the package uv's explanation names first is the one that does not fit (a pinned one, or the newest needed)
    mentioned = sorted((output.find(n), n) for n in names if output.find(n) >= 0)
    name = mentioned[0][1] if mentioned else (names[0] if names else "")
    example = f"{name}==VERSION" if name else "NAME==VERSION"
    return EnvironmentCreationError(
        f"no release of {', '.join(wanted)} installs beside jax {jax_version} (packed with "
        + ", ".join(f"{k} {v}" for k, v in sorted(packed.items())) + f"):\n{tail}",
        hint=f"pin a release that supports jax {jax_version}: --retrace-package {example}")
