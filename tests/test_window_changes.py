"""Every change in a window, each its own (investigate/search/window_changes.py), on real releases: a program whose
outputs change at two releases gets two changes, each with its layer and its own stored answer, and the issue's
first screen lists them in one table."""
from __future__ import annotations

from pathlib import Path

import pytest
import quick

from reprobundle import api

PROGRAMS = Path(__file__).parent / "programs" / "retrace"
RELEASES = ["0.4.30", "0.4.31", "0.4.33", "0.4.34", "0.5.0", "0.5.1", "0.6.0", "0.7.0", "0.7.2", "0.8.0"]


def _outputs_by_release(values: dict[str, int], unmade: tuple[str, ...] = ()):
    """A probe whose runs carry their outputs as one number per release (`values`: the release each value starts
    at), and how two differ: beyond the tolerance where the numbers do; a release in `unmade` has no environment."""
    asked: list[str] = []

    def probe(versions):
        asked.extend(versions)
        runs = []
        for v in versions:
            start = max((s for s in values if RELEASES.index(s) <= RELEASES.index(v)), key=RELEASES.index)
            runs.append({"requested": v, "status": "ok", "reason": "", "value": values[start]} if v not in unmade
                        else {"requested": v, "status": "error", "reason": f"no environment for jax {v}"})
        return runs

    return probe, (lambda a, b: "same" if a["value"] == b["value"] else "beyond"), asked


def test_every_release_runs_once_so_a_change_undone_later_is_seen_and_a_long_window_says_what_never_ran():
    """#64: every release of a window runs once, untimed, so each change of outputs is a pair of neighbouring
    releases, one undone a few releases later included (said as its `undone`, the undoing no change of its own); a
    window longer than the sweep's bound runs that many spread over it, searches each pair of those that differ
    by its ends, and names the releases no run reached."""
    from reprobundle.investigate.search.window_changes import changes_of, never_lines, never_ran, transitions

    # three changes: 0.4.33, 0.5.1 and 0.7.2; 0.6.0 cannot be made (left out, never a change)
    probe, apart, asked = _outputs_by_release({"0.4.30": 0, "0.4.33": 1, "0.5.1": 2, "0.7.2": 3}, unmade=("0.6.0",))
    known = dict(zip(["0.4.30", "0.8.0"], probe(["0.4.30", "0.8.0"])))  # the bisection's runs, reused
    asked.clear()
    found, runs = transitions(RELEASES, "0.4.30", "0.8.0", probe, apart, "outputs", known=known)
    assert [(t["last_good"], t["first_bad"]) for t in found] == [("0.4.31", "0.4.33"), ("0.5.0", "0.5.1"),
                                                                 ("0.7.0", "0.7.2")]
    assert "0.4.30" not in asked and "0.8.0" not in asked and len(asked) == len(set(asked))  # each run once
    assert sorted(asked) == sorted(set(RELEASES) - {"0.4.30", "0.8.0"})  # every other release, once
    assert never_ran(RELEASES, "0.4.30", "0.8.0", runs) == {"0.6.0": "error: no environment for jax 0.6.0"}
    # a change that comes and goes inside a window whose ends agree: seen, and undone at 0.6.0
    probe, apart, _ = _outputs_by_release({"0.4.30": 0, "0.5.0": 1, "0.6.0": 0})
    found, _ = transitions(RELEASES, "0.4.30", "0.8.0", probe, apart, "outputs")
    assert [(t["last_good"], t["first_bad"], t.get("undone")) for t in changes_of(found)] == [
        ("0.4.34", "0.5.0", "0.6.0")]
    assert [t.get("undoes") for t in found] == [None, "0.5.0"]  # the undoing: not a change of its own
    # a window longer than the bound: 4 releases run spread over it, each pair that differs searched by its ends;
    # the change that came and went between two releases run is not seen, and the releases never run are named
    probe, apart, asked = _outputs_by_release({"0.4.30": 0, "0.4.33": 1, "0.4.34": 0, "0.7.2": 3})
    found, runs = transitions(RELEASES, "0.4.30", "0.8.0", probe, apart, "outputs", most=4)
    assert asked[:4] == ["0.4.30", "0.4.34", "0.6.0", "0.8.0"]
    assert [(t["last_good"], t["first_bad"]) for t in changes_of(found)] == [("0.7.0", "0.7.2")]
    missed = never_ran(RELEASES, "0.4.30", "0.8.0", runs)
    assert {"0.4.31", "0.4.33"} <= set(missed) and "0.7.2" not in missed
    (line,) = never_lines({"frozen": missed, "retrace": missed}, most=4)
    assert line["line"].startswith("never ran (frozen and retraced): 0.4.31, 0.4.33") and "more releases than the 4" \
        in line["line"]


