"""The multi-version comparison: one bundle replayed on several JAX versions, set against a baseline version.

`build_comparison` turns a manifest, run records, optimized HLO texts and output arrays into plain data (JSON-able);
render/comparison.py renders that data for a terminal, a GitHub issue and a browser. No I/O.
"""

from __future__ import annotations

import math

import numpy as np

from ..bundle.model import run_label, run_notes
from ..bundle.trees import output_names
from ..text import first_line
from ..units import human_ns
from .busy import alternated
from .busy import report as conditions_report
from .hardware import hardware_note
from .hlo_diff import (
    COVERAGE_MIN,
    coverage_explains,
    fusion_diff,
    fusion_summary,
    per_op_coverage,
    per_op_diff,
)
from .hlo_parse import HloModule, parse_hlo
from .layers import layer_headlines, layer_split
from .lowering_diff import lowering_diff
from .sequential import ALPHA as SEQ_ALPHA
from .sequential import BETA as SEQ_BETA
from .sequential import DETECT_EFFECT as SEQ_DETECT
from .timing_summary import TimingSummary
from .verdict import (
    DEFAULT_ALPHA,
    DEFAULT_MIN_EFFECT,
    METHOD_PAIRED,
    check_outputs,
    leaning,
    leaning_text,
    timing_verdict,
)

COMPARISON_FORMAT = "reprobundle.comparison"
COMPARISON_VERSION = 2  # 2: headlines, rows timed apart (no verdict), runs used, worker notes, moved_row by sign
TOP_MOVES = 10
REFERENCE = "reference"  # the label (and `baseline` value) of the bundle's reference run
TIMED = ("ok", "mismatch")
_ENV_KEYS = ("jax", "jaxlib", "python", "platform", "device_kind", "cpu_model")

# ------------------------------------------------------------------------------------------------ building


def build_comparison(manifest: dict, runs: list[dict], baseline: str | None = None, *, hlo_texts: dict[str, str],
                     outputs: dict[str, list[np.ndarray]], top: int = TOP_MOVES,
                     stablehlo_texts: dict[str, str] | None = None, program_files: list[str] | None = None) -> dict:
    """Compare the runs of one bundle against a baseline.

    `runs` are run records; `baseline` a run's `requested` version or "reference" (default: the first run whose
    status is ok). `hlo_texts[requested]` is a run's optimized HLO text and `outputs[requested]` its output arrays
    (either may be missing; "reference" keys work too). Raises ValueError for a baseline no run requested.

    Returns {"format", "version", "bundle", "bundle_id", "function", "description", "packed": env, "machine": env,
    "baseline", "headlines": [headline], "rows": [row], "diffs": [diff], "runs_used": [run], "notes": [str]}.
    A row is one version's status, timing (median/IQR/ratio/verdict/samples), output errors vs the reference and vs
    the baseline, compile time, fusion count and the worker's notes. `row["together"]` says whether it was timed
    together with the baseline (same interleaved replay): only those get a verdict, a p-value and an interval; the
    others (the pack's reference run, runs of other replays) are `apart`, with the ratio of medians only and
    `apart_reason`. A headline is one sentence per candidate: {"label", "vs", "direction", "comparable", "text"}.
    A diff is {"label", "vs", "fusion": fusion_diff | None, "per_op": per_op_diff rows (all; renderers show the
    first `top`), "moved": one line naming where the time moved, "moved_row": the biggest move in the direction of
    the whole-function change, or None when the profile does not explain it, "lowering": the ops JAX's lowering
    added and removed (analysis/lowering_diff.py) when `stablehlo_texts[label]` (the StableHLO a run compiled: the
    bundle's for frozen runs, its own for retraced ones) differ, else None}. "layers" splits a change between XLA
    and JAX's lowering where versions ran both frozen and retraced (analysis/layers.py).
    """
    modules = {k: parse_hlo(v) for k, v in hlo_texts.items() if v}  # parse each text once
    names = output_names(manifest)
    rows, resized = _rows(manifest, runs, names)
    base = _pick_baseline(rows, baseline)
    notes = ["no run succeeded: nothing to compare against"] if base is None else []
    notes += _fill_rows(rows, base, outputs, names, modules)
    notes += _verdict_notes(rows, alternated=any(r.get("alternated") for r in rows))
    notes += _resized_notes(resized)
    diffs = _version_diffs(rows, base, modules, stablehlo_texts or {}, program_files or [])
    split = layer_split(rows, base)
    notes += _row_notes(rows)
    warned, measured_under = conditions_report(runs)
    return {
        "format": COMPARISON_FORMAT, "version": COMPARISON_VERSION,
        "bundle": _bundle_name(manifest, runs), "bundle_id": next((r.get("bundle_id") for r in runs), None),
        "function": manifest.get("function", {}).get("fields", {}).get("fun_name", ""),
        "description": manifest.get("description", ""),
        "packed": _env(manifest.get("environment") or {}),
        "machine": _env(next((r["environment"] for r in runs if r.get("environment")), {})),
        "baseline": base["label"] if base else None, "top": top,
        "headlines": headlines(rows, base) + layer_headlines(split) + _hardware_headline(manifest, runs)
        + _condition_headlines(warned),
        "rows": rows, "diffs": diffs, "layers": split, "runs_used": runs_used(rows),
        "notes": notes + _machine_notes(manifest, runs) + measured_under,
    }


