"""The profiler trace reduced to per-op wall time (worker/trace.py), on real traces of the attention example from
jax 0.7.2, 0.8.0 and 0.10.2 (tests/data/traces, see make_traces.py) and on constructed ones."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from reprobundle.worker import trace as T

DATA = Path(__file__).parent / "data" / "traces"


def reduce(version: str) -> tuple[dict, float]:
    meta = json.loads((DATA / f"attention-{version}.json").read_text())
    reduced = T.reduce_trace(str(DATA / f"attention-{version}.trace.json.gz"),
                             (DATA / f"attention-{version}.hlo").read_text(), meta["iterations"])
    return reduced, meta["traced_wall_ns"] / meta["iterations"]


@pytest.mark.parametrize("version", ["0.7.2", "0.8.0", "0.10.2"])
def test_per_op_times_account_for_the_traced_calls(version):
    reduced, wall = reduce(version)
    rows = reduced["rows"]
    # Each instant is shared by the ops in flight: the rows add up to the time some op was in flight, never more
    # than the traced calls took (the summed events did: 0.10.2 runs three projections at once on 2 cores).
    assert sum(r["time_ns"] for r in rows) == pytest.approx(reduced["attributed_ns"], rel=1e-9)
    assert 0.85 * wall <= reduced["attributed_ns"] <= wall
    if version == "0.10.2":
        assert reduced["event_ns"] > wall  # concurrent events: their sum is no measure of the step
        assert not reduced["async_ops"]


@pytest.mark.parametrize("version", ["0.7.2", "0.8.0"])
def test_asynchronous_dots_get_their_work_back(version):
    """On 0.7.2 and 0.8.0 a dot's event covers only its launch (~1 ms for 1 GFLOP on 2 cores); its work ends where
    the executor ran its continuations: the 'ThunkExecutor::Execute' scope that encloses its 'end:' marker."""
    reduced, wall = reduce(version)
    events = reduced["event_ns"]
    assert events < 0.75 * wall  # what the old reduction reported: the trace seemed to miss a third of the step
    rows = {r["name"]: r for r in reduced["rows"]}
    dots = [r for name, r in rows.items() if r["kind"] == "dot"]
    assert len(dots) == 6
    assert {"dot.4", "dot.5", "dot.6", "dot.7"} <= set(reduced["async_ops"])
    for r in dots:
        assert r["time_ns"] >= 5e6, r  # 1 GFLOP takes milliseconds here, whatever the launch event said
    assert sum(r["time_ns"] for r in dots) > 2 * sum(r["event_ns"] for r in dots if r["name"].startswith("dot."))


def _write(tmp_path, events) -> str:
    path = tmp_path / "trace.json.gz"
    with gzip.open(path, "wt") as fh:
        json.dump({"traceEvents": events}, fh)
    return str(path)


HLO = "\n".join([
    "HloModule jit_f, is_scheduled=true",
    "ENTRY %main (p: f32[64,64]) -> f32[64,64] {",
    "  %p = f32[64,64]{1,0} parameter(0)",
    "  %dot.1 = f32[64,64]{1,0} dot(%p, %p), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
    "  %fusion.2 = f32[64,64]{1,0} fusion(%dot.1), kind=kLoop, calls=%c",
    "  ROOT %dot.3 = f32[64,64]{1,0} dot(%fusion.2, %p), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
    "}",
])


def op(name, ts, dur, tid):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid,
            "args": {"hlo_op": name, "hlo_module": "jit_f"}}


def mark(name, ts, tid):
    return {"ph": "X", "name": "end: " + name, "ts": ts, "dur": 0.2, "pid": 1, "tid": tid}


def scope(ts, dur, tid):
    return {"ph": "X", "name": "ThunkExecutor::Execute", "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_constructed_async_chain(tmp_path):
    """dot.1 launches in 1 us and completes at 100 (its dependent starts there, inline in its continuation, whose
    end marker follows); dot.3 is the last op: its end marker is its completion; gaps belong to no op."""
    ev = [op("dot.1", 0, 1, 1), scope(100, 20.1, 2), op("fusion.2", 100, 20, 2), mark("fusion.2", 120, 2),
          mark("dot.1", 120.1, 2), op("dot.3", 121, 1, 2), mark("dot.3", 180, 3)]
    reduced = T.reduce_trace(_write(tmp_path, ev), HLO, 1)
    rows = {r["name"]: r for r in reduced["rows"]}
    assert rows["dot.1"]["time_ns"] == pytest.approx(100e3)
    assert rows["fusion.2"]["time_ns"] == pytest.approx(20e3)
    assert rows["dot.3"]["time_ns"] == pytest.approx(59e3)
    assert reduced["attributed_ns"] == pytest.approx(179e3)  # 120-121: nothing in flight
    assert reduced["async_ops"] == ["dot.1", "dot.3"]
    assert rows["dot.1"]["event_ns"] == pytest.approx(1e3) and rows["dot.1"]["kind"] == "dot"


def test_constructed_concurrent_and_unmarked(tmp_path):
    """Two ops in flight at once share the instant; without end markers (a profiler that emits none) an op lasts
    its event; a marker from an earlier call (before the launch) or after the op's next launch is not its own."""
    ev = [mark("dot.1", 0, 1), op("dot.1", 10, 40, 1), op("fusion.2", 30, 40, 2),
          op("dot.1", 100, 10, 1), mark("dot.1", 300, 1)]
    reduced = T.reduce_trace(_write(tmp_path, ev), HLO, 2)
    rows = {r["name"]: r for r in reduced["rows"]}
    # dot.1: 10-30 alone, 30-50 shared, 100-110 alone (its marker at 300 belongs to the second launch: 100-300)
    assert rows["dot.1"]["time_ns"] == pytest.approx((20 + 10 + 200) * 1e3 / 2)
    assert rows["fusion.2"]["time_ns"] == pytest.approx((10 + 20) * 1e3 / 2)
    assert rows["dot.1"]["count"] == 1 and rows["dot.1"]["total_count"] == 2


