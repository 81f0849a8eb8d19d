"""The profiler trace reduced to a per-op table of the optimized HLO's instructions."""
from __future__ import annotations

import os

_HLO_INSTR = None


def parse_hlo_instructions(hlo_text):
    """name -> {"kind", "op_name"} for every instruction in optimized HLO text."""
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
        kind = opcode
        if opcode == "fusion":
            km = re.search(r"\bkind=(k\w+)", line)
            kind = "fusion(%s" % (km.group(1) if km else "?")
            fk = re.search(r'"fusion_config"\s*:\s*\{[^}]*"kind"\s*:\s*"([^"]+)"', line)
            if fk:
                kind += ":" + fk.group(1)
            kind += ")"
        elif opcode == "custom-call":
            tm = re.search(r'custom_call_target="([^"]+)"', line)
            if tm:
                kind = "custom-call(%s)" % tm.group(1)
        om = re.search(r'op_name="([^"]*)"', line)
        out[name] = {"kind": kind, "op_name": om.group(1) if om else None}
    return out


def per_op_from_trace(path, hlo_text, iters):
    """Reduce a chrome/perfetto trace json(.gz) to a per-HLO-op table."""
    import gzip
    import json

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        tr = json.load(fh)
    events = tr.get("traceEvents", []) if isinstance(tr, dict) else tr
    module = None
    for line in hlo_text.splitlines():
        if line.startswith("HloModule "):
            module = line.split()[1].rstrip(",")
            break
    instrs = parse_hlo_instructions(hlo_text)
    ops = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
           and isinstance(e.get("args"), dict) and e["args"].get("hlo_op")]
    if not ops:
        return [], ("this jax/jaxlib's profiler emitted no per-HLO-op events (no 'hlo_op' trace args) on "
                    "this backend; per-op table left empty"), module
    # On accelerators the same op can appear on host and device tracks: prefer device time.
    pnames = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name":
            pnames[e.get("pid")] = str((e.get("args") or {}).get("name", ""))
    dev = [e for e in ops if pnames.get(e.get("pid"), "").startswith("/device:")]
    if dev:
        ops = dev
    mods = {e["args"].get("hlo_module") for e in ops}
    note = None
    if module and module in mods:
        ops = [e for e in ops if e["args"].get("hlo_module") == module]
    elif module:
        note = "no op events tagged with module %r (found %s); used all op events" % (module, sorted(
            str(m) for m in mods))
    # Sum durations per op; nested/overlapping events of the same op on the same thread count once.
    by_track = {}
    for e in ops:
        key = (str(e["args"]["hlo_op"]), e.get("pid"), e.get("tid"))
        by_track.setdefault(key, []).append((float(e.get("ts") or 0.0), float(e.get("dur") or 0.0)))
    agg = {}
    for (name, _pid, _tid), spans in by_track.items():
        spans.sort()
        total, end = 0.0, None
        for ts, dur in spans:
            te = ts + dur
            if end is None or ts >= end:
                total += dur
                end = te
            elif te > end:
                total += te - end
                end = te
        rec = agg.setdefault(name, [0.0, 0])
        rec[0] += total
        rec[1] += len(spans)
    rows = []
    for name, (dur_us, cnt) in agg.items():
        meta = instrs.get(name, {})
        rows.append({"name": name, "kind": meta.get("kind", "unknown"),
                     "time_ns": dur_us * 1000.0 / iters,
                     "count": max(1, int(round(float(cnt) / iters))), "total_count": cnt,
                     "op_name": meta.get("op_name")})
    rows.sort(key=lambda r: -r["time_ns"])
    extra = ("op times are thunk/kernel durations averaged over %d traced iterations; on CPU independent "
             "thunks may run concurrently, so their sum can exceed the wall time" % iters)
    note = extra if note is None else note + "; " + extra
    return rows, note, module


class Profiling(object):
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
        info = {"iterations": iters, "traced_wall_ns": wall, "source": None, "module": None, "note": None}
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
        per_op, note, module = per_op_from_trace(traces[-1], getattr(self, "hlo_after", None) or "", iters)
        self.result["per_op"] = per_op
        info["source"] = "trace events with args.hlo_op (%s)" % os.path.basename(traces[-1])
        info["module"] = module
        info["note"] = note
