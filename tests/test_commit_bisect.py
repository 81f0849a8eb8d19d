"""The first bad commit (#51): JAX's Python at each commit of a git history, over a released jaxlib, the program
retraced and judged as the release bisection judged it.

The history is real git made here from the cached 0.4.30 and 0.4.31 environments' JAX packages (tests/jax_history.py):
the changes between them split into commits file by file, one of them broken at import. No network."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import quick
from cli_runner import cli
from jax_history import TITLES, XLA_PINS, make_history, retag, site_jax

from reprobundle import api
from reprobundle.envs.env_folders import JaxEnvironment
from reprobundle.envs.jax_commit import ReleasesOver, jaxlib_accepted, pull_request
from reprobundle.envs.versions import version_key
from reprobundle.errors import UsageError
from reprobundle.investigate.search.commit_bisect import commit_label, names_a_release, refusal

PROGRAMS = Path(__file__).parent / "programs" / "retrace"
FORK = "https://github.com/example/jax-fork"


@pytest.fixture(scope="module")
def history(tmp_path_factory):
    """(the repository, its commits' hashes, a store holding `int-floor`: jnp.floor of an int32 array in a loop)."""
    manager = api.environment_manager()
    old, new = site_jax(manager.ensure("0.4.30")), site_jax(manager.ensure("0.4.31"))
    root = tmp_path_factory.mktemp("history")
    repo = root / "jax"
    shas = make_history(repo, old, new)
    subprocess.run(["git", "-C", str(repo), "remote", "add", "origin", FORK + ".git"], check=True)
    store = root / "store"
    api.pack_script(str(PROGRAMS / "int_floor.py"), name="int-floor", store=str(store), **quick.PACK)
    shutil.copytree(store, root / "packed")  # the bundle only: the commit window's own store (`window`)
    return repo, shas, store


NOTES = ("# Change log\n\n## Unreleased\n\n* {func}`jax.numpy.floor` of an integer array now returns the array\n"
         "  unchanged (no round trip through float32).\n* Something else entirely.\n\n## jax 0.4.31 (July 29, 2024)\n\n"
         "* An older entry.\n")
NOTES_TITLE = "Note the floor change in the CHANGELOG"


@pytest.fixture(scope="module")
def window(history):
    """(a copy of the history with a commit on top that adds CHANGELOG.md, whose "## Unreleased" names
    jax.numpy.floor; the commits' hashes, that one last; a store of its own that holds the bundle and no release
    bisection; the answer of its commit window, 0.4.30 to that commit, bisected once)."""
    from jax_history import _commit

    repo, shas, store = history
    notes = store.parent / "jax-notes"
    shutil.copytree(repo, notes)
    (notes / "CHANGELOG.md").write_text(NOTES)
    top = _commit(notes, NOTES_TITLE)
    own = store.parent / "window-store"
    shutil.copytree(store.parent / "packed", own)
    answer = api.bisect_commits("int-floor", "0.4.30", top, store=str(own), jax_repo=str(notes), jobs=1)
    return notes, [*shas, top], own, answer


@pytest.fixture(scope="module")
def release_window(history):
    """The answer of the release window 0.4.30 to 0.4.31, bisected once (its release bisection run first)."""
    repo, _, store = history
    return api.bisect_commits("int-floor", "0.4.30", "0.4.31", store=str(store), jax_repo=str(repo), jobs=1)


@pytest.mark.crossversion
def test_the_commit_that_carries_the_lowering_change_is_found_and_the_broken_one_skipped(history, release_window):
    repo, shas, store = history
    answer = release_window
    assert answer["ends"]["agree"], answer["ends"]["text"]
    # the commits' environments were the bisection's own: none is left behind
    assert not list((api.environment_manager().root / "jax-commits").glob("run-*"))
    assert (answer["good_tag"], answer["bad_tag"], answer["commits"]) == ("jax-v0.4.30", "jax-v0.4.31", 6)
    first = answer["first_bad"]
    assert first["sha"] == shas[2] and first["title"] == TITLES[2] and first["pr"] == 22222
    assert first["author"] == "Test Author <author@example.com>" and first["date"].startswith("2024-07-01")
    assert first["url"] == f"{FORK}/commit/{shas[2]}"  # the repository's own GitHub origin
    assert answer["last_good"] == shas[1] and answer["could_be"] == []
    (skipped,) = answer["skipped"]
    assert skipped["sha"] == shas[3] and skipped["title"] == TITLES[3]
    assert answer["tested"][shas[3]]["class"] == "skip" and "does not work yet" in skipped["why"]
    assert answer["criterion"] == "outputs vs good"
    # its StableHLO against its parent's: the floor (and the converts around it) gone, at the program's line
    assert answer["lowering"]["changed"] and answer["lowering"]["parent"] == shas[1]
    assert "-1 floor at int_floor.py:" in answer["lowering"]["text"]
    # every commit ran over the good release's jaxlib, the oldest released one each accepts
    assert {t["over"] for t in answer["tested"].values()} == {"jaxlib 0.4.30 (jax 0.4.30's environment)"}
    assert answer["xla"]["good"] == XLA_PINS["0.4.30"] and answer["xla"]["bad"] == XLA_PINS["0.4.31"]
    assert answer["xla"]["compare"].endswith(f"/compare/{XLA_PINS['0.4.30']}...{XLA_PINS['0.4.31']}")
    assert answer["probes"] == len(answer["spent"]["probes"]) >= 3
    # stored beside the runs, listed by show; each run records the commit it ran (JAX's jax_build)
    registry, bundle = api.resolve("int-floor", str(store))
    kinds = [a["kind"] for a in registry.answers(bundle.ref.bundle_id)]
    assert kinds.count("bisection") == 1 and kinds.count("commit-bisection") == 1
    builds = {r["environment"]["jax_build"]["commits"].get("jax"): r["environment"]
              for r in registry.runs(bundle.ref.bundle_id) if (r["environment"].get("jax_build") or {}).get("commits")}
    # (its jax/version.py is the 0.4.31 wheel's, which names its release: the commit is in jax_build)
    assert builds[shas[2]]["jax"].startswith("0.4.31") and builds[shas[2]]["jaxlib"] == "0.4.30"
    from reprobundle.render.commits import commit_bisection_text

    text = commit_bisection_text(answer)
    assert "skipped (1, as git bisect skip):" in text and f"{shas[3][:10]} {TITLES[3]}: " in text
    assert f"{FORK}/pull/22222" in text and f"{FORK}/commit/{shas[2]}" in text
    code, out, _ = cli("show", "int-floor", store=store)
    assert code == 0 and f"first bad commit: {shas[2][:10]} {TITLES[2]} (#22222)" in out
    # and the issue's first screen carries it beside the release and the layer
    from reprobundle.investigate.report.issue_facts import issue_data
    from reprobundle.render.issue import first_screen

    screen = "\n".join(first_screen(issue_data("int-floor", store=str(store))))
    assert f"First bad commit: {shas[2][:10]}" in screen and f"{shas[2]}" in screen, screen


@pytest.mark.crossversion
def test_a_change_the_first_bad_commit_documents_is_titled_so_and_its_entry_and_workaround_lead(history,
                                                                                                release_window,
                                                                                                tmp_path):
    """#56: the first bad commit's own diff adds its CHANGELOG.md entry under an older heading (jax 0.4.30's, as
    JAX's bf16 `jnp.arange` entry sits under 0.9.2 though it shipped in 0.10.0): the answer carries it, the issue's
    title says documented change, and its first screen quotes the entry and its workaround, the code as code."""
    from jax_history import WORKAROUND
    from markdown_it import MarkdownIt

    from reprobundle.investigate.report.issue_facts import issue_data
    from reprobundle.render.issue import issue_markdown

    repo, shas, store = history
    notes = release_window["notes"]
    assert notes["commit"] == shas[2] and notes["release"] == "0.4.31"
    assert notes["heading"] == "jax 0.4.30 (June 18, 2024)"  # where jax-v0.4.31's CHANGELOG.md carries it
    assert notes["entry"].startswith("`jax.numpy.floor` of an integer array now returns the array unchanged")
    assert notes["workaround"] == f"To recover the previous behavior, use {WORKAROUND}."
    assert 'it documents the change in CHANGELOG.md (jax 0.4.31\'s notes, under "jax 0.4.30' in release_window["text"]
    data = issue_data("int-floor", store=str(store), jax_repo=str(repo))
    assert data["title"].startswith("documented change in 0.4.31: `jax.numpy.floor` gives other values from jax "
                                    "0.4.31"), \
        data["title"]
    first = "\n".join(issue_markdown(data).splitlines()[:30])
    tokens = MarkdownIt("commonmark").enable("table").parse(first)
    items = [t for t in tokens if t.type == "inline"]
    texts = ["".join(c.content for c in t.children or []) for t in items]
    lead = next(i for i, t in enumerate(texts) if t.startswith("Documented change:"))
    assert lead == 1, texts  # the first line under the title
    assert f"the first bad commit {shas[2][:10]} adds it to CHANGELOG.md (jax 0.4.31's notes under " \
           "\"jax 0.4.30 (June 18, 2024)\")" in texts[lead], texts[lead]
    assert "of an integer array now returns the array unchanged" in texts[lead]
    workaround = next(t for t in items if "".join(c.content for c in t.children).startswith("Workaround"))
    spans = [c.content for c in workaround.children if c.type == "code_inline"]
    assert spans == [WORKAROUND.strip("`")]
    assert "Documented as intended" not in first and first.count("jnp.float32") == 1  # each said once, first
    from reprobundle.render.commits import commit_bisection_text

    assert "its CHANGELOG.md entry (jax 0.4.31's notes, under \"jax 0.4.30 (June 18, 2024)\"): " \
           "`jax.numpy.floor` of an integer array" in " ".join(commit_bisection_text(release_window).split())
    # the table of changes says it intended, from the commit's own entry (no release-notes section names it)
    from reprobundle.investigate.answers import latest_bisection
    from reprobundle.investigate.report.change_rows import change_rows

    registry, bundle = api.resolve("int-floor", str(store))
    answers = registry.answers(bundle.ref.bundle_id)
    (row,) = change_rows(registry, bundle, latest_bisection(answers), answers, [])
    assert row["intended"].startswith("documented in the 0.4.31 release notes: `jax.numpy.floor`"), row
    # an answer stored before answers kept their notes: read from the repository the issue is given
    from reprobundle.bundle.registry import Registry, utc_now

    older = tmp_path / "store"
    shutil.copytree(store, older)
    registry, bundle = api.resolve("int-floor", str(older))
    record = [a for a in registry.answers(bundle.ref.bundle_id) if a["kind"] == "commit-bisection"][-1]
    registry.put_answer({**record, "answer_id": Registry.new_run_id(), "created": utc_now(),
                         "answer": {k: v for k, v in record["answer"].items() if k != "notes"}})
    again = issue_data("int-floor", store=str(older), jax_repo=str(repo))
    assert again["title"] == data["title"] and again["documented_change"] == data["documented_change"]


@pytest.mark.crossversion
def test_endpoints_that_disagree_with_the_releases_say_the_change_came_with_jaxlib(history, tmp_path):
    repo, shas, store = history
    moved = tmp_path / "jax"
    shutil.copytree(repo, moved)
    retag(moved, "jax-v0.4.31", shas[1])  # the "bad" tag's JAX Python lacks the floor change
    code, out, err = cli("bisect-commits", "int-floor", "--good", "0.4.30", "--bad", "0.4.31", "--jax-repo", moved,
                         "--json", store=store)
    assert code == 0, err
    answer = json.loads(out)
    assert not answer["ends"]["agree"] and answer["first_bad"] is None
    assert answer["ends"]["last"]["class"] == "good" and "the change came with jaxlib" in answer["ends"]["text"]
    assert answer["probes"] == 1  # the endpoints only; the stored release bisection was reused


def test_a_compiler_change_or_a_time_criterion_is_never_sent_to_a_commit_bisection():
    compiler = {"criterion": "outputs vs good", "last_good": "0.4.31", "first_bad": "0.4.33",
                "layer": {"layer": "compiler"}}
    assert "XLA (the compiler)" in refusal({"answer": compiler})
    assert refusal({"answer": {**compiler, "layer": {"layer": "lowering"}}}) is None
    assert "judged by time" in refusal({"answer": {**compiler, "layer": {"layer": "lowering"}, "criterion": "time"}})
    undecided = refusal({"answer": {**compiler, "layer": None}})
    assert undecided is not None and "did not find a change in JAX's lowering" in undecided
    assert undecided.endswith("(the layer at its boundary is undecided)") and "None" not in undecided


def test_commit_labels_sort_between_the_releases_in_history_order():
    labels = [commit_label("0.7.1", i, sha) for i, sha in enumerate(["f" * 40, "0" * 40, "a7b01146f2" + "0" * 30])]
    assert sorted(labels + ["0.7.2", "0.7.1"], key=version_key) == ["0.7.1", *labels, "0.7.2"]


def test_a_bad_end_is_a_release_when_it_is_a_version_else_a_commit_of_the_repository():
    assert names_a_release("0.4.31") and names_a_release("v0.4.31") and names_a_release("0.5.0rc1")
    assert not any(names_a_release(c) for c in ("main", "0145058aa", "1234567", "jax-v0.4.31", "HEAD~3"))


def test_the_pull_request_is_read_from_the_message():
    assert pull_request("Merge pull request #31790 from mattjj:hijax-refs\n\nmore") == 31790
    assert pull_request("Fix x\n\nCOPYBARA_INTEGRATE_REVIEW=https://github.com/jax-ml/jax/pull/22334 from a:b") == 22334
    assert pull_request("jnp.floor: integers unchanged (#22222)") == 22222
    assert pull_request("`jax.random.randint`: enable safer_randint by default\n\nPiperOrigin-RevId: 1") is None


def test_a_commit_runs_over_a_released_jaxlib_it_accepts_both_ways_the_ends_first():
    """JAX's check at import, both ways: no older than _minimum_jaxlib_version, no newer than the commit's own
    version (after jax-v0.4.33 the commits read 0.4.32 and refuse jaxlib 0.4.33: they run over 0.4.31's, 0.4.32
    being yanked); where none fits, the whole reason and the way out."""
    def env(v: str) -> JaxEnvironment:
        return JaxEnvironment(v, Path("/x"), "3.11.7", Path(f"/envs/jax-{v}"), None, None, jaxlib_version=v)

    made: list[str] = []

    def ensure(v: str) -> JaxEnvironment:
        made.append(v)
        return env(v)

    assert jaxlib_accepted("0.4.32.dev0+4839b003af12", "0.4.31", "0.4.32")
    assert not jaxlib_accepted("0.4.32", "0.4.31", "0.4.33") and not jaxlib_accepted("0.4.32", "0.4.31", "0.4.30")
    releases = ["0.4.30", "0.4.31", "0.4.33", "0.4.34"]
    good, bad = env("0.4.30"), env("0.4.31")
    choice = ReleasesOver((good, bad), lambda: releases, ensure)
    assert choice.over("0.4.31", "0.4.27")[0] is good and choice.over("0.4.31", None)[0] is good
    assert choice.over("0.4.31", "0.4.31")[0] is bad and not made  # the ends: nothing else made
    patch = ReleasesOver((env("0.4.33"), env("0.4.34")), lambda: releases, ensure, lambda: {"0.4.32": "yanked"})
    over, why = patch.over("0.4.32", "0.4.31")
    assert over is not None and over.jax_version == "0.4.31" and made == ["0.4.31"] and why == ""
    assert patch.over("0.4.32", "0.4.31")[0] is over and made == ["0.4.31"]  # one choice per version
    none, why = patch.over("0.4.32", "0.4.32")
    assert none is None and "imports only over jaxlib 0.4.32 to 0.4.32" in why and "jax 0.4.32 is yanked" in why
    assert "jax 0.4.33's has jaxlib 0.4.33" in why and why.endswith("earlier commit as the bad end (--bad COMMIT)")
    window = ReleasesOver((env("0.4.31"),), lambda: releases, ensure, newest="0.4.31")  # a commit window: no newer
    assert window.over("0.4.33", "0.4.33")[0] is None and window.over("0.4.30", "0.4.30")[0].jax_version == "0.4.30"


def test_a_repository_that_is_not_one_is_refused_with_what_to_give(tmp_path):
    with pytest.raises(UsageError, match="--jax-repo .*: not a git repository"):
        api.bisect_commits("nothing", "0.4.30", "0.4.31", store=str(tmp_path / "store"), jax_repo=str(tmp_path))


def test_investigate_goes_on_to_the_commits_only_for_a_lowering_change_and_a_repository_here(tmp_path):
    from reprobundle.envs.env_config import EnvConfig
    from reprobundle.envs.manager import EnvironmentManager
    from reprobundle.investigate.case import Case
    from reprobundle.investigate.search.bisection import BisectResult
    from reprobundle.investigate.search.commit_search import commit_step

    config = EnvConfig.of(tmp_path / "envs")
    case = Case("int-floor", None, config, EnvironmentManager(config))

    def step(layer: str, **kw) -> dict:
        result = BisectResult("0.4.30", "0.4.31", "outputs vs good", "0.4.31", "0.4.30", layer={"layer": layer})
        return commit_step(result, case, **kw)

    compiler = step("compiler")
    assert compiler["status"] == "skipped" and "XLA (the compiler)" in compiler["answer"]
    lowering = step("lowering")  # no clone in this cache, none given: said how to give one, nothing cloned
    assert lowering["status"] == "skipped" and "--jax-repo" in lowering["answer"]
    assert lowering["command"] == "reprobundle bisect-commits int-floor --good 0.4.30 --bad 0.4.31 --jax-repo PATH"
    assert not (tmp_path / "envs" / "jax-repo.git").exists()


def test_the_xla_window_lists_the_commits_between_the_pins_that_name_a_changed_flag(tmp_path):
    """Item 2: the XLA commits two JAX tags pin, the compare URL, and with an XLA clone the commits in that range
    whose changed lines name a flag whose default changed (`git log -G`), in real git repositories made here."""
    from jax_history import _git

    from reprobundle.envs.jax_commit import open_repo
    from reprobundle.investigate.search.xla_window import xla_window

    xla = tmp_path / "xla"
    xla.mkdir()
    _git(xla, "init", "-q", "-b", "main")
    shas = []
    flag = "xla_cpu_use_thunk_runtime"
    for i, text in enumerate(["base", f"base\n{flag} false", f"base\n{flag} false\nunrelated",
                              f"base\n{flag} true\nunrelated", f"base\n{flag} true\nunrelated\nafter"]):
        (xla / "debug_options_flags.cc").write_text(text + "\n")
        _git(xla, "add", "-A")
        _git(xla, "commit", "-q", "-m", f"xla change {i}")
        shas.append(_git(xla, "rev-parse", "HEAD").strip())
    jax = tmp_path / "jax"
    jax.mkdir()
    _git(jax, "init", "-q", "-b", "main")
    for version, pin, name in (("0.4.31", shas[0], "workspace.bzl"), ("0.4.33", shas[3], "revision.bzl")):
        bzl = jax / "third_party" / "xla" / name
        bzl.parent.mkdir(parents=True, exist_ok=True)
        bzl.write_text(f'# pinned\nXLA_COMMIT = "{pin}"\n')
        _git(jax, "add", "-A")
        _git(jax, "commit", "-q", "-m", f"jax {version}")
        _git(jax, "tag", f"jax-v{version}")
    repo = open_repo(str(jax), tmp_path / "cache")
    changed = {"changed_defaults": [{"kind": "flag", "name": "xla_cpu_use_thunk_runtime", "a": False, "b": True},
                                    {"kind": "option", "name": "jax_something", "a": 1, "b": 2}]}
    alone = xla_window(repo, "jax-v0.4.31", "jax-v0.4.33")
    assert (alone["good"], alone["bad"]) == (shas[0], shas[3]) and alone["touching"] == {}
    assert alone["compare"] == f"https://github.com/openxla/xla/compare/{shas[0]}...{shas[3]}"
    found = xla_window(repo, "jax-v0.4.31", "jax-v0.4.33", str(xla), changed)
    touching = found["touching"]["xla_cpu_use_thunk_runtime"]
    # the commit that added it and the one that flipped its default (newest first); not the unrelated ones
    assert [c["sha"] for c in touching] == [shas[3], shas[1]] and touching[1]["title"] == "xla change 1"
    assert list(found["touching"]) == ["xla_cpu_use_thunk_runtime"]  # flags only: an option is JAX's


def test_a_repository_url_is_cloned_once_into_the_cache_partial_and_found_again(tmp_path):
    from jax_history import _git

    from reprobundle.envs.jax_commit import open_repo

    origin = tmp_path / "origin"
    origin.mkdir()
    _git(origin, "init", "-q", "-b", "main")
    (origin / "jax").mkdir()
    (origin / "jax" / "version.py").write_text('_version = "0.4.31"\n_minimum_jaxlib_version = "0.4.30"\n')
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "jax 0.4.31")
    _git(origin, "tag", "jax-v0.4.31")
    said: list[str] = []
    repo = open_repo(f"file://{origin}", tmp_path / "cache", said.append)
    assert repo.git_dir == tmp_path / "cache" / "jax-repo.git" and said and "cloning" in said[0]
    assert repo.tag_of("0.4.31") == "jax-v0.4.31"
    assert repo.versions_at("jax-v0.4.31") == ("0.4.31", "0.4.30")
    _git(origin, "tag", "jax-v0.4.32")  # a later release: fetched on the next use, not cloned again
    again = open_repo(f"file://{origin}", tmp_path / "cache", said.append)
    assert again.tag_of("0.4.32") == "jax-v0.4.32" and len(said) == 1
    # a branch of a commit window (--bad main) is the origin's as it is now, not as it was cloned
    (origin / "jax" / "new.py").write_text("x = 1\n")
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "a commit after the clone")
    head = _git(origin, "rev-parse", "HEAD").strip()
    assert again.resolve("main") == head and again.resolve(head[:9]) == head and again.resolve("nothing") is None
    with pytest.raises(UsageError, match="has no tag of jax 0.5.0"):
        again.tag_of("0.5.0")


