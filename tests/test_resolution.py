"""#64: a slowdown is a change only at the resolution the tool measures, and a settled one is placed or said. Judged on
built runs (tests/timed_runs.py: each round's ratio given, 1% noise a step), through the searches' own functions:
analysis/resolution.judged, bisection.bisect and confirm, window_changes.place and every_change, run/budget.py."""
from __future__ import annotations

import pytest
from timed_runs import timed_run

from reprobundle.analysis.resolution import RESOLUTION, judged
from reprobundle.analysis.verdict import timing_verdict
from reprobundle.errors import UsageError
from reprobundle.run.contenders import control_of

RELEASES = ["0.4.30", "0.4.31", "0.4.33", "0.4.34", "0.5.0", "0.5.1", "0.6.0", "0.7.0", "0.7.2", "0.8.0"]
BUSY = {"load_before": [9.0, 8.0, 8.0], "cpus": [0, 1], "other_cpu": 1.4}  # analysis/busy.py: busy


def _probe(times: dict[str, float], rounds: int = 16, bias: float = 0.0, busy: bool = False, rigged=None,
           spread: float = 0.0):
    """A timed probe: the releases asked for timed together in `rounds` paired rounds (a shared drift per round),
    each at the time of the release it starts from in `times`; a control (run/contenders.control_of) at its
    release's. `bias`: every contender after the first loses that share more to other processes (a busy machine's
    bias by position in the round); `spread`: each process's own speed, a log-normal spread a round.
    `rigged(versions)`: times to use instead for that call, where it returns them. Every call measures anew; the
    calls, in order."""
    import itertools

    import numpy as np

    calls: list[list[str]] = []
    ids = itertools.count()

    def time_of(version: str) -> float:
        base = version.split(":")[0]
        return times[max((s for s in times if RELEASES.index(s) <= RELEASES.index(base)), key=RELEASES.index)]

    def probe(versions):
        calls.append(list(versions))
        rng = np.random.default_rng(len(calls))
        drift = np.exp(0.01 * rng.standard_normal(rounds))
        given = (rigged(list(versions)) if rigged else None) or [time_of(v) for v in versions]
        runs = []
        for k, (v, t) in enumerate(zip(versions, given)):
            own = np.exp(spread * rng.standard_normal(rounds))
            run = timed_run(v.split(":")[0], f"g{len(calls)}", list(t * (1 + bias * (k > 0)) * drift * own),
                            f"{id(calls)}-{next(ids)}",
                            seed=100 * len(calls) + k, label=v)
            if busy:
                run["environment"]["conditions"] = dict(BUSY)
            runs.append({**run, "reason": ""})
        return runs

    return probe, calls


def _verdict(good: float, bad: float, **noise) -> dict:
    probe, _ = _probe({"0.4.30": good, "0.4.31": bad}, **noise)
    runs = probe(["0.4.30", "0.4.31"])
    return timing_verdict(runs[0]["timing"], runs[1]["timing"])


def test_a_settled_slowdown_is_a_change_only_above_the_resolution_and_beyond_its_control():
    # randint's 1.04x: settled slower in its rounds (2% a round between processes), no change at this resolution
    verdict = _verdict(1.0, 1.04, rounds=32, spread=0.02)
    assert verdict["verdict"] == "slower" and verdict["settled"] and verdict["ci95"][0] > 1.0, verdict
    small = judged(verdict)
    assert not small["listed"] and small["said"] == "under the 5% this measures"
    big = judged(_verdict(1.0, 1.3))
    assert big["listed"] and big["said"] == "beyond the 5% this measures"
    # beside the good release timed against itself: a bias as large as the slowdown lists nothing
    verdict = {"verdict": "slower", "ratio": 1.08, "ci95": [1.07, 1.09], "settled": True}
    within = judged(verdict, {"ratio": 1.075, "ci95": [1.065, 1.085]}, "0.6.0", True)
    assert not within["listed"] and within["said"].startswith("within what jax 0.6.0 moves against itself in the same "
                                                              "rounds (1.07x [1.06-1.08])")
    assert judged(verdict, {"ratio": 0.93, "ci95": [0.92, 0.94]}, "0.6.0", True)["listed"] is False  # 1/0.92 > 1.07
    beside = judged(verdict, {"ratio": 1.0, "ci95": [0.99, 1.01]}, "0.6.0", True)
    assert beside["listed"] and "and beyond jax 0.6.0 against itself in the same rounds (1.00x [0.99-1.01])" in \
        beside["said"] and beside["control"] == {"ratio": 1.0, "ci95": [0.99, 1.01]}
    assert not judged(verdict, None, "0.6.0", True)["listed"]  # a control asked for that did not run: no finding


