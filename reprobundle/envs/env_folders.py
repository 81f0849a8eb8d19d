"""The folder of cached environments: their names, their metadata, what is in it, the locks that keep one builder
per release, and removal (see envs.py for the layout)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

from ..config import settings
from .platforms import build_platform
from .versions import release_name

METADATA_FILE = "reprobundle-env.json"
# 2 (2026-12-06): ml_dtypes before 0.7 asked for where NumPy before 2.5 installs (plan.QUICK_ML_DTYPES); an
# environment of schema 1 that holds the slow pair is made again (manager._find_existing)
METADATA_SCHEMA = 2
# no build: cpu; a nightly's version ends in .devYYYYMMDD
ENV_DIR_RE = re.compile(r"^jax-(\d+(?:\.\d+)*(?:\.dev\d{8})?)(?:-(cuda\d+|rocm|tpu))?-py(\d+)\.(\d+)$")


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
    build: str = "cpu"  # "cpu", "cuda12", "cuda13", "rocm", "tpu": the wheels it holds (see platforms.py)
    shared_bytes: int | None = None  # of size_bytes, in files linked from uv's cache (shared with other envs)
    nightly: str | None = None  # a nightly's date (ISO), None for a release
    index: str | None = None  # the index its jax came from, when not the default one
    commits: tuple[tuple[str, str], ...] = ()  # (("jax", sha), ("jaxlib", sha)): what the version modules record
    local: bool = False  # --jax PATH: an interpreter reprobundle did not create, used as it is
    source_build: str | None = None  # --jax PATH: why its jaxlib counts as built from source; None: from an index
    over: str | None = None  # JAX at a commit (envs/jax_commit.py): the release whose environment it runs over
    packages: dict | None = field(default=None, compare=False)  # name -> version, as its metadata records them
    schema: int = 1  # of its metadata: what the reprobundle that made it asked for (METADATA_SCHEMA)

    @property
    def platform(self) -> str:
        """The platform the environment's jax runs on: "cpu", "cuda", "rocm", "tpu"."""
        return build_platform(self.build)

    def build_record(self) -> dict:
        """What a run records of the build it ran on (its environment's `jax_build`): where it came from ("release",
        "nightly" with its date and index, "local": --jax PATH, with why its jaxlib counts as built from source), and
        the commits its version modules record."""
        origin = "local" if self.local else "nightly" if self.nightly else "release" if self.path else "installed"
        record: dict = {"origin": origin, "commits": dict(self.commits)}
        if self.nightly:
            record.update(nightly=self.nightly, index=self.index)
        if self.local:
            record.update(path=str(self.path), source_build=self.source_build)
        return record


def env_dir_name(version: str, build: str, pyminor: str) -> str:
    """jax-0.8.0-py3.12 (the CPU build, named as it always was), jax-0.8.0-cuda13-py3.12 (the others)."""
    return f"jax-{version}-py{pyminor}" if build == "cpu" else f"jax-{version}-{build}-py{pyminor}"


def default_root() -> Path:
    env = settings().env_dir
    if env:
        return Path(env).expanduser()
    try:
        import platformdirs

        return Path(platformdirs.user_cache_dir("reprobundle")) / "envs"
    except ImportError:  # pragma: no cover - platformdirs is a dependency
        return Path.home() / ".cache" / "reprobundle" / "envs"



def read_env(d: Path) -> JaxEnvironment | None:
    """The finished environment in folder `d` (None: unfinished or unreadable)."""
    try:
        meta = json.loads((d / METADATA_FILE).read_text())
        return JaxEnvironment(
            jax_version=meta["jax_version"], python_executable=venv_python(d),
            python_version=meta["python_version"], path=d, created=meta.get("created"),
            size_bytes=meta.get("size_bytes"), jaxlib_version=meta.get("jaxlib_version"),
            numpy_version=meta.get("numpy_version"), build=str(meta.get("build") or "cpu"),
            shared_bytes=meta.get("shared_bytes"), nightly=meta.get("nightly"), index=meta.get("index"),
            commits=tuple(sorted((str(k), str(v)) for k, v in (meta.get("commits") or {}).items() if v)),
            packages=meta.get("packages") if isinstance(meta.get("packages"), dict) else None,
            schema=int(meta.get("schema") or 1))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def finished_envs(root: Path) -> list[JaxEnvironment]:
    """Every finished environment under `root`, in no particular order."""
    try:
        entries = list(root.iterdir())
    except OSError:
        return []
    found = (read_env(d) for d in entries if ENV_DIR_RE.match(d.name))
    return [env for env in found if env is not None]


def dot_dirs(root: Path, prefix: str) -> list[Path]:
    try:
        return [d for d in root.iterdir() if d.name.startswith(prefix)]
    except OSError:
        return []


def lock_path(root: Path, version: str, build: str = "cpu") -> Path:
    suffix = "" if build == "cpu" else f"-{build}"
    return root / ".locks" / f"jax-{release_name(version)}{suffix}.lock"


def discard(root: Path, path: Path) -> None:
    """Remove the environment folder `path`: renamed out of view at once, then deleted at leisure."""
    trash = root / f".trash-{secrets.token_hex(6)}"
    os.rename(path, trash)
    rmtree(trash)


def dir_size(path: Path) -> int:
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


def shared_size(path: Path) -> int:
    """Bytes of the regular files under `path` that have other hard links (uv links them from its cache, so other
    environments of the same packages share them on disk)."""
    import stat

    total, seen = 0, set()
    for dirpath, _dirs, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                if stat.S_ISREG(st.st_mode) and st.st_nlink > 1 and (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_size
    return total


def venv_python(env_dir: Path) -> Path:
    return env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def file_lock(path: Path, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """An exclusive inter-process lock held while the block runs (filelock: flock, msvcrt on Windows); `on_wait` is
    called once when another process holds it."""
    from filelock import FileLock, Timeout

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(path, mode=0o644)
    try:
        lock.acquire(blocking=False)
    except Timeout:
        if on_wait:
            on_wait()
        lock.acquire()
    try:
        yield
    finally:
        lock.release()