def _rows(manifest: dict, runs: list[dict], names: list[str]) -> tuple[list[dict], list[str]]:
    """(one row per run, after the reference's unless runs were resized; the sizes runs were resized to)."""
    shapes = {(r.get("labels") or {}).get("shape") for r in runs}
    resized = sorted(shape for shape in shapes if shape is not None)
    # Runs at other sizes (replay --shape) are compared with each other, never with the reference's sizes.
    rows = ([] if resized else [_reference_row(manifest)]) + [{**_run_row(r, names), "alternated": alternated(_conditions_of(r))}
                                                              for r in runs]
    _label_duplicates(rows)
    return rows, resized


def _fill_rows(rows: list[dict], base: dict | None, outputs: dict, names: list[str],
               modules: dict[str, HloModule]) -> list[str]:
    """Each row set against the baseline, with its fusion count; a note per row that was not timed."""
    notes = []
    for row in rows:
        _fill_against_baseline(row, base, outputs, names)
        row["fusions"] = _fusion_count(modules.get(row["requested"]))
        if row["status"] not in TIMED:
            notes.append(f"jax {row['label']}: {row['status']}: {row['reason']}")
    return notes


def _resized_notes(resized: list[str]) -> list[str]:
    if not resized:
        return []
    return [f"replayed at {'; '.join(resized)} on synthetic inputs: the reference ran at the packed sizes, "
            "so it is left out"]


def _version_diffs(rows: list[dict], base: dict | None, modules: dict[str, HloModule], stablehlo_texts: dict[str, str],
                   program_files: list[str]) -> list[dict]:
    """A diff per timed candidate against the baseline (none without one), with what the lowering changed."""
    diffs = [_version_diff(row, base, modules) for row in rows
             if base is not None and row is not base and row["requested"] != REFERENCE and row["status"] in TIMED]
    _add_lowering_diffs(diffs, stablehlo_texts, program_files)
    return diffs


def _add_lowering_diffs(diffs: list[dict], texts: dict[str, str], program_files: list[str]) -> None:
    """Each diff's "lowering": what JAX's lowering changed between the StableHLO its two runs compiled, or None."""
    for diff in diffs:
        before, after = texts.get(diff["vs"]), texts.get(diff["label"])
        lowered = lowering_diff(before, after, program_files) if before and after and before != after else None
        diff["lowering"] = lowered if lowered and lowered["changed"] else None


