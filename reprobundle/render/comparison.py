"""Rendering a comparison (analysis/comparison.py's data) for a terminal, a GitHub issue and a browser. No I/O.

Every rendering starts with the headlines (one sentence per candidate: direction, ratio, 95% interval, how it was
measured, p), then the Reproduce block when the comparison carries one, then one narrow table; runs not timed
together with the baseline are shown apart, without a verdict. The terminal text fits `width` columns (100 by
default); the Markdown fits GitHub's comment column (details collapsed); the HTML is one offline page that fits
1000 px, with a colour-blind-safe palette (Okabe-Ito).
"""

from __future__ import annotations

import html
import math
import re
import textwrap

import numpy as np

from ..analysis.comparison import REFERENCE, TIMED, short, signed_ns
from ..text import clean, cut, first_line
from ..units import human_ns
from .sharing import reproduce_lines, reproduce_markdown, reproduce_text, where_text
from .table import STYLES, grid, paint

WIDTH = 100  # terminal columns the text fits unless told more
WIDE = 140  # from this width on, the table shows every column
MD_MAX_LINES = 60  # per <details> list: a GitHub issue body holds 65536 characters
HTML_MAX_LINES = 1000
TEXT_TOP = 6  # per-op rows in the terminal (the Markdown and HTML show `top`)

# Okabe-Ito: told apart with every common colour-vision deficiency.
PALETTE = {"slower": "#D55E00", "faster": "#0072B2", "same": "#009E73", "baseline": "#000000", "failed": "#CC79A7",
           "apart": "#999999", "unknown": "#999999"}


# ------------------------------------------------------------------------------------------------ shared


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
    return f"{row['ratio']:.2f}x"


def _ci_text(row: dict) -> str:
    ci = row.get("ci95")
    if row["is_baseline"] or not ci or None in ci:
        return "-"
    return f"{ci[0]:.2f}-{ci[1]:.2f}x"


def _verdict_word(row: dict) -> str:
    if row["status"] not in TIMED:
        return row["status"]
    if row["is_baseline"]:
        return "baseline"
    return row["verdict"] or ("no verdict" if row["together"] else "apart")


def _style_of(row: dict) -> str:
    if row["status"] not in TIMED:
        return "failed"
    if row["is_baseline"]:
        return "baseline"
    if not row["together"]:
        return "apart"
    return row["verdict"] if row["verdict"] in ("slower", "faster", "same") else "unknown"


def _version_cell(row: dict) -> str:
    label = row["label"]
    if row["jax"] not in ("?", label) and not label.startswith(row["jax"]):
        label += f" ({row['jax']})"
    return label + (" *" if row["is_baseline"] else "")


def _p_text(row: dict) -> str:
    return f"{row['p_value']:.1g}" if row.get("p_value") is not None else "-"


def _compared(c: dict) -> list[dict]:
    """The rows of the main table: the baseline, candidates timed together with it, and versions that failed."""
    return [r for r in c["rows"] if r["is_baseline"] or r["together"] or r["status"] not in TIMED]


def _apart(c: dict) -> list[dict]:
    return [r for r in c["rows"] if not (r["is_baseline"] or r["together"] or r["status"] not in TIMED)]


def _apart_line(r: dict, c: dict) -> str:
    ratio = f", {r['ratio']:.2f}x the baseline's median" if r["ratio"] else ""
    median = human_ns(r["median_ns"]) if r["median_ns"] is not None else "-"
    reason = r["apart_reason"] or "not timed together"
    return f"{r['label']} (jax {r['jax']}): median {median}{ratio}; {reason}"


def _run_line(u: dict) -> str:
    when = (u.get("created") or "")[:16].replace("T", " ")
    together = "baseline" if u["is_baseline"] else ("timed together" if u["together"] else "apart")
    return f"{u['label']}: run {u.get('run_id') or 'reference (pack)'}, {when or '?'}, {u['budget']}, {together}"


def _env_text(env: dict) -> str:
    parts = [f"jax {env['jax']}" if "jax" in env else "", f"jaxlib {env['jaxlib']}" if "jaxlib" in env else "",
             f"Python {env['python']}" if "python" in env else "", env.get("platform", ""),
             env.get("device_kind", "") if env.get("device_kind") != env.get("cpu_model") else "",
             env.get("cpu_model", "")]
    return ", ".join(p for p in parts if p) or "unknown"


