"""Verdict correctness on a difference that is real on any machine: two bundles that differ by work (a chain of 8
dependent matmuls and one of 16), timed together by the replay's own scheduler and adaptive budget, pinned to one
CPU with one thread (steadier; schedule.Pin). What is asserted holds on any machine: twice the work is slower, by
far more than the noise, so the adaptive budget settles it. No timing figure, nor the rounds it took, is asserted."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from chain import chain

import reprobundle
from reprobundle.analysis.verdict import timing_verdict
from reprobundle.api import open_registry
from reprobundle.run import budget as B
from reprobundle.run.execution import Timing, build_job
from reprobundle.run.schedule import Contender, Pin, measure_interleaved


@pytest.mark.slow
def test_twice_the_work_is_slower_and_settles_early(tmp_path):
    store = str(tmp_path / "store")
    for n in (8, 16):
        fn, args = chain(n)
        reprobundle.pack(fn, *args, name=f"chain{n}", store=store, warmup=1, repeat=2, dump=False, profile=False)
    registry = open_registry(store)
    timing = Timing(warmup=2, repeat=48)  # 6 steps a round

    def writer(name):
        m = registry.resolve(name).manifest
        return lambda folder, _round: build_job(registry, m["function"], m["inputs"]["leaves"], folder,
                                                timing=timing, dump=False, profile=False, lockstep=True)

    contenders = [Contender(name, sys.executable, writer(name)) for name in ("chain8", "chain16")]
    budget = B.plan([c.key for c in contenders], repeat=timing.repeat, rounds=None, max_rounds=10)
    budget.begin()
    cpu = sorted(os.sched_getaffinity(0))[-1]
    measured = measure_interleaved(contenders, Path(tmp_path / "work"), steps=budget.steps, rounds=budget.rounds,
                                   timeout_s=600, more=budget.more, pin=Pin((cpu,), 1))
    t = {k: {"samples_ns": m.samples_ns, "steps": m.steps, "rounds": m.rounds, "group": "g"}
         for k, m in measured.items()}
    assert all(m.failed_round is None for m in measured.values()), [m.outcome.reason for m in measured.values()]
    v = timing_verdict(t["chain8"], t["chain16"])
    assert v["verdict"] == "slower" and v["settled"] and v["ratio"] > 1.3, v
    assert budget.stopped == B.STOP_SETTLED  # how many rounds it took depends on the machine: not asserted
    # pinned: both workers ran on that CPU alone
    assert measured["chain8"].outcome.result["environment"]["process"]["cpus"] == [cpu]
