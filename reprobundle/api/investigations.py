"""The Python API of the investigations: isolate, minimize, bisect, explain and investigate. Each checks its request,
resolves the store and ref, makes the environment manager, then calls reprobundle/investigate/ (the release search:
release_search.py; explain: explanation.py; the chain: chain.py); `reprobundle.api` re-exports them."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Sequence

from ..bundle.sharing import answered_pair
from ..envs.env_config import EnvConfig
from ..envs.manager import releases_of
from ..errors import UsageError
from ..investigate.case import Case
from ..investigate.explain.explanation import EXPLAIN_OPTIONS as EXPLAIN_OPTIONS
from ..investigate.minimize.pieces import DEFAULT_OPTIONS as ISOLATE_OPTIONS
from ..investigate.search.release_search import BISECT_OPTIONS as BISECT_OPTIONS
from ..run.contenders import ContenderSpec, contenders_from
from ..run.replay_options import ReplayOptions, replay_options
from .resolve import environment_manager, resolve


def isolate(ref: str, versions: Sequence[str], *, store: str | None = None, name: str | None = None,
            max_pieces: int = 8, options: ReplayOptions | None = None, python: str | None = None,
            env_dir: str | None = None, progress: Callable[[str], None] | None = None, **settings: Any):
    """Split a bundle's StableHLO into pieces (by source line, else before each op that does work), time each piece
    standalone on versions[0] and versions[1] in paired rounds, and pack the piece whose median moved most into
    `store` as `name` (default NAME-piece-K): a minimal repro. Returns a capture.isolate.Isolation. `options` or
    `settings`: replay's (warmup, repeat, max_time_s, pin, timeout_s), from ISOLATE_OPTIONS."""
    from ..investigate.minimize.pieces import isolate as _isolate

    if len(versions) != 2:
        raise UsageError("isolate compares two versions", hint="give --jax twice: the baseline, then the candidate")
    if max_pieces < 2:
        raise UsageError(f"invalid --pieces {max_pieces}", hint="at least 2")
    if name is not None:
        from ..bundle import manifest as mf

        mf.check_name(name)
    options = replay_options(options, settings, ISOLATE_OPTIONS)
    from ..envs.versions import check_jax_requests  # before anything runs: a typo is one error, not a failed isolation

    check_jax_requests(versions, releases_of(EnvConfig.of(env_dir, python)))
    registry, bundle = resolve(ref, store)
    if registry.store.read_only:
        raise UsageError(f"{ref} is in a read-only store", hint="pull it first: reprobundle pull " + ref)
    return _isolate(registry, bundle, list(versions), options, max_pieces=max_pieces, name=name,
                    env_manager=environment_manager(EnvConfig.of(env_dir, python)), progress=progress)


def minimize(ref: str, versions: Sequence[str] = (), *, variants: Sequence[str] = (), store: str | None = None,
             python: str | None = None, env_dir: str | None = None, **settings: Any):
    """investigate/minimize/reduction.py's minimize between `versions` then `variants` (the baseline first); `settings`: prop,
    bits, min_ratio, max_time_s, name, timeout_s, check, progress. Returns its Minimization (the piece NAME-min)."""
    from ..investigate.minimize.reduction import minimize as _minimize

    registry, bundle = resolve(ref, store)
    if registry.store.read_only:
        raise UsageError(f"{ref} is in a read-only store", hint="pull it first: reprobundle pull " + ref)
    if not versions and not variants:  # the last good and first bad release of a stored answer, in that order
        versions = answered_pair(registry, bundle)
    return _minimize(registry, bundle, contenders_from(versions, variants),
                     env_manager=environment_manager(EnvConfig.of(env_dir, python)), **settings)


