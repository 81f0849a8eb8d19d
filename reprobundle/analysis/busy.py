"""Measurement conditions as data: whether the machine was busy, and what differs between runs that bears on timing.

run/conditions.py records them (load, affinity, other busy processes, memory) around a measurement, the worker its
own process (affinity, threads, thread settings); this module only reads what the run records hold. Pure Python.
"""

from __future__ import annotations

# The machine counts as busy when other processes used at least this share of the CPUs this process may use during
# the measurement. Only when that was not measured does the 1-minute load average decide (busy at one task per CPU):
# it lags by a minute and counts this process's own work, so it is context, not evidence.
BUSY_SHARE = 0.25


def busy_reason(cond: dict | None) -> str | None:
    """`the machine was busy: load 11 on 2 CPUs before the timing; other processes used 1.4 CPUs during it
    (python 0.84, pytest 0.4)`, or None when it was not (or nothing was recorded)."""
    if not isinstance(cond, dict):
        return None
    cpus = cond.get("cpus")
    n = len(cpus) if isinstance(cpus, list) and cpus else _number(cond.get("cpu_count")) or 1
    load = cond.get("load_before")
    load1 = _number(load[0]) if isinstance(load, list) and load else None
    measured = _number(cond.get("other_cpu"))
    other = measured or 0.0
    crowded = measured is not None and other >= BUSY_SHARE * n
    loaded = measured is None and load1 is not None and load1 >= n
    if not (loaded or crowded):
        return None
    parts = [f"load {load1:.3g} on {n} CPU{'s' if n != 1 else ''}" + (" before the timing" if crowded else "")
             if load1 is not None else f"{n} CPU{'s' if n != 1 else ''}"]
    if crowded:
        names = ", ".join(f"{p.get('name')} {float(p.get('cpu', 0)):.2g}" for p in cond.get("busy_processes") or []
                          if isinstance(p, dict))
        parts.append(f"other processes used {other:.2g} CPUs during it" + (f" ({names})" if names else ""))
    return "the machine was busy: " + "; ".join(parts)


