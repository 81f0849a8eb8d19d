"""Measurement conditions: what a run records about the machine it was timed on (run/conditions.py, the worker's
process), how the report warns about a busy machine and differing runs (analysis/busy.py), and pinning."""

from __future__ import annotations

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_runner import cli

import reprobundle
from reprobundle.analysis import busy as A
from reprobundle.analysis.comparison import build_comparison
from reprobundle.api import parse_pin
from reprobundle.errors import UsageError
from reprobundle.run import conditions as C


def snap(t, procs, load=(0.1, 0.1, 0.1), cpus=(0, 1), times=None, own=0.0):
    return C.Snapshot(wall=1000.0 + t, monotonic=t, loadavg=list(load), cpus=list(cpus), cpu_count=len(cpus),
                      memory={"total_bytes": 8 << 30, "available_bytes": 6 << 30}, pressure={"cpu": 1.0},
                      procs=procs, cpu_times=times, own_cpu_s=own)


def test_busy_processes_are_the_others_and_count_their_cpu_in_the_interval():
    me = os.getpid()
    start = 500.0  # every process here started before the first snapshot (at 1000 s)
    before = {me: ("python", 1, 0.0, start), 11: ("worker", me, 0.0, start), 20: ("make", 1, 0.0, start),
              21: ("idle", 1, 0.0, start)}
    after = {me: ("python", 1, 4.0, start), 11: ("worker", me, 9.0, start),
             12: ("worker2", 11, 9.0, start), 20: ("make", 1, 8.0, start), 21: ("idle", 1, 0.0, start),
             30: ("cc1", 20, 3.0, 1005.0)}  # started during the interval: all its CPU counts
    b, a = snap(0.0, before), snap(10.0, after, times=None)
    busy = C.busy_processes(b, a)
    assert [(p["name"], p["cpu"]) for p in busy] == [("make", 0.8), ("cc1", 0.3)]  # not this process nor its tree
    cond = C.conditions(b, a)
    assert cond["other_cpu"] == pytest.approx(1.1) and cond["cpus"] == [0, 1] and cond["duration_s"] == 10.0
    assert A.busy_reason(cond).startswith("the machine was busy: load 0.1 on 2 CPUs before the timing; other "
                                          "processes used 1.1 CPUs during it (make 0.8, cc1 0.3)")


def test_the_warning_before_a_timing_is_one_whole_sentence():
    # the conditions since the replay started, as replay warns of them before it times (run/replay.py)
    b = snap(0.0, {20: ("make", 1, 0.0, 500.0)}, load=(6.0, 5.0, 4.0))
    a = snap(10.0, {20: ("make", 1, 8.0, 500.0), 30: ("cc1", 20, 3.0, 1005.0)}, load=(6.0, 5.0, 4.0))
    assert A.busy_reason(C.conditions(b, a), now=True) == (
        "the machine is busy: load 6 on 2 CPUs; other processes used 1.1 CPUs since this replay started "
        "(make 0.8, cc1 0.3)")
    assert A.busy_reason({"load_before": [6.0, 5.0, 4.0], "cpus": [0, 1]}, now=True) == \
        "the machine is busy: load 6 on 2 CPUs"
    assert A.busy_reason({"load_before": [0.1], "cpus": [0, 1], "other_cpu": 0.1}, now=True) is None


def test_machine_wide_cpu_times_catch_short_lived_processes():
    b = snap(0.0, {}, times=(0.0, 0.0, 0.0), own=1.0)
    a = snap(10.0, {}, times=(15.0, 20.0, 2.0), own=6.0)  # 15 CPU s busy, 5 of them ours
    cond = C.conditions(b, a)
    assert cond["other_cpu"] == pytest.approx(1.0) and cond["steal"] == pytest.approx(0.1)
    assert "10% of CPU time stolen by the hypervisor" in A.summary(cond)


