"""A registry's history (analysis/history.py's data): bundles x releases, for a terminal and as one offline page.

A cell reads `1.18x ▲` (slower, settled, timed together with the baseline), `0.97x =` (same), `1.02x ?` (timed
together, not settled), `(1.20x)` (not timed with the baseline: a ratio of medians, no verdict), `mismatch`,
or the status of a run that did not finish. Symbols and words carry the meaning; colour only repeats it (Okabe-Ito,
told apart with every common colour-vision deficiency). `*` marks the first release where a bundle regressed.
"""

from __future__ import annotations

import html
import math
import re
from pathlib import Path
from typing import Mapping

from ..text import clean
from ..units import human_ns
from .comparison import CSS, PALETTE, WIDTH
from .table import grid

SYMBOLS = {"slower": "▲", "faster": "▼", "same": "=", "unknown": "?"}
_HTML_CSS = CSS + """
table.history td{white-space:nowrap;text-align:right}table.history td.bundle{text-align:left;white-space:normal}
td.apart{color:#555;font-style:italic}td.first{outline:3px solid #000;outline-offset:-3px}
td a{color:inherit}.legend span{margin-right:1.2em}.chart{margin:.2em 0 1em}
"""


def cell_text(cell: Mapping | None) -> str:
    if cell is None:
        return ""
    if cell.get("baseline"):
        return "baseline" if cell["status"] in ("ok", "mismatch") else cell["status"]
    if cell["status"] not in ("ok", "mismatch"):
        return cell["status"]
    ratio = cell.get("ratio")
    text = "-" if ratio is None else f"{ratio:.2f}x"
    if not cell["together"]:
        text = f"({text})"
    elif cell.get("verdict"):
        settled = cell.get("settled", True) or cell["verdict"] != "same"
        text += " " + (SYMBOLS.get(cell["verdict"], "?") if settled else "?")
    return text + (" mismatch" if cell["status"] == "mismatch" else "")


def cell_style(cell: Mapping | None) -> str:
    if cell is None:
        return ""
    if cell.get("baseline"):
        return "baseline"
    if cell["status"] != "ok":
        return "failed"
    if not cell["together"]:
        return "apart"
    settled = cell.get("settled", True)
    return cell["verdict"] if settled and cell.get("verdict") in ("slower", "faster", "same") else "unknown"


def _row_label(row: Mapping) -> str:
    return f"{row['name']}@{row['version']}"


def summary_line(data: Mapping) -> str:
    rows = data["rows"]
    regressed = [r for r in rows if r.get("first_regressed")]
    text = (f"{len(rows)} bundle{'s' * (len(rows) != 1)} across {len(data['columns'])} release"
            f"{'s' * (len(data['columns']) != 1)}, baseline {data['baseline']}")
    if regressed:
        text += "; regressed: " + ", ".join(f"{_row_label(r)} at {r['first_regressed']}" for r in regressed[:8])
        text += f" (+{len(regressed) - 8} more)" if len(regressed) > 8 else ""
    else:
        text += "; no bundle regressed"
    return text


def to_text(data: Mapping, width: int = WIDTH, color: bool = False) -> str:
    headers = ["BUNDLE", *data["columns"]]
    rows, styles = [], []
    for row in data["rows"]:
        cells = [row["cells"].get(c) for c in data["columns"]]
        marks = [" *" if row.get("first_regressed") == c else "" for c in data["columns"]]
        rows.append([clean(_row_label(row))] + [cell_text(cell) + mark for cell, mark in zip(cells, marks)])
        styles.append([""] + [cell_style(cell) for cell in cells])
    legend = ["▲ slower  ▼ faster  = same: settled, timed together with the baseline;  ? not settled",
              "(1.20x) not timed with the baseline: no verdict;  * the first release worse than the baseline"]
    table = grid(headers, rows, width=width, flex=0, styles=styles, color=color)
    return "\n".join([summary_line(data), "", *table, "", *legend]) + "\n"


# ------------------------------------------------------------------------------------------------ HTML


def _cell_title(cell: Mapping, column: str, baseline: str) -> str:
    parts = [f"{column} vs {baseline}"]
    if cell.get("ci95") and cell["together"]:
        lo, hi = cell["ci95"]
        parts.append(f"95% CI {lo:.3f}-{hi:.3f}x")
    if cell.get("median_ns") is not None:
        parts.append(f"median {human_ns(cell['median_ns'])}")
    if not cell["together"] and not cell.get("baseline"):
        parts.append("not timed together with the baseline: no verdict")
    if cell.get("reason"):
        parts.append(cell["reason"])
    parts.append(f"run {cell['run_id']}")
    return "; ".join(parts)


def _html_cell(row: Mapping, column: str, data: Mapping, links: Mapping[tuple[str, str], str]) -> str:
    e = html.escape
    cell = row["cells"].get(column)
    if cell is None:
        return "<td></td>"
    classes = [cell_style(cell)] + (["first"] if row.get("first_regressed") == column else [])
    text = e(cell_text(cell)) + (" *" if row.get("first_regressed") == column else "")
    href = links.get((row["bundle_id"], column))
    if href:
        text = f"<a href='{e(href)}'>{text}</a>"
    return f"<td class='{' '.join(classes)}' title='{e(clean(_cell_title(cell, column, data['baseline'])))}'>{text}</td>"


