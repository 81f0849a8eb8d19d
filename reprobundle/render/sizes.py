"""A replay at several sizes (`replay --shape seq=128,256,512`): per size the candidates' ratio and verdict against the
baseline, as a table, and in HTML a chart of ratio against size (inline SVG, offline)."""

from __future__ import annotations

import html
import math

from .comparison import CSS, PALETTE, html_table, md, md_table, nice_ticks
from .listing import table

HEADERS = ["size", "version", "ratio [95% CI]", "verdict", "outputs vs baseline"]


def _ratio(r: dict) -> str:
    if r.get("ratio") is None:
        return "-"
    ci = r.get("ci95")
    return f"{r['ratio']:.2f}x" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else "")


def _verdict(r: dict) -> str:
    if r["status"] not in ("ok", "mismatch"):
        return r["status"]
    if r.get("verdict") is None:
        return "no verdict"
    return r["verdict"] + ("" if r.get("settled") else " (not settled)")


def size_rows(comparison: dict) -> list[dict]:
    """The candidates of one size's comparison: label, status, ratio, interval, verdict, outputs vs the baseline."""
    return [{"label": r["label"], "status": r["status"], "ratio": r.get("ratio"), "ci95": r.get("ci95"),
             "verdict": r.get("verdict"), "settled": r.get("settled"),
             "outputs": None if not r.get("err_base") else "ok" if r["err_base"].get("ok") else "differ"}
            for r in comparison["rows"] if not r.get("is_baseline")]


def cells(size: dict) -> list[list[str]]:
    return [[size["shape"], r["label"], _ratio(r), _verdict(r), r.get("outputs") or "-"] for r in size["rows"]]


def _title(data: dict) -> str:
    return f"{data['bundle']}: time against {data['baseline']} by size"


def to_text(data: dict) -> str:
    rows = [row for size in data["sizes"] for row in cells(size)]
    return "\n".join([_title(data), table(HEADERS, rows)])


def to_markdown(data: dict) -> str:
    rows = [row for size in data["sizes"] for row in cells(size)]
    return f"### {md(_title(data))}\n\n" + md_table(HEADERS, rows) + "\n"


def _size_value(size: dict) -> float:
    """The x of a size: the product of its bound dimensions (one dimension swept: that size)."""
    return float(math.prod(size["bindings"].values()) or 1)


def _points_by_candidate(data: dict) -> dict[str, list[tuple[float, dict]]]:
    """Per candidate label, its (size, row) points that have a ratio, in the order of the sizes."""
    points: dict[str, list[tuple[float, dict]]] = {}
    for size in data["sizes"]:
        for r in size["rows"]:
            if r.get("ratio") is not None:
                points.setdefault(r["label"], []).append((_size_value(size), r))
    return points


def _candidate_line(label: str, pts: list[tuple[float, dict]], color: str, x, y) -> list[str]:
    """One candidate's polyline through its ratios, with each point's interval and dot."""
    e = html.escape
    path = " ".join(f"{x(v):.1f},{y(r['ratio']):.1f}" for v, r in pts)
    out = [f"<polyline points='{path}' fill='none' stroke='{color}' stroke-width='2'/>"]
    for v, r in pts:
        if r.get("ci95"):
            out.append(f"<line x1='{x(v):.1f}' x2='{x(v):.1f}' y1='{y(r['ci95'][0]):.1f}' "
                       f"y2='{y(r['ci95'][1]):.1f}' stroke='{color}'/>")
        out.append(f"<circle cx='{x(v):.1f}' cy='{y(r['ratio']):.1f}' r='4' fill='{color}'>"
                   f"<title>{e(label)} at {e(str(v))}: {e(_ratio(r))}</title></circle>")
    return out


