"""The timing statistics: the t distribution against published table values, and the verdict's three methods on
data with the noise structure of a shared machine (drift over time, a speed offset per process)."""

from pathlib import Path

import numpy as np
import pytest
from manifests import assert_schema_valid

from reprobundle.analysis.stats import t_quantile, t_two_sided_p, welch_t
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
    (2.042272, 30, 0.05), (1.959964, 1e7, 0.05), (1.0, 2, 0.42264973), (0.0, 3, 1.0),
])
def test_t_distribution_matches_tables(t, df, p):
    assert t_two_sided_p(t, df) == pytest.approx(p, rel=1e-5, abs=1e-9)
    if p < 1:
        assert t_quantile(p, df) == pytest.approx(t, rel=1e-5)


def test_welch_degrees_of_freedom():
    diff, se, df, p = welch_t([1.0, 2.0, 3.0, 4.0], [2.0, 4.0, 6.0, 8.0, 10.0])
    assert diff == pytest.approx(3.5) and 3 < df < 7 and 0 < p < 1


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
    verdicts = [timing_verdict(*_interleaved([1.0, 1.0], seed=s)) for s in range(200)]
    assert all(v["method"] == METHOD_PAIRED for v in verdicts)
    assert sum(v["verdict"] != "same" for v in verdicts) <= 2  # alpha 1% and the 2% minimum effect
    slow = [timing_verdict(*_interleaved([1.0, 1.10], seed=s)) for s in range(200)]
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


def test_golden_v2_run_record_reads_with_its_interleaving():
    run = mf.decode_run((GOLDEN / "v2-run-tanh-matmul.msgpack").read_bytes())
    assert_schema_valid(run, "run")
    timing = run["timing"]
    assert timing["rounds"] == [2, 2, 2] and len(timing["steps"]) == 6 and timing["group"]
    assert [len(r) for r in step_medians(timing)] == [2, 2, 2]

