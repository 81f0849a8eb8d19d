"""Bisect's search logic on run records whose samples come from a known step change."""

import numpy as np
import pytest

from reprobundle.errors import UsageError
from reprobundle.investigate.bisection import bisect

VERSIONS = ["0.4.30", "0.4.31", "0.4.33", "0.4.34", "0.5.0", "0.5.1", "0.6.0", "0.7.0", "0.7.2", "0.8.0"]


ROUNDS, STEPS = 5, 10


def _together(versions, medians_ms, statuses, seed):
    """Run records as an interleaved replay makes them: rounds of fresh processes (each with its own speed
    offset), steps that share the machine's drift, a group id shared by the runs timed together."""
    rng = np.random.default_rng(seed)
    drift = np.exp(0.3 * np.cumsum(rng.standard_normal(ROUNDS * STEPS)) / 10)  # slow machine-wide wander
    runs = []
    for v, median_ms, status in zip(versions, medians_ms, statuses):
        process = np.repeat(np.exp(0.015 * rng.standard_normal(ROUNDS)), STEPS)
        noise = np.exp(0.02 * rng.standard_normal(ROUNDS * STEPS))
        samples = (median_ms * 1e6 * drift * process * noise).astype(int).tolist()
        timing = {"samples_ns": samples, "steps": [1] * len(samples), "rounds": [STEPS] * ROUNDS,
                  "group": f"g{seed}"}
        runs.append({"requested": v, "status": status, "reason": "", "timing": timing})
    return runs


def _replayer(first_bad, *, broken=(), wrong_outputs=False):
    tested = []

    def replay_together(versions):
        tested.append(list(versions))
        medians, statuses = [], []
        for v in versions:
            slow = VERSIONS.index(v) >= VERSIONS.index(first_bad)
            medians.append(10.0 if wrong_outputs or not slow else 11.5)
            statuses.append("mismatch" if wrong_outputs and slow else "ok")
        runs = _together(versions, medians, statuses, seed=len(tested))
        return [{"requested": v, "status": "crashed", "reason": "SIGSEGV"} if v in broken else run
                for v, run in zip(versions, runs)]

    return replay_together, tested


@pytest.mark.parametrize("first_bad", VERSIONS[1:])
def test_finds_first_slow_release(first_bad):
    replay_one, tested = _replayer(first_bad)
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one)
    assert r.first_bad == first_bad
    assert r.criterion == "time"
    assert tested[0] == ["0.4.30", "0.8.0"]  # the endpoints, timed together
    assert all(call[0] == "0.4.30" and len(call) == 2 for call in tested[1:])  # each probe beside the good one
    assert len(tested) <= 1 + 4  # endpoints + log2(8 candidates) + 1
    assert "slower" in r.evidence[first_bad] and "paired rounds" in r.evidence[first_bad]


def test_output_regression_uses_outputs():
    replay_one, _ = _replayer("0.5.1", wrong_outputs=True)
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one)
    assert (r.criterion, r.first_bad, r.last_good) == ("outputs", "0.5.1", "0.5.0")


def test_untestable_versions_are_skipped():
    replay_one, _ = _replayer("0.6.0", broken={"0.5.1"})
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one)
    assert r.first_bad == "0.6.0"
    assert r.classes["0.5.1"] == "skip"
    assert r.last_good == "0.5.0"


def test_indistinguishable_endpoints():
    def same(versions):
        return _together(versions, [10.0] * len(versions), ["ok"] * len(versions), seed=7)

    with pytest.raises(UsageError, match="not distinguishable"):
        bisect(VERSIONS, "0.4.30", "0.8.0", same)
    with pytest.raises(UsageError, match="must be older"):
        bisect(VERSIONS, "0.8.0", "0.4.30", same)


def _checker(first_bad, *, broken=()):
    """An outputs-only probe (each version once, untimed): its calls, and the runs a replay makes of them."""
    checked = []

    def check_together(versions):
        checked.append(list(versions))
        return [{"requested": v, "status": "crashed", "reason": "SIGSEGV"} if v in broken else
                {"requested": v, "status": "mismatch" if first_bad and VERSIONS.index(v) >= VERSIONS.index(first_bad)
                 else "ok",
                 "reason": "", "timing": {}} for v in versions]

    return check_together, checked


