"""A bug report as Markdown, ready to paste into JAX's or XLA's tracker (`reprobundle issue`), from
investigate/report/issue_facts.py's data. The JAX form leads with the script and the environment (what JAX's template asks
for); the XLA form with the HLO and the `run_hlo_module` line. Every value from the bundle is escaped for Markdown
(`md`) or sits in a code fence longer than any run of backticks inside it."""

from __future__ import annotations

import html
import re
import shlex

from ..analysis.busy import ALTERNATED
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
    """What the reported replay showed: each run against the last good release where a bisection answered (never
    "mismatch" against the packing release's reference), else each run's status; then the times."""
    lines = []
    if data.get("minimized_from"):
        lines += [f"A piece reduced by `reprobundle minimize` from {md(data['minimized_from'])}: "
                  f"{md(data['description'])}.", ""]
    elif data.get("description"):
        lines += [md(data["description"]), ""]
    judged = data.get("judged") or {}
    if judged.get("seen"):
        lines += [f"Each run of the reported replay against jax {md(judged['good'])} (last good):", ""]
        lines += [f"- {md(line)}" for line in judged["seen"]]
    elif data["seen"]:
        lines += ["The runs of the reported replay (against the bundle's packed reference):", ""]
        lines += [f"- {md(line)}" for line in data["seen"]]
    else:
        lines.append("No stored replay of it: the reference run only.")
    return lines + _measured(data)


def _ratio(row: dict) -> str:
    from ..investigate.report.issue_facts import ratio_text

    if row["baseline"]:
        return "baseline"
    return "-" if row["ratio"] is None else ratio_text(row)


def _verdict(row: dict) -> str:
    from ..investigate.report.issue_facts import verdict_words

    if row["baseline"] or row["verdict"] is None:
        return "-" if not row["baseline"] else ""
    return verdict_words(row)


def _measured(data: dict) -> list[str]:
    """The timing of the reported replay: each release's median against the baseline's, with the paired verdict,
    its 95% interval, rounds and the machine's conditions."""
    m = data.get("measured")
    if not m:
        return []
    lines = ["", f"**{md(data['timing_phrase'])}**", "",
             "| jax | median | vs baseline [95% interval] | verdict | rounds | outputs |", "|---|---|---|---|---|---|"]
    for row in m["rows"]:
        lines.append(f"| {md(row['label'])} | {human_ns(row['median_ns'])} | {_ratio(row)} | {md(_verdict(row))} | "
                     f"{row['rounds'] or '-'} | {md(row['status'])} |")
    alternated = any(ALTERNATED in str(row.get("conditions") or "") for row in m["rows"])
    how = "alternated in rounds, one process at a time on the device (a TPU admits one)" if alternated else \
        "interleaved in rounds"
    lines += ["", f"Timed together, {how} on one machine (ratio of medians; the interval and verdict from the paired "
              "rounds). The machine while each was timed:", ""]
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
        packed = f"reprobundle pack {src['script']}:{src['factory']}"
        lines += [f"Packed with {code(packed)}: the factory {code(src['factory'])} in {code(src['script'])}:", ""]
        lines += _details(f"{src['script']}", fence(src["text"], "python")) + [""]
    return lines


