"""Comparisons: outputs against a reference (dtype-aware tolerances), timings between versions (statistics).

Pure numpy; no JAX.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

# (rtol, atol) by dtype: loose enough for the reassociation XLA may do between releases, tight enough to
# catch a wrong result. Integers and booleans must match exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "float64": (1e-10, 1e-12),
    "complex128": (1e-10, 1e-12),
    "float32": (1e-4, 1e-5),
    "complex64": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}
_FP8_TOLERANCE = (0.25, 0.1)


def tolerance_for(dtype_name: str) -> tuple[float, float]:
    if dtype_name in TOLERANCES:
        return TOLERANCES[dtype_name]
    if dtype_name.startswith(("float8", "float4", "float6")):
        return _FP8_TOLERANCE
    return (0.0, 0.0)


def _as_compute(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind == "c":
        return arr.astype(np.complex128)
    if arr.dtype.kind in "biu":
        return arr.astype(np.float64) if arr.dtype.kind != "b" else arr.astype(np.int8)
    return arr.astype(np.float64)


def check_leaf(reference: np.ndarray, actual: np.ndarray) -> dict:
    dtype = reference.dtype.name
    rtol, atol = tolerance_for(dtype)
    out = {"dtype": dtype, "rtol": rtol, "atol": atol}
    if reference.shape != actual.shape or reference.dtype != actual.dtype:
        return {**out, "ok": False, "bit_identical": False, "max_abs_err": _finite(math.inf), "max_rel_err": _finite(math.inf),
                "mismatched": int(reference.size),
                "reason": f"expected {dtype}{list(reference.shape)}, got {actual.dtype.name}{list(actual.shape)}"}
    bit_identical = reference.tobytes() == actual.tobytes()
    ref, act = _as_compute(reference), _as_compute(actual)
    both_nan = np.isnan(ref) & np.isnan(act) if ref.dtype.kind in "fc" else np.zeros(ref.shape, bool)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(ref - act)
        diff = np.where(both_nan | (ref == act), 0.0, diff)  # equal infinities differ by nan, not by anything
        bad = ~(diff <= atol + rtol * np.abs(ref))
        rel = diff / np.maximum(np.abs(ref), np.finfo(np.float64).tiny)
    max_abs = float(np.max(diff)) if diff.size else 0.0
    max_rel = float(np.max(np.where(diff == 0, 0.0, rel))) if diff.size else 0.0
    mismatched = int(np.count_nonzero(bad))
    return {**out, "ok": mismatched == 0, "bit_identical": bit_identical,
            "max_abs_err": _finite(max_abs), "max_rel_err": _finite(max_rel), "mismatched": mismatched}


def _finite(x: float) -> float:
    """Manifests and runs hold finite floats only; nan/inf errors are reported as the largest float."""
    return x if math.isfinite(x) else float(np.finfo(np.float64).max)


def check_outputs(reference: Sequence[np.ndarray], actual: Sequence[np.ndarray]) -> dict:
    """Per-leaf errors and the overall verdict: `ok` within tolerance, `bit_identical` byte for byte."""
    if len(reference) != len(actual):
        return {"ok": False, "bit_identical": False, "leaves": [],
                "reason": f"{len(actual)} outputs, the reference has {len(reference)}"}
    leaves = [check_leaf(r, a) for r, a in zip(reference, actual)]
    return {"ok": all(l["ok"] for l in leaves), "bit_identical": all(l["bit_identical"] for l in leaves),
            "max_abs_err": max((l["max_abs_err"] for l in leaves), default=0.0),
            "max_rel_err": max((l["max_rel_err"] for l in leaves), default=0.0),
            "leaves": leaves}


# ------------------------------------------------------------------------------------------------ timing

@dataclass(frozen=True)
class TimingSummary:
    n: int
    median_ns: float
    iqr_ns: float
    min_ns: float
    mean_ns: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> "TimingSummary":
        a = np.asarray(samples, dtype=np.float64)
        if a.size == 0:
            return cls(0, math.nan, math.nan, math.nan, math.nan)
        q1, med, q3 = np.percentile(a, [25, 50, 75])
        return cls(int(a.size), float(med), float(q3 - q1), float(a.min()), float(a.mean()))


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


# A difference must be both statistically clear and big enough to matter.
DEFAULT_ALPHA = 0.001
DEFAULT_MIN_EFFECT = 0.02


def timing_verdict(baseline: Sequence[float], candidate: Sequence[float], *, alpha: float = DEFAULT_ALPHA,
                   min_effect: float = DEFAULT_MIN_EFFECT) -> dict:
    """'slower', 'faster' or 'same' for candidate against baseline, with the ratio of medians and the p-value."""
    b = TimingSummary.of(baseline)
    c = TimingSummary.of(candidate)
    if b.n < 3 or c.n < 3 or not b.median_ns:
        return {"verdict": "unknown", "ratio": math.nan, "p_value": 1.0, "reason": "too few samples"}
    ratio = c.median_ns / b.median_ns
    _, p = mann_whitney_u(baseline, candidate)
    if p < alpha and abs(ratio - 1.0) >= min_effect:
        verdict = "slower" if ratio > 1 else "faster"
    else:
        verdict = "same"
    return {"verdict": verdict, "ratio": ratio, "p_value": p}
