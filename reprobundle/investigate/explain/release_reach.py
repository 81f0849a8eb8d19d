"""What explain reads of the two releases (the release delta, as experiments) and where a workaround still works on
the releases after the candidate's: a flag or option can be removed later, or stay defined and do nothing (XLA's
`--xla_cpu_use_thunk_runtime=false` restores 0.4.33 fully, 0.4.35 partly, and is accepted and ignored from 0.6.0
on), and a workaround that stops working at the next upgrade is worth knowing about before it is pasted.

Each release is first asked, without the program, whether it takes the setting as a user pastes it and what it
says then (setting_life.py: its facts, its own deprecation warning or refusal, cached beside it); where it is gone,
the release that removed it and, for a JAX option with a JAX repository here, the commit. The workaround is then
measured on the others as the diagnosis measured it (`reach`), and a flag's compile-option form is run on each (XLA
refuses some DebugOptions fields as compile options on some releases). The releases are those asked for
(`--reach`; an investigation's: its window's after the first bad one, and the newest release), else those cached
here after the candidate's: nothing is installed unasked.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

from ...analysis.release_delta import flag_value, libtpu_line, release_delta
from ...bundle.model import run_label
from ...envs.release_facts import release_facts
from ...envs.versions import version_key
from ...run.contenders import ContenderSpec
from ...run.replay_options import ReplayOptions
from ..search.bisection import SAME
from .default_experiments import DefaultChange, default_changes


class ReleasePair:
    """The baseline's and the candidate's environments and facts, read once (lazily: a read-only explanation that
    needs none reads none)."""

    def __init__(self, manager: Any, baseline: ContenderSpec, candidate: ContenderSpec, platform: str,
                 progress: Callable[[str], None] | None = None):
        self.manager, self.baseline, self.candidate, self.platform = manager, baseline, candidate, platform
        self.progress = progress
        self._facts: list[dict] | None = None
        self._envs: list[Any] = []

    def facts(self) -> list[dict]:
        if self._facts is None:
            self._envs = [self.manager.ensure(s.jax, platform=self.platform) for s in (self.baseline, self.candidate)]
            self._facts = [release_facts(env, self.progress) for env in self._envs]
        return self._facts

    def changes(self) -> tuple[list[DefaultChange], list[dict], str | None]:
        """The defaults that changed from the baseline's release to the candidate's, worth an experiment here;
        those left out and why; a note when the releases could not say."""
        from ...errors import ReproBundleError

        try:
            facts = self.facts()
        except ReproBundleError as e:
            return [], [], f"the releases' flags and options were not read: {e.message}"
        a, b = (env.jax_version for env in self._envs)
        delta = release_delta(a, b, *facts)
        changes, left = default_changes(delta, self.platform)
        notes = [] if delta["complete"] else ["one release's flag list could not be read whole: flags may be missing"]
        if delta.get("libtpu") and self.platform == "tpu":  # said once: no libtpu default can become an experiment
            notes.append(f"{libtpu_line(delta)}; {delta['libtpu']['note']}")
        return changes, left, "; ".join(notes) or None

    def flag_types(self) -> dict | None:
        from ...errors import ReproBundleError

        try:
            return self.facts()[1].get("xla_flags")
        except ReproBundleError:
            return None


MAX_REACH_RELEASES = 3  # later releases the workaround is measured on: the next, one between, the newest
REACH_MAX_TIME_S = 90.0  # the reach's paired rounds stop there (sooner when every verdict settles)


@dataclass(frozen=True)
class ReachAsk:
    """What the reach of a workaround is measured against: the explanation's two contenders (in its mode), its
    criterion, how two runs' outputs differ (investigate/search/probes.output_difference), the comparison of runs
    (`compare_fn(runs, baseline_label)`), the releases asked for (None: those cached here after the candidate's,
    at most MAX_REACH_RELEASES of them), and a JAX repository (a folder; None: the clone in the cache, if any) where
    the commit that removed an option is looked up."""

    baseline: ContenderSpec
    candidate: ContenderSpec
    by: str
    compare_fn: Callable[[list[dict], str], dict]
    apart: Callable[[dict, dict], str] | None = None
    releases: Sequence[str] | None = None
    jax_repo: str | None = None


def reach(manager: Any, change: DefaultChange, spec: ContenderSpec, replay_fn: Callable[..., list[dict]],
          options: ReplayOptions, platform: str, ask: ReachAsk) -> dict:
    """The workaround of `change` (the experiment `spec`, on the candidate) applied on the releases after the
    candidate's and measured as the diagnosis was: by time in paired rounds with the baseline and each release
    without it, by outputs once each against the baseline's. Per release: it restores the baseline, helps partly
    (its ratio to the release's own time), does nothing (the flag is accepted and ignored), there is nothing to
    undo there, or the release refuses it (gone: told before any timing, setting_life.py). Where the candidate and
    those releases warn that it is deprecated (their own words) and where it was removed (the release, and the
    commit). A flag's compile-option form is run too: where XLA refuses it.
    {"releases": [row], "said": {release: setting_life.said_on's}, "deprecated", "removed", "compile":
    {"accepted": [...], "refused": {release: why}} | None, "run_ids", "text"}."""
    from .setting_life import deprecation, gone_text

    envs, said = _reach_envs_said(manager, change, spec, platform, ask)
    if not envs:
        warned = deprecation(said, change)
        return {"releases": [], "said": said, "deprecated": warned, "removed": None, "compile": None, "run_ids": [],
                "text": "; ".join([f"no release after {spec.jax} is cached here to try it on",
                                   *([warned["text"]] if warned else [])])}
    rows = [{"release": env.jax_version, "result": GONE, "text": gone_text(env.jax_version, change,
                                                                          said[env.jax_version])}
            for env in envs if said[env.jax_version]["accepted"] is False]
    tried = [env for env in envs if said[env.jax_version]["accepted"] is not False]
    compile_said = _compile_form(change, spec, [spec.jax, *(e.jax_version for e in tried)], replay_fn, options,
                                 {e.jax_version: e for e in tried})
    runs: list[dict] = []
    if tried:
        runs, measured = _measure_reach(change, spec, [e.jax_version for e in tried], replay_fn, options, ask)
        rows += measured
    rows.sort(key=lambda r: version_key(r["release"]))
    found = {"said": said, "deprecated": deprecation(said, change), "removed": _removal(manager, said, change, ask)}
    return {"releases": rows, **found, "compile": compile_said,
            "run_ids": [str(r["run_id"]) for r in runs if r.get("run_id")],
            "text": _reach_text(rows, found, compile_said)}


def _reach_envs_said(manager: Any, change: DefaultChange, spec: ContenderSpec, platform: str,
                     ask: ReachAsk) -> tuple[list[Any], dict[str, dict]]:
    """The environments of the releases the reach is measured on, and what the candidate's and each of their
    releases say of the setting (setting_life.said_on: a release that refuses it is told gone, never timed)."""
    from .setting_life import said_on

    envs = _reach_envs(manager, spec.jax, platform, ask.releases)
    return envs, said_on([*_candidate_env(manager, spec.jax, platform), *envs], change)


def timed_contenders(manager: Any, change: DefaultChange, spec: ContenderSpec, platform: str,
                     ask: ReachAsk) -> list[ContenderSpec]:
    """The contenders `reach` times (by time): the baseline, then each later release that takes the setting, plain
    and with the workaround; explain times them in its own measurement's rounds, beside its experiments (one
    measurement for both claims), and `reach` then takes their runs from there ([] by outputs, or with none)."""
    if ask.by != "time":
        return []
    envs, said = _reach_envs_said(manager, change, spec, platform, ask)
    tried = [env.jax_version for env in envs if said[env.jax_version]["accepted"] is not False]
    return _reach_contenders(spec, tried, ask) if tried else []


def _reach_contenders(spec: ContenderSpec, releases: list[str], ask: ReachAsk) -> list[ContenderSpec]:
    """[the baseline, then per release: it plain and it with the workaround as XLA_FLAGS or the option]."""
    plain = [replace(ask.candidate, jax=v, mode=spec.mode) for v in releases]
    worked = [replace(spec, jax=v, at_compile=()) for v in releases]
    return [replace(ask.baseline, mode=spec.mode), *(c for pair in zip(plain, worked) for c in pair)]


def _reach_text(rows: list[dict], found: dict, compile_said: dict | None) -> str:
    """Each release's result, oldest first; where it is deprecated; where it was removed (in place of the releases
    that refuse it, where that can be said); where XLA refuses its compile-option form."""
    removed, warned = found["removed"], found["deprecated"]
    said = [r["text"] for r in rows if r["result"] != GONE or not removed]
    said += [warned["text"]] if warned else []
    said += [removed["text"]] if removed else []
    if compile_said and compile_said["refused"]:
        said.append("the compile-option form is refused on " + ", ".join(
            f"{v} ({why})" for v, why in compile_said["refused"].items()))
    return "; ".join(said)


def _candidate_env(manager: Any, version: str, platform: str) -> list[Any]:
    """The candidate's environment (made by the explanation already), or none where it cannot be had."""
    from ...errors import ReproBundleError

    try:
        return [manager.ensure(version, platform=platform)]
    except ReproBundleError:
        return []