def _script(data: dict) -> list[str]:
    s = data["script"]
    lines = ["### Reproducer", ""]
    if s["text"] is None:
        zip_name = data.get("zip") or "the bundle's zip"
        lines += [f"No script inline: {md(s['why'])}.", "", f"The attached {code(zip_name)} is the reproducer: it "
                  "replays itself with only `jax` and `numpy` installed (exit 0: as the last good release, 1: the "
                  "difference, 3: could not run):", "", *fence("\n".join(_zip_lines(data)), "sh")]
        return lines
    if s.get("changes"):
        return lines + [f"{code(s['name'])} checks each change on its own (`--change N`); the attached "
                        f"{code(str(data.get('zip')))} checks the same with only `jax` and `numpy` installed:", "",
                        *fence("\n".join(changes_commands(s["changes"], str(data.get("zip")))), "sh"), ""] + \
            _details(f"{s['name']} ({s['bytes'] // 1024 + 1} KiB)", fence(s["text"], "python"))
    runs = _run_lines(data, s["name"])
    needs = "needs what its header says" if s.get("kind") == "script" and \
        (data.get("judged") or {}).get("reproducer") == "program" else "runs with only `jax` and `numpy` installed"
    if s.get("kind") == "piece":
        lines += [f"The whole program's script does not fit here ({md(s['why'])}); `reprobundle minimize` reduced it "
                  f"to the piece {md(s['piece'])}: {md(s['description'])}.", ""]
    lines += [f"{code(s['name'])} {needs} (exit 0: as the reference, 1: the difference, 3: could not run):", "",
              *fence("\n".join(runs), "sh"), ""]
    return lines + _details(f"{s['name']} ({s['bytes'] // 1024 + 1} KiB)", fence(s["text"], "python"))


def _zip_lines(data: dict) -> list[str]:
    """How to run the zip, each line with the exit code it gives, on the last good and the first bad release where
    a bisection answered (a commit's JAX: in the environment bisect-commits made), else as the reference ran."""
    from ..bundle.program_script import uv_line

    name, judged = str(data.get("zip") or "bundle.zip"), data.get("judged") or {}
    if data["script"].get("changes"):
        return changes_commands(data["script"]["changes"], name)
    if judged.get("criterion") == "time":  # the zip's record knows the slowdown's two releases
        return [f"python {name} --compare {judged['good']} {judged['bad']}   # exit 1: the second is slower"]
    if not judged:
        return [f"python {name}   # as the reference ran: exit 0"]
    pythons = judged.get("pythons") or {}
    good = f"{uv_line(judged['good'], [], name, pythons.get(judged['good']))}   # exit 0"
    if judged.get("commit"):
        return [good, f"PATH_IT_PRINTS/bin/python {name}   # exit 1 (JAX at commit {str(judged['commit'])[:10]}: "
                      "reprobundle envs --add-commit makes it)"]
    return [good, f"{uv_line(judged['bad'], [], name, pythons.get(judged['bad']))}   # exit 1"]


def _run_lines(data: dict, name: str) -> list[str]:
    """How to run the script, each line with the exit code it gives: on the last good and the first bad release
    where a bisection answered (the piece: on minimize's two sides where they are releases), else with and without
    the setting that showed the difference."""
    judged, s = data.get("judged") or {}, data["script"]
    if s.get("kind") == "piece":
        return _piece_lines(s, name, judged.get("pythons") or {})
    if judged and judged.get("criterion") != "time":
        return _answer_lines(judged, name)
    return _setting_lines(data["show"], name)


def _answer_lines(judged: dict, name: str) -> list[str]:
    """The script on the last good release (exit 0) and the first bad one, or JAX at the first bad commit (1)."""
    from ..bundle.program_script import uv_line

    pythons = judged.get("pythons") or {}
    good = f"{uv_line(judged['good'], [], name, pythons.get(judged['good']))}   # exit 0"
    if judged.get("commit"):  # no package of a commit's JAX: the environment bisect-commits made, again
        sha = str(judged["commit"])
        return [good, f"reprobundle envs --add-commit {sha[:12]} --over {judged['good']} --jax-repo JAX_CLONE",
                f"PATH_IT_PRINTS/bin/python {name}   # exit 1 (JAX at commit {sha[:10]})"]
    return [good, f"{uv_line(judged['bad'], [], name, pythons.get(judged['bad']))}   # exit 1"]


def _piece_lines(s: dict, name: str, pythons: dict) -> list[str]:
    """The piece's script on minimize's two sides where they are releases, else under the setting it was kept for."""
    from ..bundle.program_script import uv_line

    sides = s.get("sides") or []
    if len(sides) == 2 and all(re.fullmatch(r"\d+(\.\d+)+", v) for v in sides):
        return [f"{uv_line(v, [], name, pythons.get(v))}   # exit {code}" for v, code in zip(sides, (0, 1))]
    return _setting_lines(s.get("show") or {}, name)