def _timed_by_release(times: dict[str, float]):
    """A timed probe: the releases asked for timed together in 6 paired rounds of 10 steps (a group id shared by the
    call's runs, a few percent of noise), each taking `times`' value from the release it starts at on (ms); every
    call measures anew. The calls, in order."""
    import numpy as np

    calls: list[list[str]] = []

    def probe(versions):
        calls.append(list(versions))
        rng = np.random.default_rng(len(calls))
        runs = []
        for v in versions:
            start = max((s for s in times if RELEASES.index(s) <= RELEASES.index(v)), key=RELEASES.index)
            samples = (times[start] * 1e6 * np.exp(0.02 * rng.standard_normal(60))).astype(int).tolist()
            runs.append({"requested": v, "status": "ok", "reason": "", "run_id": f"{len(calls)}-{v}",
                         "timing": {"samples_ns": samples, "steps": [1] * 60, "rounds": [10] * 6,
                                    "group": f"g{len(calls)}"}})
        return runs

    return probe, calls


def test_a_time_that_moves_more_than_once_is_searched_until_each_slowdown_stands_alone():
    """#56: a time bisection's probes beside the good end show where the time moved besides its own change: a
    release classed bad whose time lies below the bad end's (slower at 0.4.33, slower again at 0.5.1), or one
    classed good that is settled slower than the good end (slower at 0.5.0, back at 0.6.0, slower again at
    0.7.0); each such sub-window is searched by its ends timed together until each slowdown is a pair of
    neighbouring releases, confirmed anew; time that moves once is one change, with no probe more."""
    from reprobundle.investigate.search.bisection import bisect
    from reprobundle.investigate.search.window_changes import split, time_windows

    def search(times):
        probe, calls = _timed_by_release(times)
        result = bisect(RELEASES, "0.4.30", "0.8.0", probe)
        before = len(calls)
        changes = split(result, RELEASES, probe, lambda a, b: "same", None, (probe, probe))
        return result, changes, calls[before:]

    # stacked: 4x at 0.4.33 (beyond half-way to the bad end's 9x: classed bad), 9x from 0.5.1
    result, changes, asked = search({"0.4.30": 1.0, "0.4.33": 4.0, "0.5.1": 9.0})
    assert (result.criterion, result.last_good, result.first_bad) == ("time", "0.4.31", "0.4.33")
    assert time_windows(result)  # a probe classed bad below the bad end's time
    assert [(c.last_good, c.first_bad) for c in changes] == [("0.4.31", "0.4.33"), ("0.5.0", "0.5.1")]
    second = changes[1]
    assert second.criterion == "time" and second.confirmation["confirmed"] and second.answer_id is None
    assert second.evidence["0.5.1"].startswith("2.2") and "vs jax 0.5.0 timed beside it" in second.evidence["0.5.1"]
    assert second.confirm_runs and asked[-1] == ["0.5.0", "0.5.1"]  # its confirmation: a measurement of its own
    assert changes[0] is result and result.confirmation["confirmed"]
    # not monotone: 1.5x at 0.5.0 (0.5.1, probed first, is short of half-way to 9x: classed good, yet settled
    # slower than the good end), back at 0.6.0, 9x from 0.7.0
    result, changes, _ = search({"0.4.30": 1.0, "0.5.0": 1.5, "0.6.0": 1.0, "0.7.0": 9.0})
    assert (result.last_good, result.first_bad) == ("0.6.0", "0.7.0") and result.classes["0.5.1"] == "good"
    assert time_windows(result) == [("0.4.30", "0.5.1")]
    assert [(c.last_good, c.first_bad) for c in changes] == [("0.6.0", "0.7.0"), ("0.4.34", "0.5.0")]
    assert changes[1].confirmation["confirmed"] and 1.3 < changes[1].confirmation["ratio"] < 1.7
    from reprobundle.investigate.search.window_changes import ranked

    assert ranked(changes[::-1]) == changes  # the slowdowns the largest first: 9x, then the 1.5x 0.6.0 undid
    # --max-time spent before the sub-windows were searched: the bisection's own change, the rest said unfinished
    from reprobundle.errors import TimeSpentError

    probe, _ = _timed_by_release({"0.4.30": 1.0, "0.4.33": 4.0, "0.5.1": 9.0})
    result = bisect(RELEASES, "0.4.30", "0.8.0", probe)

    def spent(versions):
        raise TimeSpentError("--max-time 60 s spent")

    assert split(result, RELEASES, probe, lambda a, b: "same", None, (spent, spent)) == [result]
    assert result.unfinished.startswith("--max-time 60 s spent: the time moved again between jax ")
    # once: one change, nothing more timed
    result, changes, asked = search({"0.4.30": 1.0, "0.5.0": 4.0})
    assert changes == [result] and asked == [] and time_windows(result) == []


