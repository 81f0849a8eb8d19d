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
