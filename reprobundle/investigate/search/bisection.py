"""Bisect: the first released JAX version between a good and a bad one where a bundle regressed.

The regression is what tells the two endpoints apart: an error (the bad one fails to load, compile or run where the
good one runs), wrong outputs (when the bad one mismatches and the good one does not), else outputs that differ
from the good endpoint's (a retraced program whose numbers change from one release on: `bisect rng --good 0.4.30
--bad 0.5.3 --retrace`; both may disagree with the reference, which was traced by the packing release), otherwise
time. For time, every tested version is replayed together with the good endpoint (interleaved, see schedule.py), so
each judgement is a paired verdict made under the same machine conditions: a version is bad when it is
significantly slower than the good one timed beside it, and at least half-way to the bad endpoint in log-ratio
terms. Only slower is worse: a bad end that is faster is no regression by time (said as such), and the first bad
release a time bisection finds is timed again beside the last good one (`confirm`): one that second measurement
does not settle as slower is no first bad release (`standing`).

`by` names the criterion instead of choosing it: "outputs" (beyond the replay's tolerance, against the reference or
the good endpoint's), "bits" (any difference from the good endpoint's outputs: a dtype, a shape, one bit of one
value), "time". The automatic choice says which it took and why (`BisectResult.why`), and when the endpoints'
outputs differ only in bits, within the tolerance, it says so and names `--by bits`: a time bisection could name
another release than the one whose numbers changed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Mapping, Sequence

from ...analysis.resolution import busy_runs, control_needed
from ...analysis.sequential import DETECT_EFFECT
from ...analysis.verdict import leaning, leaning_text, paired_log_ratios, shown_slower, slowdown_ruled_out, timing_verdict
from ...analysis.which_end import Ends, side_text, which_end
from ...envs.versions import is_final_release, parse_version, version_key
from ...errors import TimeSpentError, UsageError
from ...run.budget import STOP_TIME
from ...run.contenders import control_of
from ...text import counted
from .slowdown_claim import (
    UnderResolution,
    beside_control,
    confirmation_why,
    figure_text,
    judged_pair,
    small_entry,
    timing_of,
    usable,
    verdict_line,
)

ReplayTogether = Callable[[Sequence[str]], list]  # versions -> their run records, timed together
# (run, run) -> how their outputs differ: SAME (bit for bit), BITS_ONLY (within the tolerance) or BEYOND it
OutputsDiffer = Callable[[dict, dict], str]
SAME, BITS_ONLY, BEYOND = "same", "bits", "beyond"
OUTPUTS, OUTPUTS_VS_GOOD, BITS, TIME = "outputs", "outputs vs good", "bits", "time"  # the criteria
ERROR = "error"  # a criterion too: the bad end fails (to load, compile or run) where the good end runs
BY = ("outputs", "bits", "time")  # what `by` may name
# (version, the classes so far) -> (class, evidence) when it is known without a replay (the same build as a version
# already classed), else None
Known = Callable[[str, dict], "tuple[str, str] | None"]


class Interrupted(TimeSpentError):
    """Ctrl-C during a probe (build_search.Probes, commit_search's probe): the search stops where it is, as
    --max-time stops it, so that what it had found is stored unfinished and resumed by the next call; the command
    then ends as Ctrl-C ends it (BisectionInterrupted)."""


class NothingStood(UsageError):
    """Every bisection of a window fell (mode_choice.bisect_each): what each set aside, as `set_aside`."""

    def __init__(self, message: str, set_aside: list[dict], hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.set_aside = set_aside


class BisectionInterrupted(KeyboardInterrupt):
    """Ctrl-C during a bisection, raised once what it had found is stored as an unfinished answer (the next call of
    the same question resumes it): `result`, that answer (None where nothing was answered yet)."""

    def __init__(self, result: "BisectResult | None" = None) -> None:
        super().__init__()
        self.result = result


@dataclass
class BisectResult:
    good: str
    bad: str
    criterion: str  # "outputs" (against the reference), "outputs vs good", "bits" or "time"
    first_bad: str
    last_good: str
    runs: dict[str, dict] = field(default_factory=dict)  # version -> run record, every version tested
    classes: dict[str, str] = field(default_factory=dict)  # version -> "good" / "bad" / "skip"
    evidence: dict[str, str] = field(default_factory=dict)  # version -> why it was classed so, one line
    candidates: list[str] = field(default_factory=list)
    nightly: dict | None = None  # bisect --nightly: the builds, commits, compare URLs (see nightly_bisect.report)
    by: str | None = None  # the criterion asked for (`by`), None when chosen
    why: str = ""  # which criterion judged and why, one sentence
    outputs_apart: str | None = None  # how the endpoints' outputs differ: SAME, BITS_ONLY, BEYOND (None: unknown)
    log_ratio: float | None = None  # time: the log ratio a bad version's time moves by (the endpoints')
    layer: dict | None = None  # which layer changed at the boundary (investigate/search/boundary.py)
    spent: dict | None = None  # where the wall time went: run/spent.py's Ledger.as_dict()
    # releases between good and bad that the index lists but that cannot be installed, so were never tested:
    # version -> why ("yanked", "no jaxlib for it on the index"), ascending
    left_out: dict[str, str] = field(default_factory=dict)
    mode: str = "frozen"  # the program replayed: "frozen" (the stored module) or "retrace" (each release's lowering)
    mode_why: str | None = None  # why that one, when it was chosen (investigate/search/mode_choice.py)
    answer_id: str | None = None  # the answer record stored beside the runs (investigate/answers.py)
    # where --max-time ended the search before it was done: what it had narrowed, one line (None: it finished)
    unfinished: str | None = None
    # where the search went on from a stored one --max-time cut short (`resume`): its window, one line (None: it did not)
    resumed: str | None = None
    # where --max-time cut it: "search", "split" (the window's other changes), "layer", "kinds" (a kind not examined)
    cut_at: str | None = None
    # resumed from a stored search that had found its window's changes (cut at its layer or another kind): not split
    searched_whole: bool = False
    # the other changes in the window, each bisected by its own criterion: [{"criterion", "first_bad", "last_good",
    # "why"}] (a time bisection whose endpoints' bits differ also finds the release whose bits changed)
    also: list[dict] = field(default_factory=list)
    # the flags and options whose default changed from the last good to the first bad release
    # (analysis/release_delta.changed_defaults), None where they were not read (nightlies, a probe that failed)
    changed_defaults: list[dict] | None = None
    # time: the endpoints' verdict (bad beside good), and each tested release whose time lies beyond both ends (a
    # series that is not monotone): [{"version", "direction": "faster" | "slower", "ratio", "ci95", "why"}]
    ends_verdict: dict | None = None
    beyond_ends: list[dict] = field(default_factory=list)
    # time: each tested release's verdict beside the good end, in its own probe (the bad end's is ends_verdict):
    # where the time moves more than once (window_changes.split_time)
    verdicts: dict[str, dict] = field(default_factory=dict, repr=False)
    # what was examined and is no regression: [{"criterion", "mode", "why"}] (a bad end that is faster, a time
    # change that was not settled, or one the confirmation beside the last good release did not reproduce)
    set_aside: list[dict] = field(default_factory=list)
    # time: the first bad release timed again beside the last good one, in one paired measurement (confirm):
    # {"confirmed": bool, "verdict", "ratio", "ci95", "why"}; its runs in confirm_runs (the layer check reuses them)
    confirmation: dict | None = None
    confirm_runs: list[dict] = field(default_factory=list)
    also_runs: list[dict] = field(default_factory=list)  # the runs the `also` bisections rest on
    # the other changes in the window, each whole: a BisectResult of its own, with its layer and its stored answer
    # (investigate/search/window_changes.py; the headline is this one); the stored answer lists them all as "changes"
    changes: list["BisectResult"] = field(default_factory=list, repr=False)
    # what the answer saw, or could not see, and does not list as a change, one line each: a slowdown under the
    # resolution (kind "small": not searched), a settled slowdown not placed between neighbouring releases
    # ("unplaced"), the releases of the window never run ("never_ran"): {"kind", "line", ...}
    not_listed: list[dict] = field(default_factory=list)
    # outputs or bits: the release after the first bad one whose outputs are the last good release's again (None:
    # not undone within the window)
    undone: str | None = None
    # time: the endpoints and the confirmation are timed beside an A/A control (analysis/resolution.py) whatever
    # their figures: a screen measured a small slowdown
    aa_control: bool = False
    control_runs: list[dict] = field(default_factory=list, repr=False)  # the A/A controls' runs, stored with them


def program_failed(run: dict) -> bool:
    """Whether a run failed for the program's sake (an error, a crash, a timeout, a module the release refuses), not
    for want of an environment: an error regression where the good end runs."""
    return not usable(run) and not str(run.get("reason", "")).startswith("no environment for jax")


def classify(run: dict, good_run: dict, target_log_ratio: float | None, criterion: str,
             outputs_differ: OutputsDiffer | None = None, ends: Ends | None = None) -> tuple[str, str]:
    """("good" | "bad" | "skip", evidence) for a run against the good endpoint's run timed beside it (by time: see
    by_time, `ends` the change the endpoints measured)."""
    if criterion == ERROR:
        return ("bad", f"{run['status']}: {run['reason']}") if program_failed(run) else \
            ("good", "runs") if usable(run) else ("skip", f"{run['status']}: {run['reason']}")
    if not usable(run):
        return "skip", f"{run['status']}: {run['reason']}"
    if criterion in (OUTPUTS_VS_GOOD, BITS):
        assert outputs_differ is not None  # the criterion is chosen only with it
        return by_outputs(outputs_differ(good_run, run), good_run["requested"], criterion)
    if criterion == OUTPUTS:
        return ("bad", "outputs mismatch") if run["status"] == "mismatch" else ("good", "outputs match")
    if not usable(good_run):
        return "skip", f"the good endpoint failed beside it: {good_run['status']}: {good_run['reason']}"
    assert target_log_ratio is not None  # the time criterion always comes with the endpoints' log ratio
    return by_time(run, good_run, target_log_ratio, ends)


def by_time(run: dict, good_run: dict, target_log_ratio: float, ends: Ends | None = None) -> tuple[str, str]:
    """A run's class by its time beside the good endpoint's: the side the sequential test between the change's two
    `ends` (analysis/which_end.py) said, at the first round it decided; else (no ends, or undecided) bad when its
    paired verdict settled in the change's direction at least half-way to the bad end, good otherwise."""
    cls, line, _decided = time_class(run, good_run, target_log_ratio, ends)
    return cls, line


