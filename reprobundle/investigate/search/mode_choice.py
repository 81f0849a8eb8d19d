"""Which program a bisection replays and which kinds of change it looks for, when the user did not say both: the
frozen module the bundle stored, the program retraced by each release, or both. The endpoints run both ways,
untimed, side by side; a user should not need to know which layer broke to find out which layer broke.

`survey`, `plan` and `bisect_each` (bisect and investigate): every kind of change the endpoints show is bisected
on its own, the most severe first: outputs beyond the tolerance (the retraced program first: what the user runs),
then a settled slowdown (timed on the frozen module where it runs on both; and on the retraced program too where
the two releases lower it to other StableHLO and the frozen module's slowdown did not stand: a slowdown of JAX's
lowering never shows in the frozen module), then bits within the tolerance. Only a slower bad end is a regression
by time, and only one its confirmation reproduces; the headline is the most severe change that stands, the others
are said beside it.

Time is measured only as far as the answer needs it (`time_screen`): where the untimed endpoints already show
another change (outputs, an error, bits) and time was not asked for, whether the frozen module also got slower is
a bounded screen (analysis/time_screen.py: a few paired rounds within a wall bound, the noise measured in those same
rounds), run after the bisections before it in severity, so an outputs change is never held back by it. Only a
slowdown the screen sees beyond its noise becomes a time bisection; otherwise the answer says what the screen could
not rule out. Where nothing else changed, time is the question: it is measured in full, as with `--by time` (the
frozen module's; the retraced program's time beside it, where the lowering changed, is screened as a second look,
skipped where the frozen module's slowdown stood: KindSearches.screen).

`choose_mode` (explain, which compares two contenders by one criterion): one mode.
- The frozen module's outputs already differ between the endpoints: frozen (what changed is below JAX, or shows
  there too).
- They are the same bit for bit (or the frozen module does not run on an endpoint) and the retraced outputs differ:
  retraced, since the change is in JAX's lowering and never shows in the frozen module.
- Neither differs: frozen, and time decides as before; the answer says both were compared.
A bundle without a program is bisected frozen, and the sentence says why it could not be retraced.
"""

from __future__ import annotations

import time
from typing import Callable, Iterator, Sequence

from ...analysis.resolution import RESOLUTION, UNDER
from ...analysis.time_screen import screen
from ...analysis.verdict import paired_log_ratios
from ...errors import ReproBundleError, TimeSpentError, UsageError
from ...text import first_line
from .bisection import (
    BEYOND,
    BITS_ONLY,
    SAME,
    BisectResult,
    NothingStood,
    also_entry,
    program_failed,
    standing,
    unconfirmed,
)
from .slowdown_claim import UnderResolution

FROZEN, RETRACE = "frozen", "retrace"
Runs = Callable[[Sequence[str]], list]


def _ran(runs: Sequence[dict]) -> bool:
    return all(r["status"] in ("ok", "mismatch") for r in runs)


def _failed(good: str, bad: str, runs: Sequence[dict]) -> str:
    """`jax 0.5.0 error, jax 0.5.3 error: retrace: the factory's call has 2 array leaves, ...`: the ends that did not
    run, then why (each run's reason, its first line, said once where both ends give the same)."""
    failed = [(v, r) for v, r in zip((good, bad), runs) if r["status"] not in ("ok", "mismatch")]
    reasons = [line for line in dict.fromkeys(first_line(r.get("reason"), 300) for _, r in failed) if line]
    return ", ".join(f"jax {v} {r['status']}" for v, r in failed) + (f": {'; '.join(reasons)}" if reasons else "")


_HOW = {BEYOND: "beyond the tolerance", BITS_ONLY: "in bits, within the tolerance"}


