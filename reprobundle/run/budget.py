"""How many rounds a replay times: fixed (`--rounds N`), or adaptive, as few as settle every verdict.

The adaptive budget times rounds of STEPS_PER_ROUND steps (the old fixed budget's round: 100 steps in 8 rounds) and,
after each round from the third on, asks the group-sequential test (analysis/sequential.py) whether each version's
verdict against the baseline (the first version still running) is settled: a version whose verdict is settled
retires, so the next rounds are cheaper; the baseline runs while any version is unsettled. It ends when every
verdict is settled, at LAST_LOOK rounds, or when another round would end past `max_time_s` (counted from the first
round's start; at least FIRST_LOOK rounds always run, since no verdict exists before them). The test's error rates
hold for any such stopping rule, since they are those of all its looks.
"""

from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Sequence

from ..analysis import sequential
from ..analysis.verdict import paired_log_ratios
from .schedule import DEFAULT_ROUNDS, DEFAULT_STEPS, Measurement, rounds_for

STOP_SETTLED = "settled"
STOP_ROUNDS = "round cap"
STOP_TIME = "time limit"
STOP_FIXED = "fixed rounds"
STOP_ALONE = "nothing to compare"


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

    @property
    def steps(self) -> int:
        return self.steps_per_round * self.rounds

    def begin(self) -> None:
        self.start = time.monotonic()

    def more(self, measured: dict[str, Measurement], done: int) -> list[str]:
        """The keys that take another round (schedule.MoreRounds)."""
        now = time.monotonic()
        if self.start is None:
            self.start = now
        self.round_ends.append(now)
        alive = [k for k in self.keys if measured[k].failed_round is None]
        if len(alive) < 2:
            self.stopped = STOP_ALONE
            return []
        base = alive[0]
        unsettled = []
        for key in alive[1:]:
            if key in self.decided:
                continue
            ratios = paired_log_ratios(_timing(measured[base]), _timing(measured[key])) or []
            found = sequential.first_decision(ratios)
            if found.decision is not None:
                self.decided[key] = found.decision
            else:
                unsettled.append(key)
        if not unsettled:
            self.stopped = STOP_SETTLED
            return []
        if done >= self.rounds:
            self.stopped = STOP_ROUNDS
            return []
        if done >= sequential.FIRST_LOOK and self.max_time_s is not None and now + self._next_round() > (
                self.start + self.max_time_s):
            self.stopped = STOP_TIME
            return []
        return [base] + unsettled

    def _next_round(self) -> float:
        """What the next round should take: the median of the rounds after the first (whose workers compiled one
        at a time), else the first's."""
        ends = [self.start] + self.round_ends
        took = [b - a for a, b in zip(ends, ends[1:])]
        return statistics.median(took[1:]) if len(took) > 1 else took[0]

    def describe(self, rounds_run: int) -> dict:
        """What the run records keep (environment.conditions.schedule)."""
        out = {"adaptive": self.adaptive, "rounds": rounds_run, "steps_per_round": self.steps_per_round,
               "stopped": self.stopped or (STOP_FIXED if not self.adaptive else STOP_ROUNDS)}
        if self.adaptive:
            out["max_rounds"] = self.rounds
            if self.max_time_s is not None:
                out["max_time_s"] = self.max_time_s
        return out


def _timing(m: Measurement) -> dict:
    return {"samples_ns": m.samples_ns, "steps": m.steps, "rounds": m.rounds, "group": "-"}


STEPS_PER_ROUND = math.ceil(DEFAULT_STEPS / DEFAULT_ROUNDS)


def plan(keys: Sequence[str], repeat: int, rounds: int | None, max_time_s: float | None = None,
         max_rounds: int | None = None) -> Budget:
    """Fixed `rounds` (repeat over them) when given or when there is nothing to compare; else adaptive rounds of
    repeat / DEFAULT_ROUNDS steps, up to `max_rounds` (default sequential.LAST_LOOK)."""
    if rounds is not None or len(keys) < 2:
        n = rounds_for(len(keys), repeat, rounds)
        return Budget(False, n, max(1, math.ceil(repeat / n)), keys)
    cap = max(sequential.FIRST_LOOK, max_rounds or sequential.LAST_LOOK)
    return Budget(True, cap, max(1, math.ceil(repeat / DEFAULT_ROUNDS)), list(keys), max_time_s)
