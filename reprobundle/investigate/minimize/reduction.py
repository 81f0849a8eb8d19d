"""Minimize: the smallest piece of a bundle's StableHLO that still shows what two contenders do differently.

A property is judged between contender A (the baseline) and B on a module and its inputs:
- `outputs`: both run it, and B's outputs differ from A's beyond the tolerance a replay uses (analysis/verdict.py's
  check_outputs); with `bits`, any difference of dtype, shape or bits;
- `error`: A runs it and B fails with the same kind of failure as on the whole bundle (`error_kind`: the phase,
  the error's class and its first line with numbers, value names and types normalised);
- `slower`: A and B timed in paired rounds (the same paired sequential test a replay's verdict uses, analysis/
  verdict.py's timing_verdict) settle on "slower" with a ratio of at least `min_ratio`; an unsettled verdict is
  never kept. A piece must also account for the time that moved: B's extra time per call on it is at least
  MIN_SHARE of the whole bundle's (a few microseconds of noise on a tiny piece never stand for a slowdown of
  milliseconds), and it must take inputs or loop state (ops of constants alone are refused: nothing of the
  program flows through them). The reduced bundle's fresh replay is held to the same bar; when no smaller piece
  meets it, minimize says it could not shrink below the whole.

The search is Zeller's ddmin over the top-level ops of the function (hlo_cut.py): a candidate is any subset of
them; the values it uses but does not define are its inputs, fed with the real values the whole function computes
there on A (fed_values.py: one run of the function returning every intermediate value it can carry, or smaller cuts
where that run kills A's worker), and the values it defines that nothing inside uses are its outputs. Constants
are copied in and never counted; a candidate whose boundary holds a value no bundle can carry (a token) is simply
not kept. Each candidate runs on a long-lived worker per contender (run/module_server.py), one small module after
another. A worker that dies on a module minimize cannot do without (the whole bundle on A, a single op's values at
the top level) ends it with the reason in words (worker_outcomes.py's WorkerDeath): the release, the phase, the
worker's own last line on stderr, and the command that still shows the change on the whole bundle; below the top
level, a region whose values kill the worker is not opened, and the piece above is the answer.

Regions. After the top level, each op of the kept piece that holds a computation is opened where the cut is sound:
- `func.call`: the callee's body is inlined (its arguments are the call's operands; the call's results are what
  it returns), and the search goes on over the inlined ops;
- `stablehlo.while`: one iteration of its body replaces the loop, its carried values being the loop's operands
  (their real values on entry); kept only when that one iteration still shows the property;
- `stablehlo.case`/`stablehlo.if` and the regions of reductions, sorts and scatters are kept whole: a branch
  replacing a `case` would need the branch index's real value to be the one taken, and a reduction's region is
  a scalar function applied by the op itself, not a program of its own.
Opening a region is a candidate like any other: it is kept only when the property still holds.
"""

from __future__ import annotations

import functools
import math
import shlex
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ...analysis.sequential import LAST_LOOK
from ...analysis.verdict import DEFAULT_MIN_EFFECT, MIN_ROUNDS, check_outputs, timing_verdict
from ...bundle.manifest import check_name
from ...bundle.registry import Bundle, Registry
from ...bundle.sharing import reproduce_info, store_args
from ...bundle.trees import output_names
from ...capture.export import concrete_module, function_ops, load_stablehlo, region_ops
from ...capture.pack import pack
from ...capture.pack_options import PackOptions
from ...envs.platforms import refuse_two_at_once
from ...errors import UsageError
from ...logs import Status
from ...run.contenders import ContenderSpec, concrete_versions, variant_args
from ...run.execution import DEFAULT_TIMEOUT_S, PhaseLimits, worker_memory_limit
from ...run.replay import leaf_array, replay, replay_platform
from ...run.replay_options import ReplayOptions
from ...run.schedule import DEFAULT_STEPS
from ...store.watchdog import handling_signals
from ...text import counted
from .fed_values import intermediate_values
from .hlo_cut import (
    Cut,
    FunctionGraph,
    bundle_inputs,
    consecutive_chunks,
    cut,
    graph_of,
    location_key,
    opened,
    unused_results,
)
from .kept_property import (
    ERROR,
    OUTPUTS,
    PROPERTIES,
    SLOWER,
    PropertyNotShown,
    not_shown,
    told_property,
    whole_not_shown,
)
from .worker_outcomes import Runner, WorkerDeath, died_text, error_kind, error_text

if TYPE_CHECKING:
    from ...envs.manager import EnvironmentManager

