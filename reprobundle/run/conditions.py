"""The conditions a timing was measured under: load, the CPUs this process may use, other busy processes, memory.

Two machines (or one machine at two moments) disagree about a timing for reasons the timing alone cannot show: a
busy neighbour, fewer CPUs in the affinity mask, another XLA thread count, another CPU. `snapshot()` reads them
(psutil; PSI pressure from /proc on Linux) before and after a measurement; `conditions()` turns the
two snapshots into the plain map every run record of the measurement keeps under `environment["conditions"]`;
analysis/busy.py says whether the machine was busy and what differs between runs. The worker adds what only
the measured process knows (its affinity, its threads, the thread settings it ran under) as `environment["process"]`.
"""

from __future__ import annotations

import os
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from ..worker.process_state import THREAD_ENV

PROC = Path("/proc")
# Other processes using at least this much of one CPU over the measurement are listed by name.
BUSY_PROCESS_CPU = 0.10
MAX_LISTED = 6


@dataclass
class Snapshot:
    wall: float  # time.time()
    monotonic: float
    loadavg: list[float] | None
    cpus: list[int]  # this process's affinity mask
    cpu_count: int
    memory: dict = field(default_factory=dict)  # total/available bytes, swap used
    pressure: dict = field(default_factory=dict)  # PSI "some avg10" of cpu, memory, io (percent)
    procs: dict[int, tuple[str, int, float, float]] = field(default_factory=dict)  # pid -> (name, ppid, cpu s, start)
    cpu_times: tuple[float, float, float] | None = None  # the machine's (busy, all, stolen by the hypervisor) CPU s
    own_cpu_s: float = 0.0  # this process's and its waited-for children's CPU seconds


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _memory() -> dict:
    try:
        with warnings.catch_warnings():  # psutil warns where /proc/vmstat is missing (a sandbox): swap is still read
            warnings.simplefilter("ignore", RuntimeWarning)
            memory, swap = psutil.virtual_memory(), psutil.swap_memory()
    except (OSError, RuntimeError):
        return {}
    return {"total_bytes": memory.total, "available_bytes": memory.available, "swap_used_bytes": swap.used}


def _pressure() -> dict:
    """PSI (Linux 4.20+, /proc/pressure/*), read by hand: psutil has no API for pressure stall information."""
    out = {}
    for what in ("cpu", "memory", "io"):
        try:
            text = (PROC / "pressure" / what).read_text()
        except (OSError, UnicodeDecodeError):
            continue
        for line in text.splitlines():
            fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
            if line.startswith("some") and "avg10" in fields:
                try:
                    out[what] = float(fields["avg10"])
                except ValueError:
                    pass
    return out


def _processes() -> dict[int, tuple[str, int, float, float]]:
    """pid -> (name, parent pid, user+system CPU seconds, start time as time.time()); processes that vanish or
    cannot be read are left out."""
    out: dict[int, tuple[str, int, float, float]] = {}
    try:
        for p in psutil.process_iter(["name", "ppid", "cpu_times", "create_time"]):
            info = p.info
            times = info.get("cpu_times")
            if times is None or info.get("create_time") is None or info.get("ppid") is None:
                continue
            out[p.pid] = (info.get("name") or "?", info["ppid"], times.user + times.system, info["create_time"])
    except (OSError, psutil.Error):
        pass
    return out


def _cpu_times() -> tuple[float, float, float] | None:
    """(busy, all, steal) CPU seconds of all CPUs since boot."""
    try:
        t = psutil.cpu_times()
    except (OSError, RuntimeError):
        return None
    idle = t.idle + getattr(t, "iowait", 0.0)
    # guest time is already inside user
    everything = sum(getattr(t, k, 0.0) for k in ("user", "nice", "system", "idle", "iowait", "irq", "softirq",
                                                   "steal"))
    return everything - idle, everything, getattr(t, "steal", 0.0)


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def snapshot() -> Snapshot:
    """The machine now, as far as this process can see it (one pass over the processes, by psutil)."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    return Snapshot(wall=time.time(), monotonic=time.monotonic(), loadavg=load, cpus=_affinity(),
                    cpu_count=os.cpu_count() or 1, memory=_memory(), pressure=_pressure(), procs=_processes(),
                    cpu_times=_cpu_times(), own_cpu_s=_own_cpu())


def _descendants(procs: dict[int, tuple[str, int, float, float]], root: int) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, (_, ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = {root}, [root]
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def busy_processes(before: Snapshot, after: Snapshot, own: int | None = None) -> list[dict]:
    """Other processes (not `own`, default this one, nor its descendants) that used at least BUSY_PROCESS_CPU of a
    CPU between the snapshots, busiest first: {"pid", "name", "cpu"} (cpu: CPUs used on average)."""
    seconds = after.monotonic - before.monotonic
    if seconds <= 0:
        return []
    mine = _descendants(after.procs, os.getpid() if own is None else own) | _descendants(
        before.procs, os.getpid() if own is None else own)
    out: list[dict] = []
    for pid, (name, _, cpu_s, start) in after.procs.items():
        if pid in mine:
            continue
        if pid in before.procs and before.procs[pid][3] == start:
            used = cpu_s - before.procs[pid][2]
        elif start >= before.wall:  # started during the measurement: all its CPU time counts
            used = cpu_s
        else:
            continue
        cpu = used / seconds
        if cpu >= BUSY_PROCESS_CPU:
            out.append({"pid": pid, "name": name, "cpu": round(cpu, 2)})
    out.sort(key=lambda p: (-p["cpu"], p["pid"]))
    return out


def conditions(before: Snapshot, after: Snapshot, own: int | None = None) -> dict:
    """The conditions of a measurement between two snapshots, as plain data for a run record."""
    others = busy_processes(before, after, own)
    seconds = after.monotonic - before.monotonic
    other_cpu = sum(p["cpu"] for p in others)
    steal = None
    if before.cpu_times and after.cpu_times and seconds > 0:
        # everything the machine ran but this process and its workers, short-lived processes included
        busy = after.cpu_times[0] - before.cpu_times[0]
        other_cpu = max(other_cpu, (busy - (after.own_cpu_s - before.own_cpu_s)) / seconds)
        every = after.cpu_times[1] - before.cpu_times[1]
        steal = round((after.cpu_times[2] - before.cpu_times[2]) / every, 3) if every > 0 else None
    out = {
        "duration_s": round(seconds, 3),
        "load_before": before.loadavg, "load_after": after.loadavg,
        "cpus": before.cpus, "cpu_count": before.cpu_count,
        "other_cpu": round(max(0.0, other_cpu), 2), "busy_processes": others[:MAX_LISTED], "steal": steal,
        "memory": {**before.memory, **({"available_after_bytes": after.memory["available_bytes"]}
                                       if "available_bytes" in after.memory else {})},
        "pressure_after": after.pressure,
        "thread_env": {k: os.environ[k] for k in THREAD_ENV if k in os.environ},
    }
    return out
