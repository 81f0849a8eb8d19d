"""The multi-version comparison: one bundle replayed on several JAX versions, set against a baseline version.

`build_comparison` turns a manifest, run records, optimized HLO texts and output arrays into plain data (JSON-able);
render/comparison.py renders that data for a terminal, a GitHub issue and a browser. No I/O.
"""

from __future__ import annotations

import math

import numpy as np

from ..bundle.trees import output_names
from ..units import human_ns
from . import hlo
from .verdict import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_EFFECT,
    METHOD_PAIRED,
    TimingSummary,
    check_outputs,
    timing_verdict,
)

COMPARISON_FORMAT = "reprobundle.comparison"
COMPARISON_VERSION = 1
TOP_MOVES = 10
REFERENCE = "reference"  # the label (and `baseline` value) of the bundle's reference run
TIMED = ("ok", "mismatch")
_ENV_KEYS = ("jax", "jaxlib", "python", "platform", "cpu_model")

# ------------------------------------------------------------------------------------------------ building


def build_comparison(manifest: dict, runs: list[dict], baseline: str | None = None, *, hlo_texts: dict[str, str],
                     outputs: dict[str, list[np.ndarray]], top: int = TOP_MOVES) -> dict:
    """Compare the runs of one bundle against a baseline.

    `runs` are run records; `baseline` a run's `requested` version or "reference" (default: the first run whose
    status is ok). `hlo_texts[requested]` is a run's optimized HLO text and `outputs[requested]` its output arrays
    (either may be missing; "reference" keys work too). Raises ValueError for a baseline no run requested.

    Returns {"format", "version", "bundle", "bundle_id", "function", "description", "packed": env, "machine": env,
    "baseline", "rows": [row], "diffs": [diff], "notes": [str]} where a row is one version's status, timing
    (median/IQR/ratio/verdict/samples), output errors vs the reference and vs the baseline, compile time and fusion
    count, and a diff is {"label", "vs", "fusion": fusion_diff | None, "per_op": per_op_diff rows (all; renderers
    show the first `top`), "moved": one line naming where the time moved, "moved_row": the biggest move or None}.
    """
    modules = {k: hlo.parse_hlo(v) for k, v in hlo_texts.items() if v}  # parse each text once
    names = output_names(manifest)
    resized = sorted({(r.get("labels") or {}).get("shape") for r in runs} - {None})
    # Runs at other sizes (replay --shape) are compared with each other, never with the reference's sizes.
    rows = ([] if resized else [_reference_row(manifest)]) + [_run_row(r, names) for r in runs]
    _label_duplicates(rows)
    base = _pick_baseline(rows, baseline)
    notes = []
    if base is None:
        notes.append("no run succeeded: nothing to compare against")
    for row in rows:
        _fill_against_baseline(row, base, outputs, names)
        row["fusions"] = _fusion_count(modules.get(row["requested"]))
        if row["status"] not in TIMED:
            notes.append(f"jax {row['label']}: {row['status']}: {row['reason']}")
    notes += _verdict_notes(rows)
    if resized:
        notes.append(f"replayed at {'; '.join(resized)} on synthetic inputs: the reference ran at the packed sizes, "
                     "so it is left out")
    diffs = [_version_diff(row, base, modules) for row in rows
             if base is not None and row is not base and row["requested"] != REFERENCE and row["status"] in TIMED]
    return {
        "format": COMPARISON_FORMAT, "version": COMPARISON_VERSION,
        "bundle": _bundle_name(manifest, runs), "bundle_id": next((r.get("bundle_id") for r in runs), None),
        "function": manifest.get("function", {}).get("fields", {}).get("fun_name", ""),
        "description": manifest.get("description", ""),
        "packed": _env(manifest.get("environment") or {}),
        "machine": _env(next((r["environment"] for r in runs if r.get("environment")), {})),
        "baseline": base["label"] if base else None, "top": top,
        "rows": rows, "diffs": diffs, "notes": notes + _machine_notes(manifest, runs),
    }


def _verdict_notes(rows: list[dict]) -> list[str]:
    notes = []
    paired = [r for r in rows if r["method"] == METHOD_PAIRED]
    if paired:
        notes.append(f"verdicts for {', '.join(r['label'] for r in paired)}: timed interleaved with the baseline "
                     f"in {paired[0]['rounds']} rounds of fresh processes; paired t-test over rounds, p < "
                     f"{DEFAULT_ALPHA:g} and at least {DEFAULT_MIN_EFFECT:.0%} apart to count")
    for caveat in sorted({r["caveat"] for r in rows if r["caveat"]}):
        labels = ", ".join(r["label"] for r in rows if r["caveat"] == caveat)
        notes.append(f"verdicts for {labels}: {caveat}")
    return notes


