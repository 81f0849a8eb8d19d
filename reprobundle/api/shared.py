"""What the public API's functions share with its investigations (api/investigations.py): resolving a ref, the
environment cache and its releases, a comparison of runs with its Reproduce block. Its own module, so that neither
imports back from the package that imports it."""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from ..bundle.registry import Bundle, Registry, open_ref
from ..envs.config import EnvConfig
from ..errors import ReproBundleError, UsageError
from ..run.contenders import concrete_versions, mode_of, variant_args


def resolve(ref: str, store: str | None = None) -> tuple[Registry, Bundle]:
    """Resolve a ref (NAME, NAME@3, NAME@TAG, sha256:PREFIX, a store URL ending in /NAME@3, or a .zip path)."""
    return open_ref(ref, store)


def environment_manager(config: EnvConfig | None = None):
    """The cache of per-version JAX environments that `config` describes (envs/config.py; default: $REPROBUNDLE_ENV_DIR
    or the user cache, the interpreter chosen per release, the default indexes)."""
    from ..envs.manager import EnvironmentManager

    return EnvironmentManager(config)


def probe_jobs(bundle: Bundle, options) -> int:
    """How many untimed probes a bisection of `bundle` runs at once by default: execution.default_jobs of the
    platform its replays run on (replay_platform: --platform, else the bundle's accelerator here, else the CPU)."""
    from ..run.execution import default_jobs
    from ..run.replay import replay_platform

    try:
        platform = replay_platform(bundle, options.platform).platform
    except ReproBundleError:  # no platform here runs it: the replays say so, as they always did
        platform = "cpu"
    return default_jobs(platform)


def releases_of(config: EnvConfig) -> Callable[[], list[str]]:
    """The releases a --jax request is checked against before anything runs: the default index's, as always (an
    --index-url may be a nightly index)."""
    return lambda: environment_manager(replace(config, index_url=None, nightly_index=None)).available_versions()


def comparison_of(registry: Registry, bundle: Bundle, runs: Sequence[dict], baseline: str | None = None, *,
                  origin: tuple[Registry, Bundle] | None = None, replay_args: Sequence[str] = (),
                  reproduce: bool = True) -> dict:
    """The multi-version comparison of `runs` (see comparison.build_comparison), loading their HLO and outputs;
    with `reproduce`, its "reproduce" block (bundle/sharing.reproduce_info) names the bundle where `origin`
    (registry, bundle; default: these) holds it."""
    from ..run.compare import compare_runs

    try:
        comparison = compare_runs(registry, bundle, runs, baseline)
    except ValueError as e:
        raise UsageError(str(e), hint="--baseline names one of the replayed versions, or 'reference'") from None
    if reproduce:
        from ..bundle.sharing import reproduce_info

        source, there = origin or (registry, bundle)
        mode = mode_of(runs)
        extra = [*variant_args(runs, concrete_versions), *replay_args] + (["--mode", mode] if mode != "frozen" else [])
        comparison["reproduce"] = reproduce_info(source, there, concrete_versions(runs), extra_args=extra)
    return comparison


def changes(a: str, b: str, *, python: str | None = None, env_dir: str | None = None, platform: str | None = None,
            progress: Callable[[str], None] | None = None) -> dict:
    """What changed from release `a` to release `b`, read from the releases themselves (their environments for
    `platform` are made if missing; default: this machine's accelerator, else the CPU): XLA flags and JAX options
    added, removed and with another default, libtpu's flags by name on a TPU, and their revisions
    (analysis/release_delta.py; envs/release_facts.py caches each release's facts beside its environment)."""
    from ..analysis.release_delta import release_delta
    from ..envs.platforms import platform_here
    from ..envs.release_facts import release_facts
    from ..envs.versions import check_jax_requests

    config = EnvConfig.of(env_dir, python)
    check_jax_requests([a, b], releases_of(config))
    manager = environment_manager(config)
    chosen, build = platform_here(platform)
    facts = [release_facts(manager.ensure(v, platform=chosen, build=build, progress=progress), progress)
             for v in (a, b)]
    return {**release_delta(a, b, *facts), "platform": chosen, "cached": [f["cached"] for f in facts]}
