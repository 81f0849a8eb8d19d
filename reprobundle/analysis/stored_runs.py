"""Which stored runs a comparison uses: the latest replay that timed the requested versions together, else the
latest run of each (not comparable in time)."""

from __future__ import annotations

from collections import Counter
from typing import Sequence

from ..bundle.model import run_label


def _group_of(run: dict) -> str | None:
    return run.get("group") or (run.get("timing") or {}).get("group")


def _take_in_order(runs: Sequence[dict], versions: Sequence[str]) -> list[dict]:
    """For each requested version in turn, the first of `runs` not taken yet (a version named twice, as in
    `--jax installed --jax installed`, gets two distinct runs); versions without a run are left out."""
    pool = list(runs)
    chosen = []
    for v in versions:
        run = next((r for r in pool if run_label(r) == v), None)
        if run is not None:
            pool.remove(run)
            chosen.append(run)
    return chosen


def select_runs(runs: Sequence[dict], versions: list[str] | None) -> tuple[list[dict], str]:
    """The runs to compare (oldest first in, chosen out) and a sentence saying which and why."""
    latest_first = _replays_latest_first(runs)
    every = sorted({run_label(r) for r in runs})
    for members in latest_first:
        if not _holds(members, versions):
            continue
        chosen = members if versions is None else _take_in_order(members, versions)
        return list(chosen), _together_text(chosen, every)
    return _latest_of_each(runs, versions)


def _replays_latest_first(runs: Sequence[dict]) -> list[list[dict]]:
    """The runs of each replay (`group`), the latest replay first."""
    groups: dict[str, list[dict]] = {}
    for run in runs:
        group = _group_of(run)
        if group:
            groups.setdefault(group, []).append(run)
    return sorted(groups.values(), key=lambda g: max(r["created"] for r in g), reverse=True)


def _holds(members: list[dict], versions: list[str] | None) -> bool:
    """Whether a replay's runs hold every requested version (as often as requested), or, with none requested, two
    runs or more."""
    have = [run_label(r) for r in members]
    if versions is None:
        return len(members) >= 2
    return Counter(versions) <= Counter(have)


def _together_text(chosen: list[dict], every: list[str]) -> str:
    others = sorted(set(every) - {run_label(r) for r in chosen})
    when = min(r["created"] for r in chosen)[:16].replace("T", " ")
    text = (f"compared the latest replay that timed {', '.join(r['requested'] for r in chosen)} together "
            f"(replay {_group_of(chosen[0])}, {when} UTC)")
    if others:
        text += f"; other stored versions: {', '.join(others)} (name them with --jax)"
    return text


def _latest_of_each(runs: Sequence[dict], versions: list[str] | None) -> tuple[list[dict], str]:
    """The latest run of each version when no replay timed them together, and a sentence saying so."""
    wanted = versions or list(dict.fromkeys(run_label(r) for r in runs))
    chosen = _take_in_order(list(reversed(runs)), wanted)  # newest first: the latest run of each
    text = (f"no single replay timed {', '.join(wanted)} together: compared the latest run of each, which are not "
            "comparable in time (replay them together: reprobundle replay REF "
            + " ".join("--jax " + v for v in wanted) + ")")
    return chosen, text