def series_svg(row: Mapping, columns: list[str], width: int = 420, height: int = 90) -> str:
    """A bundle's median time across releases: one dot per release it ran on, joined in version order."""
    points = [(columns.index(p["column"]), p["median_ns"]) for p in row["series"] if p["column"] in columns]
    if not points:
        return ""
    values = [v for _, v in points]
    lo, hi = min(values), max(values)
    span = (hi - lo) or hi or 1.0
    left, right, top, bottom = 70, 30, 10, 24
    n = max(len(columns) - 1, 1)

    def x(i: int) -> float:
        return left + (width - left - right) * i / n

    def y(v: float) -> float:
        return top + (height - top - bottom) * (1 - (v - lo) / span) if hi != lo else (height - bottom + top) / 2

    path = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in points)
    out = [f"<svg class='chart' role='img' aria-label='median time of {html.escape(_row_label(row))} by release' "
           f"viewBox='0 0 {width} {height}' width='{width}' height='{height}'>",
           f"<polyline points='{path}' fill='none' stroke='#555' stroke-width='1.5'/>"]
    for i, v in points:
        style = cell_style(row["cells"].get(columns[i]))
        colour = PALETTE.get(style, "#555")
        out.append(f"<circle cx='{x(i):.1f}' cy='{y(v):.1f}' r='4' fill='{colour}'>"
                   f"<title>{html.escape(columns[i])}: {human_ns(v)}</title></circle>")
    out.append(f"<text x='{left - 6}' y='{top + 8}' text-anchor='end'>{human_ns(hi)}</text>")
    out.append(f"<text x='{left - 6}' y='{height - bottom}' text-anchor='end'>{human_ns(lo)}</text>")
    for i, column in enumerate(columns):
        out.append(f"<text x='{x(i):.1f}' y='{height - 6}' text-anchor='middle'>{html.escape(column)}</text>")
    return "".join(out + ["</svg>"])


def to_html(data: Mapping, links: Mapping[tuple[str, str], str] | None = None) -> str:
    """One self-contained page (no network fetches): the summary, the matrix (each timed cell linking to its
    replay's report where `links` names one, by (bundle id, column)), and per bundle a chart of its time."""
    e = html.escape
    links = links or {}
    columns = list(data["columns"])
    head = "<tr><th>bundle</th>" + "".join(f"<th>{e(c)}</th>" for c in columns) + "</tr>"
    body = []
    for row in data["rows"]:
        anchor = f"b-{row['bundle_id'][7:19]}"
        body.append(f"<tr><td class='bundle'><a href='#{anchor}'>{e(clean(_row_label(row)))}</a></td>"
                    + "".join(_html_cell(row, c, data, links) for c in columns) + "</tr>")
    legend = "".join(f"<span class='{cls}'>{e(text)}</span>" for cls, text in (
        ("slower", "▲ slower"), ("faster", "▼ faster"), ("same", "= same"), ("unknown", "? not settled"),
        ("apart", "(x) not timed with the baseline: no verdict"), ("failed", "mismatch or did not run"),
        ("", "* first regressed")))
    charts = []
    for row in data["rows"]:
        anchor = f"b-{row['bundle_id'][7:19]}"
        regressed = (f"first regressed at <b>{e(row['first_regressed'])}</b>" if row.get("first_regressed")
                     else "no regression against the baseline")
        charts.append(f"<h3 id='{anchor}'>{e(clean(_row_label(row)))}</h3>"
                      f"<p>{regressed}; {row['runs']} stored runs; median time per call by release:</p>"
                      + series_svg(row, columns))
    title = f"History of {len(data['rows'])} bundles"
    return "\n".join([
        "<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' content='width=device-width'>",
        f"<title>{e(title)}</title><style>{_HTML_CSS}</style></head><body>",
        f"<h1>{e(title)}</h1><p class='headline'>{e(clean(summary_line(data)))}</p>",
        f"<p class='legend'>{legend}</p>",
        f"<div class='scroll'><table class='history'>{head}{''.join(body)}</table></div>",
        "<h2>Time across releases</h2>", *charts, "</body></html>"])


def history_data(data: Mapping) -> dict:
    """What `--json` prints: the data, NaN-free, with the summary line."""
    def plain(value):
        if isinstance(value, float) and not math.isfinite(value):
            return None
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value

    return {**plain(dict(data)), "summary": summary_line(data)}


def cell_reports(registry, data: dict, folder: Path) -> dict[tuple[str, str], str]:
    """Each cell of `data` timed with the baseline: its replay's report (HTML) written under `folder`; returns the
    files by (bundle id, column), relative to `folder`'s parent, for the page's links."""
    from ..bundle.model import run_label
    from ..run.compare import comparison_of
    from ..text import clean_values
    from .comparison import to_html as comparison_html

    folder.mkdir(parents=True, exist_ok=True)
    links: dict[tuple[str, str], str] = {}
    for row in data["rows"]:
        wanted = {c["run_id"]: column for column, c in row["cells"].items() if c.get("together")}
        if not wanted:
            continue
        bundle = registry.resolve(row["ref"])
        runs = {r["run_id"]: r for r in registry.runs(row["bundle_id"])}
        for run_id, column in wanted.items():
            cell = row["cells"][column]
            pair = [runs[cell["baseline_run_id"]], runs[run_id]]
            comparison = comparison_of(registry, bundle, pair, run_label(pair[0]), reproduce=False)
            path = folder / f"{row['name']}-{row['version']}-{_file_part(column)}.html"
            path.write_text(comparison_html(clean_values(comparison)))
            links[row["bundle_id"], column] = f"{folder.name}/{path.name}"
    return links


def _file_part(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text)[:80]