def _setting_lines(show: dict, name: str) -> list[str]:
    """The script as the reference ran (exit 0), and under the setting that showed the difference (exit 1)."""
    said = " ".join(f"{k}={shlex.quote(v)}" for k, v in show.items())
    runs = [f"python {name}   # as the reference ran: exit 0"]
    return runs + ([f"{said} python {name}   # exit 1: the difference"] if said else [])


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
        data = {**data, "script": {**data["script"], "kind": "zip", "text": None,
                                   "why": f"the script ({size} KiB) would make the issue too long to paste"}}
        body = _body(data)
    return body


def _body(data: dict) -> str:
    """The first screen (what broke, expected against got or the ratio, cause, workaround, the reproducer), then
    everything else collapsed."""
    xla = data["tracker"] == "xla"
    found = (_bisection(data) if data.get("bisection") else []) + _explanation(data)
    rest = _details("How it was found", found) if found else []
    rest += _details("What the stored replay showed", _seen(data))
    rest += _details("HLO and run_hlo_module", _hlo(data)) if xla else []
    rest += _details(_script_summary(data), _script(data))
    rest += _details("Program", _source(data)) if data.get("source") else []
    rest += _details("Environment", _environment(data))
    rest += _details("Bundle (replays with reprobundle, or by itself)", [_bundle(data)])
    return "\n".join(first_screen(data) + [""] + rest) + "\n"


def first_screen(data: dict) -> list[str]:
    """The lines a maintainer reads first: the title, expected against got on each side (or the ratio with its
    interval), the cause and the workaround, and the command that fails until it is fixed."""
    from .change_table import changes_lines, heading_md

    lines = [f"### {heading_md(data['title'], md, code)}", ""]
    lines += documented_change_lines(data)  # an intended change is said first: a maintainer closes it on this
    table = changes_lines(data, md, code)
    lines += ([""] if table and lines[-1] else []) + table  # a paragraph after a bullet needs a blank line
    judged, newest = data.get("judged") or {}, data.get("newest") or {}
    if newest.get("still") is False:  # gone on the newest release: said first
        lines.append(f"- **Gone on the newest release:** {md(newest['text'])}")
    lines += _expected_got(judged)
    if newest.get("still") is not False and newest.get("text"):
        lines.append(f"- **Newest release:** {md(newest['text'])}")
    if data.get("timing_phrase") and (not judged or judged.get("criterion") == "time"):
        lines.append(f"- **Time:** {md(data['timing_phrase'])}{_conditions(data)}")
    lines += _cause(data)
    lines += _reproducer_line(data)
    return lines + [""] + _changes_block(data)


def _expected_got(judged: dict) -> list[str]:
    """Expected (the last good release's values) against got (the first bad release's), a few elements of each
    output that differs."""
    lines: list[str] = []
    for c in (judged.get("changes") or [])[:3]:
        if len(lines) >= 2 and _same_pair(c, judged["changes"][0]):  # one pair said once
            continue
        if "expected_kind" in c:
            lines += [f"- **Expected** (jax {md(judged['good'])}, last good): {md(c['expected_kind'])}",
                      f"- **Got** (jax {md(judged['bad'])}): {md(c['got_kind'])}"]
            continue
        at = "" if c["count"] == c["size"] and c["size"] <= len(c["at"]) else \
            " at " + ", ".join(f"[{k}]" for k in c["at"])
        lines += [f"- **Expected** (jax {md(judged['good'])}, last good), output {c['output']} "
                  f"({md(c['dtype'])}{md(c['shape'])}){at}: {md(', '.join(c['expected']))}",
                  f"- **Got** (jax {md(judged['bad'])}): {md(', '.join(c['got']))} ({_how_they_differ(c)})"]
    return lines


