"""The group-sequential paired test (analysis/sequential.py) and the adaptive budget (run/budget.py), on constructed
samples: its error rates over all looks, its decisions, when the schedule stops and who retires."""

from __future__ import annotations

import math

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


@pytest.mark.parametrize("sigma", [0.01, 0.02, 0.03, 0.04])
def test_operating_characteristics_of_the_decision_code(sigma):
    """The code's decisions (first_decision, min effect included) on simulated rounds: no false verdicts beyond
    1%, a 5% slowdown found >= 95% of the time for round-to-round spreads up to 4% (within the LAST_LOOK cap), and
    how many rounds it takes."""
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
                                   "max_rounds": S.LAST_LOOK}


def test_the_adaptive_budget_stops_at_its_caps():
    noisy = [0.05, -0.06, 0.04, -0.05]
    budget = B.plan(["a", "b"], repeat=100, rounds=None, max_rounds=4)
    budget.begin()
    measured = {"a": _measurement([0.0] * 4, base=True), "b": _measurement(noisy)}
    assert budget.more(measured, 3) == ["a", "b"]
    assert budget.more(measured, 4) == [] and budget.stopped == B.STOP_ROUNDS
    now = [100.0]  # a fake clock (binary fractions: exact sums); the budget reads only this
    timed = B.plan(["a", "b"], repeat=100, rounds=None, max_time_s=2.0)
    timed.clock = lambda: now[0]
    timed.begin(now[0] - 0.25)  # counted from the replay's start, a quarter second before (its environments)
    now[0] += 0.5
    assert timed.more(measured, 1) == ["a", "b"]  # 0.75 s in; the next round, as long as the first, ends at 1.25 s
    now[0] += 0.25
    assert timed.more(measured, 2) == ["a", "b"]
    now[0] += 0.0625  # 1.0625 s in; the next round, as the median of those after the first, ends at 1.21875 s
    assert timed.more(measured, 3) == ["a", "b"]
    now[0] += 0.75  # 1.8125 s in: another round would end past max_time_s, a verdict settled or not
    assert timed.more(measured, 4) == [] and timed.stopped == B.STOP_TIME
    assert timed.describe(4)["round_ends_s"] == [0.75, 1.0, 1.062, 1.812]  # every round began within the bound
    slow = B.plan(["a", "b"], repeat=100, rounds=None, max_time_s=2.0)
    slow.clock = lambda: now[0]
    slow.begin()
    now[0] += 1.5  # a first round of 1.5 s: a second would end at 3 s, past the bound, so none starts
    assert slow.more(measured, 1) == [] and slow.stopped == B.STOP_TIME
    failed = B.plan(["a", "b"], repeat=100, rounds=None)
    failed.begin()
    assert failed.more({"a": _measurement([0.0] * 3, base=True), "b": _measurement(noisy, failed=1)}, 3) == []
    assert failed.stopped == B.STOP_ALONE
    fixed = B.plan(["a", "b"], repeat=100, rounds=5)
    assert not fixed.adaptive and fixed.rounds == 5 and fixed.steps_per_round == 20
    assert B.plan(["a"], repeat=50, rounds=None).rounds == 1