def choose_mode(good: str, bad: str, frozen: Runs, retraced: Runs | None, apart: Callable[[dict, dict], str],
                refusal: str | None = None) -> tuple[str, str]:
    """(mode, why in one sentence). `frozen` and `retraced` replay versions untimed (their runs are the endpoints'
    first probe, reused by the bisection); `retraced` None with `refusal`: why the bundle cannot be retraced."""
    f_runs = frozen([good, bad])
    f_apart = apart(*f_runs) if _ran(f_runs) else None
    if f_apart in (BEYOND, BITS_ONLY):
        return FROZEN, (f"frozen: the frozen module's outputs differ {_HOW[f_apart]} between jax {good} and {bad}, "
                        "so the change shows below JAX's lowering")
    if retraced is None:
        return FROZEN, f"frozen: {refusal or 'the bundle cannot be retraced'}"
    r_runs = retraced([good, bad])
    r_apart = apart(*r_runs) if _ran(r_runs) else None
    frozen_said = ("the frozen module computes the same bits on both" if f_apart == SAME else
                   f"the frozen module does not run on both ({_failed(good, bad, f_runs)})")
    if r_apart in (BEYOND, BITS_ONLY) or (f_apart is None and r_apart is not None):
        lowered = (f"gives outputs that differ {_HOW[r_apart]}" if r_apart in _HOW else "runs on both")
        return RETRACE, f"retraced: {frozen_said}, and the program as each release lowers it {lowered}"
    tried = "the retraced program's outputs are the same too" if r_apart == SAME else \
        f"the retraced program does not run on both ({_failed(good, bad, r_runs)})"
    return FROZEN, f"frozen: {frozen_said} and {tried}, so time decides on the frozen module"


# -- every change the endpoints show, the most severe first -------------------------------------------------------
# What `bisect` and `investigate` do when not told both the mode and the criterion: the endpoints run untimed in
# each mode (`survey`), and every kind of change present is bisected in its own bisection (`plan`), ranked: outputs
# beyond the tolerance, then a settled slowdown (the endpoints timed: only a slower bad end is one), then bits within
# the tolerance. Outputs and bits are looked for in the retraced program first (what the user runs), then in the
# frozen module; time on the frozen module where it runs on both (what the compiler does with one program), else
# on the retraced one.

SEVERITY = ("outputs", "time", "bits")  # the kinds of change, the most severe first (outputs: errors too)
FAILS = "fails"  # survey: the bad end fails where the good end runs
_NAME = {RETRACE: "the retraced program", FROZEN: "the frozen module"}


def survey(good: str, bad: str, runs_of: dict[str, Runs], apart: Callable[[dict, dict], str],
           lowered: Callable[[dict, dict], bool | None] | None = None) -> dict[str, dict]:
    """mode -> {"apart": SAME, BITS_ONLY, BEYOND, FAILS or None (it does not run on both), "said": one clause},
    from each mode's endpoints replayed once, untimed (`runs_of`: mode -> its probe). A bad end that mismatches the
    reference where the good end matches it counts as BEYOND; one that fails where the good end runs, FAILS. The
    retraced program's entry also says whether the two releases lower it differently (`lowered`: of its two runs,
    None where not known), and where they do, its said clause says so."""
    out = {}
    for mode, probe in runs_of.items():
        runs = probe([good, bad])
        found = apart(*runs) if _ran(runs) else None
        if found is not None and [r["status"] for r in runs] == ["ok", "mismatch"]:
            found = BEYOND
        if _ran(runs[:1]) and program_failed(runs[1]):
            found = FAILS
        said = (f"{_NAME[mode]}'s outputs differ {_HOW[found]}" if found in _HOW else
                f"{_NAME[mode]} fails on jax {bad} ({runs[1]['status']}) and runs on jax {good}" if found == FAILS
                else
                f"{_NAME[mode]}'s outputs are the same bit for bit" if found == SAME else
                f"{_NAME[mode]} does not run on both ({_failed(good, bad, runs)})")
        out[mode] = {"apart": found, "said": said}
        if mode == RETRACE and lowered is not None and _ran(runs):
            out[mode].update(_lowering_said(lowered(*runs), good, bad, said))
    return out


def _lowering_said(differently: bool | None, good: str, bad: str, said: str) -> dict:
    """The retraced program's survey entry's "lowered" (None: not known, and not said) and its clause."""
    if differently is None:
        return {}
    return {"lowered": differently,
            "said": said + (f", and jax {bad} lowers it to other StableHLO than jax {good}" if differently else "")}


def plan(found: dict[str, dict], by: str | None, refusal: str | None = None) -> tuple[list[tuple[str, str]], str]:
    """([(mode, criterion)], why in one line): the bisections to run, the most severe kind first, from `survey`'s
    answer; `by` keeps only that kind. Nothing to bisect (`by` absent at the endpoints, or no mode runs on both):
    one bisection by `by` (else outputs) in a mode, which then says why, from the endpoints' untimed runs."""
    order = [m for m in (RETRACE, FROZEN) if m in found]
    wanted = _wanted(found, order, by)
    steps = _with_lowering_time(found, [(str(wanted[kind]), kind) for kind in SEVERITY
                                        if wanted[kind] is not None and by in (None, kind)])
    if not steps:  # its bisection says why: not told apart by `by`, or an endpoint that does not run (the
        # untimed runs above, remembered by the probe: nothing more is replayed)
        steps = [(wanted["time"] or (order[0] if order else FROZEN), by or "outputs")]
    chosen = ", then ".join(_step_text(mode, kind, steps) for mode, kind in steps)
    said = [found[m]["said"] for m in order] + ([f"not retraced: {refusal}"] if refusal else [])
    asked = f"--by {by}" if by else "the most severe first"
    return steps, f"bisected by {chosen} ({asked}): " + "; ".join(said)