@pytest.mark.crossversion
def test_a_kept_commit_environment_replays_by_path_is_listed_and_removed(history, small_store_template, tmp_path):
    """`envs --add-commit`: JAX at a commit over 0.4.30's cached environment, kept beside the environments (not in
    a bisection's swept folder); `replay --jax PATH` runs it and its record names the commit's version; plain `envs`
    lists it over its release; --remove takes it by version or by path."""
    from small_bundle import copy_of

    repo, shas, _ = history
    store = copy_of(small_store_template, tmp_path / "store")
    version = f"0.4.31.dev0+{shas[2][:12]}"
    add = ["envs", "--add-commit", shas[2][:9], "--over", "0.4.30", "--jax-repo", repo, "--platform", "cpu"]
    cli("envs", "--remove", version)  # one an interrupted run left (the history's hashes are the same each time)
    code, out, err = cli(*add, "--json")
    assert code == 0, err
    (added,) = json.loads(out)
    path = Path(added["path"])
    try:
        assert added["built"] and added["jax"] == version and added["over"] == "0.4.30"
        assert added["commits"] == {"jax": shas[2]} and added["build"] == "cpu"
        assert path.parent == api.environment_manager().root / "jax-commits" / "kept"
        code, out, err = cli("replay", "small", "--jax", path, "--json", store=store)
        assert code == 0, err
        registry, bundle = api.resolve("small", str(store))
        (run,) = [r for r in registry.runs(bundle.ref.bundle_id) if r["requested"] == str(path)]
        assert run["status"] == "ok" and run["environment"]["jax"] == version
        assert run["environment"]["jax_build"]["commits"] == {"jax": shas[2]}
        assert run["environment"]["jaxlib"] == "0.4.30"
        code, out, _ = cli("envs")
        assert code == 0 and f"{version} (commit over 0.4.30)" in out and str(path) in out
        code, out, _ = cli(*add)
        assert code == 0 and f"jax {version} (cpu, Python {added['python']}) was already there" in out
        code, out, _ = cli("envs", "--remove", version)
        assert code == 0 and f"removed jax {version} cpu" in out and not path.exists()
        assert cli(*add)[0] == 0 and path.exists()
        code, out, _ = cli("envs", "--remove", path)
        assert code == 0 and f"removed jax {version} cpu" in out and not path.exists()
        assert api.environment_manager().list()  # the release environments stay
    finally:
        from reprobundle.envs.env_folders import rmtree

        rmtree(path)


