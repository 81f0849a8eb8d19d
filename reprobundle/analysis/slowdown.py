"""What a stored replay measured in time, for a reproducer (`script`) and a bug report: each contender's median on
the reporter's machine beside the baseline's (the replay's first run), with the paired verdict, ratio and 95%
interval of analysis/verdict.py, the contender that is slower, and the variants of its release that work around it.

Only runs timed together with the baseline (one replay's group, in rounds) are compared: a ratio between runs of
different processes or machines is no measurement of a slowdown. Pure data from the stored runs; nothing runs.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..bundle.frozen_script import settings_env
from ..bundle.model import run_label
from .timing_summary import TimingSummary
from .verdict import METHOD_PAIRED, timing_verdict


def measured_times(runs: Sequence[dict]) -> dict | None:
    """The times of one stored replay, or None unless at least one run was timed together with the first.

    {"rows": [row, ...] (the baseline first), "slower": the slowest row settled slower (or None), "workarounds":
    rows of variants (settings of their own) of the slower row's release whose 95% interval lies below the slower
    row's, "machine": the baseline's CPU or device and backend, "python": its Python, "busy": the CPUs other
    processes used during the timing}. A row: {"label", "jax", "jaxlib", "python", "settings" (variables a shell
    line sets), "run_id", "status", "median_ns", "verdict", "ratio", "ci95", "settled", "rounds"} (the last five
    None for the baseline).
    """
    if len(runs) < 2 or not _median_ns(runs[0]):
        return None
    base = runs[0]
    rows = [_row(base, None), *_paired_rows(base, runs[1:])]
    if len(rows) < 2:
        return None
    slower = max((r for r in rows[1:] if r["verdict"] == "slower"), key=lambda r: r["ratio"], default=None)
    env: Any = base.get("environment") or {}
    return {"rows": rows, "slower": slower, "workarounds": _workarounds(rows, slower),
            "machine": f"{env.get('cpu_model') or env.get('device_kind') or '?'}, {env.get('backend') or '?'}",
            "python": str(env.get("python") or ""), "busy": (env.get("conditions") or {}).get("other_cpu")}


def _paired_rows(base: dict, runs: Sequence[dict]) -> list[dict]:
    """The rows of the runs timed together with `base` (the paired verdict), in order."""
    rows = []
    for run in runs:
        verdict = timing_verdict(base["timing"], run["timing"]) if _median_ns(run) else None
        if verdict is not None and verdict["method"] == METHOD_PAIRED:
            rows.append(_row(run, verdict))
    return rows


def _median_ns(run: dict) -> float | None:
    samples = (run.get("timing") or {}).get("samples_ns") or []
    return TimingSummary.of(samples).median_ns if samples and run.get("status") in ("ok", "mismatch") else None


def _row(run: dict, verdict: dict | None) -> dict:
    env: Any = run.get("environment") or {}
    v = verdict or {}
    return {"label": run_label(run), "run_id": str(run.get("run_id") or ""), "status": str(run.get("status")),
            "jax": str(env.get("jax") or run.get("requested")),
            "jaxlib": str(env.get("jaxlib") or ""), "python": str(env.get("python") or ""),
            "settings": settings_env(run), "median_ns": _median_ns(run), "verdict": v.get("verdict"),
            "ratio": v.get("ratio"), "ci95": v.get("ci95"), "settled": v.get("settled"), "rounds": v.get("rounds")}


def _workarounds(rows: list[dict], slower: dict | None) -> list[dict]:
    """Variants of the slower release that are clearly faster than it: their interval against the baseline lies
    wholly below the slower contender's."""
    if slower is None or not slower["ci95"]:
        return []
    return [r for r in rows[1:] if r is not slower and r["settings"] and r["jax"] == slower["jax"] and r["ci95"]
            and r["ci95"][1] < slower["ci95"][0]]
