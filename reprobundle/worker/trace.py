"""The profiler trace reduced to a per-op table of the optimized HLO's instructions."""
from __future__ import annotations

import os

from .device_trace import reduce_device_trace
from .hlo_kind import instruction_kind
from .records import Profile
from .state import WorkerState

_HLO_INSTR = None


def parse_hlo_instructions(hlo_text):
    """name -> {"kind", "op_name"} for every instruction in optimized HLO text (kind: see hlo_kind)."""
    import re

    global _HLO_INSTR
    if _HLO_INSTR is None:
        _HLO_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(?:.*?\s)??([a-z][a-z0-9\-]*)\(")
    out = {}
    for line in hlo_text.splitlines():
        m = _HLO_INSTR.match(line)
        if not m:
            continue
        name, opcode = m.group(1), m.group(2)
        km = re.search(r"\bkind=(k\w+)", line)
        tm = re.search(r'custom_call_target="([^"]+)"', line)
        # the line holds the backend_config: hlo_kind finds the fusion config in it
        kind = instruction_kind(opcode, km.group(1) if km else "", line, tm.group(1) if tm else "")
        om = re.search(r'op_name="([^"]*)"', line)
        out[name] = {"kind": kind, "op_name": om.group(1) if om else None}
    return out


# XLA:CPU's thunk executor (jaxlib 0.4.32+) traces each thunk's *launch*: the `hlo_op` event covers
# `thunk.Execute()`, which for an asynchronous thunk (an Eigen dot or a parallel loop fusion handed to the intra-op
# pool) returns as soon as the work is queued; the work then runs on pool threads with no event of its own. When the
# work completes, the executor runs the thunk's continuations on the thread that completed it, last registered
# first: its own (a "ThunkExecutor::Execute" scope that runs the dependents now ready, inline), then the tracer's,
# which emits "end: NAME". So on 0.7.2 and 0.8.0 a 1 GFLOP dot shows as a 0.2-1 ms launch, "end: dot.4" comes after
# its dependent transpose ran, and a third of a step is in no op event at all. The reduction recovers the missing
# time where the trace has it: an op is in flight from its launch until its completion, which is the start of the
# executor scope that encloses its end marker (the continuations started there), else the end marker itself, never
# before the launch returned. jaxlib 0.10+ runs these ops synchronously (YNNPACK fusions); there the end marker
# follows the op at once and nothing changes.
END_PREFIX = "end: "
EXECUTOR_SCOPE = "ThunkExecutor::Execute"
_MARKER_SLACK_US = 50.0  # an end marker is emitted just after its scope closes


def _completions(ops, events):
    """Per op event (same order), when its work completed (us): see the comment above."""
    markers, scopes = _markers_and_scopes(events)
    launches: dict = {}
    for i, e in enumerate(ops):
        launches.setdefault((e.get("pid"), str(e["args"]["hlo_op"])), []).append(i)
    done = [float(e.get("ts") or 0.0) + float(e.get("dur") or 0.0) for e in ops]
    for key, idx in launches.items():
        for i, ts, tid in _matched_markers(ops, idx, markers.get(key, [])):
            done[i] = max(done[i], _completed(ts, scopes.get((ops[i].get("pid"), tid), ()), done[i]))
    return done


def _matched_markers(ops, idx, found):
    """[(op index, marker ts, marker tid)] for the launches `idx` of one op and its end markers `found` (in time
    order): each launch, in order, takes the first unused end marker after it, before its next launch."""
    idx = sorted(idx, key=lambda i: float(ops[i].get("ts") or 0.0))
    matched = []
    at = 0
    for n, i in enumerate(idx):
        start = float(ops[i].get("ts") or 0.0)
        next_start = float(ops[idx[n + 1]].get("ts") or 0.0) if n + 1 < len(idx) else None
        while at < len(found) and found[at][0] < start:
            at += 1
        if at >= len(found) or (next_start is not None and found[at][0] > next_start):
            continue
        ts, tid = found[at]
        at += 1
        matched.append((i, ts, tid))
    return matched


def _markers_and_scopes(events):
    """The end markers by (pid, op name): [(ts, tid)] in time order; the executor scopes by (pid, tid): [(start,
    end)]."""
    markers: dict = {}
    scopes: dict = {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        name = str(e.get("name") or "")
        if name.startswith(END_PREFIX):
            markers.setdefault((e.get("pid"), name[len(END_PREFIX):]), []).append(
                (float(e.get("ts") or 0.0), e.get("tid")))
        elif name == EXECUTOR_SCOPE:
            ts = float(e.get("ts") or 0.0)
            scopes.setdefault((e.get("pid"), e.get("tid")), []).append((ts, ts + float(e.get("dur") or 0.0)))
    for v in markers.values():
        v.sort(key=lambda m: m[0])
    return markers, scopes


def _completed(marker_ts, scopes, launch_end):
    """When an op whose end marker is at `marker_ts` completed: the start of the innermost executor scope (the
    latest to start) that encloses the marker and began after the launch returned, else the marker itself."""
    enclosing = [s for s in scopes if launch_end <= s[0] <= marker_ts <= s[1] + _MARKER_SLACK_US]
    return max(enclosing)[0] if enclosing else marker_ts


def _attribute(ops, done):
    """Wall time per op name (us): each instant of the traced run is shared equally by the ops in flight then (the
    same op twice counts once); instants with no op in flight belong to none. Returns ({name: us}, union us)."""
    points = []
    for e, end in zip(ops, done):
        start = float(e.get("ts") or 0.0)
        if end > start:
            name = str(e["args"]["hlo_op"])
            points.append((start, 1, name))
            points.append((end, -1, name))
    points.sort(key=lambda p: (p[0], p[1]))
    active: dict = {}
    share: dict = {}
    union = 0.0
    last = None
    for t, delta, name in points:
        if last is not None and active and t > last:
            part = (t - last) / len(active)
            for n in active:
                share[n] = share.get(n, 0.0) + part
            union += t - last
        last = t
        active[name] = active.get(name, 0) + delta
        if active[name] <= 0:
            del active[name]
    return share, union


def reduce_trace(path, hlo_text, iters):
    """A chrome/perfetto trace json(.gz) of `iters` calls reduced to a per-HLO-op table. Returns {"rows", "note",
    "module", "attributed_ns" (wall time per call in some op), "event_ns" (summed op events per call),
    "async_ops" (ops whose work outlived their event)}; rows are {"name", "kind", "time_ns" (wall time per call
    attributed to the op, shared with the ops in flight at the same time), "event_ns" (its events' summed duration
    per call), "count", "total_count", "op_name"}."""
    events = _load_events(path)
    module = _module_name(hlo_text)
    out = {"rows": [], "note": None, "module": module, "attributed_ns": 0.0, "event_ns": 0.0, "async_ops": []}
    instrs = parse_hlo_instructions(hlo_text)
    device = reduce_device_trace(events, hlo_text, instrs, iters, module)  # a GPU/TPU: its kernels (device_trace.py)
    if device is not None:
        return device
    ops = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
           and isinstance(e.get("args"), dict) and e["args"].get("hlo_op")]
    if not ops:
        out["note"] = ("this jax/jaxlib's profiler emitted no per-HLO-op events (no 'hlo_op' trace args) on "
                       "this backend; per-op table left empty")
        return out
    ops, note = _module_ops(_device_ops(ops, events), module)
    done = _completions(ops, events)
    share, union = _attribute(ops, done)
    counts, event_us, late = _op_totals(ops, done)
    rows = []
    for name, cnt in counts.items():
        meta = instrs.get(name, {})
        rows.append({"name": name, "kind": meta.get("kind", "unknown"),
                     "time_ns": share.get(name, 0.0) * 1000.0 / iters,
                     "event_ns": event_us[name] * 1000.0 / iters,
                     "count": max(1, int(round(float(cnt) / iters))), "total_count": cnt,
                     "op_name": meta.get("op_name")})
    rows.sort(key=lambda r: (-r["time_ns"], r["name"]))
    extra = ("op times are each op's share of the wall time of %d traced calls: an op is in flight from its launch "
             "to its completion (asynchronous thunks: the end marker's executor scope) and shares each instant "
             "with the ops in flight beside it" % iters)
    if late:
        extra += "; %d asynchronous op(s) outlived their launch event" % len(late)
    out.update(rows=rows, note=extra if note is None else note + "; " + extra, async_ops=sorted(late),
               attributed_ns=union * 1000.0 / iters, event_ns=sum(event_us.values()) * 1000.0 / iters)
    return out


def _load_events(path):
    import gzip
    import json

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        tr = json.load(fh)
    return tr.get("traceEvents", []) if isinstance(tr, dict) else tr


def _module_name(hlo_text):
    for line in hlo_text.splitlines():
        if line.startswith("HloModule "):
            return line.split()[1].rstrip(",")
    return None


def _device_ops(ops, events):
    """On accelerators the same op can appear on host and device tracks: prefer device time."""
    pnames = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name":
            pnames[e.get("pid")] = str((e.get("args") or {}).get("name", ""))
    dev = [e for e in ops if pnames.get(e.get("pid"), "").startswith("/device:")]
    return dev or ops


def _module_ops(ops, module):
    """The op events of `module` (all of them, with a note, when none is tagged with it)."""
    mods = {e["args"].get("hlo_module") for e in ops}
    if module and module in mods:
        return [e for e in ops if e["args"].get("hlo_module") == module], None
    if module:
        return ops, "no op events tagged with module %r (found %s); used all op events" % (module, sorted(
            str(m) for m in mods))
    return ops, None


def _op_totals(ops, done):
    """Per op name: its event count, its events' summed duration (us); and the names of the ops whose work
    outlived their event."""
    counts: dict = {}
    event_us: dict = {}
    late = set()
    for e, end in zip(ops, done):
        name = str(e["args"]["hlo_op"])
        counts[name] = counts.get(name, 0) + 1
        dur = float(e.get("dur") or 0.0)
        event_us[name] = event_us.get(name, 0.0) + dur
        if end > float(e.get("ts") or 0.0) + dur + _MARKER_SLACK_US:
            late.add(name)
    return counts, event_us, late


def per_op_from_trace(path, hlo_text, iters):
    """Reduce a chrome/perfetto trace json(.gz) to a per-HLO-op table: (rows, note, module); see reduce_trace."""
    reduced = reduce_trace(path, hlo_text, iters)
    return reduced["rows"], reduced["note"], reduced["module"]


class Profiling(WorkerState):
    """The profiler trace reduced to a per-op table of the optimized HLO's instructions. Mixed into job.Worker."""

    def profile(self, compiled):
        import glob
        import time

        import jax

        iters = max(1, int(self.job.get("profile_iters", 3) or 3))
        pdir = os.path.join(self.job["artifacts_dir"], "profile")
        os.makedirs(pdir, exist_ok=True)
        args = self.dev_inputs
        jax.block_until_ready(compiled(*args))
        t0 = time.perf_counter_ns()
        try:
            ctx = jax.profiler.trace(pdir, create_perfetto_trace=True)
        except TypeError:
            ctx = jax.profiler.trace(pdir)
        with ctx:
            for _ in range(iters):
                jax.block_until_ready(compiled(*args))
        wall = time.perf_counter_ns() - t0
        arts = self.result["artifacts"]
        arts["profile_dir"] = pdir
        traces = sorted(glob.glob(os.path.join(pdir, "**", "perfetto_trace.json.gz"), recursive=True),
                        key=os.path.getmtime)
        info: Profile = {"iterations": iters, "traced_wall_ns": wall, "source": None, "module": None, "note": None}
        self.result["profile"] = info
        if not traces:
            others = sorted(glob.glob(os.path.join(pdir, "**", "*.trace.json.gz"), recursive=True),
                            key=os.path.getmtime)
            if others:
                arts["profile_trace"] = others[-1]
                traces = others
            else:
                info["note"] = "the profiler wrote no trace file; per-op table empty"
                return
        else:
            arts["profile_trace"] = traces[-1]
        reduced = reduce_trace(traces[-1], getattr(self, "hlo_after", None) or "", iters)
        self.result["per_op"] = reduced["rows"]
        info["source"] = "%s (%s)" % (reduced.get("source") or "trace events with args.hlo_op",
                                      os.path.basename(traces[-1]))
        info["module"] = reduced["module"]
        info["note"] = reduced["note"]
        info["attributed_ns"] = reduced["attributed_ns"]
        info["event_ns"] = reduced["event_ns"]
        info["async_ops"] = reduced["async_ops"]
