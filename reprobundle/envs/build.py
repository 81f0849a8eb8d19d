"""Building one environment: a venv made by uv at a temporary path, the requirements installed, jax imported there
on the environment's platform (the verification), the metadata written, then renamed into place."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Callable, Sequence

from packaging.version import Version

from ..errors import EnvironmentCreationError
from .env_folders import (
    METADATA_FILE,
    METADATA_SCHEMA,
    JaxEnvironment,
    dir_size,
    discard,
    dot_dirs,
    env_dir_name,
    read_env,
    rmtree,
    shared_size,
    venv_python,
)
from .interpreters import Interpreter
from .package_index import find_links, index_url
from .plan import NUMPY2_FIRST_JAX, QUICK_ML_DTYPES, requirements
from .platforms import ACCELERATORS, build_platform, platform_label
from .versions import same_release

log = logging.getLogger(__name__)

INSTALL_TIMEOUT_S = 1800.0  # uv install of jax, jaxlib and numpy (not the worker's timeout, see execution.py)
VERIFY_TIMEOUT_S = 600.0
_TAIL_LINES = 25
_VERIFY_MARK = "REPROBUNDLE-VERIFY "


def tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def _index_options(index: str | None, nightly: bool) -> list[str]:
    """uv's index options: `index` (--index-url; a nightly's is an extra index), else $REPROBUNDLE_INDEX_URL for a
    release (uv reads its own UV_* settings itself), and the find-links folders (package_index.find_links)."""
    index = index or (None if nightly else os.environ.get("REPROBUNDLE_INDEX_URL", "").strip() or None)
    options = ["--extra-index-url" if nightly else "--index-url", index] if index else []
    return options + [arg for folder in find_links() for arg in ("--find-links", folder)]


def _sources(options: Sequence[str]) -> str:
    """Where an install takes packages from, as an error says it: the index (--index-url's, else the settings'),
    a nightly's extra index, the find-links folders."""
    named = {"--index-url": "", "--extra-index-url": "and ", "--find-links": "and "}
    given = [f"{named[a]}{b}" for a, b in zip(options, options[1:]) if a in named]
    if not any(a == "--index-url" for a in options):
        given.insert(0, index_url())
    return " ".join(given)


def clean_env() -> dict[str, str]:
    """The environment for installer and verification subprocesses: nothing from the host's Python leaks in."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "CONDA_PREFIX",
                        "PYTHONDONTWRITEBYTECODE", "__PYVENV_LAUNCHER__")}
    env["UV_PYTHON_DOWNLOADS"] = "never"  # never fetch an interpreter behind the user's back
    env["PYTHONNOUSERSITE"] = "1"
    return env


_VERIFY = """
import importlib, importlib.metadata as md, importlib.util, json, os, platform, sys
import numpy
import jax
import jax.numpy as jnp
want = os.environ["JAX_PLATFORMS"]
devices = jax.devices()
def lowering(d):
    if d.platform != "gpu":
        return d.platform
    version = str(getattr(d.client, "platform_version", "")).lower()
    return "rocm" if ("rocm" in version or "hip" in version) else "cuda"
if not any(lowering(d) == want for d in devices):
    raise SystemExit("no %s device: jax sees %r" % (want, devices))
y = jax.jit(lambda x: x + 1)(jnp.arange(3))
if [int(v) for v in y] != [1, 2, 3]:
    raise SystemExit("jit(x + 1) gave %r" % (y,))
import msgpack
if importlib.util.find_spec("reprobundle") is not None:
    raise SystemExit("reprobundle is importable inside the environment")
