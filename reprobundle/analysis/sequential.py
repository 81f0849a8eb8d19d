"""The group-sequential paired test behind timing verdicts: look after every round, stop as soon as the answer is
settled, with the error rates of the whole procedure (every look) corrected, not those of one test.

The data are the per-round paired log ratios d_1..d_n (schedule.py: per round, the median log ratio of back-to-back
steps of candidate and baseline), taken as independent normal draws with unknown mean mu and spread. After round n
(looks at n = FIRST_LOOK..LAST_LOOK) with mean m, standard error s and t = m / s on n - 1 degrees of freedom:

- **different** (slower or faster) when |t| >= t_{n-1}.isf(ALPHA_LOOK / 2) and the ratio exp(m) is at least
  MIN_EFFECT away from 1;
- **same**, settled, when the interval m -/+ t_{n-1}.isf(BETA_LOOK) s lies inside +-log(1 + DETECT_EFFECT): a
  change of DETECT_EFFECT is ruled out;
- otherwise another round, up to the budget (rounds or time); a measurement that ends unsettled says "same" with
  `settled` false: a change up to the interval's edge is not ruled out.

A question that only a slowdown answers (a time bisection's endpoints: a bad end that is not slower is no
regression, whatever else it is) may stop at the first look whose interval's upper edge lies below
log(1 + DETECT_EFFECT) (`slowdown_ruled_out_at`): a slowdown of DETECT_EFFECT is ruled out. That edge is the upper
half of "same", and BETA is calibrated on exactly it (P(the edge falls below a true +DETECT_EFFECT at some look)), so
a 5% slowdown is missed this way at most 5% of the time over all looks, as by "same". Its other answer is a
slowdown shown beyond DETECT_EFFECT (`beyond_at`: the efficacy bound on the mean less log(1 + DETECT_EFFECT)), not
merely a settled one: a slowdown is a change only at the resolution the design has power for
(analysis/resolution.py).

ALPHA_LOOK and BETA_LOOK are constant nominal levels per look (Pocock's design on the t scale), calibrated by
simulation (2.8 million normal paths of LAST_LOOK rounds, four seeds; tests/test_sequential.py checks them again) so
that over all looks together P(different | mu = 0) = ALPHA = 1% and P(same | mu = +-log 1.05) <= BETA = 5%. Both
hold whatever the spread, because t is pivotal: the spread decides only how many rounds an answer takes, and whether
the cap comes first. A 2% round-to-round spread: ~4.8 rounds for no change, ~6.8 for a 5% change (found 98.8% of the
time), ~4.8 for 10%; 4%: 9.6 and 12.4 rounds, a 5% change found 96%; 5%: 13 and 16 rounds, 94% (simulated; the test
checks up to 4%). A decision is the one at the first look that reaches it: later rounds, timed because another
version was still unsettled, refine the reported ratio and interval but never revise it.

Why LAST_LOOK is 32: the power for a 5% change is only reached within the cap. At 16 rounds (the first design) it
held up to a ~3.1% spread (82% at 4%, 59% at 5%), and a shared 2-core VM under load gives 3.5-6% unpinned
(benchmarks/README.md); at 32 it holds up to ~4.3%. A clear answer costs no more (the bounds of 32 looks are a little
stricter: +0.2-0.4 rounds on average); only a comparison still unsettled at round 16 runs on, up to twice the time,
which `--max-time` bounds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Sequence

import numpy as np

ALPHA = 0.01  # false verdicts over the whole procedure, no change at all
BETA = 0.05  # misses of a DETECT_EFFECT change over the whole procedure
DETECT_EFFECT = 0.05  # the change the power is for
MIN_EFFECT = 0.02  # smaller differences are reported as 'same' however certain
FIRST_LOOK = 3
LAST_LOOK = 32  # the calibration's horizon and the default cap on rounds
ALPHA_LOOK = 0.00096  # nominal two-sided level at each look (calibrated: 0.00095-0.00099 give exactly 1%)
BETA_LOOK = 0.0070  # nominal one-sided level of the equivalence bounds at each look (calibrated: 0.00701-0.00710 -> 5%)


@dataclass(frozen=True)
class Design:
    """A cap on the looks and the nominal levels calibrated for it (the default is the one the verdicts use;
    benchmarks/bench_replay.py also judges its data by the 16-round design it replaced)."""

    last_look: int = LAST_LOOK
    alpha_look: float = ALPHA_LOOK
    beta_look: float = BETA_LOOK


DESIGN = Design()


@cache
def efficacy_bound(n: int, alpha_look: float = ALPHA_LOOK) -> float:
    """|t| at or beyond which round n's look says different."""
    from scipy import stats  # here: 0.5 s to load, and commands that only read runs never call it

    return float(stats.t.isf(alpha_look / 2.0, n - 1))


@cache
def equivalence_bound(n: int, beta_look: float = BETA_LOOK) -> float:
    """The t multiple of the standard error that round n's equivalence interval spans on each side."""
    from scipy import stats

    return float(stats.t.isf(beta_look, n - 1))


