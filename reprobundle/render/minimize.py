"""Rendering a minimization (investigate/minimize/reduction.py): the ops before and after, the property checked on the
reduced bundle by a fresh replay, the piece's StableHLO when it is short, and the Reproduce block of the reduced
bundle. One plain-data form (`minimize_data`, also --json) feeds the terminal, Markdown and HTML."""

from __future__ import annotations

import html
import re

from ..text import clean, counted
from .comparison import CSS, md
from .sharing import reproduce_markdown, reproduce_text

INLINE_LINES = 40  # a piece's StableHLO shorter than this is shown inline
_LOC = re.compile(r"\s+loc\([^()]*(?:\([^()]*\)[^()]*)*\)")


def minimize_data(result) -> dict:
    """The minimization as plain data (JSON-able)."""
    from ..investigate.minimize.reduction import could_not_shrink

    text = _LOC.sub("", result.text)
    lines = text.strip().splitlines()
    return {"bundle": result.bundle, "bundle_id": result.bundle_id, "baseline": result.contenders[0],
            "candidate": result.contenders[1], "property": result.property, "why": result.why, "bits": result.bits,
            "min_ratio": result.min_ratio, "ops_before": result.ops_before, "ops_after": result.ops_after,
            "candidates_tested": result.tested, "elapsed_s": round(result.elapsed_s, 1), "stopped": result.stopped,
            "levels": result.levels,
            "ops": result.ops, "packed": result.packed, "whole": _shown(result.whole), "check": _shown(result.check),
            "stablehlo": text if len(lines) <= INLINE_LINES else None, "stablehlo_lines": len(lines),
            "reproduce": result.reproduce or None, "summary": summary_line(result), "next": result.next,
            "shrunk": could_not_shrink(result) is None}


def _shown(detail: dict) -> dict:
    """What a judgement showed, without the per-leaf arrays of an output check."""
    out = {k: v for k, v in (detail or {}).items() if k not in ("check",)}
    check = (detail or {}).get("check")
    if check:
        out["check"] = {k: v for k, v in check.items() if k != "leaves"}
        if check.get("worst") and "worst" not in out:
            out["worst"] = check["worst"]
    return out


def property_text(prop: str, detail: dict) -> str:
    """The property as shown on one module: the worst element, the error, or the verdict with its interval."""
    if not detail:
        return "not checked"
    if "holds" in detail and not detail["holds"]:
        return "does NOT hold: " + str(detail.get("why") or "the property was not seen again")
    if prop == "error":
        return f"B fails: {detail.get('error') or detail.get('kind')}"
    if prop == "slower":
        v = detail.get("verdict") or {}
        lo, hi = v.get("ci95") or (v.get("ratio", 0.0), v.get("ratio", 0.0))
        return (f"B is {v.get('verdict')} ({'settled' if v.get('settled') else 'not settled'}): ratio "
                f"{v.get('ratio', 0.0):.3f}x, 95% CI {lo:.3f}-{hi:.3f}x over {v.get('rounds')} paired rounds")
    worst = detail.get("worst") or (detail.get("check") or {}).get("worst")
    if not worst:
        return "the outputs differ"
    at = f"{worst.get('path', 'output')}[{', '.join(str(i) for i in worst.get('index', []))}]"
    return (f"outputs differ: worst at {at}: A {worst.get('expected')}, B {worst.get('actual')} (abs err "
            f"{worst.get('abs_err', 0.0):.3g}, allowed {worst.get('allowed', 0.0):.3g})")


def summary_line(result) -> str:
    """`14 -> 3 ops still show slower between A and B ...`, or why minimize could not shrink it."""
    from ..investigate.minimize.reduction import could_not_shrink

    stopped = {"done": "", "max-time": " (stopped at --max-time: the best piece so far)",
               "interrupted": " (interrupted: the best piece so far)"}[result.stopped]
    tested = f"{counted(result.tested, 'candidate')} tested in {result.elapsed_s:.0f} s"
    failed = could_not_shrink(result)
    if failed:
        return f"{failed} (between {result.contenders[0]} and {result.contenders[1]}){stopped}; {tested}; the " \
               f"piece kept is packed as {result.packed} for a look"
    down = f" ({result.levels - 1} level(s) down, inside a call or loop)" if result.levels > 1 else ""
    return (f"{result.ops_before} -> {result.ops_after} ops{down} still show {result.property} between "
            f"{result.contenders[0]} and {result.contenders[1]}{stopped}; {tested}; packed as {result.packed}")


