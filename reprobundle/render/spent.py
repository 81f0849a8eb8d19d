"""Where an investigation's time went (run/spent.py's ledger) as a table, and a command's JSON without the raw
timing samples it does not need."""

from __future__ import annotations

import textwrap

from ..run.spent import CATEGORIES
from .comparison import WIDTH
from .table import grid


def spent_text(ledger: dict) -> str:
    """One row per probe (what, versions, workers at once, wall seconds, then each category's worker seconds) and
    the total; worker seconds of workers that ran at once add up to more than the wall time."""
    used = [c for c in CATEGORIES if any(c in p["spent"] for p in ledger["probes"])]
    rows = [[p["what"], ", ".join(p["versions"]), str(p["at_once"]), f"{p['wall_s']:.1f}",
             *(_seconds(p["spent"].get(c)) for c in used)] for p in ledger["probes"]]
    rows.append(["total", "", "", f"{ledger['probe_wall_s']:.1f}", *(_seconds(ledger["total"].get(c)) for c in used)])
    lines = grid(["probe", "versions", "at once", "wall s", *used], rows)
    lines += textwrap.wrap(f"the command's work took {ledger['wall_s']:.1f} s: {ledger['probe_wall_s']:.1f} s in "
                           f"{len(ledger['probes'])} probe(s), {ledger['outside_probes_s']:.1f} s outside them "
                           "(reading runs, comparing, reporting); the categories are worker seconds (workers that "
                           "ran at once overlap)", WIDTH)
    return "\n".join(lines)


def _seconds(value: float | None) -> str:
    return "" if not value else f"{value:.1f}"


def without_samples(comparison: dict | None) -> dict | None:
    """`comparison` with its rows' raw samples dropped (their medians, intervals, counts and schedules stay): what
    `--json` of bisect, explain and sweep carries unless `--samples` asks for them."""
    if comparison is None:
        return None
    rows = [{k: v for k, v in row.items() if k != "samples_ns"} for row in comparison.get("rows") or []]
    return {**comparison, "rows": rows}
