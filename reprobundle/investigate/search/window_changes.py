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
from itertools import pairwise
from typing import Callable, Sequence

from ...analysis.resolution import RESOLUTION, figure
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
    UnderResolution,
    also_entry,
    confirm,
    program_failed,
    small_entry,
    standing,
    unconfirmed,
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


SWEPT = 24  # the most releases of a window run once each, untimed, per mode; a longer window: this many spread over it


def transitions(builds: Sequence[str], good: str, bad: str, probe: ReplayTogether, apart: OutputsDiffer, kind: str,
                known: dict[str, dict] | None = None, progress: Callable[[str], None] | None = None,
                most: int = SWEPT, jobs: int = 1) -> tuple[list[dict], dict[str, dict]]:
    """([{"last_good", "first_bad", "apart", "undone"?}] ascending, every run by build): each pair of neighbouring
    tested builds in good..bad whose outputs differ the way `kind` looks for (`searched`). Every build of the window
    is run once, untimed (`jobs` at a time, side by side), so a change undone a few builds later is seen: each is
    a pair of neighbouring builds, and the one that undoes it (its outputs the last good build's again: bit for bit
    for bits, within the tolerance for outputs) is said as its `undone`, not as a change of its own. A window of
    more than `most` builds runs `most` spread over it (its ends among them), then each pair of those whose outputs
    differ is searched by its ends until each change is a pair of neighbouring builds (`never_ran` names the builds
    no run reached). `known`: runs already made (the bisection's), reused; a build that does not run for want of
    an environment is left out of the search."""
    order = sorted({*builds, good, bad}, key=version_key)
    order = [v for v in order if version_key(good) <= version_key(v) <= version_key(bad)]
    runs = dict(known or {})
    run_of = _runner(probe, runs, jobs)
    swept = spread(order, most)
    if progress and len(swept) > 2:
        progress(f"bisect: {len(swept)} releases from jax {good} to {bad} run once each, untimed")
    run_of(swept)
    for v in [v for v in swept if not ran(runs[v])]:  # no environment: searched without it
        order.remove(v)
    windows = list(pairwise([v for v in swept if v in order]))
    found = _by_ends(windows, order, runs, (run_of, apart, searched(kind)), progress)
    return _undone(found, runs, apart, kind), runs


def _by_ends(windows: list[tuple[str, str]], order: list[str], runs: dict[str, dict], asked: tuple,
             progress: Callable[[str], None] | None) -> list[dict]:
    """Each window (two builds run) whose ends differ the way wanted, searched by its ends: the build in its middle
    run (`run_of`), each half whose ends differ searched again, until each change is a pair of neighbouring builds
    of `order` (a build without an environment taken out of it). Ascending."""
    run_of, apart, wanted = asked
    found, windows = [], windows[::-1]
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
    return sorted(found, key=lambda t: version_key(t["first_bad"]))


def _runner(probe: ReplayTogether, runs: dict[str, dict], jobs: int) -> Callable[[list[str]], None]:
    """What runs the builds not yet in `runs` through `probe`, `jobs` at a time (side by side), into `runs`."""
    def run_of(versions: list[str]) -> None:
        missing = [v for v in versions if v not in runs]
        for at in range(0, len(missing), max(1, jobs)):
            chunk = missing[at:at + max(1, jobs)]
            runs.update(zip(chunk, probe(chunk)))
    return run_of


def ran(run: dict) -> bool:
    """Whether a run says anything of its build: it ran, or failed for the program's sake (not for want of an
    environment)."""
    return _usable(run) or program_failed(run)


def spread(order: Sequence[str], most: int) -> list[str]:
    """`order` itself where it holds at most `most` builds, else `most` of them spread evenly over it, both ends
    included."""
    if len(order) <= most:
        return list(order)
    count = max(2, most)
    return [order[round(i * (len(order) - 1) / (count - 1))] for i in range(count)]


def never_ran(builds: Sequence[str], good: str, bad: str, runs: dict[str, dict]) -> dict[str, str]:
    """The builds of good..bad that no run reached, or that ran for want of nothing else than an environment:
    build -> why, ascending."""
    inside = sorted((v for v in {*builds, good, bad} if version_key(good) <= version_key(v) <= version_key(bad)),
                    key=version_key)
    return {v: ("not run" if v not in runs else f"{runs[v].get('status')}: {str(runs[v].get('reason'))[:200]}")
            for v in inside if v not in runs or not ran(runs[v])}