def _row_notes(rows: list[dict]) -> list[str]:
    """The worker's notes of the runs, each once naming every run that noted it ("jax 0.4.31, 0.4.33: ..."), and a
    retraced run's packages."""
    noted_by: dict[str, list[str]] = {}
    for row in rows:
        for note in row["worker_notes"]:
            noted_by.setdefault(note, []).append(row["label"])
    notes = [f"jax {', '.join(labels)}: {note}" for note, labels in noted_by.items()]
    return notes + [f"jax {row['label']}: the program's packages: {packages_text(row['packages'])}"
                    for row in rows if row.get("packages")]


# ------------------------------------------------------------------------------------------------ headlines


def headlines(rows: list[dict], base: dict | None) -> list[dict]:
    """One sentence per candidate (every row but the baseline and the reference): direction, ratio, 95% interval,
    how it was measured and p; a candidate not timed together with the baseline says it is not comparable."""
    if base is None:
        return [{"label": "", "vs": None, "direction": "none", "comparable": False,
                 "text": "no version ran: nothing to compare"}]
    return [_headline(r, base) for r in rows if r is not base and r["requested"] != REFERENCE]


def _headline(row: dict, base: dict) -> dict:
    who, vs = _version_name(row), _version_name(base)
    out = {"label": row["label"], "vs": base["label"], "comparable": bool(row["together"]), "direction": "unknown"}
    if row["status"] not in TIMED:
        out["direction"] = "failed"
        return {**out, "text": f"{who} did not run ({row['status']}): {first_line(row['reason'], 100)}"}
    if row["median_ns"] is None or base["median_ns"] is None or not row["ratio"]:
        return {**out, "text": f"{who}: no timing to compare with {vs}"}
    if not row["together"]:
        out["direction"] = "apart"
        return {**out, "text": f"{who} vs {vs}: not comparable, not timed together ({row['apart_reason']}); "
                               f"medians {human_ns(row['median_ns'])} vs {human_ns(base['median_ns'])} "
                               f"({row['ratio']:.2f}x), no verdict"}
    if row["verdict"] is None:
        return {**out, "text": f"{who} vs {vs}: {row['ratio']:.2f}x the time, timed together in {row['rounds']} "
                               f"round(s), too few for a verdict (replay with --rounds 8)"}
    ratio, (lo, hi), p = row["ratio"], row["ci95"], row["p_value"]
    # a version settled before the others gets fewer rounds; one settled on its last round needs no mention
    settled_at = (f", settled at round {row['decided_at']}" if row.get("decided_at")
                  and row["decided_at"] != row["rounds"] else "")
    how = (f"paired, {row['rounds']} rounds "
           f"{'alternated, one process at a time' if row.get('alternated') else 'timed together'}{settled_at}; "
           f"p={p:.1g}")
    out["direction"] = row["verdict"]
    if row["verdict"] == "slower":
        text = f"{who} is {ratio:.2f}x slower than {vs} (95% CI {lo:.2f}-{hi:.2f}x; {how})"
    elif row["verdict"] == "faster":
        text = f"{who} is {1 / ratio:.2f}x faster than {vs} (95% CI {1 / hi:.2f}-{1 / lo:.2f}x; {how})"
    elif leaning(row):  # unsettled, its whole interval on one side: never "not measurably different"
        out["direction"] = "unsettled"
        text = f"{who} leans {leaning(row)} than {vs}: {leaning_text(row)} ({how})"
    else:
        text = _same_text(row, who, vs, how)
    return {**out, "text": text}


