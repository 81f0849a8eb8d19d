"""The release bisection (`bisect`, and `bisect --nightly`): build_search.py's search over the releases between two, or
the nightlies between two builds, every kind of change the endpoints show (mode_choice.py), the layer at the
boundary, the defaults that changed there, and its answer stored beside its runs (answers.py). The API face
(api/investigations.py's `bisect`) checks the request, opens the store and calls `bisect_releases`."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Callable

from ...bundle.model import run_label
from ...bundle.registry import Bundle, Registry
from ...envs.env_config import EnvConfig
from ...errors import UsageError
from ...run.compare import comparison_of
from ...run.replay_options import ReplayOptions
from ..answers import builds_of, reuse_key
from ..case import Case
from .bisection import BisectionInterrupted, standing
from .build_search import Probes, Search
from .probes import probe_jobs

BISECT_OPTIONS = ReplayOptions(dump=False, profile=False)  # a probe needs its verdict: no XLA dump, no per-op profile


def bisect_releases(case: Case, good: str, bad: str, *, options: ReplayOptions = BISECT_OPTIONS, executor=None,
                    nightly: bool = False, mode: str = "auto", by: str | None = None, layer: bool = True,
                    jobs: int | None = None, timed_probes: bool = False, ledger=None, resume: bool = True):
    """(the BisectResult, its comparison): api.bisect's search once its request is checked (check_bisect_request)
    and its store opened, with `executor` (probe_executor's), the answer stored beside the runs. `ledger`
    (run/spent.Ledger): where the probes are recorded, with the --max-time of the command that calls (a probe that
    would end past it is not started; the search keeps what it had narrowed). `resume`: where the same question's
    latest stored answer was cut short by --max-time or Ctrl-C (answers.resumable), each search starts inside the
    window it had narrowed (answers.resume_windows; said in the result's `resumed`). Ctrl-C while a probe runs stops
    the search as --max-time does: what it had found is stored, then BisectionInterrupted (a KeyboardInterrupt
    carrying that result; None where nothing was found) ends the call."""
    from ...envs.prefetch import Prefetch
    from ...run.spent import Ledger

    registry, bundle = case.where()
    ref, store, manager, progress = case.ref, case.store, case.manager, case.progress
    executor = executor or probe_executor(registry, ref, None, None)
    ledger = ledger or Ledger()
    probes = Probes(registry, bundle, options, executor, manager, progress, ledger, timed_probes)
    jobs = 1 if timed_probes else jobs or probe_jobs(bundle, options)
    asked = bisection_asked(good, bad, mode, by, nightly, options, layer, timed_probes)
    windows = resumed_from(registry, bundle, asked, manager, progress) if resume else []
    with Prefetch(manager, jobs) as prefetch, _interrupted_before_an_answer(probes):
        if nightly:
            search = Search(probes, "frozen" if mode == "auto" else mode, jobs, prefetch.want, by, windows)
            result, comparison = bisect_nightlies(registry, bundle, manager, good, bad, search, options, progress)
            result.mode = search.mode
            searches = {result.mode: search}
            stands(result)
        else:
            result, searches = every_kind(probes, mode, by, jobs, prefetch.want, (good, bad), manager, progress,
                                          windows)
            comparison = comparison_of_bisect(registry, bundle, result, run_label(result.runs[good]))
        for change in [result, *result.changes] if layer else []:  # each change's layer, by its own search
            change.layer = layer_of(searches[change.mode], change, probes, timed_probes, (ref, store, options))
        if probes.stop.interrupted:
            prefetch.want([])  # nothing more is made ahead: the answer is stored, then Ctrl-C ends the command
    _store_answer(case, result, (asked, mode, nightly), probes)
    return result, comparison


def _store_answer(case: Case, result, asked: tuple[dict, str, bool], probes: Probes) -> None:
    """The bisection's answer stored (each change's, the headline's last), with where its time went; unfinished
    where --max-time or Ctrl-C cut it. After Ctrl-C, BisectionInterrupted once it is stored."""
    registry, bundle = case.where()
    manager, progress, ledger = case.manager, case.progress, probes.ledger
    asked_of, mode, nightly = asked
    result.spent = ledger.as_dict()
    time_left = (ledger.left() is None or (ledger.left() or 0.0) > 0) and not probes.stop.interrupted
    # an answer cut short by --max-time or Ctrl-C (its search, its confirmation, a change, its layer) is stored as
    # `unfinished`: never reused as an answer, resumed by the next call of the same question (answers.resumable)
    reuse = reuse_key(registry, "bisect", asked_of, builds_of(manager, tested_builds(result)))
    answer_each(registry, bundle, result, (case.ref, None if mode == "auto" else mode),
                None if nightly or not time_left else manager, progress, reuse)
    if probes.stop.interrupted:
        if progress:
            from ...logs import Status

            progress(Status(f"bisect: interrupted: what was found is stored ({result.answer_id}); the same command "
                            "again goes on from it", "interrupted"))
        raise BisectionInterrupted(result)


@contextmanager
def _interrupted_before_an_answer(probes: Probes):
    """Ctrl-C that stopped the search before anything was found to store (the endpoints, the survey): the command
    ends as Ctrl-C ends it, never as a --max-time spent."""
    from ...errors import TimeSpentError

    try:
        yield
    except TimeSpentError:
        if probes.stop.interrupted:
            raise BisectionInterrupted(None) from None
        raise


def resumed_from(registry: Registry, bundle: Bundle, asked: dict, manager, progress) -> list[dict]:
    """The windows of the latest stored answer of the same question that --max-time or Ctrl-C cut short
    (answers.resumable, resume_windows), each where the next search of its mode and criterion starts; [] where there
    is none."""
    from ..answers import BISECTION, resumable, resume_windows

    record = resumable(registry, bundle, BISECTION, asked, manager)
    if record is None:
        return []
    if progress:
        progress(f"bisect: going on from the search stored {record.get('created')}, cut short: "
                 f"{(record.get('answer') or {}).get('unfinished') or 'a change of its window unfinished'}")
    return resume_windows(record)


def layer_of(search: Search, change, probes: Probes, timed_probes: bool, asked: tuple) -> dict | None:
    """The layer at a change's boundary (boundary.py), None where --max-time left no time to read it (said in the
    change's `unfinished`)."""
    from ...errors import TimeSpentError

    ref, store, options = asked
    by_time = change.criterion == "time" or timed_probes
    try:
        return search.layer(change, lambda m, timed=True, ends=None: probes.probe(m, by_time and timed, ends=ends), ref,
                            ["--store", store] if store else [], options.args())
    except TimeSpentError as e:
        # said, and the answer is not reused without it: the next investigation reads it
        change.unfinished = change.unfinished or f"the layer at the boundary was not read: {e.message}"
        change.cut_at = change.cut_at or "layer"
        if probes.progress:
            probes.progress(f"bisect: {change.unfinished}")
        return None


def answer_each(registry: Registry, bundle: Bundle, result, asked: tuple[str, str | None], manager,
                progress, reuse: dict | None = None) -> None:
    """Each change's changed defaults (releases only: `manager` None for nightlies) and its own stored answer
    (bisect-commits goes on from it), the headline's last: the latest, which lists them all, and the one an
    investigation of the same question reuses (`reuse`: answers.reuse_key's)."""
    ref, forced_mode = asked
    for change in [result, *result.changes] if manager is not None else []:
        change.changed_defaults = changed_defaults_of(change, manager, progress)
    for change in result.changes:
        change.answer_id = stored_answer(registry, bundle, change, ref, forced_mode)
    result.answer_id = stored_answer(registry, bundle, result, ref, forced_mode, reuse)


# When the search's rules last changed what a stored answer of the same question holds (2026-12-07: the retraced
# program's time looked at too where the endpoints lower it differently): an answer stored under older rules is
# computed again, never reused as if these had made it.
SEARCH_RULES = "2026-12-07"


def bisection_asked(good: str, bad: str, mode: str, by: str | None, nightly: bool, options: ReplayOptions,
                    layer: bool, timed_probes: bool) -> dict:
    """What a bisection was asked, as its stored answer records it for reuse: the window, the mode and criterion as
    given, and what else changes its answer (the replay options' flags but --max-time, the layer check, timed
    probes, the search's rules): a call with another --max-time asks the same question."""
    return {"good": good, "bad": bad, "mode": mode, "by": by, "nightly": nightly,
            "options": options.args(max_time=False),
            "layer": layer, "timed_probes": timed_probes, "rules": SEARCH_RULES}


def tested_builds(result) -> list[str]:
    """The builds a bisection's answer rests on: its ends and every build it classed or ran."""
    return [result.good, result.bad, *result.classes, *result.runs]


def stands(result) -> None:
    """A UsageError where the bisection's first bad build is none: a time change its confirmation did not
    reproduce (investigate/search/bisection.confirm)."""
    if not standing(result):
        raise UsageError(f"no change stood between {result.good} and {result.bad}: time: "
                         f"{(result.confirmation or {}).get('why')}", hint="bisect again with more --rounds")


def changed_defaults_of(result, manager, progress) -> list[dict] | None:
    """The defaults that changed from the last good to the first bad release (a frequent cause); None where the
    releases could not say (the bisection's answer stands without it)."""
    from ...analysis.release_delta import changed_defaults
    from ...envs.release_facts import release_changes
    from ...errors import ReproBundleError

    if result.last_good == result.first_bad:
        return None
    try:
        return changed_defaults(release_changes(manager, result.last_good, result.first_bad, progress=progress))
    except ReproBundleError as e:
        if progress:
            progress(f"bisect: the releases' flags and options were not read: {e.message}")
        return None


def stored_answer(registry: Registry, bundle: Bundle, result, ref: str, forced_mode: str | None,
                  reuse: dict | None = None) -> str | None:
    from .bisection_answer import bisect_command, store_bisection

    return store_bisection(registry, bundle, result, bisect_command(ref, result, forced_mode), reuse)


def probe_executor(registry: Registry, ref: str, executor, ray_address: str | None):
    """Where the probes run: `executor`, Ray's at `ray_address`, else here; a read-only store allows only here."""
    from ...fleet.connect import executor_for

    if registry.store.read_only and (executor is not None or ray_address):
        raise UsageError(f"{ref} is in a read-only store: probes on an executor store their runs in it",
                         hint="pull it first: reprobundle pull " + ref)
    return executor or executor_for(ray_address)


def with_tried(e: UsageError, chosen_why: str | None) -> UsageError:
    return e if chosen_why is None else UsageError(f"{e.message}; {chosen_why}", hint=e.hint)


def unknown_by(by: str) -> UsageError:
    """The error of a --by that names no kind of change (bisection.BY), with the kind it may be a misspelling of."""
    import difflib

    from .bisection import BY

    close = difflib.get_close_matches(by, BY, n=1, cutoff=0.5)
    return UsageError(f"--by {by!r} is not one of {', '.join(BY)}",
                      hint=f"did you mean --by {close[0]}?" if close else "leave --by out to look for every kind")


def check_bisect_request(good: str, bad: str, mode: str, jobs: int | None, nightly: bool, config: EnvConfig,
                         by: str | None = None) -> None:
    """What a bisection refuses before anything runs: a mode, a criterion, --jobs, an endpoint that is no release,
    reversed endpoints."""
    from ...envs.manager import releases_of
    from ...envs.versions import check_jax_requests, version_key
    from .bisection import BY

    if mode not in ("auto", "frozen", "retrace"):
        raise UsageError(f"bisect runs one mode at a time, not {mode!r}",
                         hint="--retrace, --frozen, or neither (chosen from the endpoints)")
    if by is not None and by not in BY:
        raise unknown_by(by)
    if jobs is not None and jobs < 1:
        raise UsageError(f"invalid --jobs {jobs}", hint="at least 1")
    check_jax_requests([good, bad], releases_of(config), options=["--good", "--bad"])
    if not nightly and version_key(good) >= version_key(bad):
        raise UsageError(f"--good {good} must be older than --bad {bad}")


def comparison_of_bisect(registry: Registry, bundle: Bundle, result, baseline: str) -> dict:
    from ...envs.versions import version_key

    tested = [result.runs[v] for v in sorted(result.runs, key=version_key)]
    return comparison_of(registry, bundle, tested, baseline=baseline)


def every_kind(probes: Probes, mode: str, by: str | None, jobs: int, ahead, ends: tuple[str, str], manager,
               progress: Callable[[str], None] | None, windows: list[dict] | None = None):
    """(the headline's BisectResult, mode -> its search): told both the mode and the criterion, that one
    bisection; else the endpoints run untimed in each mode (both where the bundle can be retraced:
    investigate/search/mode_choice.py's survey) and every kind of change present bisected, the most severe first
    (mode_choice.plan). A time bisection whose confirmation failed is searched on until its slowdown is placed or
    said (window_changes.place); each bisection by outputs or bits is split into the changes its window holds, and
    every release of the window is run once, untimed, in each mode, for the changes of outputs or bits no
    bisection saw (window_changes.py: those undone a few releases later, and kinds whose endpoints agree); the first
    that stands is the headline, the others its `changes` (each whole) and `also` (one line each), and what was
    examined and is no regression (a speedup, no settled change, a time change the confirmation did not reproduce)
    its `set_aside`, what it does not list (a slowdown under the resolution, one not placed, the releases never
    run) its `not_listed`. `windows`: where a search cut short stored had narrowed each (resumed_from)."""
    from .window_changes import every_change

    steps, why = planned(probes, mode, by, ends, progress)
    kinds = KindSearches(probes, jobs, ahead, manager, progress, windows)
    try:
        head, *others = every_change(steps, lambda m, k: kinds.run(m, k, ends), kinds.split, by, why, progress,
                                     lambda m: kinds.screen(m, ends), place_one=kinds.place,
                                     sweep_one=kinds.sweeper(ends, surveyed_modes(probes, mode), by))
    except UsageError as e:  # an answer that tells nothing apart says what was tried
        raise with_tried(e, why) from None
    head.changes = others
    return head, kinds.searches


def planned(probes: Probes, mode: str, by: str | None, ends: tuple[str, str],
            progress: Callable[[str], None] | None) -> tuple[list[tuple[str, str]], str | None]:
    """(the bisections to run as (mode, criterion), the most severe first; why in one line, None where told both):
    told both the mode and the criterion, that one; else the endpoints run untimed in each mode (mode_choice.survey;
    their runs are each bisection's first probe) and mode_choice.plan's answer."""
    from ...run.retrace import retrace_refusal
    from .mode_choice import plan, survey
    from .probes import lowered_differently, output_difference

    if mode != "auto" and by is not None:
        return [(mode, str(by))], None
    good, bad = ends
    refusal = retrace_refusal(probes.args[1].manifest) if mode == "auto" else None
    modes = surveyed_modes(probes, mode)
    compare = output_difference(*probes.args)
    found = survey(good, bad, {m: probes.probe(m, timed=False) for m in modes}, compare,
                   lowered_differently(probes.args[0]))
    steps, why = plan(found, by, refusal)
    if progress:
        progress(f"bisect: {why}")
    return steps, why


def surveyed_modes(probes: Probes, mode: str) -> list[str]:
    """The modes the endpoints are surveyed in: `mode`, or for "auto" frozen and, where the bundle can be
    retraced, retrace."""
    from ...run.retrace import retrace_refusal

    if mode != "auto":
        return [mode]
    return ["frozen"] + ([] if retrace_refusal(probes.args[1].manifest) else ["retrace"])


class KindSearches:
    """The searches of one window's kinds of change over the releases here, each bisection by its own Search
    (`searches`, by mode, for the layer at its boundary): `run` one of mode_choice.plan's bisections, `screen` the
    time screen (mode_choice.time_screen: whether the frozen module also got slower), `split` a bisection that stood
    into the changes its window holds (window_changes.split: every release run once, untimed), `place` a time
    bisection whose confirmation failed (window_changes.place), `sweeper` the sweep of every release of the window
    for the changes of outputs or bits no bisection saw (window_changes.swept_changes). A screen that saw a small
    slowdown has each later bisection time its endpoints beside an A/A control at once (`control`); one whose rounds
    settle a slowdown the endpoints list as they stand is their timed measurement (Probes.taken_as_endpoints). The
    retraced program's screen, the second look at time beside the frozen module's, is skipped where a slowdown of the
    frozen module stood (`stood`)."""

    def __init__(self, probes: Probes, jobs: int, ahead, manager, progress: Callable[[str], None] | None,
                 windows: list[dict] | None = None):
        self.probes, self.jobs, self.ahead, self.progress, self.windows = probes, jobs, ahead, progress, windows
        self.versions, self.left_out = manager.available_versions(), manager.left_out_versions()
        self.searches: dict[str, Search] = {}
        self.control = False
        self.frozen_slowdown: str | None = None  # the first bad release of a frozen module's slowdown that stood
        self.skipped: list[str] = []  # why each time step `screen` skipped was not looked at

    def run(self, mode: str, kind: str, ends: tuple[str, str]):
        self.searches[mode] = Search(self.probes, mode, self.jobs, self.ahead, kind, self.windows,
                                     control=self.control)
        found = self.searches[mode].run(self.versions, *ends, self.progress, left_out=self.left_out)
        self.stood(found)
        return found

    def stood(self, change) -> None:
        """Note a change found (a resumed answer's too): a slowdown of the frozen module that stands makes the
        retraced program's second look at time needless (`screen`)."""
        if (change.mode, change.criterion) == ("frozen", "time") and standing(change):
            self.frozen_slowdown = self.frozen_slowdown or change.first_bad

    def search(self, mode: str) -> Search:
        """The mode's search: the one `run` made, else one made now (the layer of a change a stored answer holds)."""
        return self.searches.setdefault(mode, Search(self.probes, mode, self.jobs, self.ahead, None, self.windows))

    def screen(self, mode: str, ends: tuple[str, str]) -> dict:
        from ...run.replay_options import screen_options
        from .mode_choice import time_screen

        if mode == "retrace" and self.frozen_slowdown:  # the second look at time (mode_choice.plan): not needed
            why = (f"the frozen module's slowdown from jax {self.frozen_slowdown} stands (the layer at its boundary "
                   "says whether JAX's lowering changed there too); its time is not bisected again as the program "
                   "each release lowers")
            self.skipped.append(f"time (retraced): {why}")
            return {"skip": why}

        screened: list[list[dict]] = []
        fresh = self.probes.fresh(mode, "screen", screen_options(self.probes.options))

        def timed(versions):
            screened.append(fresh(versions))
            return screened[-1]

        seen = time_screen(*ends, timed)
        self.control = self.control or _small(seen)
        if screened and not self.control:  # a slowdown it settled as the endpoints would: not timed again
            seen["taken"] = self.probes.taken_as_endpoints(mode, ends, screened[0])
        return seen

    def split(self, found) -> list:
        from .probes import output_difference
        from .window_changes import SWEPT, split

        most = 2 if self.probes.timed_only else SWEPT  # every probe timed: the window searched by its ends alone
        timed = (self.probes.probe(found.mode), self.probes.confirming(found.mode))  # a slowdown's sub-windows
        return split(found, self.versions, self.probes.probe(found.mode, timed=False),
                     output_difference(*self.probes.args), self.progress, timed, most=most, jobs=self.jobs)

    def place(self, found) -> list:
        from .window_changes import place

        return place(found, self.versions, self.probes.probe(found.mode), self.probes.confirming(found.mode),
                     self.progress)

    def sweeper(self, ends: tuple[str, str], modes: list[str], by: str | None):
        """The sweep for window_changes.every_change (None: none): every release of the window run once, untimed,
        in each mode surveyed whose good end runs, for the changes of outputs or bits (`by` one of them: that one;
        time: none); a mode the sweep finds changes in gets its Search (its changes' layer is read by it)."""
        kinds = [by] if by in ("outputs", "bits") else [] if by == "time" else ["outputs", "bits"]
        if not kinds or self.probes.timed_only:
            return None

        def sweep_one():
            from .probes import output_difference
            from .slowdown_claim import usable
            from .window_changes import SWEPT, swept_changes

            # a mode whose good end does not run has no window to sweep (the bisection said why); the survey's runs
            ran = [m for m in modes if usable(self.probes.probe(m, timed=False)([ends[0]])[0])]
            for m in ran:
                self.searches.setdefault(m, Search(self.probes, m, self.jobs, self.ahead, by, self.windows))
            return swept_changes(*ends, self.versions, {m: self.probes.probe(m, timed=False) for m in ran},
                                 output_difference(*self.probes.args), kinds, self.progress, SWEPT, self.jobs)

        return sweep_one


def _small(seen: dict) -> bool:
    """Whether a time screen saw a slowdown whose interval reaches under analysis/resolution.CONTROL_UNDER."""
    from ...analysis.resolution import CONTROL_UNDER

    interval = seen.get("interval") or [0.0, 0.0]
    return seen.get("seen") in ("slower", "small") and interval[0] < CONTROL_UNDER


def bisect_nightlies(registry: Registry, bundle: Bundle, manager, good: str, bad: str, search: Search,
                     options: ReplayOptions, progress: Callable[[str], None] | None):
    """bisect --nightly: the days between `good` and `bad` searched with `search`, and the answer's builds,
    commits, compare URLs and Reproduce lines (investigate/search/nightly_bisect.py)."""
    from . import nightly_bisect

    plan = nightly_bisect.plan_search(manager, good, bad)
    if progress and plan.skipped:
        progress(f"bisect: {len(plan.skipped)} day(s) without a nightly are skipped: "
                 + ", ".join(s["date"] for s in plan.skipped))
    result = search.run(plan.candidates, plan.good, plan.bad, progress, known=nightly_bisect.same_build(manager))
    comparison = comparison_of_bisect(registry, bundle, result, plan.good)
    result.nightly = nightly_bisect.report(manager, plan, result.last_good, result.first_bad,
                                           comparison["reproduce"]["url"], options.args())
    comparison["reproduce"].update(command=result.nightly["command"], nightlies=result.nightly["install"],
                                   versions=[result.last_good, result.first_bad])
    return result, comparison