@dataclass(frozen=True)
class Look:
    rounds: int
    mean: float  # mean log ratio over the rounds so far
    se: float
    decision: str | None  # "slower", "faster", "same" or None (not settled)


def look(log_ratios: Sequence[float], *, min_effect: float = MIN_EFFECT, detect: float = DETECT_EFFECT,
         design: Design = DESIGN) -> Look:
    """The decision after len(log_ratios) rounds, judged on them alone (None before FIRST_LOOK)."""
    d = np.asarray(log_ratios, dtype=np.float64)
    n = int(d.size)
    mean = float(d.mean()) if n else math.nan
    se = float(d.std(ddof=1) / math.sqrt(n)) if n > 1 else math.nan
    if n < FIRST_LOOK:
        return Look(n, mean, se, None)
    edge = math.log1p(detect)
    if se == 0:  # no spread: the mean is exact
        if mean != 0 and abs(math.expm1(mean)) >= min_effect:
            return Look(n, mean, se, "slower" if mean > 0 else "faster")
        return Look(n, mean, se, "same" if abs(mean) < edge else None)
    if abs(mean) / se >= efficacy_bound(n, design.alpha_look) and abs(math.expm1(mean)) >= min_effect:
        return Look(n, mean, se, "slower" if mean > 0 else "faster")
    half = equivalence_bound(n, design.beta_look) * se
    if -edge < mean - half and mean + half < edge:
        return Look(n, mean, se, "same")
    return Look(n, mean, se, None)


def first_decision(log_ratios: Sequence[float], **kw) -> Look:
    """The look at which the sequence first settled (the decision stands from there on), else the last look. Looks
    are at rounds FIRST_LOOK..LAST_LOOK, and at the last round when a fixed schedule ran more (one look more than
    calibrated: at most ALPHA_LOOK more false verdicts). `design` (default DESIGN) may cap the looks earlier."""
    last = kw.get("design", DESIGN).last_look
    n_all = len(log_ratios)
    looks = list(range(FIRST_LOOK, min(n_all, last) + 1)) + ([n_all] if n_all > last else [])
    for n in looks:
        found = look(log_ratios[:n], **kw)
        if found.decision is not None:
            return found
    return look(log_ratios, **kw)


def settled(log_ratios: Sequence[float], **kw) -> bool:
    return first_decision(log_ratios, **kw).decision is not None


def slowdown_ruled_out_at(log_ratios: Sequence[float], *, detect: float = DETECT_EFFECT,
                          design: Design = DESIGN) -> int | None:
    """The first look (its round) at which the interval's upper edge lay below log(1 + detect): a slowdown of
    `detect` ruled out (see the module's docstring); None where no look did."""
    edge = math.log1p(detect)
    d = np.asarray(log_ratios, dtype=np.float64)
    for n in range(FIRST_LOOK, min(int(d.size), design.last_look) + 1):
        mean, se = float(d[:n].mean()), float(d[:n].std(ddof=1) / math.sqrt(n))
        if mean + equivalence_bound(n, design.beta_look) * se < edge:
            return n
    return None


def beyond_at(log_ratios: Sequence[float], *, detect: float = DETECT_EFFECT, design: Design = DESIGN) -> int | None:
    """The first look (its round) at which the rounds showed a slowdown beyond `detect` (a ratio above 1 + detect):
    the efficacy bound applied to the mean less log(1 + detect). t is pivotal, so shifting the mean by a known
    edge keeps the calibration: a slowdown of exactly `detect` is declared beyond it at most ALPHA / 2 of the time
    over all looks. What a question at the resolution the design has power for stops at (run/budget.py's
    `slowdown_only`); None where no look did."""
    edge = math.log1p(detect)
    d = np.asarray(log_ratios, dtype=np.float64)
    for n in range(FIRST_LOOK, min(int(d.size), design.last_look) + 1):
        mean, se = float(d[:n].mean()), float(d[:n].std(ddof=1) / math.sqrt(n))
        if mean > edge and (se == 0 or (mean - edge) / se >= efficacy_bound(n, design.alpha_look)):
            return n
    return None


def p_value(log_ratios: Sequence[float]) -> float:
    """The nominal two-sided p of the last look's t (reported; the decision uses the corrected bounds)."""
    from scipy import stats

    d = np.asarray(log_ratios, dtype=np.float64)
    n = int(d.size)
    if n < 2:
        return 1.0
    se = float(d.std(ddof=1) / math.sqrt(n))
    mean = float(d.mean())
    if se == 0:
        return 1.0 if mean == 0 else 0.0
    return float(min(1.0, 2.0 * stats.t.sf(abs(mean) / se, n - 1)))


def equivalence_interval(log_ratios: Sequence[float]) -> tuple[float, float] | None:
    """The last look's equivalence interval as ratios (what 'same' was, or was not, judged on)."""
    d = np.asarray(log_ratios, dtype=np.float64)
    n = int(d.size)
    if n < 2:
        return None
    se = float(d.std(ddof=1) / math.sqrt(n))
    half = equivalence_bound(max(n, 2)) * se
    return math.exp(float(d.mean()) - half), math.exp(float(d.mean()) + half)
