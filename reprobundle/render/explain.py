"""explain's result as plain data (--json), terminal text, Markdown (--report) and one offline HTML page (--html)."""

from __future__ import annotations

import html
import textwrap

from ..text import clean
from .comparison import CSS, WIDTH, html_table, md, md_table
from .listing import table
from .sharing import reproduce_markdown, reproduce_text

EXPERIMENT_HEADERS = ["experiment on the candidate", "status", "outputs", "HLO = baseline", "fusions = baseline",
                      "result", "why"]


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


_APART = {"same": "the same bits", "bits": "within the tolerance", "beyond": "beyond the tolerance"}


def regression_text(data: dict) -> str:
    """The candidate against the baseline: its timing verdict, or how its outputs differ."""
    r = data.get("regression") or {}
    if "outputs" in r:
        return f"outputs {_APART.get(r['outputs'], r['outputs'])} of the baseline's"
    return verdict_text(r)


def experiment_result(e: dict) -> str:
    """What decided an experiment: its outputs against the baseline's (by outputs) or its verdict."""
    if e.get("outputs_vs_baseline") and e.get("vs_baseline") is None:
        return f"outputs {_APART.get(e['outputs_vs_baseline'], e['outputs_vs_baseline'])} of the baseline's"
    text = verdict_text(e.get("vs_baseline"))
    if e.get("vs_candidate"):
        text += f"; vs the candidate {verdict_text(e['vs_candidate'])}"
    return text


def screen_text(e: dict) -> str:
    s = e.get("screen") or {}
    if not s or s.get("how") == "not screened":
        return "not screened"
    if s.get("error"):
        return f"failed in the screen ({s['how']}): {clean(s['error'], 100)}"
    moved = {True: "moved toward the baseline", False: "did not move toward the baseline",
             None: "not told apart"}[s.get("moved")]
    return f"screened ({s['how']}): {moved}"


def experiment_cells(e: dict) -> list[str]:
    """One experiment's row. Its outputs are judged against the baseline's (the release it is compared with), never
    the packing release's reference: a run that differs from the reference but gives the baseline's outputs is ok."""
    apart = e.get("outputs_vs_baseline")
    outputs = "-" if e.get("outputs_ok") is None else f"{_APART.get(apart, apart)} of the baseline's" if apart else \
        "ok" if e["outputs_ok"] else "differ from the baseline's"
    status = "ran" if e["status"] in ("ok", "mismatch") else e["status"] if e["status"] == "screened out" else \
        f"{e['status']}: {clean(e.get('reason'), 80)}"
    return [e["setting"], status, outputs, _yes(e.get("hlo_same_as_baseline")),
            _yes(e.get("fusions_same_as_baseline")), experiment_result(e), e.get("why", "")]


def workaround_block(d: dict) -> list[str]:
    """The lines to paste and where they still work, when a changed default restored (or moved back) the
    candidate."""
    lines = d.get("lines") or {}
    if not lines:
        return []
    out = ["To get it back on the candidate now:"]
    labels = {"XLA_FLAGS": "shell", "compile": "one compile", "config": "Python", "env": "environment"}
    out += [f"  {labels.get(k, k)}: {clean(v, 300)}" for k, v in lines.items()]
    reach = d.get("reach") or {}
    if reach.get("text"):
        out.append(f"  later releases: {clean(reach['text'], 900)}")
    return out


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


def _how_lines(data: dict) -> list[str]:
    out = []
    if data.get("mode_why"):
        out.append(f"mode: {clean(data['mode_why'])}")
    elif data.get("mode"):
        out.append(f"mode: {data['mode']} (asked)")
    if data.get("by_why"):
        out.append(f"judged by {data['by']}: {clean(data['by_why'])}")
    return out


def to_text(data: dict) -> str:
    d = data["diagnosis"]
    out = [f"explain {clean(data.get('bundle', ''))}: {clean(_title(data))}",
           *[line for how in _how_lines(data) for line in textwrap.wrap(how, WIDTH, subsequent_indent="    ")],
           f"{data['candidate']} against {data['baseline']}: {regression_text(data)}", "",
           *textwrap.wrap(f"Diagnosis ({d['kind']}): {clean(d['summary'])}", WIDTH, subsequent_indent="    "), ""]
    block = workaround_block(d)
    if block:
        out += [*block, ""]
    rows = pass_rows(data)
    out.append("Passes that acted differently (pipeline order):" if rows else
               "No pass acted differently on the two sides" + (f" ({clean(data['pass_diff'].get('note'))})"
                                                                  if (data.get("pass_diff") or {}).get("note") else ""))
    if rows:
        out.append(table(["pass", data["baseline"], data["candidate"], "note"], rows))
    out.append(f"({_alike(data)} other passes changed the module alike on both)")
    if data.get("fusion"):
        out += ["", f"Fusion: {clean(data['fusion'])}"]
    out += ["", *experiment_lines(data)]
    rep = data.get("reproduce")
    if rep:
        out += ["", *reproduce_text(rep)]
    return "\n".join(out)


def experiment_lines(data: dict) -> list[str]:
    """Each experiment in two lines (a table of these would not fit 100 columns), then what was not tried."""
    how = "run once each, judged by their outputs" if data.get("by") in ("outputs", "bits") else \
        "those the screen kept timed with both versions in the same rounds"
    out = [f"Experiments ({len(data['experiments'])}, {how}):"]
    for e in data["experiments"]:
        setting, status, outputs, hlo, fusions, result, why = experiment_cells(e)
        out.append(f"  {clean(setting)}  ({clean(why, 120)})")
        if not e.get("measured", True):
            out.append(f"      {screen_text(e)}")
            continue
        out.append(f"      {status}; outputs {outputs}; HLO = {data['baseline']}: {hlo}; fusions = "
                   f"{data['baseline']}: {fusions}; {clean(result)}; {screen_text(e)}")
    if not data["experiments"]:
        out.append("none: the evidence pointed at no pass and no flag of this platform, and no default changed")
    out += [f"  not tried: {clean(item.get('name'), 80)}: {clean(item.get('why'), 200)}"
            for item in data.get("not_tried") or []]
    if data.get("delta_note"):
        out.append(f"  {clean(data['delta_note'])}")
    return out


def to_markdown(data: dict) -> str:
    d = data["diagnosis"]
    out = [f"### reprobundle explain: {md(data.get('bundle', ''))}, {md(_title(data))}", "",
           f"**{md(d['summary'])}**", "",
           f"{md(data['candidate'])} against {md(data['baseline'])}: {md(regression_text(data))}", "",
           *[f"- {md(line)}" for line in _how_lines(data)], ""]
    lines = d.get("lines") or {}
    if lines:
        out += ["#### To get it back now", "", "```", *[clean(v, 300) for v in lines.values()], "```", ""]
        if (d.get("reach") or {}).get("text"):
            out += [md(d["reach"]["text"]), ""]
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
             f"<p>{e(data['candidate'])} against {e(data['baseline'])}: {e(regression_text(data))}</p>",
             *[f"<p>{e(line)}</p>" for line in _how_lines(data)]]
    if d.get("lines"):
        parts += ["<h2>To get it back now</h2>", "<pre>" + e("\n".join(d["lines"].values())) + "</pre>"]
        if (d.get("reach") or {}).get("text"):
            parts.append(f"<p>{e(d['reach']['text'])}</p>")
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
