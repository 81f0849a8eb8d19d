"""Rendering a comparison (analysis/comparison.py's data) for a terminal, a GitHub issue and a browser. No I/O."""

from __future__ import annotations

import html
import math
import re

import numpy as np

from ..analysis.comparison import REFERENCE, TIMED, short, signed_ns
from ..units import human_ns
from .text import table

MD_MAX_LINES = 60  # per <details> list: a GitHub issue body holds 65536 characters
HTML_MAX_LINES = 1000


def _err_text(err: dict | None) -> str:
    if not err:
        return "-"
    if err.get("bit_identical"):
        return "bit-exact"
    value = err.get("max_abs_err")
    text = f"{value:.2g}" if isinstance(value, (int, float)) else "?"
    return text if err.get("ok") else f"{text} (over tol)"


def _ratio_text(row: dict) -> str:
    if row["ratio"] is None:
        return "-"
    ci = row.get("ci95")
    if ci and None not in ci and not row["is_baseline"]:
        return f"{row['ratio']:.3f}x [{ci[0]:.3f}-{ci[1]:.3f}]"
    return f"{row['ratio']:.2f}x"


def _verdict_text(row: dict) -> str:
    if row["verdict"] in (None, "baseline"):
        return row["verdict"] or "-"
    return f"{row['verdict']} (p={row['p_value']:.1g})" if row.get("p_value") is not None else row["verdict"]


def _cells(row: dict) -> list[str]:
    """The table cells of one version: the same columns in every renderer."""
    status = row["status"] if row["status"] in TIMED else f"{row['status']}: {_first_line(row['reason'], 40)}"
    return [row["label"] + (" *" if row["is_baseline"] else ""), row["jax"], status,
            human_ns(row["median_ns"]) if row["median_ns"] is not None else "-",
            human_ns(row["iqr_ns"]) if row["iqr_ns"] is not None else "-",
            _ratio_text(row), _verdict_text(row),
            _err_text(row["err_ref"]), _err_text(row["err_base"]),
            f"{row['compile_s']:.2f} s" if row["compile_s"] is not None else "-",
            str(row["fusions"]) if row["fusions"] is not None else "-"]


HEADERS = ["VERSION", "JAX", "STATUS", "MEDIAN", "IQR", "VS BASE", "VERDICT", "ERR VS REF", "ERR VS BASE",
           "COMPILE", "FUSIONS"]
MOVE_HEADERS = ["BASELINE OP", "CANDIDATE OP", "OPS", "MATCH", "BASELINE", "CANDIDATE", "DELTA", "RATIO"]


