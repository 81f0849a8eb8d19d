"""explain between two contenders of an opened bundle (api.explain's work once its request is checked): its
replays recorded in the ledger, its Setup (the release pair's facts, the screen's module workers, where a
workaround still works), experiments.py's answer with its Reproduce block, stored beside its runs (investigate/answers.py)."""

from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

from ...bundle.model import run_label
from ...bundle.registry import Bundle, Registry
from ...run.compare import comparison_of
from ...run.contenders import ContenderSpec, concrete_versions, variant_args
from ...run.replay import replay as _replay
from ...run.replay_options import ReplayOptions
from ..answers import builds_of, reuse_key
from ..case import Case

EXPLAIN_OPTIONS = ReplayOptions(warmup=2, max_time_s=240.0)  # explain's defaults: bounded, answered in ~5 minutes


def explain_between(case: Case, specs: list[ContenderSpec], options: ReplayOptions, *, mode: str = "auto",
                    by: str | None = None, release_delta: bool = True, screen: bool = True, profile: bool = False,
                    reach: Sequence[str] | None = None, jax_repo: str | None = None) -> dict:
    """api.explain's answer for the two contenders `specs` of the case's (writable) bundle; `jax_repo`: where the
    commit that removed a workaround's option is looked up (None: the clone in the cache, if any)."""
    from ...bundle.sharing import reproduce_info
    from ...run.replay import replay_platform
    from ...run.spent import Ledger
    from ..search.probes import output_difference
    from .experiments import Setup
    from .experiments import explain as _explain

    registry, bundle = case.writable()
    manager, progress, ref = case.manager, case.progress, case.ref
    ledger = Ledger(options.max_time_s)  # explain's --max-time, from here: every phase within it
    replay_fn = recorded(ledger, functools.partial(_replay, registry, bundle, env_manager=manager, progress=progress))
    platform = replay_platform(bundle, options.platform).platform
    setup = explain_setup(Setup, manager, bundle, specs, platform, options, replay_fn, ledger, progress,
                          compare_fn=lambda runs, base: comparison_of(registry, bundle, runs, base, reproduce=False),
                          mode=mode, by=by, release_delta=release_delta, screen=screen, profile=profile,
                          apart=output_difference(registry, bundle), reach_releases=reach, jax_repo=jax_repo)
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
    builds = builds_of(manager, [s.jax for s in specs] + list(reach or ()))
    reuse = reuse_key(registry, "explain", explanation_asked(specs, options, mode, by, reach), builds)
    result["answer_id"] = stored_explanation(registry, bundle, result, ref, specs, mode, by, reuse)
    return result


def explanation_asked(specs: Sequence[ContenderSpec], options: ReplayOptions, mode: str, by: str | None,
                      reach: Sequence[str] | None) -> dict:
    """What an explanation was asked, as its stored answer records it for reuse: the two contenders, the mode and
    criterion as given, the releases a workaround is measured on, the replay options but its time budget."""
    return {"baseline": specs[0].label, "candidate": specs[1].label, "mode": mode, "by": by,
            "options": options.args(max_time=False), "reach": None if reach is None else list(reach)}


def recorded(ledger, replay_fn: Callable[..., list[dict]]) -> Callable[..., list[dict]]:
    """explain's replay_fn with each replay recorded in `ledger`: the evidence (stored_runs False), the experiments.
    None is started that would end past the ledger's --max-time (TimeSpentError: the first of all starts while any
    time is left), but the measurement (`bounded` False: its rounds end within what is left)."""
    import time

    from ...run.spent import of_runs

    def replay(contenders: Sequence[ContenderSpec], options: ReplayOptions, what: str | None = None,
               bounded: bool = True, **kw: Any) -> list[dict]:
        if bounded:
            ledger.check(what or ("experiments" if kw.get("store_runs") else "evidence"))
        t0 = time.perf_counter()
        runs = replay_fn(contenders, options, **kw)
        ledger.record(what or ("experiments" if kw.get("store_runs") else "evidence"), [c.label for c in contenders],
                      time.perf_counter() - t0, of_runs(runs), at_once=len(contenders) if options.concurrent else 1)
        return runs
    return replay


def explain_setup(setup_type, manager, bundle: Bundle, specs: list[ContenderSpec], platform: str,
                  options: ReplayOptions, replay_fn, ledger, progress, *, compare_fn, mode: str, by: str | None,
                  release_delta: bool, screen: bool, profile: bool, apart=None,
                  reach_releases: Sequence[str] | None = None, jax_repo: str | None = None):
    """explain's Setup: the release pair's facts (read once), the screen's module workers, where a workaround
    still works."""
    from ...run.execution import worker_memory_limit
    from ...run.module_server import ModuleWorker
    from ..minimize.reduction import module_limits
    from .release_reach import ReachAsk, ReleasePair, reach, timed_contenders

    pair = ReleasePair(manager, specs[0], specs[1], platform, progress)

    def asked(baseline: ContenderSpec, candidate: ContenderSpec, chosen_by: str) -> ReachAsk:
        return ReachAsk(baseline, candidate, chosen_by, compare_fn, apart, reach_releases, jax_repo)

    def worker_for(spec: ContenderSpec) -> ModuleWorker:
        return ModuleWorker(spec, env_manager=manager, platform=platform, timeout_s=options.timeout_s,
                            memory_limit_bytes=worker_memory_limit(None, 2, platform), limits=module_limits(bundle))

    return setup_type(replay_fn=replay_fn, compare_fn=compare_fn, platform=platform, options=options, mode=mode,
                      by=by, worker_for=worker_for if screen else None,
                      changes_fn=pair.changes if release_delta else None, flag_types=pair.flag_types,
                      reach_fn=lambda change, spec, baseline, candidate, chosen_by, timed: reach(
                          manager, change, spec, measured_first(replay_fn, timed), within(options, ledger), platform,
                          asked(baseline, candidate, chosen_by)),
                      reach_ahead=lambda change, spec, baseline, candidate: timed_contenders(
                          manager, change, spec, platform, asked(baseline, candidate, "time")),
                      profile=profile, progress=progress, ledger=ledger)


def measured_first(replay_fn: Callable[..., list[dict]], timed: dict) -> Callable[..., list[dict]]:
    """`replay_fn`, but a timed replay to store (`store_runs`) of contenders that `timed` holds a run of each (the
    experiments' measurement timed them in its rounds, and stored them) is answered with those runs, not timed
    again."""
    def replay(contenders: Sequence[ContenderSpec], options: ReplayOptions, **kw: Any) -> list[dict]:
        if kw.get("store_runs") and contenders and all(c in timed for c in contenders):
            return [timed[c] for c in contenders]
        return replay_fn(contenders, options, **kw)
    return replay


def within(options: ReplayOptions, ledger) -> ReplayOptions:
    """`options` with their time bound no longer than what is left of the ledger's --max-time (at least 1 s)."""
    from dataclasses import replace

    left = ledger.left()
    if left is None:
        return options
    return replace(options, max_time_s=max(1.0, min(left, options.max_time_s or left)))


def stored_explanation(registry: Registry, bundle: Bundle, result: dict, ref: str, specs: list[ContenderSpec],
                       mode: str, by: str | None, reuse: dict | None = None) -> str | None:
    from ..answers import explain_command, store_explanation

    return store_explanation(registry, bundle, result, explain_command(ref, specs, mode, by), reuse)