def test_a_commit_that_needs_a_newer_jaxlib_than_the_release_is_refused_before_anything_is_built(tmp_path):
    from jax_history import _git

    origin = tmp_path / "jax"
    (origin / "jax").mkdir(parents=True)
    _git(origin, "init", "-q", "-b", "main")
    (origin / "jax" / "version.py").write_text('_version: str = "0.11.0"\n_minimum_jaxlib_version: str = "0.10.2"\n')
    _git(origin, "add", "-A")
    _git(origin, "commit", "-q", "-m", "Raise the minimum jaxlib to 0.10.2")
    code, _, err = cli("envs", "--add-commit", "HEAD", "--over", "0.4.30", "--jax-repo", origin)
    assert code == 2 and "needs jaxlib 0.10.2 or newer" in err and "jax 0.4.30's environment" in err, err
    assert "--over a release whose jaxlib is 0.10.2 or newer" in err
    # both ways: a commit reading an older version than the release's jaxlib (JAX's check at import refuses it)
    (origin / "jax" / "version.py").write_text('_version: str = "0.4.29"\n_minimum_jaxlib_version: str = "0.4.27"\n')
    _git(origin, "commit", "-qam", "Read 0.4.29 again")
    code, _, err = cli("envs", "--add-commit", "HEAD", "--over", "0.4.30", "--jax-repo", origin, "--platform", "cpu")
    assert code == 2 and "reads version 0.4.29, and jax 0.4.30's environment has jaxlib 0.4.30" in err, err
    assert "--over a release whose jaxlib is in jaxlib 0.4.27 to 0.4.29" in " ".join(err.split())
    code, _, err = cli("envs", "--add-commit", "nosuch", "--over", "0.4.30", "--jax-repo", origin)
    assert code == 2 and "has no commit 'nosuch'" in err
    code, _, err = cli("envs", "--over", "0.4.30")
    assert code == 2 and "--add-commit COMMIT needs --over RELEASE" in err


