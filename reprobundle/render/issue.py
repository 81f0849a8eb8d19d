"""A bug report as Markdown, ready to paste into JAX's or XLA's tracker (`reprobundle issue`), from
investigate/issue.py's data. The JAX form leads with the script and the environment (what JAX's template asks
for); the XLA form with the HLO and the `run_hlo_module` line. Every value from the bundle is escaped for Markdown
(`md`) or sits in a code fence longer than any run of backticks inside it."""

from __future__ import annotations

import html
import re
import shlex

from ..text import clean
from ..units import human_ns
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
        lines += [_which_replay(data), ""] + [f"- {md(line)}" for line in data["seen"]]
    else:
        lines.append("No stored replay of it: the reference run only (`reprobundle replay` it to add one).")
    return lines + _measured(data)


def _which_replay(data: dict) -> str:
    """Which stored replay the report is of, and how another is chosen."""
    r = data["replay"]
    runs = ", ".join(f"{md(x['label'])} (run {md(x['run_id'])})" for x in r["runs"])
    made = md(r["runs"][-1]["created"][:16].replace("T", " ")) + " UTC" if r["runs"] else "?"
    return (f"The stored replay reported here, made {made}: {runs}; {md(r['how'])} ({r['together']} of "
            f"{r['replays']} stored replays timed releases together; `reprobundle issue NAME --run RUN_ID` "
            "reports another).")


def _ratio(row: dict) -> str:
    if row["baseline"]:
        return "baseline"
    if row["ratio"] is None:
        return "-"
    ci = row["ci95"]
    return f"{row['ratio']:.2f}x" + (f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else "")


def _verdict(row: dict) -> str:
    if row["baseline"] or row["verdict"] is None:
        return "-" if not row["baseline"] else ""
    return row["verdict"] + ("" if row["settled"] else " (not settled)")


def _measured(data: dict) -> list[str]:
    """The timing of the reported replay: each release's median against the baseline's, with the paired verdict,
    its 95% interval, rounds and the machine's conditions."""
    m = data.get("measured")
    if not m:
        return []
    lines = ["", "### What was measured", "", f"**{md(data['timing_phrase'])}**", "",
             "| jax | median | vs baseline [95% interval] | verdict | rounds | outputs |", "|---|---|---|---|---|---|"]
    for row in m["rows"]:
        lines.append(f"| {md(row['label'])} | {human_ns(row['median_ns'])} | {_ratio(row)} | {md(_verdict(row))} | "
                     f"{row['rounds'] or '-'} | {md(row['status'])} |")
    lines += ["", "Timed together, interleaved in rounds on one machine (ratio of medians; the interval and verdict "
              "from the paired rounds). The machine while each was timed:", ""]
    return lines + [f"- {md(row['label'])}: {md(row['conditions'] or 'not recorded')}" for row in m["rows"]]


def _run_environments(data: dict) -> list[str]:
    """The environment of each compared release as its run recorded it, one column each."""
    envs = data.get("run_environments") or []
    if not envs:
        return []
    names = list(dict.fromkeys(name for e in envs for name, _ in e["rows"]))
    values = [dict(e["rows"]) for e in envs]
    lines = ["### System info of the compared releases (as each run recorded it)", "",
             "| | " + " | ".join(f"jax {md(e['label'])}" for e in envs) + " |", "|---" * (len(envs) + 1) + "|"]
    lines += [f"| {md(n)} | " + " | ".join(md(v.get(n, "-")) for v in values) + " |" for n in names]
    return lines + [""]


def _source(data: dict) -> list[str]:
    """The program the bundle carries: the factory and its script; for a reduced piece, its kept ops' lines."""
    src = data.get("source")
    if not src:
        return []
    lines = ["### Program", ""]
    if src["kept_ops"]:
        lines += ["The kept ops and the source lines they came from:", ""] + [f"- {md(x)}" for x in src["kept_ops"]]
        lines.append("")
    if src["text"] is not None:
        lines += [f"Packed with `reprobundle pack {md(src['script'])}:{md(src['factory'])}`: the factory "
                  f"`{md(src['factory'])}` in `{md(src['script'])}`:", ""]
        lines += _details(f"{src['script']}", fence(src["text"], "python")) + [""]
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
    heading = ("### The packing machine (as the bundle recorded it)" if data.get("run_environments") else
               "### System info (as the bundle recorded it: what `jax.print_environment_info()` prints)")
    lines = _run_environments(data) + [heading, "", "| | |", "|---|---|"]
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
    rest = (_script(data) if xla else []) + [""] + _source(data) + _environment(data) + ["", _bundle(data)]
    return "\n".join(_bisection(data) + _explanation(data) + _seen(data) + [""] + main + [""] + rest) + "\n"