def _explain_specs(ref: str, store: str | None, versions: Sequence[str | ContenderSpec]) -> list[ContenderSpec]:
    """explain's two contenders: those given, else the last good and first bad release of the bundle's latest
    stored answer; UsageError unless they are two different ones."""
    if not versions:
        versions = answered_pair(*resolve(ref, store))
    specs = [v if isinstance(v, ContenderSpec) else ContenderSpec(v) for v in versions]
    if len(specs) != 2 or specs[0] == specs[1]:
        raise UsageError("explain compares two different versions", hint="give --jax twice: e.g. --jax 0.7.2 --jax "
                                                                          "0.8.0 (without --jax: the last good and "
                                                                          "first bad release of a stored answer)")
    return specs


def bisect(ref: str, good: str, bad: str, *, store: str | None = None, options: ReplayOptions | None = None,
           python: str | None = None, env_dir: str | None = None, progress: Callable[[str], None] | None = None,
           executor=None, ray_address: str | None = None, nightly: bool = False, index_url: str | None = None,
           mode: str = "auto", by: str | None = None, layer: bool = True, jobs: int | None = None,
           timed_probes: bool = False, ledger=None, **settings: Any):
    """Find the first released JAX version between `good` and `bad` where the bundle regressed (every release
    tested on one platform: `platform`, else as replay chooses). `options` or `settings`: replay's (warmup, repeat,
    rounds, timeout_s, platform); no XLA dump is kept. `mode` "retrace": each release runs the bundle's program
    traced by it (a lowering change then has a first bad release; outputs that differ from the good release's are
    a regression too); "frozen": the stored module; "auto" (releases only; nightlies: frozen): both. `by`
    ("outputs", "bits", "time"): that criterion alone. Not told both, the endpoints run untimed in each mode and
    every kind of change present is bisected, the most severe first (investigate/search/mode_choice.py's survey, plan and
    bisect_each): the result is the headline, the others its `also`, a speedup or a time change its confirmation
    did not reproduce its `set_aside` (never a first bad release); `mode_why` says what was chosen and why.
    `layer`: which layer changed at the boundary, and the next command
    (investigate/search/boundary.py).

    With `nightly`, the nightlies between them instead (`good`/`bad`: releases or nightlies, `nightly:2025-10-03`),
    from `index_url` (else $REPROBUNDLE_NIGHTLY_INDEX, else JAX's nightly index): the result's `nightly` holds the
    last good and first bad builds with their commits, the compare URLs, the skipped days and the Reproduce lines
    (investigate/search/nightly_bisect.py).

    Only what the criterion needs is measured: the endpoints' outputs first, each version once, untimed; timed
    together only when outputs do not tell them apart. An outputs or bits bisection then tests up to `jobs` versions
    at once (default: execution.default_jobs of the platform it replays on: 1 on a TPU), each once and untimed; a
    time bisection times one version per step beside the good endpoint. `timed_probes` is the path before that (every probe
    timed, one version a step), kept to compare with. While a step runs, the environments of the next step's
    versions are made in the background. The result's `spent`: where the wall time went (run/spent.py).

    Each probe (the versions timed together) is a replay task (fleet/executor.py) run by `executor`, by default the
    local one (this process, one probe after another), or the Ray executor of `ray_address`; its runs are stored
    in the bundle's registry. A bundle in a read-only store (a .zip) is replayed here without storing its runs.
    `ledger` (run/spent.Ledger): where the probes are recorded, with the --max-time of the command that calls (a
    probe that would end past it is not started; the search keeps what it had narrowed); without one, the options'
    `max_time_s` (bisect --max-time) bounds the whole bisection so, from the call. A search cut short is stored
    `unfinished`, and the next call of the same question starts inside the window it had narrowed."""
    from ..investigate.search.release_search import bisect_releases, check_bisect_request, probe_executor
    from ..run.spent import Ledger

    options = replay_options(options, settings, BISECT_OPTIONS)
    ledger = ledger or Ledger(options.max_time_s)
    check_bisect_request(good, bad, mode, jobs, nightly, EnvConfig.of(env_dir, python), by)
    case = _case(ref, store, EnvConfig.of(env_dir, python, index_url), progress)
    executor = probe_executor(case.where()[0], ref, executor, ray_address)
    return bisect_releases(case, good, bad, options=options, executor=executor, nightly=nightly, mode=mode, by=by,
                           layer=layer, jobs=jobs, timed_probes=timed_probes, ledger=ledger)


