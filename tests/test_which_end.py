"""The sequential test between a change's two ends (analysis/which_end.py) on made-up paired rounds, and the budget
that stops a bisection's probe with it (run/budget.py)."""

import math
from dataclasses import replace

import numpy as np
import pytest

from reprobundle.analysis import sequential
from reprobundle.analysis.which_end import BAD, GOOD, MIN_SPREAD, Ends, side_text, which_end
from reprobundle.run import budget as B
from reprobundle.run.replay_options import ReplayOptions
from reprobundle.run.schedule import Measurement

BIG = math.log(3.8)  # the CPU thunk runtime's slowdown of examples/train_loop.py (jaxlib 0.4.33)


def test_a_huge_change_is_decided_in_one_round_either_way():
    ends = Ends.of([BIG - 0.01, BIG + 0.01, BIG])
    assert ends is not None and ends.ratio == pytest.approx(3.8, rel=1e-3)
    like_good, like_bad = which_end([0.01], ends), which_end([BIG - 0.02], ends)
    assert (like_good.side, like_good.rounds) == (GOOD, 1) and (like_bad.side, like_bad.rounds) == (BAD, 1)
    # a side decided in fewer rounds than make a figure (#63 item 7) is said alone, without a ratio
    assert side_text(like_good, ends, "0.4.30") == ("like the good end in 1 round (sequential test against the "
                                                   "endpoints' 3.80x, 1% error each way)")
    three = which_end([0.01, 0.02, 0.0, 0.01], ends)  # decided at once; three rounds make a figure
    assert side_text(replace(three, rounds=3), ends, "0.4.30").startswith("1.010x of jax 0.4.30's time in 3 rounds: "
                                                                           "like the good end (")
    # the decision is the first round's: later rounds never revise it
    assert which_end([0.01, BIG, BIG, BIG], ends).rounds == 1


def test_a_probe_between_the_ends_is_decided_by_the_half_it_lies_in_and_the_middle_stays_undecided():
    ends = Ends.of([BIG - 0.03, BIG + 0.03, BIG - 0.01, BIG + 0.01])
    assert ends is not None
    assert which_end([0.25 * BIG] * 3, ends).side == GOOD
    assert which_end([0.75 * BIG] * 3, ends).side == BAD
    middle = which_end([BIG / 2 + (0.01 if i % 2 else -0.01) for i in range(32)], ends)
    assert middle.side is None and middle.rounds == 32  # neither end: the bisection judges it as before


def test_a_small_noisy_change_takes_more_rounds_and_decides_right():
    rng = np.random.default_rng(7)
    change, spread = math.log(1.1), 0.03
    ends = Ends.of(list(change + spread * rng.standard_normal(6)))
    assert ends is not None
    good = list(spread * rng.standard_normal(32))
    bad = list(change + spread * rng.standard_normal(32))
    assert which_end(good[:1], ends).side is None and which_end(bad[:1], ends).side is None  # one round: too noisy
    found_good, found_bad = which_end(good, ends), which_end(bad, ends)
    assert (found_good.side, found_bad.side) == (GOOD, BAD)
    assert found_good.rounds > 1 and found_bad.rounds > 1


def _settled_ends(rng, change: float, spread: float) -> Ends | None:
    """The endpoints as a bisection measures them: paired rounds until the group-sequential test settles slower."""
    rounds = list(change + spread * rng.standard_normal(sequential.LAST_LOOK))
    first = sequential.first_decision(rounds)
    return Ends.of(rounds[:first.rounds]) if first.decision == "slower" else None


@pytest.mark.parametrize("ratio", [1.1, 1.5, 3.8])
def test_releases_like_either_end_are_never_decided_wrong_on_the_built_cases(ratio):
    rng = np.random.default_rng(int(ratio * 10))
    change = math.log(ratio)
    for spread in (0.02, 0.05, 0.1):
        for _ in range(25):
            ends = _settled_ends(rng, change, spread)
            if ends is None:
                continue
            for mean, truth in ((0.0, GOOD), (change, BAD)):
                side = which_end(list(mean + spread * rng.standard_normal(sequential.LAST_LOOK)), ends).side
                assert side in (truth, None), (ratio, spread, mean, ends)


def test_ends_that_cannot_judge_are_none_and_no_spread_is_floored():
    assert Ends.of([0.5]) is None  # one round: no spread
    assert Ends.of([0.05, -0.04, 0.06]) is None  # a change its own interval does not keep away from none
    exact = Ends.of([BIG, BIG, BIG])
    assert exact is not None and exact.spread == 0 and exact.target == exact.target_high == BIG
    assert which_end([0.0], exact).spread == MIN_SPREAD and which_end([0.0], exact).side == GOOD
    assert ReplayOptions.from_dict(ReplayOptions(ends=exact.as_data()).to_dict()).ends == exact.as_data()


def _paired(log_ratios, steps=4, base_ns=1e7):
    """The baseline's and the candidate's Measurement whose per-round paired log ratios are exactly `log_ratios`."""
    base, cand = [], []
    for d in log_ratios:
        base += [int(base_ns)] * steps
        cand += [int(base_ns * math.exp(d))] * steps
    shape = {"steps": [1] * (steps * len(log_ratios)), "rounds": [steps] * len(log_ratios), "failed_round": None}
    return Measurement(samples_ns=base, **shape), Measurement(samples_ns=cand, **shape)


def test_a_probes_budget_stops_at_the_first_look_its_side_is_known_and_the_settled_verdict_still_stops_it():
    """From the group-sequential test's first look (its paired verdict has the rounds window_changes.time_windows
    reads): a release like the good end, which that test takes many rounds to settle "same", stops there."""
    ends = Ends.of([BIG - 0.01, BIG + 0.01, BIG])
    budget = B.plan(["good", "probe"], repeat=100, rounds=None, ends=ends)
    budget.begin()
    noisy_same = [0.01, -0.04, 0.03]  # "same" within 5% is far from settled here
    for done in (1, 2):
        base, probe = _paired(noisy_same[:done])
        assert budget.more({"good": base, "probe": probe}, done) == ["good", "probe"]  # no look before round 3
    base, probe = _paired(noisy_same)
    assert sequential.first_decision(noisy_same).decision is None
    assert budget.more({"good": base, "probe": probe}, 3) == [] and budget.stopped == B.STOP_SIDED
    assert budget.sided == {"probe": GOOD} and budget.describe(3)["stopped"] == "which end decided"
    # the middle of the change: no side, so the group-sequential verdict decides when to stop, as before
    middle = B.plan(["good", "probe"], repeat=100, rounds=None, ends=ends)
    middle.begin()
    base, probe = _paired([BIG / 2 + 0.001 * (-1) ** i for i in range(3)])
    assert middle.more({"good": base, "probe": probe}, 3) == [] and middle.decided == {"probe": "slower"}
    assert middle.stopped == B.STOP_SETTLED and middle.sided == {}
    plain = B.plan(["good", "probe"], repeat=100, rounds=None)  # no ends: "same" not settled, another round
    plain.begin()
    assert plain.more({"good": base, "probe": _paired(noisy_same)[1]}, 3) == ["good", "probe"]
