"""The timing statistics: the tests (scipy.stats underneath) against published reference values, and the verdict's
three methods on data with the noise structure of a shared machine (drift over time, a speed offset per process)."""

import math
from pathlib import Path

import numpy as np
import pytest
from manifests import assert_schema_valid

from reprobundle.analysis.stats import mann_whitney_u, one_sample_t, t_quantile, welch_t
from reprobundle.analysis.verdict import (
    METHOD_PAIRED,
    METHOD_ROUNDS,
    METHOD_SAMPLES,
    step_medians,
    timing_verdict,
)
from reprobundle.bundle import manifest as mf
from reprobundle.errors import CorruptBundleError

GOLDEN = Path(__file__).parent / "golden"
GOLDEN_RUN = GOLDEN / "v1-run-tanh-matmul.msgpack"


@pytest.mark.parametrize("t, df, p", [
    (12.7062, 1, 0.05), (4.302653, 2, 0.05), (2.776445, 4, 0.05), (4.604095, 4, 0.01), (8.610302, 4, 0.001),
    (2.042272, 30, 0.05), (1.959964, 1e7, 0.05), (1.0, 2, 0.42264973),
])
def test_t_distribution_matches_tables(t, df, p):
    assert t_quantile(p, df) == pytest.approx(t, rel=1e-5)


def test_welch_degrees_of_freedom():
    diff, se, df, p = welch_t([1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0, 10.0])
    assert diff == pytest.approx(3.5) and 3 < df < 7 and 0 < p < 1


def test_one_sample_t_matches_students_sleep_data():
    """Student (1908) / Cushny & Peebles: extra hours of sleep, drug 2 minus drug 1 per patient. R's
    `t.test(extra ~ group, data = sleep, paired = TRUE)` prints t = -4.0621, df = 9, p-value = 0.002833, 95 percent
    confidence interval -2.4598858 -0.7001142 (group 1 minus group 2; here the other way round)."""
    mean, se, df, p = one_sample_t([1.2, 2.4, 1.3, 1.3, 0.0, 1.0, 1.8, 0.8, 4.6, 1.4])
    assert mean == pytest.approx(1.58) and mean / se == pytest.approx(4.0621, abs=1e-4) and df == 9
    assert p == pytest.approx(0.002833, abs=1e-6)
    half = t_quantile(0.05, df) * se
    assert (mean - half, mean + half) == pytest.approx((0.7001142, 2.4598858), abs=1e-7)


def test_welch_matches_r():
    """R's `t.test(ts1, ts2)` (Welch by default) prints t = -1.8325, df = 17.9, p-value = 0.08356, 95 percent
    confidence interval -2.1469104 0.1469104 (ts1 minus ts2; welch_t reports ts2 minus ts1)."""
    ts1, ts2 = [11, 9, 10, 11, 10, 12, 9, 11, 12, 9], [11, 13, 10, 13, 12, 9, 11, 12, 12, 11]
    diff, se, df, p = welch_t(ts1, ts2)
    assert diff == pytest.approx(1.0) and diff / se == pytest.approx(1.8325, abs=1e-4)
    assert df == pytest.approx(17.9, abs=0.05) and p == pytest.approx(0.08356, abs=1e-5)
    half = t_quantile(0.05, df) * se
    assert (diff - half, diff + half) == pytest.approx((-0.1469104, 2.1469104), abs=1e-7)


def test_mann_whitney_matches_the_published_example():
    """Shier (2004), "Statistics: 2.3 The Mann-Whitney U Test" (also scipy's example): ages at diagnosis, males
    19 22 16 29 24 and females 20 11 17 12: U_M = 17, U_F = 3, exact p = 0.11. This is the normal approximation with
    the continuity correction: z = (17 - 10 - 0.5) / sqrt(5 * 4 * 10 / 12), p = 2 (1 - Phi(z)) = 0.111347."""
    u, p = mann_whitney_u([19, 22, 16, 29, 24], [20, 11, 17, 12])
    assert u == 17 and mann_whitney_u([20, 11, 17, 12], [19, 22, 16, 29, 24])[0] == 3
    assert p == pytest.approx(0.11134688653314041, rel=1e-9) and p == pytest.approx(0.11, abs=0.005)


def test_mann_whitney_ties_and_degenerate_samples():
    # ties: ranks 1.5 1.5 3 | 4.5 4.5 6; U of the first = 6 - 6 = 0; tie term (2 groups of 2: 6 + 6) / 30 = 0.4;
    # sigma = sqrt(9 / 12 * (7 - 0.4)); p = erfc(((4.5 - 0.5) / sigma) / sqrt 2)
    u, p = mann_whitney_u([1, 1, 2], [3, 4, 4])
    sigma = (9 / 12 * (7 - 0.4)) ** 0.5
    assert u == 0 and p == pytest.approx(math.erfc(4.0 / sigma / math.sqrt(2)), rel=1e-12)
    assert mann_whitney_u([5, 5, 5], [5, 5]) == (3.0, 1.0)  # all tied: nothing to test
    u, p = mann_whitney_u([], [1.0])
    assert math.isnan(u) and p == 1.0


