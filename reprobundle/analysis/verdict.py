"""Comparisons: outputs against a reference (dtype-aware tolerances), timings between versions (statistics).

Pure numpy; no JAX.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ..worker.tolerance import scaled_atol, tolerance_for
from . import sequential
from .stats import mann_whitney_u, one_sample_t, t_quantile, welch_t
from .timing_summary import TimingSummary

# Tolerances: one definition, in the worker package (a zip that replays itself checks its outputs with them too).
# (rtol, atol) by dtype is the per-element floor; integers and booleans must match exactly.
# On top of (rtol, atol), every element of a leaf may differ by SCALED_ULPS units in the last place of the leaf's
# largest |reference| value. Reassociation (XLA summing in another order, another blocking of a dot, a fusion that
# keeps an intermediate in float32) errs in proportion to the magnitude of the terms summed, not of each result:
# an element near zero of an attention output whose values reach 3000 differs by ~0.3 in float32 between releases
# (~1000 ulps of 3000), which a fixed atol of 1e-5 calls wrong. 4096 ulps of the largest value is 2^-12 of it in
# float32 and float64 (2.4e-4..4.9e-4 relative to the maximum): a real change of numerics (a dot rounded to
# bfloat16: ~4e-3 of the maximum; a wrong sign; a dropped term) is far beyond it. Narrow formats keep a few ulps of
# their maximum, their rounding being the error XLA's choices make there.


def _as_compute(arr: np.ndarray) -> np.ndarray:
    if arr.dtype.kind == "c":
        return arr.astype(np.complex128)
    if arr.dtype.kind in "biu":
        return arr.astype(np.float64) if arr.dtype.kind != "b" else arr.astype(np.int8)
    return arr.astype(np.float64)


def check_leaf(reference: np.ndarray, actual: np.ndarray) -> dict:
    """One output leaf against the reference: element i passes when |actual - reference| <= atol_scaled + rtol *
    |reference|, where atol_scaled is the larger of the dtype's atol and SCALED_ULPS ulps of the leaf's largest finite
    |reference| (`scale`). `worst` is the element furthest over (or nearest to) its allowance: its index, both
    values (as text: they may be nan or inf) and its error against what it was allowed."""
    dtype = reference.dtype.name
    rtol, atol = tolerance_for(dtype)
    out = {"dtype": dtype, "rtol": rtol, "atol": atol}
    if reference.shape != actual.shape or reference.dtype != actual.dtype:
        return {**out, "ok": False, "bit_identical": False, "max_abs_err": _finite(math.inf), "max_rel_err": _finite(math.inf),
                "mismatched": int(reference.size),
                "reason": f"expected {dtype}{list(reference.shape)}, got {actual.dtype.name}{list(actual.shape)}"}
    bit_identical = reference.tobytes() == actual.tobytes()
    ref, act = _as_compute(reference), _as_compute(actual)
    magnitude = np.abs(ref)
    finite = magnitude[np.isfinite(magnitude)] if ref.dtype.kind in "fc" else magnitude
    scale = float(finite.max()) if finite.size else 0.0
    atol_scaled = max(atol, scaled_atol(dtype, scale))
    both_nan = np.isnan(ref) & np.isnan(act) if ref.dtype.kind in "fc" else np.zeros(ref.shape, bool)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.abs(ref - act)
        diff = np.where(both_nan | (ref == act), 0.0, diff)  # equal infinities differ by nan, not by anything
        allowed = atol_scaled + rtol * np.where(np.isfinite(magnitude), magnitude, 0.0)  # inf: only itself
        bad = (diff != 0) & ~(diff <= allowed)  # equal values pass whatever the allowance (nan included)
        rel = diff / np.maximum(magnitude, np.finfo(np.float64).tiny)
        excess = np.where(diff == 0, 0.0, np.where(np.isnan(diff), np.inf, diff / allowed))
    max_abs = float(np.max(diff)) if diff.size else 0.0
    max_rel = float(np.max(np.where(diff == 0, 0.0, rel))) if diff.size else 0.0
    mismatched = int(np.count_nonzero(bad))
    out.update(ok=mismatched == 0, bit_identical=bit_identical, max_abs_err=_finite(max_abs),
               max_rel_err=_finite(max_rel), mismatched=mismatched, scale=_finite(scale),
               atol_scaled=_finite(atol_scaled))
    if excess.size and np.any(diff != 0):
        flat = int(np.nanargmax(np.where(np.isnan(excess), np.inf, excess)))
        at = np.unravel_index(flat, reference.shape) if reference.ndim else ()
        out["worst"] = {"index": [int(i) for i in at], "expected": _value_text(reference[at]),
                        "actual": _value_text(actual[at]), "abs_err": _finite(float(diff[at])),
                        "allowed": _finite(float(allowed[at])), "excess": _finite(float(excess[at]))}
    return out


def _value_text(x) -> str:
    """An element as short text (nan, inf and complex values included)."""
    value = complex(x) if np.iscomplexobj(x) else float(x) if np.asarray(x).dtype.kind != "b" else bool(x)
    return f"{value:.7g}" if isinstance(value, float) else str(value)


def _finite(x: float) -> float:
    """Manifests and runs hold finite floats only; nan/inf errors are reported as the largest float."""
    return x if math.isfinite(x) else float(np.finfo(np.float64).max)


def check_outputs(reference: Sequence[np.ndarray], actual: Sequence[np.ndarray],
                  names: Sequence[str] | None = None) -> dict:
    """Per-leaf errors and the overall verdict: `ok` within tolerance, `bit_identical` byte for byte; `worst`: the
    element furthest over its allowance over all leaves, with its leaf's index and key path (`names`, the output
    leaves' paths; `output i` without them)."""
    if len(reference) != len(actual):
        return {"ok": False, "bit_identical": False, "leaves": [],
                "reason": f"{len(actual)} outputs, the reference has {len(reference)}"}
    leaves = [check_leaf(r, a) for r, a in zip(reference, actual)]
    out = {"ok": all(l["ok"] for l in leaves), "bit_identical": all(l["bit_identical"] for l in leaves),
           "max_abs_err": max((l["max_abs_err"] for l in leaves), default=0.0),
           "max_rel_err": max((l["max_rel_err"] for l in leaves), default=0.0),
           "leaves": leaves}
    ranked = [(not l["ok"], l["worst"]["excess"], i) for i, l in enumerate(leaves) if l.get("worst")]
    if ranked:
        i = max(ranked)[2]
        path = names[i] if names is not None and i < len(names) else f"output {i}"
        out["worst"] = {"leaf": i, "path": path, **leaves[i]["worst"]}
    return out