DEFAULT_MIN_RATIO = 1.0 + DEFAULT_MIN_EFFECT  # the verdict's own threshold
CHECK_MAX_TIME_S = 120.0  # the reduced bundle's fresh timed replay (a fresh process per round) stops there
MIN_SHARE = 0.5  # of the whole bundle's extra time per call (B's median minus A's) that a slower piece must hold
_STEP_TARGET_S = 0.02  # one timed step of a candidate: calls adding up to about this


class OutOfTime(Exception):
    """The search's time is up (`--max-time`): the best piece so far is the answer."""


# ------------------------------------------------------------------------------------------------ the search


@dataclass
class Search:
    """ddmin (Zeller and Hildebrandt, 2002) over a list of items with a test that says whether a subset still has
    the property. `best` is the smallest subset found so far that has it (the whole list until one does), kept
    when the search stops early (its deadline, Ctrl-C); `tested` counts the subsets tested (each once: results are
    remembered)."""

    holds: Callable[[list], bool]
    deadline: float | None = None  # time.monotonic() after which the search stops (OutOfTime)
    progress: Callable[[list, int], None] = lambda _best, _tested: None
    best: list = field(default_factory=list)
    tested: int = 0
    _seen: dict = field(default_factory=dict)

    def test(self, items: list) -> bool:
        key = tuple(items)
        if key in self._seen:
            return self._seen[key]
        if self.deadline is not None and time.monotonic() > self.deadline:
            raise OutOfTime()
        self.tested += 1
        result = bool(self.holds(list(items)))
        self._seen[key] = result
        if result and len(items) < len(self.best):
            self.best = list(items)
        self.progress(self.best, self.tested)
        return result

    def ddmin(self, items: Sequence) -> list:
        """The 1-minimal subset of `items` (which must have the property) that still has it: no single chunk of
        the final granularity can be removed. Subsets first, then complements, granularity doubled when neither
        helps."""
        current = list(items)
        if not self.best or len(current) < len(self.best):
            self.best = list(current)
        n = 2
        while len(current) >= 2:
            chunks = consecutive_chunks(current, n)
            reduced = False
            for chunk in chunks:
                if self.test(chunk):
                    current, n, reduced = chunk, 2, True
                    break
            if not reduced and n > 2:
                for chunk in chunks:
                    inside = set(chunk)
                    rest = [x for x in current if x not in inside]
                    if self.test(rest):
                        current, n, reduced = rest, max(n - 1, 2), True
                        break
            if not reduced:
                if n >= len(current):
                    break
                n = min(len(current), 2 * n)
        return current


# ------------------------------------------------------------------------------------------------ candidates


@dataclass
class Candidate:
    members: list[int]  # op indexes of the function
    cut: Cut
    inputs: list[np.ndarray]


def candidate(members: Sequence[int], graph: FunctionGraph, values: dict[str, np.ndarray]) -> Candidate | None:
    """The ops `members` as a module with its real inputs, or None when it cannot be one (a value at its boundary
    that no bundle carries, or one whose real value is not known)."""
    made = cut(members, graph, unused_results(members, graph), "minimized")
    if made is None or any(v not in values for v in made.inputs):
        return None
    return Candidate(sorted(members), made, [values[v] for v in made.inputs])


# ------------------------------------------------------------------------------------------------ properties


@dataclass
class Judgement:
    """A property judged on one module: whether it holds, and what shows it (the output check, the error, the
    verdict)."""

    holds: bool
    detail: dict = field(default_factory=dict)
    died: tuple[Runner, Any] | None = None  # a worker that died on the module (in a fresh one too): whose, its outcome


