"""#56 on real releases: a program slower at one release whose JAX lowering of `jnp.arccos` changes its last bits at
a later one gets both chains from one `investigate --retrace --jax-repo REPO` (tests/programs/retrace/
acos_after_rolls.py from 0.4.34 to 0.4.36; the repository made here from 0.4.35's and 0.4.36's JAX packages by
tests/jax_history.make_acos_history): the slowdown the headline, the later change's first bad commit found and on
its row of the issue's table; asked again, the stored bisection brings back every change."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import quick

from reprobundle import api

PROGRAMS = Path(__file__).parent / "programs" / "retrace"
HEADLINE_STEPS = ["bisect", "explain", "commits", "minimize", "newest", "issue"]  # the headline's chain, its report
TIME_REST = "search time (retraced)"  # the rest of the slowdown's window, where its probes showed the time move twice
LATER_STEPS = ["explain 0.4.36 (bits)", "commits 0.4.36 (bits)", "newest 0.4.36 (bits)"]  # the later change's


@dataclass
class Stopped:
    """An investigation stopped by Ctrl-C once its report was written: its exit code, its stderr, and the issue body
    as it was when the signal was sent."""

    code: int
    err: str
    body: str


def interrupted_after_the_report(args: list, folder: Path) -> Stopped:
    """`reprobundle ARGS` in a process of its own, SIGINT to its group (a terminal's Ctrl-C) as soon as its progress
    says the report was written (the next change's search has begun)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    # SIGINT handled as a terminal session does (a test runner started in the background may ignore it, and an
    # ignored signal stays ignored across exec; a handled one reverts to the default, which Python then handles)
    launcher = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                "from reprobundle.cli import run; run()")
    env = {**os.environ, "REPROBUNDLE_CACHE_DIR": str(folder / "cache")}
    proc = subprocess.Popen([sys.executable, "-c", launcher, *map(str, args)], start_new_session=True, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines, body, deadline = [], "", time.monotonic() + 900
    assert proc.stderr is not None
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        lines.append(line)
        if "report written in" in line or not line:
            break
    issue = Path(args[args.index("--issue") + 1])
    body = issue.read_text() if issue.exists() else ""
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    return Stopped(proc.returncode, "".join(lines) + err, body)


@pytest.fixture(scope="module")
def slower_then_acos(tmp_path_factory):
    """tests/programs/retrace/acos_after_rolls.py investigated from 0.4.34 to 0.4.36 retraced, with a JAX repository
    made here (tests/jax_history.make_acos_history: 0.4.35's package, then 0.4.36's in four commits, the third the
    one that lowers acos to chlo.acos): 12 laps of its loop from 0.4.35 on where 0.4.34 ran one (slower on any
    machine: JAX's lowering, the loop's trip count), then `jnp.arccos`, whose lowering changed at 0.4.36 (its last
    bits). Interrupted by Ctrl-C once the headline's report is written, then run again to its end. (the store, the
    repository's commits, the second call's --json answer, the issue file, the interrupted call)"""
    from cli_runner import cli
    from jax_history import make_acos_history, site_jax

    folder = tmp_path_factory.mktemp("chains")
    manager = api.environment_manager()
    repo = folder / "jax"
    shas = make_acos_history(repo, site_jax(manager.ensure("0.4.35")), site_jax(manager.ensure("0.4.36")))
    store = folder / "store"
    api.pack_script(str(PROGRAMS / "acos_after_rolls.py"), name="acr", store=str(store), **quick.PACK)
    issue = folder / "acr-issue.md"
    args = ["investigate", "acr", "--good", "0.4.34", "--bad", "0.4.36", "--retrace", "--jax-repo", repo, "--issue",
            issue]
    stopped = interrupted_after_the_report([*args, "--store", store], folder)
    code, out, err = cli(*args, "--json", store=store)
    assert code == 0, err
    found = json.loads(out)
    print({s["name"]: (s["status"], s["spent_s"]) for s in found["steps"]})  # where a slow run spent it
    return store, shas, found, issue, stopped


@pytest.mark.crossversion
def test_a_slowdown_and_a_later_lowering_change_of_bits_each_get_their_chain_and_the_later_its_first_bad_commit(
        slower_then_acos):
    """#56: the headline is the slowdown (confirmed, JAX's lowering: a time change no commit bisection compares);
    the later change, arccos' last bits at 0.4.36, gets the whole chain: its layer, explain at its own boundary, its
    first bad commit in the repository made here (the commit that lowers acos to chlo.acos, with its lowering against
    its parent), the newest release; the issue's table shows that commit on the change's row."""
    from jax_history import ACOS_TITLES

    store, shas, found, issue, _ = slower_then_acos
    steps = {s["name"]: s for s in found["steps"]}
    names = [s["name"] for s in found["steps"]]
    if TIME_REST in names:  # the slowdown's probes showed the time moving at 0.4.36 too (a machine may or may not
        # resolve that): the rest of its window searched, a slowdown there confirmed anew, none stood
        assert "changed at" not in steps[TIME_REST]["answer"], steps[TIME_REST]
        names.remove(TIME_REST)
    assert names == [*HEADLINE_STEPS, "search bits (retraced)", *LATER_STEPS, "issue 0.4.36 (bits)",
                     "run every release once"]
    assert found["first_bad"] == "0.4.35" and found["layer"] == "lowering" and found["unsettled"] is None
    assert steps["commits"]["status"] == "skipped" and "judged by time" in steps["commits"]["answer"]
    later = steps["commits 0.4.36 (bits)"]
    assert later["status"] == "answered" and f"first bad commit: {shas[2][:10]} {ACOS_TITLES[2]}" in later["answer"]
    assert "--good 0.4.35 --bad 0.4.36" in later["command"]
    assert steps["explain"]["status"] == "stored"  # answered before Ctrl-C; the resumed call reused it
    assert {steps[n]["status"] for n in ("explain 0.4.36 (bits)", "newest 0.4.36 (bits)")} == {"answered"}
    registry = api.open_registry(str(store))
    answers = registry.answers(registry.resolve("acr").ref.bundle_id)
    by_id = {a["answer_id"]: a for a in answers}
    head = by_id[steps["bisect"]["stored"]]["answer"]
    assert [(c["criterion"], c["last_good"], c["first_bad"], c["mode"]) for c in head["changes"]] == [
        ("time", "0.4.34", "0.4.35", "retrace"), ("bits", "0.4.35", "0.4.36", "retrace")]
    assert head["confirmation"]["confirmed"] and head["confirmation"]["run_ids"]
    assert [c["layer"]["layer"] for c in head["changes"]] == ["lowering", "lowering"]
    # the later change's commit bisection: its own window, the commits over the jaxlib each accepts
    commits = by_id[later["stored"]]["answer"]
    assert (commits["good"], commits["bad"], commits["commits"]) == ("0.4.35", "0.4.36", 4)
    assert commits["ends"]["agree"] and commits["first_bad"]["sha"] == shas[2] and commits["last_good"] == shas[1]
    assert commits["criterion"] == "bits" and commits["lowering"]["changed"]
    assert "acos_after_rolls.py:" in commits["lowering"]["text"] and commits["lowering"]["parent"] == shas[1]
    assert commits["tested"][shas[1]]["over"] == "jaxlib 0.4.36 (jax 0.4.36's environment)"
    assert commits["ends"]["first"]["over"] == "jaxlib 0.4.35 (jax 0.4.35's environment)"  # a1: its minimum is older
    # the issue: titled by the headline's kind, the table lists both, the commit on the later change's row
    from reprobundle.investigate.report.issue_facts import issue_data
    data = issue_data("acr", store=str(store))
    assert "slower from jax 0.4.35" in data["title"] and "gives other" not in data["title"], data["title"]
    rows = [(r["release"], r["kind"], r["layer"], r["commit"], r["function"]) for r in data["changes"]]
    assert rows == [("0.4.35", "slower", "JAX's lowering", None, rows[0][4]),
                    ("0.4.36", "bits", "JAX's lowering", shas[2][:10], "jax.numpy.arccos")], rows
    assert data["changes"][0]["how_much"].endswith("]") and "x [" in data["changes"][0]["how_much"]  # one ratio
    lines = issue.read_text().splitlines()  # as investigate wrote it
    table = next(i for i, line in enumerate(lines) if line.startswith("| jax | kind | how much |"))
    assert table < 30 and "| slower |" in lines[table + 2]
    assert lines[table + 3].startswith("| 0.4.36 (last good 0.4.35) | last bits, within the tolerance | ") and \
        f"`{shas[2][:10]}`" in lines[table + 3]


@pytest.mark.crossversion
def test_an_investigation_asked_again_reuses_every_change_not_the_headline_alone(slower_then_acos, tmp_path):
    """#56: the stored bisection, reused by a second `investigate` of the same question, brings back its whole list
    of changes (each from its own stored answer): every change's steps are there again, each answer the stored
    one, nothing replayed."""
    from cli_runner import cli

    store, shas, first, _, _ = slower_then_acos
    code, out, err = cli("investigate", "acr", "--good", "0.4.34", "--bad", "0.4.36", "--retrace", "--jax-repo",
                         store.parent / "jax", "--issue", tmp_path / "again.md", "--json", store=store)
    assert code == 0, err
    again = {s["name"]: s for s in json.loads(out)["steps"]}
    assert list(again) == [*HEADLINE_STEPS, *LATER_STEPS]  # nothing left to search, nothing new to write again
    assert {n: s["status"] for n, s in again.items()} == {
        "bisect": "stored", "explain": "stored", "commits": "skipped", "explain 0.4.36 (bits)": "stored",
        "commits 0.4.36 (bits)": "stored", "minimize": "skipped", "newest": "stored", "newest 0.4.36 (bits)": "stored",
        "issue": "answered"}
    before = {s["name"]: s for s in first["steps"]}
    assert all(again[n]["stored"] == before[n]["stored"] for n in ("bisect", "explain 0.4.36 (bits)",
                                                                   "commits 0.4.36 (bits)"))
    assert shas[2][:10] in again["commits 0.4.36 (bits)"]["answer"]
    assert f"`{shas[2][:10]}`" in (tmp_path / "again.md").read_text()


@pytest.mark.crossversion
def test_the_headline_is_reported_before_the_next_change_is_searched_and_ctrl_c_then_keeps_it(slower_then_acos):
    """#64: the slowdown's whole chain and its issue body come first; only then is the bits change searched. Ctrl-C
    once the report was written leaves that body (atomically written: whole) and the headline's stored answer,
    `unfinished` with what was left; the next call takes the headline as it is (no probe, no timing again) and
    searches only the bits, its first probe after its own report's body was written, and writes the body again
    with the second row."""
    store, shas, found, issue, stopped = slower_then_acos
    # interrupted in the second search: the body of all that was answered, the headline's alone. Where the
    # slowdown's probes showed the time moving at 0.4.36 too, the second search is the rest of its window (a Ctrl-C
    # inside it stops the command as inside any other: the next call searches it again)
    rest = ["other time changes between 0.4.34 and 0.4.36 (retraced)"] * ("still to search: other time" in stopped.err)
    left = [*rest, "bits (retraced)", "every release between 0.4.34 and 0.4.36 run once"]
    assert stopped.code == 130 and stopped.err.rstrip().endswith("interrupted"), stopped.err[-2000:]
    # what stays is said, with the body's file and that the same command goes on (it does, below)
    kept = next(line.split("] ", 1)[1] for line in stopped.err.splitlines() if "] investigate: interrupted" in line)
    assert kept.startswith("investigate: interrupted: kept the answers of bisect, explain, ") and kept.endswith(
        f"; the issue body as last written: {issue}; the same command again goes on from them"), kept
    assert "report written in" in stopped.err and f"; still to search: {', '.join(left)}\n" in stopped.err
    assert "slower from jax 0.4.35" in stopped.body and "0.4.36 (last good 0.4.35)" not in stopped.body
    registry = api.open_registry(str(store))
    bundle = registry.resolve("acr")
    bisections = [a for a in registry.answers(bundle.ref.bundle_id) if a["kind"] == "bisection" and a.get("reuse")]
    staged = bisections[0]["answer"]  # the interrupted call's: the headline, and what it had not searched yet
    assert (staged["criterion"], staged["first_bad"], staged["cut_at"]) == ("time", "0.4.35",
                                                                            "split" if rest else "kinds")
    assert staged["unfinished"].endswith(f"still to search: {', '.join(left)}") and "changes" not in staged
    assert [(s["criterion"], s["mode"], s.get("unfinished")) for s in staged["set_aside"]] == [
        ("bits", "retrace", True)]
    # resumed: the headline taken as stored, the bits searched after this call's own report was written
    steps = {s["name"]: s for s in found["steps"]}
    assert steps["bisect"]["status"] == "stored" and not steps["bisect"]["probes"]
    assert "resumed from the search stored" in steps["bisect"]["answer"], steps["bisect"]["answer"]
    assert found["left_at_report"] == left
    report = steps["issue"]
    assert found["report_written_s"] == pytest.approx(report["started_s"] + report["spent_s"], abs=0.2)
    search = steps["search bits (retraced)"]
    assert search["probes"] and found["report_written_s"] <= search["started_s"] <= search["probes"][0]["at_s"]
    assert not [p for p in search["probes"] if p["what"].split()[0] in ("timed", "confirm", "screen")], \
        search["probes"]  # the slowdown was not timed again
    assert "bits changed at 0.4.36 (last good 0.4.35" in search["answer"]
    # the body written again once the later change was answered: both rows, the headline still first
    assert [w["after"] for w in found["written"]][-2:] == ["newest 0.4.36 (bits)", "run every release once"]
    assert steps["issue 0.4.36 (bits)"]["started_s"] > steps["newest 0.4.36 (bits)"]["started_s"]
    body = issue.read_text()
    assert "slower from jax 0.4.35" in body and f"`{shas[2][:10]}`" in body
    final = [a for a in bisections if a["answer_id"] == steps["bisect"]["stored"]][0]["answer"]
    assert final["unfinished"] is None and final["cut_at"] is None and len(final["changes"]) == 2
    assert final["confirmation"] == staged["confirmation"]  # the headline's own answer, extended


@pytest.mark.crossversion
def test_a_step_that_hangs_is_one_line_and_the_report_and_the_issue_are_still_written(tmp_path):
    """#64 item 5: tests/programs/retrace/hangs_in_explain.py hangs on jax 0.5.0 only under explain's per-pass dump
    (its loop's bound is read when traced), so the bisection answers (its numbers change at 0.5.0: threefry) and
    explain's evidence hangs, for real, until the worker's call limit kills it. The step is one line with the
    release, the phase and the seconds; the chain goes on: the newest release, the report and the issue body."""
    from cli_runner import cli

    store = tmp_path / "store"
    api.pack_script(str(PROGRAMS / "hangs_in_explain.py"), name="hie", store=str(store), **quick.PACK)
    issue, report = tmp_path / "hie-issue.md", tmp_path / "investigation.md"
    code, out, err = cli("investigate", "hie", "--good", "0.4.38", "--bad", "0.5.0", "--retrace", "--by", "outputs",
                         "--issue", issue, "--report", report, "--json", store=store)
    assert code == 0, err
    found = json.loads(out)
    steps = {s["name"]: s for s in found["steps"]}
    assert list(steps) == HEADLINE_STEPS and found["first_bad"] == "0.5.0"
    explain = steps["explain"]
    assert explain["status"] == "failed", explain
    (death,) = explain["failure"]["deaths"]
    assert (death["release"], death["how"], death["phase"], death["times"]) == ("0.5.0", "hung", "execute", 1)
    assert death["seconds"] >= 60  # the call limit: 100 x the reference's call, + 60 s
    assert explain["answer"].startswith(f"jax 0.5.0 hung in 'execute' for {death['seconds']:.0f} s: ")
    assert "the candidate did not run (timeout" in explain["answer"] and explain["spent_s"] >= 60
    # the chain went on: the newest release, the issue body, the report with the failed step's line
    assert steps["newest"]["status"] in ("answered", "skipped") and steps["issue"]["status"] == "answered"
    assert found["report_written_s"] >= explain["started_s"] + explain["spent_s"] and found["left_at_report"] == []
    assert "from jax 0.5.0 (last good 0.4.38" in issue.read_text()
    assert "| explain | failed |" in report.read_text() and "jax 0.5.0 hung in 'execute' for" in report.read_text()


# jax 0.4.36's notes as JAX's tag of a release holds them (the section not yet renamed from "Unreleased", as at
# jax-v0.7.2, whose "Bug fixes" list the randint change and `jax_safer_randint`)
ACOS_NOTES = """## Unreleased

* Changes:
  * Something else entirely.

* Bug fixes
  * {func}`jax.numpy.arccos` is now lowered to `chlo.acos`, whose results are
    more accurate near -1 and 1.
"""


@pytest.mark.crossversion
def test_the_release_notes_of_the_release_a_change_shipped_in_make_its_row_documented(slower_then_acos, tmp_path):
    """#63: the release notes of 0.4.36 (at its tag, still under "Unreleased", the entry under "Bug fixes") name
    `jax.numpy.arccos`, the function the program calls on the line whose lowering changed there: the row of that
    change says documented, with the line; the slowdown's row, which they do not name, says nothing. Without the
    entry, nothing is said."""
    import shutil

    from jax_history import publish_notes

    from reprobundle.investigate.report.issue_facts import issue_data

    store, shas, _, _, _ = slower_then_acos
    repo = tmp_path / "jax"
    shutil.copytree(store.parent / "jax", repo)
    before = issue_data("acr", store=str(store), jax_repo=str(repo))["changes"]
    assert [r["intended"] for r in before] == [None, None]
    publish_notes(repo, "0.4.36", ACOS_NOTES)
    rows = issue_data("acr", store=str(store), jax_repo=str(repo))["changes"]
    assert (rows[1]["release"], rows[1]["function"]) == ("0.4.36", "jax.numpy.arccos")
    assert rows[1]["intended"].startswith("documented in the 0.4.36 release notes"), rows[1]
    assert rows[1]["intended"].endswith(": `jax.numpy.arccos` is now lowered to `chlo.acos`, whose results are more "
                                        "accurate near -1 and 1."), rows[1]
    assert rows[0]["intended"] is None


def test_the_issue_an_investigation_writes_is_its_own_answer_not_the_latest_of_another_window(slower_then_acos,
                                                                                             tmp_path):
    """#63 (`investigate --good 0.6.0 --bad 0.10.2 -o FILE` wrote an issue of another window's record, the latest in
    the store, while its report said its own answer): a bisection of another window (0.4.35..0.4.36 by bits) stored
    after this investigation's; asked again, the investigation reuses its own answer and writes ITS issue (the
    slowdown at 0.4.35 and both its changes), the same answer its --report and --json give. (The module's store
    itself: a copy is another store, whose records are never reused.)"""
    from cli_runner import cli

    store, _, first, _, _ = slower_then_acos
    copy = store
    other = api.bisect("acr", "0.4.35", "0.4.36", store=str(copy), mode="retrace", by="bits", warmup=1, repeat=2,
                       rounds=1)[0]
    assert (other.first_bad, other.criterion) == ("0.4.36", "bits")  # the latest record now: another question's
    issue, report = tmp_path / "issue.md", tmp_path / "report.md"
    code, out, err = cli("investigate", "acr", "--good", "0.4.34", "--bad", "0.4.36", "--retrace", "--jax-repo",
                         store.parent / "jax", "-o", issue, "--report", report, "--json", store=copy)
    assert code == 0, err
    again = json.loads(out)
    steps = {s["name"]: s for s in again["steps"]}
    assert steps["bisect"]["status"] == "stored" and steps["bisect"]["stored"] == first["steps"][0]["stored"]
    assert again["first_bad"] == "0.4.35"
    body = issue.read_text()
    title = body.splitlines()[0]
    assert "slower from jax 0.4.35" in title and "gives other" not in title, title
    assert "**2 changes between jax 0.4.34 and 0.4.36**" in body
    from reprobundle.render.issue import md

    assert md(steps["issue"]["answer"]) in report.read_text()  # the title the report gives is the file's
    assert "slower from jax 0.4.35" in steps["issue"]["answer"]


def test_an_interrupted_investigation_says_what_it_keeps():
    """Ctrl-C (built records): the steps answered, a search stopped and stored unfinished, the body's file; or that
    nothing was answered yet."""
    from reprobundle.investigate.chain import Investigation, Step, kept_line
    from reprobundle.investigate.search.bisection import BisectionInterrupted, BisectResult

    out = Investigation("acr", "0.4.34", "0.4.36")
    assert kept_line(out, None, BisectionInterrupted(None)) == (
        "investigate: interrupted before anything was answered; the same command starts it again")
    out.steps = [Step("bisect", "answered", "first bad release 0.4.35"), Step("explain", "stored", "a flag"),
                 Step("commits", "skipped", "no repository"), Step("minimize", "failed", "hung")]
    stopped = BisectionInterrupted(BisectResult("0.4.34", "0.4.36", "bits", first_bad="0.4.35", last_good="0.4.34"))
    assert kept_line(out, "acr-issue.md", stopped) == (
        "investigate: interrupted: kept the answers of bisect, explain and the search so far, unfinished; the issue "
        "body as last written: acr-issue.md; the same command again goes on from them")
    assert kept_line(out, None, KeyboardInterrupt()) == (
        "investigate: interrupted: kept the answers of bisect, explain; the same command again goes on from them")