def _number(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _section(record: dict, key: str) -> dict:
    """`record[key]` when it is a map, else an empty one: a record is read, not trusted."""
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def differences(envs: dict[str, dict]) -> list[str]:
    """What differs between the runs' environments that bears on timing (CPU model, ISA flags, CPUs in the affinity
    mask, thread settings, the worker's threads): one line each, naming the runs. `envs`: label -> environment."""
    def flags(env):
        f = env.get("cpu_flags")
        return frozenset(str(x) for x in f) if isinstance(f, list) else None

    def cond(env, key):
        c = env.get("conditions")
        return c.get(key) if isinstance(c, dict) else None

    def proc(env, key):
        p = env.get("process")
        return p.get(key) if isinstance(p, dict) else None

    lines = []
    aspects = [
        ("CPU model", lambda e: e.get("cpu_model")),
        ("CPUs in the affinity mask", lambda e: _cpu_text(proc(e, "cpus") or cond(e, "cpus"))),
        ("XLA/thread settings", lambda e: _env_text(proc(e, "thread_env") if proc(e, "thread_env") is not None
                                                    else cond(e, "thread_env"))),
        ("worker threads", lambda e: proc(e, "threads")),
    ]
    for what, get in aspects:
        values = {label: get(env) for label, env in envs.items() if isinstance(env, dict)}
        values = {k: v for k, v in values.items() if v is not None and v != ""}
        if len(set(map(str, values.values()))) > 1:
            lines.append(f"{what} differ between runs: " + "; ".join(f"{k}: {v}" for k, v in values.items()))
    sets = {label: flags(env) for label, env in envs.items() if isinstance(env, dict) and flags(env) is not None}
    if len(set(sets.values())) > 1:
        common = frozenset.intersection(*sets.values())
        extra = {k: sorted(v - common) for k, v in sets.items()}
        lines.append("CPU ISA flags differ between runs: " + "; ".join(
            f"{k}: +{' +'.join(v[:8])}{' ...' if len(v) > 8 else ''}" if v else f"{k}: (common flags only)"
            for k, v in extra.items()))
    return lines


def _cpu_text(cpus) -> str | None:
    if not isinstance(cpus, list) or not cpus:
        return None
    ints = sorted(c for c in cpus if isinstance(c, int))
    ranges, start = [], None
    for i, c in enumerate(ints):
        if start is None:
            start = c
        if i + 1 == len(ints) or ints[i + 1] != c + 1:
            ranges.append(f"{start}" if start == c else f"{start}-{c}")
            start = None
    return ",".join(ranges) + f" ({len(ints)})"


def _env_text(env) -> str | None:
    if not isinstance(env, dict):
        return None
    return " ".join(f"{k}={v}" for k, v in sorted(env.items())) or "(none set)"


def summary(cond: dict) -> str:
    """`load 4.3 -> 6.1 on CPUs 0-1 (2); other processes 1.6 CPUs (python 1.3); 23.9 of 25.3 GiB free; 6 rounds
    (adaptive, settled), 13 steps each`: one line of a measurement's conditions."""
    parts = []
    load_before, load_after = cond.get("load_before"), cond.get("load_after")
    cpus = _cpu_text(cond.get("cpus")) or f"{cond.get('cpu_count', '?')} CPUs"
    if isinstance(load_before, list) and isinstance(load_after, list) and load_before and load_after:
        parts.append(f"load {_number(load_before[0]) or 0:.3g} -> {_number(load_after[0]) or 0:.3g} on CPUs {cpus}")
    else:
        parts.append(f"CPUs {cpus}")
    other = _number(cond.get("other_cpu"))
    if other is not None:
        names = ", ".join(f"{p.get('name')} {float(p.get('cpu', 0)):.2g}" for p in cond.get("busy_processes") or []
                          if isinstance(p, dict))
        parts.append(f"other processes {other:.2g} CPUs" + (f" ({names})" if names else ""))
    steal = _number(cond.get("steal"))
    if steal:
        parts.append(f"{steal:.0%} of CPU time stolen by the hypervisor")
    memory = _section(cond, "memory")
    total, free = _number(memory.get("total_bytes")), _number(memory.get("available_bytes"))
    if total and free is not None:
        parts.append(f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB free")
    pressure = _section(cond, "pressure_after")
    if _number(pressure.get("cpu")):
        parts.append(f"CPU pressure {pressure['cpu']:.0f}%")
    schedule = _section(cond, "schedule")
    if schedule:
        how = "adaptive, " + str(schedule.get("stopped", "")) if schedule.get("adaptive") else "fixed"
        parts.append(f"{schedule.get('rounds', '?')} rounds ({how}), {schedule.get('steps_per_round', '?')} steps each")
    pin = _section(cond, "pin")
    if pin:
        parts.append(f"pinned to CPUs {_cpu_text(pin.get('cpus'))} with {pin.get('threads')} thread(s)")
    env = _env_text(cond.get("thread_env"))
    if env and env != "(none set)":
        parts.append(f"thread settings {env}")
    return "; ".join(parts)


def report(runs: list[dict]) -> tuple[list[str], list[str]]:
    """(warnings, notes) for a comparison: a warning per measurement made on a busy machine and per difference
    between the runs' conditions; a note per measurement with its conditions. Runs without conditions (older
    records) contribute nothing."""
    by_measurement: dict[str, tuple[dict, list[str]]] = {}
    envs: dict[str, dict] = {}
    for run in runs:
        env = _section(run, "environment")
        label = str(run.get("requested", "?"))
        envs[label] = env
        cond = env.get("conditions")
        if isinstance(cond, dict):
            key = repr(sorted((k, repr(v)) for k, v in cond.items()))
            by_measurement.setdefault(key, (cond, []))[1].append(label)
    warnings, notes = [], []
    several = len(by_measurement) > 1
    for cond, labels in by_measurement.values():
        who = f" (runs of {', '.join(labels)})" if several else ""
        reason = busy_reason(cond)
        if reason:
            warnings.append(f"warning: {reason}{who}: timings are noisier; a verdict needs more rounds and may "
                            "not settle")
        notes.append(f"measured under{who}: {summary(cond)}")
        for line in _worker_lines(envs, labels):
            notes.append(line)
    if len(envs) > 1:
        warnings += [f"warning: {line}: times may not compare" for line in differences(envs)]
    return warnings, notes


def _worker_lines(envs: dict[str, dict], labels: list[str]) -> list[str]:
    """`worker threads: 0.7.2 11, 0.8.0 11`: what each worker saw, when it is recorded."""
    threads = {label: (envs[label].get("process") or {}).get("threads") for label in labels
               if isinstance(envs.get(label, {}).get("process"), dict)}
    threads = {k: v for k, v in threads.items() if v is not None}
    return ["worker threads: " + ", ".join(f"{k} {v}" for k, v in threads.items())] if threads else []