def test_a_small_slowdown_at_the_ends_is_one_line_never_searched():
    """randint's 1.04x, built: the endpoints measure a 1.03x slowdown (its interval above 1.02x: settled within 5%);
    it is said in one line and nothing between them is timed (before #64: a time bisection over every release, its
    confirmation, then explain)."""
    from reprobundle.investigate.search.bisection import bisect
    from reprobundle.investigate.search.slowdown_claim import UnderResolution

    probe, calls = _probe({"0.4.30": 1.0, "0.6.0": 1.03})
    with pytest.raises(UnderResolution) as e:
        bisect(RELEASES, "0.4.30", "0.8.0", probe, by="time")
    line = e.value.entry["line"]
    assert line.startswith("0.4.30..0.8.0 (the window's ends): 1.03x [1.0") and line.endswith(
        ", under the 5% this measures; not searched"), line
    assert e.value.entry["kind"] == "small" and e.value.message == line
    assert calls == [["0.4.30", "0.8.0"]]  # the endpoints alone: no probe, no confirmation, no control


def test_a_confirmed_small_slowdown_is_one_line_not_a_change():
    """A slowdown the probes took for 1.3x whose confirmation, timed anew, measures a 1.03x (its interval above 1.02x):
    not a first bad release, one line that says why (the pair's figure, under the 5%), never a change."""
    from reprobundle.investigate.search.bisection import bisect, standing
    from reprobundle.investigate.search.window_changes import confirmed_slowdowns, time_transitions

    probe, _ = _probe({"0.4.30": 1.0, "0.6.0": 1.3})
    small, asked = _probe({"0.4.30": 1.0, "0.6.0": 1.03})
    result = bisect(RELEASES, "0.4.30", "0.8.0", probe, by="time", confirm_with=small)
    assert (result.last_good, result.first_bad) == ("0.5.1", "0.6.0") and not standing(result)
    seen = result.confirmation
    assert seen["confirmed"] is False and seen["under"] and seen["resolution"] == "under the 5% this measures"
    assert seen["why"].startswith("not a change at this resolution: jax 0.6.0 timed again beside jax 0.5.1 is 1.0")
    assert seen["why"].endswith(": under the 5% this measures") and 1.02 < seen["ci95"][0] < seen["ci95"][1] < 1.05
    assert asked == [["0.5.1", "0.6.0"]]  # quiet, and beyond 1.2x at the ends: no control asked for
    # a slowdown a sub-window search found, confirmed at 1.03x: one `not_listed` line, no change
    found = time_transitions(RELEASES, "0.5.1", "0.6.0", probe)
    assert confirmed_slowdowns(result, found, small, None, 1) == []
    (entry,) = result.not_listed
    assert entry["kind"] == "small" and entry["line"].startswith("0.6.0 (last good 0.5.1): 1.03x [")
    assert entry["line"].endswith("under the 5% this measures; not searched")


def test_an_aa_control_keeps_a_busy_machines_slowdown_out_of_the_table():
    """On a busy machine the confirmation times the last good release beside itself in the same rounds; where the
    machine's bias by position makes the good release as slow against itself as the 'slowdown' (no change at all,
    8% lost by the later processes), nothing is listed; the same machine with a real 30% slowdown lists it."""
    from reprobundle.investigate.search.bisection import BisectResult, confirm, standing

    def pair(times, bias):
        probe, calls = _probe(times, bias=bias, busy=True)
        result = BisectResult("0.4.30", "0.8.0", "time", first_bad="0.6.0", last_good="0.5.1",
                              runs={v: r for v, r in zip(["0.4.30", "0.8.0"], probe(["0.4.30", "0.8.0"]))},
                              evidence={"0.6.0": "looked slower"})
        result.ends_verdict = timing_verdict(result.runs["0.4.30"]["timing"], result.runs["0.8.0"]["timing"])
        confirm(result, probe)
        return result, calls

    biased, calls = pair({"0.4.30": 1.0}, bias=0.08)
    assert calls[-1] == ["0.5.1", "0.6.0", control_of("0.5.1")]  # busy: the control in the same rounds
    seen = biased.confirmation
    assert seen["verdict"] == "slower" and seen["ci95"][0] > RESOLUTION  # 8% slower in its rounds, above 1.05
    assert not standing(biased) and "within what jax 0.5.1 moves against itself in the same rounds" in seen["why"]
    assert seen["control"]["ratio"] == pytest.approx(1.08, rel=0.02) and len(biased.control_runs) == 1
    real, _ = pair({"0.4.30": 1.0, "0.6.0": 1.3}, bias=0.08)
    assert standing(real) and "and beyond jax 0.5.1 against itself" in real.confirmation["why"]


