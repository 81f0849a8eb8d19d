"""Which pieces of one function could still hold its largest move: the rule that lets `isolate` stop timing a piece
before its own verdict settles.

Isolation (investigate/minimize/pieces.py) times every piece of a function on two versions together and names the piece whose
time moved most, with that piece's verdict. A piece matters only while it could be that piece. Each piece is a
comparison: its per-round paired log ratios d (candidate over baseline, as the verdict pairs them) and its baseline's
median call b, so its change of time is b (exp(mean d) - 1), and an interval on the log ratio is one on that change.
A piece cannot matter, and stops being timed, when the largest change its interval allows is below either
- the smallest change another piece's interval allows (that piece certainly moved more), or
- MIN_EFFECT of the whole function's time (the pieces' baselines summed): a change that small cannot explain a move
  of the whole that a verdict would report (the verdicts call anything under MIN_EFFECT 'same').

The intervals: after the first round (the screening round) its one log ratio +- SCREEN_BAND, widened to three times
the spread of that round's step ratios on a machine noisy enough to need it (no spread between rounds can be
estimated from one round, so the band stands for it); none after the second (one degree of freedom says nothing);
from sequential.FIRST_LOOK on, the t interval at RETIRE_CONFIDENCE. They are looked at after every round without a
correction, so they only decide which pieces are still timed, never a verdict: the named piece's verdict is the
group-sequential test's (sequential.py), with its error rates.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .sequential import FIRST_LOOK, MIN_EFFECT
from .stats import t_quantile

SCREEN_BAND = math.log(1.25)  # +-25% around the screening round's ratio: several round-to-round spreads of a busy VM
SCREEN_STEP_SPREADS = 3.0  # or this many times the screening round's own step-ratio spread, when that is wider
RETIRE_CONFIDENCE = 0.99  # two-sided, of the t interval from FIRST_LOOK rounds on


@dataclass(frozen=True)
class Comparison:
    """One piece: `log_ratios` per round, `base_ns` its baseline's median call, `first_steps` the per-step log
    ratios of its first round (what the screening band widens to)."""

    key: str
    log_ratios: Sequence[float]
    base_ns: float
    first_steps: Sequence[float] = ()


def log_ratio_interval(c: Comparison) -> tuple[float, float] | None:
    """The interval on the piece's log ratio after its rounds so far (None: no rounds, or two)."""
    d = np.asarray(c.log_ratios, dtype=np.float64)
    n = int(d.size)
    if n == 1:
        steps = np.asarray(c.first_steps, dtype=np.float64)
        spread = 1.4826 * float(np.median(np.abs(steps - np.median(steps)))) if steps.size > 1 else 0.0
        band = max(SCREEN_BAND, SCREEN_STEP_SPREADS * spread)
        return float(d[0]) - band, float(d[0]) + band
    if n < FIRST_LOOK:
        return None
    half = t_quantile(1 - RETIRE_CONFIDENCE, n - 1) * float(d.std(ddof=1)) / math.sqrt(n)
    return float(d.mean()) - half, float(d.mean()) + half


def change_interval_ns(c: Comparison) -> tuple[float, float] | None:
    """The smallest and largest size |change of time| the piece's interval allows, in ns."""
    interval = log_ratio_interval(c)
    if interval is None:
        return None
    lo, hi = (c.base_ns * math.expm1(x) for x in interval)
    smallest = 0.0 if lo <= 0.0 <= hi else min(abs(lo), abs(hi))
    return smallest, max(abs(lo), abs(hi))


def cannot_matter(comparisons: Sequence[Comparison], *, share: float = MIN_EFFECT) -> set[str]:
    """The keys of the pieces that cannot hold the function's largest move (see the module docstring)."""
    sizes = {c.key: change_interval_ns(c) for c in comparisons}
    floor = share * sum(c.base_ns for c in comparisons)
    out = set()
    for c in comparisons:
        size = sizes[c.key]
        if size is None:
            continue
        beaten = max((s[0] for k, s in sizes.items() if k != c.key and s is not None), default=0.0)
        if size[1] < max(floor, beaten):
            out.add(c.key)
    return out
