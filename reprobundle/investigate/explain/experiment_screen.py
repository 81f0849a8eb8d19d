"""explain's screen: every experiment tried briefly on the bundle's frozen module, so that only those that move the
candidate toward the baseline are measured properly. A screen selects; it never decides a verdict (the paired
replay after it does).

One long-lived module worker per release (run/module_server.ModuleWorker) serves the baseline, the candidate and
every experiment that is a scalar XLA DebugOptions field: a new compile of the same module with the flag as a compile
option (`Lowered.compile(compiler_options)`), where XLA reads it from the compile's DebugOptions. Compile options
refuse a repeated field (`--xla_disable_hlo_passes`: "Protocol Buffer reflection usage error") and a flag that is
no DebugOptions field (what only `XLA_FLAGS=--help` lists): such an experiment gets a worker process of its own with
the flag in XLA_FLAGS, as a flag read at start-up must. (Found by trying: 0.4.33's `xla_cpu_use_thunk_runtime` as a
compile option changes a small while loop's time ~6x in one process, as it does in XLA_FLAGS; the repeated field
is refused with that error, which is also what sends an experiment to a process of its own.) A flag XLA read only
at client start-up would look inert here, and is not measured; one that moved as a compile option is measured as one
too (experiments.py `_as_measured`), in the candidate's process of each round. Every worker the screen
knows it needs (the two references, the first MAX_STARTED_AHEAD experiments of their own) is launched before any is
awaited, so their JAX imports overlap, and nothing is timed until all of them are idle.

- by outputs: each experiment runs once; it moved when its outputs are the baseline's (bit for bit for `bits`,
  else within the tolerance).
- by time: the baseline's and the candidate's prepared modules timed before and after, each experiment compiled and
  timed once; it moved when its median lies below the geometric midpoint of the two.
A retraced experiment (a JAX option) lowers the program anew and cannot be served a module: it is not screened and
goes on to the measurement.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ...analysis.verdict import check_outputs
from ...run.contenders import RETRACE, ContenderSpec

STEP_TARGET_S = 0.1  # one timed batch
MAX_REPEAT = 100
MAX_STARTED_AHEAD = 4  # experiments' own workers started with the references (the rest start when their turn comes)
REFUSED = ("No such compile option", "reflection usage error", "Repeated field", "not supported")


@dataclass
class Screened:
    """What the screen saw of one experiment: `moved` None when it could not say (not screened, failed)."""

    how: str  # "compile option" | "own process" | "not screened"
    moved: bool | None = None
    median_ns: float | None = None
    outputs: str | None = None  # "same" | "bits" | "beyond" against the baseline's
    error: str | None = None

    def as_record(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if v is not None}


@dataclass
class Screen:
    results: list[Screened]
    base_ns: float | None = None
    cand_ns: float | None = None
    note: str = ""
    facts: dict = field(default_factory=dict)


def compile_options(flags: Sequence[str], flag_types: dict[str, dict] | None) -> dict[str, Any] | None:
    """`--name=value` flags as {DebugOptions field: typed value}, or None when one of them cannot be a compile
    option (not a scalar DebugOptions field of this release, as its release facts list them)."""
    out: dict[str, Any] = {}
    for flag in flags:
        name, eq, text = flag.lstrip("-").partition("=")
        entry = (flag_types or {}).get(name)
        if not eq or not entry or entry.get("source") == "help" or str(entry.get("type", "")).startswith("repeated"):
            return None
        value = _typed(text, str(entry.get("type")))
        if value is None:
            return None
        out[name] = value
    return out


def _typed(text: str, kind: str) -> Any:
    if kind == "bool":
        return {"true": True, "false": False, "1": True, "0": False}.get(text.lower())
    try:
        if kind in ("int32", "int64", "uint32", "uint64"):
            return int(text)
        if kind in ("float", "double"):
            return float(text)
    except ValueError:
        return None
    return text if kind == "string" else None


def extra_flags(spec: ContenderSpec, candidate: ContenderSpec) -> tuple[str, ...]:
    """The XLA flags the experiment `spec` adds to the candidate's."""
    n = len(candidate.settings.xla_flags)
    return spec.settings.xla_flags[n:]


