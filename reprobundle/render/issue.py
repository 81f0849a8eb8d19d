"""A bug report as Markdown, ready to paste into JAX's or XLA's tracker (`reprobundle issue`), from
investigate/issue.py's data. The JAX form leads with the script and the environment (what JAX's template asks
for); the XLA form with the HLO and the `run_hlo_module` line. Every value from the bundle is escaped for Markdown
(`md`) or sits in a code fence longer than any run of backticks inside it."""

from __future__ import annotations

import html
import re
import shlex

from ..text import clean
from .sharing import reproduce_markdown

HLO_INLINE_CHARS = 12_000  # an HLO module longer than this is left to the files `script --hlo` writes


def md(text: object) -> str:
    """One line of text safe in Markdown (table cells too): no HTML, no emphasis, links or code from its characters."""
    text = html.escape(clean(text, 2000), quote=False)
    return re.sub(r"([\\|*_`\[\]~#<>!])", r"\\\1", text)


def fence(body: str, lang: str = "") -> list[str]:
    """A fenced code block that nothing inside can close: a fence longer than any run of backticks in `body`."""
    longest = max((len(m) for m in re.findall(r"`+", body)), default=0)
    ticks = "`" * max(3, longest + 1)
    return [ticks + lang, body.rstrip("\n"), ticks]


def _details(summary: str, body: list[str]) -> list[str]:
    return ["<details>", f"<summary>{html.escape(summary)}</summary>", "", *body, "", "</details>"]


def _seen(data: dict) -> list[str]:
    lines = ["### What happens", ""]
    if data.get("minimized_from"):
        lines += [f"A piece reduced by `reprobundle minimize` from {md(data['minimized_from'])}: "
                  f"{md(data['description'])}.", ""]
    elif data.get("description"):
        lines += [md(data["description"]), ""]
    if data["seen"]:
        lines += ["Its stored replay:", ""] + [f"- {md(line)}" for line in data["seen"]]
    else:
        lines.append("No stored replay of it: the reference run only (`reprobundle replay` it to add one).")
    return lines


def _script(data: dict) -> list[str]:
    s = data["script"]
    lines = ["### Reproducer", ""]
    if s["text"] is None:
        if s["command"]:
            lines += [f"{md(s['why'])}: it is made by", "", *fence(s["command"], "sh")]
        else:
            lines.append(f"No standalone script: {md(s['why'])}.")
        return lines
    show = " ".join(f"{k}={shlex.quote(v)}" for k, v in data["show"].items())
    runs = [f"python {s['name']}   # as the reference ran: exit 0"]
    if show:
        runs.append(f"{show} python {s['name']}   # exit 1: the difference")
    lines += [f"`{s['name']}` runs with only `jax` and `numpy` installed (exit 0: as the reference, 1: the "
              "difference, 3: could not run):", "", *fence("\n".join(runs), "sh"), ""]
    return lines + _details(f"{s['name']} ({s['bytes'] // 1024 + 1} KiB)", fence(s["text"], "python"))


def _hlo(data: dict) -> list[str]:
    h = data["hlo"]
    if not h["command"]:
        return ["### HLO", "", "The bundle stores no HLO: its reference run kept none."]
    name = h["command"].rsplit(" ", 1)[-1]
    lines = ["### HLO", "", f"Save the HLO before optimizations (below) as `{name}`, or write both files with "
             "reprobundle, then compile and run it with the setting that shows the difference, against XLA's "
             "interpreter:", "", *fence(f"{h['files_command']}   # or save the text below\ncd {h['folder']}\n"
                                         f"{h['command']}", "sh"), ""]
    for key, label in (("before", "HLO before optimizations"), ("after", "HLO after optimizations")):
        text = h.get(key)
        if text and len(text) <= HLO_INLINE_CHARS:
            lines += _details(label, fence(text, "hlo")) + [""]
    return lines


def _environment(data: dict) -> list[str]:
    lines = ["### System info (as the bundle recorded it: what `jax.print_environment_info()` prints)", "",
             "| | |", "|---|---|"]
    return lines + [f"| {md(k)} | {md(v)} |" for k, v in data["environment"]]


def issue_markdown(data: dict) -> str:
    """The issue body; where it would pass GitHub's limit, the HLO modules inline are left out first, then the
    script (the commands that make them stay)."""
    body = _body(data)
    if len(body) > data["body_limit"]:
        data = {**data, "hlo": {**data["hlo"], "before": None, "after": None}}
        body = _body(data)
    if len(body) > data["body_limit"] and data["script"]["text"] is not None:
        size = data["script"]["bytes"] // 1024 + 1
        data = {**data, "script": {**data["script"], "text": None, "why": f"the script ({size} KiB) would make the "
                                                                           "issue too long to paste"}}
        body = _body(data)
    return body


def _body(data: dict) -> str:
    xla = data["tracker"] == "xla"
    main = _hlo(data) if xla else _script(data)
    rest = (_script(data) if xla else []) + [""] + _environment(data) + ["", reproduce_markdown(
        data["reproduce"], heading="### Bundle (replays with reprobundle, or by itself)", attached=True)]
    return "\n".join(_seen(data) + [""] + main + [""] + rest) + "\n"


def before_posting(data: dict) -> str | None:
    """What the reporter must do before posting, for the terminal: write the zip the body says is attached."""
    rep = data["reproduce"]
    if not rep.get("attach"):
        return None
    made = f"{rep['export_command']}, then attach" if rep.get("export_command") else "attach"
    return f"Before posting: {made} {rep['attach']} to the issue (the body says it is attached)."


def issue_text(data: dict) -> str:
    """The terminal form: the title, what to do before posting, then the body."""
    todo = before_posting(data)
    return f"Title: {clean(data['title'])}\n" + (f"{clean(todo, 600)}\n" if todo else "") + \
        f"\n{issue_markdown(data)}"
