"""A slowdown as a claim a time bisection may make: the paired runs that judge it, at the resolution the tool measures
(analysis/resolution.py: its interval above 1.05, and beyond the good release timed against itself in the same
rounds where the machine is busy or the slowdown small), and how each figure is said. bisection.py's endpoints and
confirmation judge by these; what is under the resolution is one `not_listed` line (`small_entry`), never a change."""

from __future__ import annotations

from ...analysis.resolution import control_needed, figure, judged
from ...analysis.verdict import shown_slower, timing_verdict
from ...analysis.which_end import rounds_text
from ...errors import UsageError


class UnderResolution(UsageError):
    """The endpoints' slowdown is settled but not a change at the resolution the tool measures
    (analysis/resolution.py): said in one line (`entry`, a `not_listed` entry: kind "small"), never searched."""

    def __init__(self, message: str, entry: dict, hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.entry = entry


def timing_of(run: dict) -> dict:
    return run.get("timing") or {}


def usable(run: dict) -> bool:
    """Whether a run ran to its outputs (they may mismatch the reference)."""
    return run["status"] in ("ok", "mismatch")


def verdict_line(verdict: dict, good: str) -> str:
    """`1.040x [1.020-1.060] vs jax 0.6.0 timed beside it: slower (p=..., paired rounds, 12 rounds)`."""
    ci = verdict.get("ci95")
    interval = f" [{ci[0]:.3f}-{ci[1]:.3f}]" if ci else ""
    said = "not settled" if verdict.get("settled") is False else verdict["verdict"]  # never "same" for a 45x
    return (f"{verdict['ratio']:.3f}x{interval} vs jax {good} timed beside it: {said} "
            f"(p={verdict['p_value']:.2g}, {verdict['method']}, {verdict.get('rounds')} rounds)")


def figure_text(verdict: dict) -> str:
    """What a paired measurement had, for a line that says it was cut: `51x [21-126] slower in 3 rounds` (a ratio
    with its interval only from 3 rounds or more), else `1 round: too few for a ratio`."""
    rounds, ci, ratio = verdict.get("rounds") or 0, verdict.get("ci95"), verdict.get("ratio")
    if not ci or ratio is None or rounds < 3:
        return f"{rounds_text(rounds)}: too few for a ratio"
    how = "slower" if ratio > 1 else "faster" if ratio < 1 else "the same"
    return f"{_short(ratio)}x [{_short(ci[0])}-{_short(ci[1])}] {how} in {rounds_text(rounds)}"


def _short(x: float) -> str:
    """A ratio as a figure a line can carry: 51, 1.15, 0.98."""
    return f"{x:.0f}" if x >= 10 else f"{x:.2f}"


def judged_pair(good_run: dict, bad_run: dict, control_run: dict | None, good: str, asked_control: bool) -> dict:
    """analysis/resolution.judged of two runs timed together (and the good release's control among them)."""
    verdict = timing_verdict(timing_of(good_run), timing_of(bad_run))
    ran = control_run is not None and usable(control_run) and usable(good_run)
    control = timing_verdict(timing_of(good_run), timing_of(control_run)) if ran and control_run else None
    return judged(verdict, control, good, asked_control)


def listed_as_they_stand(good_run: dict, bad_run: dict, good: str) -> bool:
    """Whether two runs timed together settle a slowdown that a time bisection's endpoints list as they stand: both
    usable, shown slower at the resolution, and no A/A control asked for by their figures (bisection._ends_judged
    times nothing more for them)."""
    if not (usable(good_run) and usable(bad_run)):
        return False
    verdict = timing_verdict(timing_of(good_run), timing_of(bad_run))
    return shown_slower(verdict) and not control_needed(verdict, False) and \
        judged_pair(good_run, bad_run, None, good, False)["listed"]


def beside_control(asked: bool, busy: bool, verdicts: list[dict | None]) -> bool:
    """Whether a measurement of a slowdown times the good release beside itself too: asked for, or a busy machine,
    or a slowdown measured so far (`verdicts`: none known, one is) whose interval reaches under
    analysis/resolution.CONTROL_UNDER."""
    known = [v for v in verdicts if v]
    return asked or busy or not known or any(control_needed(v, False) for v in known)


def small_entry(good: str, bad: str, verdict: dict, seen: dict, ends: bool = False, mode: str | None = None) -> dict:
    """A slowdown under the resolution as the answer's `not_listed` says it: `0.6.1 (last good 0.6.0): 1.04x
    [1.02-1.06], under the 5% this measures; not searched`."""
    where = f"{good}..{bad} (the window's ends)" if ends else f"{bad} (last good {good})"
    return {"kind": "small", "last_good": good, "first_bad": bad, "mode": mode, "ratio": verdict.get("ratio"),
            "ci95": verdict.get("ci95"), "control": seen.get("control"),
            "line": f"{where}: {figure(verdict)}, {seen['said']}; not searched"}


def confirmation_why(pair: tuple[str, str], verdict: dict, seen: dict, looked: str) -> str:
    """What a confirmation of `pair` (last good, first bad) says: confirmed, a slowdown that is no change at this
    resolution, or one it did not reproduce (`looked`: what the bisection's probe had seen)."""
    good, bad = pair
    line = verdict_line(verdict, good)
    if seen["listed"] and verdict["verdict"] == "slower":
        return f"confirmed: jax {bad} timed again beside jax {good}: {line}; {seen['said']}"
    if shown_slower(verdict):
        return (f"not a change at this resolution: jax {bad} timed again beside jax {good} is {line}: "
                f"{seen['said']}")
    return (f"unconfirmed: jax {bad} looked slower in the bisection ({looked}), but timed again beside jax {good} it "
            f"is {line}: not a first bad release")