def _how_they_differ(c: dict) -> str:
    """`47 of 64 elements differ, by up to 3 ULP, all within the tolerance`: how many, by how much, whether within
    the tolerance (a change of bits, where the values alone may read alike)."""
    from ..bundle.program_script import ulps_text

    said = f"{c['count']} of {c['size']} elements differ{ulps_text(c).replace(',', ' by', 1)}"
    if "beyond" in c and c["beyond"] == 0:
        return said + ", all within the tolerance"
    return said + (f", {c['beyond']} beyond the tolerance" if c.get("beyond") not in (None, c["count"]) else "")


def _same_pair(c: dict, first: dict) -> bool:
    """Whether an output's expected and got values are those of the first output said (the same pair again)."""
    return c is not first and (c.get("expected"), c.get("got"), c.get("expected_kind"), c.get("got_kind")) == (
        first.get("expected"), first.get("got"), first.get("expected_kind"), first.get("got_kind"))


def _conditions(data: dict) -> str:
    """How busy the machine was while the compared release was timed (analysis/busy.summary), as recorded."""
    shown = (data.get("measured") or {}).get("shown") or {}
    return f"; measured at {md(shown['conditions'])}" if shown.get("conditions") else ""


def _cause(data: dict) -> list[str]:
    """The cause (explain's diagnosis) and the workaround, where the change is (the layer at the boundary), and
    whether the release notes document it."""
    x = (data.get("explanation") or {}).get("answer") or {}
    said = x.get("diagnosis")
    d: dict = said if isinstance(said, dict) else {}
    from .change_table import names_a_cause

    # a diagnosis that found no cause ("the 5 experiments measured did not give ... back") is the details' to say
    lines = [f"- **Cause:** {md(d['summary'])}"] if d.get("summary") and names_a_cause(d) else []
    a = (data.get("bisection") or {}).get("answer") or {}
    found_layer = data.get("layer") or a.get("layer")  # the headline's layer as measured for it
    layer: dict = found_layer if isinstance(found_layer, dict) else {}
    where = where_line(layer)
    if where:
        lines.append(f"- **Where:** {md(where)}")
    return lines + _commit(data) + _workaround(d) + _documented_lines(data)


def documented_change_lines(data: dict) -> list[str]:
    """The CHANGELOG.md entry the first bad commit itself adds, quoted with where the notes of the release it shipped
    in carry it (under whatever heading), and its workaround, as the notes give it, on a line of its own."""
    change = data.get("documented_change")
    if not isinstance(change, dict):
        return []
    if change.get("note"):  # a release note that names the cause (not the commit's own entry)
        return [f"- **Documented change:** {md(change['note'])}"]
    if not change.get("entry"):
        return []
    release = f"jax {change['release']}'s notes" if change.get("release") else "the coming release's notes"
    under = f' under "{md(change["heading"])}"' if change.get("heading") else ""
    entry, way_back = str(change["entry"]), str(change.get("workaround") or "")
    said = entry.replace(way_back, "").strip() if way_back else entry  # the workaround: its own line, once
    lines = [f"- **Documented change:** the first bad commit {md(str(change.get('first_bad'))[:10])} adds it to "
             f"CHANGELOG.md ({release}{under}): {_quoted(said)}"]
    if way_back:
        lines.append(f"- **Workaround (the notes'):** {_quoted(way_back)}")
    return lines


def _documented_lines(data: dict) -> list[str]:
    """The release notes' line that names the cause, where the first line does not say it already (the first bad
    commit's own entry, or this very line: documented_change_lines)."""
    change = data.get("documented_change") or {}
    own = str(change.get("entry") or change.get("note") or "")
    return [f"- **Documented as intended:** {md(note)}" for note in (data.get("documented") or [])[:1]
            if not own or own not in note]


def _quoted(text: str) -> str:
    """A release note's text as Markdown: its code spans as code, the rest escaped (`md`)."""
    parts = text.split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: all of it as text
        return md(text)
    return "".join(code(part) if i % 2 else md(part) for i, part in enumerate(parts))