@pytest.mark.parametrize("cond,busy", [
    ({"load_before": [11.0, 9.0, 8.0], "cpus": [0, 1], "other_cpu": 1.4}, "the machine was busy: load 11 on 2 CPUs"),
    ({"load_before": [11.0, 9.0, 8.0], "cpus": [0, 1]}, "the machine was busy: load 11 on 2 CPUs"),  # only the load
    ({"load_before": [2.6, 5.0, 7.0], "cpus": [0, 1], "other_cpu": 0.01}, None),  # the load lags: others were idle
    ({"load_before": [0.4, 0.3, 0.2], "cpus": [0, 1], "other_cpu": 0.2}, None),
    ({"load_before": [0.4, 0.3, 0.2], "cpus": [0, 1, 2, 3], "other_cpu": 1.0}, "the machine was busy: load 0.4"),
    ({"load_before": [3.0], "cpus": [3]}, "the machine was busy: load 3 on 1 CPU"),
    ({}, None), (None, None), ({"load_before": "x", "cpus": "y", "other_cpu": "z"}, None),
])
def test_busy_reason_in_the_headline_terms(cond, busy):
    reason = A.busy_reason(cond)
    assert (reason is None) if busy is None else reason.startswith(busy)


def test_snapshot_reads_this_machine():
    s = C.snapshot()
    assert s.cpus == sorted(os.sched_getaffinity(0)) and s.cpu_count == os.cpu_count()
    assert os.getpid() in s.procs and len(s.loadavg) == 3 and s.memory["total_bytes"] > 0
    name, ppid, cpu_s, start = s.procs[os.getpid()]
    assert ppid == os.getppid() and cpu_s > 0 and start <= s.wall
    assert s.cpu_times is not None and 0 <= s.cpu_times[0] <= s.cpu_times[1]


def _run(label, cond=None, process=None, **env):
    environment = {"jax": "0.7.2", "cpu_model": "AMD EPYC 7B13", "cpu_flags": ["avx2", "fma"], **env}
    if cond is not None:
        environment["conditions"] = cond
    if process is not None:
        environment["process"] = process
    return {"requested": label, "status": "ok", "reason": "", "environment": environment, "artifacts": {},
            "per_op": [], "timing": {"warmup": 1, "samples_ns": [1000, 1010, 990], "compile_s": 0.1}}


QUIET = {"load_before": [0.2, 0.2, 0.2], "load_after": [1.1, 0.5, 0.3], "cpus": [0, 1], "cpu_count": 2,
         "other_cpu": 0.05, "busy_processes": [], "memory": {}, "pressure_after": {}, "thread_env": {},
         "schedule": {"adaptive": True, "rounds": 5, "steps_per_round": 13, "stopped": "settled", "max_rounds": 16}}


def test_report_warns_only_about_a_busy_machine_or_differing_runs():
    manifest = {"name": "f", "version": 1, "environment": {"jax": "0.7.2"}, "reference": {"timing": {}}}
    proc = {"cpus": [0, 1], "threads": 11, "thread_env": {}}
    quiet = build_comparison(manifest, [_run("0.7.2", QUIET, proc), _run("0.8.0", QUIET, proc)],
                             hlo_texts={}, outputs={})
    assert not [h for h in quiet["headlines"] if h.get("conditions")]
    assert any(n.startswith("measured under: load 0.2 -> 1.1 on CPUs 0-1 (2)") and "5 rounds (adaptive, settled)"
               in n for n in quiet["notes"])
    busy = dict(QUIET, load_before=[11.0, 9.0, 7.0], other_cpu=1.4,
                busy_processes=[{"pid": 7, "name": "pytest", "cpu": 1.4}])
    other = dict(proc, cpus=[1], threads=6, thread_env={"NPROC": "1"})
    runs = [_run("0.7.2", busy, proc), _run("0.8.0", busy, other, cpu_flags=["avx2", "fma", "avx512f"])]
    c = build_comparison(manifest, runs, hlo_texts={}, outputs={})
    warnings = [h["text"] for h in c["headlines"] if h.get("conditions")]
    assert warnings[0].startswith("warning: the machine was busy: load 11 on 2 CPUs before the timing; other "
                                  "processes used 1.4 CPUs during it (pytest 1.4)")
    assert any("CPUs in the affinity mask differ between runs: 0.7.2: 0-1 (2); 0.8.0: 1 (1)" in w for w in warnings)
    assert any("XLA/thread settings differ" in w and "NPROC=1" in w for w in warnings)
    assert any("worker threads differ between runs: 0.7.2: 11; 0.8.0: 6" in w for w in warnings)
    assert any("CPU ISA flags differ between runs" in w and "+avx512f" in w for w in warnings)
    json.dumps(c)
    from reprobundle.render import comparison as R

    assert "the machine was busy: load 11 on 2 CPUs" in R.to_text(c)
    assert "the machine was busy: load 11 on 2 CPUs" in R.to_markdown(c)