def test_a_commit_as_the_bad_end_finds_the_release_window_first_bad_commit_without_a_release_bisection(window):
    """--bad COMMIT (issue #50: a TPU machine holds one JAX release): the window runs from the good release's tag to
    that commit, its criterion chosen from those ends over the good release's jaxlib, no bad release made."""
    repo, shas, store, answer = window
    assert answer["ends"]["agree"], answer["ends"]["text"]
    assert answer["bad"] == shas[6] and answer["bad_tag"] == shas[6][:10] and answer["commits"] == 7
    assert answer["bad_commit"]["sha"] == shas[6] and answer["bad_commit"]["title"] == NOTES_TITLE
    assert answer["first_bad"]["sha"] == shas[2] and answer["last_good"] == shas[1]
    assert answer["criterion"] == "outputs vs good" and answer["release_answer"] is None and answer["xla"] is None
    assert "JAX's lowering, by construction" in answer["layer"] and "jaxlib 0.4.30" in answer["layer"]
    assert {s["sha"] for s in answer["skipped"]} <= {shas[3]}  # the broken commit, where the search met it
    assert "-1 floor at int_floor.py:" in answer["lowering"]["text"]
    assert {t["over"] for t in answer["tested"].values()} == {"jaxlib 0.4.30 (jax 0.4.30's environment)"}
    assert answer["command"].endswith(f"--good 0.4.30 --bad {shas[6]} --jax-repo {repo}")
    # stored (schema-valid: put_answer checks it), shown, and on the issue's first screen without a release
    # bisection of that window
    code, out, _ = cli("show", "int-floor", store=store)
    assert code == 0 and f"commit bisection jax-v0.4.30..{shas[6][:10]}: first bad commit: {shas[2][:10]}" in out
    from reprobundle.render.commits import commit_bisection_text

    text = commit_bisection_text(answer)
    assert f"to commit {shas[6][:10]} {NOTES_TITLE}" in text and "layer: JAX's lowering, by construction" in text
    from reprobundle.investigate.report.issue_facts import issue_data
    from reprobundle.render.issue import first_screen

    screen = "\n".join(first_screen(issue_data("int-floor", store=str(store))))
    assert f"First bad commit: {shas[2][:10]}" in screen, screen
    assert f"searched from jax 0.4.30 to commit {shas[6][:10]}" in screen, screen