def _context_line(c: dict) -> str:
    fn = f" ({c['function']})" if c["function"] else ""
    n = sum(r["requested"] != REFERENCE for r in c["rows"])
    machine = _env_text({k: v for k, v in c["machine"].items() if k not in ("jax", "jaxlib")})
    return f"{c['bundle']}{fn}: {n} run{'s' if n != 1 else ''}, baseline {_baseline_text(c)}, on {machine}"


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
        absorbed = short(" + ".join(x["name"] for x in e["absorbed"]), 8)
        lines.append(f"merged: {absorbed} -> {e['name']} ({e['kind']}: {e['label']})")
    for e in f["split"]:
        lines.append(f"split: {e['name']} ({e['kind']}) -> {', '.join(x['name'] for x in e['split_into'])}")
    lines += [f"new: {e['name']} ({e['kind']}: {e['label']}) {e['shape']}" for e in f["appeared"]]
    lines += [f"gone: {e['name']} ({e['kind']}: {e['label']}) {e['shape']}" for e in f["disappeared"]]
    lines += [f"unfused only in baseline: {e['name']} ({e['label']}) {e['shape']}" for e in f["unfused_only_base"]]
    lines += [f"unfused only in candidate: {e['name']} ({e['label']}) {e['shape']}" for e in f["unfused_only_cand"]]
    return lines


def fusion_note(f: dict) -> str:
    """What a fusion diff is: a change between the versions, which an experiment alone can show to be the cause."""
    return "" if f.get("identical") else " (what changed, not why: reprobundle explain tests whether it is the cause)"


def _kinds_text(counts: dict) -> str:
    kinds = ", ".join(f"{k} {n}" for k, n in counts["by_kind"].items())
    return f"{counts['fusions']} fusions ({kinds}), {counts['unfused']} unfused"


def op_text(r: dict, arrow: str = "->") -> str:
    """The op of a per-op row, named once when it did not change: `dot_general.9 (dot)`,
    `reduce-window -> wrapped_reduce-window (wrapped, reduce-window)`."""
    b, c = r.get("base_name"), r.get("cand_name")
    what = r.get("signature") or r.get("kind") or ""
    if b and c and b == c:
        return f"{b} ({what})" if what else b
    if b and c:
        names, detail = f"{short(b)} {arrow} {c}", _joined(r["match"], what)
    else:
        names, detail = short(b or c or "?"), _joined("gone" if b else "new", what)
    return f"{names} ({detail})"


def _joined(*parts: str) -> str:
    return ", ".join(x for x in parts if x)


def _move_cells(r: dict, arrow: str = "->") -> list[str]:
    return [signed_ns(r["delta_ns"]), f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-",
            human_ns(r["base_ns"]) if r["base_ns"] is not None else "-",
            human_ns(r["cand_ns"]) if r["cand_ns"] is not None else "-", op_text(r, arrow)]


MOVE_HEADERS = ["DELTA", "RATIO", "BASELINE", "CANDIDATE", "OP"]


def _moved_summary(d: dict) -> str:
    """`jax 0.8.0 vs 0.7.2: most moved wrapped_reduce-window (+3.1 ms)`: a details summary."""
    r = d.get("moved_row")
    head = f"jax {d['label']} vs {d['vs']}"
    if r is None:
        return head + (": the per-op profile does not explain the change" if d["per_op"] else ": fusion and ops")
    name = r.get("cand_name") or r.get("base_name") or "?"
    what = "most moved" if d.get("moved_how") == "explains" else "biggest per-op move"
    return f"{head}: {what} {short(name, 2)} ({signed_ns(r['delta_ns'])})"


# ------------------------------------------------------------------------------------------------ text




def _wrap(text: str, width: int, indent: str = "", more: str = "    ") -> list[str]:
    return textwrap.wrap(text, width=width, initial_indent=indent, subsequent_indent=indent + more,
                         break_long_words=True, break_on_hyphens=False) or [indent.rstrip()]


def _text_table(c: dict, width: int, color: bool) -> list[str]:
    rows = _compared(c)
    wide = width >= WIDE
    headers = ["VERSION", "STATUS", "MEDIAN", "IQR", "VS BASE", "95% CI", "VERDICT", "ERR VS REF", "FUSIONS"]
    if wide:
        headers[1:1] = ["JAX"]
        headers[8:8] = ["P"]
        headers += ["ERR VS BASE", "COMPILE"]
    cells, styles = [], []
    for r in rows:
        line = [_version_cell(r), r["status"], human_ns(r["median_ns"]) if r["median_ns"] is not None else "-",
                human_ns(r["iqr_ns"]) if r["iqr_ns"] is not None else "-", _ratio_text(r), _ci_text(r),
                _verdict_word(r), _err_text(r["err_ref"]), str(r["fusions"]) if r["fusions"] is not None else "-"]
        if wide:
            line[1:1] = [r["jax"]]
            line[8:8] = [_p_text(r)]
            line += [_err_text(r["err_base"]), f"{r['compile_s']:.2f} s" if r["compile_s"] is not None else "-"]
        cells.append(line)
        st = [""] * len(line)
        st[headers.index("VERDICT")] = _style_of(r)
        st[headers.index("STATUS")] = "failed" if r["status"] not in TIMED else ""
        styles.append(st)
    return grid(headers, cells, width=width, styles=styles, color=color, flex=0)


