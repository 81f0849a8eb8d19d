"""#56 on real releases: a program slower at one release whose JAX lowering of `jnp.arccos` changes its last bits at
a later one gets both chains from one `investigate --retrace --jax-repo REPO` (tests/programs/retrace/
acos_after_rolls.py from 0.4.34 to 0.4.36; the repository made here from 0.4.35's and 0.4.36's JAX packages by
tests/jax_history.make_acos_history): the slowdown the headline, the later change's first bad commit found and on
its row of the issue's table; asked again, the stored bisection brings back every change."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import quick

from reprobundle import api

PROGRAMS = Path(__file__).parent / "programs" / "retrace"


@pytest.fixture(scope="module")
def slower_then_acos(tmp_path_factory):
    """tests/programs/retrace/acos_after_rolls.py investigated from 0.4.34 to 0.4.36 retraced, with a JAX repository
    made here (tests/jax_history.make_acos_history: 0.4.35's package, then 0.4.36's in four commits, the third the
    one that lowers acos to chlo.acos): 12 laps of its loop from 0.4.35 on where 0.4.34 ran one (slower on any
    machine: JAX's lowering, the loop's trip count), then `jnp.arccos`, whose lowering changed at 0.4.36 (its last
    bits). (the store, the repository's commits, the investigation's --json answer, the issue file)"""
    from cli_runner import cli
    from jax_history import make_acos_history, site_jax

    folder = tmp_path_factory.mktemp("chains")
    manager = api.environment_manager()
    repo = folder / "jax"
    shas = make_acos_history(repo, site_jax(manager.ensure("0.4.35")), site_jax(manager.ensure("0.4.36")))
    store = folder / "store"
    api.pack_script(str(PROGRAMS / "acos_after_rolls.py"), name="acr", store=str(store), **quick.PACK)
    issue = folder / "acr-issue.md"
    code, out, err = cli("investigate", "acr", "--good", "0.4.34", "--bad", "0.4.36", "--retrace", "--jax-repo",
                         repo, "--issue", issue, "--json", store=store)
    assert code == 0, err
    found = json.loads(out)
    print({s["name"]: (s["status"], s["spent_s"]) for s in found["steps"]})  # where a slow run spent it
    return store, shas, found, issue


@pytest.mark.crossversion
def test_a_slowdown_and_a_later_lowering_change_of_bits_each_get_their_chain_and_the_later_its_first_bad_commit(
        slower_then_acos):
    """#56: the headline is the slowdown (confirmed, JAX's lowering: a time change no commit bisection compares);
    the later change, arccos' last bits at 0.4.36, gets the whole chain: its layer, explain at its own boundary, its
    first bad commit in the repository made here (the commit that lowers acos to chlo.acos, with its lowering against
    its parent), the newest release; the issue's table shows that commit on the change's row."""
    from jax_history import ACOS_TITLES

    store, shas, found, issue = slower_then_acos
    steps = {s["name"]: s for s in found["steps"]}
    assert [s["name"] for s in found["steps"]] == [
        "bisect", "explain", "commits", "explain 0.4.36 (bits)", "commits 0.4.36 (bits)", "minimize", "newest",
        "newest 0.4.36 (bits)", "issue"]
    assert found["first_bad"] == "0.4.35" and found["layer"] == "lowering" and found["unsettled"] is None
    assert steps["commits"]["status"] == "skipped" and "judged by time" in steps["commits"]["answer"]
    later = steps["commits 0.4.36 (bits)"]
    assert later["status"] == "answered" and f"first bad commit: {shas[2][:10]} {ACOS_TITLES[2]}" in later["answer"]
    assert "--good 0.4.35 --bad 0.4.36" in later["command"]
    assert {steps[n]["status"] for n in ("explain", "explain 0.4.36 (bits)", "newest 0.4.36 (bits)")} == {"answered"}
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

    store, shas, first, _ = slower_then_acos
    code, out, err = cli("investigate", "acr", "--good", "0.4.34", "--bad", "0.4.36", "--retrace", "--jax-repo",
                         store.parent / "jax", "--issue", tmp_path / "again.md", "--json", store=store)
    assert code == 0, err
    again = {s["name"]: s for s in json.loads(out)["steps"]}
    assert list(again) == [s["name"] for s in first["steps"]]
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
def test_the_issue_an_investigation_writes_is_its_own_answer_not_the_latest_of_another_window(slower_then_acos,
                                                                                             tmp_path):
    """#63 (`investigate --good 0.6.0 --bad 0.10.2 -o FILE` wrote an issue of another window's record, the latest in
    the store, while its report said its own answer): a bisection of another window (0.4.35..0.4.36 by bits) stored
    after this investigation's; asked again, the investigation reuses its own answer and writes ITS issue (the
    slowdown at 0.4.35 and both its changes), the same answer its --report and --json give. (The module's store
    itself: a copy is another store, whose records are never reused.)"""
    from cli_runner import cli

    store, _, first, _ = slower_then_acos
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