def _env(env: dict) -> dict:
    return {k: str(env[k]) for k in _ENV_KEYS if env.get(k) is not None}


def _bundle_name(manifest: dict, runs: list[dict]) -> str:
    if runs and runs[0].get("bundle"):
        return runs[0]["bundle"]
    name, version = manifest.get("name", "?"), manifest.get("version")
    return f"{name}@{version}" if version is not None else name


def _machine_notes(manifest: dict, runs: list[dict]) -> list[str]:
    # str(): environments are free-form data from the store, not always text
    models = {str(r["environment"]["cpu_model"]) for r in runs
              if isinstance(r.get("environment"), dict) and r["environment"].get("cpu_model") is not None}
    packed = (manifest.get("environment") or {}).get("cpu_model")
    packed = None if packed is None else str(packed)
    notes = []
    if len(models) > 1:
        notes.append("runs come from different machines (" + ", ".join(sorted(models)) + "): times do not compare")
    if packed and models and packed not in models:
        notes.append(f"the reference was timed on another machine ({packed})")
    return notes


def _timing_fields(timing: dict) -> dict:
    samples = timing.get("samples_ns") or []
    t = TimingSummary.of(samples)
    return {"n": t.n, "median_ns": _num(t.median_ns), "iqr_ns": _num(t.iqr_ns), "min_ns": _num(t.min_ns),
            "samples_ns": [int(s) for s in samples], "rounds": len(timing.get("rounds") or []) or 1,
            "schedule": {k: timing[k] for k in ("steps", "rounds", "group") if k in timing}}


def _num(x: float) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _reference_row(manifest: dict) -> dict:
    ref, env = manifest.get("reference") or {}, manifest.get("environment") or {}
    return {"label": REFERENCE, "requested": REFERENCE, "jax": str(env.get("jax") or "?"), "status": "ok", "reason": "",
            "route": ref.get("route"), "compile_s": _num((ref.get("timing") or {}).get("compile_s")),
            "err_ref": {"ok": True, "bit_identical": True, "max_abs_err": 0.0, "max_rel_err": 0.0},
            "per_op": ref.get("per_op") or [], **_timing_fields(ref.get("timing") or {})}


def _run_row(run: dict, names: list[str]) -> dict:
    timing = run.get("timing") or {}
    check = run.get("check")
    return {"label": run["requested"], "requested": run["requested"],
            "jax": str((run.get("environment") or {}).get("jax") or "?"), "status": run["status"],
            "reason": run.get("reason", ""), "route": run.get("route"), "compile_s": _num(timing.get("compile_s")),
            "err_ref": _error_fields(check, names) if check else None, "per_op": run.get("per_op") or [],
            **_timing_fields(timing)}


def _label_duplicates(rows: list[dict]) -> None:
    seen: dict[str, int] = {}
    for row in rows:
        seen[row["label"]] = seen.get(row["label"], 0) + 1
        if seen[row["label"]] > 1:
            row["label"] = f"{row['label']} #{seen[row['label']]}"


def _error_fields(check: dict, names: list[str]) -> dict:
    """The check's summary, with `worst`: the key path of the output leaf with the largest error, if any differs."""
    def number(x):  # a run record is data from the store: anything but a number renders as unknown
        return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None

    leaves = [l for l in check.get("leaves") or [] if isinstance(l, dict)]
    errors = [(number(l.get("max_abs_err")) or 0.0, i) for i, l in enumerate(leaves) if not l.get("bit_identical")]
    worst = max(errors)[1] if errors else None
    return {"ok": bool(check.get("ok")), "bit_identical": bool(check.get("bit_identical")),
            "max_abs_err": number(check.get("max_abs_err")), "max_rel_err": number(check.get("max_rel_err")),
            **({"worst": names[worst] if worst < len(names) else f"output {worst}"} if worst is not None else {}),
            **({"reason": check["reason"]} if check.get("reason") else {})}


def _pick_baseline(rows: list[dict], baseline: str | None) -> dict | None:
    if baseline is None:
        return next((r for r in rows if r["requested"] != REFERENCE and r["status"] == "ok"), None)
    match = next((r for r in rows if baseline in (r["requested"], r["label"])), None)
    if match is None:
        known = ", ".join(r["label"] for r in rows)
        raise ValueError(f"baseline {baseline!r} is none of the compared versions ({known})")
    return match