def _undone(found: list[dict], runs: dict[str, dict], apart: OutputsDiffer, kind: str) -> list[dict]:
    """`found` with each change a later one undoes marked (`undone`: the build whose outputs are its last good
    build's again), and that later one marked as the undoing (`undoes`): not a change of its own."""
    back = (SAME,) if kind == "bits" else (SAME, BITS_ONLY)
    for i, t in enumerate(found):
        if t.get("undoes") or t["apart"] == RUNS_AGAIN:
            continue
        later = next((u for u in found[i + 1:] if not u.get("undoes") and u["apart"] != RUNS_AGAIN
                      and how_apart(runs[t["last_good"]], runs[u["first_bad"]], apart) in back), None)
        if later is not None:
            t["undone"], later["undoes"] = later["first_bad"], t["first_bad"]
    return found


def changes_of(found: list[dict]) -> list[dict]:
    """The transitions that are changes: not a build that runs again, nor one that undoes an earlier change."""
    return [t for t in found if t["apart"] != RUNS_AGAIN and not t.get("undoes")]


def _middle(inside: list[str], runs: dict[str, dict]) -> str:
    """The build to test between two ends: one already run nearest the middle (no replay), else the middle one."""
    mid = (len(inside) - 1) // 2
    ran = [i for i, v in enumerate(inside) if v in runs]
    return inside[min(ran, key=lambda i: abs(i - mid))] if ran else inside[mid]


def split(result: BisectResult, builds: Sequence[str], probe: ReplayTogether, apart: OutputsDiffer,
          progress: Callable[[str], None] | None = None, timed: tuple[ReplayTogether, ReplayTogether] | None = None,
          most: int = SWEPT, jobs: int = 1) -> list[BisectResult]:
    """The changes a bisection found in its window, each its own BisectResult (the result itself where it is the
    only one, or where --max-time cut it short: the next call resumes it). By outputs or bits: `transitions` (every
    build of the window run once: `most`, `jobs`). By time, with `timed` (a timed probe, and one that measures anew
    for each confirmation): `split_time`, else the result as it is. The first keeps the result's `also` and
    `set_aside`."""
    kind = KIND_OF.get(result.criterion)
    if result.first_bad == result.last_good or result.unfinished or result.searched_whole:
        return [result]  # one cut short is resumed by the next call; one resumed was split before
    if kind == "time" and timed is not None:
        return split_time(result, builds, *timed, progress=progress)
    searched = _transitions_within_time(result, builds, (probe, apart), kind, progress, (most, jobs)) \
        if kind in ("outputs", "bits") else None
    if searched is None:
        return [result]
    found, runs = searched
    changes = changes_of(found)
    if _only_its_own(result, changes):
        result.undone = next((t.get("undone") for t in changes), None)
        return [result]
    if progress:
        progress(f"bisect: {len(changes)} changes of the {kind} between jax {result.good} and {result.bad}: "
                 + ", ".join(t["first_bad"] for t in changes))
    return [_one_change(result, t, runs, len(changes), k == 0) for k, t in enumerate(changes)]


def _only_its_own(result: BisectResult, changes: list[dict]) -> bool:
    """Whether the window's transitions are the bisection's own change alone (or none)."""
    return len(changes) <= 1 and all(t["first_bad"] == result.first_bad for t in changes)


def _transitions_within_time(result: BisectResult, builds: Sequence[str], compared: tuple[ReplayTogether, OutputsDiffer],
                             kind: str, progress: Callable[[str], None] | None, sweep: tuple[int, int]):
    """`transitions` in the result's window; None where --max-time ended it (said in the result's `unfinished`)."""
    from ...errors import TimeSpentError

    probe, apart = compared
    most, jobs = sweep
    try:
        return transitions(builds, result.good, result.bad, probe, apart, kind, known=result.runs, progress=progress,
                           most=most, jobs=jobs)
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
           f"of the outputs between jax {result.good} and {result.bad}, each searched alone"
           + (f"; undone at jax {t['undone']}, whose outputs are jax {good}'s again" if t.get("undone") else ""))
    mine = {v: r for v, r in runs.items() if version_key(result.good) <= version_key(v) <= version_key(result.bad)}
    classes = {v: ("good" if version_key(v) <= version_key(good) else "bad") for v in mine
               if _usable(mine[v]) or program_failed(mine[v])}
    evidence = {good: f"the last release before the change at {bad}", bad: f"outputs {said} from jax {good}'s"}
    return replace(result, criterion=criterion, first_bad=bad, last_good=good, runs=mine, classes=classes,
                   evidence=evidence, why=why, layer=None, also=list(result.also) if first else [],
                   set_aside=list(result.set_aside) if first else [], outputs_apart=t["apart"], answer_id=None,
                   also_runs=[], undone=t.get("undone"), not_listed=list(result.not_listed) if first else [])


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
    changes = confirmed_slowdowns(result, others, confirm_with, progress, len(others) + 1)
    if progress:
        progress(f"bisect: {len(changes) + 1} slowdowns between jax {result.good} and {result.bad}: "
                 + ", ".join(c.first_bad for c in sorted([result, *changes], key=lambda c: version_key(c.first_bad))))
    return [result, *changes]


