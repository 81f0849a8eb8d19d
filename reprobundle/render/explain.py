"""explain's result as plain data (--json), terminal text, Markdown (--report) and one offline HTML page (--html)."""

from __future__ import annotations

import html
import textwrap

from ..text import clean
from .comparison import CSS, WIDTH, html_table, md, md_table
from .sharing import reproduce_markdown, reproduce_text
from .text import table

EXPERIMENT_HEADERS = ["experiment on the candidate", "status", "outputs", "HLO = baseline", "fusions = baseline",
                      "vs baseline", "why"]


def _yes(value) -> str:
    return "-" if value is None else "yes" if value else "no"


def verdict_text(v: dict | None) -> str:
    """`1.17x [1.10-1.25] slower (settled)`, `0.99x [0.97-1.02] same`, or `no verdict`."""
    if not v or v.get("ratio") is None:
        return "no verdict"
    ci = v.get("ci95")
    interval = f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else ""
    settled = "" if v.get("settled") else ", not settled"
    return f"{v['ratio']:.2f}x{interval} {v.get('verdict') or ''}{settled}".strip()


def experiment_cells(e: dict) -> list[str]:
    outputs = "-" if e.get("outputs_ok") is None else "ok" if e["outputs_ok"] else "differ"
    status = e["status"] if e["status"] == "ok" else f"{e['status']}: {clean(e.get('reason'), 80)}"
    return [e["setting"], status, outputs, _yes(e.get("hlo_same_as_baseline")),
            _yes(e.get("fusions_same_as_baseline")), verdict_text(e.get("vs_baseline")), e.get("why", "")]


def _side(changed: bool, runs: bool | None) -> str:
    return "changed" if changed else "ran, no change" if runs else "not seen"


def pass_rows(data: dict) -> list[list[str]]:
    """The passes whose action differs between the two sides (one changed the module, the other did not, or both
    did differently), in pipeline order."""
    divergence = ((data.get("pass_diff") or {}).get("divergence") or {}).get("candidate") or {}
    rows = []
    for p in data.get("passes") or []:
        if p["baseline"] == p["candidate"] and not p["effect_differs"]:
            continue
        note = "differently on both" if p["effect_differs"] else ""
        if p["name"] == divergence.get("pass"):
            note = (note + "; " if note else "") + "the modules diverge here"
        rows.append([p["name"], _side(p["baseline"], p.get("baseline_runs")),
                     _side(p["candidate"], p.get("candidate_runs")), note])
    return rows


def _alike(data: dict) -> int:
    return sum(1 for p in data.get("passes") or [] if p["baseline"] and p["candidate"] and not p["effect_differs"])


def explain_data(data: dict, samples: bool = False) -> dict:
    """What --json prints: everything but the stored runs' full records (their ids are in the comparison); with
    `samples`, each contender's raw timing samples by label."""
    keep = {k: v for k, v in data.items() if k not in ("runs", "comparison")}
    keep["run_ids"] = [r["run_id"] for r in data.get("runs") or []]
    keep["headlines"] = [h["text"] for h in (data.get("comparison") or {}).get("headlines") or []]
    if samples:
        keep["samples_ns"] = {row["label"]: row.get("samples_ns") or []
                              for row in (data.get("comparison") or {}).get("rows") or []}
    return keep


def _title(data: dict) -> str:
    return f"{data['candidate']} vs {data['baseline']} on {data['platform']}"


def to_text(data: dict) -> str:
    d = data["diagnosis"]
    out = [f"explain {clean(data.get('bundle', ''))}: {clean(_title(data))}",
           f"{data['candidate']} against {data['baseline']}: {verdict_text(data.get('regression'))}", "",
           *textwrap.wrap(f"Diagnosis ({d['kind']}): {clean(d['summary'])}", WIDTH, subsequent_indent="    "), ""]
    rows = pass_rows(data)
    out.append("Passes that acted differently (pipeline order):" if rows else
               "No pass acted differently on the two sides" + (f" ({clean(data['pass_diff'].get('note'))})"
                                                                  if (data.get("pass_diff") or {}).get("note") else ""))
    if rows:
        out.append(table(["pass", data["baseline"], data["candidate"], "note"], rows))
    out.append(f"({_alike(data)} other passes changed the module alike on both)")
    if data.get("fusion"):
        out += ["", f"Fusion: {clean(data['fusion'])}"]
    out += ["", f"Experiments ({len(data['experiments'])}, each timed with both versions in the same rounds):"]
    for e in data["experiments"]:  # two lines each: a table of these would not fit 100 columns
        setting, status, outputs, hlo, fusions, verdict, why = experiment_cells(e)
        out += [f"  {clean(setting)}",
                f"      {status}; outputs {outputs}; HLO = {data['baseline']}: {hlo}; fusions = {data['baseline']}: "
                f"{fusions}; vs {data['baseline']}: {verdict}"]
    if not data["experiments"]:
        out.append("none: the evidence pointed at no pass and no flag of this platform")
    rep = data.get("reproduce")
    if rep:
        out += ["", *reproduce_text(rep)]
    return "\n".join(out)


def to_markdown(data: dict) -> str:
    d = data["diagnosis"]
    out = [f"### reprobundle explain: {md(data.get('bundle', ''))}, {md(_title(data))}", "",
           f"**{md(d['summary'])}**", "",
           f"{md(data['candidate'])} against {md(data['baseline'])}: {md(verdict_text(data.get('regression')))}", ""]
    rows = pass_rows(data)
    if rows:
        out += ["#### Passes that acted differently (pipeline order)", "",
                md_table(["pass", data["baseline"], data["candidate"], "note"], rows), ""]
    out.append(f"{_alike(data)} other passes changed the module alike on both.")
    if data.get("fusion"):
        out += ["", f"Fusion: {md(data['fusion'])}"]
    out += ["", "#### Experiments", "", md_table(EXPERIMENT_HEADERS, [experiment_cells(e) for e in data["experiments"]])
            if data["experiments"] else "None: the evidence pointed at no pass and no flag of this platform."]
    if data.get("reproduce"):
        out += ["", reproduce_markdown(data["reproduce"])]
    return "\n".join(out) + "\n"


def to_html(data: dict) -> str:
    e = html.escape
    d = data["diagnosis"]
    parts = ["<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' content='width=device-width'>"
             f"<title>explain: {e(_title(data))}</title><style>{CSS}</style></head>",
             f"<body><h1>Explain: {e(data.get('bundle', ''))}, {e(_title(data))}</h1>",
             f"<p class='headline'>{e(d['summary'])}</p>",
             f"<p>{e(data['candidate'])} against {e(data['baseline'])}: {e(verdict_text(data.get('regression')))}</p>"]
    rows = pass_rows(data)
    if rows:
        parts += ["<h2>Passes that acted differently</h2>",
                  html_table(["pass", data["baseline"], data["candidate"], "note"], rows)]
    parts.append(f"<p>{_alike(data)} other passes changed the module alike on both.</p>")
    if data.get("fusion"):
        parts.append(f"<p><b>Fusion:</b> {e(data['fusion'])}</p>")
    parts += ["<h2>Experiments</h2>", html_table(EXPERIMENT_HEADERS, [experiment_cells(x) for x in data["experiments"]])]
    rep = data.get("reproduce")
    if rep:
        parts += ["<h2>Reproduce</h2>", f"<pre>{e(rep['command'])}</pre>"]
    return "\n".join(parts + ["</body></html>"])
