"""The changes of a window on a report's first screen (investigate/change_table.py's rows): one short table, a row
per change, the headline first; and a title as a Markdown heading whose code spans stay code (never escaped
backticks)."""

from __future__ import annotations

import re
from typing import Callable

from ..text import clean

Escape = Callable[[str], str]  # render/issue.py's md (text) and code (a code span)


def heading_md(title: str, md: Escape, code: Escape) -> str:
    """A title as heading text: its `code` spans as code, the rest escaped."""
    parts = re.split(r"(`[^`\n]+`)", clean(title, 300))
    return "".join(code(p[1:-1]) if len(p) > 2 and p[0] == p[-1] == "`" else md(p) for p in parts)


def _newest(row: dict) -> str:
    found = row.get("newest") or {}
    release = found.get("release")
    if not release:
        return "-"
    if found.get("still") is True:
        return f"still on {release}"
    if found.get("still") is False:
        return f"gone on {release}"
    return f"{release}: not judged"


def changes_lines(data: dict, md: Escape, code: Escape) -> list[str]:
    """The table of the changes, where the window holds more than one (one change is the first screen's detail
    alone): release, kind, how much, layer (with the JAX function whose lowering changed), first bad commit, cause,
    intended or not, newest release."""
    rows = data.get("changes") or []
    if len(rows) < 2:
        return []
    a = (data.get("bisection") or {}).get("answer") or {}
    lines = [f"**{len(rows)} changes between jax {md(str(a.get('good')))} and {md(str(a.get('bad')))}**, the headline first:",
             "",
             "| jax | kind | how much | layer | commit | cause | intended | newest |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        layer = md(row["layer"]) + (f": {code(row['function'])}" if row.get("function") else "")
        lines.append(f"| {md(row['release'])} (last good {md(row['last_good'])}) | {md(row['kind'])} | "
                     f"{md(row['how_much'])} | {layer} | {code(row['commit']) if row.get('commit') else '-'} | "
                     f"{md(row['cause'] or '-')} | {'documented' if row.get('intended') else '-'} | "
                     f"{md(_newest(row))} |")
    return lines + [""]
