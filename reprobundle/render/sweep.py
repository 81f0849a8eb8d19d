"""A sweep's results (api.sweep's data): one table sorted by ratio, worst first, for a terminal, a GitHub issue and
a browser; failures listed with their reasons, never dropped; one summary line; per bundle the command that
replays it (the Reproduce line of replay's reports)."""

from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

from ..fleet.sweep import outcome
from ..text import clean, cut, first_line
from .comparison import CSS, PALETTE, WIDTH, details, html_table, md, md_table
from .issue import code
from .sharing import where_text
from .sizes import ratio_by_size_svg, sweep_sizes
from .sizes import to_markdown as sizes_markdown
from .sizes import to_text as sizes_text
from .table import grid

HEADERS = ["BUNDLE", "TIME VS BASELINE (95% CI)", "OUTPUTS", "MOVED MOST", "WHERE"]
_NO_RATIO = float("-inf")


def outcome_text(result: Mapping[str, Any]) -> str:
    """`slower 1.23x [1.10-1.35]`, `1.20x (no verdict)`, `mismatch, 1.01x`, `failed: no environment for ...`."""
    word = outcome(result)
    if word == "failed":
        reason = result["error"] or result["outputs_detail"]
        return f"failed: {first_line(reason, 120)}"
    ratio = f"{result['ratio']:.2f}x" if result["ratio"] is not None else "no timing"
    ci = result["ci95"]
    interval = f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci and None not in ci else ""
    if word == "mismatch":
        return f"mismatch, {ratio}" + (f" ({result['verdict']})" if result["verdict"] else "")
    if word == "unjudged":
        return f"{ratio} (no verdict)" if result["ratio"] is not None else "no timing"
    if word == "unsettled":
        return f"not settled {ratio}{interval}"
    return f"{word} {ratio}{interval}"


def ordered(results: Sequence[dict]) -> list[dict]:
    """Worst first: by ratio, highest first; results without a ratio (failed, not timed) after them, by name. A
    sweep of several candidates has a row per bundle and candidate (`name@1 on 0.9.2`)."""
    rows = [row for r in results for row in per_candidate(r)]
    return sorted(rows, key=lambda r: (-(r["ratio"] if r["ratio"] is not None else _NO_RATIO), r["ref"]))


def per_candidate(result: dict) -> list[dict]:
    """A result as table rows: itself for one candidate, else one row per candidate with its fields."""
    candidates = result.get("candidates") or []
    if len(candidates) <= 1:
        return [result]
    return [{**result, **c, "ref": f"{result['ref']} on {c['version']}",
             "error": result["error"] if result["status"] == "failed" else None} for c in candidates]


def summary_line(data: dict) -> str:
    """`2 slower, 1 mismatched, 1 failed, of 5 (1 faster, 1 same; 2 stored)`."""
    c = data["counts"]
    head = f"{c['slower']} slower, {c['mismatch']} mismatched, {c['failed']} failed, of {c['total']}"
    rest = [f"{c[k]} {k}" for k in ("faster", "same") if c[k]]
    rest += [f"{c['unsettled']} not settled"] if c.get("unsettled") else []
    rest += [f"{c['unjudged']} without a verdict"] if c["unjudged"] else []
    tail = "; ".join(x for x in (", ".join(rest), f"{c['stored']} stored" if c["stored"] else "") if x)
    return head + (f" ({tail})" if tail else "")


def _where(r: dict) -> str:
    if r["stored"]:
        return "stored"
    host = clean(r["host"] or "?", 40)
    return f"{host}, {r['wall_s']:.0f} s" + (f", try {r['attempts']}" if r.get("attempts", 1) > 1 else "")


def _moved(r: dict) -> str:
    if r["moved"]:
        return clean(r["moved"], 300)
    return "none named" if r["ratio"] is not None and outcome(r) != "failed" else "-"


def cells(r: dict) -> list[str]:
    """A result's row: bundle, verdict with ratio and interval, outputs, the op that moved most, where it ran."""
    word = outcome(r)
    return [clean(r["ref"], 60), "failed" if word == "failed" else outcome_text(r), r["outputs"], _moved(r),
            _where(r)]


def _failures(results: Sequence[dict]) -> list[tuple[str, str]]:
    return [(r["ref"], r["error"] or r["outputs_detail"]) for r in ordered(results) if outcome(r) == "failed"]


def _mismatches(results: Sequence[dict]) -> list[tuple[str, str]]:
    return [(r["ref"], r["outputs_detail"]) for r in ordered(results) if outcome(r) == "mismatch"]


def _version(data: dict, which: str) -> str:
    requested, concrete = data[which], (data.get("jax") or {}).get(which)
    return f"{concrete} ({requested})" if concrete and concrete != requested else requested


def _title(data: dict) -> str:
    candidates = data.get("candidates") or [data["candidate"]]
    if len(candidates) > 1:
        return f"jax {', '.join(candidates)} vs {_version(data, 'baseline')}"
    return f"jax {_version(data, 'candidate')} vs {_version(data, 'baseline')}"


