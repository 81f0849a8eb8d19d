"""`bisect_commits`: from "jax 0.7.2 broke it" to the JAX commit that did: the request checked, then
investigate/search/commit_search.py's search."""

from __future__ import annotations

from typing import Any, Callable

from ..envs.env_config import EnvConfig
from ..errors import UsageError
from ..investigate.case import Case
from ..investigate.search.commit_search import COMMIT_OPTIONS as COMMIT_OPTIONS
from ..run.replay_options import ReplayOptions, replay_options
from .resolve import environment_manager


def bisect_commits(ref: str, good: str | None = None, bad: str | None = None, *, store: str | None = None,
                   jax_repo: str | None = None, xla_repo: str | None = None, options: ReplayOptions | None = None,
                   python: str | None = None, env_dir: str | None = None, jobs: int | None = None,
                   progress: Callable[[str], None] | None = None, max_time_s: float | None = None,
                   ledger=None, **settings: Any) -> dict:
    """The first bad JAX commit between the last good and the first bad release of the bundle's release bisection,
    or, where `bad` names a commit of the repository rather than a release (a hash or a prefix, a branch such as
    main, a tag that is no release: a commit window), between the release `good` and that commit.

    The release bisection is the latest one stored beside the bundle whose window is `good`..`bad` (any, when
    neither is given); with `good` and `bad` and none stored, it is run first (api.bisect, retraced). It must have
    found the change in JAX's lowering by outputs or bits: a change in the compiler is refused (no JAX commit
    carries it). A commit window has no release bisection: its criterion comes from its ends, the good release
    and the bad commit over the good release's jaxlib, retraced (investigate/search/commit_bisect.criterion_of_ends), and
    the layer is JAX's lowering by construction; where they do not differ the answer says so and nothing is
    searched. Each probe runs JAX's Python at a commit of `jax_repo` (a path, or a URL cloned once into the
    cache; default JAX's public repository) over the released jaxlib it accepts, retraced, untimed, up to `jobs`
    commits at once (default: execution.default_jobs of the platform the bundle replays on: 1 on a TPU). Returns
    the answer (investigate/search/commit_bisect.py's `answer_of`, with "lowering", "spent", "probes", "xla" (the
    releases' XLA window: investigate/search/xla_window.py; None for a commit window, whose probes all run one jaxlib) and
    "answer_id": the record stored beside the runs).

    `max_time_s` (--max-time) counts from the call: no probe is started that would end past it (the release
    bisection run first included); a search it cuts short answers the window it had narrowed ("unfinished", no first
    bad commit claimed), stored, and the next call of the same question goes on from there ("resumed"). `ledger`
    (run/spent.Ledger): where the probes are recorded, with the --max-time of the command that calls."""
    from ..investigate.search.commit_search import commits_between

    options = replay_options(options, settings, COMMIT_OPTIONS).outputs_only()
    if jobs is not None and jobs < 1:
        raise UsageError(f"invalid --jobs {jobs}", hint="at least 1")
    if max_time_s is not None and not max_time_s > 0:
        raise UsageError(f"invalid --max-time {max_time_s:g}", hint="seconds, above 0")
    config = EnvConfig.of(env_dir, python)
    case = Case(ref, store, config, environment_manager(config), progress)  # the ref resolved where the window says
    return commits_between(case, good, bad, jax_repo=jax_repo, xla_repo=xla_repo, options=options, jobs=jobs,
                           max_time_s=max_time_s, ledger=ledger)