@pytest.fixture(scope="module")
def two_changes(tmp_path_factory):
    """tests/programs/retrace/rng_chaos.py investigated from 0.4.38 to 0.5.1 by outputs: its retraced outputs
    change beyond the tolerance at 0.5.0 (threefry, JAX's lowering) and again at 0.5.1 (the compiler's last bits,
    carried beyond the tolerance by a logistic map). (the store, the Investigation)"""
    folder = tmp_path_factory.mktemp("changes")
    store = folder / "store"
    api.pack_script(str(PROGRAMS / "rng_chaos.py"), name="rch", store=str(store), **quick.PACK)
    # by outputs: the question is the outputs' two changes (the frozen module's time, which a machine may or may not
    # settle as slower at 0.5.1, is test_a_slowdown_and_a_later_change_of_bits's; here it would cost minutes)
    out = api.investigate("rch", "0.4.38", "0.5.1", store=str(store), by="outputs",
                          issue_path=folder / "rch-issue.md")
    return store, out


@pytest.mark.crossversion
def test_outputs_that_change_at_two_releases_are_two_changes_each_answered_whole(two_changes):
    store, out = two_changes
    registry = api.open_registry(str(store))
    answers = registry.answers(registry.resolve("rch").ref.bundle_id)
    bisections = [a for a in answers if a["kind"] == "bisection"]
    head = [a for a in bisections if a["answer_id"] == out.steps[0].stored][0]["answer"]  # investigate's
    # the outputs' two changes first (a slowdown of the frozen module the machine may settle too is ranked after)
    outputs = [c for c in head["changes"] if c["kind"] == "outputs"]
    assert head["changes"] == outputs
    assert [(c["criterion"], c["last_good"], c["first_bad"], c["mode"]) for c in outputs] == [
        ("outputs vs good", "0.4.38", "0.5.0", "retrace"), ("outputs vs good", "0.5.0", "0.5.1", "retrace")]
    # the draw: the frozen module computes the same numbers; the column sum's bits: the frozen module shows them
    assert outputs[0]["layer"]["layer"] == "lowering"
    assert outputs[1]["layer"]["layer"] in ("compiler", "both")
    # each change answered whole: explain at its own boundary (its answer stored), its first bad commit's step,
    # the newest release beside its own last good one
    steps = {s.name: s for s in out.steps}
    names = [s.name for s in out.steps]
    # the headline's chain and its report first (#64), then the rest of its window, the later change's chain and
    # the body written again
    assert names == ["bisect", "explain", "commits", "minimize", "newest", "issue", "search outputs (retraced)",
                     "explain 0.5.1 (outputs)", "commits 0.5.1 (outputs)", "newest 0.5.1 (outputs)",
                     "issue 0.5.1 (outputs)", "run every release once"]
    # the headline's body was written before the rest of its window was searched: the second change's search and
    # each of its probes started after it (the steps' recorded starts, the body's written time)
    rest = steps["search outputs (retraced)"]
    assert out.report_written_s is not None and out.left_at_report == [
        "other outputs changes between 0.4.38 and 0.5.1 (retraced)", "every release between 0.4.38 and 0.5.1 run once"]
    assert steps["issue"].started_s < out.report_written_s <= rest.started_s
    # the three releases of the window each ran once already (the survey's ends, the bisection's 0.5.0), untimed: the
    # rest of the window runs none again
    assert rest.probes == [] and rest.answer.startswith("outputs changed at 0.5.1 (last good 0.5.0")
    assert [w["after"] for w in out.written][-3:] == ["newest", "newest 0.5.1 (outputs)", "run every release once"]
    assert steps["explain"].status == steps["explain 0.5.1 (outputs)"].status == "answered"
    assert "--jax 0.5.0 --jax 0.5.1" in steps["explain 0.5.1 (outputs)"].command
    explained = {(a["answer"]["baseline"].split()[0], a["answer"]["candidate"].split()[0]) for a in answers
                 if a["kind"] == "explanation"}
    assert explained == {("0.4.38", "0.5.0"), ("0.5.0", "0.5.1")}
    assert "threefry" in steps["explain"].answer  # the headline's own cause, not the other change's
    own = {a["answer_id"]: a["answer"] for a in bisections}
    second = own[head["changes"][1]["answer_id"]]  # the second change's own answer, for bisect-commits to go on from
    assert (second["last_good"], second["first_bad"]) == ("0.5.0", "0.5.1")
    assert head["also"] and head["also"][0]["first_bad"] == "0.5.1"  # readers of older answers still see it