def _same_text(row: dict, who: str, vs: str, how: str) -> str:
    """A "same" verdict: within the smallest effect that counts, or not measurably different (with the interval it
    was judged on when it did not settle)."""
    ratio, (lo, hi), p = row["ratio"], row["ci95"], row["p_value"]
    same = p < DEFAULT_ALPHA and abs(ratio - 1.0) < DEFAULT_MIN_EFFECT
    text = (f"{who} is within {DEFAULT_MIN_EFFECT:.0%} of {vs}" if same else
            f"{who} is not measurably different from {vs}") + f": {ratio:.3f}x the time"
    if row.get("settled") is False and row.get("equivalence"):
        # undecided: the equivalence interval is what the verdict was judged on, so it is the one shown
        e_lo, e_hi = row["equivalence"]
        return text + f"; not settled: a change between {e_lo:.2f}x and {e_hi:.2f}x is not ruled out ({how})"
    return text + f" (95% CI {lo:.3f}-{hi:.3f}x; {how})"


def packages_text(packages: dict) -> str:
    """`flax 0.10.4 (packed with 0.12.8), optax 0.2.8`: a retraced run's packages against the packed ones."""
    parts = []
    for name, item in sorted(packages.items()):
        packed = item.get("packed") if isinstance(item, dict) else None
        version = item.get("version") if isinstance(item, dict) else item
        parts.append(f"{name} {version}" + ("" if packed in (None, version) else f" (packed with {packed})"))
    return ", ".join(parts)


def _version_name(row: dict) -> str:
    """`jax 0.8.0`, `jax 0.10.2 (installed)`, `the reference run`."""
    if row["requested"] == REFERENCE:
        return "the reference run"
    if row["label"].startswith("installed") and row["jax"] not in ("?", ""):
        return f"jax {row['jax']} ({row['label']})"
    return f"jax {row['label']}"


def runs_used(rows: list[dict]) -> list[dict]:
    """Which stored runs the comparison used: id, date, timing budget and whether it was timed together."""
    return [{"label": r["label"], "run_id": r.get("run_id"), "created": r.get("created"), "status": r["status"],
             "group": r["schedule"].get("group"), "budget": r["budget"], "together": r["together"],
             "is_baseline": r["is_baseline"]} for r in rows]


def budget_text(timing: dict) -> str:
    """`100 steps in 8 rounds (1600 calls)`, or `50 calls in one process`: how much timing a run holds."""
    n = len(timing.get("samples_ns") or [])
    steps, rounds = timing.get("steps"), timing.get("rounds")
    if steps and rounds:
        return f"{len(steps)} steps in {len(rounds)} round{'s' if len(rounds) != 1 else ''} ({n} calls)"
    return f"{n} call{'s' if n != 1 else ''} in one process" if n else "no timing"


def _conditions_of(run: dict) -> object:
    return (run.get("environment") or {}).get("conditions")


def _verdict_notes(rows: list[dict], *, alternated: bool = False) -> list[str]:
    notes = []
    paired = [r for r in rows if r["method"] == METHOD_PAIRED]
    how = ("timed in alternation with the baseline, one process at a time (adjacent visits paired, their order "
           "varied by round: not concurrent)" if alternated else "timed interleaved with the baseline")
    if paired:
        notes.append(f"verdicts for {', '.join(r['label'] for r in paired)}: {how} "
                     f"in {'/'.join(sorted({str(r['rounds']) for r in paired}))} rounds of fresh processes; "
                     f"group-sequential paired t-test over rounds, looked at after each round and stopped once "
                     f"settled ({SEQ_ALPHA:.0%} false verdicts, {1 - SEQ_BETA:.0%} power for a {SEQ_DETECT:.0%} "
                     f"change over all looks), at least {DEFAULT_MIN_EFFECT:.0%} apart to count")
    return notes


def _env(env: dict) -> dict:
    return {k: str(env[k]) for k in _ENV_KEYS if env.get(k) is not None}


def _bundle_name(manifest: dict, runs: list[dict]) -> str:
    if runs and runs[0].get("bundle"):
        return runs[0]["bundle"]
    name, version = manifest.get("name", "?"), manifest.get("version")
    return f"{name}@{version}" if version is not None else name


