"""Which end of a known change a release is like: Wald's sequential probability ratio test between "like the good
end" and "like the bad end", for a time bisection's probes.

A time bisection's endpoints, timed together in paired rounds, already measured the change (`Ends.measured`: the mean
of their per-round paired log ratios, bad against good) and how much one round's paired log ratio spreads
(`Ends.spread`). A probe, a release timed beside the good end in the same kind of rounds, only has to say on which
side of that change it lies. The group-sequential test (sequential.py) is built to detect a 5% change: it needs at
least FIRST_LOOK rounds, and to settle "same" within 5% on a busy machine it may need 20 or more; against a 3.8x
change one round of a release that is like either end is enough to decide. The budget stops a probe by this test
at the group-sequential test's looks (from FIRST_LOOK rounds: run/budget.py), so that each probe's paired verdict
beside the good end still has the rounds the search for a time that moves more than once reads
(investigate/search/window_changes.time_windows): a release like the good end takes FIRST_LOOK rounds, not 20.

With per-round paired log ratios d_1..d_n taken as normal draws with mean mu and spread sigma, the log likelihood
ratio of mu = T against mu = 0 after n rounds is

    LLR_n(T) = (T / sigma^2) * sum_i (d_i - T / 2)

and Wald's bounds are +-log((1 - ERROR) / ERROR): at most ERROR of wrong sides each way when T and sigma are known.
Neither is, so both are taken where they cannot make a wrong side likelier:

- T: the endpoints' measured change is uncertain (and a measurement that stopped as soon as it settled tends to
  overstate a small one). The test says "bad" where LLR_n(T_high) crosses the upper bound and "good" where
  LLR_n(T_low) crosses the lower one, T_low and T_high the ends of the change's one-sided 1 - ERROR intervals
  (Student's t on the endpoints' rounds): a release like the good end (mu = 0) is said bad at most ERROR of the
  time whatever T is, one like the bad end is said good at most ERROR of the time once the true change is at least
  T_low, and a release between the ends is decided only where it lies clear of the middle of every change the
  endpoints allow (the bisection's rule: at least half-way to the bad end is bad);
- sigma: the upper 1 - ERROR confidence bound of the spread pooled over the endpoints' rounds and the probe's own
  (each about its own mean; chi-square on their degrees of freedom), never below MIN_SPREAD, so a spread that a few
  rounds happen to underestimate does not turn into early sides, and a probe noisier than the endpoints widens it
  as its rounds come in.

Simulated (endpoints timed until the group-sequential test settled them slower, then 300 probes of up to 32 rounds
per case): against a 3.8x change with a 2-15% round-to-round spread, a release like either end is decided in 1-3
rounds (the budget takes FIRST_LOOK), never wrong; against 1.05x-1.5x changes, 1 wrong side in about 5,000
releases like either end, and what the test cannot tell in 32 rounds stays undecided. tests/test_which_end.py
checks built cases. An undecided release is judged as before (the budget also stops when the group-sequential
verdict settles, run/budget.py, and the bisection classes it by that verdict). A side is only ever a probe's
class: the first bad release it leads to is claimed only once a measurement of its own, judged by the
group-sequential test, confirms it (investigate/search/bisection.confirm).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Sequence

GOOD, BAD = "good", "bad"
ERROR = 0.01  # wrong sides each way, at a known spread; also the level of the spread's upper bound
MIN_SPREAD = 0.02  # a round's paired log ratio is taken to spread at least 2% (a quiet machine's, sequential.py)


@dataclass(frozen=True)
class Ends:
    """The change a probe is judged against: `measured`, the mean paired log ratio of the bad end against the good
    end over their rounds; `spread`, the standard deviation of those rounds' log ratios, on `dof` degrees of
    freedom (rounds - 1)."""

    measured: float
    spread: float
    dof: int

    @classmethod
    def of(cls, log_ratios: Sequence[float]) -> "Ends | None":
        """The ends measured by the endpoints' paired rounds; None with fewer than 2 rounds, or where the change is
        not known to be away from no change at all (`target` would not be)."""
        n = len(log_ratios)
        if n < 2:
            return None
        mean = math.fsum(log_ratios) / n
        ends = cls(mean, math.sqrt(_squares(log_ratios) / (n - 1)), n - 1)
        return ends if ends.target * mean > 0 else None

    @property
    def target(self) -> float:
        """The measured change shrunk to the near end of its one-sided 1 - ERROR interval (Student's t on `dof`):
        the change a release is surely not "like the good end" of."""
        return self._edge(-1)

    @property
    def target_high(self) -> float:
        """The measured change stretched to the far end of that interval."""
        return self._edge(+1)

    def _edge(self, way: int) -> float:
        reach = _t_high(self.dof, ERROR) * self.spread / math.sqrt(self.dof + 1)
        return math.copysign(max(0.0, abs(self.measured) + way * reach), self.measured)

    @property
    def ratio(self) -> float:
        return math.exp(self.measured)

    def as_data(self) -> tuple[float, float, int]:
        """Plain values, as a replay's options carry them (ReplayOptions.ends)."""
        return (self.measured, self.spread, self.dof)


@dataclass(frozen=True)
class Side:
    """What the test said after `rounds` rounds: `side` GOOD, BAD, or None (not decided), the probe's mean log
    ratio, and the spread the test took (the pooled upper bound)."""

    side: str | None
    rounds: int
    mean: float
    spread: float

    @property
    def ratio(self) -> float:
        return math.exp(self.mean)


def which_end(log_ratios: Sequence[float], ends: Ends, error: float = ERROR) -> Side:
    """The side of the first round at which the test decided, else the undecided state after all of them."""
    found = Side(None, 0, math.nan, math.nan)
    for n in range(1, len(log_ratios) + 1):
        found = _look(log_ratios[:n], ends, error)
        if found.side is not None:
            return found
    return found


def decided(log_ratios: Sequence[float], ends: Ends) -> bool:
    """Whether the test has said which end the rounds so far are like (the budget's stop, run/budget.py)."""
    return which_end(log_ratios, ends).side is not None


def _look(d: Sequence[float], ends: Ends, error: float) -> Side:
    n = len(d)
    mean = math.fsum(d) / n
    sigma = pooled_spread(d, ends, error)
    bound = math.log((1 - error) / error)
    if llr(d, ends.target_high, sigma) >= bound:
        return Side(BAD, n, mean, sigma)
    if llr(d, ends.target, sigma) <= -bound:
        return Side(GOOD, n, mean, sigma)
    return Side(None, n, mean, sigma)


def llr(d: Sequence[float], target: float, sigma: float) -> float:
    """The log likelihood ratio of mean `target` against mean 0 for normal rounds `d` of spread `sigma`."""
    return target / sigma**2 * (math.fsum(d) - len(d) * target / 2)


def pooled_spread(d: Sequence[float], ends: Ends, error: float = ERROR) -> float:
    """The upper 1 - `error` confidence bound of a round's spread, pooled over the endpoints' rounds and the probe's
    `d` (each about its own mean), never below MIN_SPREAD."""
    dof = ends.dof + len(d) - 1
    squares = ends.spread**2 * ends.dof + (_squares(d) if len(d) > 1 else 0.0)
    return max(MIN_SPREAD, math.sqrt(squares / _chi2_low(dof, error)))


def _squares(d: Sequence[float]) -> float:
    mean = math.fsum(d) / len(d)
    return math.fsum((x - mean) ** 2 for x in d)


@cache
def _t_high(dof: int, error: float) -> float:
    """The upper `error` quantile of Student's t on `dof` degrees of freedom."""
    from scipy import stats

    return float(stats.t.isf(error, dof))


@cache
def _chi2_low(dof: int, error: float) -> float:
    """The `error` quantile of chi-square on `dof` degrees of freedom (the upper bound's divisor)."""
    from scipy import stats  # here: 0.5 s to load, and commands that only read runs never call it

    return float(stats.chi2.ppf(error, dof))


MIN_FIGURE_ROUNDS = 3  # rounds a ratio is said from; fewer decide a side, never a figure


def side_text(found: Side, ends: Ends, good: str) -> str:
    """"like the good end in 1 round (sequential test against the endpoints' 3.81x, 1% error each way)"; from
    MIN_FIGURE_ROUNDS rounds on, with the ratio they make ("1.02x of jax 0.4.30's time in 3 rounds: like the good
    end (...)"); undecided: what it had reached."""
    rounds, against = rounds_text(found.rounds), against_text(ends, "endpoints'")
    said = f"like the {found.side} end" if found.side is not None else "neither end decided"
    if found.rounds < MIN_FIGURE_ROUNDS:
        return f"{said} in {rounds} ({against})"
    return f"{found.ratio:.3f}x of jax {good}'s time in {rounds}: {said} ({against})"


def against_text(ends: Ends, whose: str) -> str:
    """`sequential test against the endpoints' 3.81x, 1% error each way` (`whose`: "endpoints'", "confirmed")."""
    return f"sequential test against the {whose} {ends.ratio:.2f}x, {ERROR:.0%} error each way"


def rounds_text(n: int) -> str:
    """`1 round`, `3 rounds`."""
    return f"{n} round{'s' if n != 1 else ''}"
