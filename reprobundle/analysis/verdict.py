"""Comparisons: outputs against a reference (dtype-aware tolerances), timings between versions (statistics).

Pure numpy; no JAX.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from .stats import mann_whitney_u, one_sample_t, t_quantile, welch_t

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


def step_medians(timing: dict) -> list[list[float]] | None:
    """Per round, the median call time of each step; None for a run that was not measured in steps."""
    samples, steps, rounds = timing.get("samples_ns") or [], timing.get("steps"), timing.get("rounds")
    if not steps or not rounds or sum(steps) != len(samples) or sum(rounds) != len(steps):
        return None
    per_step, at = [], 0
    for calls in steps:
        per_step.append(float(np.median(samples[at:at + calls])))
        at += calls
    out, at = [], 0
    for n in rounds:
        out.append(per_step[at:at + n])
        at += n
    return out


# A difference must be both statistically clear and big enough to matter.
DEFAULT_ALPHA = 0.01
DEFAULT_MIN_EFFECT = 0.02
MIN_ROUNDS = 3
METHOD_PAIRED = "paired rounds"
METHOD_ROUNDS = "rounds"
METHOD_SAMPLES = "samples"


def timing_verdict(baseline: dict, candidate: dict, *, alpha: float = DEFAULT_ALPHA,
                   min_effect: float = DEFAULT_MIN_EFFECT) -> dict:
    """'slower', 'faster', 'same' or 'unknown' for the candidate's timing against the baseline's.

    Both are timing maps of run records (`samples_ns`, and for interleaved runs `steps`, `rounds`, `group`). The
    test is the best the data allows:
    - "paired rounds" (both timed in one interleaved measurement, >= MIN_ROUNDS rounds): per round, the median
      log ratio of back-to-back steps, then a one-sample t-test over rounds. Drift cancels within a step pair;
      the process-to-process variation is the spread between rounds, so it is in the test.
    - "rounds" (>= MIN_ROUNDS rounds each, measured apart): Welch's t-test on the log medians of the rounds.
      Drift between the two measurements is not in the test (the caveat says so).
    - "samples" (anything else, e.g. a pack's reference run): Mann-Whitney U on the raw samples of one process
      each; process-to-process variation is not in the test, so on a noisy machine its verdicts are unreliable
      (the caveat says so).
    A verdict other than 'same' needs p < alpha and a ratio at least `min_effect` away from 1. Returns
    {"verdict", "ratio", "p_value", "method", "ci95": [lo, hi] | None, "rounds": int, "caveat": str | None}.
    """
    base_rounds, cand_rounds = step_medians(baseline), step_medians(candidate)
    same_group = baseline.get("group") is not None and baseline.get("group") == candidate.get("group")
    if same_group and base_rounds and cand_rounds:
        paired = [_paired_log_ratio(b, c) for b, c in zip(base_rounds, cand_rounds)]
        paired = [d for d in paired if d is not None]
        if len(paired) >= MIN_ROUNDS:
            mean, se, df, p = one_sample_t(paired)
            return _decide(mean, se, df, p, METHOD_PAIRED, len(paired), None, alpha, min_effect)
    if base_rounds and cand_rounds:
        b_logs = [math.log(float(np.median(r))) for r in base_rounds if r]
        c_logs = [math.log(float(np.median(r))) for r in cand_rounds if r]
        if len(b_logs) >= MIN_ROUNDS and len(c_logs) >= MIN_ROUNDS:
            diff, se, df, p = welch_t(b_logs, c_logs)
            return _decide(diff, se, df, p, METHOD_ROUNDS, min(len(b_logs), len(c_logs)),
                           "measured at different times: drift between them is not in the test; replay the "
                           "versions together for a paired verdict", alpha, min_effect)
    b_samples, c_samples = baseline.get("samples_ns") or [], candidate.get("samples_ns") or []
    b, c = TimingSummary.of(b_samples), TimingSummary.of(c_samples)
    if b.n < 3 or c.n < 3 or not b.median_ns:
        return {"verdict": "unknown", "ratio": math.nan, "p_value": 1.0, "method": METHOD_SAMPLES, "ci95": None,
                "rounds": 0, "caveat": "too few samples"}
    ratio = c.median_ns / b.median_ns
    _, p = mann_whitney_u(b_samples, c_samples)
    verdict = _direction(ratio) if p < alpha and abs(ratio - 1.0) >= min_effect else "same"
    return {"verdict": verdict, "ratio": ratio, "p_value": p, "method": METHOD_SAMPLES, "ci95": None, "rounds": 1,
            "caveat": "one process each, not interleaved: process-to-process variation is not in the test, so "
                      "on a noisy machine this verdict is unreliable; replay the versions together"}


def _paired_log_ratio(base_steps: list[float], cand_steps: list[float]) -> float | None:
    n = min(len(base_steps), len(cand_steps))
    if n == 0:
        return None
    return float(np.median(np.log(np.asarray(cand_steps[:n]) / np.asarray(base_steps[:n]))))


def _decide(log_ratio: float, se: float, df: float, p: float, method: str, rounds: int, caveat: str | None,
            alpha: float, min_effect: float) -> dict:
    ratio = math.exp(log_ratio)
    half = t_quantile(0.05, df) * se if se > 0 and df > 0 else 0.0
    verdict = _direction(ratio) if p < alpha and abs(ratio - 1.0) >= min_effect else "same"
    return {"verdict": verdict, "ratio": ratio, "p_value": p, "method": method,
            "ci95": [math.exp(log_ratio - half), math.exp(log_ratio + half)], "rounds": rounds, "caveat": caveat}


def _direction(ratio: float) -> str:
    return "slower" if ratio > 1 else "faster"
