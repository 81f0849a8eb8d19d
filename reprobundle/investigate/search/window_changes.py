"""Every change in a window, each standing alone: the answer of bisect and investigate is a list of changes.

A bisection by outputs or bits (investigate/search/bisection.py) finds the first release whose outputs differ from the
good end's; a window may hold more: the outputs change at 0.5.0 and again at 0.5.1, each change its own. Here the
window is searched by its ends, over an ordered list of builds: two builds whose outputs differ hold a change
between them; the build in the middle is replayed and each half whose ends still differ is searched again, until
each change is a pair of neighbouring builds (`transitions`). What tells two builds apart is the kind's: by outputs
(beyond the tolerance, or one that fails where the other runs), by bits (any difference). A change that comes and
goes inside a half whose ends agree is not seen: no search over ends can see it. A time that moves more than once
is searched the same way where the time bisection's own verdicts show it (`split_time`, below).

`split` makes each transition of a bisection's kind its own BisectResult (its last good and first bad release, its
runs, why), `every_change` runs the planned bisections (mode_choice.plan and bisect_each, unchanged) and ranks what
stood: outputs or errors, then settled slowdowns (the largest first), then bits, each kind by release; the first is
the headline.
`change_entry` is a change as the stored answer lists it (investigate/answers.py: "changes"), with the steps that
answered it (its layer, explain, first bad commit, newest release).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Callable, Sequence

from ...analysis.verdict import timing_verdict
from ...envs.versions import version_key
from .bisection import (
    BEYOND,
    BITS,
    BITS_ONLY,
    ERROR,
    OUTPUTS,
    OUTPUTS_VS_GOOD,
    SAME,
    TIME,
    BisectResult,
    OutputsDiffer,
    ReplayTogether,
    also_entry,
    confirm,
    program_failed,
    standing,
)

FAILS, RUNS_AGAIN = "fails", "runs again"  # how two builds differ besides their outputs: one fails where the other runs
KIND_OF = {OUTPUTS: "outputs", OUTPUTS_VS_GOOD: "outputs", ERROR: "outputs", TIME: "time", BITS: "bits"}
RANK = {"outputs": 0, "time": 1, "bits": 2}  # the kinds of change, the most severe first (mode_choice.SEVERITY)


def _usable(run: dict) -> bool:
    return run.get("status") in ("ok", "mismatch")


def how_apart(a: dict, b: dict, apart: OutputsDiffer) -> str | None:
    """How build b differs from build a before it: SAME, BITS_ONLY, BEYOND (their outputs, or one matching the
    reference where the other does not), FAILS (b fails for the program's sake where a runs), RUNS_AGAIN (the
    other way); None where either did not run for want of an environment (no judgement)."""
    if not _usable(a) or not _usable(b):
        failed_a, failed_b = program_failed(a), program_failed(b)
        if (not _usable(a) and not failed_a) or (not _usable(b) and not failed_b):
            return None
        return SAME if failed_a and failed_b else FAILS if failed_b else RUNS_AGAIN
    if {a["status"], b["status"]} == {"ok", "mismatch"}:
        return BEYOND
    return apart(a, b)


def searched(kind: str) -> tuple[str, ...]:
    """The differences a search by `kind` ("outputs" or "bits") looks for: the kind's changes are those."""
    return (BEYOND, FAILS) if kind == "outputs" else (BITS_ONLY, BEYOND, FAILS)


