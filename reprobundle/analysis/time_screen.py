"""A bounded screen of time: whether a few paired rounds see one release slower than another beyond the noise of
those same rounds. What an investigation asks of time when it was not asked about time (the endpoints' outputs
already changed): not a verdict, which may need up to 32 rounds under load, but whether a slowdown is visible at
all, and what a screen of this size could not rule out.

The data are the per-round paired log ratios d_1..d_n of the two releases timed together (analysis/verdict.py's
paired_log_ratios), n <= SCREEN_ROUNDS, ending earlier where the wall bound comes first. Their spread is the noise,
measured in the same rounds (the machine's load is in it). With mean m, standard error s and q the one-sided
CONFIDENCE quantile of t on n - 1 degrees of freedom:

- "slower": m - q s > 0 and exp(m) at least MIN_EFFECT above 1: a slowdown beyond the noise, for a time bisection
  (and its confirmation, a measurement of its own) to settle;
- "small": as "slower", but exp(m + q s) at most analysis/resolution.RESOLUTION: a slowdown whose interval cannot
  lie above the 5% a change must be to be listed (analysis/resolution.py), so it is said and never bisected;
- "faster": m + q s < 0 and exp(m) at least MIN_EFFECT below 1;
- "same": neither; a slowdown up to exp(m + q s) is not ruled out (`not_ruled_out`);
- None: fewer than two rounds (or none paired): no noise to judge by, nothing ruled out.

The screen is liberal on purpose (one-sided 95%, no correction for looks): a false "slower" costs one time
bisection, whose own measurement and confirmation then decide; a missed one is said as what it could not rule out.
"""

from __future__ import annotations

import math
from typing import Sequence

from .resolution import RESOLUTION

SCREEN_ROUNDS = 5  # the most paired rounds a screen times
SCREEN_S = 40.0  # the wall bound of a screen's rounds (its environments and first compiles in it)
CONFIDENCE = 0.95
MIN_EFFECT = 0.02  # smaller moves are no slowdown, however certain (as analysis/sequential.py's)


def screen(log_ratios: Sequence[float]) -> dict:
    """{"seen": "slower" | "faster" | "same" | None, "ratio", "interval": [lo, hi] (one-sided bounds at
    CONFIDENCE, as ratios), "noise": the spread of one round's log ratio (a fraction, e.g. 0.04), "rounds",
    "not_ruled_out": the largest slowdown the screen cannot rule out (a ratio; None when it saw one, or faster)}.
    "small": a slowdown beyond the noise whose upper bound lies at or under resolution.RESOLUTION."""
    d = [float(x) for x in log_ratios if x is not None and math.isfinite(x)]
    n = len(d)
    mean = sum(d) / n if n else math.nan
    if n < 2:
        return {"seen": None, "ratio": math.exp(mean) if n else None, "interval": None, "noise": None,
                "rounds": n, "not_ruled_out": None}
    from scipy import stats  # investigate has it loaded already; `ls` and `show` never call this

    spread = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = float(stats.t.ppf(CONFIDENCE, n - 1)) * spread / math.sqrt(n)
    lo, hi = mean - half, mean + half
    moved = math.expm1(mean)
    seen = ("slower" if lo > 0 and moved >= MIN_EFFECT else "faster" if hi < 0 and -moved >= MIN_EFFECT else
            "same")
    if seen == "slower" and math.exp(hi) <= RESOLUTION:
        seen = "small"
    return {"seen": seen, "ratio": math.exp(mean), "interval": [math.exp(lo), math.exp(hi)], "noise": spread,
            "rounds": n, "not_ruled_out": math.exp(hi) if seen == "same" else None}