def test_a_control_never_keeps_a_measurement_going():
    """run/budget.py: a measurement whose only version still running is an A/A control ends; a settled 1.03x under
    `slowdown_only` runs on until a 5% slowdown is ruled out (or shown beyond)."""
    import numpy as np

    from reprobundle.run import budget as B
    from reprobundle.run.schedule import Measurement

    def measured(log_ratios):
        samples = [int(1e6 * np.exp(d)) for d in log_ratios for _ in range(3)]
        return Measurement(samples_ns=samples, steps=[1] * len(samples), rounds=[3] * len(log_ratios))

    base = measured([0.0] * 6)
    control = measured([0.05, -0.06, 0.07, -0.05, 0.06, -0.04])  # noisy: not settled in 6 rounds
    slower = measured([0.3, 0.31, 0.29, 0.3, 0.31, 0.3])
    budget = B.plan(["a", "b", "c"], repeat=100, rounds=None, slowdown_only=True, controls=["c"])
    budget.begin()
    assert budget.more({"a": base, "b": slower, "c": control}, 6) == [] and budget.decided == {"b": "slower"}
    plain = B.plan(["a", "b", "c"], repeat=100, rounds=None, slowdown_only=True)
    plain.begin()
    assert plain.more({"a": base, "b": slower, "c": control}, 6) == ["a", "c"]  # not a control: it runs on
    small = B.plan(["a", "b"], repeat=100, rounds=None, slowdown_only=True)
    small.begin()
    rounds = [0.035, 0.045, 0.036, 0.044]  # 1.04x, settled slower at once, neither beyond 1.05 nor ruled out
    settled = measured(rounds)
    assert B.sequential.first_decision(rounds).decision == "slower"
    assert small.more({"a": measured([0.0] * 4), "b": settled}, 4) == ["a", "b"] and not small.decided


def _placed_window(times, rigged_pair, timed=None):
    """A time bisection by `times` whose confirmation of `rigged_pair` measures no change (a probe the noise fooled),
    and window_changes.place of it with the honest probes."""
    from reprobundle.investigate.search.bisection import bisect
    from reprobundle.investigate.search.window_changes import place

    probe, _ = _probe(times)

    def rigged(versions):
        return [1.0] * len(versions) if versions[:2] == list(rigged_pair) else None

    fooled, _ = _probe(times, rigged=rigged)
    result = bisect(RELEASES, "0.4.30", "0.8.0", probe, by="time", confirm_with=fooled)
    assert (result.last_good, result.first_bad) == rigged_pair and result.confirmation["confirmed"] is False
    return result, place(result, RELEASES, timed or probe, probe)


def test_a_settled_slowdown_whose_confirmation_fails_is_placed_or_said():
    """acos over 0.4.30..0.5.1, built: the ends settle a slowdown, the bisection's first bad release is not
    confirmed; the window is searched on by its ends timed together, and the slowdown is placed between neighbouring
    releases and confirmed (the pair that failed is not confirmed again), else said in one line with its interval;
    --max-time ending the search is said the same way."""
    from reprobundle.errors import TimeSpentError
    from reprobundle.investigate.search.bisection import standing

    # 1.4x at 0.4.33 (the pair the confirmation fails), 1.3x more at 0.5.1: placed at 0.5.1
    result, placed = _placed_window({"0.4.30": 1.0, "0.4.33": 1.4, "0.5.1": 1.82}, ("0.4.31", "0.4.33"))
    assert [(c.last_good, c.first_bad) for c in placed] == [("0.5.0", "0.5.1")] and standing(placed[0])
    assert placed[0].confirmation["confirmed"] and placed[0].confirmation["ratio"] == pytest.approx(1.3, rel=0.03)
    assert result.not_listed == []
    # one slowdown only, at the pair that failed: not placed, said with the ends' interval
    result, placed = _placed_window({"0.4.30": 1.0, "0.4.33": 1.4}, ("0.4.31", "0.4.33"))
    assert placed == []
    (line,) = [e["line"] for e in result.not_listed if e["kind"] == "unplaced"]
    assert line.startswith("1.40x [") and " between 0.4.30 and 0.8.0, not placed: the first bad release the " \
        "bisection found, 0.4.33 (last good 0.4.31), was not confirmed: " in line
    assert line.endswith("the window's halves timed together found no other pair of neighbouring releases slower")

    def spent(versions):
        raise TimeSpentError("--max-time 60 s spent")

    result, placed = _placed_window({"0.4.30": 1.0, "0.4.33": 1.4}, ("0.4.31", "0.4.33"), timed=spent)
    (entry,) = result.not_listed
    assert placed == [] and entry["unfinished"] and "--max-time ended the search of its window" in entry["line"]