@dataclass
class Property:
    """How a property is judged between the two contenders' workers on a module."""

    name: str
    bits: bool = False
    min_ratio: float = DEFAULT_MIN_RATIO
    kind: str | None = None  # `error`: the kind of failure B shows on the whole bundle
    max_rounds: int = LAST_LOOK
    min_moved_ns: float = 0.0  # `slower`: B's extra median time per call a piece must hold (MIN_SHARE of the whole's)

    def hold_share_of(self, whole: "Judgement") -> None:
        """`slower`: a piece must hold MIN_SHARE of the time the whole bundle moved (B's median minus A's)."""
        if self.name == SLOWER:
            moved = float(whole.detail.get("cand_ns", 0.0)) - float(whole.detail.get("base_ns", 0.0))
            self.min_moved_ns = max(0.0, MIN_SHARE * moved)

    def judge(self, a: Runner, b: Runner, text: str, inputs: Sequence[np.ndarray]) -> Judgement:
        if self.name == SLOWER:
            return self._slower(a, b, text, inputs)
        first = a.run(text, inputs)
        if not first.ok:
            return Judgement(False, {"a_error": error_text(first)}, died=_died(a, first))
        second = b.run(text, inputs)
        if self.name == ERROR:
            if second.ok:
                return Judgement(False)
            return Judgement(self.kind is None or error_kind(second) == self.kind,
                             {"error": error_text(second), "kind": error_kind(second)})
        if not second.ok:
            return Judgement(False, {"b_error": error_text(second)}, died=_died(b, second))
        return self._outputs(first.outputs, second.outputs)

    def _outputs(self, ref: Sequence[np.ndarray], got: Sequence[np.ndarray]) -> Judgement:
        check = check_outputs([np.asarray(x) for x in ref], [np.asarray(x) for x in got])
        differs = not check["bit_identical"] if self.bits else not check["ok"]
        return Judgement(differs, {"check": check})

    def _slower(self, a: Runner, b: Runner, text: str, inputs: Sequence[np.ndarray]) -> Judgement:
        """The module compiled once on each, then paired rounds of A and B (ABBA order), one step of `repeat` calls
        each, until the sequential verdict settles, its 95% interval lies below `min_ratio` (the piece cannot show
        it) or `max_rounds`; holds when it settled slower by at least min_ratio. Each worker stays up between
        rounds (unlike a replay's fresh process per round), so the spread between processes is not in the test:
        the reduced bundle's fresh replay (fresh_check) is the verdict that has it."""
        for worker in (a, b):
            ready = worker.prepare(text, inputs)
            if not ready.ok:
                return Judgement(False, {"error": error_text(ready)}, died=_died(worker, ready))
        probe = a.time_prepared(3, warmup=1)
        if not probe.ok:
            return Judgement(False, {"a_error": error_text(probe)})
        per_call_s = max(float(np.median(probe.samples_ns)) * 1e-9, 1e-7)
        repeat = int(min(200, max(3, _STEP_TARGET_S / per_call_s)))
        base: dict = {"samples_ns": [], "steps": [], "rounds": [], "group": "minimize"}
        cand: dict = {"samples_ns": [], "steps": [], "rounds": [], "group": "minimize"}
        failed = self._paired_rounds(a, b, base, cand, repeat)
        if failed is not None:
            return Judgement(False, {"error": failed})
        verdict = timing_verdict(base, cand)
        base_ns, cand_ns = (float(np.median(t["samples_ns"] or [0])) for t in (base, cand))
        holds = (verdict.get("settled") is True and verdict.get("verdict") == SLOWER
                 and float(verdict.get("ratio", 0.0)) >= self.min_ratio and cand_ns - base_ns >= self.min_moved_ns)
        return Judgement(holds, {"verdict": verdict, "base_ns": base_ns, "cand_ns": cand_ns,
                                 "moved_ns": cand_ns - base_ns, "min_moved_ns": self.min_moved_ns})

    def _paired_rounds(self, a: Runner, b: Runner, base: dict, cand: dict, repeat: int) -> str | None:
        """Rounds of one step each side (ABBA), into `base` and `cand`, until the verdict settles or its 95%
        interval lies below min_ratio or max_rounds; a failure's text, None when all ran."""
        for r in range(self.max_rounds):
            order = ((a, base), (b, cand)) if r % 2 == 0 else ((b, cand), (a, base))
            for worker, timing in order:
                timed = worker.time_prepared(repeat, warmup=1 if r == 0 else 0)
                if not timed.ok:
                    return error_text(timed)
                timing["samples_ns"] += [int(s) for s in timed.samples_ns]
                timing["steps"].append(len(timed.samples_ns))
                timing["rounds"].append(1)
            if r + 1 >= MIN_ROUNDS:
                verdict = timing_verdict(base, cand)
                hi = (verdict.get("ci95") or [math.inf, math.inf])[1]
                if verdict.get("settled") or hi < self.min_ratio:  # settled, or its 95% interval is below the bar
                    return None
        return None


