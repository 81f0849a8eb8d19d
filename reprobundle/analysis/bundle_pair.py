"""Two bundles of one program, each traced by its own release (`capture --jax A`, `capture --jax B`), compared: what
JAX's lowering changed between their StableHLO, whether they take the same inputs, and their timings side by side.

Timings are paired (a verdict with its interval) only where both bundles ran in one interleaved measurement
(`compare A B --replay`: their runs share a `group`); their reference runs and runs of separate replays are shown
apart, as a ratio of medians without a verdict, like `compare` does for one bundle. No I/O: the caller loads the
manifests, the StableHLO texts and the stored runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..bundle.model import run_label
from .lowering_diff import lowering_diff, program_files_in
from .timing_summary import TimingSummary
from .verdict import timing_verdict

APART = "measured apart: a ratio of medians, no verdict; `--replay` times both together"


@dataclass
class Side:
    """One bundle as the comparison sees it: its ref, manifest, StableHLO text and stored runs (oldest first)."""

    ref: str
    manifest: dict
    stablehlo: str | None
    runs: list[dict] = field(default_factory=list)
    program_files: list[str] = field(default_factory=list)

    @property
    def traced_by(self) -> str:
        return traced_by(self.manifest)


def traced_by(manifest: dict) -> str:
    """The JAX release that traced the bundle's program (manifest 3), else the one it was packed on, else "?"."""
    function = manifest.get("function") or {}
    return str((function.get("traced_by") or {}).get("jax") or (manifest.get("environment") or {}).get("jax") or "?")


def compare_pair(a: Side, b: Side) -> dict:
    """{"bundles": [a, b], "same_inputs", "input_note", "lowering": lowering_diff of a -> b (None without both
    texts), "rows": timing rows, "group": the joint replay used or None, "headline", "notes"}. A row is
    {"label", "a": side's run summary, "b": ..., "ratio" (b / a), "verdict" (paired) | None, "together"}."""
    same_inputs, input_note = _inputs(a.manifest, b.manifest)
    lowering = None
    if a.stablehlo and b.stablehlo:
        files = sorted({*a.program_files, *b.program_files} or program_files_in(a.stablehlo + b.stablehlo))
        lowering = lowering_diff(a.stablehlo, b.stablehlo, files)
    group, rows = _rows(a, b)
    notes = [input_note] if input_note else []
    if group is None:
        notes.append(f"{a.ref} and {b.ref} were never replayed together: the timings are {APART}")
    return {"bundles": [_describe(a), _describe(b)], "same_inputs": same_inputs, "lowering": lowering,
            "rows": rows, "group": group, "headline": _headline(a, b, lowering, rows), "notes": notes}


def _describe(side: Side) -> dict[str, Any]:
    program = (side.manifest.get("function") or {}).get("program") or {}
    return {"ref": side.ref, "traced_by": side.traced_by, "name": side.manifest.get("name"),
            "script": program.get("script"), "factory": program.get("factory"),
            "function": ((side.manifest.get("function") or {}).get("fields") or {}).get("fun_name")}


def _inputs(a: dict, b: dict) -> tuple[bool, str]:
    """Whether the two take the same inputs (shapes and dtypes; and bytes where both stored them)."""
    la, lb = (a.get("inputs") or {}).get("leaves") or [], (b.get("inputs") or {}).get("leaves") or []
    avals = [(tuple(x.get("shape") or ()), x.get("dtype")) for x in la]
    if avals != [(tuple(x.get("shape") or ()), x.get("dtype")) for x in lb]:
        return False, ("the two take inputs of other shapes or dtypes: they are not the same computation, so their "
                       "timings are not comparable")
    blobs_a, blobs_b = [x.get("blob") for x in la], [x.get("blob") for x in lb]
    if all(blobs_a) and all(blobs_b) and blobs_a != blobs_b:
        return True, "same shapes and dtypes, other input values (captured from other calls)"
    return True, ""