print("__MARK__" + json.dumps({
    "jax": jax.__version__, "jaxlib": md.version("jaxlib"), "numpy": numpy.__version__,
    "python": platform.python_version(), "devices": [str(d) for d in devices],
    "device_kind": str(getattr(devices[0], "device_kind", "")),
    "packages": {d.metadata["Name"]: d.version for d in md.distributions()},
    "commits": {name: getattr(importlib.import_module(name + ".version"), "_git_hash", None)
                for name in ("jax", "jaxlib")},
}))
""".replace("__MARK__", _VERIFY_MARK)


class EnvironmentBuilder:
    """Builds environments under `root` with the uv binary `uv`; `index_error` is why the package index could not
    be read (None: it was), in which case uv installs offline, from its cache."""

    def __init__(self, root: Path, uv: str, index_error: str | None) -> None:
        self.root = root
        self.uv = uv
        self.index_error = index_error

    def build(self, version: str, interp: Interpreter, jaxlib: str | None, say: Callable[[str], None], *,
              build: str = "cpu", index: str | None = None, nightly: str | None = None) -> JaxEnvironment:
        """The environment of jax `version` (with `jaxlib`) for `build`, made with `interp`. `index`: the index it
        comes from when not the default one: a nightly's (`nightly`: its date), searched before the default index,
        or a mirror that replaces it."""
        start = time.perf_counter()
        pyminor = f"{interp.minor[0]}.{interp.minor[1]}"
        name = env_dir_name(version, build, pyminor)
        final = self.root / name
        for stale in dot_dirs(self.root, f".tmp-{name}-"):  # left by a killed builder (we hold the lock)
            log.info("removing %s, left by an interrupted build", stale)
            rmtree(stale)
        if final.exists():  # unfinished, broken (its base Python gone) or outdated (manager._find_existing): rebuild
            log.info("rebuilding %s: it is unfinished, its base Python is gone, or it is outdated", final)
            discard(self.root, final)
        tmp = self.root / f".tmp-{name}-{secrets.token_hex(4)}"
        on = "" if build == "cpu" else f" for {platform_label(build_platform(build))} ({build})"
        say(f"creating environment for jax {version}{on} (Python {interp.version}) ...")
        reqs, options = requirements(version, jaxlib, build, interp.minor)
        options = [*options, *_index_options(index, bool(nightly))]
        if not jaxlib:
            log.info("jax %s: the index is unreadable, so the jaxlib is left to the installer (jaxlib<=%s)",
                     version, version)
        if Version(version) < NUMPY2_FIRST_JAX:
            log.info("jax %s: numpy<2 (jaxlib releases before %s fail to import with NumPy 2)", version,
                     NUMPY2_FIRST_JAX)
        try:
            installer = self._install(tmp, interp, reqs, offline=not nightly and self.index_error is not None,
                                      say=say, options=options)
            say(f"verifying: importing jax in the new environment{' on ' + build_platform(build) if on else ''} ...")
            info = self._verify(tmp, version, build_platform(build))
            size, shared = dir_size(tmp), shared_size(tmp)
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
                "shared_bytes": shared,
                "platform": build_platform(build),
                "build": build,
                "installer_options": options,
                "device_kind": info.get("device_kind"),
                "commits": info.get("commits") or {},
                "nightly": nightly,
                "index": index,
            }
            _fix_paths(tmp, final)
            (tmp / METADATA_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
            os.rename(tmp, final)
        except BaseException:
            rmtree(tmp)
            raise
        env = read_env(final)
        assert env is not None
        say(f"ready in {time.perf_counter() - start:.1f} s: jax {env.jax_version}, jaxlib {env.jaxlib_version}, "
            f"numpy {env.numpy_version}, Python {env.python_version}"
            + (f", {build} on {info.get('device_kind') or build_platform(build)}" if on else "") + f" ({final})")
        return env

    def _run(self, cmd: list[str], what: str, version: str, *, timeout: float, cwd: Path | None = None,
             env: dict | None = None) -> str:
        unreachable = (f"; the package index was unreachable ({self.index_error}), so only the uv cache "
                       f"was used" if self.index_error else "")
        if log.isEnabledFor(logging.DEBUG):
            shown = " ".join(a if len(a) <= 200 else f"<{len(a)} characters>" for a in cmd)
            log.debug("%s: running %s (timeout %g s)", what, shown, timeout)
        try:
            r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               timeout=timeout, cwd=cwd or self.root, env=env or clean_env(),
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as e:
            out = e.output.decode("utf-8", "replace") if isinstance(e.output, bytes) else (e.output or "")
            raise EnvironmentCreationError(
                f"could not create the environment for jax {version}: {what} did not finish in {timeout:g} s\n"
                f"{tail(out)}", hint="check the network; rerun to retry") from None
        except OSError as e:
            raise EnvironmentCreationError(
                f"could not create the environment for jax {version}: {what} could not start: {e}",
                hint="check that uv (or python -m venv) works here") from None
        if r.returncode != 0:
            raise EnvironmentCreationError(
                f"could not create the environment for jax {version}: {what} failed "
                f"(exit {r.returncode}):\n{tail(r.stdout)}",
                hint="read the installer output above; check the network and the package index settings"
                     + unreachable)
        return r.stdout

    def _install(self, tmp: Path, interp: Interpreter, reqs: list[str], *, offline: bool,
                 say: Callable[[str], None], options: Sequence[str] = ()) -> str:
        """Create the venv at `tmp` and install `reqs` (with installer `options`, such as --find-links); returns
        uv's version."""
        version = reqs[0].split("==", 1)[1]
        prompt = f"jax-{version}"
        uv = self.uv
        log.info("jax %s: building with uv (%s)%s", version, uv,
                 ", offline (the index is unreachable): packages come from uv's cache only" if offline else "")
        uv_version = self._run([uv, "--version"], "uv --version", version, timeout=60).strip()
        self._run([uv, "venv", "--quiet", "--relocatable", "--python-preference", "only-system",
                   "--prompt", prompt, "--python", interp.executable, str(tmp)], "uv venv", version,
                  timeout=300)
        note = " (offline: the index is unreachable)" if offline else ""
        say(f"installing {' '.join(reqs)} with {uv_version}{note} ...")
        t = time.perf_counter()
        cmd = [uv, "pip", "install", "--python", str(venv_python(tmp)), "--python-preference", "only-system",
               *options, *reqs]
        if offline:
            cmd.insert(3, "--offline")
        try:
            out = self._run(cmd, f"uv pip install from {_sources(options)}", version, timeout=INSTALL_TIMEOUT_S)
        except EnvironmentCreationError:
            if QUICK_ML_DTYPES not in cmd:
                raise
            # an index (a mirror, a machine's own) that holds no ml_dtypes before 0.7: the newest it has, slower to
            # import, rather than no environment
            log.info("jax %s: no %s on the index; installing its newest ml_dtypes", version, QUICK_ML_DTYPES)
            cmd.remove(QUICK_ML_DTYPES)
            out = self._run(cmd, f"uv pip install from {_sources(options)}", version, timeout=INSTALL_TIMEOUT_S)
        n = sum(1 for line in out.splitlines() if line.startswith(" + "))
        say(f"installed {n} packages in {time.perf_counter() - t:.1f} s")
        return uv_version

    def _verify(self, tmp: Path, version: str, platform: str = "cpu") -> dict:
        env = clean_env()
        env["JAX_PLATFORMS"] = platform  # the verification fails unless that platform's devices are there
        if platform in ACCELERATORS:
            env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # never hold the device's memory to check it
        # -I: no cwd, PYTHONPATH or user site; bytecode is written so later imports are faster.
        what = "verification (import jax)" if platform == "cpu" else f"verification (import jax, {platform} devices)"
        out = self._run([str(venv_python(tmp)), "-I", "-c", _VERIFY], what, version,
                        timeout=VERIFY_TIMEOUT_S, cwd=tmp, env=env)
        line = next((ln for ln in reversed(out.splitlines()) if ln.startswith(_VERIFY_MARK)), None)
        if line is None:
            raise EnvironmentCreationError(
                f"could not create the environment for jax {version}: verification printed no result:\n"
                f"{tail(out)}", hint="report this as a bug")
        info = json.loads(line[len(_VERIFY_MARK):])
        if not same_release(info["jax"], version):
            raise EnvironmentCreationError(
                f"could not create the environment for jax {version}: it imports jax {info['jax']}",
                hint="report this as a bug")
        return info


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
