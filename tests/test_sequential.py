"""The group-sequential paired test (analysis/sequential.py) and the adaptive budget (run/budget.py), on constructed
samples: its error rates over all looks, its decisions, when the schedule stops and who retires."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest
from scipy import stats

from reprobundle.analysis import sequential as S
from reprobundle.analysis.verdict import METHOD_PAIRED, timing_verdict
from reprobundle.run import budget as B
from reprobundle.run.schedule import Measurement

LOOKS = list(range(S.FIRST_LOOK, S.LAST_LOOK + 1))


def _t_paths(n_paths: int, seed: int) -> list[tuple[int, np.ndarray]]:
    d = np.random.default_rng(seed).standard_normal((n_paths, S.LAST_LOOK))
    cs, cs2 = np.cumsum(d, axis=1), np.cumsum(d * d, axis=1)
    out = []
    for n in LOOKS:
        m = cs[:, n - 1] / n
        s = np.sqrt((cs2[:, n - 1] - n * m * m) / (n - 1) / n)
        out.append((n, m / s))
    return out


def test_the_calibrated_levels_give_the_error_rates_over_all_looks():
    """Recomputed from 400k normal paths: P(|t| crosses the bound at some look | no change) = 1%; P(the
    equivalence interval's upper edge falls below a true 5% change at some look) = 5% (t is pivotal: any spread)."""
    paths = _t_paths(400_000, 7)
    false = np.zeros(paths[0][1].shape, bool)
    missed = np.zeros(paths[0][1].shape, bool)
    for n, t in paths:
        false |= np.abs(t) >= S.efficacy_bound(n)
        missed |= t <= -S.equivalence_bound(n)  # (mean - mu) / se below -bound: the interval excludes mu
    assert false.mean() == pytest.approx(S.ALPHA, abs=0.0008) and false.mean() <= S.ALPHA + 0.0003
    assert missed.mean() == pytest.approx(S.BETA, abs=0.002)
    # for comparison: testing every look at 1% would give several times the false verdicts
    naive = np.zeros(paths[0][1].shape, bool)
    for n, t in paths:
        naive |= np.abs(t) >= stats.t.isf(0.005, n - 1)
    assert naive.mean() > 3 * S.ALPHA


@pytest.mark.parametrize("sigma", [0.01, 0.02, 0.03])
def test_operating_characteristics_of_the_decision_code(sigma):
    """The code's decisions (first_decision, min effect included) on simulated rounds: no false verdicts beyond
    1%, a 5% slowdown found >= 95% of the time for round-to-round spreads up to 3%, and how many rounds it takes."""
    rng = np.random.default_rng(int(sigma * 1000))
    n = 1500

    def run(mu):
        found = [S.first_decision(list(rng.normal(mu, sigma, S.LAST_LOOK))) for _ in range(n)]
        return [f.decision for f in found], [f.rounds for f in found]

    same, rounds_same = run(0.0)
    assert sum(d in ("slower", "faster") for d in same) <= 0.01 * n + 3 * math.sqrt(0.01 * n)
    slow, rounds_slow = run(math.log(1.05))
    assert sum(d == "slower" for d in slow) >= 0.95 * n - 3 * math.sqrt(0.05 * n)
    if sigma == 0.02:  # what the adaptive budget buys at a typical spread (sequential.py's docstring)
        assert np.mean(rounds_same) < 5.5 and np.mean(rounds_slow) < 8
        _, rounds_big = run(math.log(1.10))
        assert np.mean(rounds_big) < 5.5


def test_decisions_on_constructed_rounds():
    assert S.first_decision([0.1, 0.1, 0.1]).decision == "slower"  # no spread: exact
    assert S.first_decision([-0.1] * 3).decision == "faster"
    assert S.first_decision([0.0] * 3).decision == "same"
    assert S.first_decision([0.01] * 3).decision == "same"  # exact but under the 2% minimum effect
    assert S.first_decision([0.1, 0.1]).decision is None  # no look before round 3
    noisy = [0.05, -0.06, 0.04]
    assert S.first_decision(noisy).decision is None and not S.settled(noisy)
    # the decision is the first look's that reached one; later rounds do not revise it
    path = [0.20, 0.21, 0.19, 0.20, -0.5, -0.5]
    first = S.first_decision(path)
    assert first.decision == "slower" and first.rounds == 3


def _interleaved(log_ratios, steps=4, base_ns=1e7):
    """Two timings measured together whose per-round paired log ratios are exactly `log_ratios`."""
    base, cand = [], []
    for d in log_ratios:
        base += [int(base_ns)] * steps
        cand += [int(base_ns * math.exp(d))] * steps
    common = {"steps": [1] * (steps * len(log_ratios)), "rounds": [steps] * len(log_ratios), "group": "g",
              "warmup": 1, "compile_s": 0.1}
    return {"samples_ns": base, **common}, {"samples_ns": cand, **common}


def test_timing_verdict_reports_the_sequential_decision():
    rng = np.random.default_rng(3)
    v = timing_verdict(*_interleaved(list(0.3 + 0.005 * rng.standard_normal(3))))
    assert v["method"] == METHOD_PAIRED and v["verdict"] == "slower" and v["settled"] and v["decided_at"] == 3
    v = timing_verdict(*_interleaved([0.05, -0.06, 0.04, -0.05]))
    assert v["verdict"] == "same" and not v["settled"] and v["decided_at"] is None
    assert "not settled in 4 rounds" in v["caveat"] and v["equivalence"][0] < 0.95 < 1.05 < v["equivalence"][1]
    v = timing_verdict(*_interleaved([0.001, -0.002, 0.0015, 0.0, -0.001]))
    assert v["verdict"] == "same" and v["settled"] and v["caveat"] is None


def _measurement(log_ratios, base=False, failed=None):
    base_t, cand_t = _interleaved(log_ratios)
    t = base_t if base else cand_t
    return Measurement(failed_round=failed, samples_ns=t["samples_ns"], steps=t["steps"], rounds=t["rounds"])


def test_the_adaptive_budget_retires_settled_versions_and_stops_when_all_are():
    budget = B.plan(["a", "b", "c"], repeat=100, rounds=None)
    assert budget.adaptive and budget.rounds == S.LAST_LOOK and budget.steps_per_round == 13
    budget.begin()
    clear, unclear = [0.3, 0.31, 0.29], [0.05, -0.06, 0.04]
    measured = {"a": _measurement([0.0] * 2, base=True), "b": _measurement(clear[:2]),
                "c": _measurement(unclear[:2])}
    assert budget.more(measured, 2) == ["a", "b", "c"]  # no look before round 3
    measured = {"a": _measurement([0.0] * 3, base=True), "b": _measurement(clear), "c": _measurement(unclear)}
    assert budget.more(measured, 3) == ["a", "c"] and budget.decided == {"b": "slower"}
    measured["a"] = _measurement([0.0] * 12, base=True)
    measured["c"] = _measurement(unclear + [0.0, 0.01, -0.01, 0.0, 0.005, -0.005, 0.0, 0.0, 0.001])
    assert budget.more(measured, 12) == [] and budget.stopped == B.STOP_SETTLED
    assert budget.describe(12) == {"adaptive": True, "rounds": 12, "steps_per_round": 13, "stopped": "settled",
                                   "max_rounds": 16}


def test_the_adaptive_budget_stops_at_its_caps():
    noisy = [0.05, -0.06, 0.04, -0.05]
    budget = B.plan(["a", "b"], repeat=100, rounds=None, max_rounds=4)
    budget.begin()
    measured = {"a": _measurement([0.0] * 4, base=True), "b": _measurement(noisy)}
    assert budget.more(measured, 3) == ["a", "b"]
    assert budget.more(measured, 4) == [] and budget.stopped == B.STOP_ROUNDS
    timed = B.plan(["a", "b"], repeat=100, rounds=None, max_time_s=0.05)
    timed.begin()
    time.sleep(0.03)
    assert timed.more(measured, 1) == ["a", "b"]  # the minimum rounds run whatever the time
    time.sleep(0.03)
    assert timed.more(measured, 3) == [] and timed.stopped == B.STOP_TIME
    failed = B.plan(["a", "b"], repeat=100, rounds=None)
    failed.begin()
    assert failed.more({"a": _measurement([0.0] * 3, base=True), "b": _measurement(noisy, failed=1)}, 3) == []
    assert failed.stopped == B.STOP_ALONE
    fixed = B.plan(["a", "b"], repeat=100, rounds=5)
    assert not fixed.adaptive and fixed.rounds == 5 and fixed.steps_per_round == 20
    assert B.plan(["a"], repeat=50, rounds=None).rounds == 1
