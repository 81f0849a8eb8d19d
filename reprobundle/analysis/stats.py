"""The statistical tests behind timing verdicts: Student's t (one-sample and Welch) and Mann-Whitney U.

Pure Python and numpy; no scipy (the host stays light), so the t distribution is computed here from the
regularized incomplete beta function (continued fraction, modified Lentz), accurate to ~1e-12.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def _beta_continued_fraction(a: float, b: float, x: float) -> float:
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def regularized_beta(a: float, b: float, x: float) -> float:
    """I_x(a, b) for a, b > 0 and 0 <= x <= 1."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def t_two_sided_p(t: float, df: float) -> float:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom."""
    if math.isnan(t) or df <= 0:
        return 1.0
    if math.isinf(t):
        return 0.0
    return regularized_beta(df / 2.0, 0.5, df / (df + t * t))


def t_quantile(p_two_sided: float, df: float) -> float:
    """The t with P(|T| >= t) = p_two_sided (e.g. 0.05 -> the half-width factor of a 95% interval)."""
    lo, hi = 0.0, 1.0
    while t_two_sided_p(hi, df) > p_two_sided:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_two_sided_p(mid, df) > p_two_sided:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-12 * hi:
            break
    return (lo + hi) / 2.0


def one_sample_t(values: Sequence[float]) -> tuple[float, float, float, float]:
    """Test mean(values) == 0: (mean, standard error, degrees of freedom, two-sided p)."""
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    if n < 2:
        return (float(x.mean()) if n else math.nan), math.nan, 0.0, 1.0
    mean = float(x.mean())
    se = float(x.std(ddof=1)) / math.sqrt(n)
    return mean, se, float(n - 1), _p_of(mean, se, n - 1)


def welch_t(a: Sequence[float], b: Sequence[float]) -> tuple[float, float, float, float]:
    """Test mean(b) == mean(a) for independent samples: (mean(b) - mean(a), standard error, Welch df, p)."""
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if x.size < 2 or y.size < 2:
        return math.nan, math.nan, 0.0, 1.0
    vx, vy = x.var(ddof=1) / x.size, y.var(ddof=1) / y.size
    diff = float(y.mean() - x.mean())
    se = math.sqrt(vx + vy)
    if se == 0:
        return diff, 0.0, float(x.size + y.size - 2), 1.0 if diff == 0 else 0.0
    df = (vx + vy) ** 2 / (vx**2 / (x.size - 1) + vy**2 / (y.size - 1))
    return diff, se, float(df), _p_of(diff, se, df)


def _p_of(mean: float, se: float, df: float) -> float:
    if se == 0:
        return 1.0 if mean == 0 else 0.0
    return t_two_sided_p(mean / se, df)


def mann_whitney_u(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """Two-sided Mann-Whitney U test, normal approximation with tie correction.

    Returns (U of `a`, p-value). Adequate for the sample sizes timing produces (tens to thousands).
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        return math.nan, 1.0
    combined = np.concatenate([x, y])
    order = np.argsort(combined, kind="mergesort")
    ranks = np.empty(combined.size, dtype=np.float64)
    sorted_vals = combined[order]
    # Average ranks over ties.
    boundaries = np.flatnonzero(np.diff(sorted_vals)) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [combined.size]])
    avg = (starts + ends + 1) / 2.0
    ranks[order] = np.repeat(avg, ends - starts)
    u1 = ranks[:n1].sum() - n1 * (n1 + 1) / 2.0
    tie_sizes = ends - starts
    n = n1 + n2
    tie_term = float(np.sum(tie_sizes**3 - tie_sizes)) / (n * (n - 1)) if n > 1 else 0.0
    sigma = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie_term))
    if sigma == 0:
        return u1, 1.0
    mu = n1 * n2 / 2.0
    z = (abs(u1 - mu) - 0.5) / sigma  # continuity correction
    p = math.erfc(max(z, 0.0) / math.sqrt(2.0))
    return float(u1), float(min(1.0, p))