def _cleaned(obj):
    """The comparison with every string made one line of printable text (text.clean, not cut)."""
    if isinstance(obj, str):
        return clean(obj, None)
    if isinstance(obj, dict):
        return {k: _cleaned(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_cleaned(v) for v in obj]
    return obj


def to_text(c: dict, width: int = WIDTH, color: bool = False) -> str:
    """A terminal report: the headlines, the version table, runs timed apart, then per version where the time
    moved and what fused, the runs used and the notes. Every line fits `width` columns (at least 100 used)."""
    width = max(WIDTH, width)
    c = _cleaned(c)  # names, reasons and notes come from bundles and runs: no control character reaches a terminal
    out = [line for h in c["headlines"] for line in _text_headline(h, width, color)]
    out += ["", cut(_context_line(c), width)]
    rep = c.get("reproduce")
    if rep:
        out += [""] + [line for x in reproduce_text(rep, brief=True) for line in _wrap(x, width, more="  ")]
    out += [""] + _text_table(c, width, color)
    apart = _apart(c)
    if apart:
        out += ["", paint("Not timed together with the baseline (not comparable, no verdict):", "apart", color)]
        out += [line for r in apart for line in _wrap(_apart_line(r, c), width, "  ")]
    for d in c["diffs"]:
        out += _text_diff(d, width)
    return "\n".join(out + _text_runs_and_notes(c, width))


def _text_headline(h: dict, width: int, color: bool) -> list[str]:
    style = h["direction"] if h["direction"] in STYLES else ""
    return [paint(line, style, color) for line in _wrap(h["text"], width)]


def _text_diff(d: dict, width: int) -> list[str]:
    """One version's moves against its baseline: where the time moved, lowering, fusion, the top per-op moves."""
    out = [""] + _wrap(f"jax {d['label']} vs {d['vs']}: {d['moved']}", width, more="  ")
    if d.get("lowering"):
        out += _wrap(f"lowering: {d['lowering']['text']}", width, "  ", "  ")
    if d["fusion"] is not None:
        out += _text_fusion(d["fusion"], width)
    if d["per_op"]:
        out += _text_moves(d["per_op"], width)
    return out


def _text_fusion(f: dict, width: int) -> list[str]:
    out = _wrap(f"fusion: {_kinds_text(f['base'])} -> {_kinds_text(f['cand'])}; {f['summary']}{fusion_note(f)}", width,
                "  ", "  ")
    lines = _fusion_lines(f)
    out += ["    " + cut(line, width - 4) for line in lines[:8]]
    if len(lines) > 8:
        out.append(f"    ... and {len(lines) - 8} more (--report or --html lists them all)")
    return out


def _text_moves(per_op: list[dict], width: int) -> list[str]:
    rows = [_move_cells(r) for r in per_op[:TEXT_TOP]]
    more = len(per_op) - len(rows)
    out = [f"  top per-op moves ({len(rows)} of {len(per_op)}):"]
    out += grid(MOVE_HEADERS, rows, width=width, indent="    ")
    if more > 0:
        out.append(f"    ... and {more} more (--report or --html lists them)")
    return out


def _text_runs_and_notes(c: dict, width: int) -> list[str]:
    out = []
    if c.get("runs_used"):
        out += ["", "Runs used:"] + [line for u in c["runs_used"] for line in _wrap(_run_line(u), width, "  ")]
        if c.get("selection"):
            out += _wrap(c["selection"], width, "  ")
    if c["notes"]:
        out += ["", "Notes:"] + [line for n in c["notes"] for line in _wrap(first_line(n, 400), width, "  ")]
    return out


# ------------------------------------------------------------------------------------------------ markdown


def md(text: str) -> str:
    """Text safe in Markdown (table cells too): no HTML, no emphasis from op names like `__ynn_fusion`."""
    text = html.escape(str(text).replace("->", "→"), quote=False).replace("\n", " ")
    return re.sub(r"([\\|*_`\[\]~])", r"\\\1", text)


def md_table(headers: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(md(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(md(x) for x in row) + " |" for row in rows])


def _capped(items: list, limit: int) -> tuple[list, str]:
    """The first `limit` items and a note on the rest ("" when none left out)."""
    return items[:limit], (f"... and {len(items) - limit} more" if len(items) > limit else "")


def details(summary: str, body: str) -> str:
    return f"<details><summary>{html.escape(summary)}</summary>\n\n{body}\n\n</details>"


def _md_headline(h: dict) -> str:
    text = md(h["text"])
    if h["direction"] in ("slower", "faster", "failed"):
        return f"- **{text}**"
    return f"- {text}"


def _narrow_cells(r: dict) -> list[str]:
    ratio = _ratio_text(r)
    if _ci_text(r) != "-":
        ratio += f" ({_ci_text(r)})"
    verdict = _verdict_word(r)
    if r.get("p_value") is not None:
        verdict += f", p={_p_text(r)}"
    return [_version_cell(r), human_ns(r["median_ns"]) if r["median_ns"] is not None else "-", ratio, verdict,
            _err_text(r["err_ref"])]


NARROW_HEADERS = ["version", "median", "time vs baseline (95% CI)", "verdict", "outputs vs packed"]
FULL_HEADERS = ["VERSION", "JAX", "STATUS", "MEDIAN", "IQR", "VS BASE", "95% CI", "VERDICT", "P", "ERR VS REF",
                "ERR VS BASE", "COMPILE", "FUSIONS", "RUN"]


def _full_cells(r: dict) -> list[str]:
    status = r["status"] if r["status"] in TIMED else f"{r['status']}: {first_line(r['reason'], 40)}"
    return [_version_cell(r), r["jax"], status, human_ns(r["median_ns"]) if r["median_ns"] is not None else "-",
            human_ns(r["iqr_ns"]) if r["iqr_ns"] is not None else "-", _ratio_text(r), _ci_text(r),
            _verdict_word(r), _p_text(r), _err_text(r["err_ref"]), _err_text(r["err_base"]),
            f"{r['compile_s']:.2f} s" if r["compile_s"] is not None else "-",
            str(r["fusions"]) if r["fusions"] is not None else "-", r.get("run_id") or "pack"]


def to_markdown(c: dict) -> str:
    """A GitHub-issue-ready report that fits the comment column: the headlines, the Reproduce block, one narrow
    table; everything else in collapsed <details>."""
    out = [f"### reprobundle: `{c['bundle']}` across JAX versions", ""]
    out += [_md_headline(h) for h in c["headlines"]]
    out += ["", md(_context_line(c)) + " (baseline marked \\*)", "",
            md_table(NARROW_HEADERS, [_narrow_cells(r) for r in _compared(c)])]
    apart = _apart(c)
    if apart:
        out += ["", "Not timed together with the baseline (not comparable, no verdict): "
                + "; ".join(md(_apart_line(r, c)) for r in apart)]
    if c.get("reproduce"):
        out += ["", reproduce_markdown(c["reproduce"])]
    for d in c["diffs"]:
        body = [f"**Where the time moved:** {md(d['moved'])}"]
        body += [f"**Lowering:** {md(d['lowering']['text'])}"] if d.get("lowering") else []
        body += _md_fusion(d["fusion"]) + _md_moves(d, c["top"])
        out += ["", details(_moved_summary(d), "\n".join(body))]
    out += _md_failures(c)
    out += ["", details("Every column", md_table(FULL_HEADERS, [_full_cells(r) for r in c["rows"]]))]
    out += ["", details("Environment, runs used and notes", "\n".join(_md_environment(c)))]
    return "\n".join(out) + "\n"


def _md_failures(c: dict) -> list[str]:
    failures = [r for r in c["rows"] if r["status"] not in TIMED]
    if not failures:
        return []
    reasons = "\n\n".join(f"**jax {md(r['label'])}: {r['status']}**\n\n```\n{_tail(r['reason'], 3000)}\n```"
                          for r in failures)
    return ["", details(f"{len(failures)} version(s) did not run", reasons)]


def _md_environment(c: dict) -> list[str]:
    env = [f"- packed with {md(_env_text(c['packed']))}", f"- runs on {md(_env_text(c['machine']))}"]
    runs = [f"- {md(_run_line(u))}" for u in c.get("runs_used") or []]
    if c.get("selection"):
        runs.append(f"- {md(c['selection'])}")
    notes = [f"- {md(n)}" for n in c["notes"]]
    return env + runs + notes


def _tail(text: str, limit: int) -> str:
    """The end of a long message (where tracebacks keep the error), safe inside a fenced code block."""
    text = (text or "").strip().replace("```", "` ` `")
    return text if len(text) <= limit else "…" + text[-limit:]


def _md_fusion(f: dict | None) -> list[str]:
    if f is None:
        return ["", "_No optimized HLO for one side: no fusion diff._"]
    lines = ["", f"**Fusion:** {md(_kinds_text(f['base']))} → {md(_kinds_text(f['cand']))}; {md(f['summary'] + fusion_note(f))}"]
    items, rest = _capped(_fusion_lines(f), MD_MAX_LINES)
    if items:
        lines += [""] + [f"- {md(x)}" for x in items] + ([f"- {rest}"] if rest else [])
    return lines


def _md_moves(d: dict, top: int) -> list[str]:
    if not d["per_op"]:
        return []
    rows = [_move_cells(r, "→") for r in d["per_op"]]
    shown, rest = _capped(rows, max(top, MD_MAX_LINES))
    return ["", f"**Per-op moves** ({len(shown)} of {len(rows)}, biggest first)", "",
            md_table([h.lower() for h in MOVE_HEADERS], shown)] + (["", rest] if rest else [])


# ------------------------------------------------------------------------------------------------ html

CSS = """body{font:15px/1.45 system-ui,sans-serif;color:#222;max-width:960px;margin:1.5em auto;padding:0 16px}
h1{font-size:1.5em;overflow-wrap:anywhere}h2{font-size:1.2em;margin-top:1.6em}
.scroll{overflow-x:auto;max-width:100%}table{border-collapse:collapse;margin:.6em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:left;font-variant-numeric:tabular-nums;
overflow-wrap:anywhere;vertical-align:top}th{background:#f3f3f3}tr.baseline td{font-weight:600}
.headline{font-size:1.08em;margin:.3em 0;padding:.3em .6em;border-left:6px solid #999}
.headline.slower{border-color:#D55E00}.headline.faster{border-color:#0072B2}.headline.same{border-color:#009E73}
.headline.failed{border-color:#CC79A7}
.apart{color:#555}.tag{font-weight:600}td.slower{color:#D55E00;font-weight:600}td.faster{color:#0072B2;font-weight:600}
td.failed{color:#AA4488;font-weight:600}pre{background:#f5f5f5;padding:.6em;white-space:pre-wrap;
overflow-wrap:anywhere}code{background:#f5f5f5;padding:0 3px;overflow-wrap:anywhere}details{margin:.5em 0}
li{overflow-wrap:anywhere}table.moves td:not(:last-child),table.narrow td{white-space:nowrap}
svg{max-width:100%;height:auto}svg text{font:12px system-ui,sans-serif}
svg .axis-title{font-weight:600}"""


def to_html(c: dict) -> str:
    """One self-contained page: headlines, Reproduce, the version table, a chart of the paired ratios with their
    intervals and one of the timing samples, per-version moves; nothing wider than the page at 1000 px."""
    e = html.escape
    parts = [f"<!doctype html><html><head><meta charset='utf-8'>"
             f"<meta name='viewport' content='width=device-width'><title>{e(c['bundle'])}: JAX versions</title>",
             f"<style>{CSS}</style></head><body>", f"<h1>{e(c['bundle'])} across JAX versions</h1>"]
    parts += [_html_headline(h) for h in c["headlines"]]
    parts.append(f"<p>{e(_context_line(c))} (baseline marked *)</p>")
    rows = _compared(c)
    parts.append(html_table(NARROW_HEADERS, [_narrow_cells(r) for r in rows],
                             ["baseline" if r["is_baseline"] else "" for r in rows],
                             cell_classes=[{3: _style_of(r)} for r in rows], kind="narrow"))
    apart = _apart(c)
    if apart:
        parts.append("<p class='apart'><span class='tag'>Not timed together with the baseline (not comparable, no "
                     "verdict):</span> " + "; ".join(e(_apart_line(r, c)) for r in apart) + "</p>")
    rep = c.get("reproduce")
    if rep:
        parts += ["<h2>Reproduce</h2>"] + _html_reproduce(rep)
    parts += ["<h2>Time against the baseline</h2>", ratio_chart_svg(c),
              "<h2>Timing samples</h2>", timing_chart_svg(c["rows"])]
    for d in c["diffs"]:
        parts += _html_diff(d, c["top"])
    parts += [_html_failure(r) for r in c["rows"] if r["status"] not in TIMED]
    parts += ["<details><summary>Every column</summary>",
              html_table(FULL_HEADERS, [_full_cells(r) for r in c["rows"]]), "</details>"]
    parts.append(_html_environment(c))
    return "\n".join(parts + ["</body></html>"])


def _html_headline(h: dict) -> str:
    cls = h["direction"] if h["direction"] in PALETTE else "apart"
    return f"<p class='headline {cls}'>{html.escape(h['text'])}</p>"


def _html_failure(r: dict) -> str:
    e = html.escape
    return (f"<details><summary>jax {e(r['label'])}: {e(r['status'])}</summary>"
            f"<pre>{e(_tail(r['reason'], 6000))}</pre></details>")


def _html_environment(c: dict) -> str:
    e = html.escape
    runs = [_run_line(u) for u in c.get("runs_used") or []] + ([c["selection"]] if c.get("selection") else [])
    return ("<h2>Environment, runs used and notes</h2><ul>"
            + f"<li>packed with {e(_env_text(c['packed']))}</li><li>runs on {e(_env_text(c['machine']))}</li>"
            + "".join(f"<li>{e(x)}</li>" for x in runs + c["notes"]) + "</ul>")


def _html_diff(d: dict, top: int) -> list[str]:
    """One version's moves against its baseline: where the time moved, the fusion diff, the per-op table."""
    e = html.escape
    parts = [f"<h2>jax {e(d['label'])} vs {e(d['vs'])}</h2>", f"<p><b>Where the time moved:</b> {e(d['moved'])}</p>"]
    if d.get("lowering"):
        parts.append(f"<p><b>Lowering:</b> {e(d['lowering']['text'])}</p>")
    if d["fusion"] is not None:
        f = d["fusion"]
        parts.append(f"<p><b>Fusion:</b> {e(_kinds_text(f['base']))} → {e(_kinds_text(f['cand']))}; "
                     f"{e(f['summary'] + fusion_note(f))}</p>")
        items, rest = _capped(_fusion_lines(f), HTML_MAX_LINES)
        if items:
            parts.append(f"<details><summary>Fusion diff ({len(_fusion_lines(f))} changes)</summary><ul>"
                         + "".join(f"<li>{e(x)}</li>" for x in items + ([rest] if rest else [])) + "</ul></details>")
    if d["per_op"]:
        moves = [_move_cells(r, "→") for r in d["per_op"]]
        parts.append(html_table(MOVE_HEADERS, moves[:top], kind="moves"))
        if len(moves) > top:
            shown, _ = _capped(moves, HTML_MAX_LINES)
            parts.append(f"<details><summary>More per-op rows ({len(shown)} of {len(moves)})</summary>"
                         f"{html_table(MOVE_HEADERS, shown, kind='moves')}</details>")
    return parts


def _html_reproduce(rep: dict) -> list[str]:
    e = html.escape
    out = []
    if rep.get("warning"):
        out.append(f"<p><b>Not shareable yet:</b> {e(rep['warning'])}</p>")
    out.append(f"<p><b>Bundle:</b> {e(where_text(rep))}</p>")
    for caption, commands in reproduce_lines(rep):
        out += [f"<p>{e(caption)}</p>", f"<pre>{e(chr(10).join(commands))}</pre>"]
    return out


def html_table(headers: list[str], rows: list[list[str]], classes: list[str] | None = None,
                cell_classes: list[dict[int, str]] | None = None, kind: str = "") -> str:
    e = html.escape
    body = []
    for k, (row, cls) in enumerate(zip(rows, classes or [""] * len(rows))):
        marks = (cell_classes or [{}] * len(rows))[k]
        body.append(f"<tr class='{cls}'>" + "".join(
            f"<td class='{marks.get(i, '')}'>{e(x)}</td>" if marks.get(i) else f"<td>{e(x)}</td>"
            for i, x in enumerate(row)) + "</tr>")
    return (f"<div class='scroll'><table class='{kind}'><tr>" + "".join(f"<th>{e(h)}</th>" for h in headers) + "</tr>"
            + "".join(body) + "</table></div>")


def _legend(items: list[tuple[str, str, str]], x: float, y: float) -> list[str]:
    """A row of legend entries (shape, colour, text) from (x, y); shapes: dot, box, line, hollow."""
    out, at = [], x
    for shape, colour, text in items:
        if shape == "box":
            out.append(f"<rect x='{at:.1f}' y='{y - 8:.1f}' width='14' height='10' fill='{colour}' "
                       f"fill-opacity='0.2' stroke='{colour}'/>")
        elif shape == "line":
            out.append(f"<line x1='{at:.1f}' x2='{at + 14:.1f}' y1='{y - 3:.1f}' y2='{y - 3:.1f}' stroke='{colour}' "
                       f"stroke-width='2'/>")
        elif shape == "hollow":
            out.append(f"<circle cx='{at + 7:.1f}' cy='{y - 3:.1f}' r='4' fill='white' stroke='{colour}'/>")
        else:
            out.append(f"<circle cx='{at + 7:.1f}' cy='{y - 3:.1f}' r='4' fill='{colour}'/>")
        out.append(f"<text x='{at + 19:.1f}' y='{y + 1:.1f}'>{html.escape(text)}</text>")
        at += 26 + 6.6 * len(text)
    return out


def ratio_chart_svg(c: dict, width: int = 900, row_h: int = 30, left: int = 170) -> str:
    """Inline SVG: per candidate, its time relative to the baseline on a log axis: the paired ratio with its 95%
    interval for versions timed together, a hollow dot (the ratio of medians, no interval) for those apart."""
    rows = [r for r in c["rows"] if not r["is_baseline"] and r["ratio"] and r["status"] in TIMED]
    if not rows:
        return "<p>No candidate to set against the baseline.</p>"
    values = [1.0] + [r["ratio"] for r in rows] + [x for r in rows for x in (r.get("ci95") or []) if x]
    lo, hi = math.log(min(values)), math.log(max(values))
    pad = max(0.03, (hi - lo) * 0.1)
    lo, hi = lo - pad, hi + pad
    plot_w = width - left - 30
    x = lambda v: left + (math.log(v) - lo) / (hi - lo) * plot_w  # noqa: E731
    top = 34
    height = top + row_h * len(rows) + 62
    base = _baseline_text(c)
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' width='{width}' "
           f"height='{height}' role='img' aria-label='time relative to {html.escape(base)}'>"]
    out += _legend([("dot", PALETTE["slower"], "slower"), ("dot", PALETTE["faster"], "faster"),
                    ("dot", PALETTE["same"], "no clear difference"), ("line", "#333", "95% interval (paired)"),
                    ("hollow", PALETTE["apart"], "not timed together: no interval")], left, 14)
    y_axis = top + row_h * len(rows)
    band = [x(1 / 1.02), x(1.02)]
    out.append(f"<rect x='{band[0]:.1f}' y='{top}' width='{band[1] - band[0]:.1f}' height='{row_h * len(rows)}' "
               f"fill='#009E73' fill-opacity='0.08'/>")
    out.append(f"<line x1='{x(1):.1f}' x2='{x(1):.1f}' y1='{top - 4}' y2='{y_axis}' stroke='#000' "
               f"stroke-dasharray='4 3'/>")
    for i, r in enumerate(rows):
        out += _ratio_row(r, top + i * row_h + row_h / 2, x, left)
    out.append(f"<line x1='{left}' x2='{left + plot_w}' y1='{y_axis}' y2='{y_axis}' stroke='#333'/>")
    for v in _ratio_ticks(math.exp(lo), math.exp(hi)):
        out += [f"<line x1='{x(v):.1f}' x2='{x(v):.1f}' y1='{y_axis}' y2='{y_axis + 4}' stroke='#333'/>",
                f"<text x='{x(v):.1f}' y='{y_axis + 17}' text-anchor='middle'>{v:g}x</text>"]
    out.append(f"<text class='axis-title' x='{left + plot_w / 2:.1f}' y='{y_axis + 40}' text-anchor='middle'>"
               f"time per call relative to {html.escape(base)} (ratio, log scale; 1x = same, "
               f"shaded: within 2%)</text>")
    return "".join(out + ["</svg>"])


def _ratio_row(r: dict, mid: float, x, left: int) -> list[str]:
    """One candidate's row of the ratio chart: its label, its interval when paired, its dot and a tooltip."""
    colour = PALETTE.get(_style_of(r), PALETTE["unknown"])
    name = "reference (pack)" if r["requested"] == REFERENCE else f"jax {r['label']}"
    label = html.escape(first_line(name, 24))
    out = [f"<text x='{left - 8}' y='{mid + 4:.1f}' text-anchor='end'>{label}</text>"]
    ci = r.get("ci95") or []
    has_ci = bool(ci) and None not in ci
    if r["together"] and has_ci:
        out += [f"<line x1='{x(ci[0]):.1f}' x2='{x(ci[1]):.1f}' y1='{mid:.1f}' y2='{mid:.1f}' stroke='#333' "
                f"stroke-width='2'/>"] + [
                f"<line x1='{x(v):.1f}' x2='{x(v):.1f}' y1='{mid - 6:.1f}' y2='{mid + 6:.1f}' stroke='#333' "
                f"stroke-width='2'/>" for v in ci]
        out.append(f"<circle cx='{x(r['ratio']):.1f}' cy='{mid:.1f}' r='6' fill='{colour}'/>")
    else:
        out.append(f"<circle cx='{x(r['ratio']):.1f}' cy='{mid:.1f}' r='6' fill='white' stroke='{colour}' "
                   f"stroke-width='2'/>")
    tip = f"{r['ratio']:.3f}x" + (f", 95% CI {ci[0]:.3f}-{ci[1]:.3f}x" if has_ci else "")
    out.append(f"<title>jax {html.escape(r['label'])}: {html.escape(tip)}</title>")
    return out


def _ratio_ticks(lo: float, hi: float) -> list[float]:
    """Round ratios inside [lo, hi] for a log axis: 1 always, then steps of 0.01 to 0.5 as the span needs."""
    step = next((s for s in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5) if (hi - lo) / s <= 7), 1.0)
    first = math.ceil(lo / step - 1e-9) * step
    ticks = [round(first + k * step, 6) for k in range(int((hi - first) / step) + 1)]
    return [t for t in ticks if lo <= t <= hi] or [1.0]