def _removal(manager: Any, said: dict[str, dict], change: DefaultChange, ask: ReachAsk) -> dict | None:
    """setting_life.removal over the releases checked, with the JAX repository here and the index's releases."""
    from ..release_notes import local_clone
    from .setting_life import removal

    if not any(e.get("accepted") is False for e in said.values()):
        return None
    try:
        available = manager.available_versions()
    except Exception:  # noqa: BLE001 - no index to read: the releases checked say what they can
        available = None
    return removal(said, change, local_clone(ask.jax_repo) if change.kind == "option" else None, available)


GONE, RESTORES, PARTLY, IGNORED, NOTHING_TO_UNDO, UNSETTLED, FAILED, CHANGES = (
    "gone", "restores", "partly", "ignored", "nothing to undo", "not settled", "failed", "changes the outputs")


def window_releases(tested: Sequence[str], first_bad: str, newest: str | None = None) -> list[str] | None:
    """The releases of a bisection's window after its first bad one (its tested releases, so cached), at most
    MAX_REACH_RELEASES (the next, one between, the last), and the newest release (`newest`, where it is later):
    where investigate measures the workaround's reach, through the release a maintainer would check it on; None
    when there are none (the reach then takes those cached here)."""
    try:
        key = version_key(first_bad)
        later = sorted({v for v in tested if version_key(v) > key}, key=version_key)
        beyond = [newest] if newest and version_key(newest) > key and newest not in later else []
    except Exception:  # noqa: BLE001 - a nightly's date, a path: no release order
        return None
    return _sampled(later) + beyond or None