def _commit(data: dict) -> list[str]:
    """The first bad JAX commit (bisect-commits' stored answer), with the changed default its diff names: the
    default and the commit that changed it, one story."""
    found = (data.get("commit_bisection") or {}).get("answer")
    a: dict = found if isinstance(found, dict) else {}
    first = a.get("first_bad")
    window = (data.get("bisection") or {}).get("answer") or {}
    if not isinstance(first, dict) or not first.get("sha") or not _same_window(a, window):
        return []  # none, or of another window than the stored bisection's
    line = f"- **First bad commit: {commit_title_md(first, str(a.get('repo') or ''))}"
    line += f" ({md(first['url'])})" if first.get("url") else ""
    line += _searched_to(a)
    said = [f"it changed the default of {d['name']} ({d.get('a')} -> {d.get('b')})" for d in a.get("defaults") or []
            if isinstance(d, dict) and d.get("name")]
    return [line + (f": {md('; '.join(said))}" if said else "")]


def commit_title_md(first: dict, repo_url: str) -> str:
    """A commit's short hash (closing the bold its line opens) and title as Markdown that links nowhere it should
    not: each `#N` of the title as code (a title's number may be another repository's pull request, an upstream
    StableHLO or XLA one: GitHub would link it to this tracker's issue N), and the pull request its message names by
    merge or review line, written whole with its repository (`jax-ml/jax#31234` autolinks there and only there)."""
    title = clean(str(first.get("title") or ""), 300)
    parts = re.split(r"(#\d+)", title)
    said = "".join(code(p) if re.fullmatch(r"#\d+", p) else md(p) for p in parts if p)
    pr, owner = first.get("pr"), re.sub(r"^https?://github\.com/", "", repo_url).strip("/")
    named = isinstance(pr, int) and f"#{pr}" not in title and re.fullmatch(r"[\w.-]+/[\w.-]+", owner)
    return f"{md(str(first.get('sha') or '')[:10])}** {said}" + (f" ({md(owner)}#{pr})" if named else "")


def _searched_to(answer: dict) -> str:
    """", searched from jax 0.10.2 to commit 0145058aa0" for a commit window (--bad COMMIT), else nothing."""
    bad = answer.get("bad_commit")
    if not isinstance(bad, dict) or not bad.get("sha"):
        return ""
    return f", searched from jax {md(str(answer.get('good')))} to commit {md(str(bad['sha'])[:10])}"


def _same_window(commits: dict, window: dict) -> bool:
    """Whether a commit bisection's answer belongs beside the stored release bisection's `window`: the same
    releases; for a commit window (--bad COMMIT), none stored or one whose last good release is its good one."""
    if isinstance(commits.get("bad_commit"), dict):
        return not window or window.get("last_good") == commits.get("good")
    return (commits.get("good"), commits.get("bad")) == (window.get("last_good"), window.get("first_bad"))


LAYER_TEXT = {"compiler": "XLA (the compiler): the frozen module shows the change",
              "lowering": "JAX's lowering: the frozen module does not show the change",
              "both": "both JAX's lowering and XLA: the frozen module shows a change, and the lowering changed"}


def where_line(layer: dict) -> str | None:
    """Where the change is, from the layer's fields (not its text, whose evidence repeats a bisection's own
    figures): the layer, and the ops whose lowering changed or that both releases lower the program alike."""
    said = LAYER_TEXT.get(str(layer.get("layer")))
    if said is None:
        return clean(layer["text"], 600) if isinstance(layer.get("text"), str) and layer["text"] else None
    found = layer.get("lowering")
    lowering: dict = found if isinstance(found, dict) else {}
    if lowering.get("changed") and layer.get("layer") == "compiler":  # "both" where the retraced pair was not judged
        return f"{said}; the lowering differs between these releases too, but this change was not measured retraced"
    if lowering.get("changed") and isinstance(lowering.get("text"), str):
        return f"{said}; the lowering changed at: {clean(lowering['text'], 2000)}"  # whole: diff_text bounds it
    if lowering.get("changed") is False:
        return f"{said}; both releases lower the program to the same StableHLO"
    return said