def time_class(run: dict, good_run: dict, target_log_ratio: float,
               ends: Ends | None = None) -> tuple[str, str, bool]:
    """by_time's (class, evidence), and whether the rounds decided it: a side of the test between the ends, or a
    settled paired verdict; an undecided run is classed good (as before), which only rounds that ran to their end
    may say (a probe --max-time cut is no class: `_classes_of`)."""
    good = good_run["requested"]
    sided = None
    if ends is not None:
        sided = which_end(paired_log_ratios(timing_of(good_run), timing_of(run)) or [], ends)
        if sided.side is not None:
            return sided.side, side_text(sided, ends, good), True
    verdict = timing_verdict(timing_of(good_run), timing_of(run))
    moved = math.log(verdict["ratio"]) if verdict["ratio"] > 0 else 0.0
    same_direction = verdict["verdict"] == ("slower" if target_log_ratio > 0 else "faster")
    cls = "bad" if same_direction and abs(moved) >= abs(target_log_ratio) / 2 else "good"
    line = verdict_line(verdict, good)
    if ends is not None and sided is not None and sided.rounds:
        line += f"; {side_text(sided, ends, good)}"
    return cls, line, verdict.get("settled") is True


def cut_by_time(runs: Sequence[dict]) -> bool:
    """Whether the rounds of a measurement ended because another round would have ended past --max-time (the
    schedule's "time limit", run/budget.py), not because they decided or reached their cap."""
    return any(((run.get("environment") or {}).get("conditions") or {}).get("schedule", {}).get("stopped")
               == STOP_TIME for run in runs)


