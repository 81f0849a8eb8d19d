"""`investigate --report/--html`: one page with each step's answer, where its time went, what it left in the store
and the command that reruns it alone. Every string in it came from a bundle, a store or a worker: escaped."""

from __future__ import annotations

import html

from .issue import fence, md


def to_markdown(data: dict) -> str:
    lines = [f"# Investigation of {md(data['ref'])}: jax {md(data['good'])} -> {md(data['bad'])}", "",
             f"First bad release: **{md(data.get('first_bad') or 'not found')}**; layer: "
             f"**{md(data.get('layer') or 'undecided')}**.", "",
             *([f"Chosen: {md(data['chosen'])}.", ""] if data.get("chosen") else []),
             *([f"{md(data['unsettled'])}.", ""] if data.get("unsettled") else []),
             *([f"{md(report_line(data))}.", ""] if report_line(data) else []),
             "| step | status | time | answer |", "| --- | --- | --- | --- |"]
    lines += [f"| {md(s['name'])} | {md(s.get('reused') or s['status'])} | {s['spent_s']:.0f} s | {md(s['answer'])} |"
              for s in data["steps"]]
    for s in data["steps"]:
        lines += ["", f"## {md(s['name'])}", "", md(s["answer"])]
        if s.get("stored"):
            lines += ["", f"Kept: {md(s['stored'])}"]
        if s.get("command"):
            lines += ["", "Rerun alone:", "", *fence(s["command"], "bash")]
    return "\n".join(lines) + "\n"


def report_line(data: dict) -> str | None:
    """`Report written in 74 s; then searched: bits (retraced)`: when the headline's issue body was written, and
    what was searched after it (None: none was written)."""
    if data.get("report_written_s") is None:
        return None
    left = data.get("left_at_report") or []
    return f"Report written in {data['report_written_s']:.0f} s" + (
        f"; then searched: {', '.join(str(x) for x in left)}" if left else "")


def to_html(data: dict) -> str:
    e = html.escape
    rows = "".join(f"<tr><td>{e(s['name'])}</td><td>{e(s.get('reused') or s['status'])}</td><td>{s['spent_s']:.0f} s</td>"
                   f"<td>{e(str(s['answer']))}</td></tr>" for s in data["steps"])
    sections = "".join(
        f"<h2>{e(s['name'])}</h2><p>{e(str(s['answer']))}</p>"
        + (f"<p>Kept: <code>{e(str(s['stored']))}</code></p>" if s.get("stored") else "")
        + (f"<p>Rerun alone:</p><pre>{e(s['command'])}</pre>" if s.get("command") else "")
        for s in data["steps"])
    title = f"Investigation of {e(data['ref'])}: jax {e(data['good'])} -&gt; {e(data['bad'])}"
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{title}</title>"
            "<style>body{font-family:sans-serif;max-width:60em;margin:2em auto}td,th{border:1px solid #ccc;"
            "padding:.3em;vertical-align:top}table{border-collapse:collapse}pre{background:#f4f4f4;padding:.5em;"
            "white-space:pre-wrap}</style></head><body>"
            f"<h1>{title}</h1><p>First bad release: <b>{e(str(data.get('first_bad') or 'not found'))}</b>; layer: "
            f"<b>{e(str(data.get('layer') or 'undecided'))}</b>.</p>"
            + (f"<p>{e(report_line(data) or '')}.</p>" if report_line(data) else "") +
            f"<table><tr><th>step</th><th>status</th><th>time</th><th>answer</th></tr>{rows}</table>"
            f"{sections}</body></html>\n")
