"""A timing's summary (count, median, interquartile range, min, mean) in pure Python: the same floats numpy gives
for the integer nanoseconds workers record, so the commands that only read bundles (`ls`, `show`) start without
numpy."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class TimingSummary:
    n: int
    median_ns: float
    iqr_ns: float
    min_ns: float
    mean_ns: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> "TimingSummary":
        """The same floats as numpy's percentile (linear) and mean, without numpy for integer samples (what workers
        record): `ls` and `show` summarise reference runs and must not load numpy to start (#28)."""
        if not samples:
            return cls(0, math.nan, math.nan, math.nan, math.nan)
        if not all(type(s) is int and abs(s) < 2**53 for s in samples):
            return cls._of_floats(samples)
        ordered = sorted(float(s) for s in samples)
        q1, med, q3 = (_linear_percentile(ordered, q) for q in (0.25, 0.5, 0.75))
        # integer-valued floats below 2**53 add exactly in any order: numpy's pairwise sum gives this same total
        return cls(len(ordered), med, q3 - q1, ordered[0], float(sum(samples)) / len(ordered))

    @classmethod
    def _of_floats(cls, samples: Sequence[float]) -> "TimingSummary":
        import numpy as np

        a = np.asarray(samples, dtype=np.float64)
        q1, med, q3 = np.percentile(a, [25, 50, 75])
        return cls(int(a.size), float(med), float(q3 - q1), float(a.min()), float(a.mean()))


def _linear_percentile(ordered: Sequence[float], quantile: float) -> float:
    """numpy.percentile's default (linear) method on sorted values, to the last bit: the virtual index (n - 1) * q,
    and numpy's lerp, which interpolates from the nearer end (numpy/lib/_function_base_impl.py `_lerp`)."""
    index = (len(ordered) - 1) * quantile
    below = math.floor(index)
    a, b = ordered[below], ordered[min(below + 1, len(ordered) - 1)]
    gamma = index - below
    return b - (b - a) * (1 - gamma) if gamma >= 0.5 else a + (b - a) * gamma