def explain(ref: str, versions: Sequence[str | ContenderSpec], *, store: str | None = None,
            options: ReplayOptions | None = None, python: str | None = None, env_dir: str | None = None,
            progress: Callable[[str], None] | None = None, mode: str = "auto", by: str | None = None,
            release_delta: bool = True, screen: bool = True, profile: bool = False,
            reach: Sequence[str] | None = None, **settings: Any) -> dict:
    """Why versions[1] differs from versions[0] (investigate/explain/experiments.py): the evidence (per-pass dumps), frozen or
    retraced (`mode` "auto": retraced when only the retraced outputs differ), the criterion (`by`: outputs, bits or
    time; None: outputs when they differ beyond the tolerance, else time), experiments on the candidate from the
    defaults that changed between the two releases (`release_delta`), the passes and the curated flags, screened
    cheaply (`screen`), then measured; a diagnosis that names a changed default restoring the baseline, with the
    lines to paste and where it still works; "reproduce" replays a workaround if found. `profile`: the per-op
    profile in the measurement (a report's table); the answer is stored as a record beside its runs. `reach`: the
    releases a workaround found is measured on (None: those cached here after the candidate's, at most three)."""
    from ..investigate.explain.explanation import explain_between

    specs = _explain_specs(ref, store, versions)
    if mode not in ("auto", "frozen", "retrace") or by not in (None, "outputs", "bits", "time"):
        raise UsageError(f"explain takes --retrace or --frozen, and --by outputs, bits or time (not {mode!r}, {by!r})")
    options = replay_options(options, settings, base=EXPLAIN_OPTIONS)
    from ..envs.versions import check_jax_requests

    check_jax_requests([s.jax for s in specs] + list(reach or ()), releases_of(EnvConfig.of(env_dir, python)))
    case = _case(ref, store, EnvConfig.of(env_dir, python), progress)
    case.writable()  # refused before the environments are made
    return explain_between(case, specs, options, mode=mode, by=by, release_delta=release_delta, screen=screen,
                           profile=profile, reach=reach)


def investigate(ref: str, good: str, bad: str, *, store: str | None = None, max_time_s: float | None = None,
                issue_path: str | Path | None = None, python: str | None = None, env_dir: str | None = None,
                progress: Callable[[str], None] | None = None, mode: str = "auto",
                by: str | None = None, jax_repo: str | None = None, again: bool = False):
    """`reprobundle investigate`: investigate/chain.py's chain on `ref` between releases `good` and `bad` (or a JAX
    commit `bad`), an Investigation: the headline's whole chain and its issue body first (`report_written_s`), then
    the other changes, each written into the body as it lands; the body written to `issue_path` (default
    NAME-issue.md in the current folder), atomically, as answers come. A step that fails is one line (`failure`).
    `mode` ("auto", "frozen", "retrace") and `by` (None, "outputs", "bits", "time") direct the bisection as bisect's
    do. `jax_repo`: a clone of JAX (a folder or URL) for the first bad commit and the release notes
    (default: a clone an earlier `bisect-commits` left in the cache; none is made). A step whose answer is stored
    for the same question and builds is reused unless `again` (chain.py)."""
    from ..investigate.chain import investigate as chain
    from ..render.issue import issue_markdown

    if max_time_s is not None and max_time_s <= 0:
        raise UsageError(f"invalid --max-time {max_time_s}", hint="seconds, above 0")
    case = _case(ref, store, EnvConfig.of(env_dir, python), progress)
    return chain(case, good, bad, max_time_s=max_time_s, issue_path=issue_path, mode=mode, by=by,
                 jax_repo=jax_repo, markdown=issue_markdown, again=again)


def _case(ref: str, store: str | None, config: EnvConfig, progress) -> Case:
    """The case the searches work on: the ref resolved, the environment manager of `config`."""
    registry, bundle = resolve(ref, store)
    return Case(ref, store, config, environment_manager(config), progress, registry, bundle)