def transitions(builds: Sequence[str], good: str, bad: str, probe: ReplayTogether, apart: OutputsDiffer, kind: str,
                known: dict[str, dict] | None = None, progress: Callable[[str], None] | None = None
                ) -> tuple[list[dict], dict[str, dict]]:
    """([{"last_good", "first_bad", "apart"}] ascending, every run by build): each pair of neighbouring tested
    builds in good..bad whose outputs differ the way `kind` looks for (`searched`). `known`: runs already made
    (the bisection's), reused; a build that does not run for want of an environment is left out of the search."""
    order = sorted({*builds, good, bad}, key=version_key)
    order = [v for v in order if version_key(good) <= version_key(v) <= version_key(bad)]
    runs = dict(known or {})
    wanted = searched(kind)

    def run_of(versions: list[str]) -> None:
        missing = [v for v in versions if v not in runs]
        if missing:
            runs.update(zip(missing, probe(missing)))

    run_of([good, bad])
    found, windows = [], [(good, bad)]
    while windows:
        a, b = windows.pop()
        how = how_apart(runs[a], runs[b], apart)
        if how not in wanted and how != RUNS_AGAIN:
            continue
        inside = [v for v in order if version_key(a) < version_key(v) < version_key(b)]
        if not inside:
            found.append({"last_good": a, "first_bad": b, "apart": how})
            continue
        middle = _middle(inside, runs)
        if progress:
            progress(f"bisect: the outputs differ from jax {a} to {b}: testing {middle}")
        run_of([middle])
        if how_apart(runs[a], runs[middle], apart) is None:  # no environment: searched without it
            order.remove(middle)
            windows.append((a, b))
            continue
        windows += [(middle, b), (a, middle)]
    return sorted(found, key=lambda t: version_key(t["first_bad"])), runs


def _middle(inside: list[str], runs: dict[str, dict]) -> str:
    """The build to test between two ends: one already run nearest the middle (no replay), else the middle one."""
    mid = (len(inside) - 1) // 2
    ran = [i for i, v in enumerate(inside) if v in runs]
    return inside[min(ran, key=lambda i: abs(i - mid))] if ran else inside[mid]


def split(result: BisectResult, builds: Sequence[str], probe: ReplayTogether, apart: OutputsDiffer,
          progress: Callable[[str], None] | None = None, timed: tuple[ReplayTogether, ReplayTogether] | None = None
          ) -> list[BisectResult]:
    """The changes a bisection found in its window, each its own BisectResult (the result itself where it is the
    only one, or where --max-time cut it short: the next call resumes it). By outputs or bits: `transitions`. By
    time, with `timed` (a timed probe, and one that measures anew for each confirmation): `split_time`, else the
    result as it is. The first keeps the result's `also` and `set_aside`."""
    kind = KIND_OF.get(result.criterion)
    if result.first_bad == result.last_good or result.unfinished or result.searched_whole:
        return [result]  # one cut short is resumed by the next call; one resumed was split before
    if kind == "time" and timed is not None:
        return split_time(result, builds, *timed, progress=progress)
    searched = _transitions_within_time(result, builds, probe, apart, kind, progress) \
        if kind in ("outputs", "bits") else None
    if searched is None:
        return [result]
    found, runs = searched
    changes = [t for t in found if t["apart"] != RUNS_AGAIN]
    if _only_its_own(result, changes):
        return [result]
    if progress:
        progress(f"bisect: {len(changes)} changes of the {kind} between jax {result.good} and {result.bad}: "
                 + ", ".join(t["first_bad"] for t in changes))
    return [_one_change(result, t, runs, len(changes), k == 0) for k, t in enumerate(changes)]


def _only_its_own(result: BisectResult, changes: list[dict]) -> bool:
    """Whether the window's transitions are the bisection's own change alone (or none)."""
    return len(changes) <= 1 and all(t["first_bad"] == result.first_bad for t in changes)


def _transitions_within_time(result: BisectResult, builds: Sequence[str], probe: ReplayTogether,
                             apart: OutputsDiffer, kind: str, progress: Callable[[str], None] | None):
    """`transitions` in the result's window; None where --max-time ended it (said in the result's `unfinished`)."""
    from ...errors import TimeSpentError

    try:
        return transitions(builds, result.good, result.bad, probe, apart, kind, known=result.runs, progress=progress)
    except TimeSpentError as e:  # its own change stands; the others in its window are the next call's
        result.unfinished = f"the window's other changes of the {kind} were not searched: {e.message}"
        result.cut_at = "split"
        return None


