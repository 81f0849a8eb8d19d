"""`envs --add` and `--add-commit`: environments made ahead of time (envs/ahead.py)."""

from __future__ import annotations

from typing import Callable, Sequence

from ..envs.ahead import Added, add_commit, add_release
from ..envs.env_config import EnvConfig
from .resolve import environment_manager


def add_environments(versions: Sequence[str], *, platform: str | None = None, python: str | None = None,
                     env_dir: str | None = None, progress: Callable[[str], None] | None = None) -> list[Added]:
    """The cached environment of each release in `versions`, built now where it is missing, on `platform` (default:
    the first accelerator here, else the CPU), with the interpreter `python` names; the index is the settings'
    (REPROBUNDLE_INDEX_URL, REPROBUNDLE_FIND_LINKS: what --index-url and --find-links set)."""
    manager = environment_manager(EnvConfig.of(env_dir, python))
    return [add_release(manager, v, platform=platform, progress=progress) for v in versions]


def add_commit_environment(commit: str, over: str, *, jax_repo: str | None = None, platform: str | None = None,
                           python: str | None = None, env_dir: str | None = None,
                           progress: Callable[[str], None] | None = None) -> Added:
    """A kept environment of JAX's Python at `commit` of `jax_repo` (a clone's path, or a URL cloned once into the
    cache; default JAX's public repository) over release `over`'s cached environment (built first if missing, as
    add_environments builds it): replay it with `--jax PATH` (its `env.path`)."""
    from ..envs.jax_commit import open_repo

    manager = environment_manager(EnvConfig.of(env_dir, python))
    repo = open_repo(jax_repo, manager.root, progress)
    return add_commit(manager, repo, commit, over, platform=platform, progress=progress)