def test_every_change_lists_a_placed_slowdown_and_says_what_it_does_not_list():
    """Through window_changes.every_change (bisect's and investigate's): the placed slowdown is a change of the
    answer with the failed confirmation set aside; a small slowdown at the ends and one not placed are the
    headline's `not_listed` lines, never changes; with nothing else, the error says the line."""
    from reprobundle.investigate.search.bisection import bisect
    from reprobundle.investigate.search.window_changes import every_change, place, split

    def run(times, rigged_pair=None):
        probe, _ = _probe(times)
        fooled, _ = _probe(times, rigged=lambda v: [1.0] * len(v) if rigged_pair and v[:2] == list(rigged_pair)
                           else None)
        return every_change([("frozen", "time")],
                            lambda mode, kind: bisect(RELEASES, "0.4.30", "0.8.0", probe, by="time",
                                                      confirm_with=fooled),
                            lambda r: split(r, RELEASES, probe, lambda a, b: "same", None, (probe, probe)), "time",
                            None, place_one=lambda r: place(r, RELEASES, probe, probe))

    (head,) = run({"0.4.30": 1.0, "0.4.33": 1.4, "0.5.1": 1.82}, ("0.4.31", "0.4.33"))
    assert (head.last_good, head.first_bad) == ("0.5.0", "0.5.1") and head.mode == "frozen"
    assert [a["first_bad"] for a in head.set_aside] == ["0.4.33"]  # the failed confirmation, said beside it
    with pytest.raises(UsageError, match=r"0\.4\.30\.\.0\.8\.0 \(the window's ends\): 1\.03x \[.*under the 5% this "
                                         r"measures; not searched"):
        run({"0.4.30": 1.0, "0.6.0": 1.03})
    with pytest.raises(UsageError, match=r"1\.40x \[.*\] between 0\.4\.30 and 0\.8\.0, not placed: "):
        run({"0.4.30": 1.0, "0.4.33": 1.4}, ("0.4.31", "0.4.33"))


def test_a_screen_whose_interval_cannot_lie_above_the_resolution_is_not_bisected():
    """The endpoints' bounded screen (analysis/time_screen.py): a slowdown beyond its noise whose upper bound lies
    under 1.05x is 'small', said in one line (mode_choice), never a time bisection."""
    from reprobundle.analysis.time_screen import screen
    from reprobundle.investigate.search.mode_choice import bisect_each

    assert screen([0.03, 0.031, 0.029, 0.03, 0.03])["seen"] == "small"
    assert screen([0.03, 0.06, 0.0, 0.05, 0.01])["seen"] == "slower"  # could lie above 1.05: bisected, confirmed
    assert screen([0.3, 0.31, 0.29])["seen"] == "slower"
    ran = []

    def run_one(mode, kind):  # the outputs' bisection falls here; time's is never run
        ran.append(kind)
        raise UsageError("not distinguishable by outputs")

    screened = {"seen": "small", "ratio": 1.03, "interval": [1.025, 1.035], "rounds": 5, "noise": 0.001,
                "not_ruled_out": None, "seconds": 9.0, "good": "0.6.0", "bad": "0.8.3",
                "said": "jax 0.8.3 is 1.03x [1.03-1.04] ... under the 5% this measures"}
    with pytest.raises(UsageError) as e:
        bisect_each([("retrace", "outputs"), ("frozen", "time")], run_one, None, None, screen_time=lambda m: screened)
    (aside,) = [s for s in e.value.set_aside if s["criterion"] == "time"]
    assert aside["not_listed"]["line"] == ("0.6.0..0.8.3 (the window's ends, screened): 1.03x [1.02-1.03] in 5 "
                                           "rounds, under the 5% this measures; not searched")
    assert ran == ["outputs"]  # the outputs' bisection ran; time's never did