def _step_text(mode: str, kind: str, steps: list[tuple[str, str]]) -> str:
    """`time (frozen)`; the retraced program's time beside the frozen module's: `time (retraced) unless the frozen
    module is found slower` (KindSearches.screen skips it where the frozen module's slowdown stands)."""
    if mode == RETRACE and kind == "time" and (FROZEN, "time") in steps:
        return "time (retraced) unless the frozen module is found slower"
    return f"{kind} ({'retraced' if mode == RETRACE else 'frozen'})"


def _with_lowering_time(found: dict[str, dict], steps: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """`steps` with the retraced program's time after the frozen module's, where the retraced program runs on both
    endpoints and they lower it to other StableHLO: a slowdown of JAX's lowering never shows in the frozen module."""
    retraced = found.get(RETRACE, {})
    if (FROZEN, "time") not in steps or not retraced.get("lowered") or retraced.get("apart") in (None, FAILS):
        return steps
    at = steps.index((FROZEN, "time")) + 1
    return [*steps[:at], (RETRACE, "time"), *steps[at:]]


def _wanted(found: dict[str, dict], order: list[str], by: str | None) -> dict[str, str | None]:
    """Each kind -> the mode its bisection runs in, None where the endpoints do not show it: outputs (or an error)
    and bits in the first mode of `order` that shows them (any difference, for --by bits); time on the frozen module
    where it runs on both, else on the first mode that does."""
    def first(*kinds: str | None) -> str | None:
        return next((m for m in order if found[m]["apart"] in kinds), None)

    runs = [m for m in order if found[m]["apart"] not in (None, FAILS)]
    timed = FROZEN if FROZEN in runs else runs[0] if runs else None
    return {"outputs": first(FAILS, BEYOND), "time": timed,
            "bits": first(BITS_ONLY, BEYOND) if by == "bits" else first(BITS_ONLY)}


def time_screen(good: str, bad: str, timed: Runs) -> dict:
    """The bounded screen of time between the endpoints (`timed`: a probe that times them together in a few
    rounds within a wall bound, fresh): analysis/time_screen.screen's answer with "said" (one clause), "seconds",
    "good" and "bad"."""
    started = time.monotonic()
    runs = timed([good, bad])
    seconds = time.monotonic() - started
    if not _ran(runs):
        return {"seen": None, "rounds": 0, "seconds": seconds,
                "said": f"the time screen did not run ({_failed(good, bad, runs)}): nothing about time is ruled out"}
    found = screen(paired_log_ratios(runs[0].get("timing") or {}, runs[1].get("timing") or {}) or [])
    return {**found, "seconds": seconds, "said": _screen_text(found, good, bad, seconds), "good": good, "bad": bad}


def _screen_text(found: dict, good: str, bad: str, seconds: float) -> str:
    n, seen = found["rounds"], found["seen"]
    if seen is None:
        return (f"the time screen timed {n} paired round{'s' if n != 1 else ''} in {seconds:.0f} s, too few to "
                "judge: no slowdown is ruled out (bisect --by time measures it in full)")
    lo, hi = found["interval"]
    measured = (f"jax {bad} is {found['ratio']:.2f}x [{lo:.2f}-{hi:.2f}] of jax {good}'s time in a screen of {n} "
                f"paired rounds ({seconds:.0f} s)")
    noise = f"the screen's noise was {found['noise']:.1%} a round"
    if seen == "slower":
        return f"{measured}: slower beyond the noise ({noise}), so bisected by time"
    if seen == "small":
        return f"{measured}: slower beyond the noise ({noise}), but {UNDER}: its interval cannot lie above " \
               f"{RESOLUTION:.2f}x"
    if seen == "faster":
        return f"{measured}: faster; nothing regressed by time"
    return (f"{measured}: no slowdown beyond the noise; a slowdown under {found['not_ruled_out']:.2f}x is not ruled "
            f"out: {noise} (bisect --by time measures it in full)")


def _screened_out(mode: str, screen_time: Callable[[str], dict | None],
                  progress: Callable[[str], None] | None) -> dict | None:
    """The time step's screen: None where it saw a slowdown beyond its noise, or where this mode's time is not
    screened (`screen_time` answers None: measured in full), so the time bisection runs; the screen's {"skip": why}
    where it answered so (the step neither run nor listed); else the `set_aside` entry that says what it saw and
    could not rule out."""
    try:
        seen = screen_time(mode)
    except TimeSpentError as e:  # said, and the answer is not reused without it: the next call screens
        seen = {"seen": None, "said": f"the time screen did not run: {e.message}: no slowdown is ruled out",
                "unfinished": True}
    if seen is None or "skip" in seen:
        if seen is not None and progress:
            progress(f"bisect: time ({mode}) not looked at: {seen['skip']}")
        return seen
    if progress:
        taken = "; its rounds the endpoints' measurement (not timed again)" if seen.get("taken") else ""
        progress(f"bisect: time ({mode}) screened: {seen['said']}{taken}")
    if seen["seen"] == "slower":
        return None
    good, bad = seen.get("good"), seen.get("bad")
    small = {"not_listed": {"kind": "small", "last_good": good, "first_bad": bad, "mode": mode,
                            "ratio": seen["ratio"], "ci95": seen["interval"], "control": None,
                            "line": f"{good}..{bad} (the window's ends, screened): {seen['ratio']:.2f}x "
                                    f"[{seen['interval'][0]:.2f}-{seen['interval'][1]:.2f}] in {seen['rounds']} "
                                    f"rounds, {UNDER}; not searched"}} if seen["seen"] == "small" else {}
    return {"criterion": "time", "mode": mode, "why": seen["said"],
            "screen": {k: seen.get(k) for k in ("seen", "ratio", "interval", "noise", "rounds", "not_ruled_out",
                                                "seconds")}, **({"unfinished": True} if seen.get("unfinished") else {}),
            **small}


def bisect_each(steps: Sequence[tuple[str, str]], run_one: Callable[[str, str], BisectResult], by: str | None,
                why: str | None, progress: Callable[[str], None] | None = None,
                screen_time: Callable[[str], dict | None] | None = None) -> BisectResult:
    """Each of `plan`'s bisections run (`run_one(mode, criterion)`), the headline the first whose answer stands (a
    time change only where its confirmation reproduced it), the others its `also` (each with its own first bad
    release), and what was examined and is no regression (a speedup, no settled change, a time change the
    confirmation did not reproduce, a kind whose bisection failed) its `set_aside`. One step alone: its error is
    the answer; several that all fall: one UsageError that says each. `screen_time(mode)` (`time_screen` over a
    probe of that mode): with `by` unset and another kind among the steps, the time step runs only where that screen
    sees a slowdown beyond its noise."""
    set_aside: list[dict] = []
    found = [r for _, r in standing_each(steps, run_one, by, why, set_aside, progress,
                                         screened(steps, by, screen_time)) if r is not None]
    return _headline(found, set_aside)


def screened(steps: Sequence[tuple[str, str]], by: str | None,
             screen_time: Callable[[str], dict | None] | None) -> Callable[[str], dict | None] | None:
    """`screen_time` where a time step is screened, else None: by unset and another kind among the steps, every
    time step; time the only kind (by unset or time), the retraced program's time beside the frozen module's (a
    second look, secondary: the frozen module's time is measured in full), that one alone (the others: None,
    measured in full). A screen may answer {"skip": why}: the step is not run, nor listed (a second look at a
    slowdown that stood already)."""
    if screen_time is None or by not in (None, "time"):
        return None
    if by is None and any(kind != "time" for _, kind in steps):
        return screen_time
    if (FROZEN, "time") in steps and (RETRACE, "time") in steps:
        return lambda mode: screen_time(mode) if mode == RETRACE else None
    return None


def standing_each(steps: Sequence[tuple[str, str]], run_one: Callable[[str, str], BisectResult], by: str | None,
                  why: str | None, set_aside: list[dict], progress: Callable[[str], None] | None = None,
                  screen_time: Callable[[str], dict | None] | None = None, stood: bool = False
                  ) -> Iterator[tuple[int, BisectResult | None]]:
    """bisect_each one step at a time (investigate's headline first: search/headline_first.py): each of `plan`'s
    bisections run in order, each yielded as it ends with its index in `steps`: its result where its answer stands,
    else None, what it examined and is no regression appended to `set_aside`. `screen_time`: the time step's screen,
    already `screened`. Before any stood (`stood`: one stood before these steps), --max-time (TimeSpentError) and a
    lone step's error are raised; after, a step --max-time left, and those after it, are set aside `unfinished`, and
    one that failed otherwise (a worker that hung or died, a release that would not install) is set aside with why:
    the answer already found is kept."""
    for at, (mode, kind) in enumerate(steps):
        try:
            outcome = _run_step(mode, kind, run_one, len(steps) == 1 and not stood, progress, screen_time)
        except TimeSpentError as e:  # the bisections before it are kept; this one and those after are said
            if not stood:
                raise
            set_aside += [{"criterion": k, "mode": m, "why": f"not bisected: {e.message}", "unfinished": True}
                          for m, k in steps[at:]]
            return
        except ReproBundleError as e:
            if not stood or isinstance(e, OSError):  # a full disk is the machine's, not this kind's
                raise
            outcome = {"criterion": kind, "mode": mode, "why": f"not bisected: {e.message}"[:2000]}
        if isinstance(outcome, dict):
            if "skip" not in outcome:  # a skipped step is said by its search (KindSearches.skipped), not set aside
                set_aside.append(outcome)
            yield at, None
            continue
        _as_chosen(outcome, mode, why, None if by is not None else kind)
        if standing(outcome):
            stood = True
            yield at, outcome
            continue
        set_aside.append(unconfirmed(outcome))
        if progress:
            progress(f"bisect: {kind} ({mode}): {set_aside[-1]['why']}")
        yield at, None


def _as_chosen(result: BisectResult, mode: str, why: str | None, chosen_kind: str | None) -> None:
    """The step's mode and why; a criterion chosen, not asked for (`chosen_kind`), said without its --by."""
    result.mode, result.mode_why = mode, why
    if chosen_kind is not None:
        result.by, result.why = None, result.why.removeprefix(f"--by {chosen_kind}: ")


def _run_step(mode: str, kind: str, run_one: Callable[[str, str], BisectResult], alone: bool,
              progress: Callable[[str], None] | None,
              screen_time: Callable[[str], dict | None] | None) -> BisectResult | dict:
    """One bisection's result, or its `set_aside` entry: where it failed (a UsageError; a step `alone` raises it),
    or a time step whose `screen_time` (given: it is screened) saw no slowdown beyond its noise; or {"skip": why}, a
    time step its screen skipped."""
    if kind == "time" and screen_time is not None:
        aside = _screened_out(mode, screen_time, progress)
        if aside is not None:
            return aside
    try:
        return run_one(mode, kind)
    except TimeSpentError:
        raise
    except UsageError as e:
        if isinstance(e, UnderResolution):
            e.entry["mode"] = mode
        if alone:
            raise
        if progress:
            progress(f"bisect: {kind} ({mode}) set aside: {e.message}")
        small = {"not_listed": e.entry} if isinstance(e, UnderResolution) else {}
        return {"criterion": kind, "mode": mode, "why": e.message[:2000], **small}


def _headline(found: list[BisectResult], set_aside: list[dict]) -> BisectResult:
    """The first change that stood, with the others as its `also` and what is no regression as its `set_aside`;
    none: one UsageError that says each."""
    if not found:
        raise nothing_stood(set_aside)
    head, others = found[0], found[1:]
    head.also += [also_entry(r) for r in others]
    head.also_runs = [run for r in others for run in [*r.runs.values(), *r.confirm_runs]]
    head.set_aside = set_aside + head.set_aside
    cut = [f"{s['criterion']} ({s['mode']})" for s in set_aside if s.get("unfinished")]
    if cut and not head.unfinished:  # what --max-time left unexamined: the answer is the next call's to finish
        head.unfinished = f"--max-time spent before {', '.join(cut)} was examined"
        head.cut_at = "kinds"
    return head


def nothing_stood(set_aside: list[dict]) -> NothingStood:
    """The answer where no bisection's change stood: one UsageError that says each kind examined (its
    `set_aside`: what each set aside)."""
    return NothingStood("no change stood between the endpoints: " + "; ".join(
        f"{s['criterion']} ({s['mode']}): {s['why']}" for s in set_aside), set_aside,
        hint="replay with more --rounds, or pick other endpoints")