def _ops_lines(data: dict) -> list[str]:
    return [f"{op['name']}" + (f"  ({op['line']})" if op.get("line") else "") for op in data["ops"]]


def minimize_text(data: dict) -> str:
    out = [f"{clean(data['bundle'])}: minimized for {data['property']} ({clean(data['why'])})",
           f"  {clean(data['summary'])}", "", "Ops kept:"] + [f"  {clean(line)}" for line in _ops_lines(data)]
    if data.get("levels", 1) > 1:
        out.append(f"  (found {data['levels'] - 1} level(s) down: inside a call or loop the top level kept)")
    out += ["", f"Whole bundle:   {clean(property_text(data['property'], data['whole']))}",
            f"Reduced bundle: {clean(property_text(data['property'], data['check']))} (fresh replay)"]
    if data.get("stablehlo"):
        out += ["", "StableHLO:"] + ["  " + clean(line) for line in data["stablehlo"].splitlines()]
    if data.get("reproduce"):
        out += ["", *(clean(line) for line in reproduce_text(data["reproduce"]))]
    if data.get("next"):
        out += ["", f"Next: {clean(data['next'])}   # the bug report, with the piece as a script that needs only jax"]
    return "\n".join(out)


def to_markdown(data: dict) -> str:
    out = [f"### reprobundle minimize: {md(data['bundle'])}, {md(data['property'])}", "",
           f"**{md(data['summary'])}**", "", f"Property: {md(data['property'])} ({md(data['why'])}).", "",
           "| | ops | property |", "|---|---|---|",
           f"| whole bundle | {data['ops_before']} | {md(property_text(data['property'], data['whole']))} |",
           f"| reduced ({md(str(data['packed']))}), fresh replay | {data['ops_after']} | "
           f"{md(property_text(data['property'], data['check']))} |", "", "#### Ops kept", ""]
    out += [f"- `{line}`" for line in _ops_lines(data)]
    if data.get("stablehlo"):
        out += ["", "#### StableHLO", "", "```mlir", data["stablehlo"].strip(), "```"]
    if data.get("reproduce"):
        out += ["", reproduce_markdown(data["reproduce"])]
    if data.get("next"):
        out += ["", "#### Next", "", "The bug report, with the piece as a script that needs only jax and numpy:", "",
                "```sh", data["next"], "```"]
    return "\n".join(out) + "\n"


def to_html(data: dict) -> str:
    e = html.escape
    parts = ["<!doctype html><html><head><meta charset='utf-8'><meta name='viewport' content='width=device-width'>"
             f"<title>minimize: {e(data['bundle'])}</title><style>{CSS}</style></head>",
             f"<body><h1>Minimize: {e(data['bundle'])}, {e(data['property'])}</h1>",
             f"<p class='headline'>{e(data['summary'])}</p>", f"<p>Property: {e(data['property'])} ({e(data['why'])})</p>",
             "<table><tr><th></th><th>ops</th><th>property</th></tr>",
             f"<tr><td>whole bundle</td><td>{data['ops_before']}</td>"
             f"<td>{e(property_text(data['property'], data['whole']))}</td></tr>",
             f"<tr><td>reduced ({e(str(data['packed']))}), fresh replay</td><td>{data['ops_after']}</td>"
             f"<td>{e(property_text(data['property'], data['check']))}</td></tr></table>",
             "<h2>Ops kept</h2><ul>" + "".join(f"<li><code>{e(line)}</code></li>" for line in _ops_lines(data))
             + "</ul>"]
    if data.get("stablehlo"):
        parts += ["<h2>StableHLO</h2>", f"<pre>{e(data['stablehlo'])}</pre>"]
    rep = data.get("reproduce")
    if rep:
        parts += ["<h2>Reproduce</h2>", f"<pre>{e(rep['command'])}</pre>"]
        if rep.get("standalone"):
            parts.append(f"<pre>{e(chr(10).join(rep['standalone']))}</pre>")
    if data.get("next"):
        parts += ["<h2>Next: the bug report</h2>", f"<pre>{e(data['next'])}</pre>"]
    return "\n".join(parts + ["</body></html>"])
