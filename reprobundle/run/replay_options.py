"""How a replay times and what it keeps: one `ReplayOptions`, from the command line or the Python API to replay.py,
the executors and a sweep's tasks (as plain data), with its defaults defined here once.

The contenders (which JAX builds, run/contenders.py) are not options: they are what a replay compares.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, fields, replace
from typing import Any, Mapping, Sequence

from ..bundle.dims import parse_bindings
from ..config import DEFAULT_WARMUP
from ..errors import UsageError
from ..text import clean
from .execution import (
    DEFAULT_COMPILE_LIMIT_S,
    DEFAULT_LOAD_LIMIT_S,
    DEFAULT_TIMEOUT_S,
    RUNAWAY_GRACE_S,
    PhaseLimits,
    Timing,
    phase_limits,
)
from .schedule import DEFAULT_STEPS, Pin


@dataclass(frozen=True)
class ReplayOptions:
    """The settings of one replay. `repeat` is the timed steps per version over all rounds; `rounds` fixes the rounds
    (None: as many as settle the verdicts, within `max_time_s`); `pin` runs every worker on those CPU ids with as many
    threads (schedule.Pin); `platform` is where every version runs (None: replay.replay_platform decides);
    `shapes` ({"b": 16}) replays a shape-polymorphic bundle at other sizes, on synthetic inputs;
    `memory_limit_bytes` bounds each worker's memory (its RLIMIT_DATA; None: a share of the memory available,
    execution.worker_memory_limit; 0: none); `dump` and `profile` keep the XLA dump and the per-op profile;
    `retrace_packages` pins packages of the program in a retrace's environments ("flax==0.10.4");
    `max_rounds` caps the adaptive rounds (None: analysis/sequential.LAST_LOOK; a time screen's few);
    `ends` (target log ratio, spread, its degrees of freedom: analysis/which_end.Ends) makes a time bisection's probe,
    whose adaptive rounds also stop, at the group-sequential test's looks, once the test between the change's two ends
    says which end it is like; `slowdown_only` (a time bisection's endpoints and screens, where only a slowdown is a
    regression) stops them once a slowdown is ruled out (run/budget.py).
    The phase limits (execution.PhaseLimits) end a worker stuck in one phase as a `timeout` naming it:
    `load_limit_s` (its inputs, jax), `compile_limit_s` (load, lower, compile), `call_limit_s` each call of the
    function (None: RUNAWAY_FACTOR times the reference's median call, at the packed sizes), `call_grace_s` added
    to every stretch of calls (the first call, the warmup, a batch of timed calls, the profile);
    `memory_check` refuses inputs and a compiled module that cannot fit in the memory free (XLA's memory
    analysis), before running. `concurrent` starts the first round's workers together instead of one after
    another (outputs_only: for probes whose timings judge nothing). Several bundles replayed together share one
    worker process per version and round (schedule.Contender.shares); `fresh_workers` gives each its own, as
    before (the comparison the benchmarks make)."""

    warmup: int = DEFAULT_WARMUP
    repeat: int = DEFAULT_STEPS
    rounds: int | None = None
    max_time_s: float | None = None
    timeout_s: float = DEFAULT_TIMEOUT_S
    pin: tuple[int, ...] | None = None
    platform: str | None = None
    dump: bool = True
    profile: bool = True
    shapes: Mapping[str, int] | None = None
    memory_limit_bytes: int | None = None
    retrace_packages: tuple[str, ...] = ()  # NAME==VERSION pins for a retrace's environments (program_envs.py)
    load_limit_s: float = DEFAULT_LOAD_LIMIT_S
    compile_limit_s: float = DEFAULT_COMPILE_LIMIT_S
    call_limit_s: float | None = None
    call_grace_s: float = RUNAWAY_GRACE_S
    memory_check: bool = True
    concurrent: bool = False  # the first round's workers start together: a probe that times nothing (outputs_only)
    fresh_workers: bool = False  # every bundle's own worker process per version and round, even beside others
    max_rounds: int | None = None  # the cap on adaptive rounds (None: sequential.LAST_LOOK)
    ends: tuple[float, float, int] | None = None  # a bisection's probe: the change it is judged against (which_end)
    slowdown_only: bool = False  # only a slowdown answers the question: stop once one is ruled out

    @classmethod
    def of(cls, base: "ReplayOptions | None" = None, *, timing: Timing | None = None,
           pin: Pin | str | Sequence[int] | None = None, shapes: Mapping[str, int] | Sequence[str] | None = None,
           **settings: Any) -> "ReplayOptions":
        """`base` (default: the defaults) with keyword settings (ReplayOptions' fields); a `timing` gives warmup,
        repeat and rounds, `pin` may be a schedule.Pin, CPU ids or `--pin` text (parse_pin), `shapes` ["b=16"]."""
        if timing is not None:
            settings.update(warmup=timing.warmup, repeat=timing.repeat, rounds=timing.rounds)
        if pin is not None:
            pinned = parse_pin(pin)
            settings["pin"] = pinned.cpus if pinned else None
        if shapes is not None:
            settings["shapes"] = parse_bindings(dict(shapes) if isinstance(shapes, Mapping) else shapes) or None
        return replace(base or cls(), **settings)

    def outputs_only(self) -> "ReplayOptions":
        """These options for a probe judged by its outputs alone: each version runs once (one call after the
        first, no warm-up beyond it, one round), keeps no dump or profile, and its workers load and compile side by
        side, since nothing they measure is timed against another."""
        return replace(self, warmup=0, repeat=1, rounds=1, max_time_s=None, dump=False, profile=False,
                       concurrent=True)

    @property
    def timing(self) -> Timing:
        return Timing(warmup=self.warmup, repeat=self.repeat, rounds=self.rounds)

    @property
    def pinned(self) -> Pin | None:
        return Pin(tuple(self.pin), len(self.pin)) if self.pin else None

    def checked(self) -> "ReplayOptions":
        """These options, or a UsageError naming the one that is invalid; the timeout as a float."""
        check_timing(self.warmup, self.repeat, self.rounds)
        if self.max_time_s is not None and not self.max_time_s > 0:
            raise UsageError(f"invalid --max-time {self.max_time_s:g}", hint="give the seconds the timing may take, > 0")
        if self.memory_limit_bytes is not None and self.memory_limit_bytes < 0:
            raise UsageError(f"invalid memory limit {self.memory_limit_bytes}", hint="give bytes, or 0 for none")
        return replace(self, timeout_s=checked_timeout(self.timeout_s), load_limit_s=checked_timeout(self.load_limit_s),
                       compile_limit_s=checked_timeout(self.compile_limit_s),
                       call_limit_s=None if self.call_limit_s is None else checked_timeout(self.call_limit_s),
                       call_grace_s=0.0 if self.call_grace_s == 0 else checked_timeout(self.call_grace_s))

    def limits(self, reference_ns: Sequence[int] | None) -> PhaseLimits:
        """The phase limits of a contender whose reference took `reference_ns` a call (None: no reference to go by,
        as at other sizes)."""
        return phase_limits(self.load_limit_s, self.compile_limit_s, self.call_limit_s, self.call_grace_s, reference_ns)

    def to_dict(self) -> dict[str, Any]:
        """These options as plain JSON values (a task crosses processes and machines as data; `from_dict` reads
        them back): `pin`, `retrace_packages` and `ends` as lists, `shapes` as a map."""
        plain = asdict(self)
        plain["pin"] = list(self.pin) if self.pin else None
        plain["ends"] = list(self.ends) if self.ends else None
        plain["shapes"] = dict(self.shapes) if self.shapes else None
        plain["retrace_packages"] = list(self.retrace_packages)
        return plain

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "ReplayOptions":
        """The options `to_dict` wrote (missing keys: the defaults); an unknown key is a UsageError."""
        names = [f.name for f in fields(cls)]
        unknown = set(data) - set(names)
        if unknown:
            raise UsageError(f"unknown replay option(s): {', '.join(sorted(unknown))}", hint=f"known: {', '.join(names)}")
        known = dict(data)
        if known.get("pin"):
            known["pin"] = tuple(known["pin"])
        if "shapes" in known:
            known["shapes"] = dict(known["shapes"]) if known["shapes"] else None
        known["retrace_packages"] = tuple(known.get("retrace_packages") or ())
        if known.get("ends"):
            target, spread, dof = known["ends"]
            known["ends"] = (float(target), float(spread), int(dof))
        return cls(**known)

    def timing_record(self) -> dict[str, Any]:
        """The options a sweep records and resumes by (its `options` in --json): `to_dict` less `shapes` and
        `memory_limit_bytes`, which a sweep does not carry (it replays at the packed sizes), the limits and the
        memory check, which bound a replay without changing what it measures, and `fresh_workers`: each bundle
        still meets a new process every round, shared or not."""
        plain = self.to_dict()
        for name in ("shapes", "memory_limit_bytes", "load_limit_s", "compile_limit_s", "call_limit_s",
                     "call_grace_s", "memory_check", "fresh_workers"):
            del plain[name]
        if self.max_rounds is None:  # as a sweep recorded its options before the cap existed
            del plain["max_rounds"]
        return plain

    def for_sweep(self) -> "ReplayOptions":
        """These options as a sweep's or a bisection's task carries them: at the packed sizes, no memory limit."""
        return replace(self, shapes=None, memory_limit_bytes=None)

    def args(self, max_time: bool = True) -> list[str]:
        """The non-default timing options as `reprobundle replay` flags (what a Reproduce block repeats; a replay's
        leaves out --max-time, as it always has)."""
        default = ReplayOptions()
        args = (["--repeat", str(self.repeat)] if self.repeat != default.repeat else []) + (
            ["--rounds", str(self.rounds)] if self.rounds is not None else []) + (
            ["--warmup", str(self.warmup)] if self.warmup != default.warmup else [])
        args += [a for k, v in sorted((self.shapes or {}).items()) for a in ("--shape", f"{k}={v}")]
        args += ["--platform", self.platform] if self.platform else []
        args += ["--pin", ",".join(map(str, self.pin))] if self.pin else []
        args += ["--max-time", f"{self.max_time_s:g}"] if max_time and self.max_time_s is not None else []
        return args


def screen_options(options: ReplayOptions) -> ReplayOptions:
    """`options` for a bounded time screen (analysis/time_screen.py): adaptive rounds up to SCREEN_ROUNDS within
    SCREEN_S (or the tighter --max-time), ending once a slowdown is ruled out, no dump, no profile."""
    from ..analysis.time_screen import SCREEN_ROUNDS, SCREEN_S

    bound = SCREEN_S if options.max_time_s is None else min(SCREEN_S, options.max_time_s)
    rounds = None if options.rounds is None else min(options.rounds, SCREEN_ROUNDS)
    return replace(options, rounds=rounds, max_rounds=SCREEN_ROUNDS, max_time_s=bound, dump=False, profile=False,
                   slowdown_only=True)


def replay_options(options: ReplayOptions | None, settings: dict[str, Any],
                   base: ReplayOptions | None = None) -> ReplayOptions:
    """The checked options of a Python API call: `options`, or `base` with the keyword `settings` (see
    ReplayOptions.of); a UsageError for an invalid one."""
    if options is not None and settings:
        raise UsageError(f"give options or settings, not both ({', '.join(sorted(settings))})")
    return (options if options is not None else ReplayOptions.of(base, **settings)).checked()


def checked_timeout(timeout_s: Any) -> float:
    """A worker timeout: a positive, finite number of seconds (NaN, infinities, zero and negatives are refused)."""
    try:
        value = float(timeout_s)
    except (TypeError, ValueError):
        value = float("nan")
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"invalid timeout {clean(timeout_s, 40)}", hint="give a positive number of seconds, e.g. 600")
    return value


def check_timing(warmup: int, repeat: int, rounds: int | None = None) -> Timing:
    """The timing, or a UsageError when it is not one (warmup >= 0, repeat >= 1, 1 <= rounds <= repeat)."""
    if warmup < 0 or repeat < 1 or (rounds is not None and not 1 <= rounds <= repeat):
        raise UsageError(f"invalid timing: warmup={warmup}, repeat={repeat}, rounds={rounds}",
                         hint="use warmup >= 0, repeat >= 1 and 1 <= rounds <= repeat")
    return Timing(warmup=warmup, repeat=repeat, rounds=rounds)


def parse_pin(pin: Pin | str | Sequence[int] | None) -> Pin | None:
    """`--pin` as a schedule.Pin: "auto" (the last CPU of this process's affinity mask, alone), "2", "0-3",
    "0,2" or a sequence of CPU ids; every worker gets those CPUs and as many threads. None: not pinned."""
    if pin is None or isinstance(pin, Pin):
        return pin
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = list(range(os.cpu_count() or 1))
    if isinstance(pin, str):
        cpus = _pin_text(pin, allowed)
    else:
        cpus = [int(c) for c in pin]
    cpus = sorted(set(cpus))
    missing = [c for c in cpus if c not in allowed]
    if not cpus or missing:
        raise UsageError(f"--pin {pin}: CPU(s) {', '.join(map(str, missing)) or 'none'} not available to this "
                         f"process", hint=f"this process may use CPUs {','.join(map(str, allowed))}")
    return Pin(tuple(cpus), len(cpus))


def _pin_text(pin: str, allowed: list[int]) -> list[int]:
    text = pin.strip().lower()
    if text == "auto":
        return [allowed[-1]]
    cpus: list[int] = []
    try:
        for part in text.split(","):
            lo, sep, hi = part.partition("-")
            cpus += list(range(int(lo), int(hi) + 1)) if sep else [int(lo)]
    except ValueError:
        raise UsageError(f"invalid --pin {pin!r}", hint="CPU ids: 2, 0-3, 0,2 or auto") from None
    return cpus