def _workaround(d: dict) -> list[str]:
    """The lines explain gives to paste, and how far they reach in later releases."""
    given = d.get("lines")
    pasted = [clean(str(v), 300) for v in given.values()] if isinstance(given, dict) else []
    lines = ["- **Workaround:** " + "; ".join(code(v) for v in pasted)] if pasted else []
    found = d.get("reach")
    reach = found if isinstance(found, dict) else {}
    from .change_table import reach_text

    said = reach_text(reach)
    return lines + ([f"- **The workaround on later releases:** {md(said)}"] if pasted and said else [])


def _reproducer_line(data: dict) -> list[str]:
    """Which reproducer, what it checks and the command that fails until it is fixed, in one line: the script
    below, else the minimized piece's script, else the attached zip."""
    s, judged = data["script"], data.get("judged") or {}
    if s.get("changes"):
        return [_changes_line(data)]
    if s["text"] is None or s.get("kind") == "piece":
        return [_zip_or_piece_line(data)]
    name = s["name"]
    if judged and judged.get("criterion") != "time":
        bits = " bit for bit" if judged.get("criterion") == "bits" else ""
        lines = [f"- **Reproducer:** {code('python ' + name)} exits 1 on {_bad_side(judged)} "
                 f"and 0 on jax {md(judged['good'])}{bits} (below: {md(judged['reproducer_why'])})"]
        if judged.get("mode") == "retrace" and not judged.get("has_program"):
            lines.append("- The bundle carries no program: its frozen module cannot show a change in JAX's lowering.")
        return lines
    pair = _slowdown_pair(data)
    if pair is not None:
        compare = f"python {name} --compare {pair[0]} {pair[1]}"
        return [f"- **Reproducer:** {code(compare)} times both releases, each in its own process, and exits 1 "
                "while the second is slower beyond the interval"]
    return [f"- **Reproducer:** {code('python ' + name)} (below; exit 0: as the reference, 1: the difference)"]


def _slowdown_pair(data: dict) -> tuple[str, str] | None:
    """The two releases a slowdown's `--compare` times: the answer's where a bisection found it, else the reported
    replay's baseline and the release settled slower than it; None for no slowdown."""
    judged, measured = data.get("judged") or {}, data.get("measured") or {}
    if judged.get("criterion") == "time":
        return judged["good"], judged["bad"]
    base, row = measured.get("baseline"), measured.get("shown")
    if base and row and row.get("settled") and row.get("verdict") == "slower":
        return base["jax"], row["jax"]
    return None


def _changes_line(data: dict) -> str:
    """The first screen's reproducer line where the script (or the zip) checks every change listed."""
    s, several = data["script"], data["script"]["changes"]
    which = f"{code('python ' + s['name'])} (below)" if s["text"] is not None else \
        f"the attached zip, {code('python ' + str(data.get('zip')))},"
    left = "; ".join(f"change {x['row']} is not checked: {x['why']}" for x in several["left"])
    return (f"- **Reproducer:** {which} checks each change listed on its own, with only jax and numpy (and what the "
            f"program imports); each line exits as its comment says (3: could not run)" + (f"; {md(left)}" if left
                                                                                         else "") + ":")


def changes_commands(several: dict, name: str) -> list[str]:
    """The lines that check each change with the script or zip `name` (bundle/changes_script.change_commands),
    each change's lines under a comment naming it."""
    from ..bundle.changes_script import ChangeCheck, change_commands

    lines = []
    for c in several["checks"]:
        check = ChangeCheck(c["row"], c["criterion"], c["mode"], c["good"], c["bad"])
        lines.append(f"# change {c['row']}: {clean(c['what'], 200)}")
        lines += [f"{line}   # exit {exit_code}"
                  for line, exit_code in change_commands(check, name, several["packages"], several["pythons"])]
    return lines


def _changes_block(data: dict) -> list[str]:
    """The commands of _changes_line, in a block after the first screen's bullets."""
    s = data["script"]
    if not s.get("changes"):
        return []
    name = s["name"] if s["text"] is not None else str(data.get("zip"))
    return [*fence("\n".join(changes_commands(s["changes"], name)), "sh"), ""]