@pytest.mark.crossversion
def test_a_commit_window_issue_has_the_program_as_reproducer_and_quotes_the_coming_release_notes(window, tmp_path):
    """With only a commit window's answer stored: the reproducer is the program (the frozen module is 0.4.30's
    lowering on every JAX), checked against 0.4.30's retraced run among the probes, and it exits 1 on JAX at the
    first bad commit and 0 on 0.4.30; the CHANGELOG's "## Unreleased" at the bad end names the function the program
    calls on the line whose lowering changed; the probes' runs are named by their JAX, not by a temporary path."""
    from reprobundle.investigate.report.issue_facts import issue_data
    from reprobundle.render.issue import issue_markdown

    repo, shas, store, _ = window
    data = issue_data("int-floor", store=str(store), jax_repo=str(repo))
    judged, bad = data["judged"], f"0.4.31.dev0+{shas[2][:12]}"
    assert (judged["reproducer"], judged["commit"], judged["good"], judged["bad"]) == ("program", shas[2], "0.4.30",
                                                                                       bad)
    body = issue_markdown(data).replace("\\", "")  # Markdown's escapes
    assert f"exits 1 on jax {bad} (JAX at the first bad commit {shas[2][:10]}) and 0 on jax 0.4.30" in body
    # the first bad commit adds its own CHANGELOG.md entry (tests/jax_history.py): the title leads with it, and names
    # the function whose lowering changed, not `f`
    assert data["title"].startswith(f"documented change in the coming release: `jax.numpy.floor` gives other values "
                                    f"from JAX commit {shas[2][:10]} (last good jax 0.4.30; JAX's lowering)"), \
        data["title"]
    assert data["script"]["kind"] == "script" and "MODULE = " not in data["script"]["text"]  # never the frozen module
    assert (f"documented in the notes of the coming release (Unreleased, at commit {shas[6][:10]}; they name "
            "jax.numpy.floor") in body, body
    assert "where its lowering changed): `jax.numpy.floor` of an integer array now returns the array unchanged" in body
    assert "Something else" not in body and "An older entry" not in body
    assert "/jax-commits/run-" not in body and f"jax {bad} retraced: differs from jax 0.4.30 (last good)" in body
    script = tmp_path / data["script"]["name"]
    script.write_text(data["script"]["text"])
    assert f"--add-commit {shas[2][:12]} --over 0.4.30" in data["script"]["text"]  # its header: no package of it
    good_python = api.environment_manager().ensure("0.4.30").python_executable
    assert subprocess.run([str(good_python), str(script)], capture_output=True).returncode == 0
    add = ["envs", "--add-commit", shas[2][:9], "--over", "0.4.30", "--jax-repo", repo, "--platform", "cpu"]
    cli("envs", "--remove", bad)  # one an interrupted run (or the test of kept commits) left
    code, out, err = cli(*add, "--json")
    assert code == 0, err
    path = Path(json.loads(out)[0]["path"])
    try:
        done = subprocess.run([str(path / "bin" / "python"), str(script)], capture_output=True, text=True)
        assert done.returncode == 1 and "0.4.30" in done.stdout, done.stdout + done.stderr
    finally:
        cli("envs", "--remove", bad)


@pytest.mark.crossversion
def test_a_commit_window_without_the_good_releases_outputs_offers_the_zip_never_the_frozen_module(window, tmp_path):
    """The answer's runs not here (a record copied without them) and the bundle packed on another release than the
    good one: no program script can be written, and the frozen module (the good release's lowering on every JAX)
    cannot show the commit's change, so the issue offers the zip; its title still names the first bad commit."""
    from reprobundle.bundle.registry import Registry, utc_now
    from reprobundle.investigate.report.issue_facts import issue_data
    from reprobundle.render.issue import issue_markdown

    _, shas, own, _ = window
    store = tmp_path / "store"
    shutil.copytree(own, store)
    registry = Registry.open(str(store))
    record = registry.answers(registry.resolve("int-floor").ref.bundle_id)[-1]
    registry.put_answer({**record, "answer_id": Registry.new_run_id(), "created": utc_now(), "runs": []})
    data = issue_data("int-floor", store=str(store))
    assert data["script"]["kind"] == "zip" and data["script"]["text"] is None
    assert "the frozen module cannot show a commit's change" in data["script"]["why"]
    assert f"from JAX commit {shas[2][:10]} (last good jax 0.4.30" in data["title"], data["title"]
    first = "\n".join(issue_markdown(data).splitlines()[:30])
    assert "**Reproducer:** the attached zip: `python int-floor-1.zip`" in first, first
    code, out, err = cli("script", "int-floor", store=store)
    assert code == 2 and "MODULE = " not in out and "cannot show a commit's change" in err, err


