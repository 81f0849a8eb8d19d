"""A commit bisection's answer (investigate/search/commit_bisect.py) as text: the first bad commit, the endpoints' check,
the skipped commits, the lowering diff against its parent, the XLA window, the command that asks again."""

from __future__ import annotations

import re
import textwrap

from ..envs.jax_commit import first_bad_line as first_bad_line  # what show and issue say of it
from ..text import clean

SKIPPED_SHOWN = 10
SAID_CHARS = 4000  # a sentence is wrapped whole (why a commit could not run, and the way out), cut only past this


def _wrap(text: str, indent: str = "  ") -> list[str]:
    from .comparison import WIDTH  # here: comparison loads numpy, which `show` (first_bad_line) does without

    return textwrap.wrap(clean(text, SAID_CHARS), WIDTH, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False)  # URLs and paths stay whole


def commit_bisection_text(answer: dict) -> str:
    lines = [f"bisect-commits {clean(answer['good_tag'])}..{clean(answer['bad_tag'])}: {answer['commits']} commits "
             f"(first parent) in {clean(answer['repo'])}"]
    lines += _bad_commit_lines(answer)
    lines += _found_lines(answer)
    if answer.get("could_be"):
        lines += _wrap("untested just before it (skipped), any of which may be the first bad one: "
                       + ", ".join(str(s)[:10] for s in answer["could_be"]))
    lowering = answer.get("lowering")
    if lowering and answer["ends"].get("same"):  # a commit window whose ends compute the same
        said = lowering["text"] if lowering["changed"] else "the same StableHLO"
        lines += _wrap(f"lowering of {clean(answer['bad_tag'])} against jax {clean(answer['good'])}: {said}")
    elif lowering:
        said = lowering["text"] if lowering["changed"] else "the same StableHLO as its parent's"
        lines += _wrap(f"lowering against its parent {_short(str(lowering['parent']))}: {said}")
    skipped = answer.get("skipped") or []
    if skipped:
        lines.append(f"  skipped ({len(skipped)}, as git bisect skip):")
        for s in skipped[:SKIPPED_SHOWN]:
            lines += _wrap(f"{str(s['sha'])[:10]} {s['title']}: {s['why']}", "    ")
    lines += _xla_lines(answer.get("xla"))
    spent = answer.get("spent") or {}
    lines.append(f"  {answer.get('probes', 0)} probe(s), {spent.get('wall_s', 0):.1f} s")
    if answer.get("command"):
        lines += _wrap(f"again: {answer['command']}")
    return "\n".join(lines)


def _found_lines(answer: dict) -> list[str]:
    """Where a search cut short was resumed from, the endpoints' check, the first bad commit or what was found
    instead, and what --max-time left unfinished."""
    lines = _wrap(str(answer["resumed"])) if answer.get("resumed") else []
    lines += _wrap(answer["ends"]["text"])
    if answer.get("first_bad"):
        lines += _first_bad_lines(answer)
        lines += _wrap(f"unfinished: {answer['unfinished']}") if answer.get("unfinished") else []
    elif answer["ends"].get("agree"):
        lines += _wrap(str(answer.get("text")))
    return lines


def _short(ref: str) -> str:
    """A commit hash as its first 10 digits; a tag (jax-v0.4.30) whole."""
    return ref[:10] if re.fullmatch(r"[0-9a-f]{40}", ref) else ref


def _bad_commit_lines(answer: dict) -> list[str]:
    """A commit window's bad end (--bad COMMIT) and the layer it stands for: what the search ran to."""
    bad = answer.get("bad_commit")
    if not isinstance(bad, dict) or not bad.get("sha"):
        return []
    from ..envs.jax_commit import commit_headline

    since = answer.get("branch_point")
    lines = _wrap(f"to commit {commit_headline(bad)} ({bad.get('date')}), from jax {answer['good']}"
                  + (f" (its release branch left this history at {str(since)[:10]})" if since else ""))
    return lines + (_wrap(f"layer: {answer['layer']}") if answer.get("layer") else [])


def _first_bad_lines(answer: dict) -> list[str]:
    """The first bad commit: its line, date and author, URLs, the criterion, the changed defaults its diff names."""
    first = answer["first_bad"]
    lines = ["  " + first_bad_line(answer), f"    {clean(first['date'])}  {clean(first['author'])}",
             f"    {clean(first['url'])}"]
    if first.get("pr"):
        lines.append(f"    {clean(answer['repo'])}/pull/{first['pr']}")
    lines += _wrap(f"judged by {answer['criterion']} against jax {answer['good']}: {answer['why']}", "    ")
    for d in answer.get("defaults") or []:
        lines += _wrap(f"its diff names {d['name']}, whose default changed from {d['a']} (jax "
                       f"{answer['good']}) to {d['b']} (jax {answer['bad']})", "    ")
    if answer.get("jaxlib_moved"):
        lines += _wrap(str(answer["jaxlib_moved"]), "    ")
    notes = answer.get("notes")
    if isinstance(notes, dict) and notes.get("entry"):
        from ..investigate.search.commit_bisect import notes_where

        lines += _wrap(f"its CHANGELOG.md entry ({notes_where(notes)}): {notes['entry']}", "    ")
    return lines


def _xla_lines(xla: dict | None) -> list[str]:
    if not xla:
        return []
    if xla.get("compare"):
        lines = _wrap(f"XLA pinned by the tags: {str(xla['good'])[:10]} -> {str(xla['bad'])[:10]}: {xla['compare']}")
    else:
        lines = _wrap(f"XLA pinned by the tags: {xla.get('good')} -> {xla.get('bad')}")
    for term, commits in (xla.get("touching") or {}).items():
        lines += _wrap(f"XLA commits touching {term}: " + (", ".join(f"{str(c['sha'])[:10]} {c['title']}"
                                                                     for c in commits) or "none"), "    ")
    if xla.get("note"):
        lines += _wrap(str(xla["note"]), "    ")
    return lines