def ratio_by_size_svg(data: dict, width: int = 900, height: int = 360) -> str:
    """Ratio against size, one line per candidate with its 95% intervals, a log2 x axis and the line of 1.0x."""
    left, right, top, bottom = 70, 180, 20, 50
    points = _points_by_candidate(data)
    xs = [_size_value(s) for s in data["sizes"]] or [1.0]
    ys = [1.0] + [v for pts in points.values() for _, r in pts for v in (r.get("ci95") or [r["ratio"]])]
    lo_x, hi_x = math.log2(min(xs)), math.log2(max(xs))
    lo_y, hi_y = min(ys), max(ys)
    ticks = nice_ticks(lo_y, hi_y)
    lo_y, hi_y = min(lo_y, ticks[0]), max(hi_y, ticks[-1])
    span_x, span_y = (hi_x - lo_x) or 1.0, (hi_y - lo_y) or 1.0

    def x(v: float) -> float:
        return left + (math.log2(v) - lo_x) / span_x * (width - left - right) if hi_x > lo_x else (width - right + left) / 2

    def y(v: float) -> float:
        return top + (hi_y - v) / span_y * (height - top - bottom)

    e = html.escape
    out = [f"<svg xmlns='http://www.w3.org/2000/svg' width='{width}' height='{height}' role='img' "
           f"aria-label='ratio against size'><rect width='100%' height='100%' fill='white'/>"]
    for t in ticks:
        out.append(f"<line x1='{left}' x2='{width - right}' y1='{y(t):.1f}' y2='{y(t):.1f}' stroke='#eee'/>"
                   f"<text x='{left - 6}' y='{y(t) + 4:.1f}' text-anchor='end' font-size='12'>{t:g}x</text>")
    out.append(f"<line x1='{left}' x2='{width - right}' y1='{y(1.0):.1f}' y2='{y(1.0):.1f}' stroke='#000' "
               "stroke-dasharray='4 3'/>")
    for size in data["sizes"]:
        v = _size_value(size)
        out.append(f"<text x='{x(v):.1f}' y='{height - bottom + 18}' text-anchor='middle' font-size='12'>"
                   f"{e(size['shape'])}</text>")
    colors = [PALETTE.get(k, "#555") for k in ("slower", "faster", "same", "failed")]
    for i, (label, pts) in enumerate(points.items()):
        color = colors[i % len(colors)]
        out += _candidate_line(label, pts, color, x, y)
        out.append(f"<text x='{width - right + 10}' y='{top + 16 * (i + 1)}' font-size='12' fill='{color}'>"
                   f"{e(label)}</text>")
    out.append(f"<text x='{(left + width - right) / 2}' y='{height - 8}' text-anchor='middle' font-size='12'>"
               "size (log scale)</text></svg>")
    return "".join(out)


def to_html(data: dict) -> str:
    e = html.escape
    rows = [row for size in data["sizes"] for row in cells(size)]
    return "\n".join([
        "<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' content='width=device-width'>"
        f"<title>{e(_title(data))}</title><style>{CSS}</style></head><body>",
        f"<h1>{e(_title(data))}</h1>", "<h2>Ratio against size</h2>", ratio_by_size_svg(data),
        html_table(HEADERS, rows), "</body></html>"])


def sizes_data(data: dict) -> dict:
    """--json: the sizes without their full comparisons' bulk (headlines kept)."""
    return {**data, "sizes": [{**{k: v for k, v in s.items() if k != "comparison"},
                               "headlines": [h["text"] for h in s["comparison"]["headlines"]]}
                              for s in data["sizes"]]}


def _elements(shapes: list[str]) -> int:
    total = 0
    for text in shapes:
        dims = text.partition("[")[2].rstrip("]")
        total += math.prod(int(d) for d in dims.split(",") if d.strip().isdigit()) if dims else 1
    return total


def _varying_inputs(results: list[dict]) -> list[int]:
    """The inputs whose shapes differ between the bundles: they name each size."""
    return [i for i in range(max(len(r["input_shapes"]) for r in results))
            if len({tuple(r["input_shapes"][i:i + 1]) for r in results}) > 1]


def _sweep_size(r: dict, varying: list[int]) -> dict:
    status = "ok" if r.get("outputs") != "failed" else "failed"
    row = {"label": str(r["versions"][-1]), "status": status, "ratio": r.get("ratio"),
           "ci95": r.get("ci95"), "verdict": r.get("verdict"), "settled": r.get("settled"),
           "outputs": r.get("outputs")}
    shape = " ".join(r["input_shapes"][i] for i in varying if i < len(r["input_shapes"]))
    return {"shape": f"{shape} ({r['ref']})", "bindings": {"elements": _elements(r["input_shapes"])},
            "rows": [row]}


def sweep_sizes(data: dict) -> list[dict]:
    """Per captured function that a sweep met at several input shapes (`capture --all-signatures` labels each
    bundle with its function and signature; fleet/sweep._identity reads them), its bundles as sizes:
    [{"bundle": function, "baseline", "sizes": [{"shape", "bindings": {"elements": n}, "rows": [...]}]}], the
    sizes ordered by their inputs' element count (the chart's x)."""
    by_function: dict[str, list[dict]] = {}
    for r in data.get("results") or []:
        if r.get("function") and r.get("input_shapes"):
            by_function.setdefault(r["function"], []).append(r)
    out = []
    for function, results in by_function.items():
        if len({tuple(r["input_shapes"]) for r in results}) < 2:
            continue
        varying = _varying_inputs(results)
        sizes = [_sweep_size(r, varying) for r in sorted(results, key=lambda r: _elements(r["input_shapes"]))]
        out.append({"bundle": function, "baseline": data.get("baseline"), "sizes": sizes})
    return out