def test_zero_spread_is_decided_without_dividing():
    assert one_sample_t([0.0, 0.0, 0.0])[3] == 1.0 and one_sample_t([0.5, 0.5, 0.5])[3] == 0.0
    assert welch_t([1.0, 1.0], [1.0, 1.0])[3] == 1.0 and welch_t([1.0, 1.0], [2.0, 2.0])[3] == 0.0
    assert one_sample_t([1.0])[3] == 1.0 and welch_t([1.0], [1.0, 2.0])[3] == 1.0


def _interleaved(ratios, *, rounds=5, steps=10, seed=0, group="g", drift=0.3, process_sd=0.015):
    """Runs measured together: shared drift per step, a speed offset per process (round), noise per call."""
    rng = np.random.default_rng(seed)
    wander = np.exp(drift * np.cumsum(rng.standard_normal(rounds * steps)) / 10)
    out = []
    for ratio in ratios:
        process = np.repeat(np.exp(process_sd * rng.standard_normal(rounds)), steps)
        noise = np.exp(0.02 * rng.standard_normal(rounds * steps))
        samples = (1e7 * ratio * wander * process * noise).astype(int).tolist()
        out.append({"samples_ns": samples, "warmup": 1, "compile_s": 0.1, "steps": [1] * len(samples),
                    "rounds": [steps] * rounds, "group": group})
    return out


def test_paired_verdict_sees_through_drift():
    # 16 rounds: the adaptive schedule's cap; the group-sequential verdict is the decision at its first settled look
    verdicts = [timing_verdict(*_interleaved([1.0, 1.0], seed=s, rounds=16)) for s in range(200)]
    assert all(v["method"] == METHOD_PAIRED for v in verdicts)
    assert sum(v["verdict"] != "same" for v in verdicts) <= 2  # alpha 1% and the 2% minimum effect
    slow = [timing_verdict(*_interleaved([1.0, 1.10], seed=s, rounds=16)) for s in range(200)]
    assert sum(v["verdict"] == "slower" for v in slow) >= 190
    hits = [v["ci95"][0] <= 1.10 <= v["ci95"][1] for v in slow]
    assert sum(hits) >= 180  # a 95% interval


def test_the_raw_sample_test_is_fooled_by_drift_and_says_so():
    """The same data with the pairing removed: Mann-Whitney on raw samples calls most identical pairs different,
    which is why replay interleaves; its verdict carries a caveat."""
    fooled = 0
    for s in range(50):
        # one process each, at different times: each has its own wander and its own process offset
        a, b = (_interleaved([1.0], seed=seed, rounds=1, steps=50, process_sd=0.05)[0] for seed in (s, 1000 + s))
        for t in (a, b):
            del t["steps"], t["rounds"], t["group"]
        v = timing_verdict(a, b)
        assert v["method"] == METHOD_SAMPLES and "not interleaved" in v["caveat"]
        fooled += v["verdict"] != "same"
    assert fooled >= 10


def test_rounds_measured_apart_use_welch_with_a_caveat():
    a, _ = _interleaved([1.0, 1.0], seed=1, group="one")
    _, b = _interleaved([1.0, 1.2], seed=2, group="two", drift=0.0)
    v = timing_verdict(a, b)
    assert v["method"] == METHOD_ROUNDS and "different times" in v["caveat"] and v["rounds"] == 5


def test_too_few_samples_is_unknown():
    assert timing_verdict({"samples_ns": [1, 2]}, {"samples_ns": [1, 2, 3]})["verdict"] == "unknown"


def test_step_medians_follow_steps_and_rounds():
    timing = {"samples_ns": [5, 1, 3, 10, 20, 7], "steps": [3, 1, 2], "rounds": [2, 1]}
    assert step_medians(timing) == [[3.0, 10.0], [13.5]]
    assert step_medians({"samples_ns": [1, 2], "steps": [3], "rounds": [1]}) is None


def _run_record(timing):
    return {"format": mf.RUN_FORMAT, "format_version": mf.RUN_VERSION, "run_id": "20261130T000000-deadbeef",
            "bundle_id": "sha256:" + "0" * 64, "bundle": "b@1", "created": "2026-11-30T00:00:00Z",
            "requested": "installed", "status": "ok", "reason": "", "environment": {}, "outputs": [], "check": None,
            "artifacts": {}, "timing": timing}


