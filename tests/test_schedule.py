"""The interleaved schedule (run/schedule.py): contenders that are compared make the same number of calls in each
step (a step of more calls is faster per call, a bias no number of rounds removes), and the members of a group keep
their steps back to back. Two functions that differ by far more work than any machine's noise (a sine of 8 numbers
and a chain of 8 matmuls) make the counts differ; which counts they are depends on the machine and is not asserted."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reprobundle
from reprobundle.analysis.comparison import build_comparison
from reprobundle.api import open_registry
from reprobundle.run.contenders import parse_variant
from reprobundle.run.execution import Timing, build_job
from reprobundle.run.replay import replay, replay_together
from reprobundle.run.schedule import Contender, measure_interleaved, rotated


def _chain(x, w):
    for _ in range(8):
        x = jnp.tanh(x @ w)
    return x


@pytest.fixture(scope="module")
def fast_and_slow(tmp_path_factory):
    store = str(tmp_path_factory.mktemp("schedule") / "store")
    rng = np.random.default_rng(0)
    reprobundle.pack(jax.jit(jnp.sin), np.arange(8, dtype=np.float32), name="fast", store=store, warmup=1, repeat=2,
                     dump=False, profile=False)
    reprobundle.pack(jax.jit(_chain), rng.standard_normal((128, 256), dtype=np.float32),
                     rng.standard_normal((256, 256), dtype=np.float32) / 16, name="slow", store=store, warmup=1,
                     repeat=2, dump=False, profile=False)
    return open_registry(store)


def _fast_and_slow_contenders(registry, timing: Timing) -> list[Contender]:
    """The two bundles as contenders of one group on this interpreter, their jobs lockstep."""
    def writer(name):
        m = registry.resolve(name).manifest
        return lambda folder, _round: build_job(registry, m["function"], m["inputs"]["leaves"], folder,
                                                timing=timing, dump=False, profile=False, lockstep=True)

    return [Contender(name, sys.executable, writer(name)) for name in ("fast", "slow")]


def test_contenders_compared_make_the_same_calls_per_step(fast_and_slow, tmp_path):
    """One group: the fast function's steps make as few calls as the slow one needs, in every step."""
    contenders = _fast_and_slow_contenders(fast_and_slow, Timing(warmup=2, repeat=4))
    measured = measure_interleaved(contenders, tmp_path / "work", steps=4, rounds=1, timeout_s=600)
    assert all(m.failed_round is None for m in measured.values()), [m.outcome.reason for m in measured.values()]
    fast, slow = measured["fast"], measured["slow"]
    assert len(fast.steps) == len(slow.steps) == 4
    assert set(fast.steps) == set(slow.steps) == {fast.calls_per_step} == {slow.calls_per_step}


@pytest.mark.slow
def test_each_bundle_of_a_replay_together_keeps_its_own_calls_per_step(fast_and_slow):
    """Runs of one bundle (compared with each other) share a count, read back from the run records' timing.steps;
    the bundles timed alongside are not held to it: the fast function's steps make more calls than the slow one's."""
    registry = fast_and_slow
    bundles = [registry.resolve("fast"), registry.resolve("slow")]
    fast_runs, slow_runs = replay_together(registry, bundles, ["installed", "installed"],
                                           timing=Timing(warmup=2, repeat=4, rounds=1), dump=False, profile=False,
                                           store_runs=False)
    assert all(r["status"] == "ok" for r in fast_runs + slow_runs), [r["reason"] for r in fast_runs + slow_runs]
    counts = []
    for runs in (fast_runs, slow_runs):
        steps = [run["timing"]["steps"] for run in runs]
        assert steps[0] == steps[1] and len(set(steps[0])) == 1 and len(steps[0]) == 4
        counts.append(steps[0][0])
    assert counts[0] > counts[1]
    # all four were timed together: one group id
    assert len({run["timing"]["group"] for run in fast_runs + slow_runs}) == 1


