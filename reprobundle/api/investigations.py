"""The Python API of the investigations: isolate, minimize, bisect and explain. Each resolves the store and ref,
then delegates to reprobundle/investigate/; `reprobundle.api` re-exports them."""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from ..bundle.model import run_label
from ..bundle.registry import Bundle, Registry
from ..bundle.sharing import answered_pair
from ..envs.config import EnvConfig
from ..errors import UsageError
from ..investigate.isolate import DEFAULT_OPTIONS as ISOLATE_OPTIONS
from ..run.contenders import ContenderSpec, concrete_versions, contenders_from, variant_args
from ..run.options import ReplayOptions, replay_options
from ..run.replay import replay as _replay
from .shared import comparison_of, environment_manager, probe_jobs, releases_of, resolve

BISECT_OPTIONS = ReplayOptions(dump=False, profile=False)  # a probe needs its verdict: no XLA dump, no per-op profile


def isolate(ref: str, versions: Sequence[str], *, store: str | None = None, name: str | None = None,
            max_pieces: int = 8, options: ReplayOptions | None = None, python: str | None = None,
            env_dir: str | None = None, progress: Callable[[str], None] | None = None, **settings: Any):
    """Split a bundle's StableHLO into pieces (by source line, else before each op that does work), time each piece
    standalone on versions[0] and versions[1] in paired rounds, and pack the piece whose median moved most into
    `store` as `name` (default NAME-piece-K): a minimal repro. Returns a capture.isolate.Isolation. `options` or
    `settings`: replay's (warmup, repeat, max_time_s, pin, timeout_s), from ISOLATE_OPTIONS."""
    from ..investigate.isolate import isolate as _isolate

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
    """investigate/minimize.py's minimize between `versions` then `variants` (the baseline first); `settings`: prop,
    bits, min_ratio, max_time_s, name, timeout_s, check, progress. Returns its Minimization (the piece NAME-min)."""
    from ..investigate.minimize import minimize as _minimize

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
    every kind of change present is bisected, the most severe first (investigate/mode_choice.py's survey, plan and
    bisect_each): the result is the headline, the others its `also`, a speedup or a time change its confirmation
    did not reproduce its `set_aside` (never a first bad release); `mode_why` says what was chosen and why.
    `layer`: which layer changed at the boundary, and the next command
    (investigate/boundary.py).

    With `nightly`, the nightlies between them instead (`good`/`bad`: releases or nightlies, `nightly:2025-10-03`),
    from `index_url` (else $REPROBUNDLE_NIGHTLY_INDEX, else JAX's nightly index): the result's `nightly` holds the
    last good and first bad builds with their commits, the compare URLs, the skipped days and the Reproduce lines
    (investigate/nightly_bisect.py).

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
    probe that would end past it is not started; the search keeps what it had narrowed)."""
    from ..envs.prefetch import Prefetch
    from ..run.spent import Ledger

    options = replay_options(options, settings, BISECT_OPTIONS)
    _check_bisect_request(good, bad, mode, jobs, nightly, EnvConfig.of(env_dir, python), by)
    registry, bundle = resolve(ref, store)
    manager = environment_manager(EnvConfig.of(env_dir, python, index_url))
    executor = _probe_executor(registry, ref, executor, ray_address)
    ledger = ledger or Ledger()
    probes = _Probes(registry, bundle, options, executor, manager, progress, ledger, timed_probes)
    jobs = 1 if timed_probes else jobs or probe_jobs(bundle, options)
    with Prefetch(manager, jobs) as prefetch:
        if nightly:
            search = _Search(probes, "frozen" if mode == "auto" else mode, jobs, prefetch.want, by)
            result, comparison = _bisect_nightlies(registry, bundle, manager, good, bad, search, options, progress)
            result.mode = search.mode
            _stands(result)
        else:
            result, search = _every_kind(probes, mode, by, jobs, prefetch.want, (good, bad), manager, progress)
            comparison = _comparison_of_bisect(registry, bundle, result, run_label(result.runs[good]))
        if layer:
            result.layer = _layer(search, result, probes, timed_probes, (ref, store, options))
    if not nightly and (ledger.left() is None or (ledger.left() or 0.0) > 0):
        result.changed_defaults = _changed_defaults(result, python, env_dir, progress)
    result.spent = ledger.as_dict()
    result.answer_id = _stored_answer(registry, bundle, result, ref, None if mode == "auto" else mode)
    return result, comparison


def _layer(search, result, probes, timed_probes: bool, asked: tuple) -> dict | None:
    """The layer at the boundary (investigate/boundary.py), None where --max-time left no time to read it."""
    from ..errors import TimeSpentError

    ref, store, options = asked
    by_time = result.criterion == "time" or timed_probes
    try:
        return search.layer(result, lambda m, timed=True: probes.probe(m, by_time and timed), ref,
                            ["--store", store] if store else [], options.args())
    except TimeSpentError as e:
        if probes.progress:
            probes.progress(f"bisect: the layer at the boundary was not read: {e.message}")
        return None


def _stands(result) -> None:
    """A UsageError where the bisection's first bad build is none: a time change its confirmation did not
    reproduce (investigate/bisection.confirm)."""
    from ..investigate.bisection import standing

    if not standing(result):
        raise UsageError(f"no change stood between {result.good} and {result.bad}: time: "
                         f"{(result.confirmation or {}).get('why')}", hint="bisect again with more --rounds")


def _changed_defaults(result, python: str | None, env_dir: str | None, progress) -> list[dict] | None:
    """The defaults that changed from the last good to the first bad release (a frequent cause); None where the
    releases could not say (the bisection's answer stands without it)."""
    from ..analysis.release_delta import changed_defaults
    from ..errors import ReproBundleError
    from .shared import changes

    if result.last_good == result.first_bad:
        return None
    try:
        return changed_defaults(changes(result.last_good, result.first_bad, python=python, env_dir=env_dir,
                                        progress=progress))
    except ReproBundleError as e:
        if progress:
            progress(f"bisect: the releases' flags and options were not read: {e.message}")
        return None


def _stored_answer(registry: Registry, bundle: Bundle, result, ref: str, forced_mode: str | None) -> str | None:
    from ..investigate.answers import bisect_command, store_bisection

    return store_bisection(registry, bundle, result, bisect_command(ref, result, forced_mode))


def _probe_executor(registry: Registry, ref: str, executor, ray_address: str | None):
    """Where the probes run: `executor`, Ray's at `ray_address`, else here; a read-only store allows only here."""
    from ..fleet.connect import executor_for

    if registry.store.read_only and (executor is not None or ray_address):
        raise UsageError(f"{ref} is in a read-only store: probes on an executor store their runs in it",
                         hint="pull it first: reprobundle pull " + ref)
    return executor or executor_for(ray_address)


def _with_tried(e: UsageError, chosen_why: str | None) -> UsageError:
    return e if chosen_why is None else UsageError(f"{e.message}; {chosen_why}", hint=e.hint)


def _check_bisect_request(good: str, bad: str, mode: str, jobs: int | None, nightly: bool, config: EnvConfig,
                          by: str | None = None) -> None:
    """What a bisection refuses before anything runs: a mode, a criterion, --jobs, an endpoint that is no release,
    reversed endpoints."""
    from ..envs.versions import check_jax_requests, version_key
    from ..investigate.bisection import BY

    if mode not in ("auto", "frozen", "retrace"):
        raise UsageError(f"bisect runs one mode at a time, not {mode!r}",
                         hint="--retrace, --frozen, or neither (chosen from the endpoints)")
    if by is not None and by not in BY:
        raise UsageError(f"--by {by!r} is not one of {', '.join(BY)}")
    if jobs is not None and jobs < 1:
        raise UsageError(f"invalid --jobs {jobs}", hint="at least 1")
    check_jax_requests([good, bad], releases_of(config), options=["--good", "--bad"])
    if not nightly and version_key(good) >= version_key(bad):
        raise UsageError(f"--good {good} must be older than --bad {bad}")


def _comparison_of_bisect(registry: Registry, bundle: Bundle, result, baseline: str) -> dict:
    from ..envs.versions import version_key

    tested = [result.runs[v] for v in sorted(result.runs, key=version_key)]
    return comparison_of(registry, bundle, tested, baseline=baseline)


class _Probes:
    """A bisection's probes: replays of some versions as fleet tasks (investigate/probes.py), timed or outputs only
    (ReplayOptions.outputs_only), each recorded in the ledger."""

    def __init__(self, registry: Registry, bundle: Bundle, options: ReplayOptions, executor, manager, progress,
                 ledger, timed_only: bool):
        self.args = (registry, bundle)
        self.options, self.executor, self.manager, self.progress = options, executor, manager, progress
        self.ledger, self.timed_only = ledger, timed_only
        self.seen: dict[tuple, list[dict]] = {}

    def probe(self, mode: str, timed: bool = True):
        """Versions -> runs; the runs of versions already probed the same way are reused (the endpoints' probe of
        the mode choice is the bisection's first)."""
        from ..investigate.probes import replay_probe

        timed = timed or self.timed_only
        options = self.options if timed else self.options.outputs_only()
        replay = replay_probe(*self.args, options, executor=self.executor, env_manager=self.manager,
                              progress=self.progress, mode=mode, left=self.ledger.left)
        what = ("timed" if timed else "untimed") + ("" if mode == "frozen" else f" {mode}")
        watched = self.ledger.watched(what, replay, concurrent=not timed)

        def remembered(versions: Sequence[str]) -> list[dict]:
            key = (mode, timed, tuple(versions))
            if key not in self.seen:
                self.seen[key] = watched(versions)
            return self.seen[key]

        return remembered

    def fresh(self, mode: str, what: str, options: ReplayOptions | None = None):
        """Versions -> runs measured anew, timed (`options`, default the bisection's), never remembered nor
        reused: a confirmation, a time screen (investigate/bisection.confirm, mode_choice.time_screen)."""
        from ..investigate.probes import replay_probe

        replay = replay_probe(*self.args, options or self.options, executor=self.executor, env_manager=self.manager,
                              progress=self.progress, mode=mode, left=self.ledger.left)
        return self.ledger.watched(what + ("" if mode == "frozen" else f" {mode}"), replay, concurrent=False)


class _Search:
    """One bisection's search with its probes (timed, and outputs only unless every probe is timed), `jobs` versions
    a step for outputs, environments asked for ahead of need, and the layer at the boundary."""

    def __init__(self, probes: _Probes, mode: str, jobs: int, ahead, by: str | None):
        from ..investigate.probes import output_difference

        self.probes, self.mode, self.jobs, self.ahead, self.by = probes, mode, jobs, ahead, by
        self.compare = output_difference(*probes.args)

    def run(self, versions, good: str, bad: str, progress, known=None, left_out=None):
        from ..investigate.bisection import bisect_every_change as _bisect

        checks = None if self.probes.timed_only else self.probes.probe(self.mode, timed=False)
        return _bisect(versions, good, bad, self.probes.probe(self.mode), progress=progress, known=known,
                       outputs_differ=self.compare, by=self.by, check_together=checks, jobs=self.jobs,
                       ahead=self.ahead, left_out=left_out, confirm_with=self.probes.fresh(self.mode, "confirm"))

    def layer(self, result, probe_for, ref: str, store_args, replay_args):
        from ..investigate.boundary import layer_at_boundary

        return layer_at_boundary(self.probes.args[0], self.probes.args[1], result, self.mode, probe_for,
                                 self.compare, self.probes.progress, next_args=(ref, store_args, replay_args))


def _every_kind(probes: _Probes, mode: str, by: str | None, jobs: int, ahead, ends: tuple[str, str], manager,
                progress: Callable[[str], None] | None):
    """(the headline's BisectResult, its search): told both the mode and the criterion, that one bisection; else
    the endpoints run untimed in each mode (both where the bundle can be retraced: investigate/mode_choice.py's
    survey) and every kind of change present bisected, the most severe first (mode_choice.plan). The first that
    stands is the headline; the others are its `also`, and what was examined and is no regression (a speedup, no
    settled change, a time change the confirmation did not reproduce) its `set_aside`."""
    from ..investigate.mode_choice import bisect_each, plan, survey, time_screen
    from ..investigate.probes import output_difference
    from ..run.options import screen_options
    from ..run.retrace import retrace_refusal

    good, bad = ends
    versions, left_out = manager.available_versions(), manager.left_out_versions()
    steps, why = [(mode, str(by))], None
    if mode == "auto" or by is None:
        refusal = retrace_refusal(probes.args[1].manifest) if mode == "auto" else None
        modes = [mode] if mode != "auto" else ["frozen"] + ([] if refusal else ["retrace"])
        compare = output_difference(*probes.args)
        steps, why = plan(survey(good, bad, {m: probes.probe(m, timed=False) for m in modes}, compare), by, refusal)
        if progress:
            progress(f"bisect: {why}")
    searches = {}

    def run_one(step_mode: str, kind: str):
        searches[step_mode] = _Search(probes, step_mode, jobs, ahead, kind)
        return searches[step_mode].run(versions, good, bad, progress, left_out=left_out)

    def screen_time(step_mode: str) -> dict:  # whether the frozen module also got slower: a bounded screen
        return time_screen(good, bad, probes.fresh(step_mode, "screen", screen_options(probes.options)))

    try:
        head = bisect_each(steps, run_one, by, why, progress, screen_time)
    except UsageError as e:  # an answer that tells nothing apart says what was tried
        raise _with_tried(e, why) from None
    return head, searches[head.mode]


def _bisect_nightlies(registry: Registry, bundle: Bundle, manager, good: str, bad: str, search: _Search,
                      options: ReplayOptions, progress: Callable[[str], None] | None):
    """bisect --nightly: the days between `good` and `bad` searched with `search`, and the answer's builds,
    commits, compare URLs and Reproduce lines (investigate/nightly_bisect.py)."""
    from ..investigate import nightly_bisect

    plan = nightly_bisect.plan_search(manager, good, bad)
    if progress and plan.skipped:
        progress(f"bisect: {len(plan.skipped)} day(s) without a nightly are skipped: "
                 + ", ".join(s["date"] for s in plan.skipped))
    result = search.run(plan.candidates, plan.good, plan.bad, progress, known=nightly_bisect.same_build(manager))
    comparison = _comparison_of_bisect(registry, bundle, result, plan.good)
    result.nightly = nightly_bisect.report(manager, plan, result.last_good, result.first_bad,
                                           comparison["reproduce"]["url"], options.args())
    comparison["reproduce"].update(command=result.nightly["command"], nightlies=result.nightly["install"],
                                   versions=[result.last_good, result.first_bad])
    return result, comparison


EXPLAIN_OPTIONS = ReplayOptions(warmup=2, max_time_s=240.0)  # explain's defaults: bounded, answered in ~5 minutes


def _recorded(ledger, replay_fn: Callable[..., list[dict]]) -> Callable[..., list[dict]]:
    """explain's replay_fn with each replay recorded in `ledger`: the evidence (stored_runs False), the experiments."""
    import time

    from ..run.spent import of_runs

    def replay(contenders: Sequence[ContenderSpec], options: ReplayOptions, what: str | None = None,
               **kw: Any) -> list[dict]:
        t0 = time.perf_counter()
        runs = replay_fn(contenders, options, **kw)
        ledger.record(what or ("experiments" if kw.get("store_runs") else "evidence"), [c.label for c in contenders],
                      time.perf_counter() - t0, of_runs(runs), at_once=len(contenders) if options.concurrent else 1)
        return runs
    return replay


def explain(ref: str, versions: Sequence[str | ContenderSpec], *, store: str | None = None,
            options: ReplayOptions | None = None, python: str | None = None, env_dir: str | None = None,
            progress: Callable[[str], None] | None = None, mode: str = "auto", by: str | None = None,
            release_delta: bool = True, screen: bool = True, profile: bool = False,
            reach: Sequence[str] | None = None, **settings: Any) -> dict:
    """Why versions[1] differs from versions[0] (investigate/explain.py): the evidence (per-pass dumps), frozen or
    retraced (`mode` "auto": retraced when only the retraced outputs differ), the criterion (`by`: outputs, bits or
    time; None: outputs when they differ beyond the tolerance, else time), experiments on the candidate from the
    defaults that changed between the two releases (`release_delta`), the passes and the curated flags, screened
    cheaply (`screen`), then measured; a diagnosis that names a changed default restoring the baseline, with the
    lines to paste and where it still works; "reproduce" replays a workaround if found. `profile`: the per-op
    profile in the measurement (a report's table); the answer is stored as a record beside its runs. `reach`: the
    releases a workaround found is measured on (None: those cached here after the candidate's, at most three)."""
    from ..bundle.sharing import reproduce_info
    from ..investigate.explain import Setup
    from ..investigate.explain import explain as _explain
    from ..investigate.probes import output_difference
    from ..run.replay import replay_platform
    from ..run.spent import Ledger

    specs = _explain_specs(ref, store, versions)
    if mode not in ("auto", "frozen", "retrace") or by not in (None, "outputs", "bits", "time"):
        raise UsageError(f"explain takes --retrace or --frozen, and --by outputs, bits or time (not {mode!r}, {by!r})")
    options = replay_options(options, settings, base=EXPLAIN_OPTIONS)
    from ..envs.versions import check_jax_requests

    check_jax_requests([s.jax for s in specs] + list(reach or ()), releases_of(EnvConfig.of(env_dir, python)))
    registry, bundle = resolve(ref, store)
    if registry.store.read_only:
        raise UsageError(f"{ref} is in a read-only store", hint="pull it first: reprobundle pull " + ref)
    manager = environment_manager(EnvConfig.of(env_dir, python))
    ledger = Ledger()
    replay_fn = _recorded(ledger, functools.partial(_replay, registry, bundle, env_manager=manager, progress=progress))
    platform = replay_platform(bundle, options.platform).platform
    setup = _explain_setup(Setup, manager, bundle, specs, platform, options, replay_fn, ledger, progress,
                           compare_fn=lambda runs, base: comparison_of(registry, bundle, runs, base, reproduce=False),
                           mode=mode, by=by, release_delta=release_delta, screen=screen, profile=profile,
                           apart=output_difference(registry, bundle), reach_releases=reach)
    result = _explain(registry, bundle, specs[0], specs[1], setup)
    result["spent"] = ledger.as_dict()
    found = result["diagnosis"].get("workaround") or result["diagnosis"].get("partial")  # the setting to replay
    runs = result["runs"]
    shown = [runs[0], runs[1], *(r for r in runs[2:] if found and run_label(r) == found["label"])]
    extra = variant_args(shown, concrete_versions)  # a candidate under settings, and the one that worked
    if result["mode"] == "retrace":
        extra.append("--retrace")
    result["reproduce"] = reproduce_info(registry, bundle, concrete_versions(shown),
                                         extra_args=[*extra, *options.args(max_time=False)], context="snippet")
    result["bundle"] = str(bundle.ref)
    result["answer_id"] = _stored_explanation(registry, bundle, result, ref, specs, mode, by)
    return result


def _explain_setup(setup_type, manager, bundle: Bundle, specs: list[ContenderSpec], platform: str,
                   options: ReplayOptions, replay_fn, ledger, progress, *, compare_fn, mode: str, by: str | None,
                   release_delta: bool, screen: bool, profile: bool, apart=None,
                   reach_releases: Sequence[str] | None = None):
    """explain's Setup: the release pair's facts (read once), the screen's module workers, where a workaround
    still works."""
    from ..investigate.minimize import module_limits
    from ..investigate.release_reach import ReachAsk, ReleasePair, reach
    from ..run.execution import worker_memory_limit
    from ..run.module_server import ModuleWorker

    pair = ReleasePair(manager, specs[0], specs[1], platform, progress)

    def worker_for(spec: ContenderSpec) -> ModuleWorker:
        return ModuleWorker(spec, env_manager=manager, platform=platform, timeout_s=options.timeout_s,
                            memory_limit_bytes=worker_memory_limit(None, 2, platform), limits=module_limits(bundle))

    return setup_type(replay_fn=replay_fn, compare_fn=compare_fn, platform=platform, options=options, mode=mode,
                      by=by, worker_for=worker_for if screen else None,
                      changes_fn=pair.changes if release_delta else None, flag_types=pair.flag_types,
                      reach_fn=lambda change, spec, baseline, candidate, chosen_by: reach(
                          manager, change, spec, replay_fn, options, platform,
                          ReachAsk(baseline, candidate, chosen_by, compare_fn, apart, reach_releases)),
                      profile=profile, progress=progress, ledger=ledger)


def _stored_explanation(registry: Registry, bundle: Bundle, result: dict, ref: str, specs: list[ContenderSpec],
                        mode: str, by: str | None) -> str | None:
    from ..investigate.answers import explain_command, store_explanation

    return store_explanation(registry, bundle, result, explain_command(ref, specs, mode, by))