def confirmed_slowdowns(result: BisectResult, found: list[dict], confirm_with: ReplayTogether,
                        progress: Callable[[str], None] | None, count: int) -> list[BisectResult]:
    """Each slowdown `found` in `result`'s window (time_transitions) as a change of its own, confirmed anew; those
    that stand. One its confirmation measured slower, but not at the resolution the tool measures, is one line in
    `result.not_listed` (kind "small": not searched)."""
    changes = []
    for t in found:
        change = _one_slowdown(result, t, count)
        confirm(change, confirm_with, progress)
        seen = change.confirmation or {}
        if standing(change):
            changes.append(change)
        elif seen.get("under"):
            result.not_listed.append(small_entry(change.last_good, change.first_bad, seen,
                                                 {"said": seen.get("resolution"), "control": seen.get("control")},
                                                 mode=change.mode))
    return changes


# -- a settled slowdown placed ---------------------------------------------------------------------------------------
# The endpoints settled a slowdown at the resolution the tool measures, and the time bisection's first bad release
# was not confirmed: the slowdown is somewhere in the window all the same (a time that moves more than once, or a
# probe the noise classed wrongly). The window is searched on by its ends timed together with the release in its
# middle (time_transitions), each slowdown found confirmed by a measurement of its own, until each lies between
# neighbouring releases or --max-time ends; what stays unplaced is said in one line with its interval.


def place(result: BisectResult, builds: Sequence[str], timed: ReplayTogether, confirm_with: ReplayTogether,
          progress: Callable[[str], None] | None = None) -> list[BisectResult]:
    """The slowdowns a time bisection whose confirmation failed leaves in its window, each its own change placed
    between neighbouring releases and confirmed ([] where there is nothing to place: not a time bisection, it
    stands, its confirmation was cut, or its endpoints' slowdown is none at the resolution the tool measures). None
    placed: one line in `result.not_listed` (kind "unplaced") with the endpoints' interval and why. The pair whose
    confirmation failed is not confirmed again."""
    from ...errors import TimeSpentError

    ends = result.ends_verdict or {}
    if result.criterion != TIME or standing(result) or (result.confirmation or {}).get("cut") \
            or not (ends.get("ci95") and ends["ci95"][0] > RESOLUTION):
        return []
    if progress:
        progress(f"bisect: the slowdown from jax {result.good} to {result.bad} is not placed yet: searching its "
                 "window on")
    cut = None
    try:
        everywhere = time_transitions(builds, result.good, result.bad, timed, progress)
    except TimeSpentError as e:
        everywhere, cut = [], e.message
    found = [t for t in everywhere if (t["last_good"], t["first_bad"]) != (result.last_good, result.first_bad)]
    placed = confirmed_slowdowns(result, found, confirm_with, progress, len(found))
    if not placed:
        result.not_listed.append(_unplaced(result, found, cut, len(everywhere) > len(found)))
    return placed


def _unplaced(result: BisectResult, found: list[dict], cut: str | None, again: bool) -> dict:
    """`1.17x [1.14-1.20] between 0.4.30 and 0.5.1, not placed: ...` as the answer's `not_listed` says it
    (`again`: the search found the pair whose confirmation had failed, and no other)."""
    ends = result.ends_verdict or {}
    failed = (result.confirmation or {}).get("why") or "its confirmation did not reproduce it"
    other = "other " if again else ""
    searched = (f"--max-time ended the search of its window ({cut})" if cut else
                f"the window's halves timed together found no {other}pair of neighbouring releases slower" if not found
                else f"the {len(found)} {other}pair{'s' if len(found) != 1 else ''} of neighbouring releases found "
                "slower did not stand timed again (" + ", ".join(f"{t['last_good']}..{t['first_bad']}" for t in found)
                + ")")
    return {"kind": "unplaced", "last_good": result.good, "first_bad": result.bad, "mode": result.mode,
            "ratio": ends.get("ratio"), "ci95": ends.get("ci95"), "unfinished": cut is not None,
            "line": f"{figure(ends)} between {result.good} and {result.bad}, not placed: the first bad release the "
                    f"bisection found, {result.first_bad} (last good {result.last_good}), {_first(failed)}; "
                    f"{searched}"}