def _move_cells(r: dict) -> list[str]:
    return [short(r["base_name"]) if r["base_name"] else "-", r["cand_name"] or "-", r["signature"] or r["kind"],
            r["match"], human_ns(r["base_ns"]) if r["base_ns"] is not None else "-",
            human_ns(r["cand_ns"]) if r["cand_ns"] is not None else "-", signed_ns(r["delta_ns"]),
            f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"]


def _tail(text: str, limit: int) -> str:
    """The end of a long message (where tracebacks keep the error), safe inside a fenced code block."""
    text = (text or "").strip().replace("```", "` ` `")
    return text if len(text) <= limit else "…" + text[-limit:]


def _first_line(text: str, limit: int) -> str:
    line = (text or "").strip().splitlines()[0] if (text or "").strip() else ""
    return line if len(line) <= limit else line[:limit - 1] + "…"


def _env_text(env: dict) -> str:
    parts = [f"jax {env['jax']}" if "jax" in env else "", f"jaxlib {env['jaxlib']}" if "jaxlib" in env else "",
             f"Python {env['python']}" if "python" in env else "", env.get("platform", ""), env.get("cpu_model", "")]
    return ", ".join(p for p in parts if p) or "unknown"


def _count(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _header_lines(c: dict) -> list[str]:
    fn = f" ({c['function']})" if c["function"] else ""
    return [f"{c['bundle']}{fn}: {_count(sum(r['requested'] != REFERENCE for r in c['rows']), 'run')}, baseline {_baseline_text(c)}",
            f"packed with {_env_text(c['packed'])}", f"runs on {_env_text({k: v for k, v in c['machine'].items() if k not in ('jax', 'jaxlib')})}"]


def _baseline_text(c: dict) -> str:
    return f"jax {c['baseline']}" if c["baseline"] and c["baseline"] != REFERENCE else (c["baseline"] or "none")


def _fusion_lines(f: dict) -> list[str]:
    """The fusion diff as short lines: one per refused/changed/merged/split/new/gone item."""
    lines = []
    for e in f["refused"]:
        lines.append(f"{e['how']}: {e['base']} ({e['base_kind']}) -> {e['cand']} ({e['cand_kind']}): {e['label']} {e['shape']}")
    for e in f["changed"]:
        moved = [f"+{k}" for k in e["entered"]] + [f"-{k}" for k in e["left"]]
        if e["base_shape"] != e["shape"]:
            moved.append(f"shape {e['base_shape']} -> {e['shape']}")
        if e["base_kind"] != e["cand_kind"]:
            moved.append(f"kind {e['base_kind']} -> {e['cand_kind']}")
        lines.append(f"changed: {e['base']} -> {e['cand']} ({e['label']}): {', '.join(moved)}")
    for e in f["merged"]:
        lines.append(f"merged: {short(' + '.join(x['name'] for x in e['absorbed']), 8)} -> {e['name']} ({e['kind']}: {e['label']})")
    for e in f["split"]:
        lines.append(f"split: {e['name']} ({e['kind']}) -> {', '.join(x['name'] for x in e['split_into'])}")
    lines += [f"new: {e['name']} ({e['kind']}: {e['label']}) {e['shape']}" for e in f["appeared"]]
    lines += [f"gone: {e['name']} ({e['kind']}: {e['label']}) {e['shape']}" for e in f["disappeared"]]
    lines += [f"unfused only in baseline: {e['name']} ({e['label']}) {e['shape']}" for e in f["unfused_only_base"]]
    lines += [f"unfused only in candidate: {e['name']} ({e['label']}) {e['shape']}" for e in f["unfused_only_cand"]]
    return lines


def _kinds_text(counts: dict) -> str:
    return f"{counts['fusions']} fusions (" + ", ".join(f"{k} {n}" for k, n in counts["by_kind"].items()) + f"), {counts['unfused']} unfused"


# ------------------------------------------------------------------------------------------------ text


def to_text(c: dict) -> str:
    """A terminal report: header, the version table, then per version where the time moved and what fused."""
    out = _header_lines(c) + ["", table(HEADERS, [_cells(r) for r in c["rows"]])]
    for d in c["diffs"]:
        out += ["", f"jax {d['label']} vs {d['vs']}: {d['moved']}"]
        if d["fusion"] is not None:
            f = d["fusion"]
            out.append(f"  fusion: {_kinds_text(f['base'])} -> {_kinds_text(f['cand'])}; {f['summary']}")
            lines = _fusion_lines(f)
            out += ["    " + line for line in lines[:12]] + ([f"    ... and {len(lines) - 12} more"] if len(lines) > 12 else [])
        if d["per_op"]:
            rows = [_move_cells(r) for r in d["per_op"][:c["top"]]]
            out += ["  top per-op moves:"] + ["    " + line for line in table(MOVE_HEADERS, rows).splitlines()]
    if c["notes"]:
        out += ["", "notes:"] + [f"  {_first_line(n, 200)}" for n in c["notes"]]
    return "\n".join(out)


# ------------------------------------------------------------------------------------------------ markdown


def _md(text: str) -> str:
    """Text safe in Markdown (table cells too): no HTML, no emphasis from op names like `__ynn_fusion`."""
    text = html.escape(str(text).replace("->", "→"), quote=False).replace("\n", " ")
    return re.sub(r"([\\|*_`\[\]~])", r"\\\1", text)


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(_md(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(_md(x) for x in row) + " |" for row in rows])


def _capped(items: list, limit: int) -> tuple[list, str]:
    """The first `limit` items and a note on the rest ("" when none left out)."""
    return items[:limit], (f"... and {len(items) - limit} more" if len(items) > limit else "")


def _details(summary: str, body: str) -> str:
    return f"<details><summary>{html.escape(summary)}</summary>\n\n{body}\n\n</details>"


def to_markdown(c: dict) -> str:
    """A GitHub-issue-ready report: header, the version table, per-version moves; long parts in <details>."""
    head = _header_lines(c)
    out = [f"### reprobundle: `{c['bundle']}` across JAX versions", "",
           f"**Bundle** `{c['bundle']}`" + (f" (`{c['function']}`)" if c["function"] else "")
           + (f", id `{c['bundle_id'][:19]}`" if c.get("bundle_id") else "") + "  ",
           f"**Packed with** {_md(_env_text(c['packed']))}  ", f"**Runs on** {_md(head[2][len('runs on '):])}  ",
           f"**Baseline** {_md(_baseline_text(c))} (marked *)", "",
           _md_table(HEADERS, [_cells(r) for r in c["rows"]])]
    for d in c["diffs"]:
        out += ["", f"#### jax {_md(d['label'])} vs {_md(d['vs'])}", "", f"**Where the time moved:** {_md(d['moved'])}"]
        out += _md_fusion(d["fusion"]) + _md_moves(d, c["top"])
    failures = [r for r in c["rows"] if r["status"] not in TIMED]
    if failures:
        body = "\n\n".join(f"**jax {_md(r['label'])}: {r['status']}**\n\n```\n{_tail(r['reason'], 3000)}\n```"
                             for r in failures)
        out += ["", _details(f"{len(failures)} version(s) did not run", body)]
    if c["notes"]:
        out += ["", "Notes:"] + [f"- {_md(n)}" for n in c["notes"]]
    return "\n".join(out) + "\n"


def _md_fusion(f: dict | None) -> list[str]:
    if f is None:
        return ["", "_No optimized HLO for one side: no fusion diff._"]
    lines = ["", f"**Fusion:** {_md(_kinds_text(f['base']))} → {_md(_kinds_text(f['cand']))}; {_md(f['summary'])}"]
    items, rest = _capped(_fusion_lines(f), MD_MAX_LINES)
    if items:
        body = "\n".join(f"- {_md(x)}" for x in items) + (f"\n- {rest}" if rest else "")
        lines += ["", _details(f"Fusion diff ({len(_fusion_lines(f))} changes)", body)]
    return lines


def _md_moves(d: dict, top: int) -> list[str]:
    if not d["per_op"]:
        return []
    rows = [_move_cells(r) for r in d["per_op"]]
    out = ["", f"**Top per-op moves** ({min(top, len(rows))} of {len(rows)})", "", _md_table(MOVE_HEADERS, rows[:top])]
    if len(rows) > top:
        shown, rest = _capped(rows, MD_MAX_LINES)
        out += ["", _details(f"More per-op rows ({len(shown)} of {len(rows)})",
                             _md_table(MOVE_HEADERS, shown) + (f"\n\n{rest}" if rest else ""))]
    return out


# ------------------------------------------------------------------------------------------------ html

_CSS = """body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-variant-numeric:tabular-nums}th{background:#f3f3f3}
tr.base td{font-weight:600}.bad{color:#b00}.good{color:#070}code{background:#f5f5f5;padding:0 3px}
details{margin:.5em 0}svg text{font:12px system-ui,sans-serif}"""


def to_html(c: dict) -> str:
    """One self-contained page: header, the version table, a chart of the timing samples, per-version moves."""
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>{e(c['bundle'])}: JAX versions</title>",
             f"<style>{_CSS}</style></head><body>", f"<h1>{e(c['bundle'])} across JAX versions</h1>"]
    parts += [f"<p>{e(line)}</p>" for line in _header_lines(c)]
    parts.append(_html_table(HEADERS, [_cells(r) for r in c["rows"]],
                             [("base" if r["is_baseline"] else _verdict_class(r)) for r in c["rows"]]))
    parts += ["<h2>Timing samples</h2>", timing_chart_svg(c["rows"])]
    for d in c["diffs"]:
        parts += [f"<h2>jax {e(d['label'])} vs {e(d['vs'])}</h2>", f"<p><b>Where the time moved:</b> {e(d['moved'])}</p>"]
        if d["fusion"] is not None:
            f = d["fusion"]
            parts.append(f"<p><b>Fusion:</b> {e(_kinds_text(f['base']))} → {e(_kinds_text(f['cand']))}; {e(f['summary'])}</p>")
            items, rest = _capped(_fusion_lines(f), HTML_MAX_LINES)
            if items:
                parts.append(f"<details><summary>Fusion diff ({len(_fusion_lines(f))} changes)</summary><ul>"
                             + "".join(f"<li>{e(x)}</li>" for x in items + ([rest] if rest else [])) + "</ul></details>")
        if d["per_op"]:
            rows = [_move_cells(r) for r in d["per_op"]]
            parts.append(_html_table(MOVE_HEADERS, rows[:c["top"]]))
            if len(rows) > c["top"]:
                shown, _ = _capped(rows, HTML_MAX_LINES)
                parts.append(f"<details><summary>More per-op rows ({len(shown)} of {len(rows)})</summary>"
                             f"{_html_table(MOVE_HEADERS, shown)}</details>")
    if c["notes"]:
        parts.append("<h2>Notes</h2><ul>" + "".join(f"<li><pre>{e(n)}</pre></li>" for n in c["notes"]) + "</ul>")
    return "\n".join(parts + ["</body></html>"])


def _verdict_class(row: dict) -> str:
    if row["status"] not in TIMED or row["verdict"] == "slower":
        return "bad"
    return "good" if row["verdict"] == "faster" else ""


def _html_table(headers: list[str], rows: list[list[str]], classes: list[str] | None = None) -> str:
    e = html.escape
    body = "".join(f"<tr class='{cls}'>" + "".join(f"<td>{e(x)}</td>" for x in row) + "</tr>"
                   for row, cls in zip(rows, classes or [""] * len(rows)))
    return "<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in headers) + f"</tr>{body}</table>"


def timing_chart_svg(rows: list[dict], width: int = 760, row_h: int = 34, left: int = 150) -> str:
    """Inline SVG: per version, its samples as a strip (deterministic jitter) over a box plot (IQR, median,
    whiskers at 1.5 IQR), on one shared linear time axis."""
    timed = [r for r in rows if r["samples_ns"]]
    if not timed:
        return "<p>No timing samples.</p>"
    lo = min(min(r["samples_ns"]) for r in timed)
    hi = max(max(r["samples_ns"]) for r in timed)
    lo, hi = (lo * 0.98, hi * 1.02) if hi > lo else (lo * 0.9, lo * 1.1 + 1)
    plot_w = width - left - 20
    x = lambda v: left + (v - lo) / (hi - lo) * plot_w  # noqa: E731
    height = row_h * len(timed) + 40
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img'>"]
    for i, r in enumerate(timed):
        out += _svg_row(r, i * row_h + 10, row_h, x)
    out += _svg_axis(lo, hi, x, row_h * len(timed) + 12)
    return "".join(out + ["</svg>"])


def _svg_row(r: dict, y0: float, row_h: int, x) -> list[str]:
    s = np.asarray(r["samples_ns"], dtype=np.float64)
    q1, med, q3 = np.percentile(s, [25, 50, 75])
    iqr = q3 - q1
    inside = s[(s >= q1 - 1.5 * iqr) & (s <= q3 + 1.5 * iqr)]
    w_lo, w_hi = float(inside.min()), float(inside.max())
    mid, color = y0 + row_h / 2, "#c33" if r["verdict"] == "slower" else "#393" if r["verdict"] == "faster" else "#357"
    label = html.escape(_first_line(r["label"] + (" (baseline)" if r["is_baseline"] else ""), 20))
    out = [f"<text x='4' y='{mid + 4:.1f}'>{label}</text>",
           f"<line x1='{x(w_lo):.1f}' x2='{x(w_hi):.1f}' y1='{mid:.1f}' y2='{mid:.1f}' stroke='#999'/>",
           f"<rect x='{x(q1):.1f}' y='{mid - 9:.1f}' width='{max(x(q3) - x(q1), 1):.1f}' height='18' "
           f"fill='{color}' fill-opacity='0.15' stroke='{color}'/>",
           f"<line x1='{x(med):.1f}' x2='{x(med):.1f}' y1='{mid - 9:.1f}' y2='{mid + 9:.1f}' stroke='{color}' stroke-width='2'/>"]
    for j, v in enumerate(s):
        jitter = ((j * 0.618034) % 1.0 - 0.5) * 12
        out.append(f"<circle cx='{x(v):.1f}' cy='{mid + jitter:.1f}' r='1.8' fill='{color}' fill-opacity='0.5'/>")
    out.append(f"<title>{label}: median {html.escape(human_ns(med))}, n={s.size}</title>")
    return out


def _svg_axis(lo: float, hi: float, x, y: float) -> list[str]:
    out = [f"<line x1='{x(lo):.1f}' x2='{x(hi):.1f}' y1='{y}' y2='{y}' stroke='#333'/>"]
    for v in nice_ticks(lo, hi):
        out += [f"<line x1='{x(v):.1f}' x2='{x(v):.1f}' y1='{y}' y2='{y + 4}' stroke='#333'/>",
                f"<text x='{x(v):.1f}' y='{y + 17}' text-anchor='middle'>{html.escape(_tick_label(v))}</text>"]
    return out


def _tick_label(ns: float) -> str:
    """human_ns without trailing zeros: `300 ms`, `2.5 ms`."""
    return re.sub(r"\.?0+ ", " ", human_ns(ns)) if "." in human_ns(ns) else human_ns(ns)


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) inside [lo, hi]."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    return [first + k * step for k in range(int((hi - first) / step) + 1)]