def choose_property(a: Runner, b: Runner, text: str, inputs: Sequence[np.ndarray], *, bits: bool,
                    min_ratio: float) -> tuple[Property, Judgement, str]:
    """The property the whole bundle shows, tried in order error, outputs, slower, and why it was chosen;
    UsageError when it shows none."""
    first, second = a.run(text, inputs), b.run(text, inputs)
    if first.status == "crashed":
        raise whole_death(a, first, baseline=True)
    if not first.ok:
        raise UsageError(f"the baseline fails on the whole bundle ({error_text(first)}): minimize needs a baseline "
                         "that runs it", hint="give as the first --jax a contender that runs the bundle")
    if not second.ok:
        prop = Property(ERROR, kind=error_kind(second))
        return prop, Judgement(True, {"error": error_text(second), "kind": prop.kind}), \
            "the candidate fails on the whole bundle and the baseline does not"
    outputs = Property(OUTPUTS, bits=bits)
    judged = outputs._outputs(first.outputs, second.outputs)
    if judged.holds:
        return outputs, judged, ("the outputs differ in bits" if bits else
                                 "the outputs differ beyond the tolerance a replay uses")
    check = judged.detail["check"]
    slower = Property(SLOWER, min_ratio=min_ratio)
    timed = slower.judge(a, b, text, inputs)
    if timed.holds:
        return slower, timed, "the outputs agree, and the candidate is slower by a settled paired verdict"
    within = "" if bits or check.get("bit_identical") else (
        "; the outputs differ in bits within the tolerance (--outputs --bits reduces that)")
    verdict = timed.detail.get("verdict") or {}
    raise PropertyNotShown("the whole bundle shows no difference between the contenders: both run it, the outputs agree "
                     f"within the tolerance, and the timing verdict is {verdict.get('verdict', 'unknown')}"
                     f"{' (not settled)' if verdict and not verdict.get('settled') else ''}{within}",
                     hint="name a property (--outputs, --error, --slower) to see why it does not hold")


# ------------------------------------------------------------------------------------------------ the command


@dataclass
class Minimization:
    """What minimize found: the property, the ops before and after, the candidates tested, the reduced piece (its
    module, its ops and their source lines), its bundle, and the property checked again on that bundle by a fresh
    replay (`check`)."""

    bundle: str
    bundle_id: str
    contenders: tuple[str, str]  # their labels
    property: str
    why: str  # why this property (chosen, or named by the user)
    bits: bool
    min_ratio: float
    ops_before: int
    ops_after: int
    tested: int
    elapsed_s: float
    stopped: str  # "done", "max-time" or "interrupted"
    text: str  # the piece's StableHLO
    ops: list[dict]  # per kept op: {"name", "line"}
    whole: dict  # what the whole bundle showed
    piece: dict  # what the piece showed during the search
    packed: str | None = None  # the reduced bundle's ref
    check: dict = field(default_factory=dict)  # the fresh replay of the reduced bundle
    reproduce: dict = field(default_factory=dict)  # the Reproduce block of the reduced bundle (api fills it in)
    runs: list[dict] = field(default_factory=list)  # the fresh replay's run records
    levels: int = 1  # 1: the top level only; each region opened adds one
    next: str | None = None  # the command that drafts the bug report of the reduced bundle (`reprobundle issue`)