@pytest.mark.crossversion
def test_investigate_to_a_commit_is_the_commit_bisection_and_the_issue(history, tmp_path):
    """investigate --bad COMMIT (#50: a TPU machine holds one release): no release lies between, so the chain is the
    commit window's search and the issue; the steps that compare releases say why they do not apply."""
    repo, shas, store = history
    issue = tmp_path / "issue.md"
    code, out, err = cli("investigate", "int-floor", "--good", "0.4.30", "--bad", shas[5][:12], "--jax-repo", repo,
                         "--issue", issue, "--json", store=store)
    assert code == 0, err
    found = json.loads(out)
    steps = {s["name"]: s for s in found["steps"]}
    assert [s["name"] for s in found["steps"]] == ["commits", "explain", "minimize", "newest", "issue"]
    assert steps["commits"]["status"] == "answered" and shas[2][:10] in steps["commits"]["answer"]
    assert {steps[n]["status"] for n in ("explain", "minimize", "newest")} == {"skipped"}
    assert found["layer"] == "lowering" and issue.exists() and f"First bad commit: {shas[2][:10]}" in issue.read_text()
    # #63: the issue is this run's answer, the commit window's, not the store's release bisection of 0.4.30..0.4.31
    assert f"from JAX commit {shas[2][:10]} (last good jax 0.4.30" in issue.read_text().splitlines()[0]
    from reprobundle.render.listing import investigation_text

    assert investigation_text(found).startswith(f"int-floor: first bad commit {shas[2][:10]} between 0.4.30 and")
    quiet = tmp_path / "nothing-to-report.md"  # a commit before the change: no first bad commit, no issue written
    code, out, err = cli("investigate", "int-floor", "--good", "0.4.30", "--bad", shas[1][:12], "--jax-repo", repo,
                         "--issue", quiet, "--json", store=store)
    assert code == 0 and json.loads(out)["steps"][-1]["status"] == "skipped" and not quiet.exists(), err
    code, _, err = cli("investigate", "int-floor", "--good", "0.4.30", "--bad", "main", "--jax-repo",
                       tmp_path / "nothing", store=store)
    assert code == 2 and "not a git repository" in err


@pytest.mark.crossversion
def test_a_commit_before_the_change_says_nothing_changed_and_searches_nothing(history):
    repo, shas, store = history
    code, out, err = cli("bisect-commits", "int-floor", "--good", "0.4.30", "--bad", shas[1][:9], "--jax-repo", repo,
                         "--json", store=store)
    assert code == 0, err
    answer = json.loads(out)
    assert answer["ends"]["same"] and not answer["ends"]["agree"] and answer["first_bad"] is None
    assert answer["bad"] == shas[1] and answer["commits"] == 2 and answer["probes"] == 1  # the ends only
    assert answer["text"].startswith(f"no change between jax 0.4.30 and commit {shas[1][:10]}")
    assert answer["answer_id"] and answer["lowering"] is not None  # the bad commit's StableHLO against the good's
    code, out, err = cli("bisect-commits", "int-floor", "--good", "0.4.30", "--bad", shas[1], "--jax-repo", repo,
                         store=store)
    assert code == 0 and "no change between jax 0.4.30 and commit" in out and f"lowering of {shas[1][:10]}" in out


@pytest.mark.crossversion
def test_a_good_tag_on_a_release_branch_starts_the_search_at_its_branch_point(history, tmp_path):
    """As JAX tags its releases since 0.10.2 (jax-v0.10.2 is five commits off main): the good tag is no ancestor of
    `main`; the window starts where its branch left main, and the CLI's --json answer says so."""
    from jax_history import _commit, _git

    repo, shas, store = history
    branched = tmp_path / "jax"
    shutil.copytree(repo, branched)
    _git(branched, "checkout", "-q", "-b", "release/0.4.30", "jax-v0.4.30")
    (branched / "ci.txt").write_text("a CI fix on the release branch\n")
    retag(branched, "jax-v0.4.30", _commit(branched, "Fix CI at the branch cut"))
    root = _git(branched, "rev-parse", "main~6").strip()
    code, out, err = cli("bisect-commits", "int-floor", "--good", "0.4.30", "--bad", "main", "--jax-repo", branched,
                         "--jobs", "2", "--json", store=store)
    assert code == 0, err
    answer = json.loads(out)
    assert answer["branch_point"] == root and answer["commits"] == 6 and answer["bad"] == shas[5]
    assert f"the first commit after jax-v0.4.30's branch point {root[:10]}" in answer["ends"]["text"]
    assert answer["first_bad"]["sha"] == shas[2] and answer["last_good"] == shas[1]
    # a release window from that tag starts there too
    from reprobundle.envs.jax_commit import open_repo
    from reprobundle.investigate.search.commit_bisect import plan_commits

    plan = plan_commits(open_repo(str(branched), tmp_path / "cache"), "0.4.30", "0.4.31")
    assert plan.branch_point == root and [c.sha for c in plan.commits] == shas and plan.start.endswith(root[:10])


@pytest.mark.crossversion
def test_a_commit_window_from_a_patch_release_runs_commits_reading_an_older_version_over_an_older_jaxlib(history,
                                                                                                     tmp_path):
    """#56: as after jax-v0.4.33, whose next commits read 0.4.32 and refuse jaxlib 0.4.33 at import: from the good
    release 0.4.31 to a commit, the commits whose version.py reads 0.4.30 run over jaxlib 0.4.30, the one that
    reads 0.4.32 over 0.4.31's; the first bad commit is found between two of the older ones."""
    from jax_history import PATCH_TITLES, add_patch_window

    repo, _, store = history
    patched = tmp_path / "jax"
    shutil.copytree(repo, patched)
    c7, c8, c9 = add_patch_window(patched, site_jax(api.environment_manager().ensure("0.4.30")))
    own = tmp_path / "store"
    shutil.copytree(store.parent / "packed", own)
    answer = api.bisect_commits("int-floor", "0.4.31", c9, store=str(own), jax_repo=str(patched), jobs=1)
    assert answer["ends"]["agree"], answer["ends"]["text"]
    assert answer["first_bad"]["sha"] == c8 and answer["first_bad"]["title"] == PATCH_TITLES[1]
    assert answer["last_good"] == c7 and answer["jaxlib_moved"] is None  # c7 and c8 over one jaxlib
    assert "ran over jaxlib 0.4.30 (jax 0.4.30's environment)" in answer["layer"], answer["layer"]
    # each probe's run records the jaxlib it ran over: the older one under the commits that refuse 0.4.31's
    registry, bundle = api.resolve("int-floor", str(own))
    jaxlib = {commit: r["environment"]["jaxlib"] for r in registry.runs(bundle.ref.bundle_id)
              if (commit := ((r["environment"].get("jax_build") or {}).get("commits") or {}).get("jax"))}
    assert (jaxlib[c7], jaxlib[c8], jaxlib[c9]) == ("0.4.30", "0.4.30", "0.4.31"), jaxlib
    assert answer["tested"][c8]["over"] == "jaxlib 0.4.30 (jax 0.4.30's environment)"


