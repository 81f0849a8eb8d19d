"""Per-op tables on accelerators: the kernels of a profiler trace's device tracks attributed to HLO instructions.

On a GPU the profiler records each kernel (and memcpy/memset) on a "/device:GPU:N" track, with the HLO op that
launched it in `args.hlo_op`, when XLA launched it as its own thunk. Inside a CUDA graph (XLA's command buffers, on
by default) every kernel names the command buffer instead ("command_buffer_1"), so each kernel is attributed by the
first of:

1. `args.hlo_op` when it names an instruction of the optimized HLO ("annotation");
2. its kernel name: XLA names the kernels it generates after their fusion, "." and "-" made "_"
   (`loop_transpose_fusion_2` is `%loop_transpose_fusion.2`, `triton_softmax_2` is `%triton_softmax.2`) ("name");
3. the schedule: library kernels (cuBLAS, cuDNN, cutlass: `sm90_xmma_gemm_...`) carry no HLO name; the unnamed
   kernels between two attributed ones belong to the library calls (custom-calls) the entry computation schedules
   between those two instructions, in order ("schedule");

and what none of these places stays unattributed: the coverage says how much of the device time that is. TPU traces
carry an "XLA Ops" line whose events are named by HLO op; they are read by name. Only the standard library: this
runs in the worker.
"""
from __future__ import annotations

import re

# Threads of a device track that repeat what the kernels already show (TPU/GPU derived lines): never counted.
_DERIVED = ("XLA Modules", "Steps", "Framework Name Scope", "TensorFlow Name Scope", "Framework Ops",
            "TensorFlow Ops", "Source code", "XLA TraceMe", "Launch Stats", "SparseCore")
_NO_KERNEL = ("parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "add-dependency",
              "opt-barrier", "domain", "partition-id", "replica-id")