def minimize(registry: Registry, bundle: Bundle, contenders: Sequence[ContenderSpec], *, prop: str | None = None,
             bits: bool = False, min_ratio: float = DEFAULT_MIN_RATIO, max_time_s: float | None = None,
             name: str | None = None, env_manager: EnvironmentManager | None = None,
             timeout_s: float = DEFAULT_TIMEOUT_S, check: bool = True,
             progress: Callable[[str], None] | None = None) -> Minimization:
    """Reduce `bundle` to the smallest piece that still has the property between contenders[0] (A) and
    contenders[1] (B) (see the module docstring), pack it into `registry` as `name` (default NAME-min) with its real
    inputs and provenance labels, and (`check`) replay it fresh on both to show the property still holds.
    `prop`: outputs, error or slower; None takes the property of the bundle's latest stored bisection when the
    contenders are its last good and first bad release (stored_property: bits for a change in the last bits),
    else chooses from a first run of the whole bundle on both. `max_time_s`
    bounds the search; when it runs out, or on Ctrl-C (KeyboardInterrupt, re-raised after packing), the best piece
    found so far is packed."""
    from ...run.module_server import ModuleWorker

    say = progress or (lambda _line: None)
    _check_arguments(contenders, prop, min_ratio, max_time_s, name)
    started = time.monotonic()
    deadline = started + max_time_s if max_time_s else None
    text, inputs = packed_module(registry, bundle)
    graph = graph_of(function_ops(text), "minimize")
    values = dict(zip(graph.args, inputs))
    platform = replay_platform(bundle).platform
    refuse_two_at_once(platform, "minimize")
    a_spec, b_spec = contenders
    prop, bits, stated = told_property(prop, bits, registry, bundle, contenders)
    workers = [ModuleWorker(spec, env_manager=env_manager, platform=platform, timeout_s=timeout_s,
                            memory_limit_bytes=worker_memory_limit(None, 2, platform), limits=module_limits(bundle))
               for spec in (a_spec, b_spec)]
    with handling_signals(), ExitStack() as stack:
        a, b = (stack.enter_context(w) for w in workers)
        say(Status(f"running the whole bundle ({len(graph.work)} ops) on {a_spec.label} and {b_spec.label}",
                   "minimize"))
        try:
            chosen, whole, why = _property(prop, a, b, text, inputs, bits=bits, min_ratio=min_ratio or DEFAULT_MIN_RATIO,
                                           ref=str(bundle.ref), specs=(a_spec, b_spec), registry=registry,
                                           bundle=bundle, **({"why": stated.why} if stated else {}))
        except PropertyNotShown as e:
            stack.close()  # the module workers go before the retraced replay starts its own
            raise whole_not_shown(e, stated, registry, bundle, (a_spec, b_spec), env_manager, progress) from None
        chosen.hold_share_of(whole)
        say(Status(f"property: {chosen.name} ({why})", "minimize"))
        details: dict[tuple, dict] = {}
        levels: list[Level] = []
        try:
            stopped = _reduce(levels, graph, values, chosen, a, b, details, deadline, say_progress(progress, started))
        except WorkerDeath as e:
            raise still_shown(e, registry, bundle, contenders) from None
    interrupted = stopped == "interrupted"
    level = levels[-1]
    best = candidate(level.search.best, level.graph, level.values)
    assert best is not None, "the best piece is one the search could build"
    result = Minimization(
        bundle=str(bundle.ref), bundle_id=bundle.ref.bundle_id, contenders=(a_spec.label, b_spec.label),
        property=chosen.name, why=why, bits=chosen.bits, min_ratio=chosen.min_ratio, ops_before=len(graph.work),
        ops_after=len(best.members), tested=level.search.tested, elapsed_s=time.monotonic() - started,
        stopped=stopped, text=best.cut.text, ops=op_lines(level.graph, best.members, level.line), whole=whole.detail,
        piece=details.get((id(level.graph), *best.members), whole.detail), levels=len(levels))
    target = name or f"{bundle.ref.name}-min"
    say(Status(f"packing the {counted(result.ops_after, 'op')} as {target}", "minimize"))
    result.packed = _pack(registry, bundle, best, result, target, timeout_s)
    result.next = " ".join(["reprobundle", "issue", result.packed, *map(shlex.quote, store_args(registry))])
    if interrupted:
        say(Status(f"interrupted: kept the best piece so far ({result.ops_after} of {result.ops_before} ops) as "
                   f"{result.packed}", "minimize"))
        raise KeyboardInterrupt
    if check:
        say(Status(f"replaying {result.packed} fresh on {a_spec.label} and {b_spec.label}", "minimize"))
        packed = registry.resolve(result.packed)
        result.runs, result.check = fresh_check(registry, packed, (a_spec, b_spec), chosen, env_manager=env_manager,
                                                timeout_s=timeout_s)
        result.reproduce = reproduce_info(registry, packed, concrete_versions(result.runs),
                                          extra_args=variant_args(result.runs, concrete_versions), context="snippet")
    return result


def module_limits(bundle: Bundle) -> PhaseLimits:
    """The candidates' phase limits: a replay's defaults, each call within the runaway limit of the whole bundle's
    reference (no piece of the function computes more than the function: a call past it never ends)."""
    reference_ns = ((bundle.manifest.get("reference") or {}).get("timing") or {}).get("samples_ns")
    return ReplayOptions().limits(reference_ns)


def still_shown(death: WorkerDeath, registry: Registry, bundle: Bundle, specs: Sequence[ContenderSpec]) -> WorkerDeath:
    """A worker's death during the search, said with what still stands: the whole bundle showed the change, and
    its replay (or the issue's zip) reproduces it."""
    sides = [a for s in specs for a in (("--variant", f"{s.jax}:{s.settings.describe()}") if s.settings else
                                         ("--jax", s.jax))]
    command = shlex.join(["reprobundle", "replay", str(bundle.ref), *sides, *store_args(registry)])
    return WorkerDeath(f"{death.message}; the change still shows on the whole bundle: `{command}` or the issue's zip "
                       "reproduce it", hint="minimize another pair of releases, or report the whole bundle")


def _check_arguments(contenders: Sequence[ContenderSpec], prop: str | None, min_ratio: float | None,
                     max_time_s: float | None, name: str | None) -> None:
    if len(contenders) != 2:
        raise UsageError(f"minimize compares two contenders, not {len(contenders)}",
                         hint='give --jax twice, or --jax A --variant "A:XLA_FLAGS=..."')
    if prop is not None and prop not in PROPERTIES:
        raise UsageError(f"unknown property {prop!r}", hint="one of " + ", ".join(PROPERTIES))
    if min_ratio is not None and not min_ratio > 1.0:
        raise UsageError(f"invalid --min-ratio {min_ratio}", hint="a ratio above 1, e.g. 1.1")
    if max_time_s is not None and not max_time_s > 0:
        raise UsageError(f"invalid --max-time {max_time_s}", hint="seconds, above 0")
    if name is not None:
        check_name(name)