@pytest.mark.crossversion
def test_an_unknown_commit_or_one_that_needs_a_newer_jaxlib_is_refused_with_the_way_out(history, tmp_path):
    repo, shas, store = history
    with pytest.raises(UsageError, match=re.escape(f"the JAX repository {repo}/.git has no commit 'deadbeef'")):
        api.bisect_commits("int-floor", "0.4.30", "deadbeef", store=str(store), jax_repo=str(repo))
    with pytest.raises(UsageError, match="names a commit, not a release: name the good release too"):
        api.bisect_commits("int-floor", None, "main", store=str(store), jax_repo=str(repo))
    from jax_history import _commit

    moved = tmp_path / "jax"
    shutil.copytree(repo, moved)
    version = moved / "jax" / "version.py"
    version.write_text(version.read_text().replace('_minimum_jaxlib_version = "0.4.30"',
                                                   '_minimum_jaxlib_version = "0.4.31"'))
    _commit(moved, "Raise the minimum jaxlib to 0.4.31")
    with pytest.raises(UsageError, match="needs jaxlib 0.4.31 or newer") as refused:
        api.bisect_commits("int-floor", "0.4.30", "main", store=str(store), jax_repo=str(moved))
    assert "name a bad release instead" in str(refused.value.hint)



def test_a_release_run_that_records_its_wheels_commit_is_no_commits_run():
    """Release wheels from 0.10 on record the commit they were built from (jax.version._git_hash): a run of such a
    release is still the release's, so a commit window finds its good end among its probes (seen on a TPU: the issue
    offered no script, 'no stored run of jax 0.10.2 retraced'); a commit's environment (its version stamped
    X.dev0+hash) is the commit's."""
    from reprobundle.bundle.model import commit_of_run

    sha = "a33ed614c58ee8a10d0b7536c50c2609c38500c1"
    release = {"environment": {"jax": "0.10.2", "jax_build": {"origin": "release", "commits": {"jax": sha}}}}
    commit = {"environment": {"jax": "0.11.0.dev0+0145058aaca8",
                              "jax_build": {"origin": "local", "commits": {"jax": "0145058aaca8775b"}}}}
    assert commit_of_run(release) is None and commit_of_run(commit) == "0145058aaca8775b"
    assert commit_of_run({"environment": {"jax": "0.10.2"}}) is None


def test_the_packed_reference_stands_for_the_release_that_traced_and_packed_it():
    """A bundle packed (and traced) by the good release: its reference is that release's outputs, whatever form
    traced_by takes (pack stores {"jax": VERSION})."""
    from reprobundle.investigate.report.script_plan import packed_reference_run

    class Packed:
        manifest = {"environment": {"jax": "0.10.2"}, "reference": {"outputs": [{"blob": "x"}]},
                    "function": {"traced_by": {"jax": "0.10.2"}}}

    found = packed_reference_run(Packed(), "0.10.2")  # type: ignore[arg-type]
    assert found is not None and found["outputs"] == [{"blob": "x"}]
    assert packed_reference_run(Packed(), "0.9.2") is None  # type: ignore[arg-type]
    Packed.manifest["function"]["traced_by"] = {"jax": "0.9.2"}
    assert packed_reference_run(Packed(), "0.10.2") is None  # type: ignore[arg-type]
@pytest.mark.crossversion
def test_an_investigation_is_a_plan_over_stored_answers_resumed_and_extended_by_the_commit_step(history, tmp_path):
    """#57: `--max-time` spent by the bisection leaves explain and the newest release for the next call, which reuses
    the stored bisection (or, cut short, goes on from the window it had narrowed) and runs them; adding --jax-repo
    then runs only the commit step; a copy of the store (what
    push, pull and copy make) carries the records, never trusted there; --again recomputes."""
    from reprobundle.investigate.answers import BISECTION, reusable

    repo, shas, store = history
    own = tmp_path / "store"
    shutil.copytree(store.parent / "packed", own)  # the bundle only: no answer stored yet

    def investigate(*extra) -> dict[str, dict]:
        code, out, err = cli("investigate", "int-floor", "--good", "0.4.30", "--bad", "0.4.31", "--retrace", "--by",
                             "outputs", "--issue", tmp_path / "issue.md", "--json", *extra, store=own)
        assert code == 0, err
        steps = {s["name"]: s for s in json.loads(out)["steps"]}
        print(extra, {n: (s["status"], s["spent_s"]) for n, s in steps.items()})  # where a slow run spent it
        return steps

    first = investigate("--max-time", "1")  # the bisection spends it: what follows is left for the next call
    assert first["explain"]["status"] == "left" and first["newest"]["status"] == "left", first
    assert "the next `investigate` runs it" in first["explain"]["answer"]
    # the bisection itself is bounded (no probe starts past the second): answered whole, or cut short and said so
    whole = first["bisect"]["status"] == "answered" and "unfinished" not in first["bisect"]["answer"]
    assert whole or "--max-time" in first["bisect"]["answer"], first["bisect"]
    second = investigate()  # resumed: a whole stored bisection reused (one cut short asked again), the rest run now
    if whole:
        assert second["bisect"]["status"] == "stored" and second["bisect"]["reused"].startswith("stored ")
        assert second["bisect"]["stored"] == first["bisect"]["stored"] and second["bisect"]["spent_s"] == 0
        assert second["bisect"]["answer"] == first["bisect"]["answer"]
    else:
        assert second["bisect"]["status"] == "answered" and "unfinished" not in second["bisect"]["answer"]
        if first["bisect"]["stored"]:  # stored cut short: the next search went on from the window it had narrowed
            assert "resumed from a stored search cut short: the change lies after jax 0.4.30 and by jax 0.4.31" in \
                second["bisect"]["answer"], second["bisect"]
    assert (second["explain"]["status"], second["newest"]["status"]) == ("answered", "answered")
    third = investigate("--jax-repo", str(repo))  # only the commit step is new
    assert {n: s["status"] for n, s in third.items()} == {"bisect": "stored", "explain": "stored",
                                                           "commits": "answered", "minimize": "skipped",
                                                           "newest": "stored", "issue": "answered"}
    assert third["explain"]["stored"] == second["explain"]["stored"] and shas[2][:10] in third["commits"]["answer"]
    assert f"First bad commit: {shas[2][:10]}" in (tmp_path / "issue.md").read_text()

    registry, bundle = api.resolve("int-floor", str(own))
    record = [a for a in registry.answers(bundle.ref.bundle_id) if a["kind"] == BISECTION and a.get("reuse")][-1]
    asked, manager = record["reuse"]["asked"], api.environment_manager()
    assert reusable(registry, bundle, BISECTION, asked, manager)["answer_id"] == record["answer_id"]
    assert reusable(registry, bundle, BISECTION, {**asked, "by": "bits"}, manager) is None  # another question
    api.copy("int-floor", str(tmp_path / "elsewhere"), store=str(own))
    there, copied = api.resolve("int-floor", str(tmp_path / "elsewhere"))
    assert (record["answer_id"], True) in [(a["answer_id"], why is not None) for a, why in
                                           there.answer_records(copied.ref.bundle_id) if a["kind"] == BISECTION]
    assert reusable(there, copied, BISECTION, asked, manager) is None  # a copy is foreign there: recomputed
    again = investigate("--again", "--max-time", "1")
    assert again["bisect"]["status"] != "stored" and again["bisect"]["stored"] != record["answer_id"]


