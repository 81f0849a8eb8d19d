"""Measurement conditions as data: whether the machine was busy, and what differs between runs that bears on timing.

run/conditions.py records them (load, affinity, other busy processes, memory) around a measurement, the worker its
own process (affinity, threads, thread settings); this module only reads what the run records hold. Pure Python.
"""

from __future__ import annotations

# The machine counts as busy when other processes used at least this share of the CPUs this process may use during
# the measurement. Only when that was not measured does the 1-minute load average decide (busy at one task per CPU):
# it lags by a minute and counts this process's own work, so it is context, not evidence.
BUSY_SHARE = 0.25


def busy_reason(cond: dict | None, *, now: bool = False) -> str | None:
    """`the machine was busy: load 11 on 2 CPUs before the timing; other processes used 1.4 CPUs during it
    (python 0.84, pytest 0.4)`, or None when it was not (or nothing was recorded). `now`: the warning before a
    timing, of the conditions since the replay started: `the machine is busy: load 11 on 2 CPUs; other processes
    used 1.4 CPUs since this replay started (python 0.84, pytest 0.4)`."""
    if not isinstance(cond, dict):
        return None
    n = _cpu_count(cond)
    load1 = _first_load(cond.get("load_before"))
    measured = _number(cond.get("other_cpu"))
    other = measured or 0.0
    crowded = measured is not None and other >= BUSY_SHARE * n
    loaded = measured is None and load1 is not None and load1 >= n
    if not (loaded or crowded):
        return None
    parts = [_load_text(load1, n, crowded and not now)]
    if crowded:
        parts.append(f"other processes used {other:.2g} CPUs "
                     + ("since this replay started" if now else "during it") + _busy_processes_text(cond))
    return f"the machine {'is' if now else 'was'} busy: " + "; ".join(parts)


def _cpu_count(cond: dict) -> float:
    """The CPUs this process may use: its affinity mask, else the machine's count, else 1."""
    cpus = cond.get("cpus")
    return len(cpus) if isinstance(cpus, list) and cpus else _number(cond.get("cpu_count")) or 1


def _first_load(load) -> float | None:
    """The 1-minute load average of a recorded (1, 5, 15)-minute list."""
    return _number(load[0]) if isinstance(load, list) and load else None


def _cpus_text(n: float) -> str:
    return f"{n} CPU{'s' if n != 1 else ''}"


def _load_text(load1: float | None, n: float, crowded: bool) -> str:
    """`load 11 on 2 CPUs before the timing`, or `2 CPUs` when no load was recorded."""
    if load1 is None:
        return _cpus_text(n)
    return f"load {load1:.3g} on {_cpus_text(n)}" + (" before the timing" if crowded else "")


def _busy_processes_text(cond: dict) -> str:
    """` (python 0.84, pytest 0.4)`: the busiest other processes, or nothing when none was recorded."""
    names = ", ".join(f"{p.get('name')} {float(p.get('cpu', 0)):.2g}" for p in cond.get("busy_processes") or []
                      if isinstance(p, dict))
    return f" ({names})" if names else ""


def _number(x) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _section(record: dict, key: str) -> dict:
    """`record[key]` when it is a map, else an empty one: a record is read, not trusted."""
    value = record.get(key)
    return value if isinstance(value, dict) else {}


def differences(envs: dict[str, dict]) -> list[str]:
    """What differs between the runs' environments that bears on timing (CPU model, ISA flags, CPUs in the affinity
    mask, thread settings, the worker's threads): one line each, naming the runs. `envs`: label -> environment."""
    lines = []
    for what, get in _ASPECTS:
        values = _present_values(envs, get)
        if len(set(map(str, values.values()))) > 1:
            lines.append(f"{what} differ between runs: " + "; ".join(f"{k}: {v}" for k, v in values.items()))
    flags = _flags_difference(envs)
    if flags is not None:
        lines.append(flags)
    return lines


def _flags(env):
    f = env.get("cpu_flags")
    return frozenset(str(x) for x in f) if isinstance(f, list) else None


def _condition(env, key):
    c = env.get("conditions")
    return c.get(key) if isinstance(c, dict) else None


def _process(env, key):
    p = env.get("process")
    return p.get(key) if isinstance(p, dict) else None


def _thread_settings(env):
    """The worker's own thread settings when it recorded them, else those measured around it."""
    return _env_text(_process(env, "thread_env") if _process(env, "thread_env") is not None
                     else _condition(env, "thread_env"))


