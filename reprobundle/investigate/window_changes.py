"""Every change in a window, each standing alone: the answer of bisect and investigate is a list of changes.

A bisection by outputs or bits (investigate/bisection.py) finds the first release whose outputs differ from the
good end's; a window may hold more: the outputs change at 0.5.0 and again at 0.5.1, each change its own. Here the
window is searched by its ends, over an ordered list of builds: two builds whose outputs differ hold a change
between them; the build in the middle is replayed and each half whose ends still differ is searched again, until
each change is a pair of neighbouring builds (`transitions`). What tells two builds apart is the kind's: by outputs
(beyond the tolerance, or one that fails where the other runs), by bits (any difference). A change that comes and
goes inside a half whose ends agree is not seen: no search over ends can see it.

`split` makes each transition of a bisection's kind its own BisectResult (its last good and first bad release, its
runs, why), `every_change` runs the planned bisections (mode_choice.plan and bisect_each, unchanged) and ranks what
stood: outputs or errors, then a settled slowdown, then bits, each kind by release; the first is the headline.
`change_entry` is a change as the stored answer lists it (investigate/answers.py: "changes"), with the steps that
answered it (its layer, explain, first bad commit, newest release).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable, Sequence

from ..envs.versions import version_key
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
          progress: Callable[[str], None] | None = None) -> list[BisectResult]:
    """The changes a bisection by outputs or bits found in its window, each its own BisectResult (the result
    itself where it is the only one; a time bisection, or one --max-time cut short, is returned as it is). The first
    keeps the result's `also` and `set_aside`."""
    from ..errors import TimeSpentError

    kind = KIND_OF.get(result.criterion)
    if kind not in ("outputs", "bits") or result.first_bad == result.last_good or result.unfinished or \
            result.searched_whole:  # one cut short is resumed by the next call; one resumed was split before
        return [result]
    try:
        found, runs = transitions(builds, result.good, result.bad, probe, apart, kind, known=result.runs,
                                  progress=progress)
    except TimeSpentError as e:  # its own change stands; the others in its window are the next call's
        result.unfinished = f"the window's other changes of the {kind} were not searched: {e.message}"
        result.cut_at = "split"
        return [result]
    changes = [t for t in found if t["apart"] != RUNS_AGAIN]
    if len(changes) <= 1 and all(t["first_bad"] == result.first_bad for t in changes):
        return [result]
    if progress:
        progress(f"bisect: {len(changes)} changes of the {kind} between jax {result.good} and {result.bad}: "
                 + ", ".join(t["first_bad"] for t in changes))
    return [_one_change(result, t, runs, len(changes), k == 0) for k, t in enumerate(changes)]


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


def ranked(changes: Sequence[BisectResult]) -> list[BisectResult]:
    """The changes, the most severe kind first (outputs or errors, settled slowdowns, bits), each kind by release;
    one change found twice (by two modes: the same releases and kind) kept once, the first found."""
    seen, out = set(), []
    for c in changes:
        key = (KIND_OF.get(c.criterion, c.criterion), c.last_good, c.first_bad)
        if key not in seen:
            seen.add(key)
            out.append(c)
    return sorted(out, key=lambda c: (RANK.get(KIND_OF.get(c.criterion, ""), 3), version_key(c.first_bad)))


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
    release, a time change's confirmed ratio), its layer, and the steps that answered it (`steps`: "answer_id",
    "explain" {"answer_id", "summary"}, "commit" {"answer_id", "sha"}, "newest" {"release", "still", "text"})."""
    layer = change.layer or {}
    confirmed = change.confirmation or {}
    return {"criterion": change.criterion, "kind": KIND_OF.get(change.criterion, change.criterion),
            "first_bad": change.first_bad, "last_good": change.last_good, "mode": change.mode, "why": change.why,
            "evidence": change.evidence.get(change.first_bad), "ratio": confirmed.get("ratio"),
            "ci95": confirmed.get("ci95"), "outputs_apart": change.outputs_apart,
            "layer": {"layer": layer.get("layer"), "lowering": layer.get("lowering")} if layer else None,
            "unfinished": change.unfinished, "cut_at": change.cut_at, **(steps or {})}