def _reduce(levels: list[Level], graph: FunctionGraph, values: dict[str, np.ndarray], prop: Property, a: Runner,
            b: Runner, details: dict, deadline: float | None, show: Callable[..., Callable[[list, int], None]]) -> str:
    """The search, level after level, into `levels`: "done", "max-time", or "interrupted" (Ctrl-C once the first
    level exists; before, KeyboardInterrupt propagates)."""
    try:
        intermediate_values(a, graph, values)
        levels.append(Level(graph, values, Search(
            functools.partial(_holds, graph=graph, values=values, prop=prop, a=a, b=b, details=details), deadline,
            show(len(graph.work)), best=list(graph.work))))
        levels[0].search.ddmin(graph.work)
        _open_regions(levels, prop, a, b, details, deadline, show)
    except OutOfTime:
        return "max-time"
    except KeyboardInterrupt:
        if not levels:
            raise
        return "interrupted"
    return "done"


@dataclass
class Level:
    """One level of the search: a function (the bundle's, or the piece with a region opened), the real values of
    everything it computes, and the ddmin over its ops."""

    graph: FunctionGraph
    values: dict[str, np.ndarray]
    search: Search
    line: str | None = None  # below the top: the source line of the op opened (its ops' text has no locations)


OPENABLE = ("func.call", "stablehlo.while")
MAX_LEVELS = 4


def _open_regions(levels: list[Level], prop: Property, a: Runner, b: Runner, details: dict, deadline: float | None,
                  show: Callable[..., Callable[[list, int], None]]) -> None:
    """Below the top level: the best piece's first call or while whose opened form (see the module docstring)
    still has the property becomes the next level, reduced in turn, until none does, its values kill A's worker
    (WorkerDeath: the piece above is the answer) or MAX_LEVELS. A piece that is one call is its callee already
    (function_ops reads through such a wrapper)."""
    serial = [0]
    while len(levels) < MAX_LEVELS:
        level = levels[-1]
        best = candidate(level.search.best, level.graph, level.values)
        if best is None:
            return
        piece = graph_of(function_ops(best.cut.text), "minimize")
        lines = [op["line"] for op in op_lines(level.graph, best.members, level.line)]
        if piece.name != "main":
            text, line = best.cut.text, (lines or [None])[0]
        else:
            found = _first_opened(piece, best, lines, level, prop, a, b, deadline, serial)
            if found is None:
                return
            text, line = found
        graph = graph_of(function_ops(text), "minimize")
        values = dict(zip(graph.args, best.inputs))
        try:
            intermediate_values(a, graph, values)
        except WorkerDeath:  # the region's values kill A's worker, even op by op: the piece above stands
            return
        deeper = Level(graph, values, Search(
            functools.partial(_holds, graph=graph, values=values, prop=prop, a=a, b=b, details=details), deadline,
            show(len(graph.work), len(levels)), best=list(graph.work), tested=level.search.tested), line)
        levels.append(deeper)
        deeper.search.ddmin(graph.work)


def _first_opened(piece: FunctionGraph, best: Candidate, lines: list, level: Level, prop: Property, a: Runner,
                  b: Runner, deadline: float | None, serial: list[int]) -> tuple[str, str | None] | None:
    """The piece with its first call or while opened such that the property still holds, and that op's line."""
    for k, i in enumerate(piece.work):
        if piece.ops[i].name not in OPENABLE:
            continue
        region = region_ops(best.cut.text, i)
        serial[0] += 1
        text = opened(piece, i, region, serial[0]) if region is not None else None
        if text is None:
            continue
        if deadline is not None and time.monotonic() > deadline:
            raise OutOfTime()
        level.search.tested += 1
        if prop.judge(a, b, text, best.inputs).holds:
            return text, lines[k] if k < len(lines) else level.line
    return None


def packed_module(registry: Registry, bundle: Bundle) -> tuple[str, list[np.ndarray]]:
    """The bundle's StableHLO and inputs; a module with symbolic shapes specialized to its packed sizes."""
    text_ref = bundle.manifest["function"].get("stablehlo_text")
    if not text_ref:
        raise UsageError(f"{bundle.ref} holds no StableHLO text to reduce")
    text = registry.get_blob(text_ref).decode("utf-8", "replace")
    inputs = bundle_inputs(registry, bundle)
    function = bundle.manifest["function"]
    fields = function.get("fields") or {}
    symbolic = any(isinstance(d, str) for aval in fields.get("in_avals") or [] for d in aval["shape"])
    if symbolic and function.get("exported"):  # jax's own call of the artifact at the packed sizes, refined
        return concrete_module(registry.get_blob(function["exported"]), inputs), inputs
    kept = fields.get("module_kept_var_idx")
    if kept is not None:  # jax.export drops the arguments the function does not use from @main
        inputs = [inputs[i] for i in kept]
    if "tensor<?" in text:
        text = load_stablehlo(text, [x.shape for x in inputs]).stablehlo_text
    return text, inputs