@pytest.mark.crossversion
def test_bisect_commits_max_time_keeps_the_window_it_narrowed_and_the_next_call_goes_on_from_it(history,
                                                                                               release_window,
                                                                                               tmp_path):
    """#57: `bisect-commits --max-time`: no probe starts once the time is spent; the search keeps the window it had
    narrowed (no first bad commit claimed), stored `unfinished` and never reused as an answer; the next call starts
    inside that window: its endpoints checked again, the commits outside it never probed again. No clock decides:
    the ledger's budget is spent at the search's first narrowed step (a budget of 0 s), and a budget so small that
    not even the first probe starts ends the command with one line."""
    from reprobundle.investigate.answers import COMMIT_BISECTION, resumable, reusable
    from reprobundle.investigate.search.commit_search import commits_asked
    from reprobundle.run.spent import Ledger

    repo, shas, store = history
    own = tmp_path / "store"
    shutil.copytree(store, own)  # the stored release bisection (release_window's), this test's commit answers
    ledger, cut_at = Ledger(), []

    def progress(line: str) -> None:  # the first step inside a narrowed window: the time is spent from here on
        if "; testing " in line and "between 0.4.30 and 0.4.31" not in line and not cut_at:
            cut_at.append(len(ledger.probes))
            ledger.max_time_s = 0.0

    cut = api.bisect_commits("int-floor", "0.4.30", "0.4.31", store=str(own), jax_repo=str(repo), jobs=1,
                             ledger=ledger, progress=progress)
    assert cut_at and cut["first_bad"] is None and cut["unfinished"].startswith("--max-time 0 s spent"), cut
    assert cut["text"].startswith("unfinished: ") and cut["lowering"] is None
    assert len(cut["spent"]["probes"]) == cut_at[0]  # none started once it was spent
    window = cut["window"]
    labels = [commit_label("0.4.30", i, sha) for i, sha in enumerate(shas)]
    lo = labels.index(window["last_good"]) if window["last_good"] in labels else -1
    hi = labels.index(window["first_bad"]) if window["first_bad"] in labels else len(labels)
    assert (lo, hi) != (-1, len(labels)) and lo < 2 <= hi  # narrowed, the change (shas[2]) within
    registry, bundle = api.resolve("int-floor", str(own))
    from reprobundle.envs.jax_commit import open_repo
    from reprobundle.investigate.search.commit_bisect import plan_commits

    manager = api.environment_manager()
    asked = commits_asked(plan_commits(open_repo(str(repo), manager.root, None), "0.4.30", "0.4.31"))
    assert reusable(registry, bundle, COMMIT_BISECTION, asked, manager) is None  # never reused as an answer
    assert resumable(registry, bundle, COMMIT_BISECTION, asked, manager)["answer_id"] == cut["answer_id"]

    again = api.bisect_commits("int-floor", "0.4.30", "0.4.31", store=str(own), jax_repo=str(repo), jobs=1)
    assert again["first_bad"]["sha"] == shas[2] and not again.get("unfinished")
    assert again["resumed"].startswith("resumed from a stored search cut short: the change lies after jax ")
    probed = {v for p in again["spent"]["probes"] for v in p["versions"]}
    ends = {shas[0][:10], shas[-1][:10]}  # the endpoints' check: the first commit and the bad tag's
    # (the window's ends may run again: the first bad commit's lowering is read against its parent's)
    outside = {sha[:10] for i, sha in enumerate(shas) if i < lo or i > hi} - ends
    assert outside and probed & outside == set(), (probed, outside)
    assert reusable(registry, bundle, COMMIT_BISECTION, asked, manager)["answer_id"] == again["answer_id"]

    code, _, err = cli("bisect-commits", "int-floor", "--good", "0.4.30", "--bad", "0.4.31", "--jax-repo", repo,
                       "--max-time", "0.000001", store=own)  # no probe can start: one line, nothing claimed
    assert code != 0 and "--max-time 1e-06 s spent" in err and "Traceback" not in err, err


@pytest.mark.crossversion
def test_a_commit_window_after_a_patch_release_runs_over_the_good_releases_jaxlib_and_finds_the_lowering(tmp_path):
    """#63: a transformer step whose last bits change at 0.4.34 by the exact GELU's lowering (ca97af9d43). After the
    patch release 0.4.33, the first commit reads 0.4.32 and refuses jaxlib 0.4.33: over jaxlib 0.4.31 (the CPU thunk
    runtime off) its bits differ from 0.4.33's, which once was concluded as "the change came with jaxlib". The
    first commit over 0.4.33's own jaxlib is the first endpoint instead, the one before it said and not searched,
    and the commit that changed the lowering is found, every searched commit over jax 0.4.33's jaxlib."""
    from jax_history import GELU_TITLES, make_gelu_history

    manager = api.environment_manager()
    repo = tmp_path / "jax"
    g1, g2, g3 = make_gelu_history(repo, site_jax(manager.ensure("0.4.33")))
    manager.ensure("0.4.31")  # the older jaxlib the first commit runs over
    store = tmp_path / "store"
    api.pack_script(str(PROGRAMS / "transformer_scan.py"), name="block", store=str(store), **quick.PACK)
    answer = api.bisect_commits("block", "0.4.33", g3, store=str(store), jax_repo=str(repo), jobs=1)
    ends = answer["ends"]
    assert ends["agree"] and "came with jaxlib" not in ends["text"], ends["text"]
    assert ends["first"]["label"].endswith(g2[:12]) and ends["first"]["class"] == "good"
    assert ends["first"]["over"] == "jaxlib 0.4.33 (jax 0.4.33's environment)"
    lead = ends["lead_in"]
    assert lead["count"] == 1 and lead["label"].endswith(g1[:12]) and lead["class"] == "bad"
    assert lead["over"] == "jaxlib 0.4.31 (jax 0.4.31's environment)"
    assert f"the 1 commit from {g1[:10]}" in ends["text"] and "not searched" in ends["text"]
    assert answer["criterion"] == "bits" and answer["first_bad"]["sha"] == g3
    assert answer["first_bad"]["title"] == GELU_TITLES[2] and answer["last_good"] == g2
    assert g1 not in answer["tested"] and answer["jaxlib_moved"] is None
    assert {t["over"] for t in answer["tested"].values()} == {"jaxlib 0.4.33 (jax 0.4.33's environment)"}
    assert answer["lowering"]["changed"] and "transformer_scan.py" in answer["lowering"]["text"]
    assert "ran over jaxlib 0.4.31" not in answer["text"]
