"""Bisect: the first released JAX version between a good and a bad one where a bundle regressed.

The regression is what tells the two endpoints apart: wrong outputs (when the bad one mismatches and the good
one does not), otherwise time. A version is bad for time when it is significantly slower than the good
endpoint (Mann-Whitney on the raw samples) and at least half-way there in log-ratio terms.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

from .compare import TimingSummary, timing_verdict
from .errors import UsageError

ReplayOne = Callable[[str], dict]  # version -> run record


def _vkey(v: str) -> tuple[int, ...]:
    return tuple(int(p) for p in v.split(".") if p.isdigit())


@dataclass
class BisectResult:
    good: str
    bad: str
    criterion: str  # "outputs" or "time"
    first_bad: str | None
    last_good: str | None
    runs: dict[str, dict] = field(default_factory=dict)  # version -> run record, every version tested
    classes: dict[str, str] = field(default_factory=dict)  # version -> "good" / "bad" / "skip"
    candidates: list[str] = field(default_factory=list)


def _samples(run: dict) -> list[int]:
    return (run.get("timing") or {}).get("samples_ns") or []


def _usable(run: dict) -> bool:
    return run["status"] in ("ok", "mismatch")


def classify(run: dict, good: dict, bad: dict, criterion: str) -> str:
    if not _usable(run):
        return "skip"
    if criterion == "outputs":
        return "bad" if run["status"] == "mismatch" else "good"
    target = math.log(TimingSummary.of(_samples(bad)).median_ns / TimingSummary.of(_samples(good)).median_ns)
    verdict = timing_verdict(_samples(good), _samples(run))
    moved = math.log(verdict["ratio"]) if verdict["ratio"] > 0 else 0.0
    same_direction = verdict["verdict"] == ("slower" if target > 0 else "faster")
    return "bad" if same_direction and abs(moved) >= abs(target) / 2 else "good"


def bisect(versions: Sequence[str], good: str, bad: str, replay_one: ReplayOne,
           progress: Callable[[str], None] | None = None) -> BisectResult:
    """Binary search over the released `versions` strictly between `good` and `bad`."""
    ordered = sorted(set(versions) | {good, bad}, key=_vkey)
    if _vkey(good) >= _vkey(bad):
        raise UsageError(f"--good {good} must be older than --bad {bad}")
    candidates = [v for v in ordered if _vkey(good) < _vkey(v) < _vkey(bad)]
    result = BisectResult(good, bad, "time", None, None, candidates=candidates)
    for endpoint in (good, bad):
        result.runs[endpoint] = replay_one(endpoint)
    g, b = result.runs[good], result.runs[bad]
    for name, run in (("good", g), ("bad", b)):
        if not _usable(run):
            raise UsageError(f"the {name} version {run['requested']} did not run: {run['status']}: {run['reason']}",
                             hint="pick endpoints on which the bundle runs")
    if b["status"] == "mismatch" and g["status"] == "ok":
        result.criterion = "outputs"
    elif timing_verdict(_samples(g), _samples(b))["verdict"] == "same":
        raise UsageError(f"jax {good} and {bad} are not distinguishable: same outputs and no significant time change",
                         hint="replay with more --repeat, or pick other endpoints")
    result.classes = {good: "good", bad: "bad"}

    last_good, first_bad = good, bad
    remaining = list(candidates)  # untested versions strictly between last_good and first_bad, ascending
    while remaining:
        version = remaining[len(remaining) // 2]
        if progress:
            progress(f"bisect: {len(remaining)} versions left between {last_good} and {first_bad}; testing {version}")
        run = replay_one(version)
        result.runs[version] = run
        cls = result.classes[version] = classify(run, g, b, result.criterion)
        if cls == "skip":  # untestable: decide without it
            remaining.remove(version)
        elif cls == "bad":
            first_bad = version
            remaining = [v for v in remaining if _vkey(v) < _vkey(version)]
        else:
            last_good = version
            remaining = [v for v in remaining if _vkey(v) > _vkey(version)]
    result.first_bad, result.last_good = first_bad, last_good
    return result

    
def skipped_between(result: BisectResult) -> list[str]:
    """Versions between the last good and the first bad that could not be tested (the answer is a range then)."""
    lo, hi = _vkey(result.last_good), _vkey(result.first_bad)
    return [v for v, c in result.classes.items() if c == "skip" and lo < _vkey(v) < hi]