def _first(why: str) -> str:
    """A confirmation's why as a clause: `not a change at this resolution: ...` -> `is not a change ...`."""
    for head, said in (("unconfirmed: ", "was not confirmed: "), ("not a change at this resolution: ",
                                                                     "is not a change at this resolution: ")):
        if why.startswith(head):
            return said + why[len(head):][:600]
    return f"was not confirmed: {why[:600]}"


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
                   confirm_runs=[], verdicts={bad: verdict}, beyond_ends=[], changes=[], not_listed=[],
                   control_runs=[], searched_whole=True,
                   log_ratio=math.log(verdict["ratio"]) if verdict.get("ratio") else result.log_ratio)


def ranked(changes: Sequence[BisectResult]) -> list[BisectResult]:
    """The changes, the most severe kind first (outputs or errors, settled slowdowns, bits), each kind by release (one
    still there at the bad end before one a later release undid), slowdowns the largest first (its confirmed ratio:
    a slowdown a later release undid is rarely the largest); one change found twice (by two modes: the same releases
    and kind) kept once, the first found."""
    seen, out = set(), []
    for c in changes:
        key = (KIND_OF.get(c.criterion, c.criterion), c.last_good, c.first_bad)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return sorted(out, key=lambda c: (RANK.get(KIND_OF.get(c.criterion, ""), 3), c.undone is not None, -_size(c),
                                      version_key(c.first_bad)))


def _size(change: BisectResult) -> float:
    """A slowdown's size, as ranked: its confirmed ratio (0 for any other change, or one not measured)."""
    ratio = (change.confirmation or {}).get("ratio") if change.criterion == TIME else None
    return float(ratio) if isinstance(ratio, (int, float)) else 0.0


def every_change(steps: Sequence[tuple[str, str]], run_one: Callable[[str, str], BisectResult],
                 split_one: Callable[[BisectResult], list[BisectResult]], by: str | None, why: str | None,
                 progress: Callable[[str], None] | None = None,
                 screen_time: Callable[[str], dict | None] | None = None,
                 place_one: Callable[[BisectResult], list[BisectResult]] | None = None,
                 sweep_one: Callable[[], tuple[list[BisectResult], list[dict]]] | None = None) -> list[BisectResult]:
    """mode_choice.bisect_each's bisections (the same steps, the same headline rules), a time bisection whose
    confirmation failed placed (`place_one`: `place` with the mode's probes; what it places stands in its stead),
    each bisection that stood split into its changes (`split_one`: `split` with the mode's probe), the changes of
    outputs or bits that every release run once shows (`sweep_one`: `swept_changes`, with its `never_ran` lines;
    these may be the whole answer where no bisection stood), ranked (`ranked`). The headline (the first) keeps what
    was set aside and every `not_listed` line; every change is whole (its own runs), none an `also` line only."""
    from ...errors import UsageError
    from .mode_choice import bisect_each

    ran: list[BisectResult] = []
    placed: list[BisectResult] = []
    replaced: list[dict] = []  # the failed confirmations whose slowdowns were placed
    kept = _placing(run_one, place_one, why, (ran, placed, replaced))
    try:
        head: BisectResult | None = bisect_each(steps, kept, by, why, progress, screen_time)
        failed = None
    except UsageError as e:  # no bisection stood: the sweep may still find changes that came and went
        head, failed = None, e
    stood = [r for r in ran if standing(r)]
    found = [c for r in stood for c in split_one(r)] + placed
    swept, never = sweep_one() if sweep_one is not None else ([], [])
    for change in swept:
        change.mode_why = why
    set_aside = (head.set_aside if head is not None else failed_aside(failed, steps)) + replaced
    said = [entry for r in ran for entry in r.not_listed] + _moved_out(set_aside) + never
    if not found and not swept:
        _nothing_found(failed, said)
    out = ranked(found + swept)
    _headed(out, stood, set_aside, said)
    return _kinds_unfinished(out, head, said)