def by_outputs(apart: str, good: str, criterion: str) -> tuple[str, str]:
    """A run's class by how its outputs differ from the good endpoint's (`apart`), beyond the tolerance or in bits."""
    if apart == BEYOND:
        return "bad", f"outputs differ from jax {good}'s beyond the tolerance"
    if apart == BITS_ONLY:
        return ("bad", f"outputs differ from jax {good}'s in bits, within the tolerance") if criterion == BITS else \
            ("good", f"outputs match jax {good}'s (within the tolerance; some bits differ)")
    return "good", f"outputs are jax {good}'s bit for bit"


def bisect(versions: Sequence[str], good: str, bad: str, replay_together: ReplayTogether,
           progress: Callable[[str], None] | None = None, known: Known | None = None,
           outputs_differ: OutputsDiffer | None = None, by: str | None = None,
           check_together: ReplayTogether | None = None, jobs: int = 1,
           ahead: Callable[[list[str]], None] | None = None,
           left_out: Mapping[str, str] | None = None, confirm_with: ReplayTogether | None = None,
           resume: Sequence[Mapping] | None = None,
           sided_probe: Callable[[Ends], ReplayTogether] | None = None, control: bool = False) -> BisectResult:
    """Search over the released `versions` strictly between `good` and `bad`. `known` classes a version
    without replaying it when it can (bisect --nightly: a day built from the same commits as one already classed).
    `outputs_differ` (two runs -> how their outputs differ) lets endpoints whose outputs differ from each other
    be told apart by outputs. `by` ("outputs", "bits", "time") names the criterion; None chooses it.

    `check_together` replays versions for their outputs alone (each once, untimed): with it, the endpoints are first
    told apart by outputs and timed (`replay_together`) only when outputs do not decide, and every probe of an
    outputs or bits bisection is a check. Such a bisection tests up to `jobs` versions per step (a (jobs+1)-ary
    split); a time bisection tests one version per step, timed beside the good endpoint, as before. `ahead` is told,
    before the endpoints and before each step of an untimed bisection, the versions the step after it may test
    (their environments can be made meanwhile). `left_out`: releases the index lists but cannot install, with why
    (EnvironmentManager.left_out_versions); those between `good` and `bad` are the result's `left_out`.
    `confirm_with` times the confirmation (default `replay_together`): a probe that measures anew, never one that
    hands back runs it remembers (the pair may be the endpoints, or a probe the bisection already made).
    `resume`: windows a stored search of the same question narrowed before --max-time cut it short ({"criterion",
    "last_good", "first_bad", "classes", "evidence"}); the one of the criterion the endpoints choose is where the
    search starts (`resumed_window`): the endpoints are still checked, the releases outside it not probed again.
    `sided_probe`, given the change the timed endpoints measured (analysis/which_end.Ends), is the time probe that
    stops each release's rounds as soon as the test between the two ends says which end it is like (default
    `replay_together`); every time probe is classed by that test first (by_time). `control`: the endpoints' and the
    confirmation's timings carry an A/A control whatever their figures (analysis/resolution.py: a screen measured a
    small slowdown); without it one is added where they show the need (a small slowdown; a busy machine, for the
    confirmation)."""
    ordered = sorted(set(versions) | {good, bad}, key=version_key)
    if version_key(good) >= version_key(bad):
        raise UsageError(f"--good {good} must be older than --bad {bad}")
    candidates = [v for v in ordered if version_key(good) < version_key(v) < version_key(bad)]
    _check_by(by, outputs_differ)
    result = BisectResult(good, bad, TIME, first_bad=bad, last_good=good, candidates=candidates, by=by,
                          left_out=_left_out_between(left_out, good, bad), aa_control=control)
    if ahead:  # the endpoints' environments side by side, then the first step's
        ahead([good, bad, *split_points(candidates, max(1, jobs))])
    result.log_ratio = _endpoints(result, replay_together, outputs_differ, check_together)
    checks = check_together if check_together is not None and result.criterion != TIME else replay_together
    ends = endpoints_ends(result) if result.criterion == TIME else None
    timed = sided_probe(ends) if sided_probe is not None and ends is not None else replay_together
    _narrow(result, timed if result.criterion == TIME else checks, max(1, jobs), known, outputs_differ,
            progress, ahead, resumed_window(result, resume))
    if result.criterion == TIME:
        confirm(result, confirm_with or replay_together, progress)
    return result


def _narrow(result: BisectResult, probe: ReplayTogether, jobs: int, known: Known | None,
            outputs_differ: OutputsDiffer | None, progress: Callable[[str], None] | None,
            ahead: Callable[[list[str]], None] | None, start: tuple[str, str] | None = None) -> None:
    """The search between the endpoints `result` told apart (or inside `start`, a window a stored search narrowed):
    its first bad and last good release, or, where --max-time ended it (TimeSpentError), what it had narrowed, said
    in `result.unfinished`."""
    per_step = jobs if result.criterion != TIME else 1
    last_good, first_bad = start or (result.good, result.bad)
    # untested versions strictly between last_good and first_bad, ascending
    remaining = [v for v in result.candidates if version_key(last_good) < version_key(v) < version_key(first_bad)]
    while remaining:
        picks = split_points(remaining, per_step)
        if progress:
            progress(_step_line(remaining, last_good, first_bad, picks))
        if ahead and result.criterion != TIME:  # nothing is made in the background while a probe is timed
            ahead([*picks, *next_picks(remaining, picks, per_step)])
        try:
            classes = _classes_of(result, picks, probe, result.log_ratio, known, outputs_differ)
        except TimeSpentError as e:  # what was narrowed is the answer, said as such
            result.cut_at = "search"
            result.unfinished = (f"{e.message}: the change lies after jax {last_good} and by jax {first_bad}; "
                                 f"{_count_of(remaining)} between them untested")
            break
        last_good, first_bad, remaining = narrowed(remaining, classes, last_good, first_bad)
    result.first_bad, result.last_good = first_bad, last_good