def timing_chart_svg(rows: list[dict], width: int = 900, row_h: int = 34, left: int = 170) -> str:
    """Inline SVG: per version, its samples as a strip (deterministic jitter) over a box plot (IQR, median,
    whiskers at 1.5 IQR), on one shared linear time axis with its unit, and a legend."""
    timed = [r for r in rows if r["samples_ns"]]
    if not timed:
        return "<p>No timing samples.</p>"
    lo = min(min(r["samples_ns"]) for r in timed)
    hi = max(max(r["samples_ns"]) for r in timed)
    lo, hi = (lo * 0.98, hi * 1.02) if hi > lo else (lo * 0.9, lo * 1.1 + 1)
    unit, scale = _unit_of(hi)
    plot_w = width - left - 30
    x = lambda v: left + (v - lo) / (hi - lo) * plot_w  # noqa: E731
    top = 30
    height = top + row_h * len(timed) + 56
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {width} {height}' width='{width}' "
           f"height='{height}' role='img' aria-label='timing samples per version'>"]
    out += _legend([("box", PALETTE["baseline"], "baseline"), ("box", PALETTE["slower"], "slower"),
                    ("box", PALETTE["faster"], "faster"), ("box", PALETTE["same"], "no clear difference"),
                    ("box", PALETTE["apart"], "not timed together"),
                    ("dot", "#555", "one call")], left, 14)
    for i, r in enumerate(timed):
        out += _svg_row(r, top + i * row_h, row_h, x)
    out += _svg_axis(lo, hi, x, top + row_h * len(timed) + 2, scale)
    out.append(f"<text class='axis-title' x='{left + plot_w / 2:.1f}' y='{top + row_h * len(timed) + 44}' "
               f"text-anchor='middle'>time per call ({unit}); box: quartiles, bar: median, whiskers: 1.5 IQR</text>")
    return "".join(out + ["</svg>"])