# ------------------------------------------------------------------------------------------------ timing

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
      log ratio of back-to-back steps, then the group-sequential t-test over rounds (analysis/sequential.py: 1%
      false verdicts and 95% power for a 5% change over all its looks, so the schedule may stop as soon as it is
      settled). Drift cancels within a step pair; the process-to-process variation is the spread between rounds,
      so it is in the test. Adds "settled", "decided_at" (the round of the decision) and "equivalence".
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
        ratios = [_paired_log_ratio(b, c) for b, c in zip(base_rounds, cand_rounds)]
        paired = [d for d in ratios if d is not None]
        if len(paired) >= MIN_ROUNDS:
            return _sequential(paired, min_effect)
    if base_rounds and cand_rounds:
        apart = _rounds_verdict(base_rounds, cand_rounds, alpha, min_effect)
        if apart is not None:
            return apart
    return _samples_verdict(baseline, candidate, alpha, min_effect)


def _rounds_verdict(base_rounds: list[list[float]], cand_rounds: list[list[float]], alpha: float,
                    min_effect: float) -> dict | None:
    """The "rounds" verdict (Welch's t-test on the rounds' log medians), or None with fewer than MIN_ROUNDS rounds."""
    b_logs = [math.log(float(np.median(r))) for r in base_rounds if r]
    c_logs = [math.log(float(np.median(r))) for r in cand_rounds if r]
    if len(b_logs) < MIN_ROUNDS or len(c_logs) < MIN_ROUNDS:
        return None
    diff, se, df, p = welch_t(b_logs, c_logs)
    return _decide(diff, se, df, p, METHOD_ROUNDS, min(len(b_logs), len(c_logs)),
                   "measured at different times: drift between them is not in the test; replay the "
                   "versions together for a paired verdict", alpha, min_effect)


def _samples_verdict(baseline: dict, candidate: dict, alpha: float, min_effect: float) -> dict:
    """The "samples" verdict (Mann-Whitney U on the raw samples), "unknown" with fewer than 3 samples a side."""
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