def _fill_against_baseline(row: dict, base: dict | None, outputs: dict, names: list[str]) -> None:
    row["is_baseline"] = row is base
    row["ratio"] = row["verdict"] = row["p_value"] = row["err_base"] = row["ci95"] = row["method"] = None
    row["caveat"] = None
    if base is None:
        return
    if row is base:
        row["ratio"], row["verdict"] = 1.0, "baseline"
    elif row["n"] and base["n"]:
        v = timing_verdict({"samples_ns": base["samples_ns"], **base["schedule"]},
                           {"samples_ns": row["samples_ns"], **row["schedule"]})
        row["ratio"], row["verdict"], row["p_value"] = _num(v["ratio"]), v["verdict"], v["p_value"]
        row["ci95"] = [_num(x) for x in v["ci95"]] if v["ci95"] else None
        row["method"], row["caveat"] = v["method"], v["caveat"]
    row["err_base"] = _error_vs_baseline(row, base, outputs, names)


def _error_vs_baseline(row: dict, base: dict, outputs: dict, names: list[str]) -> dict | None:
    if row is base:
        return None
    if base["requested"] == REFERENCE:
        return row["err_ref"]
    mine, theirs = outputs.get(row["requested"]), outputs.get(base["requested"])
    if mine is None or theirs is None:
        return None
    return _error_fields(check_outputs(list(theirs), list(mine)), names)


def _fusion_count(module: hlo.HloModule | None) -> int | None:
    return hlo.fusion_summary(module)["n_fusions"] if module is not None else None


def _version_diff(row: dict, base: dict, modules: dict[str, hlo.HloModule]) -> dict:
    base_hlo, cand_hlo = modules.get(base["requested"]), modules.get(row["requested"])
    fusion = hlo.fusion_diff(base_hlo, cand_hlo) if base_hlo is not None and cand_hlo is not None else None
    moves = hlo.per_op_diff(base["per_op"], row["per_op"], base_hlo, cand_hlo) if base["per_op"] and row["per_op"] else []
    diff = {"label": row["label"], "jax": row["jax"], "vs": base["label"], "fusion": fusion, "per_op": moves,
            "moved_row": moves[0] if moves else None}
    diff["moved"] = moved_line(row, base, diff)
    return diff


# ------------------------------------------------------------------------------------------------ wording


def moved_line(row: dict, base: dict, diff: dict) -> str:
    """One line: how the median moved and the op or fusion whose time moved most."""
    head = _median_move(row, base)
    top_row = diff.get("moved_row")
    if top_row is not None:
        return head + "; most moved: " + describe_move(top_row)
    missing = [r["label"] for r in (base, row) if not r["per_op"]]
    fusion = diff.get("fusion")
    tail = f"; no per-op profile for {', '.join(missing)}" if missing else "; no per-op rows"
    if fusion is not None:
        tail += "; same fusion structure" if fusion["identical"] else "; fusion structure differs"
    return head + tail


def _median_move(row: dict, base: dict) -> str:
    if row["median_ns"] is None or base["median_ns"] is None:
        return "no timing"
    delta = row["median_ns"] - base["median_ns"]
    verdict = f", {row['verdict']}" if row.get("verdict") else ""
    return f"median {signed_ns(delta)} ({row['ratio']:.2f}x{verdict})" if row.get("ratio") else f"median {signed_ns(delta)}"


def describe_move(r: dict) -> str:
    """`dot_general.9 -> ynn_fusion.1 (dot×2+exponential, merged, attention.py:26): 2.1 ms -> 5.3 ms (+3.2 ms, 2.52x)`."""
    names = _move_names(r)
    what = ", ".join(x for x in (r.get("signature"), r["match"], r.get("source")) if x)
    base = human_ns(r["base_ns"]) if r["base_ns"] is not None else "absent"
    cand = human_ns(r["cand_ns"]) if r["cand_ns"] is not None else "absent"
    ratio = f", {r['ratio']:.2f}x" if r.get("ratio") else ""
    return f"{names} ({what}): {base} -> {cand} ({signed_ns(r['delta_ns'])}{ratio})"


def _move_names(r: dict) -> str:
    b, c = r.get("base_name"), r.get("cand_name")
    if b and c:
        return b if b == c else f"{short(b)} -> {c}"
    return f"{b or c} ({'gone' if b else 'new'})"


def short(names: str, limit: int = 3) -> str:
    parts = names.split(" + ")
    return " + ".join(parts[:limit]) + (f" + {len(parts) - limit} more" if len(parts) > limit else "")


def signed_ns(ns: float) -> str:
    return ("+" if ns >= 0 else "-") + human_ns(abs(ns))
