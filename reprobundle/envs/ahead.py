"""Environments made ahead of time (`envs --add`, `envs --add-commit`): a release's cached environment built before a
replay needs it (on an air-gapped machine, from the index it has), and JAX's Python at a commit over a release's
environment, kept for `replay --jax PATH` (envs/jax_commit.py makes and keeps it; here the release under it is
chosen and checked).

The platform is the one a replay on this machine would use without a bundle: `--platform`, else the first
accelerator detected here (a TPU machine's release environment is its `jax[tpu]` build), else the CPU.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

from ..errors import UsageError
from .env_folders import JaxEnvironment
from .jax_commit import JaxRepo, kept_environment, refuse_older_jaxlib
from .local_jax import is_path_request
from .manager import INSTALLED, EnvironmentManager
from .plan import VERSION_RE, normalize_request
from .platforms import platform_here

__all__ = ["Added", "add_release", "add_commit"]


@dataclass(frozen=True)
class Added:
    """An environment `envs --add` asked for: made now (`built`) or found cached, in `seconds`."""

    env: JaxEnvironment
    built: bool
    seconds: float
    over: JaxEnvironment | None = None  # a commit's: the release environment it runs over


def _release(request: str, option: str) -> str:
    """A request that names a release (or latest, or a nightly): the host's jax and a path are built by nobody."""
    text = normalize_request(request)
    if text == INSTALLED or is_path_request(text):
        raise UsageError(f"{option} {request}: {'the installed jax' if text == INSTALLED else 'a path'} is used as it "
                         "is, never built", hint=f"{option} takes a release such as 0.10.2 (or latest, or a nightly)")
    return text


def add_release(manager: EnvironmentManager, version: str, *, platform: str | None = None,
                progress: Callable[[str], None] | None = None) -> Added:
    """The cached environment of release `version` on `platform` (platforms.platform_here), built now unless it is
    there."""
    requested = _release(version, "--add")
    on, build = platform_here(platform)
    before = {e.path for e in manager.list()}
    t0 = time.perf_counter()
    env = manager.ensure(requested, platform=on, build=build, progress=progress)
    return Added(env, env.path not in before, round(time.perf_counter() - t0, 2))


def add_commit(manager: EnvironmentManager, repo: JaxRepo, commit: str, over: str, *, platform: str | None = None,
               progress: Callable[[str], None] | None = None) -> Added:
    """A kept environment of JAX's Python at `commit` of `repo` over release `over`'s cached environment (built
    first when missing). UsageError, before anything is built where the release alone tells, when the commit needs a
    newer jaxlib than the release's, and once it is there, when its jaxlib is newer than the commit's version (JAX's
    check at import refuses both)."""
    release = _release(over, "--over")
    t0 = time.perf_counter()
    sha = repo.sha_of(commit)
    version, minimum = repo.versions_at(sha)
    if VERSION_RE.match(release):  # a release's jaxlib is never newer than the release: said before any build
        refuse_older_jaxlib(sha, minimum, release)
    base = add_release(manager, release, platform=platform, progress=progress).env
    refuse_older_jaxlib(sha, minimum, base.jax_version, base.jaxlib_version or base.jax_version, version)
    if progress:
        progress(f"JAX at {sha[:10]} over jax {base.jax_version}'s environment ({base.build}) ...")
    path, made = kept_environment(repo, sha, base, manager.root)
    env = manager.ensure(str(path))
    return Added(env, made, round(time.perf_counter() - t0, 2), over=base)