def _died(runner: Runner, outcome: Any) -> tuple[Runner, Any] | None:
    return (runner, outcome) if outcome.status == "crashed" else None


def whole_death(runner: Runner, outcome: Any, *, baseline: bool) -> WorkerDeath:
    """A worker that died on the whole bundle (in a fresh one too), in words: the baseline's ends minimize; the
    candidate's, where another property than error was asked for, is what `--error` reduces."""
    said = died_text(runner.contender, outcome, "the whole bundle")
    if baseline:
        return WorkerDeath(f"{said}: minimize needs a baseline that runs it",
                           hint="give as the first --jax a contender that runs the bundle")
    return WorkerDeath(f"{said}: the two cannot be compared on it", hint="--error keeps a piece that still kills it")


def _property(prop: str | None, a: Runner, b: Runner, text: str, inputs: list[np.ndarray], *, bits: bool,
              min_ratio: float, ref: str, specs: tuple[ContenderSpec, ContenderSpec], registry: Registry,
              bundle: Bundle, why: str = "named on the command line") -> tuple[Property, Judgement, str]:
    """The property to keep (named, or chosen), what the whole bundle showed, and why; UsageError when the whole
    bundle does not have it (a lowering change named as such where the bundle can be retraced)."""
    if prop is None:
        return choose_property(a, b, text, inputs, bits=bits, min_ratio=min_ratio)
    chosen = Property(prop, bits=bits, min_ratio=min_ratio)
    if prop == ERROR:
        failed = b.run(text, inputs)
        chosen.kind = None if failed.ok else error_kind(failed)
    judged = chosen.judge(a, b, text, inputs)
    if judged.died is not None:
        runner, outcome = judged.died
        raise whole_death(runner, outcome, baseline=runner is a)
    if not judged.holds:
        raise not_shown(chosen, judged, ref, specs, bundle)
    return chosen, judged, why


def _holds(members: list, graph: FunctionGraph, values: dict[str, np.ndarray], prop: Property, a: Runner, b: Runner,
           details: dict[tuple, dict]) -> bool:
    made = candidate(members, graph, values)
    if made is None or (prop.name == SLOWER and not made.inputs):  # constants alone: nothing of the program flows
        return False
    judged = prop.judge(a, b, made.cut.text, made.inputs)
    if judged.holds:
        details[(id(graph), *made.members)] = judged.detail
    return judged.holds


def _pack(registry: Registry, bundle: Bundle, best: Candidate, result: Minimization, target: str,
          timeout_s: float) -> str:
    """The piece packed with its real inputs; its labels say where it came from."""
    kept = "; ".join(f"{op['name'].split('.')[-1]}" + (f" ({op['line']})" if op["line"] else "") for op in result.ops)
    labels = {"minimized-from": result.bundle, "minimized-from-id": result.bundle_id,
              "minimized-property": result.property + (" --bits" if result.bits else ""),
              "minimized-contenders": " vs ".join(result.contenders), "minimized-ops": kept}
    options = PackOptions(name=target, description=f"{result.ops_after} of the {result.ops_before} ops of "
                                                   f"{result.bundle} that still show {result.property} between "
                                                   f"{result.contenders[0]} and {result.contenders[1]}",
                          labels=labels, timeout_s=timeout_s, dump=False, profile=False)
    made = pack(registry, load_stablehlo(best.cut.text), best.inputs, options, parent=bundle.ref.bundle_id,
                source=best.cut.text)
    return f"{made.name}@{made.version}"


def fresh_check(registry: Registry, packed: Bundle, specs: Sequence[ContenderSpec], prop: Property, *,
                env_manager: EnvironmentManager | None, timeout_s: float) -> tuple[list[dict], dict]:
    """The reduced bundle replayed on both contenders (stored runs): whether it still has the property, with the
    output check and its worst element, B's error, or the paired verdict and its interval."""
    slower = prop.name == SLOWER
    options = ReplayOptions(warmup=1, repeat=DEFAULT_STEPS if slower else 2, rounds=None if slower else 1,
                            max_time_s=CHECK_MAX_TIME_S if slower else None, timeout_s=timeout_s, dump=False,
                            profile=False)
    runs = replay(registry, packed, list(specs), options, env_manager=env_manager)
    return runs, _checked(registry, packed, runs, prop)