def _count_of(builds: Sequence[str]) -> str:
    """"3 releases", or "3 builds" where one is no plain release (a JAX commit, a nightly)."""
    plain = all((v := parse_version(b)) is not None and is_final_release(v) for b in builds)
    noun = "release" if plain else "build"
    return counted(len(builds), noun)


def resumed_window(result: BisectResult, resume: Sequence[Mapping] | None) -> tuple[str, str] | None:
    """The window (last good, first bad) a stored search of `result`'s criterion narrowed before --max-time cut it
    short, where the search goes on from (None: from the endpoints). It must lie between the endpoints and bound
    releases of this search; the releases it classed outside it keep their classes and evidence (not probed
    again), said in `result.resumed`."""
    window = _window_of(result, resume)
    if window is None:
        return None
    lo, hi = str(window["last_good"]), str(window["first_bad"])
    classes, evidence = dict(window.get("classes") or {}), dict(window.get("evidence") or {})
    classes.update({lo: "good", hi: "bad"})
    outside = [v for v in result.candidates if not version_key(lo) < version_key(v) < version_key(hi)]
    for v in (v for v in outside if v in classes):
        result.classes[v] = str(classes[v])
        result.evidence[v] = str(evidence.get(v) or "classed by the stored search --max-time or Ctrl-C cut short")
    inside = len(result.candidates) - len(outside)
    result.searched_whole = window.get("cut_at") in ("layer", "kinds")
    result.resumed = (f"resumed from a stored search cut short: the change lies after jax {lo} and by jax {hi}; "
                      f"{counted(len(outside), 'release')} outside that window not probed "
                      f"again, {inside} inside it searched")
    return lo, hi


def _window_of(result: BisectResult, resume: Sequence[Mapping] | None) -> Mapping | None:
    """The stored window of `result`'s criterion whose ends are builds of this search, in order; None where none is."""
    window = next((w for w in resume or () if w.get("criterion") == result.criterion), None)
    ends = [result.good, *result.candidates, result.bad]
    lo, hi = (str(window.get("last_good")), str(window.get("first_bad"))) if window else ("", "")
    if window is None or lo not in ends or hi not in ends or version_key(lo) >= version_key(hi):
        return None
    return window


def confirm(result: BisectResult, replay_together: ReplayTogether,
            progress: Callable[[str], None] | None = None) -> None:
    """A time bisection's first bad release timed again beside its last good one, in one paired measurement of
    its own (`replay_together` must measure anew: new processes, new rounds): a first bad release only where this
    second measurement settles it as slower too, at the resolution the tool measures (slowdown_claim.py: its
    interval above 1.05, and beyond the last good release against itself, timed in the same rounds where the machine
    is busy or the slowdown small) (result.confirmation, with its runs' ids; its runs in result.confirm_runs, the
    control's in result.control_runs). What it does not reproduce is no first bad release: `standing` says so.
    Runs already among the bisection's (a probe that remembered them) are refused: a confirmation never repeats the
    figures it confirms."""
    pair = [result.last_good, result.first_bad]
    control = beside_control(result.aa_control, bool(result.control_runs or busy_runs(list(result.runs.values()))),
                             [result.ends_verdict, result.verdicts.get(result.first_bad)])
    if progress:
        progress(f"bisect: confirming: jax {pair[1]} timed again beside jax {pair[0]}"
                 + (" and beside itself (an A/A control)" if control else ""))
    try:
        runs = replay_together([*pair, *([control_of(pair[0])] if control else [])])
    except TimeSpentError as e:  # not measured: the search's finding stands, unfinished, for the next call
        _cut_confirmation(result, None, [], cut_by(e), f"not timed again: {e.message}")
        return
    earlier = {id(run) for run in result.runs.values()} | {r.get("run_id") for r in result.runs.values()} - {None}
    assert not any(id(run) in earlier or run.get("run_id") in earlier for run in runs), \
        "the confirmation was handed the bisection's own runs: its probe must measure anew"
    runs, controls = list(runs[:2]), list(runs[2:])
    result.confirm_runs, result.control_runs = runs, [*result.control_runs, *controls]
    failed = next((r for r in runs if not usable(r)), None)
    if failed is not None:
        result.confirmation = {"confirmed": False, "verdict": None, "ratio": None, "ci95": None,
                               "why": f"the confirmation did not run: jax {failed['requested']} {failed['status']}: "
                                      f"{failed['reason']}"}
        return
    _confirmed(result, runs, controls, control)


def _confirmed(result: BisectResult, runs: list[dict], controls: list[dict], asked_control: bool) -> None:
    """The confirmation's verdict on its runs (and its control's), as `result.confirmation`; one --max-time cut
    before its side of the resolution was known is said cut, neither confirmed nor refuted."""
    pair = (result.last_good, result.first_bad)
    verdict = timing_verdict(timing_of(runs[0]), timing_of(runs[1]))
    seen = judged_pair(runs[0], runs[1], controls[0] if controls else None, pair[0], asked_control)
    confirmed = verdict["verdict"] == "slower" and seen["listed"]
    undecided = verdict.get("settled") is not True or verdict["verdict"] == "slower"  # its side of 1.05 open
    if not confirmed and undecided and cut_by_time(runs):  # the budget ended it undecided
        _cut_confirmation(result, verdict, runs, "--max-time", figure_text(verdict))
        return
    result.confirmation = {"confirmed": confirmed, "verdict": verdict["verdict"], "ratio": verdict["ratio"],
                           "ci95": verdict.get("ci95"),
                           "why": confirmation_why(pair, verdict, seen, result.evidence.get(pair[1], "")[:1000]),
                           "resolution": seen["said"], "control": seen["control"],
                           "under": shown_slower(verdict) and not confirmed,
                           "run_ids": [r.get("run_id") for r in runs if r.get("run_id")],
                           "control_ids": [r.get("run_id") for r in controls if r.get("run_id")]}


