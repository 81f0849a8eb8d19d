"""The changes of a window on a report's first screen (investigate/report/change_rows.py's rows): one short table, a row
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
        return f"still {'slower' if row.get('kind') == 'slower' else 'changed'} on {release}"
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
    lines = [f"**{len(rows)} changes between jax {md(str(a.get('good')))} and {md(str(a.get('bad')))}**, the headline "
             "first (each row's cells measured for that change; - where nothing was):", "",
             "| jax | kind | how much | layer | commit | cause | documented | newest |", "|---|---|---|---|---|---|---|---|"]
    for row in rows:
        layer = md(row["layer"]) + (f": {code(row['function'])}" if row.get("function") else "")
        lines.append(f"| {md(row['release'])} (last good {md(row['last_good'])}) | {md(kind_text(row))} | "
                     f"{md(row['how_much'])} | {layer} | {code(row['commit']) if row.get('commit') else '-'} | "
                     f"{md(row['cause'] or '-')} | {'documented' if row.get('intended') else '-'} | "
                     f"{md(_newest(row))} |")
    return lines + [""]


def kind_text(row: dict) -> str:
    """A row's kind as the table says it: `last bits, within the tolerance` for a change of bits that stays within
    it (never a breakage), else the kind."""
    if row.get("kind") == "bits":
        return "last bits, within the tolerance" if row.get("within") else "bits"
    return str(row.get("kind") or "-")


FOUND = ("workaround", "cause", "partial")  # the diagnoses that name a cause (analysis/diagnosis.py)


def names_a_cause(diagnosis: dict) -> bool:
    """Whether explain's diagnosis found a cause (a changed default, a located cause, a setting that helps), not
    only that the experiments did not restore the last good release."""
    return diagnosis.get("kind") in FOUND


def reach_text(reach: dict) -> str | None:
    """How far a workaround reaches in later releases (investigate/explain/release_reach.py's rows), one clause a result:
    `works on 0.4.35, 0.4.36; helps partly on 0.5.0; no longer supported from 0.6.0 (the flag is gone there)`, and
    where the releases warn that it is deprecated and where it was removed (`removed in 0.9.0 (a9dac1167d): on 0.12.1
    the option is unknown`); never a bare `0.6.0: restores`, which reads as "fixed in 0.6.0". None without rows (the
    text then)."""
    rows = [r for r in reach.get("releases") or [] if isinstance(r, dict) and r.get("release")]
    if not rows:
        return str(reach["text"]) if reach.get("text") else None
    said = {"restores": "the workaround still works on", "partly": "it helps partly on",
            "ignored": "it is accepted and ignored on", "nothing to undo": "nothing to undo on",
            "changes the outputs": "it changes the outputs, not back, on"}
    groups: dict[str, list[str]] = {}
    for r in rows:
        groups.setdefault(str(r.get("result")), []).append(str(r["release"]))
    out = [f"{said[k]} {', '.join(v)}" for k, v in groups.items() if k in said] + _lifetime(reach, groups.get("gone"))
    out += [str(r.get("text")) for r in rows if r.get("result") not in (*said, "gone")]
    refused = str(reach.get("text") or "").partition("; the compile-option form is refused on ")[2]
    return "; ".join(out + ([f"the compile-option form is refused on {refused}"] if refused else []))


def _lifetime(reach: dict, gone: list[str] | None) -> list[str]:
    """Where the releases warn that the setting is deprecated and where it was removed (release_reach's, in the
    releases' own words), else the first release that no longer takes it."""
    out = [str(found["text"]) for found in (reach.get("deprecated"), reach.get("removed"))
           if isinstance(found, dict) and found.get("text")]
    if gone and not isinstance(reach.get("removed"), dict):
        out.append(f"no longer supported from {gone[0]} (the setting is gone there)")
    return out


def changes_data(result) -> list[dict]:
    """A bisection's changes for `bisect --json` (window_changes.change_entry, the headline first, each with its
    stored answer's id); [] where the window held one change."""
    from ..investigate.search.window_changes import change_entry

    return [change_entry(c, {"answer_id": c.answer_id}) for c in [result, *result.changes]] if result.changes else []