def paired_log_ratios(baseline: dict, candidate: dict) -> list[float] | None:
    """Per round both ran together, the median log ratio of back-to-back steps; None unless the two timings were
    measured together (same `group`) in steps and rounds."""
    base_rounds, cand_rounds = step_medians(baseline), step_medians(candidate)
    same_group = baseline.get("group") is not None and baseline.get("group") == candidate.get("group")
    if not (same_group and base_rounds and cand_rounds):
        return None
    paired = [_paired_log_ratio(b, c) for b, c in zip(base_rounds, cand_rounds)]
    return [d for d in paired if d is not None]


def _sequential(paired: list[float], min_effect: float) -> dict:
    """The paired verdict: the group-sequential test (analysis/sequential.py) decides; the ratio and its 95%
    interval use every round."""
    first = sequential.first_decision(paired, min_effect=min_effect)
    mean, se, df, _ = one_sample_t(paired)
    out = _decide(mean, se, df, sequential.p_value(paired), METHOD_PAIRED, len(paired), None, 1.0, 0.0)
    out["verdict"] = first.decision or "same"
    out["settled"] = first.decision is not None
    out["decided_at"] = first.rounds if first.decision is not None else None
    interval = sequential.equivalence_interval(paired)
    out["equivalence"] = list(interval) if interval else None
    if not out["settled"]:
        lo, hi = interval or (math.nan, math.nan)
        out["caveat"] = (f"not settled in {len(paired)} rounds: no difference was shown, but a change between "
                         f"{lo:.3f}x and {hi:.3f}x is not ruled out (more rounds, --pin or a quieter machine narrow "
                         f"it)")
        out["no_slowdown_at"] = sequential.slowdown_ruled_out_at(paired)
    return out


def slowdown_ruled_out(verdict: dict | None) -> bool:
    """A paired verdict, settled or not, that rules out a slowdown of sequential.DETECT_EFFECT: settled faster or
    the same, or unsettled with a look whose interval's upper edge lay below it (what a measurement that only a
    slowdown answers stops at: run/budget.py's `slowdown_only`)."""
    if not verdict:
        return False
    if verdict.get("settled"):
        return verdict.get("verdict") in ("faster", "same")
    return verdict.get("no_slowdown_at") is not None


def leaning(verdict: dict | None) -> str | None:
    """For a paired verdict that did not settle: "slower" or "faster" when the interval it was judged on (the
    sequential test's equivalence interval, wider than the nominal 95% one) lies wholly on that side of 1, at least
    DEFAULT_MIN_EFFECT away; else None. The group-sequential test (1% false verdicts over all its looks: at 3 rounds
    |t| must reach ~32) may leave a huge change unsettled after a few rounds; it is then said as what it is, never
    as "no difference" (a 100x slowdown timed in 3 rounds is no verdict of "same"). The verdict itself, and its
    false-verdict rate, stay as they are: more rounds decide."""
    if not verdict or verdict.get("settled", True):
        return None
    interval = verdict.get("equivalence") or verdict.get("ci95")
    if not interval:
        return None
    lo, hi = interval
    if lo >= 1.0 + DEFAULT_MIN_EFFECT:
        return "slower"
    if hi <= 1.0 - DEFAULT_MIN_EFFECT:
        return "faster"
    return None


def shown_slower(verdict: dict | None) -> bool:
    """Settled slower, or slower in the whole of its nominal 95% interval (at least DEFAULT_MIN_EFFECT): what a
    claim that a slowdown is gone (a release like the last good one, a workaround) cannot stand beside."""
    if not verdict:
        return False
    if verdict.get("settled") and verdict.get("verdict") == "slower":
        return True
    interval = verdict.get("ci95") or (0.0, 0.0)
    return interval[0] >= 1.0 + DEFAULT_MIN_EFFECT


def leaning_text(verdict: dict) -> str:
    """`105.00x the time in 3 rounds, slower in the whole interval it was judged on (24.7x-447x: a change in it is
    not ruled out, no change is), but not settled ...` for a leaning verdict."""
    lo, hi = verdict.get("equivalence") or verdict["ci95"]
    return (f"{verdict['ratio']:.2f}x the time in {verdict.get('rounds')} rounds, {leaning(verdict)} in the whole "
            f"interval it was judged on ({lo:.3g}x-{hi:.3g}x: a change in it is not ruled out, no change is), but not "
            f"settled by the group-sequential test (1% false verdicts over all its looks); more rounds (--rounds, "
            f"--max-time) settle it")


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
