"""Bisect's search logic on run records whose samples come from a known step change."""

import numpy as np
import pytest

from reprobundle.bisection import bisect, skipped_between
from reprobundle.errors import UsageError

VERSIONS = ["0.4.30", "0.4.31", "0.4.33", "0.4.34", "0.5.0", "0.5.1", "0.6.0", "0.7.0", "0.7.2", "0.8.0"]


def _run(version, median_ms, status="ok", seed=0):
    rng = np.random.default_rng(abs(hash((version, seed))) % 2**32)
    samples = (median_ms * 1e6 * (1 + 0.02 * rng.standard_normal(60))).astype(int).tolist()
    return {"requested": version, "status": status, "reason": "", "timing": {"samples_ns": samples}}


def _replayer(first_bad, *, broken=(), wrong_outputs=False):
    tested = []

    def replay_one(v):
        tested.append(v)
        if v in broken:
            return {"requested": v, "status": "crashed", "reason": "SIGSEGV"}
        slow = VERSIONS.index(v) >= VERSIONS.index(first_bad)
        if wrong_outputs:
            return _run(v, 10.0, status="mismatch" if slow else "ok")
        return _run(v, 11.5 if slow else 10.0)

    return replay_one, tested


@pytest.mark.parametrize("first_bad", VERSIONS[1:])
def test_finds_first_slow_release(first_bad):
    replay_one, tested = _replayer(first_bad)
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one)
    assert r.first_bad == first_bad
    assert r.criterion == "time"
    assert len(tested) <= 2 + 4  # endpoints + log2(8 candidates) + 1


def test_output_regression_uses_outputs():
    replay_one, _ = _replayer("0.5.1", wrong_outputs=True)
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one)
    assert (r.criterion, r.first_bad, r.last_good) == ("outputs", "0.5.1", "0.5.0")


def test_untestable_versions_are_skipped():
    replay_one, _ = _replayer("0.6.0", broken={"0.5.1"})
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one)
    assert r.first_bad == "0.6.0"
    assert r.classes["0.5.1"] == "skip"
    assert (r.last_good, skipped_between(r)) == ("0.5.0", ["0.5.1"])


def test_indistinguishable_endpoints():
    with pytest.raises(UsageError, match="not distinguishable"):
        bisect(VERSIONS, "0.4.30", "0.8.0", lambda v: _run(v, 10.0))
    with pytest.raises(UsageError, match="must be older"):
        bisect(VERSIONS, "0.8.0", "0.4.30", lambda v: _run(v, 10.0))