# (what, how to read it from a run's environment): the aspects compared run by run, in the order they are reported.
_ASPECTS = (
    ("CPU model", lambda e: e.get("cpu_model")),
    ("CPUs in the affinity mask", lambda e: _cpu_text(_process(e, "cpus") or _condition(e, "cpus"))),
    ("XLA/thread settings", _thread_settings),
    ("worker threads", lambda e: _process(e, "threads")),
)


def _present_values(envs: dict[str, dict], get) -> dict:
    """label -> the aspect `get` reads, for the runs that recorded it."""
    values = {label: get(env) for label, env in envs.items() if isinstance(env, dict)}
    return {k: v for k, v in values.items() if v is not None and v != ""}


def _flags_difference(envs: dict[str, dict]) -> str | None:
    """`CPU ISA flags differ between runs: a: +avx512f; b: (common flags only)`, or None when they do not."""
    sets = {label: _flags(env) for label, env in envs.items() if isinstance(env, dict) and _flags(env) is not None}
    if len(set(sets.values())) <= 1:
        return None
    common = frozenset.intersection(*sets.values())
    extra = {k: sorted(v - common) for k, v in sets.items()}
    return "CPU ISA flags differ between runs: " + "; ".join(
        f"{k}: +{' +'.join(v[:8])}{' ...' if len(v) > 8 else ''}" if v else f"{k}: (common flags only)"
        for k, v in extra.items())


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
    parts = [_load_part(cond)]
    for part in _SUMMARY_PARTS:
        text = part(cond)
        if text is not None:
            parts.append(text)
    return "; ".join(parts)


def _load_part(cond: dict) -> str:
    load_before, load_after = cond.get("load_before"), cond.get("load_after")
    cpus = _cpu_text(cond.get("cpus")) or f"{cond.get('cpu_count', '?')} CPUs"
    if isinstance(load_before, list) and isinstance(load_after, list) and load_before and load_after:
        return f"load {_number(load_before[0]) or 0:.3g} -> {_number(load_after[0]) or 0:.3g} on CPUs {cpus}"
    return f"CPUs {cpus}"


def _other_part(cond: dict) -> str | None:
    other = _number(cond.get("other_cpu"))
    if other is None:
        return None
    return f"other processes {other:.2g} CPUs" + _busy_processes_text(cond)


def _steal_part(cond: dict) -> str | None:
    steal = _number(cond.get("steal"))
    return f"{steal:.0%} of CPU time stolen by the hypervisor" if steal else None


def _memory_part(cond: dict) -> str | None:
    memory = _section(cond, "memory")
    total, free = _number(memory.get("total_bytes")), _number(memory.get("available_bytes"))
    return f"{free / 2**30:.1f} of {total / 2**30:.1f} GiB free" if total and free is not None else None


def _pressure_part(cond: dict) -> str | None:
    pressure = _section(cond, "pressure_after")
    return f"CPU pressure {pressure['cpu']:.0f}%" if _number(pressure.get("cpu")) else None


def _schedule_part(cond: dict) -> str | None:
    schedule = _section(cond, "schedule")
    if not schedule:
        return None
    how = "adaptive, " + str(schedule.get("stopped", "")) if schedule.get("adaptive") else "fixed"
    return f"{schedule.get('rounds', '?')} rounds ({how}), {schedule.get('steps_per_round', '?')} steps each"


def _pin_part(cond: dict) -> str | None:
    pin = _section(cond, "pin")
    return f"pinned to CPUs {_cpu_text(pin.get('cpus'))} with {pin.get('threads')} thread(s)" if pin else None


def _thread_env_part(cond: dict) -> str | None:
    env = _env_text(cond.get("thread_env"))
    return f"thread settings {env}" if env and env != "(none set)" else None


# The parts of `summary` after the load, in the order they are shown; each None when not recorded.
def alternated(cond: object) -> bool:
    """Whether a measurement's conditions say its versions were visited in alternation, one process at a time (a
    TPU: run/schedule.py), not concurrently."""
    return isinstance(cond, dict) and cond.get("order") == "alternated"


def _order_part(cond: dict) -> str | None:
    return ALTERNATED if alternated(cond) else None


ALTERNATED = "versions alternated, one process at a time"
_SUMMARY_PARTS = (_other_part, _steal_part, _memory_part, _pressure_part, _schedule_part, _order_part, _pin_part,
                  _thread_env_part)


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
