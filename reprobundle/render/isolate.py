"""Rendering an isolation (investigate/minimize/pieces.py): one line per piece, then the piece that moved and its bundle."""

from __future__ import annotations

from ..analysis.sequential import MIN_EFFECT
from ..units import human_ns
from .listing import table


def isolation_data(iso) -> dict:
    """The isolation as plain data (JSON-able)."""
    def piece(r) -> dict:
        v = r.verdict or {}
        return {"index": r.piece.index + 1, "label": r.piece.label, "ops": len(r.piece.ops),
                "inputs": len(r.piece.inputs), "outputs": len(r.piece.outputs),
                "base_ns": r.base_ns, "cand_ns": r.cand_ns, "delta_ns": r.delta_ns if r.verdict else None,
                "ratio": v.get("ratio"), "ci95": v.get("ci95"), "verdict": v.get("verdict"),
                "settled": v.get("settled"), "rounds": v.get("rounds"), "p_value": v.get("p_value"),
                "ruled_out_after": r.ruled_out, "statuses": [run["status"] for run in r.runs]}

    return {"bundle": iso.bundle, "baseline": iso.versions[0], "candidate": iso.versions[1],
            "function": iso.function, "pieces": [piece(r) for r in iso.pieces],
            "moved": piece(iso.moved) if iso.moved else None, "packed": iso.packed,
            "summary": summary_line(iso)}


def summary_line(iso) -> str:
    base, cand = iso.versions
    if iso.moved is None:
        return f"no piece of {iso.bundle} ran on both jax {base} and {cand}"
    r, v = iso.moved, iso.moved.verdict
    lo, hi = v["ci95"] if v.get("ci95") else (v["ratio"], v["ratio"])
    sign = "+" if r.delta_ns >= 0 else "-"
    what = "moved most" if r.differs else "no piece moved measurably; the biggest change"
    return (f"piece {r.piece.index + 1} ({r.piece.label}) {what}: {human_ns(r.base_ns)} on jax {base}, "
            f"{v['ratio']:.2f}x on jax {cand} ({sign}{human_ns(abs(r.delta_ns))}; 95% CI {lo:.2f}-{hi:.2f}x; "
            f"{v['verdict']}" + ("" if v.get("settled") else ", not settled")
            + f", {v['rounds']} paired rounds); packed as {iso.packed}: replay it with `reprobundle replay "
            f"{iso.packed} --jax {base} --jax {cand}`")


def _verdict_cell(r) -> str:
    v = r.verdict or {}
    if not v:
        return "/".join(run["status"] for run in r.runs) or "-"
    if r.ruled_out is not None and not v.get("settled"):
        return f"ruled out after {r.ruled_out} round{'s' if r.ruled_out != 1 else ''}"
    return str(v.get("verdict")) + ("" if v.get("settled", True) else " (not settled)")


def isolation_text(iso) -> str:
    rows = []
    for r in iso.pieces:
        v = r.verdict or {}
        rows.append([str(r.piece.index + 1) + (" *" if r is iso.moved else ""), r.piece.label,
                     str(len(r.piece.ops)), human_ns(r.base_ns) if r.base_ns is not None else "-",
                     human_ns(r.cand_ns) if r.cand_ns is not None else "-",
                     f"{v['ratio']:.3f}x" if v.get("ratio") else "-", _verdict_cell(r)])
    head = f"{iso.bundle}: @{iso.function} in {len(iso.pieces)} pieces, each timed as its own program on jax " \
           f"{iso.versions[0]} and {iso.versions[1]} (paired rounds, all pieces in one measurement)"
    lines = [head, "", table(["PIECE", "SOURCE", "OPS", iso.versions[0], iso.versions[1], "RATIO", "VERDICT"], rows)]
    if any(r.ruled_out is not None for r in iso.pieces):
        lines.append("ruled out: no longer timed once its change was certainly smaller than another piece's, or "
                     f"than {MIN_EFFECT:.0%} of the function's time")
    return "\n".join(lines + ["", summary_line(iso)])