def _zip_or_piece_line(data: dict) -> str:
    """The first screen's line of a reproducer that is not the program's own script: the minimized piece's script,
    else the attached zip."""
    s, judged = data["script"], data.get("judged") or {}
    if s["text"] is not None:
        sides = s.get("sides") or ["A", "B"]
        return (f"- **Reproducer:** {code('python ' + s['name'])}, the piece `reprobundle minimize` reduced "
                f"({md(s['piece'])}: {md(s['description'])}), exits 1 on {md(sides[1])} and 0 on {md(sides[0])} "
                f"(below; the whole program's script does not fit: {md(s['why'])})")
    name = str(data.get("zip") or "the bundle's zip")
    if judged.get("criterion") == "time":
        compare = f"python {name} --compare {judged['good']} {judged['bad']}"
        return (f"- **Reproducer:** the attached zip: {code(compare)} times both releases, each in its own process, "
                f"and exits 1 while the second is slower beyond the interval, with only jax and numpy installed "
                f"(below; no script inline: {md(s['why'])})")
    ends = f" exits 1 on {_bad_side(judged)} and 0 on jax {md(judged['good'])}" if judged else \
        " replays it as the reference ran"
    return (f"- **Reproducer:** the attached zip: {code('python ' + name)}{ends} with only jax and numpy installed "
            f"(below; no script inline: {md(s['why'])})")


def _bad_side(judged: dict) -> str:
    """The bad side: `jax 0.5.0`, `jax 0.11.0.dev0+c36456a817ab (JAX at the first bad commit c36456a817)`, or
    `JAX at the first bad commit c36456a817` where no run of it is stored to say its version."""
    sha = str(judged.get("commit") or "")[:10]
    if not sha:
        return f"jax {md(judged['bad'])}"
    at = f"JAX at the first bad commit {md(sha)}"
    return at if judged["bad"] == sha else f"jax {md(judged['bad'])} ({at})"


def code(text: str) -> str:
    """Inline code that nothing inside can close (a run of backticks longer than any inside)."""
    text = clean(text, 500)
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * (longest + 1)
    return f"{ticks} {text} {ticks}" if longest else f"`{text}`"


def _script_summary(data: dict) -> str:
    s = data["script"]
    if s["text"] is None:
        return f"Reproducer: {data.get('zip') or 'the bundle zip'}"
    return f"Reproducer: {s['name']} ({s['bytes'] // 1024 + 1} KiB)"


def _bisection(data: dict) -> list[str]:
    """Which release broke it and in which layer, from the latest bisection stored beside the runs (no ids, no
    commands: those are the reporter's, on the terminal)."""
    a = data["bisection"]["answer"]
    lines = ["### Which release, which layer", "",
             f"**First bad release: jax {md(a['first_bad'])}** (last good: {md(a['last_good'])}), bisected between "
             f"{md(a['good'])} and {md(a['bad'])} by {md(a['criterion'])}, the program "
             f"{'retraced by each release' if a['mode'] == 'retrace' else 'frozen'}"
             + (f": {md(a['why'])}" if a.get("why") else "") + "."]
    backend = str((data.get("judged") or {}).get("backend") or _backend(data))
    return lines + [x for line in _bisection_details(a, backend) for x in ("", line)] + [""]


def _explanation(data: dict) -> list[str]:
    """Why, and what works around it, from the latest explanation stored beside the runs: the diagnosis, what it
    compared, the lines to paste (a fence: they may be several), later releases."""
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
    return lines


def _backend(data: dict) -> str:
    return next((v for k, v in data.get("environment") or [] if k == "backend"), "")


def _records(a: dict, key: str) -> list[dict]:
    """The answer's list under `key`, its entries that are maps (a stranger's record may hold anything)."""
    found = a.get(key)
    return [o for o in found if isinstance(o, dict)] if isinstance(found, list) else []


PLATFORM_PREFIXES = {"cpu": "xla_cpu_", "gpu": "xla_gpu_", "cuda": "xla_gpu_", "rocm": "xla_gpu_",
                     "tpu": "xla_tpu_"}