def _cut_confirmation(result: BisectResult, verdict: dict | None, runs: Sequence[dict], by: str, seen: str) -> None:
    """The confirmation --max-time or Ctrl-C (`by`) cut before it settled: neither confirmed nor refuted
    ("confirmed": None, "cut": by), what it had measured (`seen`) said; the search's finding stands as an unfinished
    answer (cut_at "confirm" where the search itself was whole), which the next call confirms."""
    good, bad = result.last_good, result.first_bad
    v = verdict or {}
    result.confirmation = {"confirmed": None, "cut": by, "verdict": v.get("verdict"), "ratio": v.get("ratio"),
                           "ci95": v.get("ci95"), "rounds": v.get("rounds"),
                           "why": f"cut by {by}: jax {bad} timed again beside jax {good}: {seen}; not settled, "
                                  "not refuted: the next call confirms it",
                           "run_ids": [r.get("run_id") for r in runs if r.get("run_id")]}
    result.confirm_runs = list(runs)
    said = f"the confirmation of jax {bad} was cut by {by} ({seen})"
    result.unfinished = f"{result.unfinished}; {said}" if result.unfinished else said
    result.cut_at = result.cut_at or "confirm"


def cut_by(e: TimeSpentError) -> str:
    """What cut a search: "Ctrl-C" (Interrupted) or "--max-time"."""
    return "Ctrl-C" if isinstance(e, Interrupted) else "--max-time"


def standing(result: BisectResult) -> bool:
    """Whether the bisection's first bad release stands: any by outputs or bits; by time, one the confirmation
    reproduced, or one it could not settle before --max-time or Ctrl-C cut it (an unfinished answer: the next call
    confirms it); a bisection without one, as before it was made, stands. Only a confirmation that measured and
    did not reproduce it, or did not run, refutes it."""
    return result.criterion != TIME or (result.confirmation or {}).get("confirmed", True) is not False


def first_bad_text(result: BisectResult) -> str:
    """The headline's release as the answer can claim it: `first bad release 0.4.34`; where the search was cut
    (--max-time, Ctrl-C) with releases untested before its first bad one, every release the change may be at,
    `first bad release 0.4.33 or 0.4.34`, and what a cut confirmation had measured: `(0.4.34: 51x [21-126] slower
    in 3 rounds; cut by --max-time)`."""
    lo, hi = version_key(result.last_good), version_key(result.first_bad)
    untested = [v for v in result.candidates if lo < version_key(v) < hi and result.classes.get(v) != "good"]
    may_be = [*untested, result.first_bad] if result.unfinished else [result.first_bad]
    listed = ", ".join(may_be[:-1]) + " or " + may_be[-1] if len(may_be) > 1 else may_be[0]
    said = "first bad release " + (listed if len(may_be) <= 3 else
                                   f"one of the {len(may_be)} releases from {may_be[0]} to {may_be[-1]}")
    cut = result.confirmation if (result.confirmation or {}).get("cut") else None
    if cut is not None:
        seen = figure_text(cut) if cut.get("rounds") else "not timed again"
        said += f" ({result.first_bad}: {seen}; cut by {cut['cut']})"
    return said


def _step_line(remaining: Sequence[str], last_good: str, first_bad: str, picks: Sequence[str]) -> str:
    left = f"{len(remaining)} version{'s' if len(remaining) != 1 else ''} left"
    return (f"bisect: {left} between {last_good} and {first_bad}; testing " + ", ".join(picks)
            + (" at once" if len(picks) > 1 else ""))


def bisect_every_change(versions: Sequence[str], good: str, bad: str, replay_together: ReplayTogether,
                        **kw) -> BisectResult:
    """`bisect`, and where it chose time while the endpoints' outputs also differ in bits (within the tolerance),
    the release whose bits changed too, by an untimed bisection by bits (its endpoints' runs are the first one's
    when the probe remembers them): "bits change at V1; slower from V2", never one change hidden behind the
    other. Only with `by` unset and outputs compared."""
    result = bisect(versions, good, bad, replay_together, **kw)
    if kw.get("by") is None and result.criterion == TIME and result.outputs_apart == BITS_ONLY:
        try:
            bits = bisect(versions, good, bad, replay_together, **{**kw, "by": BITS, "ahead": None})
        except TimeSpentError as e:  # the time change found stands; the bits are the next call's
            result.set_aside.append({"criterion": BITS, "mode": result.mode, "why": f"not bisected: {e.message}",
                                     "unfinished": True})
            result.unfinished = result.unfinished or f"{cut_by(e)} came before the bits were bisected"
            result.cut_at = result.cut_at or "kinds"
            return result
        if not standing(result):  # the time change did not show again: the bits are the answer
            bits.set_aside.append(unconfirmed(result))
            bits.why = bits.why.removeprefix("--by bits: ")
            bits.by = None
            return bits
        result.also.append(also_entry(bits))
    return result


def also_entry(other: BisectResult) -> dict:
    """Another change in the window, as the headline's `also` holds it."""
    return {"criterion": other.criterion, "first_bad": other.first_bad, "last_good": other.last_good,
            "why": other.why, "classes": other.classes, "mode": other.mode,
            "evidence": other.evidence.get(other.first_bad), "confirmation": other.confirmation}


def unconfirmed(result: BisectResult) -> dict:
    """A time bisection whose first bad release the confirmation did not reproduce, as `set_aside` holds it."""
    return {"criterion": TIME, "mode": result.mode, "first_bad": result.first_bad, "last_good": result.last_good,
            "why": (result.confirmation or {}).get("why", ""), "confirmation": result.confirmation}


def _left_out_between(left_out: Mapping[str, str] | None, good: str, bad: str) -> dict[str, str]:
    """The releases of `left_out` (version -> why it cannot be installed) strictly between `good` and `bad`,
    ascending."""
    inside = [v for v in left_out or {} if version_key(good) < version_key(v) < version_key(bad)]
    return {v: (left_out or {})[v] for v in sorted(inside, key=version_key)}