def test_a_question_only_a_slowdown_answers_stops_once_one_is_ruled_out():
    """slowdown_ruled_out_at is the upper edge of "same" alone: on simulated rounds of a true 5% slowdown it rules it
    out at most BETA of the time over all looks; a clear speedup or the same time, timed with noise that leaves
    them unsettled, is ruled out within a few rounds; the budget with `slowdown_only` stops there, and without it
    runs on."""
    rng = np.random.default_rng(11)
    missed = sum(S.slowdown_ruled_out_at(list(rng.normal(math.log(1.05), 0.03, S.LAST_LOOK))) is not None
                 for _ in range(1500))
    assert missed <= S.BETA * 1500 + 3 * math.sqrt(S.BETA * 1500)
    faster = [-0.07, -0.02, -0.10, -0.05]  # 0.94x, too noisy to settle "faster" in 4 rounds
    assert S.first_decision(faster).decision is None and S.slowdown_ruled_out_at(faster) == 4
    assert S.slowdown_ruled_out_at(faster[:3]) is None  # at 3 rounds the edge is still above 5%
    assert S.slowdown_ruled_out_at([0.3, 0.31, 0.29, 0.3]) is None  # slower: never ruled out
    v = timing_verdict(*_interleaved(faster))
    assert not v["settled"] and v["no_slowdown_at"] == 4
    from reprobundle.analysis.verdict import slowdown_ruled_out
    assert slowdown_ruled_out(v) and not slowdown_ruled_out(timing_verdict(*_interleaved([0.3, 0.31, 0.29])))
    assert slowdown_ruled_out(timing_verdict(*_interleaved([-0.3, -0.31, -0.29])))  # settled faster
    measured = {"a": _measurement([0.0] * 4, base=True), "b": _measurement(faster)}
    only = B.plan(["a", "b"], repeat=100, rounds=None, slowdown_only=True)
    only.begin()
    assert only.more(measured, 4) == [] and only.stopped == B.STOP_NO_SLOWDOWN and only.no_slowdown == {"b": 4}
    either = B.plan(["a", "b"], repeat=100, rounds=None)
    either.begin()
    assert either.more(measured, 4) == ["a", "b"]  # a speedup or a slowdown asked: not settled, on it goes
    slower = {"a": _measurement([0.0] * 3, base=True), "b": _measurement([0.3, 0.31, 0.29])}
    only_slower = B.plan(["a", "b"], repeat=100, rounds=None, slowdown_only=True)
    only_slower.begin()
    assert only_slower.more(slower, 3) == [] and only_slower.decided == {"b": "slower"}
    assert only_slower.stopped == B.STOP_SETTLED


# ------------------------------------------------------------------------------------------------ isolate's rule


def _piece(key, log_ratios, base_ns, first_steps=()):
    from reprobundle.analysis.piece_selection import Comparison

    return Comparison(key, log_ratios, base_ns, first_steps)


def test_a_piece_retires_when_it_cannot_hold_the_largest_move():
    from reprobundle.analysis.piece_selection import SCREEN_BAND, cannot_matter, change_interval_ns

    mover = _piece("mover", [math.log(2.0)], 30e6)  # 30 ms that doubled: at least 30 (exp(log 2 - band) - 1) ms
    flat_big = _piece("big", [0.01], 40e6)  # 40 ms, unchanged: at most 40 (exp(0.01 + band) - 1) ms
    tiny = _piece("tiny", [0.5], 0.5e6)  # moved 65%, but 0.3 ms of a ~70 ms function: under 2% of it
    lo, _ = change_interval_ns(mover)
    assert lo == pytest.approx(30e6 * math.expm1(math.log(2.0) - SCREEN_BAND))
    assert cannot_matter([mover, flat_big, tiny]) == {"big", "tiny"}
    # a second piece that may have moved as much stays, and so does the mover
    close = _piece("close", [math.log(1.8)], 30e6)
    assert cannot_matter([mover, close]) == set()
    # a noisy screening round widens the band: the same estimates rule nothing out
    noisy = [0.4, -0.4, 0.3, -0.3, 0.0]
    assert cannot_matter([_piece("mover", [math.log(2.0)], 30e6, noisy), _piece("big", [0.01], 40e6, noisy)]) == set()


