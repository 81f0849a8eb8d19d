"""A registry over time: bundles x JAX releases, each cell the ratio to a baseline release, from stored runs only.

`build_history` takes, per bundle, its identity and its stored run records (no HLO, no outputs: a history of
hundreds of bundles is read in seconds) and returns plain data for render/history.py:

- columns: every release some run was made on, in version order (a run of "installed" counts as the JAX it ran;
  a retraced run or one with settings is a column of its own, named by its contender label);
- per bundle and column a cell. A cell *timed together* comes from the latest replay (`group`) that holds a timed
  run of the baseline and of that column: its paired verdict, ratio and 95% interval (analysis/verdict.py). A cell
  whose column was never timed with the baseline is *apart*: the ratio of medians against the latest baseline run,
  no verdict (a ratio of two processes measured at different times says nothing a verdict could rest on);
- outputs: the run's status against the packed reference (ok, mismatch) or why it did not run;
- `first_regressed`: the first column after the baseline, in version order, worse than the baseline: a settled
  "slower" verdict, or outputs that mismatch the reference (or no run) where the baseline's matched;
- per bundle a series (column, median ns) for its chart.
No I/O.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from packaging.version import InvalidVersion, Version

from ..bundle.model import named_label
from .verdict import timing_verdict

HISTORY_FORMAT = "reprobundle.history"
HISTORY_VERSION = 1
TIMED = ("ok", "mismatch")


def column_of(run: dict) -> str:
    """The column a run belongs to: its contender label with "installed", or the path of a commit's environment
    (JAX's Python at a commit: a temporary folder of bisect-commits), replaced by the JAX version it ran."""
    label = named_label(run)
    requested = str(run.get("requested") or "")
    if requested == "installed":
        concrete = str((run.get("environment") or {}).get("jax") or "installed")
        return concrete + label[len(requested):] if label.startswith(requested) else concrete
    return label


def _version_key(column: str) -> tuple:
    release, _, rest = column.partition(" ")
    try:
        return (0, Version(release), rest)
    except InvalidVersion:
        return (1, Version("0"), column)


def order_columns(columns: Sequence[str]) -> list[str]:
    """Releases in version order (a variant right after its release), anything that is not a version last."""
    return sorted(set(columns), key=_version_key)


def _median(run: dict) -> float | None:
    samples = (run.get("timing") or {}).get("samples_ns") or []
    return float(np.median(samples)) if samples else None


def _latest(runs: Sequence[dict]) -> dict | None:
    return max(runs, key=lambda r: (r.get("created") or "", r.get("run_id") or ""), default=None)


def _together(runs: Sequence[dict], baseline: str, column: str) -> tuple[dict, dict] | None:
    """The baseline's and the column's timed runs of the latest replay that holds both."""
    by_group: dict[str, dict[str, dict]] = {}
    for run in runs:
        if run.get("group") and run["status"] in TIMED:
            by_group.setdefault(run["group"], {})[column_of(run)] = run
    pairs = [(group[baseline], group[column]) for group in by_group.values() if baseline in group and column in group]
    return max(pairs, key=lambda pair: pair[1].get("created") or "", default=None)


def _cell(runs: Sequence[dict], baseline: str, column: str) -> dict | None:
    mine = [r for r in runs if column_of(r) == column]
    latest = _latest(mine)
    if latest is None:
        return None
    cell: dict[str, Any] = {"status": latest["status"], "run_id": latest["run_id"], "created": latest.get("created"),
                            "median_ns": _median(latest), "reason": str(latest.get("reason") or "")[:300],
                            "together": False, "verdict": None, "ratio": None, "ci95": None, "settled": None,
                            "group": latest.get("group")}
    if column == baseline:
        return {**cell, "ratio": 1.0 if latest["status"] in TIMED else None, "baseline": True}
    pair = _together(runs, baseline, column)
    if pair is not None:
        base, cand = pair
        verdict = timing_verdict(base["timing"], cand["timing"])
        return {**cell, "status": cand["status"], "run_id": cand["run_id"], "created": cand.get("created"),
                "median_ns": _median(cand), "reason": str(cand.get("reason") or "")[:300], "together": True,
                "group": cand.get("group"), "baseline_run_id": base["run_id"], "verdict": verdict["verdict"],
                "ratio": verdict["ratio"], "ci95": verdict.get("ci95"), "settled": verdict.get("settled", True),
                "method": verdict.get("method")}
    base_latest = _latest([r for r in runs if column_of(r) == baseline and r["status"] in TIMED])
    base_median = _median(base_latest) if base_latest else None
    if cell["median_ns"] is not None and base_median:
        cell["ratio"] = cell["median_ns"] / base_median
    return cell


def _regressed(cell: dict | None, base: dict | None) -> bool:
    """Worse than the baseline, as an experiment showed it: a settled "slower" verdict timed together with it, or
    outputs that mismatch the reference (or no run at all) where the baseline's matched."""
    if cell is None or base is None or base["status"] != "ok":
        return False
    slower = cell["together"] and cell["verdict"] == "slower" and cell.get("settled")
    return bool(slower or cell["status"] != "ok")


def build_history(bundles: Sequence[tuple[dict, Sequence[dict]]], baseline: str | None = None) -> dict:
    """`bundles`: per bundle ({"ref", "name", "version", "bundle_id", "store"}, its run records). `baseline`: a
    column (a release; default: the oldest). Returns {"format", "format_version", "baseline", "columns", "rows"}."""
    columns = order_columns([column_of(run) for _, runs in bundles for run in runs])
    base = baseline if baseline is not None else (columns[0] if columns else None)
    if base is not None and columns and base not in columns:
        raise ValueError(f"no stored run was made on {base!r}; the runs cover {', '.join(columns)}")
    rows = [_history_row(identity, runs, columns, base) for identity, runs in bundles]
    return {"format": HISTORY_FORMAT, "format_version": HISTORY_VERSION, "baseline": base, "columns": columns,
            "rows": rows}


def _history_row(identity: dict, runs: Sequence[dict], columns: list[str], base: str | None) -> dict:
    """One bundle's row: its cells by column, the first column after the baseline where it regressed, its series."""
    cells = {c: _cell(runs, base, c) for c in columns} if base else {}
    after = columns[columns.index(base) + 1:] if base in columns else []
    base_cell = cells.get(base) if base else None
    first = next((c for c in after if _regressed(cells.get(c), base_cell)), None)
    series = [{"column": c, "median_ns": cell["median_ns"]} for c, cell in cells.items()
              if cell is not None and cell["median_ns"] is not None]
    return {**identity, "cells": {c: v for c, v in cells.items() if v is not None},
            "first_regressed": first, "series": series, "runs": len(runs)}