def split_points(remaining: Sequence[str], k: int) -> list[str]:
    """The versions to test at once among `remaining` (ascending): k points splitting it into k + 1 nearly equal
    parts; for k = 1 the middle one, the binary search's."""
    n = len(remaining)
    k = min(k, n)
    return [remaining[i] for i in sorted({min(n - 1, (j + 1) * n // (k + 1)) for j in range(k)})]


def next_picks(remaining: Sequence[str], picks: Sequence[str], k: int) -> list[str]:
    """Every version the step after testing `picks` may test, whichever way they turn out."""
    bounds = [-1] + [remaining.index(p) for p in picks] + [len(remaining)]
    return [v for lo, hi in zip(bounds, bounds[1:]) for v in split_points(remaining[lo + 1:hi], k)]


def narrowed(remaining: Sequence[str], classes: dict[str, str], last_good: str,
             first_bad: str) -> tuple[str, str, list[str]]:
    """(last good, first bad, the versions still untested between them) after `classes` of some of `remaining`: the
    lowest bad one bounds the search from above, the highest good one below it from below; skipped ones are dropped."""
    bad = [v for v in remaining if classes.get(v) == "bad"]
    if bad:
        first_bad = bad[0]
    good = [v for v in remaining if classes.get(v) == "good" and version_key(v) < version_key(first_bad)]
    if good:
        last_good = good[-1]
    left = [v for v in remaining if v not in classes
            and version_key(last_good) < version_key(v) < version_key(first_bad)]
    return last_good, first_bad, left


def _check_by(by: str | None, outputs_differ: OutputsDiffer | None) -> None:
    if by is not None and by not in BY:
        raise UsageError(f"bisect --by {by!r} is not one of {', '.join(BY)}")
    if by in (OUTPUTS, BITS) and outputs_differ is None:
        raise UsageError(f"bisect --by {by} compares outputs, which this bisection cannot", hint="bisect --by time")


def _endpoints(result: BisectResult, replay_together: ReplayTogether, outputs_differ: OutputsDiffer | None,
               check_together: ReplayTogether | None = None) -> float | None:
    """The endpoints replayed together, what tells them apart (result.criterion, why, evidence, classes), and the
    log ratio a bad version's time moves by (None when outputs tell them apart). With `check_together`, their
    outputs first, untimed; timed together only when the outputs do not tell them apart (or `by` is time), beside
    an A/A control where `result.aa_control` asks for one."""
    good, bad = result.good, result.bad
    check = check_together if result.by != TIME else None
    g, b, _ = _replay_endpoints(result, check or replay_together, control=check is None and result.aa_control)
    result.classes = {good: "good", bad: "bad"}
    result.outputs_apart = outputs_differ(g, b) if outputs_differ is not None and usable(b) else None
    if _outputs_decide(result, g, b):
        return None
    if check is not None:
        g, b, _ = _replay_endpoints(result, replay_together, control=result.aa_control)
    return _time_decides(result, g, b, replay_together)


def _replay_endpoints(result: BisectResult, replay_together: ReplayTogether,
                      control: bool = False) -> tuple[dict, dict, dict | None]:
    """The endpoints' runs, and the good end's A/A control timed in the same rounds where `control` (else None)."""
    good, bad = result.good, result.bad
    g, b, *c = replay_together([good, bad, *([control_of(good)] if control else [])])
    result.runs[good], result.runs[bad] = g, b
    result.control_runs = list(c) or result.control_runs
    fails_where_good_runs = usable(g) and program_failed(b) and result.by in (None, OUTPUTS)
    for name, run in (("good", g), ("bad", b)):
        if not usable(run) and not (name == "bad" and fails_where_good_runs):  # that is an error regression
            no_environment = str(run["reason"]).startswith("no environment for jax")
            raise UsageError(f"the {name} version {run['requested']} did not run ({run['status']}): {run['reason']}",
                             hint="pick endpoints whose environments can be made (`reprobundle envs` lists those "
                                  "made here)" if no_environment else "pick endpoints on which the bundle runs")
    return g, b, (c[0] if c else None)


def _outputs_decide(result: BisectResult, g: dict, b: dict) -> bool:
    """Whether outputs tell the endpoints apart under `result.by` (then result's criterion, why and evidence say
    how); a UsageError when `by` asks for outputs or bits and they do not."""
    good, bad, apart = result.good, result.bad, result.outputs_apart
    asked = f"--by {result.by}: " if result.by else ""
    if not usable(b):  # _replay_endpoints let it through: it fails where the good end runs
        result.criterion = ERROR
        result.why = f"{asked}jax {bad} fails ({b['status']}: {str(b['reason'])[:300]}) where jax {good} runs"
        result.evidence = {good: "runs", bad: f"{b['status']}: {b['reason']}"}
        return True
    if result.by in (None, OUTPUTS) and b["status"] == "mismatch" and g["status"] == "ok":
        result.criterion = OUTPUTS
        result.why = f"{asked}jax {bad}'s outputs mismatch the reference and jax {good}'s match it"
        result.evidence = {good: "outputs match", bad: "outputs mismatch"}
        return True
    if result.by in (None, OUTPUTS) and apart == BEYOND or result.by == BITS and apart in (BEYOND, BITS_ONLY):
        result.criterion = OUTPUTS_VS_GOOD if result.by != BITS else BITS
        result.why = f"{asked}{_apart_text(good, bad, apart)}"
        result.evidence = {good: "the good endpoint", bad: by_outputs(str(apart), good, result.criterion)[1]}
        return True
    if result.by in (OUTPUTS, BITS):
        raise UsageError(f"jax {good} and {bad} are not distinguishable by --by {result.by}: "
                         f"{_apart_text(good, bad, apart)}",
                         hint=f"bisect --by {'bits' if apart == BITS_ONLY else 'time'}")
    return False


def _time_decides(result: BisectResult, g: dict, b: dict, replay_together: ReplayTogether) -> float | None:
    """The endpoints told apart by time (result's why and evidence): the log ratio a bad version's time moves by.
    Only a settled slowdown is a regression by time, and only one at the resolution the tool measures
    (analysis/resolution.py: its interval above 1.05, and beyond an A/A control timed in the same rounds where the
    machine is busy or the slowdown small, the endpoints then timed again beside one): a bad endpoint that is
    faster, not settled as slower, or slower by less than that is none; without `by`, endpoints whose bits differ
    (within the tolerance) are then judged by bits, the time said in `set_aside` (None returned); else a UsageError
    that says what the time showed (UnderResolution for a small slowdown: never searched)."""
    good, bad, apart = result.good, result.bad, result.outputs_apart
    verdict = timing_verdict(timing_of(g), timing_of(b))
    result.ends_verdict = verdict
    if not shown_slower(verdict):  # a 1.03x settled within 5% is a slowdown too, under the resolution: said below
        _not_slower(result, verdict)  # judged by bits, or a UsageError
        return None
    seen = _ends_judged(result, g, b, replay_together)
    if not seen["listed"]:
        _under_resolution(result, seen)  # judged by bits, or UnderResolution
        return None
    verdict = result.ends_verdict
    if result.by:
        result.why = f"--by time: jax {bad} is slower than jax {good} timed beside it"
    else:
        result.why = (f"jax {bad} is slower than jax {good} timed beside it; {_apart_text(good, bad, apart)}"
                      + ("; bisect --by bits finds the release whose bits changed, which may be another one"
                         if apart == BITS_ONLY else ""))
    result.evidence = {good: "the good endpoint", bad: f"{verdict_line(verdict, good)}; {seen['said']}"}
    return math.log(verdict["ratio"])


def _not_slower(result: BisectResult, verdict: dict) -> None:
    """Endpoints whose bad end is not settled slower: judged by bits where theirs differ and `by` is unset (the
    time said in `set_aside`), else a UsageError that says what the time showed."""
    good, bad, apart = result.good, result.bad, result.outputs_apart
    said = not_slower_text(verdict, good, bad)
    if result.by is None and apart == BITS_ONLY:
        _judged_by_bits(result, said)
        return
    if verdict["verdict"] == "faster" or leaning(verdict) == "faster":  # the speedup is the answer
        raise UsageError(said + ("" if apart in (SAME, None) else f"; {_apart_text(good, bad, apart)}"),
                         hint="bisect --by bits to find the release whose bits changed" if apart == BITS_ONLY
                         else "a faster release is no regression")
    if leaning(verdict) == "slower" and not slowdown_ruled_out(verdict):
        raise UsageError(f"jax {good} and {bad} are not told apart yet: {_apart_text(good, bad, apart)}; their "
                         f"time: {leaning_text(verdict)}", hint="bisect again with more --rounds (e.g. --rounds 8)")
    raise UsageError(f"jax {good} and {bad} are not distinguishable: {_apart_text(good, bad, apart)}; {said}",
                     hint="bisect --by bits to find the release whose bits changed" if apart == BITS_ONLY else
                     "nothing regressed between them that this measurement sees (outputs, bits, time): pick "
                     "other endpoints, or more --rounds if a slowdown under a few percent is expected")


def _judged_by_bits(result: BisectResult, said: str) -> None:
    """Endpoints whose time is no change (`said`) and whose bits differ: the bisection is by bits."""
    good, bad = result.good, result.bad
    result.set_aside.append({"criterion": TIME, "why": said})
    result.criterion = BITS
    result.why = f"{said}; {_apart_text(good, bad, BITS_ONLY)}: judged by bits"
    result.evidence = {good: "the good endpoint", bad: by_outputs(BITS_ONLY, good, BITS)[1]}


def _ends_judged(result: BisectResult, g: dict, b: dict, replay_together: ReplayTogether) -> dict:
    """analysis/resolution.judged of the endpoints' slowdown, beside the A/A control they were timed with; a small
    one (its interval reaching under 1.2x) the rule lists without a control timed again beside one, so that no
    search starts for what the good release does against itself. (A busy machine's control is the confirmation's:
    what it confirms is what is listed.)"""
    c = result.control_runs[0] if result.control_runs else None
    seen = judged_pair(g, b, c, result.good, c is not None)
    if not seen["listed"] or c is not None or not control_needed(result.ends_verdict, False):
        return seen
    g, b, c = _replay_endpoints(result, replay_together, control=True)  # anew, the control in the same rounds
    result.ends_verdict = timing_verdict(timing_of(g), timing_of(b))
    return judged_pair(g, b, c, result.good, True)


def _under_resolution(result: BisectResult, seen: dict) -> None:
    """Endpoints settled slower by less than the resolution: one line (`not_listed`), never searched; judged by
    bits where theirs differ and `by` is unset, else UnderResolution."""
    entry = small_entry(result.good, result.bad, result.ends_verdict or {}, seen, ends=True)
    if result.by is None and result.outputs_apart == BITS_ONLY:
        result.not_listed.append(entry)
        _judged_by_bits(result, entry["line"])
        return
    raise UnderResolution(entry["line"], entry, hint="a slowdown is a change only where its interval lies above "
                                                     "1.05x (and beyond the good release against itself on a busy "
                                                     "machine); time it alone with more --rounds on a quiet machine")


def not_slower_text(verdict: dict, good: str, bad: str) -> str:
    """What a time verdict that is no slowdown says: "jax 0.4.33 is 0.62x [0.60-0.64] of jax 0.4.30's time: faster;
    nothing regressed by time", or that no significant change (or only a leaning one) was seen."""
    ci = verdict.get("ci95")
    ratio = f"{verdict['ratio']:.2f}x" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else "")
    if verdict["verdict"] == "faster" or leaning(verdict) == "faster":
        settled = "" if verdict["verdict"] == "faster" else " (leaning, not settled)"
        return f"jax {bad} is {ratio} of jax {good}'s time: faster{settled}; nothing regressed by time"
    if not verdict.get("settled", True) and slowdown_ruled_out(verdict):
        return (f"jax {bad} is {ratio} of jax {good}'s time: a slowdown of {DETECT_EFFECT:.0%} or more ruled out in "
                f"{verdict['no_slowdown_at']} rounds; nothing regressed by time")
    if leaning(verdict) == "slower":
        return f"jax {bad} is not settled as slower than jax {good}: {leaning_text(verdict)}"
    return f"no significant time change ({verdict_line(verdict, good)})"


def _apart_text(good: str, bad: str, apart: str | None) -> str:
    """How the endpoints' outputs differ, as the bisection's answer says it."""
    return {BEYOND: f"the outputs of jax {good} and {bad} differ beyond the tolerance",
            BITS_ONLY: f"the outputs of jax {good} and {bad} differ in bits, within the tolerance",
            SAME: f"the outputs of jax {good} and {bad} are the same bit for bit",
            None: "same outputs"}[apart]


def endpoints_ends(result: BisectResult) -> Ends | None:
    """The change a time bisection's endpoints measured in their paired rounds, which its probes are judged
    against (None without two paired rounds)."""
    good, bad = result.runs.get(result.good), result.runs.get(result.bad)
    if good is None or bad is None:
        return None
    return pair_ends(good, bad)


def confirmed_ends(result: BisectResult) -> Ends | None:
    """The change a time bisection's confirmation measured (its last good and first bad release timed together
    again), which what is asked of the change after it (explain's experiments) is judged against; None where it did
    not run."""
    if result.criterion != TIME or len(result.confirm_runs) != 2:
        return None
    return pair_ends(*result.confirm_runs)


def pair_ends(good_run: dict, bad_run: dict) -> Ends | None:
    """The change between two runs timed together (analysis/which_end.Ends), or None."""
    return Ends.of(paired_log_ratios(timing_of(good_run), timing_of(bad_run)) or [])


def _classes_of(result: BisectResult, versions: Sequence[str], replay_together: ReplayTogether,
                target: float | None, known: Known | None, outputs_differ: OutputsDiffer | None) -> dict[str, str]:
    """`versions` classed ("good", "bad", "skip"): by `known` when it can, the rest replayed together (each beside
    the good endpoint when timings decide: then one version at a time); classes and evidence recorded in `result`."""
    classes: dict[str, str] = {}
    unknown = []
    for version in versions:
        decided = known(version, result.classes) if known else None
        if decided is None:
            unknown.append(version)
        else:
            classes[version], result.evidence[version] = decided
    endpoint = result.runs[result.good]
    if unknown and result.criterion in (OUTPUTS, OUTPUTS_VS_GOOD, BITS, ERROR):
        replayed = [(v, endpoint, run) for v, run in zip(unknown, replay_together(unknown))]
    else:  # each beside the good endpoint, whose run timed with it is what it is judged against
        replayed = [(v, *replay_together([result.good, v])) for v in unknown]
    ends = endpoints_ends(result) if result.criterion == TIME else None
    for version, good_run, run in replayed:
        result.runs[version] = run
        _refuse_cut_short(result, version, good_run, run, ends)
        classes[version], result.evidence[version] = classify(run, good_run, target, result.criterion,
                                                              outputs_differ, ends)
        if result.criterion == TIME and classes[version] != "skip" and usable(good_run):
            result.verdicts[version] = timing_verdict(timing_of(good_run), timing_of(run))
            _note_beyond_ends(result, version, result.verdicts[version])
    result.classes.update(classes)
    return classes


def _refuse_cut_short(result: BisectResult, version: str, good_run: dict, run: dict, ends: Ends | None) -> None:
    """TimeSpentError where --max-time ended a time probe's rounds before they said its side: an undecided probe
    is no class (a 55x slower release cut after one round is not "good"), so the search keeps its window with that
    release untested."""
    if result.criterion != TIME or not (usable(run) and usable(good_run)) or not cut_by_time([run, good_run]):
        return
    assert result.log_ratio is not None  # a time bisection's endpoints measured it
    _cls, evidence, decided = time_class(run, good_run, result.log_ratio, ends)
    if not decided:
        raise TimeSpentError(f"--max-time ended jax {version}'s rounds before they said its side ({evidence})")


def beyond_ends(ends: dict, probe: dict) -> str | None:
    """"faster" or "slower" when a release's time, judged beside the good end, lies beyond both ends of the window:
    settled the other way than the bad end moved (then beyond the good end, and the bad end lies on the other side),
    or the same way with its whole 95% interval past the bad end's. None when it lies between them or is unsettled."""
    change, seen = ends.get("verdict"), probe.get("verdict")
    if change not in ("slower", "faster") or seen not in ("slower", "faster") or not probe.get("settled", True):
        return None
    if not probe.get("ci95") or not ends.get("ci95"):  # a verdict without an interval (too few rounds)
        return None
    if seen != change:
        return seen
    (lo, hi), (end_lo, end_hi) = probe["ci95"], ends["ci95"]
    past = lo > end_hi if change == "slower" else hi < end_lo
    return seen if past else None


def _note_beyond_ends(result: BisectResult, version: str, verdict: dict) -> None:
    direction = beyond_ends(result.ends_verdict or {}, verdict)
    if direction is None:
        return
    ends = result.ends_verdict or {}
    lo, hi = verdict["ci95"]
    end_lo, end_hi = ends["ci95"]
    why = (f"jax {version} is {direction} than both ends: {verdict['ratio']:.2f}x [{lo:.2f}-{hi:.2f}] of jax "
           f"{result.good}'s time, where jax {result.bad} is {ends['ratio']:.2f}x [{end_lo:.2f}-{end_hi:.2f}]: the "
           "time does not move once and stay; the window holds more than one change")
    result.beyond_ends.append({"version": version, "direction": direction, "ratio": verdict["ratio"],
                               "ci95": [lo, hi], "why": why})