def _one_change(result: BisectResult, t: dict, runs: dict[str, dict], count: int, first: bool) -> BisectResult:
    """A transition as a bisection's answer of its own: its ends, the runs it rests on, why in one sentence."""
    good, bad = t["last_good"], t["first_bad"]
    criterion = ERROR if t["apart"] == FAILS else result.criterion if result.criterion != OUTPUTS else OUTPUTS_VS_GOOD
    said = {BEYOND: "differ beyond the tolerance", BITS_ONLY: "differ in bits, within the tolerance",
            FAILS: "are none: it fails"}[t["apart"]]
    why = (f"jax {bad}'s outputs {said} from jax {good}'s (the neighbouring release tested); one of {count} changes "
           f"of the outputs between jax {result.good} and {result.bad}, each searched alone")
    mine = {v: r for v, r in runs.items() if version_key(result.good) <= version_key(v) <= version_key(result.bad)}
    classes = {v: ("good" if version_key(v) <= version_key(good) else "bad") for v in mine
               if _usable(mine[v]) or program_failed(mine[v])}
    evidence = {good: f"the last release before the change at {bad}", bad: f"outputs {said} from jax {good}'s"}
    return replace(result, criterion=criterion, first_bad=bad, last_good=good, runs=mine, classes=classes,
                   evidence=evidence, why=why, layer=None, also=list(result.also) if first else [],
                   set_aside=list(result.set_aside) if first else [], outputs_apart=t["apart"], answer_id=None,
                   also_runs=[])


# -- time: where it moves more than once ----------------------------------------------------------------------------
# A time bisection probes each release beside the good end and classes it by how far its time moved; the time may
# move more than once: slower at 0.4.33, slower again at 0.5.0 (a release classed bad whose time lies below the bad
# end's), or slower before a release classed good (settled slower than the good end, short of half-way). The
# bisection's own verdicts show such sub-windows (`time_windows`); each is searched by its ends, timed together,
# until each slowdown is a pair of neighbouring releases, and each is confirmed by a measurement of its own. A
# slowdown that comes and goes between two probes whose times agree is not seen: no search by ends sees it.


def _above(earlier: dict | None, later: dict | None, from_good: bool) -> bool:
    """Whether `later`'s time lies above `earlier`'s, both verdicts beside the good end: from the good end itself,
    a settled slowdown; else their 95% intervals apart, the later above."""
    if not later or later.get("verdict") != "slower" or later.get("settled") is False:
        return False
    if from_good:
        return True
    lo, hi = (later.get("ci95") or [None])[0], ((earlier or {}).get("ci95") or [None, None])[1]
    return lo is not None and hi is not None and lo > hi


def time_windows(result: BisectResult) -> list[tuple[str, str]]:
    """The sub-windows of a time bisection, other than its own change, whose ends' times disagree as a slowdown
    (`_above`): neighbouring tested releases (the good end, each probe, the bad end) by their verdicts beside the
    good end."""
    tested = sorted((v for v in result.verdicts if result.classes.get(v) in ("good", "bad")), key=version_key)
    points = [(result.good, None), *[(v, result.verdicts[v]) for v in tested], (result.bad, result.ends_verdict)]
    return [(a, b) for (a, va), (b, vb) in zip(points, points[1:])
            if (a, b) != (result.last_good, result.first_bad) and _above(va, vb, a == result.good)]