def screen(text: str, inputs: Sequence[np.ndarray], baseline: ContenderSpec, candidate: ContenderSpec,
           specs: Sequence[ContenderSpec], *, by: str, flag_types: dict[str, dict] | None,
           worker_for: Callable[[ContenderSpec], Any], output_names: Sequence[str] | None = None,
           progress: Callable[[str], None] | None = None,
           time_left: Callable[[], float | None] | None = None, reserve_s: float = 0.0) -> Screen:
    """Screen each experiment's contender of `specs` (the candidate under its settings) on the module `text`.
    `by`: "outputs", "bits" or "time"; `worker_for(spec)` makes a module worker (closed here). `time_left()`: the
    seconds of --max-time left (None: no bound); an experiment is not screened where it would leave less than
    `reserve_s` (what comes after the screen: the measurement), as long as those screened so far took (the median;
    the first starts while more than `reserve_s` is left): it is "not screened", with why, and not measured."""
    base, cand = worker_for(baseline), worker_for(candidate)
    ahead = [i for i, spec in enumerate(specs) if _needs_own_process(spec, candidate, flag_types)]
    own = {i: worker_for(specs[i]) for i in ahead[:MAX_STARTED_AHEAD]}
    try:
        not_started = _start_together([base, cand], own)
        run = _Run(text, inputs, base, cand, by, output_names)
        first = run.references()
        if first is not None:
            return Screen([Screened("not screened", error=first) for _ in specs], note=first)
        results: list[Screened] = []
        took: list[float] = []
        for i, spec in enumerate(specs):
            if progress:
                progress(f"screen {i + 1}/{len(specs)}: {spec.settings.describe() or spec.label}")
            spent = no_time(time_left, took, reserve_s)
            t0 = time.monotonic()
            if spent or i in not_started:
                results.append(Screened("not screened" if spent else "own process", error=spent or not_started[i]))
                continue
            results.append(_one(run, spec, candidate, flag_types, worker_for, own.get(i)))
            took.append(time.monotonic() - t0)
        run.close_references()
        return Screen(_decide(results, run, by), run.base_ns, run.cand_ns)
    finally:
        for worker in (base, cand, *own.values()):
            worker.close()