def test_parse_pin():
    mine = sorted(os.sched_getaffinity(0))
    assert parse_pin(None) is None
    auto = parse_pin("auto")
    assert auto.cpus == (mine[-1],) and auto.threads == 1
    assert parse_pin(f"{mine[0]}-{mine[-1]}").cpus == tuple(mine)
    assert parse_pin([mine[0]]).threads == 1
    for bad in ("x", "1-", str(max(mine) + 1000), ""):
        with pytest.raises(UsageError):
            parse_pin(bad)


@pytest.mark.slow
def test_a_replay_records_its_conditions_and_pins_its_workers(store_dir):
    """Deterministic: what is recorded, not what the machine measured."""
    f = jax.jit(lambda x: jnp.tanh(x @ x.T).sum(axis=0))
    reprobundle.pack(f, np.ones((64, 64), np.float32), name="tiny", store=str(store_dir), warmup=1, repeat=3,
                     dump=False, profile=False)
    cpu = sorted(os.sched_getaffinity(0))[-1]
    code, out, err = cli("replay", "tiny", "--jax", "installed", "--jax", "installed", "--rounds", "3", "--repeat",
                         "6", "--warmup", "1", "--no-profile", "--pin", str(cpu), "--json", store=store_dir)
    assert code == 0, err
    data = json.loads(out)
    from reprobundle.bundle.registry import Registry

    runs = Registry.open(store_dir).runs(Registry.open(store_dir).resolve("tiny").ref.bundle_id)
    assert len(runs) == 2
    for run in runs:
        cond, proc = run["environment"]["conditions"], run["environment"]["process"]
        assert len(cond["load_before"]) == 3 and len(cond["load_after"]) == 3
        assert cond["cpus"] == sorted(os.sched_getaffinity(0)) and cond["other_cpu"] >= 0
        assert cond["schedule"] == {"adaptive": False, "rounds": 3, "steps_per_round": 2, "stopped": "fixed rounds"}
        assert cond["pin"] == {"cpus": [cpu], "threads": 1}
        assert proc["cpus"] == [cpu] and isinstance(proc["threads"], int) and proc["threads"] > 1
        assert proc["thread_env"]["NPROC"] == "1" and proc["thread_env"]["PJRT_NPROC"] == "1"
        assert run["environment"]["cpu_model"] and run["environment"]["cpu_flags"]
    notes = data["comparison"]["notes"]
    assert any(n.startswith("measured under: load ") and f"pinned to CPUs {cpu} (1) with 1 thread(s)" in n
               for n in notes), notes


def test_the_load_alone_warns_only_where_this_process_did_not_just_measure(caplog, monkeypatch):
    """A replay that starts at once has only the 1-minute load average to go by, which counts this process's own
    workers for a minute after it measured (an investigation's previous replay): no warning then."""
    import logging

    from reprobundle.run import replay as R

    first, before = snap(100.0, {}, load=(6.0, 5.0, 4.0)), snap(100.1, {}, load=(6.0, 5.0, 4.0))
    for measured_at, warned in ((None, True), (80.0, False), (30.0, True)):  # never, 20 s, 70 s before
        monkeypatch.setattr(R, "_busy", {"warned": False, "measured_at": measured_at})
        caplog.clear()
        with caplog.at_level(logging.INFO, logger=R.log.name):
            R._warn_if_busy(first, before)
        assert ("the machine is busy: load 6 on 2 CPUs" in caplog.text) is warned, (measured_at, caplog.text)