def time_transitions(builds: Sequence[str], good: str, bad: str, timed: ReplayTogether,
                     progress: Callable[[str], None] | None = None) -> list[dict]:
    """[{"last_good", "first_bad", "runs": {build: run}, "verdict"}] ascending: each pair of neighbouring builds in
    good..bad where the later is slower than the earlier timed beside it, found by timing each sub-window's ends
    with the build in its middle (`timed`: builds -> runs, timed together) and searching each half whose later end
    is slower; a build that does not run is left out of the search."""
    order = [v for v in sorted({*builds, good, bad}, key=version_key)
             if version_key(good) <= version_key(v) <= version_key(bad)]
    found: list[dict] = []
    windows: list[tuple[str, str, dict | None]] = [(good, bad, None)]
    while windows:
        a, b, seen = windows.pop()
        inside = [v for v in order if version_key(a) < version_key(v) < version_key(b)]
        if not inside:
            if seen is None:
                ra, rb = timed([a, b])
                seen = {"runs": {a: ra, b: rb}, "verdict": _verdict(ra, rb)}
            if seen["verdict"].get("verdict") == "slower":
                found.append({"last_good": a, "first_bad": b, **seen})
            continue
        middle = inside[(len(inside) - 1) // 2]
        if progress:
            progress(f"bisect: the time moves again from jax {a} to {b}: timing {middle} between them")
        ra, rm, rb = timed([a, middle, b])
        if not _usable(rm):
            order.remove(middle)
            windows.append((a, b, None))
            continue
        for lo, hi, (r_lo, r_hi) in ((middle, b, (rm, rb)), (a, middle, (ra, rm))):
            verdict = _verdict(r_lo, r_hi)
            if verdict.get("verdict") == "slower":
                windows.append((lo, hi, {"runs": {lo: r_lo, hi: r_hi}, "verdict": verdict}))
    return sorted(found, key=lambda t: version_key(t["first_bad"]))


def _verdict(earlier: dict, later: dict) -> dict:
    if not (_usable(earlier) and _usable(later)):
        return {"verdict": None}
    return timing_verdict(earlier.get("timing") or {}, later.get("timing") or {})


def split_time(result: BisectResult, builds: Sequence[str], timed: ReplayTogether, confirm_with: ReplayTogether,
               progress: Callable[[str], None] | None = None) -> list[BisectResult]:
    """A time bisection's slowdowns, each its own BisectResult: its own change, and each slowdown the sub-windows
    its probes disagree on hold (`time_windows`, `time_transitions`), each confirmed anew (`confirm_with`); only
    those that stand. The result itself where there is no other (or its search was cut short by --max-time: said in
    its `unfinished`)."""
    from ...errors import TimeSpentError

    others: list[dict] = []
    for a, b in [] if result.unfinished else time_windows(result):
        try:
            others += time_transitions(builds, a, b, timed, progress)
        except TimeSpentError as e:  # what was found is kept; the answer says the rest was not searched
            result.unfinished = f"{e.message}: the time moved again between jax {a} and {b}, not searched"
            result.cut_at = "split"
            break
    if not others:
        return [result]
    changes = []
    for t in others:
        change = _one_slowdown(result, t, len(others) + 1)
        confirm(change, confirm_with, progress)
        if standing(change):
            changes.append(change)
    if progress:
        progress(f"bisect: {len(changes) + 1} slowdowns between jax {result.good} and {result.bad}: "
                 + ", ".join(c.first_bad for c in sorted([result, *changes], key=lambda c: version_key(c.first_bad))))
    return [result, *changes]


def _one_slowdown(result: BisectResult, t: dict, count: int) -> BisectResult:
    """A slowdown found in a sub-window as a bisection's answer of its own: its ends timed together, why."""
    good, bad, verdict = t["last_good"], t["first_bad"], t["verdict"]
    ci = verdict.get("ci95")
    said = f"{verdict['ratio']:.3f}x" + (f" [{ci[0]:.3f}-{ci[1]:.3f}]" if ci else "") + f" vs jax {good} timed beside it"
    why = (f"jax {bad} is slower than jax {good} timed beside it (the neighbouring release tested): one of {count} "
           f"slowdowns between jax {result.good} and {result.bad}, each searched alone")
    return replace(result, first_bad=bad, last_good=good, runs=dict(t["runs"]), classes={good: "good", bad: "bad"},
                   evidence={good: f"the last release before the slowdown at {bad}", bad: said}, why=why,
                   layer=None, also=[], set_aside=[], answer_id=None, also_runs=[], confirmation=None,
                   confirm_runs=[], verdicts={}, beyond_ends=[], changes=[],
                   log_ratio=math.log(verdict["ratio"]) if verdict.get("ratio") else result.log_ratio)


def ranked(changes: Sequence[BisectResult]) -> list[BisectResult]:
    """The changes, the most severe kind first (outputs or errors, settled slowdowns, bits), each kind by release,
    slowdowns the largest first (its confirmed ratio: a slowdown a later release undid is rarely the largest); one
    change found twice (by two modes: the same releases and kind) kept once, the first found."""
    seen, out = set(), []
    for c in changes:
        key = (KIND_OF.get(c.criterion, c.criterion), c.last_good, c.first_bad)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return sorted(out, key=lambda c: (RANK.get(KIND_OF.get(c.criterion, ""), 3), -_size(c), version_key(c.first_bad)))


def _size(change: BisectResult) -> float:
    """A slowdown's size, as ranked: its confirmed ratio (0 for any other change, or one not measured)."""
    ratio = (change.confirmation or {}).get("ratio") if change.criterion == TIME else None
    return float(ratio) if isinstance(ratio, (int, float)) else 0.0


def every_change(steps: Sequence[tuple[str, str]], run_one: Callable[[str, str], BisectResult],
                 split_one: Callable[[BisectResult], list[BisectResult]], by: str | None, why: str | None,
                 progress: Callable[[str], None] | None = None,
                 screen_time: Callable[[str], dict] | None = None) -> list[BisectResult]:
    """mode_choice.bisect_each's bisections (the same steps, the same headline rules), then each bisection that
    stood split into its changes (`split_one`: `split` with the mode's probe), ranked (`ranked`). The headline
    (the first) keeps what was set aside; every change is whole (its own runs), none an `also` line only."""
    from .mode_choice import bisect_each

    ran: list[BisectResult] = []

    def kept(mode: str, kind: str) -> BisectResult:
        ran.append(run_one(mode, kind))
        return ran[-1]

    head = bisect_each(steps, kept, by, why, progress, screen_time)
    stood = [r for r in ran if standing(r)]
    found = [c for r in stood for c in split_one(r)]
    out = ranked(found)
    set_aside = list(head.set_aside)
    also = [o for r in stood for o in r.also]  # what a bisection found beside its own change (bits beside time)
    for c in out:
        c.also, c.also_runs, c.set_aside = [], [], []
    first = out[0]  # the headline: the others said beside it too (readers of answers before the list of changes)
    first.set_aside = set_aside
    first.also = [also_entry(c) for c in out[1:]]
    listed = {(KIND_OF.get(o["criterion"]), o["first_bad"]) for o in first.also}
    first.also += [o for o in also if (KIND_OF.get(o["criterion"]), o["first_bad"]) not in listed]
    first.also_runs = [run for c in out[1:] for run in [*c.runs.values(), *c.confirm_runs]]
    return out


def change_entry(change: BisectResult, steps: dict | None = None) -> dict:
    """A change as the stored answer lists it: its kind, releases, mode, how much (the evidence at its first bad
    release, a time change's confirmed ratio and the ids of the runs that confirmed it), its layer, and the steps
    that answered it (`steps`: "answer_id", "explain" {"answer_id", "summary"}, "commit" {"answer_id", "sha"},
    "newest" {"release", "still", "text"})."""
    layer = change.layer or {}
    confirmed = change.confirmation or {}
    return {"criterion": change.criterion, "kind": KIND_OF.get(change.criterion, change.criterion),
            "first_bad": change.first_bad, "last_good": change.last_good, "mode": change.mode, "why": change.why,
            "evidence": change.evidence.get(change.first_bad), "ratio": confirmed.get("ratio"),
            "ci95": confirmed.get("ci95"), "confirmed_by": confirmed.get("run_ids"),
            "outputs_apart": change.outputs_apart,
            "layer": {"layer": layer.get("layer"), "lowering": layer.get("lowering")} if layer else None,
            "unfinished": change.unfinished, "cut_at": change.cut_at, **(steps or {})}