def _explanation(data: dict) -> list[str]:
    """Why, and what works around it, from the latest explanation stored beside the runs."""
    x = data.get("explanation")
    if not x:
        return []
    a = x["answer"]
    said = a.get("diagnosis")
    d = said if isinstance(said, dict) else {}
    lines = ["### Why, and a workaround", "", f"**{md(d.get('summary'))}** ({md(a.get('candidate'))} against "
             f"{md(a.get('baseline'))}, judged by {md(a.get('by'))}; diagnosis: {md(d.get('kind'))})"]
    given = d.get("lines")
    pasted = given if isinstance(given, dict) else {}
    if pasted:
        lines += ["", "To get the old behaviour back until a fix ships:", ""]
        lines += fence("\n".join(clean(str(v), 500) for v in pasted.values()))
    found = d.get("reach")
    reach = found if isinstance(found, dict) else {}
    if reach.get("text"):
        lines += ["", f"Later releases: {md(reach['text'])}."]
    lines += ["", f"Stored answer {md(x['answer_id'])}; asked again with `{md(x['command'])}`."]
    return lines + [""]


def _bisection(data: dict) -> list[str]:
    """Which release broke it and in which layer, from the latest bisection stored beside the runs."""
    b = data.get("bisection")
    if not b:
        return []
    a = b["answer"]
    lines = ["### Which release, which layer", "",
             f"**First bad release: jax {md(a['first_bad'])}** (last good: {md(a['last_good'])}), bisected between "
             f"{md(a['good'])} and {md(a['bad'])} by {md(a['criterion'])}, the program "
             f"{'retraced by each release' if a['mode'] == 'retrace' else 'frozen'}"
             + (f": {md(a['why'])}" if a.get("why") else "") + "."]
    lines += [x for line in _bisection_details(a) for x in ("", line)]
    lines += ["", f"Stored answer {md(b['answer_id'])} ({md(str(b['created'])[:16].replace('T', ' '))} UTC); "
              f"asked again with `{md(b['command'])}`."]
    return lines + [""]


def _records(a: dict, key: str) -> list[dict]:
    """The answer's list under `key`, its entries that are maps (a stranger's record may hold anything)."""
    found = a.get(key)
    return [o for o in found if isinstance(o, dict)] if isinstance(found, list) else []


def _bisection_details(a: dict) -> list[str]:
    """The other changes in the window, how the program was replayed, the defaults that changed, the layer."""
    out = [f"Also: {md(o.get('criterion'))} changed at jax {md(o.get('first_bad'))} (last good "
           f"{md(o.get('last_good'))}): {md(o.get('why'))}." for o in _records(a, "also")]
    out += [f"Not monotone: {md(o.get('why'))}." for o in _records(a, "beyond_ends")]
    if a.get("mode_why"):
        out.append(f"Frozen or retraced: {md(a['mode_why'])}.")
    changed = _records(a, "changed_defaults")
    if changed:
        out.append(f"Defaults that changed from {md(a['last_good'])} to {md(a['first_bad'])} (candidates, not a "
                   "diagnosis): " + "; ".join(f"{md(c.get('name'))} {md(c.get('a'))} → {md(c.get('b'))}"
                                             for c in changed[:12]) + ".")
    layer = a.get("layer") or {}
    if layer.get("text"):
        out.append(f"Layer: {md(layer['text'])}.")
    found = layer.get("lowering")  # free-form in the record's schema: a stranger's may be anything
    lowering = found if isinstance(found, dict) else {}
    if lowering.get("changed") and lowering.get("text"):
        out.append(f"The lowering changed at: {md(lowering['text'])}.")
    return out


def _bundle(data: dict) -> str:
    """The Reproduce block: "attached" only where `--attach` wrote the zip; else the command that writes it (the
    reporter's note that the store is private stays in the terminal)."""
    rep = data["reproduce"] if data.get("attached") else {**data["reproduce"], "warning": None}
    return reproduce_markdown(rep, heading="### Bundle (replays with reprobundle, or by itself)",
                              attached=bool(data.get("attached")))


def before_posting(data: dict) -> str | None:
    """What the reporter must do before posting, for the terminal: attach the zip the body names."""
    rep = data["reproduce"]
    if data.get("attached"):
        return f"Before posting: attach {data['attached']} (written now) to the issue: the body says it is attached."
    if not rep.get("attach"):
        return None
    made = f"{rep['export_command']}, then attach" if rep.get("export_command") else "attach"
    return f"Before posting: {made} {rep['attach']} to the issue (or make the body with `issue --attach DIR`)."


def issue_text(data: dict) -> str:
    """The terminal form: the title, what to do before posting, then the body."""
    todo = before_posting(data)
    return f"Title: {clean(data['title'])}\n" + (f"{clean(todo, 600)}\n" if todo else "") + \
        f"\n{issue_markdown(data)}"