def _condition_headlines(warnings: list[str]) -> list[dict]:
    """A headline per warning about the conditions of the timing (analysis/busy.py: a busy machine, runs
    measured under different CPUs, masks or thread settings)."""
    return [{"label": "", "vs": None, "comparable": False, "direction": "warning", "conditions": True, "text": w}
            for w in warnings]


def _hardware_headline(manifest: dict, runs: list[dict]) -> list[dict]:
    """A headline when the runs ran on other hardware than the reference (analysis/hardware.py)."""
    note = hardware_note(manifest.get("environment"), [r.get("environment") for r in runs if r["status"] in TIMED])
    if note is None:
        return []
    return [{"label": "", "vs": REFERENCE, "comparable": False, "direction": "apart", "hardware": True, "text": note}]


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


def _num(x: float | None) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _reference_row(manifest: dict) -> dict:
    ref, env = manifest.get("reference") or {}, manifest.get("environment") or {}
    return {"label": REFERENCE, "requested": REFERENCE, "jax": str(env.get("jax") or "?"), "status": "ok", "reason": "",
            "mode": "frozen", "contender_jax": REFERENCE, "lowering_changed": None,
            "route": ref.get("route"), "compile_s": _num((ref.get("timing") or {}).get("compile_s")),
            "err_ref": {"ok": True, "bit_identical": True, "max_abs_err": 0.0, "max_rel_err": 0.0},
            "per_op": ref.get("per_op") or [], "run_id": None, "created": manifest.get("created"),
            "worker_notes": [], "budget": budget_text(ref.get("timing") or {}),
            **_timing_fields(ref.get("timing") or {})}


def _run_row(run: dict, names: list[str]) -> dict:
    timing = run.get("timing") or {}
    check = run.get("check")
    contender = run.get("contender") or {}
    return {"label": run_label(run), "requested": run_label(run),
            "jax": str((run.get("environment") or {}).get("jax") or "?"), "status": run["status"],
            "mode": str(contender.get("mode") or "frozen"), "contender_jax": str(contender.get("jax") or run["requested"]),
            "lowering_changed": run.get("lowering_changed"), "packages": run.get("packages") or {},
            "reason": run.get("reason", ""), "route": run.get("route"), "compile_s": _num(timing.get("compile_s")),
            "err_ref": _error_fields(check, names) if check else None, "per_op": run.get("per_op") or [],
            "run_id": run.get("run_id"), "created": run.get("created"),
            "worker_notes": [first_line(n, 300) for n in run_notes(run)],
            "budget": budget_text(timing), **_timing_fields(timing)}


def _label_duplicates(rows: list[dict]) -> None:
    seen: dict[str, int] = {}
    for row in rows:
        seen[row["label"]] = seen.get(row["label"], 0) + 1
        if seen[row["label"]] > 1:
            row["label"] = f"{row['label']} #{seen[row['label']]}"


def _error_fields(check: dict, names: list[str]) -> dict:
    """The check's summary, with `worst`: the key path of the output leaf with the largest error, if any differs."""
    worst, element = _worst_leaf(check)
    return {"ok": bool(check.get("ok")), "bit_identical": bool(check.get("bit_identical")),
            "max_abs_err": _recorded_number(check.get("max_abs_err")),
            "max_rel_err": _recorded_number(check.get("max_rel_err")),
            **({"worst": names[worst] if worst < len(names) else f"output {worst}"} if worst is not None else {}),
            **({"worst_element": {k: element[k] for k in ("index", "expected", "actual", "abs_err", "allowed")
                                  if k in element}} if element is not None else {}),
            **({"reason": check["reason"]} if check.get("reason") else {})}


