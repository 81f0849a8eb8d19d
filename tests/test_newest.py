"""Still slower on the newest release? (investigate/report/newest.py) judged on built runs: by the test between the two ends
of the change the answer's confirmation measured, where its runs are there; else by the paired verdict."""

import math

from timed_runs import timed_run as _run

from reprobundle.investigate.report.newest import change_ends, confirmation_runs, newest_verdict


def _answer(confirmed_by: list[str] | None) -> dict:
    confirmation = {"confirmed": True, "ratio": 3.8, "run_ids": confirmed_by} if confirmed_by else None
    return {"answer": {"criterion": "time", "last_good": "0.4.31", "first_bad": "0.4.33", "mode": "frozen",
                       "confirmation": confirmation}}


CONFIRMATION = [_run("0.4.31", "c", [1.0] * 3, "c-good", 1), _run("0.4.33", "c", [3.8] * 3, "c-bad", 2)]


def test_the_confirmations_runs_are_found_by_id_the_last_good_first():
    found = confirmation_runs(_answer(["c-bad", "c-good"])["answer"], [*reversed(CONFIRMATION)])
    assert [r["run_id"] for r in found] == ["c-good", "c-bad"]
    assert confirmation_runs(_answer(["c-bad", "gone"])["answer"], CONFIRMATION) == []
    ends = change_ends(found)
    assert ends is not None and math.isclose(ends.ratio, 3.8, rel_tol=0.02)


def test_a_newest_release_like_the_last_good_one_is_fixed_and_one_like_the_first_bad_one_still_slower():
    fixed = [_run("0.4.31", "n", [1.0] * 3, "n-good", 3), _run("0.12.1", "n", [0.97] * 3, "n-new", 4)]
    found = newest_verdict(None, _answer(["c-good", "c-bad"]), [*CONFIRMATION, *fixed])
    assert found is not None and (found["release"], found["still"]) == ("0.12.1", False)
    # decided in one round: the side alone, never a ratio of one round (#63: "2.13x ... in 1 round" for a 1.15x)
    assert found["text"] == ("gone on jax 0.12.1: like the last good release (decided in 1 round by the sequential "
                             "test against the confirmed 3.80x, 1% error each way)"), found
    still = [_run("0.4.31", "s", [1.0] * 3, "s-good", 5), _run("0.12.1", "s", [3.7] * 3, "s-new", 6)]
    found = newest_verdict(None, _answer(["c-good", "c-bad"]), [*CONFIRMATION, *still])
    assert found is not None and found["still"] is True
    assert found["text"].startswith("still slower on jax 0.12.1 (the newest): like the first bad release (decided "
                                    "in 1 round") and "x of jax" not in found["text"], found


def test_a_figure_is_said_only_from_three_rounds_or_more():
    """One verdict, one text (newest.timed_text, which the issue's ratios use too): a ratio with its interval from
    at least three paired rounds; from fewer, the rounds alone."""
    from reprobundle.investigate.report.newest import timed_text

    assert timed_text({"ratio": 2.13, "ci95": [1.5, 3.0], "rounds": 1}) == "timed in 1 round, too few for a figure"
    assert timed_text({"ratio": 1.15, "ci95": [1.08, 1.22], "rounds": 3}) == "1.15x [1.08-1.22]"


def test_without_the_confirmations_runs_the_paired_verdict_judges():
    """An answer from before its confirmation kept run ids (or one whose runs are gone): the group-sequential verdict
    beside the last good release, which three rounds 3% apart cannot settle as the same within 5%."""
    close = [_run("0.4.31", "n", [1.0] * 3, "n-good", 3), _run("0.12.1", "n", [1.03] * 3, "n-new", 4)]
    found = newest_verdict(None, _answer(None), close)
    assert found is not None and "like the" not in found["text"]
    assert found["still"] is not False, found  # never "fixed" from a verdict that did not settle


def test_a_newest_release_on_the_good_side_but_still_slower_is_not_fixed():
    """Half of a 3.8x slowdown is the last good release's side of the change; the newest release is not called fixed
    while its own paired rounds show it slower than the last good release."""
    half = [_run("0.4.31", "h", [1.0] * 3, "h-good", 7), _run("0.12.1", "h", [1.9] * 3, "h-new", 8)]
    found = newest_verdict(None, _answer(["c-good", "c-bad"]), [*CONFIRMATION, *half])
    assert found is not None and found["still"] is not False and "like the" not in found["text"], found