def _nothing_found(failed, said: list[dict]) -> None:
    """No change at all: the bisections' error, with every `not_listed` line it does not say already."""
    from ...errors import UsageError

    assert failed is not None  # a bisection that stood is a change found
    lines = [e["line"] for e in said if e["line"] not in failed.message]
    raise UsageError("; ".join([failed.message, *lines]), hint=failed.hint) from None


def _kinds_unfinished(out: list[BisectResult], head: BisectResult | None, said: list[dict]) -> list[BisectResult]:
    """`out`, its headline unfinished where --max-time left a kind of change unexamined (bisect_each said so), or
    releases of the window unrun or a slowdown unplaced (a `not_listed` line it cut): the next call goes on."""
    cut = [e["line"] for e in said if e.get("unfinished")]
    if head is not None and head.cut_at == "kinds" and not out[0].unfinished:
        out[0].unfinished, out[0].cut_at = head.unfinished, head.cut_at
    elif cut and not out[0].unfinished:
        out[0].unfinished, out[0].cut_at = f"--max-time spent: {cut[0]}", "split"
    return out


def _placing(run_one: Callable[[str, str], BisectResult], place_one: Callable[[BisectResult], list] | None,
             why: str | None, kept: tuple[list, list, list]) -> Callable[[str, str], BisectResult]:
    """`run_one`, each bisection kept in `kept`'s first list; a time bisection whose confirmation failed placed
    (`place_one`): what it places (the second list) stands in its stead, its failed confirmation set aside (the
    third)."""
    ran, placed, replaced = kept

    def kept_one(mode: str, kind: str) -> BisectResult:
        ran.append(run_one(mode, kind))
        ran[-1].mode = mode
        found = place_one(ran[-1]) if place_one is not None else []
        if not found:
            return ran[-1]
        replaced.append(unconfirmed(ran[-1]))
        for change in found:
            change.mode_why = why
        placed.extend(found)
        return found[0]
    return kept_one


def failed_aside(failed, steps: Sequence[tuple[str, str]]) -> list[dict]:
    """What the bisections that all fell set aside (bisection.NothingStood's), else the one step's error."""
    from .bisection import NothingStood

    if isinstance(failed, NothingStood):
        return list(failed.set_aside)
    aside = {"criterion": steps[0][1] if steps else "outputs", "mode": steps[0][0] if steps else None,
             "why": failed.message[:4000] if failed is not None else ""}
    return [{**aside, "not_listed": failed.entry} if isinstance(failed, UnderResolution) else aside]


def _moved_out(set_aside: list[dict]) -> list[dict]:
    """The `not_listed` lines the steps set aside carried (a screen's or the endpoints' small slowdown), moved out of
    their entries: each said once."""
    return [aside.pop("not_listed") for aside in set_aside if aside.get("not_listed")]


def _headed(out: list[BisectResult], stood: list[BisectResult], set_aside: list[dict], said: list[dict]) -> None:
    """`out`'s first made the headline: what was set aside, every other change said beside it (readers of answers
    before the list of changes), every `not_listed` line; the others cleared of them."""
    also = [o for r in stood for o in r.also]  # what a bisection found beside its own change (bits beside time)
    for c in out:
        c.also, c.also_runs, c.set_aside, c.not_listed = [], [], [], []
    first = out[0]
    first.set_aside, first.not_listed = set_aside, said
    first.also = [also_entry(c) for c in out[1:]]
    listed = {(KIND_OF.get(o["criterion"]), o["first_bad"]) for o in first.also}
    first.also += [o for o in also if (KIND_OF.get(o["criterion"]), o["first_bad"]) not in listed]
    first.also_runs = [run for c in out[1:] for run in [*c.runs.values(), *c.confirm_runs, *c.control_runs]]