def _recorded_number(x):  # a run record is data from the store: anything but a number renders as unknown
    return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _worst_leaf(check: dict) -> tuple[int | None, dict | None]:
    """(the index of the output leaf with the largest error, or None; the check's worst element, or None): the
    element's leaf wins where the check names one (checks since tolerances scaled)."""
    leaves = [l for l in check.get("leaves") or [] if isinstance(l, dict)]
    errors = [(_recorded_number(l.get("max_abs_err")) or 0.0, i) for i, l in enumerate(leaves)
              if not l.get("bit_identical")]
    worst = max(errors)[1] if errors else None
    element = check.get("worst") if isinstance(check.get("worst"), dict) else None  # checks since tolerances scaled
    if element is not None and isinstance(element.get("leaf"), int) and not isinstance(element["leaf"], bool):
        worst = element["leaf"]
    return worst, element


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
    row["caveat"] = row["apart_reason"] = None
    row["settled"] = row["decided_at"] = row["equivalence"] = None  # the sequential test's (analysis/sequential.py)
    row["together"] = row is base
    if base is None:
        return
    if row is base:
        row["ratio"], row["verdict"] = 1.0, "baseline"
    elif row["n"] and base["n"]:
        group = base["schedule"].get("group")
        row["together"] = group is not None and row["schedule"].get("group") == group
        row["ratio"] = _num(row["median_ns"] / base["median_ns"]) if base["median_ns"] else None
        if row["together"]:
            v = timing_verdict({"samples_ns": base["samples_ns"], **base["schedule"]},
                               {"samples_ns": row["samples_ns"], **row["schedule"]})
            if v["method"] == METHOD_PAIRED:
                row["ratio"], row["verdict"], row["p_value"] = _num(v["ratio"]), v["verdict"], v["p_value"]
                row["ci95"] = [_num(x) for x in v["ci95"]] if v["ci95"] else None
                row["method"] = v["method"]
                row["settled"], row["decided_at"] = v.get("settled"), v.get("decided_at")
                row["equivalence"], row["caveat"] = v.get("equivalence"), v.get("caveat")
        else:
            row["apart_reason"] = _apart_reason(row, base)
    row["err_base"] = _error_vs_baseline(row, base, outputs, names)


def _apart_reason(row: dict, base: dict) -> str:
    if REFERENCE in (row["requested"], base["requested"]):
        return "the pack's reference run is another process, timed at pack time"
    return "measured in separate replays"


def _error_vs_baseline(row: dict, base: dict, outputs: dict, names: list[str]) -> dict | None:
    if row is base:
        return None
    if base["requested"] == REFERENCE:
        return row["err_ref"]
    mine, theirs = outputs.get(row["requested"]), outputs.get(base["requested"])
    if mine is None or theirs is None:
        return None
    return _error_fields(check_outputs(list(theirs), list(mine), names), names)


def _fusion_count(module: HloModule | None) -> int | None:
    return fusion_summary(module)["n_fusions"] if module is not None else None


def _version_diff(row: dict, base: dict, modules: dict[str, HloModule]) -> dict:
    base_hlo, cand_hlo = modules.get(base["requested"]), modules.get(row["requested"])
    fusion = fusion_diff(base_hlo, cand_hlo) if base_hlo is not None and cand_hlo is not None else None
    moves = per_op_diff(base["per_op"], row["per_op"], base_hlo, cand_hlo) if base["per_op"] and row["per_op"] else []
    # coverage: each side's per-op times over its median step; a profile that misses most of the step names no op
    coverage = {"base": per_op_coverage(base["per_op"], base["median_ns"]),
                "cand": per_op_coverage(row["per_op"], row["median_ns"])}
    covered = all(coverage_explains(x) for x in coverage.values())
    diff = {"label": row["label"], "jax": row["jax"], "vs": base["label"], "fusion": fusion, "per_op": moves,
            "coverage": coverage, "moved_row": explaining_move(row, base, moves) if covered else None}
    diff["moved_how"] = ("none" if not moves else "uncovered" if not covered else "unexplained"
                         if diff["moved_row"] is None else "biggest" if _direction(row, base) == 0 else "explains")
    diff["moved"] = moved_line(row, base, diff)
    return diff