_ENTRY_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(?:.*?\s)??([a-z][a-z0-9\-]*)\(")
_HOW = ("annotation", "name", "schedule")


def _norm(name):
    return re.sub(r"[.\-]", "_", name)


def entry_schedule(hlo_text):
    """The instructions of the optimized module's ENTRY computation that launch work, in schedule order, as
    (name, opcode)."""
    out = []
    inside = False
    for line in hlo_text.splitlines():
        if not inside:
            inside = line.startswith("ENTRY ")
            continue
        if line.startswith("}"):
            break
        m = _ENTRY_INSTR.match(line)
        if m and m.group(2) not in _NO_KERNEL:
            out.append((m.group(1), m.group(2)))
    return out


def device_tracks(events):
    """{(pid, tid): [X events]} of the accelerator device tracks ("/device:GPU:0", "/device:TPU:0"); empty when
    the trace has none (a CPU run)."""
    pnames, tnames = _track_names(events)
    pids = set(p for p, n in pnames.items() if n.startswith("/device:") and not n.startswith("/device:CPU"))
    if not pids:
        return {}
    ops_lines = set(k for k, n in tnames.items() if k[0] in pids and n == "XLA Ops")
    tracks: dict = {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X" or e.get("pid") not in pids:
            continue
        key = (e.get("pid"), e.get("tid"))
        if _read_track(key, ops_lines, tnames):
            tracks.setdefault(key, []).append(e)
    return tracks


def _track_names(events):
    """({pid: process name}, {(pid, tid): thread name}) from the trace's metadata events."""
    pnames, tnames = {}, {}
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "M":
            continue
        name = str((e.get("args") or {}).get("name", ""))
        if e.get("name") == "process_name":
            pnames[e.get("pid")] = name
        elif e.get("name") == "thread_name":
            tnames[(e.get("pid"), e.get("tid"))] = name
    return pnames, tnames


def _read_track(key, ops_lines, tnames):
    """Whether a device track's events count: a device with an "XLA Ops" line is read from it alone, and derived
    lines (steps, modules) never."""
    if any(k[0] == key[0] for k in ops_lines) and key not in ops_lines:
        return False
    return not tnames.get(key, "").startswith(_DERIVED)


def _library_call(opcode, kind):
    """Whether an instruction runs a library's kernels (cuBLAS, cuDNN...), whose names say nothing of the HLO."""
    k = kind.lower()
    return opcode == "custom-call" or (opcode == "fusion" and ("cudnn" in k or "cublas" in k))


def _attribute_track(track, instrs, schedule, by_norm):
    """[(event, instruction name or None, how)] for one track's events, in time order."""
    position = dict((name, i) for i, (name, _op) in enumerate(schedule))
    everything = list(range(len(schedule)))
    library = [i for i, (name, op) in enumerate(schedule) if _library_call(op, instrs.get(name, {}).get("kind", ""))]
    out: list = []
    pending: list = []  # unnamed kernels since the last attributed one
    cursor = [-1]

    def between(candidates, lo, upto):
        if upto is None or upto > lo:
            return [i for i in candidates if lo < i and (upto is None or i < upto)]
        # the next call of the module began: the rest of this one, then the start of the next
        return [i for i in candidates if i > lo] + [i for i in candidates if i < upto]

    def flush(upto):
        if not pending:
            return
        slots = between(library, cursor[0], upto)
        if len(pending) > len(slots):  # more kernels than library calls: any instruction without a named kernel
            slots = between(everything, cursor[0], upto) or slots
        for n, e in enumerate(pending):
            if slots:
                out.append((e, schedule[slots[min(n, len(slots) - 1)]][0], "schedule"))
            else:
                out.append((e, None, None))
        del pending[:]

    for e in sorted(track, key=lambda x: float(x.get("ts") or 0.0)):
        args = e.get("args") if isinstance(e.get("args"), dict) else {}
        op = str(args.get("hlo_op") or "")
        name, how = None, None
        if op in instrs:
            name, how = op, "annotation"
        else:
            kernel = str(e.get("name") or "")
            if kernel in instrs:
                name, how = kernel, "name"
            else:
                hit = by_norm.get(_norm(kernel)) or by_norm.get(re.sub(r"_(impl|kernel)$", "", _norm(kernel)))
                if hit:
                    name, how = hit, "name"
        if name is None:
            pending.append(e)
            continue
        i = position.get(name)
        flush(i)
        if i is not None:
            cursor[0] = i
        out.append((e, name, how))
    flush(None)
    return out


def _keep_module(tracks, module):
    """Each track's events without those of other modules, where the track tags any event with `module`."""
    for key, track in list(tracks.items()):
        tagged = [e for e in track if isinstance(e.get("args"), dict) and e["args"].get("hlo_module")]
        if any(e["args"]["hlo_module"] == module for e in tagged):
            tracks[key] = [e for e in track if not (isinstance(e.get("args"), dict) and e["args"].get(
                "hlo_module")) or e["args"]["hlo_module"] == module]


def _kernel_totals(tracks, instrs, schedule):
    """The kernels' time by the HLO op they were attributed to ({name: [us, count]}), the total (us), the attributed
    time by how it was attributed, the time of kernels no op was found for by kernel name, and the kernel count."""
    by_norm = dict((_norm(n), n) for n in instrs)
    rows: dict = {}
    total_us, by_how = 0.0, dict((h, 0.0) for h in _HOW)
    unattributed: dict = {}
    kernels = 0
    for track in tracks.values():
        for e, name, how in _attribute_track(track, instrs, schedule, by_norm):
            dur = float(e.get("dur") or 0.0)
            total_us += dur
            kernels += 1
            if name is None:
                kernel = str(e.get("name") or "?")
                unattributed[kernel] = unattributed.get(kernel, 0.0) + dur
                continue
            by_how[how] += dur
            rec = rows.setdefault(name, [0.0, 0])
            rec[0] += dur
            rec[1] += 1
    return rows, total_us, by_how, unattributed, kernels


def reduce_device_trace(events, hlo_text, instrs, iters, module):
    """The per-op table of a trace's accelerator kernels, in reduce_trace's shape (plus "source" and "how"), or None
    when the trace has no accelerator device track with events (then the host's op events are what there is).
    `instrs`: parse_hlo_instructions(hlo_text)."""
    tracks = device_tracks(events)
    if not any(tracks.values()):
        return None
    if module:  # kernels of other modules (a transfer, a convert) are not this function's
        _keep_module(tracks, module)
    rows, total_us, by_how, unattributed, kernels = _kernel_totals(tracks, instrs, entry_schedule(hlo_text))
    table = []
    for name, (us, cnt) in rows.items():
        meta = instrs.get(name, {})
        table.append({"name": name, "kind": meta.get("kind", "unknown"), "time_ns": us * 1000.0 / iters,
                      "event_ns": us * 1000.0 / iters, "count": max(1, int(round(float(cnt) / iters))),
                      "total_count": cnt, "op_name": meta.get("op_name")})
    table.sort(key=lambda r: (-r["time_ns"], r["name"]))
    attributed = sum(by_how.values())
    pct = (lambda us: 100.0 * us / total_us if total_us else 0.0)
    note = ("op times are the summed durations of each op's device kernels over %d traced calls (%d kernels per "
            "call on %d device track(s)); %.1f%% of the device time is attributed to HLO ops (%s)"
            % (iters, int(round(float(kernels) / iters)), len(tracks), pct(attributed),
               ", ".join("%.1f%% by %s" % (pct(by_how[h]), h) for h in _HOW if by_how[h])))
    if unattributed:
        top = sorted(unattributed.items(), key=lambda kv: -kv[1])[:3]
        note += "; %.1f%% is in kernels no HLO op could be found for (%s)" % (
            pct(total_us - attributed), ", ".join(k[:60] for k, _ in top))
    return {"rows": table, "note": note, "module": module, "attributed_ns": attributed * 1000.0 / iters,
            "event_ns": total_us * 1000.0 / iters, "async_ops": [],
            "source": "device kernels attributed to HLO ops",
            "how": dict((h, by_how[h] * 1000.0 / iters) for h in _HOW)}