def test_no_retirement_after_two_rounds_and_t_intervals_from_the_third():
    from reprobundle.analysis.piece_selection import cannot_matter, log_ratio_interval

    assert log_ratio_interval(_piece("a", [0.0, 0.01], 10e6)) is None
    assert cannot_matter([_piece("a", [0.69, 0.70], 30e6), _piece("b", [0.0, 0.01], 40e6)]) == set()
    steady = [0.0, 0.01, -0.01, 0.005]
    lo, hi = log_ratio_interval(_piece("b", steady, 40e6))
    half = stats.t.isf(0.005, 3) * np.std(steady, ddof=1) / 2
    assert (lo, hi) == pytest.approx((np.mean(steady) - half, np.mean(steady) + half))
    mover = _piece("a", [0.69, 0.70, 0.71, 0.69], 30e6)
    assert cannot_matter([mover, _piece("b", steady, 40e6)]) == {"b"}
    # nothing moved: each piece retires once its change is certainly under 2% of the function's time
    assert cannot_matter([_piece("a", steady, 30e6), _piece("b", steady, 40e6)]) == {"a", "b"}
    assert cannot_matter([_piece("a", [0.05, -0.06, 0.04, -0.05], 30e6), _piece("b", steady, 40e6)]) == {"b"}


def test_the_budget_compares_within_groups_and_rules_out_pieces():
    keys = ["p1.0", "p1.1", "p2.0", "p2.1", "p3.0", "p3.1"]
    groups = [keys[0:2], keys[2:4], keys[4:6]]
    budget = B.plan(keys, repeat=100, rounds=None, groups=groups, largest_move=True)
    budget.begin()

    def measured(rounds):
        out = {}
        for (base, cand), ratios, base_ns in zip(groups, ([math.log(2.0)] * rounds, [0.01, -0.01, 0.0][:rounds],
                                                          [0.03, -0.02, 0.01][:rounds]), (3e7, 4e7, 2e5)):
            b, c = _interleaved(ratios, base_ns=base_ns)
            for key, t in ((base, b), (cand, c)):
                out[key] = Measurement(samples_ns=t["samples_ns"], steps=t["steps"], rounds=t["rounds"])
        return out

    # the screening round: the tiny piece (0.2 ms) and the big unchanged one cannot hold the largest move
    assert budget.more(measured(1), 1) == ["p1.0", "p1.1"]
    assert budget.retired == {"p2.1": 1, "p3.1": 1}
    assert budget.more(measured(2), 2) == ["p1.0", "p1.1"]  # no look before round 3
    assert budget.more(measured(3), 3) == [] and budget.decided == {"p1.1": "slower"}
    assert budget.stopped == B.STOP_SELECTED
    assert budget.describe(3, "p2.1") == {**budget.describe(3), "rounds": 1, "stopped": B.STOP_RULED_OUT}
    assert budget.describe(3, "p1.1") == budget.describe(3)
    # without the rule the groups are plain comparisons, each against its own baseline
    plain = B.plan(keys, repeat=100, rounds=None, groups=groups)
    plain.begin()
    assert plain.more(measured(3), 3) == ["p3.0", "p3.1"]
    assert plain.decided == {"p1.1": "slower", "p2.1": "same"} and not plain.retired


def test_a_slowdown_is_shown_beyond_the_resolution_at_most_alpha_over_two_of_the_time_where_it_is_the_resolution():
    """sequential.beyond_at shifts the efficacy bound by log(1.05): on simulated rounds of a true 5% slowdown it
    declares one beyond 5% at most ALPHA / 2 of the time over all looks (t is pivotal: the calibration holds), and
    it finds a 10% one at a 2% spread within the cap."""
    rng = np.random.default_rng(12)
    false = sum(S.beyond_at(list(rng.normal(math.log(1.05), 0.03, S.LAST_LOOK))) is not None for _ in range(2000))
    assert false <= S.ALPHA / 2 * 2000 + 3 * math.sqrt(S.ALPHA / 2 * 2000)
    found = sum(S.beyond_at(list(rng.normal(math.log(1.10), 0.02, S.LAST_LOOK))) is not None for _ in range(300))
    assert found >= 0.95 * 300
    assert S.beyond_at([0.3, 0.31, 0.29]) == 3 and S.beyond_at([0.04] * 5) is None  # exact, under the edge
