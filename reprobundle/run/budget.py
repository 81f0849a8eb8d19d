"""How many rounds a replay times: fixed (`--rounds N`), or adaptive, as few as settle every verdict.

The adaptive budget times rounds of STEPS_PER_ROUND steps (the old fixed budget's round: 100 steps in 8 rounds) and,
after each round from the third on, asks the group-sequential test (analysis/sequential.py) whether each version's
verdict against the baseline (the first version still running) is settled: a version whose verdict is settled
retires, so the next rounds are cheaper; with `ends` (a time bisection's probe: the change its endpoints measured,
analysis/which_end.py) a version also retires once the sequential test between the two ends says which end it is
like, at the same looks (its paired verdict then has the rounds a search for a time that moves more than once
reads); with `slowdown_only` (a time bisection's endpoints, screens and confirmations: only a slowdown is a
regression, and only one beyond sequential.DETECT_EFFECT is a change: analysis/resolution.py) a version retires
once a slowdown of DETECT_EFFECT is ruled out (sequential.slowdown_ruled_out_at) or shown beyond it
(sequential.beyond_at), not once it is settled slower: a settled 1.04x goes on until its interval says which side
of 1.05 it lies; the baseline runs while any version is unsettled. A control (`controls`: the baseline's own
release as a contender of its own, the A/A control of analysis/resolution.py) is timed in the same rounds but never
keeps the measurement going by itself: it ends when the versions it controls are answered. It ends when every
verdict is settled, at LAST_LOOK rounds (or the `max_rounds` asked: a time screen's few), or when another round
would end past `max_time_s`, counted from `begin` (the replay's start: its environments and the first round's
compiles are in it).
The time bound holds from the second round on: one round always runs, since nothing is answered
without it, and a measurement the bound ends before FIRST_LOOK rounds keeps its rounds, its verdict unsettled (a
user who gave --max-time asked for the answer by then). The test's error rates hold for any such stopping rule,
since they are those of all its looks.

Several comparisons can share one measurement (`groups`: the versions of each of several bundles, replay.py's
replay_together); each group's first version still running is its baseline. With `largest_move` the groups are the
pieces of one function (isolate): a piece that cannot hold the function's largest move (analysis/piece_selection.py) stops
being timed, settled or not, and the measurement ends when every piece is settled or ruled out.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..analysis import piece_selection, sequential, which_end
from ..analysis.verdict import paired_log_ratios, step_medians
from .schedule import DEFAULT_ROUNDS, DEFAULT_STEPS, Measurement, rounds_for

STOP_SETTLED = "settled"
STOP_ROUNDS = "round cap"
STOP_TIME = "time limit"
STOP_FIXED = "fixed rounds"
STOP_ALONE = "nothing to compare"
STOP_SELECTED = "largest move found"
STOP_RULED_OUT = "cannot hold the largest move"  # one piece's, when the others went on
STOP_SIDED = "which end decided"  # a bisection's probe: the test between the change's two ends said its side
STOP_NO_SLOWDOWN = "slowdown ruled out"  # only a slowdown was asked about, and a 5% one is ruled out


@dataclass
class Budget:
    """The rounds of one measurement: `rounds` (the cap when adaptive), `steps` (over `rounds`, so that each round
    gets steps_per_round), and for an adaptive one the state its `more` callback keeps."""

    adaptive: bool
    rounds: int
    steps_per_round: int
    keys: Sequence[str] = ()
    max_time_s: float | None = None
    stopped: str = ""
    round_ends: list[float] = field(default_factory=list)
    start: float | None = None
    decided: dict[str, str] = field(default_factory=dict)  # key -> "slower"/"faster"/"same", as it settled
    groups: Sequence[Sequence[str]] = ()  # the comparisons (default: every key in one)
    largest_move: bool = False  # the groups are pieces of one function: retire those that cannot hold its largest move
    retired: dict[str, int] = field(default_factory=dict)  # key -> the round after which it could not matter
    ends: which_end.Ends | None = None  # a bisection's probe: also stop a version once its side of the change is known
    sided: dict[str, str] = field(default_factory=dict)  # key -> "good"/"bad", as the test between the ends said it
    slowdown_only: bool = False  # only a slowdown answers the question: stop a version once one is ruled out
    no_slowdown: dict[str, int] = field(default_factory=dict)  # key -> the round whose look ruled a slowdown out
    controls: frozenset[str] = frozenset()  # A/A controls: timed while another version of their group runs
    clock: Callable[[], float] = field(default=time.monotonic, repr=False, compare=False)  # seconds; tests fake it

    @property
    def steps(self) -> int:
        return self.steps_per_round * self.rounds

    def begin(self, at: float | None = None) -> None:
        """The time `max_time_s` counts from: `at` (a `clock()` reading taken earlier, e.g. the replay's start),
        else now."""
        self.start = self.clock() if at is None else at

    def more(self, measured: dict[str, Measurement], done: int) -> list[str]:
        """The keys that take another round (schedule.MoreRounds)."""
        now = self.clock()
        if self.start is None:
            self.start = now
        self.round_ends.append(now)
        looked = self._look(measured)
        if looked is None:
            self.stopped = STOP_ALONE
            return []
        running, pieces = looked
        if self.largest_move:
            running = self._retire_pieces(running, pieces, done)
        stop = self._stop_reason(running, done, now)
        if stop:
            self.stopped = stop
            return []
        return [key for base, candidates in running.items() for key in [base] + candidates]

    def _look(self, measured: dict[str, Measurement]) -> tuple[dict[str, list[str]], list] | None:
        """One look of the sequential test at every group: the keys it settles go to `decided`. Returns each
        baseline's unsettled candidates and, with `largest_move`, every piece's comparison; None when no group has
        two versions still running."""
        running: dict[str, list[str]] = {}  # baseline -> its unsettled candidates
        pieces: list[piece_selection.Comparison] = []
        compared = False
        for group in self.groups or [self.keys]:
            alive = [k for k in group if measured[k].failed_round is None]
            if len(alive) < 2:
                continue
            compared = True
            base = alive[0]
            for key in alive[1:]:
                if self._look_at(base, key, measured, pieces):
                    running.setdefault(base, []).append(key)
        # a control never keeps a measurement going by itself: it is timed while what it controls is
        running = {base: keys for base, keys in running.items() if set(keys) - self.controls}
        return (running, pieces) if compared else None

    def _look_at(self, base: str, key: str, measured: dict[str, Measurement], pieces: list) -> bool:
        """One candidate against its group's baseline: its comparison joins `pieces` (with `largest_move`), a
        decision goes to `decided`. Whether it is still running unsettled."""
        stopped = key in self.decided or key in self.retired or key in self.sided or key in self.no_slowdown
        if stopped and not self.largest_move:
            return False
        ratios = paired_log_ratios(_timing(measured[base]), _timing(measured[key])) or []
        if self.largest_move and ratios:
            pieces.append(_comparison(key, ratios, measured[base], measured[key]))
        return not stopped and not self._answered(key, ratios)

    def _answered(self, key: str, ratios: list[float]) -> bool:
        """Whether this look answers `key`'s question (then it is recorded as decided, sided or ruled out)."""
        # from the first look on, as the group-sequential test: the probe's paired verdict, which a time that moves
        # more than once is found by (window_changes.time_windows), needs those rounds
        if self.ends is not None and len(ratios) >= sequential.FIRST_LOOK:
            side = which_end.which_end(ratios, self.ends).side
            if side is not None:
                self.sided[key] = side
                return True
        found = sequential.first_decision(ratios)
        if found.decision is not None and not (self.slowdown_only and found.decision == "slower"):
            self.decided[key] = found.decision
            return True
        if not self.slowdown_only:
            return False
        if sequential.beyond_at(ratios) is not None:  # a slowdown beyond the resolution: the change is shown
            self.decided[key] = "slower"
            return True
        ruled_out = sequential.slowdown_ruled_out_at(ratios)
        if ruled_out is not None:
            self.no_slowdown[key] = ruled_out
            return True
        return False

    def _retire_pieces(self, running: dict[str, list[str]], pieces: list[piece_selection.Comparison],
                       done: int) -> dict[str, list[str]]:
        """`running` without the pieces that cannot hold the function's largest move (retired after round
        `done`)."""
        gone = piece_selection.cannot_matter(pieces)
        for candidates in running.values():
            self.retired.update((key, done) for key in candidates if key in gone)
            candidates[:] = [key for key in candidates if key not in gone]
        return {base: candidates for base, candidates in running.items() if candidates}

    def _stop_reason(self, running: dict[str, list[str]], done: int, now: float) -> str:
        """Why the measurement ends after round `done` ("" when another round runs)."""
        if not running:
            return (STOP_SELECTED if self.retired else STOP_SIDED if self.sided else
                    STOP_NO_SLOWDOWN if self.no_slowdown else STOP_SETTLED)
        if done >= self.rounds:
            return STOP_ROUNDS
        assert self.start is not None
        if self.max_time_s is not None and now + self._next_round(self.start) > self.start + self.max_time_s:
            return STOP_TIME
        return ""

    def _next_round(self, start: float) -> float:
        """What the next round should take: the median of the rounds after the first (whose workers compiled one
        at a time), else the first's."""
        ends = [start] + self.round_ends
        took = [b - a for a, b in zip(ends, ends[1:])]
        return statistics.median(took[1:]) if len(took) > 1 else took[0]

    def describe(self, rounds_run: int, key: str | None = None) -> dict:
        """What the run records keep (environment.conditions.schedule); for `key`, a piece ruled out early says so."""
        out = {"adaptive": self.adaptive, "rounds": rounds_run, "steps_per_round": self.steps_per_round,
               "stopped": self.stopped or (STOP_FIXED if not self.adaptive else STOP_ROUNDS)}
        if key in self.retired:
            out.update(rounds=self.retired[key], stopped=STOP_RULED_OUT)
        if self.adaptive:
            out["max_rounds"] = self.rounds
            if self.max_time_s is not None:  # and when each round ended, from `begin`: none started past the bound
                out["max_time_s"] = self.max_time_s
                out["round_ends_s"] = [round(end - (self.start or end), 3) for end in self.round_ends[:rounds_run]]
        return out


def _timing(m: Measurement) -> dict:
    return {"samples_ns": m.samples_ns, "steps": m.steps, "rounds": m.rounds, "group": "-"}


def _comparison(key: str, ratios: list[float], base: Measurement, candidate: Measurement) -> piece_selection.Comparison:
    first_base = (step_medians(_timing(base)) or [[]])[0]
    first_cand = (step_medians(_timing(candidate)) or [[]])[0]
    steps = [math.log(c / b) for b, c in zip(first_base, first_cand) if b > 0 and c > 0]
    return piece_selection.Comparison(key, ratios, statistics.median(base.samples_ns), steps)


STEPS_PER_ROUND = math.ceil(DEFAULT_STEPS / DEFAULT_ROUNDS)


def plan(keys: Sequence[str], repeat: int, rounds: int | None, max_time_s: float | None = None,
         max_rounds: int | None = None, groups: Sequence[Sequence[str]] = (), largest_move: bool = False,
         ends: which_end.Ends | None = None, slowdown_only: bool = False, controls: Sequence[str] = ()) -> Budget:
    """Fixed `rounds` (repeat over them) when given or when there is nothing to compare; else adaptive rounds of
    repeat / DEFAULT_ROUNDS steps, up to `max_rounds` (default sequential.LAST_LOOK), for the comparisons `groups`
    (default: all keys in one), stopping a version early once its side of `ends` is known or, with
    `slowdown_only`, once a slowdown is ruled out or shown beyond the resolution; `controls` never keep it going
    (see Budget)."""
    if rounds is not None or len(keys) < 2:
        n = rounds_for(len(keys), repeat, rounds)
        return Budget(False, n, max(1, math.ceil(repeat / n)), keys)
    cap = max(sequential.FIRST_LOOK, max_rounds or sequential.LAST_LOOK)
    return Budget(True, cap, max(1, math.ceil(repeat / DEFAULT_ROUNDS)), list(keys), max_time_s,
                  groups=[list(g) for g in groups], largest_move=largest_move, ends=ends,
                  slowdown_only=slowdown_only, controls=frozenset(controls))