@pytest.mark.crossversion
def test_the_first_screen_lists_the_changes_in_one_table_and_the_title_names_the_function(two_changes):
    import json

    from cli_runner import cli
    from markdown_it import MarkdownIt

    store, _ = two_changes
    code, out, err = cli("issue", "rch", "--json", store=store)
    assert code == 0, err
    data = json.loads(out)
    # the title: the headline's kind, the JAX function whose lowering changed (the draw's line), not the bundle's `f`
    assert data["title"].startswith("`jax.random.normal` gives other values from jax 0.5.0"), data["title"]
    assert [(r["release"], r["kind"], r["layer"]) for r in data["changes"]][:1] == [
        ("0.5.0", "outputs", "JAX's lowering")]
    outputs = [r for r in data["changes"] if r["kind"] == "outputs"]  # (a frozen slowdown the machine settles: after)
    assert [r["release"] for r in data["changes"][:2]] == ["0.5.0", "0.5.1"] and data["changes"][:2] == outputs
    assert all(" of 64 elements of output " in r["how_much"] for r in outputs)  # one figure each
    assert data["changes"][0]["cause"] == "the default of jax_threefry_partitionable changed"  # its own explain
    body = data["body"]
    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(body)
    lines = body.splitlines()
    table = next(i for i, line in enumerate(lines) if line.startswith("| jax | kind | how much |"))
    assert table < 30 and lines[table + 2].startswith("| 0.5.0 (last good 0.4.38) | outputs |")
    assert lines[table + 3].startswith("| 0.5.1 (last good 0.5.0) | outputs |")
    headings = [tokens[i + 1] for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert headings and all("\\`" not in h.content for h in headings)  # code spans, never escaped backticks
    assert any(c.type == "code_inline" and c.content == "jax.random.normal" for c in headings[0].children or [])
    pairs = [line for line in lines if line.startswith("- **Expected**")]
    assert len(pairs) == len(set(pairs))  # no pair said twice


def test_an_answer_from_before_the_list_of_changes_reads_as_its_headline_alone():
    from reprobundle.investigate.report.change_rows import window_changes

    old = {"answer": {"criterion": "bits", "first_bad": "0.5.1", "last_good": "0.5.0", "mode": "frozen",
                      "layer": {"layer": "compiler"}, "also": [{"criterion": "time", "first_bad": "0.4.33"}]}}
    (only,) = window_changes(old)
    assert (only["criterion"], only["last_good"], only["first_bad"]) == ("bits", "0.5.0", "0.5.1")
    assert window_changes({"answer": {"first_bad": "0.5.0", "last_good": "0.5.0"}}) == []  # no boundary
    listed = {"answer": {**old["answer"], "changes": [{"criterion": "time", "first_bad": "0.4.33",
                                                       "last_good": "0.4.31"}, "not a map", {"first_bad": "0.5.1"}]}}
    assert [c["first_bad"] for c in window_changes(listed)] == ["0.4.33"]  # a stranger's entries kept only whole


def test_a_workaround_that_reaches_later_releases_never_reads_as_fixed_there():
    from reprobundle.render.change_table import reach_text

    rows = [{"release": "0.4.35", "result": "restores", "text": "0.4.35: restores (1.00x of 0.4.31's time)"},
            {"release": "0.5.0", "result": "partly", "text": "0.5.0: helps partly"},
            {"release": "0.6.0", "result": "gone", "text": "0.6.0: the flag is gone"},
            {"release": "0.7.2", "result": "gone", "text": "0.7.2: the flag is gone"}]
    said = reach_text({"releases": rows, "text": "; ".join(r["text"] for r in rows)})
    assert said == ("the workaround still works on 0.4.35; it helps partly on 0.5.0; no longer supported from 0.6.0 "
                    "(the setting is gone there)")
    assert "0.4.35: restores" not in said


def test_bisect_json_lists_every_change_the_headline_first():
    from reprobundle.investigate.search.bisection import BisectResult
    from reprobundle.render.change_table import changes_data

    second = BisectResult("0.4.30", "0.8.0", "bits", first_bad="0.7.0", last_good="0.6.0", mode="frozen",
                          answer_id="20261206T000000-00000000")
    head = BisectResult("0.4.30", "0.8.0", "outputs vs good", first_bad="0.5.0", last_good="0.4.38", mode="retrace",
                        changes=[second])
    listed = changes_data(head)
    assert [(c["kind"], c["first_bad"], c["mode"], c["answer_id"]) for c in listed] == [
        ("outputs", "0.5.0", "retrace", None), ("bits", "0.7.0", "frozen", "20261206T000000-00000000")]
    assert changes_data(second) == []  # one change: the answer itself


def test_the_first_screen_renders_as_written_in_a_markdown_parser():
    """#63: the "**N changes between ...**" line after a bullet (the documented change) is a paragraph of its own,
    not the bullet's text run on (a blank line between); a commit title's "(#2496)", another repository's pull
    request, is code (GitHub links a bare #N to this tracker's issue N) and the pull request the commit's merge line
    names is written with its repository; a change of bits within the tolerance is said so in its row."""
    from markdown_it import MarkdownIt

    from reprobundle.render.issue import commit_title_md, first_screen

    rows = [{"release": "0.4.36", "last_good": "0.4.35", "kind": "outputs", "how_much": "3 of 3 elements of output 0",
             "layer": "lowering and XLA", "function": "jax.scipy.special.gamma", "commit": "0123456789",
             "cause": None, "intended": "documented in the 0.4.36 release notes: NaN for negative integers",
             "newest": None},
            {"release": "0.4.36", "last_good": "0.4.35", "kind": "bits", "within": True, "layer": "XLA (compiler)",
             "how_much": "12 of 64 elements of output 0, up to 4 ULP", "function": None, "commit": None,
             "cause": None, "intended": None, "newest": None}]
    data = {"title": "`jax.scipy.special.gamma` gives other values from jax 0.4.36", "changes": rows,
            "documented_change": {"note": "documented in the 0.4.36 release notes: NaN for negative integers"},
            "bisection": {"answer": {"good": "0.4.30", "bad": "0.5.0"}}, "judged": {}, "newest": {},
            "script": {"text": None, "kind": "zip", "why": "too long"}, "zip": "gamma-1.zip"}
    text = "\n".join(first_screen(data))
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    strong = [i for i, t in enumerate(tokens) if t.type == "inline" and t.content.startswith("**2 changes between")]
    assert strong and tokens[strong[0] - 1].type == "paragraph_open" and tokens[strong[0] - 1].level == 0, text
    cells = [t.content for t in tokens if t.type == "inline"]
    assert "last bits, within the tolerance" in cells and "12 of 64 elements of output 0, up to 4 ULP" in cells
    title = commit_title_md({"sha": "a7b01146f2" + "0" * 30, "title": "[stablehlo] lower acos to chlo (#2496)",
                             "pr": 2496}, "https://github.com/jax-ml/jax")
    inline = MarkdownIt("commonmark").parseInline(f"**{title}")[0].children
    assert [c.content for c in inline if c.type == "code_inline"] == ["#2496"]
    assert not any("#2496" in c.content for c in inline if c.type == "text")  # never a bare #N
    merged = commit_title_md({"sha": "a7b01146f2", "title": "Lower acos to chlo", "pr": 31234},
                             "https://github.com/jax-ml/jax")
    assert merged.endswith("Lower acos to chlo (jax-ml/jax#31234)")


@pytest.mark.crossversion
def test_a_change_of_bits_undone_two_releases_later_is_listed(tmp_path):
    """#64, on real releases: tests/programs/retrace/gated_cumsum.py's last bits change at 0.4.34 and are 0.4.33's
    again at 0.4.36, so the window's ends agree bit for bit and a search by ends sees nothing; every release of the
    window runs once, untimed, so the change is found, between neighbouring releases, and said undone."""
    from reprobundle.investigate.answers import BISECTION

    store = tmp_path / "store"
    api.pack_script(str(PROGRAMS / "gated_cumsum.py"), name="gate", store=str(store), **quick.PACK)
    result, _ = api.bisect("gate", "0.4.33", "0.4.36", store=str(store), mode="retrace", by="bits", layer=False)
    assert (result.criterion, result.last_good, result.first_bad, result.undone) == ("bits", "0.4.33", "0.4.34",
                                                                                     "0.4.36")
    assert result.changes == [] and result.not_listed == []  # one change; every release of the window ran
    assert "undone at jax 0.4.36, whose outputs are jax 0.4.33's again" in result.why
    registry = api.open_registry(str(store))
    runs = registry.runs(registry.resolve("gate").ref.bundle_id)
    ran = sorted(r["requested"] for r in runs if (r.get("contender") or {}).get("mode") == "retrace")
    assert ran == ["0.4.33", "0.4.34", "0.4.35", "0.4.36"]  # each release once, untimed
    (answer,) = [a["answer"] for a in registry.answers(registry.resolve("gate").ref.bundle_id) if a["kind"] == BISECTION]
    assert (answer["first_bad"], answer["undone"]) == ("0.4.34", "0.4.36")