def _direction(row: dict, base: dict) -> int:
    """+1 slower, -1 faster, 0 no change to explain (a verdict of same, or no timing)."""
    if row.get("verdict") == "same" or row["median_ns"] is None or base["median_ns"] is None:
        return 0
    delta = row["median_ns"] - base["median_ns"]
    return (delta > 0) - (delta < 0)


def explaining_move(row: dict, base: dict, moves: list[dict]) -> dict | None:
    """The biggest per-op move in the direction of the whole-function change, when the profile as a whole moved
    that way too; None when it did not (the profile does not explain the change) or there is nothing to explain
    (then the biggest move of any sign)."""
    if not moves:
        return None
    direction = _direction(row, base)
    if direction == 0:
        return moves[0]
    total = sum(r["delta_ns"] for r in moves)
    if (total > 0) - (total < 0) != direction:
        return None
    return next((r for r in moves if (r["delta_ns"] > 0) - (r["delta_ns"] < 0) == direction), None)


# ------------------------------------------------------------------------------------------------ wording


def moved_line(row: dict, base: dict, diff: dict) -> str:
    """One line: how the median moved and the op or fusion whose time moved most in the same direction, or that
    the per-op profile does not explain the change."""
    head = _median_move(row, base)
    moves = diff.get("per_op") or []
    top_row = diff.get("moved_row")
    if moves and diff.get("moved_how") == "uncovered":
        return head + "; " + coverage_text(diff["coverage"], base["label"], row["label"])
    if moves:
        if top_row is None:
            total = sum(r["delta_ns"] for r in moves)
            return (head + f"; the per-op profile does not explain it (its ops moved {signed_ns(total)} in all; "
                    f"biggest move: {describe_move(moves[0])})")
        if _direction(row, base) == 0:
            return head + "; biggest per-op move: " + describe_move(top_row)
        return head + "; most moved: " + describe_move(top_row) + _fusion_caution(top_row, diff.get("fusion"))
    missing = [r["label"] for r in (base, row) if not r["per_op"]]
    fusion = diff.get("fusion")
    tail = f"; no per-op profile for {', '.join(missing)}" if missing else "; no per-op rows"
    if fusion is not None:
        tail += "; same fusion structure" if fusion["identical"] else "; fusion structure differs"
    return head + tail


FUSION_CHANGES = ("wrapped", "unwrapped", "rekinded", "similar", "merged", "split")
EXPLAIN_HINT = "only an experiment shows a cause: `reprobundle explain`"


def _fusion_caution(top_row: dict, fusion: dict | None) -> str:
    """Where the op that moved most also changed its fusion: say that the two happened together, and that this does
    not make the fusion change the cause (the time may have moved in how the op is compiled or run)."""
    if top_row.get("match") in FUSION_CHANGES:
        return f"; its fusion changed too ({top_row['match']}): a change, not shown to be the cause ({EXPLAIN_HINT})"
    return ""


def coverage_text(coverage: dict, base_label: str, cand_label: str) -> str:
    """`the per-op profile does not explain the step: its ops add up to 42% of the median on 0.7.2 (and 97% on
    0.8.0); naming an op needs at least 75%`."""
    parts = [f"{'no table' if c is None else f'{c:.0%}'} of the median on {label}"
             for label, c in ((base_label, coverage.get("base")), (cand_label, coverage.get("cand")))]
    return (f"the per-op profile does not explain the step: its ops add up to {parts[0]} and {parts[1]}; naming an "
            f"op needs at least {COVERAGE_MIN:.0%} (replay on a release whose profiler traces whole ops, or "
            f"use `reprobundle isolate`)")


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
    base = human_ns(r["base_ns"]) if r["base_ns"] is not None else ("not profiled" if r.get("base_name") else "absent")
    cand = human_ns(r["cand_ns"]) if r["cand_ns"] is not None else ("not profiled" if r.get("cand_name") else "absent")
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
