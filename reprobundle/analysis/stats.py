"""The statistical tests behind timing verdicts: Student's t (one-sample and Welch) and Mann-Whitney U.

The distributions and tests are scipy.stats (jax depends on scipy, so it costs the host nothing); this module fixes
the conventions the verdicts rely on: two-sided tests, a zero standard error decided without a division (identical
data is 'no difference', a constant nonzero difference is certain), and Mann-Whitney always by the normal
approximation with tie and continuity corrections.
"""

from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from typing import Iterator, Sequence

import numpy as np


def t_quantile(p_two_sided: float, df: float) -> float:
    """The t with P(|T| >= t) = p_two_sided (e.g. 0.05 -> the half-width factor of a 95% interval); nan for df <= 0."""
    from scipy import stats

    return float(stats.t.isf(p_two_sided / 2.0, df))  # = t.ppf(1 - p/2, df), without the cancellation for tiny p


def one_sample_t(values: Sequence[float]) -> tuple[float, float, float, float]:
    """Test mean(values) == 0: (mean, standard error, degrees of freedom, two-sided p)."""
    from scipy import stats

    x = np.asarray(values, dtype=np.float64)
    n = x.size
    if n < 2:
        return (float(x.mean()) if n else math.nan), math.nan, 0.0, 1.0
    mean, se = float(x.mean()), float(stats.sem(x))
    if se == 0:
        return mean, 0.0, float(n - 1), _certain(mean)
    with _quiet():
        result = stats.ttest_1samp(x, 0.0)
    return mean, se, float(result.df), float(result.pvalue)


def welch_t(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float, float]:
    """Test mean(b) == mean(a) for independent samples: (mean(b) - mean(a), standard error, Welch df, p)."""
    from scipy import stats

    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.size < 2 or y.size < 2:
        return math.nan, math.nan, 0.0, 1.0
    diff = float(y.mean() - x.mean())
    se = math.sqrt(x.var(ddof=1) / x.size + y.var(ddof=1) / y.size)
    if se == 0:
        return diff, 0.0, float(x.size + y.size - 2), _certain(diff)
    with _quiet():
        result = stats.ttest_ind(y, x, equal_var=False)
    return diff, se, float(result.df), float(result.pvalue)


@contextmanager
def _quiet() -> Iterator[None]:
    """scipy warns of precision loss when a sample is (nearly) constant, e.g. rounds whose medians are all equal;
    the result is still right (and se == 0 never gets here), so the warning would only be noise in a report."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Precision loss occurred", category=RuntimeWarning)
        yield


def _certain(difference: float) -> float:
    """The p-value when there is no spread at all: 1 for no difference, 0 for any."""
    return 1.0 if difference == 0 else 0.0


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Two-sided Mann-Whitney U test, normal approximation with tie and continuity corrections.

    Returns (U of `a`, p-value). Adequate for the sample sizes timing produces (tens to thousands); always the
    approximation (scipy's default switches to the exact distribution for small samples without ties).
    """
    from scipy import stats

    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    if x.size == 0 or y.size == 0:
        return math.nan, 1.0
    if np.all(np.concatenate([x, y]) == x[0]):
        return float(x.size * y.size / 2.0), 1.0  # all tied: no spread to test against
    result = stats.mannwhitneyu(x, y, use_continuity=True, alternative="two-sided", method="asymptotic")
    return float(result.statistic), float(min(1.0, result.pvalue))