def _rows(a: Side, b: Side) -> tuple[str | None, list[dict]]:
    """The rows of the latest replay that timed both (per release both ran on, and each on the release that traced
    it), else the reference runs and the latest run of each release both have, apart."""
    group = _latest_joint_group(a.runs, b.runs)
    if group is not None:
        ra = {_release(r): r for r in a.runs if r.get("group") == group}
        rb = {_release(r): r for r in b.runs if r.get("group") == group}
        rows = [_row(f"jax {v}", ra[v], rb[v]) for v in ra if v in rb]
        if a.traced_by != b.traced_by and a.traced_by in ra and b.traced_by in rb:
            rows.insert(0, _row("each on the release that traced it", ra[a.traced_by], rb[b.traced_by]))
        return group, rows
    rows = [_row("reference runs (each at pack, on its own release)", _reference(a.manifest), _reference(b.manifest))]
    latest_a = {_release(r): r for r in a.runs}
    latest_b = {_release(r): r for r in b.runs}
    rows += [_row(f"jax {v}", latest_a[v], latest_b[v]) for v in latest_a if v in latest_b]
    return None, rows


def _release(run: dict) -> str:
    """The JAX a run ran on (`installed` resolved), with its contender's mode or settings when it has them."""
    label, jax = run_label(run), (run.get("environment") or {}).get("jax")
    requested = str(run.get("requested") or "")
    return label.replace(requested, str(jax), 1) if jax and requested and label.startswith(requested) else label


def _latest_joint_group(runs_a: Sequence[dict], runs_b: Sequence[dict]) -> str | None:
    groups_b = {r.get("group") for r in runs_b if r.get("group")}
    return next((r["group"] for r in reversed(runs_a) if r.get("group") in groups_b), None)


def _reference(manifest: dict) -> dict:
    reference = manifest.get("reference") or {}
    return {"requested": "reference", "status": "ok", "timing": reference.get("timing") or {},
            "environment": {"jax": (manifest.get("environment") or {}).get("jax")}}


def _summary(run: dict) -> dict:
    t = TimingSummary.of((run.get("timing") or {}).get("samples_ns") or [])
    return {"label": run_label(run), "jax": str((run.get("environment") or {}).get("jax") or "?"),
            "status": run.get("status", "ok"), "reason": run.get("reason", ""),
            "median_ns": t.median_ns if t.n else None}


def _row(label: str, run_a: dict, run_b: dict) -> dict:
    sa, sb = _summary(run_a), _summary(run_b)
    ratio = sb["median_ns"] / sa["median_ns"] if sa["median_ns"] and sb["median_ns"] else None
    ta, tb = run_a.get("timing") or {}, run_b.get("timing") or {}
    together = ta.get("group") is not None and ta.get("group") == tb.get("group")
    verdict = None
    if together and ratio is not None:
        verdict = timing_verdict(ta, tb)
        verdict = None if verdict.get("method") != "paired rounds" else verdict
    return {"label": label, "a": sa, "b": sb, "ratio": ratio, "verdict": verdict, "together": verdict is not None}


def _headline(a: Side, b: Side, lowering: dict | None, rows: list[dict]) -> str:
    if lowering is None:
        what = "their StableHLO could not be compared (a bundle without its StableHLO text)"
    elif lowering["changed"]:
        what = f"the lowering differs ({lowering['text']})"
    else:
        what = "the same lowering (StableHLO equal once locations, names and debug info are set aside)"
    timed = next((r for r in rows if r["verdict"] and r["verdict"].get("settled")), None)
    if timed is None:
        return f"{b.ref} (traced by {b.traced_by}) vs {a.ref} (traced by {a.traced_by}): {what}; no settled timing verdict"
    v = timed["verdict"]
    return (f"{b.ref} (traced by {b.traced_by}) vs {a.ref} (traced by {a.traced_by}): {what}; {timed['label']}: "
            f"{v['ratio']:.2f}x the time, {v['verdict']}")