def no_time(time_left: Callable[[], float | None] | None, took: Sequence[float], reserve_s: float) -> str | None:
    """Why the next experiment is not screened: it would leave less than `reserve_s` of --max-time (it takes as
    long as the median of `took`, those screened so far); None where it is."""
    left = time_left() if time_left is not None else None
    if left is None:
        return None
    expected = sorted(took)[len(took) // 2] if took else 0.0
    if left - expected > reserve_s:
        return None
    return (f"not screened: --max-time: {max(0.0, left):.0f} s left, a screen takes ~{expected:.0f} s here and the "
            f"measurement after it ~{reserve_s:.0f} s")


def _needs_own_process(spec: ContenderSpec, candidate: ContenderSpec, flag_types) -> bool:
    """An experiment no compile option can serve: its flag is repeated or --help-only, or it sets the environment."""
    if spec.mode == RETRACE:
        return False
    return (compile_options(extra_flags(spec, candidate), flag_types) is None
            or spec.settings.env != candidate.settings.env)


def _start_together(references: list, own: dict[int, Any]) -> dict[int, str]:
    """Every worker launched before any is awaited (their JAX imports overlap; none is timed until all are idle).
    A reference that cannot start raises; an experiment's worker that cannot start (an XLA flag this release does
    not define) is that experiment's error, by index."""
    from ...errors import ReplayError

    for worker in (*references, *own.values()):
        worker.launch()
    for worker in references:
        worker.await_start()
    failed = {}
    for i, worker in own.items():
        try:
            worker.await_start()
        except ReplayError as e:
            failed[i] = e.message
    return failed


class _Run:
    """The screen's two reference workers and how one experiment is run."""

    def __init__(self, text, inputs, base, cand, by, names):
        self.text, self.inputs, self.base, self.cand, self.by, self.names = text, inputs, base, cand, by, names
        self.base_samples: list[int] = []
        self.cand_samples: list[int] = []
        self.repeat = 3
        self.base_outputs: list | None = None

    @property
    def base_ns(self) -> float | None:
        return float(np.median(self.base_samples)) if self.base_samples else None

    @property
    def cand_ns(self) -> float | None:
        return float(np.median(self.cand_samples)) if self.cand_samples else None

    def references(self) -> str | None:
        """The baseline's outputs (and, by time, both references' first batch); why not, when one fails."""
        if self.by != "time":
            out = self.base.run(self.text, self.inputs)
            if not out.ok:
                return f"the baseline's module did not run in the screen: {out.message}"
            self.base_outputs = [np.asarray(x) for x in out.outputs]
            return None
        for worker in (self.base, self.cand):
            ready = worker.prepare(self.text, self.inputs)
            if not ready.ok:
                return f"the module did not run in the screen: {ready.message}"
        probe = self.base.time_prepared(3, warmup=1)
        if not probe.ok:
            return f"the baseline's module did not run in the screen: {probe.message}"
        per_call_s = max(float(np.median(probe.samples_ns)) * 1e-9, 1e-7)
        self.repeat = int(min(MAX_REPEAT, max(3, STEP_TARGET_S / per_call_s)))
        return self._time_references()

    def _time_references(self) -> str | None:
        for worker, samples in ((self.base, self.base_samples), (self.cand, self.cand_samples)):
            timed = worker.time_prepared(self.repeat, warmup=1)
            if not timed.ok:
                return f"the module did not run in the screen: {timed.message}"
            samples += [int(s) for s in timed.samples_ns]
        return None

    def close_references(self) -> None:
        """By time: the baseline timed once more after the experiments (the candidate's worker compiled them)."""
        if self.by == "time":
            timed = self.base.time_prepared(self.repeat, warmup=0)
            if timed.ok:
                self.base_samples += [int(s) for s in timed.samples_ns]

    def on(self, worker, options: dict | None):
        if self.by == "time":
            return worker.time(self.text, self.inputs, warmup=1, repeat=self.repeat, compiler_options=options)
        return worker.run(self.text, self.inputs, compiler_options=options)

    def judged(self, outcome, how: str) -> Screened:
        if not outcome.ok:
            return Screened(how, error=f"{outcome.phase or ''} {outcome.message}".strip())
        if self.by == "time":
            return Screened(how, median_ns=float(np.median(outcome.samples_ns)))
        check = check_outputs(self.base_outputs or [], [np.asarray(x) for x in outcome.outputs], self.names)
        apart = "same" if check["bit_identical"] else "bits" if check["ok"] else "beyond"
        return Screened(how, moved=apart == "same" or (apart == "bits" and self.by == "outputs"), outputs=apart)


def _one(run: _Run, spec: ContenderSpec, candidate: ContenderSpec, flag_types, worker_for, own=None) -> Screened:
    """One experiment: as a compile option on the candidate's worker when one can serve it, else in its own worker
    (`own`, started already, or one made here; also when the compile refused the option)."""
    if spec.mode == RETRACE:
        return Screened("not screened")  # a retraced program is lowered anew: no module to serve
    if own is None and not _needs_own_process(spec, candidate, flag_types):
        outcome = run.on(run.cand, compile_options(extra_flags(spec, candidate), flag_types))
        if outcome.ok or not any(word in (outcome.message or "") for word in REFUSED):
            return run.judged(outcome, "compile option")
    from ...errors import ReplayError

    worker = own or worker_for(spec)
    try:
        return run.judged(run.on(worker, None), "own process")
    except ReplayError as e:  # its worker did not start: an XLA flag this release does not define
        return Screened("own process", error=e.message)
    finally:
        worker.close()


def _decide(results: list[Screened], run: _Run, by: str) -> list[Screened]:
    """By time: an experiment moved when its median lies below the geometric midpoint of the baseline's and the
    candidate's (when the screen saw no slowdown, none is told apart: every one that ran goes on)."""
    if by != "time" or run.base_ns is None or run.cand_ns is None:
        return results
    seen_slower = run.cand_ns > run.base_ns * 1.05
    midpoint = math.sqrt(run.base_ns * run.cand_ns)
    for r in results:
        if r.median_ns is not None:
            r.moved = r.median_ns <= midpoint if seen_slower else None
    return results
