"""The conditions a timing was measured under: load, the CPUs this process may use, other busy processes, memory.

Two machines (or one machine at two moments) disagree about a timing for reasons the timing alone cannot show: a
busy neighbour, fewer CPUs in the affinity mask, another XLA thread count, another CPU. `snapshot()` reads them
from /proc (Linux; elsewhere what the os module offers) before and after a measurement; `conditions()` turns the
two snapshots into the plain map every run record of the measurement keeps under `environment["conditions"]`;
analysis/conditions.py says whether the machine was busy and what differs between runs. The worker adds what only
the measured process knows (its affinity, its threads, the thread settings it ran under) as `environment["process"]`.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..worker.conditions import THREAD_ENV

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
    procs: dict[int, tuple[str, int, int, int]] = field(default_factory=dict)  # pid -> (name, ppid, ticks, start)
    boot_time: float | None = None
    cpu_ticks: tuple[int, int, int] | None = None  # the machine's (busy, all, stolen by the hypervisor) ticks
    own_cpu_s: float = 0.0  # this process's and its waited-for children's CPU seconds


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return ""


def _meminfo() -> dict:
    values = {}
    for line in _read(PROC / "meminfo").splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if parts and parts[0].isdigit():
            values[key] = int(parts[0]) * (1024 if parts[1:2] == ["kB"] else 1)
    out = {k: values[v] for k, v in (("total_bytes", "MemTotal"), ("available_bytes", "MemAvailable")) if v in values}
    if "SwapTotal" in values and "SwapFree" in values:
        out["swap_used_bytes"] = values["SwapTotal"] - values["SwapFree"]
    return out


def _pressure() -> dict:
    out = {}
    for what in ("cpu", "memory", "io"):
        for line in _read(PROC / "pressure" / what).splitlines():
            fields = dict(f.split("=", 1) for f in line.split()[1:] if "=" in f)
            if line.startswith("some") and "avg10" in fields:
                try:
                    out[what] = float(fields["avg10"])
                except ValueError:
                    pass
    return out


def _processes() -> dict[int, tuple[str, int, int, int]]:
    """pid -> (command name, parent pid, user+system CPU ticks, start time in ticks after boot)."""
    out: dict[int, tuple[str, int, int, int]] = {}
    try:
        entries = [p for p in os.listdir(PROC) if p.isdigit()]
    except OSError:
        return out
    for pid in entries:
        text = _read(PROC / pid / "stat")
        close = text.rfind(")")
        if close < 0:
            continue
        name = text[text.find("(") + 1:close]
        fields = text[close + 2:].split()
        try:  # fields after the name start at field 3 (state): ppid is 4, utime 14, stime 15, starttime 22
            out[int(pid)] = (name, int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[19]))
        except (IndexError, ValueError):
            continue
    return out


def _cpu_ticks() -> tuple[int, int, int] | None:
    """(busy, all, steal) clock ticks of all CPUs since boot, from /proc/stat's `cpu` line."""
    for line in _read(PROC / "stat").splitlines():
        if line.startswith("cpu "):
            try:
                v = [int(x) for x in line.split()[1:]]
            except ValueError:
                return None
            v += [0] * (8 - len(v))
            idle = v[3] + v[4]  # idle + iowait
            everything = sum(v[:8])  # guest time is already inside user
            return everything - idle, everything, v[7]
    return None


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _boot_time() -> float | None:
    for line in _read(PROC / "stat").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return None


def snapshot() -> Snapshot:
    """The machine now, as far as this process can see it (cheap: one pass over /proc)."""
    try:
        load = [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        load = None
    return Snapshot(wall=time.time(), monotonic=time.monotonic(), loadavg=load, cpus=_affinity(),
                    cpu_count=os.cpu_count() or 1, memory=_meminfo(), pressure=_pressure(), procs=_processes(),
                    boot_time=_boot_time(), cpu_ticks=_cpu_ticks(), own_cpu_s=_own_cpu())


def _descendants(procs: dict[int, tuple[str, int, int, int]], root: int) -> set[int]:
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
    tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
    mine = _descendants(after.procs, os.getpid() if own is None else own) | _descendants(
        before.procs, os.getpid() if own is None else own)
    started_after = None
    if before.boot_time is not None:
        started_after = (before.wall - before.boot_time) * tick  # a process started later: all its ticks count
    out: list[dict] = []
    for pid, (name, _, ticks, start) in after.procs.items():
        if pid in mine:
            continue
        if pid in before.procs and before.procs[pid][3] == start:
            used = ticks - before.procs[pid][2]
        elif started_after is not None and start >= started_after:
            used = ticks
        else:
            continue
        cpu = used / tick / seconds
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
    if before.cpu_ticks and after.cpu_ticks and seconds > 0:
        # everything the machine ran but this process and its workers, short-lived processes included
        tick = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        busy = (after.cpu_ticks[0] - before.cpu_ticks[0]) / tick
        other_cpu = max(other_cpu, (busy - (after.own_cpu_s - before.own_cpu_s)) / seconds)
        every = after.cpu_ticks[1] - before.cpu_ticks[1]
        steal = round((after.cpu_ticks[2] - before.cpu_ticks[2]) / every, 3) if every > 0 else None
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