def _header(data: dict) -> list[str]:
    n = data["counts"]["total"]
    return [f"sweep: {_title(data)}, {n} bundle{'s' if n != 1 else ''}, each timed in paired rounds "
            f"({data['executor']} executor)", f"store: {clean(data['store'], None)}"]


def to_text(data: dict, width: int = WIDTH) -> str:
    """The terminal table: columns fitted to `width`, the op that moved takes what is left; failures and
    mismatches below with their reasons; the summary line last."""
    rows = [cells(r) for r in ordered(data["results"])]
    fixed = [min(max([len(HEADERS[i])] + [len(row[i]) for row in rows]), cap) for i, cap in ((0, 32), (1, 34),
                                                                                             (2, 8))]
    where = min(max([len(HEADERS[4])] + [len(row[4]) for row in rows]), 24)
    moved = max(12, width - sum(fixed) - where - 2 * 4)
    widths = fixed + [moved, where]
    lines = [cut(line, width) for line in _header(data)]
    lines += grid(HEADERS, rows, widths=widths, rule=False)
    for title, items in (("failed", _failures(data["results"])), ("mismatched", _mismatches(data["results"]))):
        if items:
            lines += ["", f"{title}:"] + [cut(f"  {clean(ref, 60)}: {clean(first_line(why, 400), 400)}", width)
                                          for ref, why in items]
    for by_size in sweep_sizes(data):  # one function at several signatures: its ratio by size
        lines += ["", *sizes_text(by_size).splitlines()]
    lines += ["", summary_line(data)]
    return "\n".join(lines)


def to_markdown(data: dict) -> str:
    """A GitHub-issue-ready report: the summary, the table, failures and mismatches in <details>, and per bundle
    where it is and the exact command that replays it on both versions with the same timing options."""
    results = ordered(data["results"])
    out = [f"### reprobundle sweep: {md(_title(data))}", "", f"**{md(summary_line(data))}**", "",
           "<br>".join(md(line) for line in _header(data)), "",
           md_table([h.lower() for h in HEADERS], [cells(r) for r in results])]
    for title, items in (("failed", _failures(results)), ("mismatched", _mismatches(results))):
        if items:
            body = "\n".join(f"- {code(ref)}: {md(first_line(why, 1000))}" for ref, why in items)
            out += ["", details(f"{len(items)} {title}", body)]
    out += ["", "#### Reproduce", ""]
    if any((r.get("reproduce") or {}).get("warning") for r in results):
        out += ["> **Not shareable yet:** these bundles are in a store only this machine can read: attach the zip "
                "each line names (written by the command after it), or push them to a bucket.", ""]
    for r in results:
        rep = r.get("reproduce")
        if rep:
            where = f"attach `{rep['attach']}`" + (f", from `{rep['export_command']}`" if rep.get("export_command")
                                                   else "") if rep.get("attach") else md(where_text(rep))
            out.append(f"- {code(r['ref'])} ({md(cells(r)[1])}): {code(rep['command'])} ({where})")
    for by_size in sweep_sizes(data):
        out += ["", sizes_markdown(by_size).replace("### ", "#### ", 1)]
    return "\n".join(out) + "\n"


def to_html(data: dict) -> str:
    """One self-contained page: the summary, the table (verdicts coloured), failures and the replay commands."""
    e = html.escape
    results = ordered(data["results"])
    styles = [{1: _style(r)} for r in results]
    parts = ["<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' content='width=device-width'>"
             f"<title>sweep: {e(_title(data))}</title><style>{CSS}</style></head>"
             f"<body><h1>Sweep: {e(_title(data))}</h1>",
             f"<p class='headline {_style_of_counts(data)}'>{e(summary_line(data))}</p>",
             "<p>" + "<br>".join(e(line) for line in _header(data)) + "</p>",
             html_table(HEADERS, [cells(r) for r in results], cell_classes=styles)]
    for title, items in (("Failed", _failures(results)), ("Mismatched", _mismatches(results))):
        if items:
            parts.append(f"<h2>{title}</h2><ul>" + "".join(f"<li><b>{e(ref)}</b>: {e(first_line(why, 2000))}</li>"
                                                         for ref, why in items) + "</ul>")
    for by_size in sweep_sizes(data):
        parts += [f"<h2>{e(by_size['bundle'])}: time against {e(str(by_size['baseline']))} by size</h2>",
                  ratio_by_size_svg(by_size)]
    commands = [(r["ref"], r["reproduce"]["command"]) for r in results if r.get("reproduce")]
    if commands:
        parts.append("<h2>Reproduce</h2><pre>" + e("\n".join(cmd for _, cmd in commands)) + "</pre>")
    return "\n".join(parts + ["</body></html>"])


def _style(r: dict) -> str:
    word = outcome(r)
    return "failed" if word in ("failed", "mismatch") else word if word in PALETTE else ""


def _style_of_counts(data: dict) -> str:
    c = data["counts"]
    return "failed" if c["failed"] or c["mismatch"] else "slower" if c["slower"] else "same"


def sweep_data(data: dict) -> dict:
    """What `--json` prints: the sweep's data with the results in table order."""
    return {**data, "results": ordered(data["results"]), "summary": summary_line(data)}
