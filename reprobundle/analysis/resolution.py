"""A slowdown is a change only at the resolution the tool can measure.

The paired test (sequential.py) has power for a DETECT_EFFECT (5%) change: a settled 1.04x is real in its rounds,
but what a user asks ("did this release make my program slower?") is not answered by a difference the design
cannot tell from what the machine does to two processes. So a slowdown is listed as a change only where its
interval (the 95% interval of the paired rounds that judged it) lies above RESOLUTION, and, where the machine was
busy or the slowdown is small (its interval reaches under CONTROL_UNDER), beyond an A/A control timed in the same
rounds: the good release as a contender of its own (run/contenders.control_of). Under oversubscription a paired
comparison can be biased as well as noisy: two releases that use threads differently do not lose the same share of
the CPUs to other processes, nor does a process lose the same share in each position of a round; the control's
interval is how far the good release moves against itself there, and a slowdown no larger than that is no finding.

`judged` is the one rule: a slowdown's verdict (and its control's) -> listed or not, with the clause that says
why. The measurement it judges stops where the answer is known (run/budget.py's `slowdown_only`: a slowdown shown
beyond the resolution, sequential.beyond_at, or one ruled out), so a slowdown settled at 1.04x is timed on until its
interval says which side of 1.05 it lies, or the rounds run out. Pure Python.
"""

from __future__ import annotations

from typing import Sequence

from .busy import busy_reason
from .sequential import DETECT_EFFECT

RESOLUTION = 1.0 + DETECT_EFFECT  # a slowdown whose interval does not lie above this is no change
CONTROL_UNDER = 1.2  # a slowdown whose interval reaches under this is judged beside an A/A control
UNDER = f"under the {DETECT_EFFECT:.0%} this measures"


def figure(verdict: dict) -> str:
    """`1.04x [1.02-1.06]` (the ratio and its 95% interval; the ratio alone without one)."""
    ci = verdict.get("ci95")
    return f"{verdict['ratio']:.2f}x" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else "")


def busy_runs(runs: Sequence[dict]) -> str | None:
    """The first reason a run of `runs` was measured on a busy machine (analysis/busy.py), else None."""
    for run in runs:
        reason = busy_reason(((run or {}).get("environment") or {}).get("conditions"))
        if reason:
            return reason
    return None


def control_needed(verdict: dict | None, busy: bool) -> bool:
    """Whether a slowdown measured so far as `verdict` (None: not yet) is judged beside an A/A control: on a busy
    machine, or where its interval reaches under CONTROL_UNDER (or is not known)."""
    ci = (verdict or {}).get("ci95")
    return busy or not ci or ci[0] < CONTROL_UNDER


def control_reach(control: dict) -> float | None:
    """How far the good release moved against itself in the control's rounds: the far edge of its interval from 1
    (a ratio above 1; a control 0.96x [0.93-0.99] reaches 1/0.93 = 1.08); None without an interval."""
    ci = control.get("ci95")
    if not ci or ci[0] <= 0:
        return None
    return max(ci[1], 1.0 / ci[0])


def slowdown_ruled_out(baseline_timing: dict, timing: dict) -> int | None:
    """The round at which the paired rounds of `timing` beside `baseline_timing` ruled out a slowdown of
    DETECT_EFFECT (sequential.slowdown_ruled_out_at): not slower at the resolution the tool measures, what a
    workaround that restores the baseline's time is at this resolution (analysis/diagnosis.restores); None where
    they did not, or were not timed together."""
    from .sequential import slowdown_ruled_out_at
    from .verdict import paired_log_ratios

    ratios = paired_log_ratios(baseline_timing, timing)
    return slowdown_ruled_out_at(ratios) if ratios else None


def judged(verdict: dict, control: dict | None = None, good: str = "", asked_control: bool = False) -> dict:
    """{"listed": whether the slowdown `verdict` (the bad release against the good one, paired) is a change at this
    resolution, "said": why in one clause, "control": the control's ratio and interval (None: not timed)}.
    `control`: the good release against itself in the same rounds (`asked_control`: one was asked for, so a
    control that did not run lists nothing)."""
    ci = verdict.get("ci95")
    out: dict = {"listed": False, "control": None if control is None else {"ratio": control.get("ratio"),
                                                                          "ci95": control.get("ci95")}}
    if verdict.get("verdict") != "slower" or not ci or ci[0] <= RESOLUTION:
        return {**out, "said": _short_of(verdict)}
    reach = control_reach(control) if control is not None else None
    release = f"jax {good}" if good else "the good release"
    if asked_control and reach is None:
        return {**out, "said": f"beyond the {DETECT_EFFECT:.0%} this measures, but the A/A control ({release} "
                               "against itself) did not run"}
    if reach is not None and ci[0] <= reach:
        return {**out, "said": f"within what {release} moves against itself in the same rounds "
                               f"({figure(control or {})}): the machine's own noise"}
    beside = f" and beyond {release} against itself in the same rounds ({figure(control or {})})" \
        if reach is not None else ""
    return {**out, "listed": True, "said": f"beyond the {DETECT_EFFECT:.0%} this measures{beside}"}


def _short_of(verdict: dict) -> str:
    """Why a slowdown whose interval does not lie above RESOLUTION is none: under it, or not shown beyond it."""
    ci = verdict.get("ci95") or [0.0, 0.0]
    if verdict.get("ratio", 0.0) < RESOLUTION or ci[1] <= RESOLUTION:
        return UNDER
    return f"not shown beyond the {DETECT_EFFECT:.0%} this measures"