def _run(label: str, per_op: list[dict], median_ms: float) -> dict:
    samples = [int(median_ms * 1e6 * f) for f in (0.99, 1.0, 1.01)]
    return {"requested": label, "status": "ok", "reason": "", "environment": {"jax": label}, "artifacts": {},
            "per_op": per_op, "timing": {"warmup": 1, "samples_ns": samples, "compile_s": 0.1}}


def test_a_per_op_diff_states_its_coverage_and_names_no_op_below_the_threshold():
    from reprobundle.analysis.comparison import build_comparison
    from reprobundle.analysis.hlo_diff import COVERAGE_MIN, per_op_coverage

    manifest = {"name": "f", "version": 1, "environment": {}, "reference": {"timing": {}}}
    full = [{"name": "dot.1", "kind": "dot", "time_ns": 60e6, "count": 1},
            {"name": "fusion.2", "kind": "fusion(kLoop)", "time_ns": 35e6, "count": 1}]
    launches = [{"name": "dot.1", "kind": "dot", "time_ns": 1e6, "count": 1},
                {"name": "fusion.2", "kind": "fusion(kLoop)", "time_ns": 40e6, "count": 1}]
    assert per_op_coverage(full, 100e6) == pytest.approx(0.95) and per_op_coverage([], 1.0) is None
    explained = build_comparison(manifest, [_run("a", full, 100), _run("b", full[:1] + [dict(full[1], time_ns=80e6)],
                                                                      140)], hlo_texts={}, outputs={})
    d = explained["diffs"][0]
    assert d["coverage"]["base"] == pytest.approx(0.95) and d["moved_row"]["cand_name"] == "fusion.2"
    unexplained = build_comparison(manifest, [_run("a", launches, 100), _run("b", full, 140)], hlo_texts={},
                                   outputs={})
    d = unexplained["diffs"][0]
    assert d["coverage"]["base"] == pytest.approx(0.41) and 0.41 < COVERAGE_MIN and d["moved_how"] == "uncovered"
    assert d["moved_row"] is None
    assert "the per-op profile does not explain the step: its ops add up to 41% of the median on a" in d["moved"]