@pytest.mark.parametrize("jobs", [1, 2, 3])
@pytest.mark.parametrize("first_bad", VERSIONS[1:])
def test_an_outputs_bisection_with_several_probes_a_step_finds_what_one_at_a_time_finds(first_bad, jobs):
    replay_one, timed = _replayer(first_bad)
    check_together, checked = _checker(first_bad)
    one = bisect(VERSIONS, "0.4.30", "0.8.0", _replayer(first_bad, wrong_outputs=True)[0])
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one, check_together=check_together, jobs=jobs)
    assert (r.criterion, r.first_bad, r.last_good) == ("outputs", one.first_bad, one.last_good) == \
        ("outputs", first_bad, VERSIONS[VERSIONS.index(first_bad) - 1])
    assert timed == []  # outputs told the endpoints apart: nothing was timed
    assert checked[0] == ["0.4.30", "0.8.0"] and all(1 <= len(c) <= jobs for c in checked[1:])
    # 8 candidates: binary search takes up to 4 steps, a 3-way split 2-3, a 4-way split 2
    assert len(checked) - 1 <= {1: 4, 2: 3, 3: 2}[jobs]


def test_several_probes_a_step_skip_what_does_not_run():
    check_together, _ = _checker("0.6.0", broken={"0.5.1", "0.7.0"})
    r = bisect(VERSIONS, "0.4.30", "0.8.0", _replayer("0.6.0")[0], check_together=check_together, jobs=2)
    assert (r.first_bad, r.last_good) == ("0.6.0", "0.5.0")
    assert r.classes["0.5.1"] == "skip"


def test_endpoints_whose_outputs_agree_are_timed_and_time_probes_stay_one_at_a_time():
    replay_one, timed = _replayer("0.5.1")
    check_together, checked = _checker(None)  # every version matches the reference
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one, check_together=check_together, jobs=3)
    assert (r.criterion, r.first_bad) == ("time", "0.5.1")
    assert checked == [["0.4.30", "0.8.0"]]  # the endpoints' outputs, once; then only timed probes
    assert timed[0] == ["0.4.30", "0.8.0"] and all(c[0] == "0.4.30" and len(c) == 2 for c in timed[1:])


def test_split_points_and_what_the_next_step_may_test():
    from reprobundle.investigate.bisection import next_picks, split_points

    assert split_points(VERSIONS, 1) == [VERSIONS[5]]  # the binary search's middle
    assert split_points(VERSIONS, 2) == [VERSIONS[3], VERSIONS[6]]
    assert split_points(["a", "b"], 5) == ["a", "b"]
    assert next_picks(VERSIONS, [VERSIONS[3], VERSIONS[6]], 2) == \
        split_points(VERSIONS[:3], 2) + split_points(VERSIONS[4:6], 2) + split_points(VERSIONS[7:], 2)


def test_a_workers_phases_become_where_its_time_went():
    from reprobundle.run.spent import Ledger, of_runs, worker_spent

    result = {"phase_s": {"validate": 0.1, "inputs": 0.2, "import_jax": 1.0, "route:deserialize": 0.5,
                          "hlo_text": 0.1, "execute": 0.05, "timing": 2.0, "calibrate": 0.3, "profile": 0.4},
              "compile_s": 0.4, "samples_ns": [500_000_000, 500_000_000]}
    spent = worker_spent(5.0, result)
    assert spent == {"start": 1.95, "load": 0.2, "compile": 0.4, "calibrate": 0.35, "timed": 1.0,
                     "profile": 0.4, "wait": 0.7}
    ledger = Ledger()
    ledger.record("outputs", ["0.4.30"], 5.0, of_runs([{"spent": spent}, {"spent": {"env": 2.0}}]), at_once=2)
    data = ledger.as_dict()
    assert data["total"]["env"] == 2.0 and data["probes"][0]["at_once"] == 2


def test_the_time_table_and_the_json_without_samples():
    from reprobundle.render.spent import spent_text, without_samples
    from reprobundle.run.spent import Ledger

    ledger = Ledger()
    ledger.record("outputs", ["0.4.30", "0.10.2"], 3.94, {"env": 0.5, "start": 3.4, "compile": 0.07}, at_once=2)
    ledger.record("timed", ["0.4.38"], 12.0, {"start": 1.3, "timed": 8.0, "wait": 1.0})
    text = spent_text(ledger.as_dict())
    header, rule, first, second, total, *footer = text.splitlines()
    assert header.split() == ["probe", "versions", "at", "once", "wall", "s", "env", "start", "compile", "timed",
                              "wait"]
    assert first.split()[:5] == ["outputs", "0.4.30,", "0.10.2", "2", "3.9"]
    assert total.split() == ["total", "15.9", "0.5", "4.7", "0.1", "8.0", "1.0"]
    assert all(len(line) <= 100 for line in text.splitlines()) and "2 probe(s)" in " ".join(footer)
    comparison = {"rows": [{"label": "0.4.30", "samples_ns": [1, 2, 3], "median_ns": 2.0, "n": 3}], "top": 1}
    assert without_samples(comparison) == {"rows": [{"label": "0.4.30", "median_ns": 2.0, "n": 3}], "top": 1}
    assert comparison["rows"][0]["samples_ns"] == [1, 2, 3]  # the caller's data is left as it was