def for_platform(changed: list[dict], backend: str) -> list[dict]:
    """The changed defaults that can matter on `backend`: a flag of another platform (xla_gpu_* in a CPU report)
    is never a candidate."""
    mine = PLATFORM_PREFIXES.get(backend.lower())
    others = {p for p in PLATFORM_PREFIXES.values() if p != mine}
    return [c for c in changed if not mine or not str(c.get("name") or "").startswith(tuple(others))]


def _bisection_details(a: dict, backend: str = "") -> list[str]:
    """The other changes in the window, how the program was replayed, the defaults that changed on this platform,
    what the answer does not list (a slowdown under the resolution, one not placed, the releases never run). The
    layer and the ops whose lowering changed are the first screen's (each list once)."""
    listed = _records(a, "changes")  # the first screen's table lists every change: no "Also:" line repeats one
    out = [f"Also: {md(o.get('criterion'))} changed at jax {md(o.get('first_bad'))} (last good "
           f"{md(o.get('last_good'))}): {md(o.get('why'))}." for o in _records(a, "also") if not listed]
    out += [f"Not monotone: {md(o.get('why'))}." for o in _records(a, "beyond_ends")]
    out += [f"Not listed: {md(o.get('line'))}." for o in _records(a, "not_listed")]
    if a.get("mode_why"):
        out.append(f"Frozen or retraced: {md(a['mode_why'])}.")
    changed = for_platform(_records(a, "changed_defaults"), backend)
    if changed:
        out.append(f"Defaults that changed from {md(a['last_good'])} to {md(a['first_bad'])} (candidates, not a "
                   "diagnosis): " + "; ".join(f"{md(c.get('name'))} {md(c.get('a'))} → {md(c.get('b'))}"
                                             for c in changed[:12]) + ".")
    found = a.get("layer")  # free-form in the record's schema: a stranger's may be anything
    layer = found if isinstance(found, dict) else {}
    said = layer.get("lowering")
    ops: dict = said if isinstance(said, dict) else {}
    if ops.get("changed") and isinstance(ops.get("text"), str) and where_line(layer) is None:
        out.append(f"The lowering changed at: {md(ops['text'])}.")  # where the first screen's line lacks it
    return out


def _bundle(data: dict) -> str:
    """The Reproduce block as the issue's reader sees it, the zip attached (making and attaching it is the
    reporter's to-do: on the terminal, before_posting)."""
    return reproduce_markdown({**data["reproduce"], "warning": None}, heading="", attached=True)


def before_posting(data: dict) -> str | None:
    """What the reporter must do before posting, for the terminal (never the body): attach the zip the body
    names."""
    rep = data["reproduce"]
    if data.get("attached"):
        return f"Before posting: attach {data['attached']} (written now) to the issue: the body says it is attached."
    if not rep.get("attach"):
        return None
    made = f"{rep['export_command']}, then attach" if rep.get("export_command") else "attach"
    return f"Before posting: {made} {rep['attach']} to the issue (or make the body with `issue --attach DIR`)."


def reporter_notes(data: dict) -> list[str]:
    """For the reporter's terminal (never the body): which stored replay is reported and how to choose another,
    and the commands that ask the stored answers again (rebuilt from their fields, quoted)."""
    r = data["replay"]
    runs = ", ".join(f"{x['label']} (run {x['run_id']})" for x in r["runs"])
    lines = [f"Reported: the stored replay {runs or '(none)'}: {r['how']} ({r['together']} of {r['replays']} "
             "stored replays timed releases together; `--run RUN_ID` reports another)."]
    return lines + [f"Asked again with: {c}" for c in data.get("asked_again") or []]


def issue_text(data: dict) -> str:
    """The terminal form: the title, what to do before posting, which replay is reported, then the body."""
    todo = before_posting(data)
    notes = "".join(f"{clean(n, 600)}\n" for n in reporter_notes(data))
    return f"Title: {clean(data['title'])}\n" + (f"{clean(todo, 600)}\n" if todo else "") + notes + \
        f"\n{issue_markdown(data)}"
