"""Where an investigation's wall time went: each worker's seconds by what it was doing, from the phases its result
records (worker/job.py's checkpoints), summed over the rounds of a measurement, over the runs of a probe and over
the probes of a command (bisect, explain, sweep). Plain data: a map of category -> seconds.

The categories, in the order a table shows them:
- env: the release's environment made ready (found in the cache, or created by uv)
- start: the interpreter and JAX started, the job validated, its inputs read (and the process's own start and exit)
- load: the function loaded by its route, lowered, described, its HLO written (compile excluded)
- compile: XLA's compile
- calibrate: the first call and the warm-up calls (a lockstep step's size is measured on them)
- timed: the timed calls themselves
- profile: the profiled calls
- wait: a lockstep worker waiting for the host while the other contenders of its round time their steps
"""

from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping, Sequence

from ..errors import TimeSpentError

CATEGORIES = ("env", "start", "load", "compile", "calibrate", "timed", "profile", "wait")
_START_PHASES = ("validate", "inputs", "import_jax")
_LOAD_PHASES = ("describe", "hlo_text", "memory_check")


def worker_spent(duration_s: float, result: Mapping | None, *, own_process: bool = True) -> dict[str, float]:
    """One worker process's seconds by category, from its wall time and its result's `phase_s`, `compile_s` and
    samples. What the phases do not cover (the interpreter's start before the first checkpoint, its exit) counts as
    start. A job of a shared process (`own_process` False; run/shared_worker.py) counts what the host waited on it
    (`duration_s`: its process's start for the first job, then its own commands), and no wait: its process waits
    once for all of its jobs, between their commands."""
    result = result or {}
    phases = _phases(result)
    if not own_process:
        phases.pop("timing", None)  # it spans the process's waiting for the host between this job's commands
    calibrate = phases.pop("calibrate", 0.0)
    timed = sum(int(s) for s in result.get("samples_ns") or []) / 1e9
    spent = _by_category(phases, float(result.get("compile_s") or 0.0), calibrate, timed)
    # without its timing phase, a shared job's warm-up and timed calls lie outside its phases
    covered = sum(phases.values()) + (0.0 if own_process else calibrate + timed)
    spent["start"] += max(0.0, duration_s - covered)
    return {k: round(v, 4) for k, v in spent.items() if v > 0}


def _by_category(phases: dict[str, float], compile_s: float, calibrate: float, timed: float) -> dict[str, float]:
    timing = phases.get("timing", 0.0)
    routes = sum(v for k, v in phases.items() if k.startswith("route:"))
    return {
        "start": sum(phases.get(k, 0.0) for k in _START_PHASES),
        "load": max(0.0, routes - compile_s) + sum(phases.get(k, 0.0) for k in _LOAD_PHASES),
        "compile": min(compile_s, routes) if routes else compile_s,
        "calibrate": phases.get("execute", 0.0) + calibrate,
        "timed": min(timed, timing) if timing else timed,
        "profile": phases.get("profile", 0.0),
        "wait": max(0.0, timing - calibrate - timed),
    }


def _phases(result: Mapping) -> dict[str, float]:
    return {str(k): float(v) for k, v in (result.get("phase_s") or {}).items() if isinstance(v, (int, float))}


def add(total: dict[str, float], more: Mapping[str, float] | None) -> dict[str, float]:
    """`total` with `more`'s seconds added to it, category by category (in place; returned)."""
    for k, v in (more or {}).items():
        total[k] = round(total.get(k, 0.0) + float(v), 4)
    return total


def summed(parts: Iterable[Mapping[str, float] | None]) -> dict[str, float]:
    total: dict[str, float] = {}
    for part in parts:
        add(total, part)
    return total


def of_runs(runs: Iterable[Mapping]) -> dict[str, float]:
    """The seconds a probe's runs spent, summed (a run without a record of it adds nothing)."""
    return summed(run.get("spent") for run in runs)


class Ledger:
    """What one command's probes cost: each probe (a replay of some versions, or a sweep's task) with its wall time,
    when it started (`at_s`, from the ledger's start), how many workers ran at once and its runs' seconds by
    category; the command's wall time since the ledger began. `as_dict` is what `--json` carries and `-v` prints
    (render/spent.py).

    With `max_time_s` (a command's --max-time, counted from the ledger's start) a watched probe is not started where
    it would end past it, as long as the probes of its kind took so far (the median; none of its kind yet: those
    whose name starts with the same word, "evidence" for "evidence retrace"; the first of all starts while any time
    is left): TimeSpentError instead. `left()` is what a probe may still spend (a timed probe's rounds are bounded
    by it)."""

    def __init__(self, max_time_s: float | None = None) -> None:
        self.started = time.perf_counter()
        self.max_time_s = max_time_s
        self.probes: list[dict] = []

    def left(self) -> float | None:
        """Seconds of --max-time left (None: no bound)."""
        return None if self.max_time_s is None else self.max_time_s - (time.perf_counter() - self.started)

    def expected(self, what: str) -> float:
        """Seconds a probe named `what` is expected to take here: the median of its kind's so far, else of those
        whose name starts with the same word, else 0."""
        took = sorted(p["wall_s"] for p in self.probes if p["what"] == what) or \
            sorted(p["wall_s"] for p in self.probes if p["what"].split()[0] == what.split()[0])
        return took[len(took) // 2] if took else 0.0

    def check(self, what: str) -> None:
        """TimeSpentError where a probe named `what` would end past --max-time."""
        left = self.left()
        if left is None:
            return
        expected = self.expected(what)
        if left <= expected:
            raise TimeSpentError(f"--max-time {self.max_time_s:g} s spent: {max(0.0, left):.0f} s left, and a "
                                 f"{what} probe takes ~{expected:.0f} s here",
                                 hint="what was answered is kept; a larger --max-time goes further")

    def record(self, what: str, versions: Sequence[str], wall_s: float, spent: Mapping[str, float], *,
               at_once: int = 1) -> None:
        """One probe that just ended: `spent` its workers' seconds by category (of_runs of its runs)."""
        at = time.perf_counter() - self.started - wall_s
        self.probes.append({"what": what, "versions": list(versions), "wall_s": round(wall_s, 3),
                            "at_s": round(max(0.0, at), 3), "at_once": at_once, "spent": dict(spent)})

    def watched(self, what: str, replay: Callable[[Sequence[str]], list], *,
                concurrent: bool = False) -> Callable[[Sequence[str]], list]:
        """`replay` (versions -> runs), each call recorded as a probe named `what`."""
        def probe(versions: Sequence[str]) -> list:
            self.check(what)
            t0 = time.perf_counter()
            runs = replay(versions)
            self.record(what, versions, time.perf_counter() - t0, of_runs(runs),
                        at_once=len(versions) if concurrent else 1)
            return runs
        return probe

    def as_dict(self) -> dict:
        wall = time.perf_counter() - self.started
        probed = sum(p["wall_s"] for p in self.probes)
        return {"wall_s": round(wall, 3), "probes": self.probes, "probe_wall_s": round(probed, 3),
                "outside_probes_s": round(max(0.0, wall - probed), 3),
                "total": summed(p["spent"] for p in self.probes)}
