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