def swept_changes(good: str, bad: str, builds: Sequence[str], probes: dict[str, ReplayTogether],
                  apart: OutputsDiffer, kinds: Sequence[str], progress: Callable[[str], None] | None = None,
                  most: int = SWEPT, jobs: int = 1) -> tuple[list[BisectResult], list[dict]]:
    """(every change of outputs or bits in good..bad, each its own BisectResult, the `not_listed` lines of the
    releases never run): every release of the window run once, untimed, in each mode (`probes`: mode -> its
    untimed probe), and each pair of neighbouring releases whose outputs differ a change (`transitions`): beyond
    the tolerance or an error, an outputs change; within it, a bits change (`kinds`: which are wanted), one undone
    a few releases later included (its `undone`). Where --max-time ends a mode's runs, what they found is kept and
    the rest said as never run."""
    from ...errors import TimeSpentError

    kind = "bits" if "bits" in kinds else "outputs"
    changes: list[BisectResult] = []
    never: dict[str, dict[str, str]] = {}
    for mode, probe in probes.items():
        seen: dict[str, dict] = {}
        recorded = _recording(probe, seen)
        try:
            found, _ = transitions(builds, good, bad, recorded, apart, kind, progress=progress, most=most, jobs=jobs)
        except TimeSpentError as e:
            found, never[mode] = [], {v: f"--max-time: {e.message}" for v in never_ran(builds, good, bad, seen)}
        listed = [t for t in changes_of(found) if _kind_of_transition(t) in kinds]
        changes += [_swept_change(good, bad, mode, t, seen, len(listed)) for t in listed]
        never.setdefault(mode, never_ran(builds, good, bad, seen))
    return changes, never_lines(never, most)


def _recording(probe: ReplayTogether, seen: dict[str, dict]) -> ReplayTogether:
    """`probe`, each run it returns also kept in `seen` by its build."""
    def recorded(versions: Sequence[str]) -> list:
        runs = probe(versions)
        seen.update(zip(versions, runs))
        return runs
    return recorded


def _kind_of_transition(t: dict) -> str:
    return "bits" if t["apart"] == BITS_ONLY else "outputs"


def _swept_change(good: str, bad: str, mode: str, t: dict, runs: dict[str, dict], count: int) -> BisectResult:
    """A change the sweep found, as a bisection's answer of its own (its ends, the runs it rests on, why)."""
    criterion = BITS if t["apart"] == BITS_ONLY else OUTPUTS_VS_GOOD
    window = BisectResult(good, bad, criterion, first_bad=bad, last_good=good, mode=mode)
    return _one_change(window, t, runs, count, first=False)


def never_lines(never: dict[str, dict[str, str]], most: int = SWEPT) -> list[dict]:
    """The `not_listed` lines (kind "never_ran") of the releases a sweep never ran, one per mode (one for both where
    the same releases): `never ran (frozen): 0.4.31, 0.4.33: ...`."""
    names = {"frozen": "frozen", "retrace": "retraced"}
    by_set: dict[tuple[tuple[str, str], ...], list[str]] = {}
    for mode, missed in never.items():
        if missed:
            by_set.setdefault(tuple(missed.items()), []).append(names.get(mode, mode))
    lines = []
    for pairs, modes in by_set.items():
        releases = [v for v, _ in pairs]
        shown = ", ".join(releases[:12]) + (f" and {len(releases) - 12} more" if len(releases) > 12 else "")
        why = "; ".join(sorted({w if w != "not run" else
                                f"the window holds more releases than the {most} run once each, so a change of "
                                "outputs or bits that comes and goes between two releases run is not seen"
                                for _, w in pairs}))[:1500]
        lines.append({"kind": "never_ran", "releases": releases, "mode": " and ".join(modes),
                      "unfinished": any(w.startswith("--max-time") for _, w in pairs),
                      "line": f"never ran ({' and '.join(modes)}): {shown}: {why}"})
    return lines


def change_entry(change: BisectResult, steps: dict | None = None) -> dict:
    """A change as the stored answer lists it: its kind, releases, mode, how much (the evidence at its first bad
    release, a time change's confirmed ratio and the ids of the runs that confirmed it), where a later release
    undid it (`undone`), its layer, and the steps
    that answered it (`steps`: "answer_id", "explain" {"answer_id", "summary"}, "commit" {"answer_id", "sha"},
    "newest" {"release", "still", "text"})."""
    layer = change.layer or {}
    confirmed = change.confirmation or {}
    return {"criterion": change.criterion, "kind": KIND_OF.get(change.criterion, change.criterion),
            "first_bad": change.first_bad, "last_good": change.last_good, "mode": change.mode, "why": change.why,
            "evidence": change.evidence.get(change.first_bad), "ratio": confirmed.get("ratio"),
            "ci95": confirmed.get("ci95"), "confirmed_by": confirmed.get("run_ids"),
            "outputs_apart": change.outputs_apart, "undone": change.undone,
            "layer": {"layer": layer.get("layer"), "lowering": layer.get("lowering")} if layer else None,
            "unfinished": change.unfinished, "cut_at": change.cut_at, **(steps or {})}