def _checked(registry: Registry, packed: Bundle, runs: list[dict], prop: Property) -> dict:
    slower = prop.name == SLOWER
    base, cand = runs
    out: dict[str, Any] = {"runs": [{"contender": r["contender"]["label"], "status": r["status"],
                                     "reason": r.get("reason", "")} for r in runs]}
    if base["status"] not in ("ok", "mismatch"):
        return {**out, "holds": False, "why": f"A: {base['status']}: {base.get('reason', '')}"}
    if prop.name == ERROR:
        failed = cand["status"] not in ("ok", "mismatch")
        return {**out, "holds": failed, "error": cand.get("reason", "") if failed else None}
    if cand["status"] not in ("ok", "mismatch"):
        return {**out, "holds": False, "why": f"B: {cand['status']}: {cand.get('reason', '')}"}
    if slower:
        return {**out, **_checked_slower(base, cand, prop)}
    arrays = [[leaf_array(registry.get_blob(leaf["blob"]), leaf) for leaf in r["outputs"]] for r in (base, cand)]
    check = check_outputs(arrays[0], arrays[1], output_names(packed.manifest))
    holds = not check["bit_identical"] if prop.bits else not check["ok"]
    return {**out, "holds": holds, "check": {k: v for k, v in check.items() if k != "leaves"},
            "worst": check.get("worst")}


def _checked_slower(base: dict, cand: dict, prop: Property) -> dict:
    """The fresh replay's paired verdict, held to the search's bar: settled slower by at least min_ratio, and B's
    extra median time per call at least the share of the whole bundle's that the search asked of a piece."""
    verdict = timing_verdict(base["timing"], cand["timing"])
    moved = _median_ns(cand) - _median_ns(base)
    holds = verdict.get("verdict") == SLOWER and bool(verdict.get("settled")) and \
        float(verdict["ratio"]) >= prop.min_ratio
    out: dict = {"holds": holds, "verdict": verdict, "moved_ns": moved, "min_moved_ns": prop.min_moved_ns}
    if holds and moved < prop.min_moved_ns:
        out.update(holds=False, why=f"B is slower by {moved / 1e3:.3g} us a call, under {MIN_SHARE:.0%} of the "
                                    f"whole bundle's {prop.min_moved_ns / MIN_SHARE / 1e3:.3g} us: not the time "
                                    "that moved")
    elif not holds:
        out["why"] = (f"no settled slowdown of at least {prop.min_ratio:.2f}x (verdict {verdict.get('verdict')}, "
                      f"ratio {float(verdict.get('ratio') or 0):.3f}x"
                      f"{'' if verdict.get('settled') else ', not settled'})")
    return out


def _median_ns(run: dict) -> float:
    samples = (run.get("timing") or {}).get("samples_ns") or []
    return float(np.median(samples)) if samples else 0.0


def could_not_shrink(result: "Minimization") -> str | None:
    """Why the answer is the whole bundle and no piece: the search kept every op, or the piece it kept did not hold
    the property again on the fresh replay. None when the piece stands."""
    if result.levels == 1 and result.ops_after >= result.ops_before:  # a region opened is smaller by itself
        return f"could not shrink below {result.ops_before} ops: no smaller piece showed {result.property}" + (
            f" holding {MIN_SHARE:.0%} of the time that moved" if result.property == SLOWER else "")
    if result.check and not result.check.get("holds", True):
        return (f"could not shrink below {result.ops_before} ops: the {result.ops_after}-op piece did not show "
                f"{result.property} again on a fresh replay")  # why: the check's own line
    return None


def op_lines(graph: FunctionGraph, members: Sequence[int], inside: str | None = None) -> list[dict]:
    """Per op kept: its name and its source line (`file.py:12`); an op without a location inside an opened region
    gets the line of the op opened (`inside`), else None."""
    return [{"name": graph.ops[i].name, "line": location_key(graph.ops[i].location) or inside} for i in members]


def say_progress(progress: Callable[[str], None] | None,
                 started: float) -> Callable[..., Callable[[list, int], None]]:
    """The search's progress line of a level of `total` ops (`depth` regions opened above it): the op count
    shrinking and the candidates tested."""
    last = [0.0]

    def level(total: int, depth: int = 0) -> Callable[[list, int], None]:
        where = f" inside the region opened ({depth} down)" if depth else ""

        def show(best: list, tested: int) -> None:
            now = time.monotonic()
            if progress is None or now - last[0] < 0.5:
                return
            last[0] = now
            progress(Status(f"{len(best)} of {counted(total, 'op')}{where} still show it so far; "
                            f"{counted(tested, 'candidate')} tested "
                            f"({now - started:.0f} s)", "minimize"))

        return show

    return level
