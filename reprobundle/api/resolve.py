"""What the public API's functions share with its investigations (api/investigations.py): resolving a ref, the
environment cache and its releases, `changes`. Its own module, so that neither imports back from the package that
imports it."""

from __future__ import annotations

from typing import Callable

from ..bundle.registry import Bundle, Registry, open_ref
from ..envs.env_config import EnvConfig
from ..envs.manager import releases_of as releases_of  # re-exported: the faces check --jax requests against it


def resolve(ref: str, store: str | None = None) -> tuple[Registry, Bundle]:
    """Resolve a ref (NAME, NAME@3, NAME@TAG, sha256:PREFIX, a store URL ending in /NAME@3, or a .zip path)."""
    return open_ref(ref, store)


def environment_manager(config: EnvConfig | None = None):
    """The cache of per-version JAX environments that `config` describes (envs/env_config.py; default: $REPROBUNDLE_ENV_DIR
    or the user cache, the interpreter chosen per release, the default indexes)."""
    from ..envs.manager import EnvironmentManager

    return EnvironmentManager(config)


def changes(a: str, b: str, *, python: str | None = None, env_dir: str | None = None, platform: str | None = None,
            progress: Callable[[str], None] | None = None) -> dict:
    """What changed from release `a` to release `b`, read from the releases themselves (their environments for
    `platform` are made if missing; default: this machine's accelerator, else the CPU): XLA flags and JAX options
    added, removed and with another default, libtpu's flags by name on a TPU, and their revisions
    (analysis/release_delta.py; envs/release_facts.py caches each release's facts beside its environment)."""
    from ..envs.release_facts import release_changes
    from ..envs.versions import check_jax_requests

    config = EnvConfig.of(env_dir, python)
    check_jax_requests([a, b], releases_of(config))
    return release_changes(environment_manager(config), a, b, platform, progress)
