"""Every change in a window, each its own (investigate/window_changes.py), on real releases: a program whose
outputs change at two releases gets two changes, each with its layer and its own stored answer, and the issue's
first screen lists them in one table."""
from __future__ import annotations

from pathlib import Path

import pytest
import quick

from reprobundle import api

PROGRAMS = Path(__file__).parent / "programs" / "retrace"


@pytest.fixture(scope="module")
def two_changes(tmp_path_factory):
    """tests/programs/retrace/rng_chaos.py bisected from 0.4.38 to 0.5.1 with no flag: its retraced outputs change
    beyond the tolerance at 0.5.0 (threefry, JAX's lowering) and again at 0.5.1 (the compiler's last bits, carried
    beyond the tolerance by a logistic map)."""
    store = tmp_path_factory.mktemp("changes") / "store"
    api.pack_script(str(PROGRAMS / "rng_chaos.py"), name="rch", store=str(store), **quick.PACK)
    result, _ = api.bisect("rch", "0.4.38", "0.5.1", store=str(store), warmup=1, rounds=3)
    return store, result


@pytest.mark.crossversion
def test_outputs_that_change_at_two_releases_are_two_changes_each_with_its_layer(two_changes):
    store, result = two_changes
    changes = [result, *result.changes]
    assert [(c.criterion, c.last_good, c.first_bad, c.mode) for c in changes] == [
        ("outputs vs good", "0.4.38", "0.5.0", "retrace"), ("outputs vs good", "0.5.0", "0.5.1", "retrace")]
    assert changes[0].layer["layer"] == "lowering"  # the draw: the frozen module computes the same numbers
    assert changes[1].layer["layer"] in ("compiler", "both")  # the column sum's bits: the frozen module shows it
    registry = api.open_registry(str(store))
    answers = registry.answers(registry.resolve("rch").ref.bundle_id)
    bisections = [a for a in answers if a["kind"] == "bisection"]
    head = bisections[-1]["answer"]  # the headline's answer is stored last: the latest
    assert [(c["first_bad"], c["kind"]) for c in head["changes"]] == [("0.5.0", "outputs"), ("0.5.1", "outputs")]
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
    assert [r["release"] for r in data["changes"]] == ["0.5.0", "0.5.1"]
    assert all(" of 64 elements of output " in r["how_much"] for r in data["changes"])  # one figure each
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