def test_rounds_rotate_who_goes_first_and_keep_a_groups_members_side_by_side():
    def c(key, group):
        return Contender(key, sys.executable, lambda folder, _round: folder, group=group)

    one = [c("a", ""), c("b", ""), c("c", "")]
    assert [[x.key for x in rotated(one, k)] for k in range(4)] == [["a", "b", "c"], ["b", "c", "a"],
                                                                     ["c", "a", "b"], ["a", "b", "c"]]
    pairs = [c("p1.0", "p1"), c("p1.1", "p1"), c("p2.0", "p2"), c("p2.1", "p2"), c("p3.0", "p3"), c("p3.1", "p3")]
    for k in range(6):
        order = [x.key for x in rotated(pairs, k)]
        assert sorted(order) == sorted(x.key for x in pairs)
        for i in range(0, 6, 2):  # every group's two members next to each other
            assert order[i].split(".")[0] == order[i + 1].split(".")[0]
        assert order[0].split(".")[0] == f"p{k % 3 + 1}" and order[0].endswith(str(k % 2))


# ------------------------------------------------------------------------------------ alternated (one process)


def test_alternated_rounds_visit_one_contender_at_a_time_and_reuse_a_work_folder(fast_and_slow, tmp_path):
    """Alternated (a TPU's schedule): each round visits the contenders one after another, each visit a process that
    loads, times its steps and ends before the next starts; the order turns from round to round (A B, B A); the
    first round's calls a step are its own, the later rounds' the group's fewest; two measurements in one work folder
    (a replay's bisection probes) never collide."""
    contenders = _fast_and_slow_contenders(fast_and_slow, Timing(warmup=1, repeat=4))
    for _ in range(2):
        said: list[str] = []
        measured = measure_interleaved(contenders, tmp_path / "work", steps=6, rounds=3, timeout_s=600,
                                       progress=said.append, alternate=True)
        assert all(m.failed_round is None for m in measured.values()), [m.outcome.reason for m in measured.values()]
        assert [len(m.rounds) for m in measured.values()] == [3, 3]
        visits = [str(line).split("visiting on jax ")[1].split(" ")[0] for line in said if "visiting" in str(line)]
        assert visits == ["fast", "slow", "slow", "fast", "fast", "slow"]
        fast, slow = measured["fast"], measured["slow"]
        later = fast.steps[fast.rounds[0]:] + slow.steps[slow.rounds[0]:]
        assert set(later) == {fast.calls_per_step} == {slow.calls_per_step}
    # each contender's visits share a persistent compilation cache of its own: a later visit loads what the first
    # compiled (run/execution.compile_cache_env)
    caches = sorted((Path(os.environ["REPROBUNDLE_CACHE_DIR"]) / "compiled").iterdir())
    assert len(caches) == 2 and all(any(p.name.endswith("-cache") for p in c.iterdir()) for c in caches), caches


@pytest.mark.crossversion
def test_a_replay_alternated_on_a_cpu_times_releases_and_variants_and_judges_them(fast_and_slow, monkeypatch):
    """REPROBUNDLE_SCHEDULE=alternate forces a TPU's schedule on the CPU: two releases and a variant of each,
    visited one process at a time, every run ok, one group, a paired verdict for each, and the records say the
    versions were alternated."""
    monkeypatch.setenv("REPROBUNDLE_SCHEDULE", "alternate")
    registry = fast_and_slow
    bundle = registry.resolve("slow")
    specs = ["installed", "0.8.0", parse_variant("installed:XLA_FLAGS=--xla_cpu_enable_fast_math=false"),
             parse_variant("0.8.0:XLA_FLAGS=--xla_cpu_enable_fast_math=false")]
    runs = replay(registry, bundle, specs, timing=Timing(warmup=1, repeat=6, rounds=3), dump=False, profile=False,
                  store_runs=False)
    assert [r["status"] for r in runs] == ["ok"] * 4, [r["reason"] for r in runs]
    assert len({r["timing"]["group"] for r in runs}) == 1
    assert all(r["environment"]["conditions"]["order"] == "alternated" for r in runs)
    from reprobundle.analysis.busy import ALTERNATED, summary

    assert ALTERNATED in summary(runs[0]["environment"]["conditions"])  # what a report says of the measurement
    comparison = build_comparison(bundle.manifest, runs, hlo_texts={}, outputs={})
    judged = [row for row in comparison["rows"] if row["requested"] != "reference" and not row["is_baseline"]]
    assert len(judged) == 3 and all(row["method"] is not None for row in judged), judged
    assert any("alternation" in note for note in comparison["notes"])