def _unit_of(ns: float) -> tuple[str, float]:
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= scale:
            return unit, scale
    return "ns", 1.0


def _svg_row(r: dict, y0: float, row_h: int, x) -> list[str]:
    s = np.asarray(r["samples_ns"], dtype=np.float64)
    q1, med, q3 = np.percentile(s, [25, 50, 75])
    iqr = q3 - q1
    inside = s[(s >= q1 - 1.5 * iqr) & (s <= q3 + 1.5 * iqr)]
    w_lo, w_hi = float(inside.min()), float(inside.max())
    mid, color = y0 + row_h / 2, PALETTE.get(_style_of(r), PALETTE["unknown"])
    label = html.escape(first_line(r["label"] + (" (baseline)" if r["is_baseline"] else ""), 22))
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


def _svg_axis(lo: float, hi: float, x, y: float, scale: float) -> list[str]:
    out = [f"<line x1='{x(lo):.1f}' x2='{x(hi):.1f}' y1='{y}' y2='{y}' stroke='#333'/>"]
    for v in nice_ticks(lo, hi):
        out += [f"<line x1='{x(v):.1f}' x2='{x(v):.1f}' y1='{y}' y2='{y + 4}' stroke='#333'/>",
                f"<text x='{x(v):.1f}' y='{y + 17}' text-anchor='middle'>{round(v / scale, 6):g}</text>"]
    return out


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    """Round tick values (1, 2 or 5 times a power of ten apart) inside [lo, hi]."""
    if not hi > lo:
        return [lo]
    raw = (hi - lo) / target
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step) * step
    return [first + k * step for k in range(int((hi - first) / step) + 1)]