def _sampled(later: list) -> list:
    """At most MAX_REACH_RELEASES of `later` (in order): the first, one between, the last."""
    if len(later) <= MAX_REACH_RELEASES:
        return list(later)
    return [later[i] for i in dict.fromkeys((0, len(later) // 2, len(later) - 1))]


def _reach_envs(manager: Any, version: str, platform: str, asked: Sequence[str] | None) -> list[Any]:
    """The environments the reach is measured in: those of the releases asked for (made if not cached), else at
    most MAX_REACH_RELEASES of those cached here after `version` (the next, one between, the newest)."""
    if asked is not None:
        return [manager.ensure(v, platform=platform) for v in dict.fromkeys(asked) if v != version]
    return _sampled(_later_releases(manager, version, platform))


def _measure_reach(change: DefaultChange, spec: ContenderSpec, releases: list[str],
                   replay_fn: Callable[..., list[dict]], options: ReplayOptions,
                   ask: ReachAsk) -> tuple[list[dict], list[dict]]:
    """One replay of [baseline, then per release: it plain and it with the workaround]: by time in the same paired
    rounds (stored as runs), by outputs once each. Each release's row."""
    contenders = _reach_contenders(spec, releases, ask)
    timed = ask.by == "time"
    bound = REACH_MAX_TIME_S if options.max_time_s is None else min(options.max_time_s, REACH_MAX_TIME_S)
    run_options = replace(options, dump=False, profile=False, max_time_s=bound, slowdown_only=True) if timed else \
        options.outputs_only()
    runs = replay_fn(contenders, run_options, store_runs=timed, what="where the workaround works")
    base = runs[0]
    rows = []
    for i, release in enumerate(releases):
        alone, applied = runs[1 + 2 * i], runs[2 + 2 * i]
        if not (_ran(base) and _ran(alone) and _ran(applied)):
            failed = next(r for r in (applied, alone, base) if not _ran(r))
            rows.append({"release": release, "result": FAILED,
                         "text": f"{release}: did not run ({failed['status']}: "
                                 f"{str(failed.get('reason', ''))[:160]})"})
            continue
        judged = _by_time(release, runs, base, alone, applied, ask, options.ends) if timed else \
            _by_outputs(release, base, alone, applied, ask)
        rows.append({"release": release, **judged})
    return runs, rows


def _by_time(release: str, runs: list[dict], base: dict, alone: dict, applied: dict, ask: ReachAsk,
             ends: tuple[float, float, int] | None = None) -> dict:
    """restores / partly (with the ratio to the release's own time) / ignored / nothing to undo / not settled; with
    `ends` (an investigation's: the change its confirmation measured) each run is also judged by its side of it, as
    explain's experiments are (explain.add_sides)."""
    from .experiments import add_ruled_out, add_sides, row_verdict

    against_base = {r["label"]: r for r in ask.compare_fn(runs, run_label(base))["rows"]}
    add_ruled_out(list(against_base.values()), runs)
    if ends is not None:  # each beside the baseline's run, as the budget stopped its rounds
        add_sides(list(against_base.values()), runs, ends)
    against_alone = {r["label"]: r for r in ask.compare_fn(runs, run_label(alone))["rows"]}
    found = {"alone_vs_baseline": row_verdict(against_base.get(run_label(alone))),
             "vs_baseline": row_verdict(against_base.get(run_label(applied))),
             "vs_release": row_verdict(against_alone.get(run_label(applied)))}
    return {**found, **_reach_result(release, ask.baseline.jax, found["alone_vs_baseline"], found["vs_baseline"],
                                     found["vs_release"])}


def _reach_result(release: str, b: str, slow: dict | None, fixed: dict | None, moved: dict | None) -> dict:
    """{"result", "text"} from the release alone against the baseline (`slow`), with the workaround against the
    baseline (`fixed`) and against the release alone (`moved`)."""
    from ...analysis.diagnosis import few_rounds, ratio_text, restored_basis, restores, side_alone

    if _nothing_to_undo(slow):
        said = ratio_text(slow) if slow else "?"
        return {"result": NOTHING_TO_UNDO, "text": f"{release}: nothing to undo ({release} alone runs {said} of {b}'s "
                                                   "time)"}
    if fixed is not None and fixed.get("side") == "good" and few_rounds(fixed):  # too few rounds for a figure
        result = RESTORES if restores(fixed) else PARTLY
        return {"result": result, "text": f"{release}: {'restores' if result == RESTORES else 'helps partly'} "
                                          f"({side_alone(fixed, b, release)})"}
    if fixed is not None and restores(fixed):
        basis = restored_basis(fixed, b, release)
        return {"result": RESTORES, "text": f"{release}: restores ({ratio_text(fixed)} of {b}'s time{basis})"}
    if fixed is not None and fixed.get("side") == "bad":  # with it, still like the confirmed change's first bad end
        return {"result": IGNORED, "text": f"{release}: accepted and ignored (the flag parses; with it the time is "
                                           f"still the change's: {ratio_text(fixed)} of {b}'s)"}
    if fixed is not None and fixed.get("side") == "good":  # most of the change undone, not all of it (shown slower)
        return {"result": PARTLY, "text": f"{release}: helps partly ({ratio_text(fixed)} of {b}'s time"
                                          f"{restored_basis(fixed, b, release)})"}
    return _by_move(release, b, fixed, moved)


def _nothing_to_undo(slow: dict | None) -> bool:
    """The release alone is not slower than the baseline, or not at the 5% this measures (its rounds ruled that out:
    `ruled_out`, analysis/resolution.py), and nothing shows it slower."""
    from ...analysis.diagnosis import still_slower
    from ...analysis.verdict import shown_slower

    return (not still_slower(slow) or bool((slow or {}).get("ruled_out"))) and not shown_slower(slow)


def _by_move(release: str, b: str, fixed: dict | None, moved: dict | None) -> dict:
    """What the workaround did to the release's own time (`moved`), where it did not restore the baseline's."""
    from ...analysis.diagnosis import ratio_text

    if moved and moved.get("verdict") == "faster" and moved.get("settled"):
        rest = f", still {ratio_text(fixed)} of {b}'s" if fixed else ""
        return {"result": PARTLY, "text": f"{release}: helps partly ({ratio_text(moved)} of {release}'s own time{rest})"}
    if moved and moved.get("verdict") == "same" and moved.get("settled"):
        return {"result": IGNORED, "text": f"{release}: accepted and ignored (the flag parses; the time does not "
                                           f"move: {ratio_text(moved)} of {release}'s own time)"}
    said = ratio_text(moved) if moved else "?"
    return {"result": UNSETTLED, "text": f"{release}: not settled ({said} of {release}'s own time)"}


def _by_outputs(release: str, base: dict, alone: dict, applied: dict, ask: ReachAsk) -> dict:
    """restores (the baseline's outputs) / ignored (the release's own) / nothing to undo / changes the outputs."""
    if ask.apart is None:
        return {"result": UNSETTLED, "text": f"{release}: ran; its outputs were not compared"}
    b = ask.baseline.jax
    if ask.apart(base, alone) == SAME:
        return {"result": NOTHING_TO_UNDO, "text": f"{release}: nothing to undo ({release} alone gives {b}'s outputs)"}
    if ask.apart(base, applied) == SAME:
        return {"result": RESTORES, "text": f"{release}: restores ({b}'s outputs bit for bit)"}
    if ask.apart(alone, applied) == SAME:
        return {"result": IGNORED, "text": f"{release}: accepted and ignored (the setting parses; the outputs are "
                                           f"{release}'s own)"}
    how = ask.apart(base, applied)
    return {"result": CHANGES, "text": f"{release}: changes the outputs, not to {b}'s ({how})"}


def _compile_form(change: DefaultChange, spec: ContenderSpec, releases: list[str],
                  replay_fn: Callable[..., list[dict]], options: ReplayOptions, envs: dict[str, Any]) -> dict | None:
    """A flag's compile-option form run once on each release (the candidate's first): where XLA accepts it and where
    it refuses it ({"accepted": [...], "refused": {release: why}}); None for a JAX option. It is run even where the
    release's facts say the flag is no compile option there: the claim rests on XLA's own answer."""
    if change.kind != "flag":
        return None
    from .experiment_screen import compile_options

    typed = {}
    for v in releases:
        env = envs.get(v)
        table = ((_facts(env) if env is not None else None) or {}).get("xla_flags")
        found = compile_options([f"--{change.name}={flag_value(change.restoring_value)}"], table) if table else None
        typed[v] = found or {change.name: change.restoring_value}
    out: dict = {"accepted": [], "refused": {}}
    contenders = [replace(spec, jax=v, at_compile=tuple(sorted(o.items()))) for v, o in typed.items()]
    for v, run in zip(typed, replay_fn(contenders, options.outputs_only(), store_runs=False,
                                       what="the workaround as a compile option")):
        if _ran(run):
            out["accepted"].append(v)
        else:
            out["refused"][v] = _refusal(str(run.get("reason") or run["status"]))
    return out


def _refusal(reason: str) -> str:
    """The part of a refused compile's reason a reader needs: XLA's own words when they are there."""
    from .experiment_screen import REFUSED

    for words in REFUSED:
        if words in reason:
            return words
    return reason[:120]


def _ran(run: dict) -> bool:
    return run["status"] in ("ok", "mismatch")


def _facts(env: Any) -> dict | None:
    from ...errors import ReproBundleError

    try:
        return release_facts(env)
    except ReproBundleError:
        return None


def _later_releases(manager: Any, version: str, platform: str) -> list[Any]:
    """One environment per release cached here after `version` (releases only), oldest first."""
    try:
        key = version_key(version)
    except Exception:  # noqa: BLE001 - "installed", a path: no release order to place it in
        return []
    try:
        releases = set(manager.available_versions())  # an environment made under another name is no release
    except Exception:  # noqa: BLE001 - no index to read: nothing to say about later releases
        return []
    seen: dict[str, Any] = {}
    for env in manager.list():
        if env.nightly or env.local or env.path is None or env.platform != platform or env.jax_version not in releases:
            continue
        if version_key(env.jax_version) > key:
            seen.setdefault(env.jax_version, env)
    return [seen[v] for v in sorted(seen, key=version_key)]