def test_run_v2_timing_is_checked_for_consistency():
    good = _interleaved([1.0], rounds=2, steps=3)[0]
    run = _run_record(good)
    assert_schema_valid(run, "run")
    assert mf.decode_run(mf.encode_run(run))["timing"] == good
    for broken, message in (({"steps": [1, 1]}, "calls for"), ({"rounds": [2, 2]}, "steps for"),
                            ({"steps": [0] * 6}, "must be >= 1"), ({"group": 3}, "expected str")):
        with pytest.raises(CorruptBundleError, match=message):
            mf.encode_run(_run_record({**good, **broken}))
    lone = dict(good)
    del lone["rounds"]
    with pytest.raises(CorruptBundleError, match="come together"):
        mf.encode_run(_run_record(lone))


def test_golden_v1_run_record_reads_and_compares():
    """A run record written by the first format version (never regenerated) upgrades and still gets a verdict."""
    run = mf.decode_run(GOLDEN_RUN.read_bytes())
    assert run["format_version"] == mf.RUN_VERSION and run["status"] == "ok"
    assert "steps" not in run["timing"] and len(run["timing"]["samples_ns"]) == 5
    v = timing_verdict(run["timing"], run["timing"])
    assert v["method"] == METHOD_SAMPLES and v["verdict"] == "same"


def test_there_is_a_golden_run_record_for_every_run_format_version():
    versions = {int(p.name.split("-")[0][1:]) for p in GOLDEN.glob("v*-run-*.msgpack")}
    assert versions == set(range(1, mf.RUN_VERSION + 1))


def test_golden_v3_run_record_keeps_the_workers_notes_and_its_replay():
    """Written by replaying v2-pytree-key-static.zip on installed and 0.4.30 (never regenerated): the 0.4.30 run."""
    raw = (GOLDEN / "v3-run-pytree-notes.msgpack").read_bytes()
    assert mf.decode_map(raw, "run")["format_version"] == 3
    run = mf.decode_run(raw)  # upgraded to the current version: a v3 run was a frozen replay without settings
    assert_schema_valid(run, "run")
    assert run["status"] == "ok" and "contender" not in run
    assert run["group"] == run["timing"]["group"]
    assert any("calling_convention_version 10" in n for n in run["notes"])
    assert any("absl" in n for n in run["notes"])


def test_run_v2_upgrades_to_v3_without_notes():
    v2 = mf.decode_map((GOLDEN / "v2-run-tanh-matmul.msgpack").read_bytes(), "run")
    assert v2["format_version"] == 2 and "notes" not in v2
    run = mf.decode_run(mf.encode(v2))
    assert run["format_version"] == mf.RUN_VERSION and "notes" not in run and "group" not in run


def test_golden_v2_run_record_reads_with_its_interleaving():
    run = mf.decode_run((GOLDEN / "v2-run-tanh-matmul.msgpack").read_bytes())
    assert_schema_valid(run, "run")
    timing = run["timing"]
    assert timing["rounds"] == [2, 2, 2] and len(timing["steps"]) == 6 and timing["group"]
    assert [len(r) for r in step_medians(timing)] == [2, 2, 2]



def test_golden_v4_run_record_names_its_contender():
    """Written by a frozen replay of chain10 on 0.7.2, 0.8.0 and installed (never regenerated): the 0.7.2 run."""
    run = mf.decode_run((GOLDEN / "v4-run-contender.msgpack").read_bytes())
    assert_schema_valid(run, "run")
    assert run["format_version"] == 4 and run["contender"]["mode"] == "frozen"
    assert run["contender"]["jax"] == run["requested"] and run["contender"]["settings"]["xla_flags"] == []


def test_the_timing_summary_gives_numpy_s_floats_without_numpy():
    """analysis/timing_summary.py computes numpy's percentile (linear) and mean in pure Python for the integer
    nanoseconds workers record (so `ls` and `show` start without numpy): the same floats, to the last bit."""
    import random

    from reprobundle.analysis.timing_summary import TimingSummary

    rng = random.Random(7)
    for n in [1, 2, 3, 4, 5, 8, 9, 16, 17, 127, 128, 129, 1000, 4099]:
        for scale in (10, 10**6, 10**12):
            samples = [rng.randint(0, scale) for _ in range(n)]
            a = np.asarray(samples, dtype=np.float64)
            q1, med, q3 = np.percentile(a, [25, 50, 75])
            assert TimingSummary.of(samples) == TimingSummary(n, float(med), float(q3 - q1), float(a.min()),
                                                              float(a.mean())), (n, scale)
    floats = [1.5, 2.25, 0.125]
    assert TimingSummary.of(floats).median_ns == 1.5 and TimingSummary.of([]).n == 0
