"""The search over an ordered list of builds (investigate/search/build_search.py) run on its own, without the API face: real
releases the suite already installs, probes made of investigate/ and run/ pieces (a local executor, a ledger), a
real lowering change (jnp.floor of an int32 array: 0.4.30 rounds it through float32, 0.4.31 leaves it alone)."""

from __future__ import annotations

from pathlib import Path

import pytest
import quick

PROGRAMS = Path(__file__).parent / "programs" / "retrace"


@pytest.mark.crossversion
def test_the_search_finds_the_first_bad_build_of_a_list_with_probes_built_below_the_api(tmp_path):
    from reprobundle import api
    from reprobundle.bundle.registry import open_ref
    from reprobundle.envs.manager import EnvironmentManager
    from reprobundle.fleet.executor import LocalExecutor
    from reprobundle.investigate.search.build_search import Probes, Search
    from reprobundle.investigate.search.release_search import BISECT_OPTIONS
    from reprobundle.run.spent import Ledger

    store = tmp_path / "store"
    api.pack_script(str(PROGRAMS / "int_floor.py"), name="int-floor", store=str(store), **quick.PACK)  # setup only
    registry, bundle = open_ref("int-floor", str(store))
    ledger, asked_ahead = Ledger(), []
    probes = Probes(registry, bundle, BISECT_OPTIONS, LocalExecutor(), EnvironmentManager(), None, ledger, False)
    search = Search(probes, "retrace", 1, asked_ahead.append, "outputs")
    builds = ["0.4.30", "0.4.31", "0.4.33"]
    result = search.run(builds, "0.4.30", "0.4.33", None)
    assert (result.last_good, result.first_bad) == ("0.4.30", "0.4.31")
    assert result.criterion.startswith("outputs"), result.criterion
    assert set(result.runs) == set(builds)  # the ends, then the one build between them
    assert asked_ahead and asked_ahead[0][:2] == ["0.4.30", "0.4.33"]  # environments asked for ahead of need
    # every probe went through the ledger, untimed (an outputs search times nothing)
    assert ledger.probes and all(p["what"] == "untimed retrace" for p in ledger.probes)
    # a build probed twice the same way is replayed once: the probe remembers its runs
    again = probes.probe("retrace", timed=False)(["0.4.30", "0.4.33"])
    assert [r["run_id"] for r in again] == [result.runs["0.4.30"]["run_id"], result.runs["0.4.33"]["run_id"]]


@pytest.mark.parametrize("ratio, rounds, taken", [
    (100.0, None, True),  # settled, listed as it stands: the screen's rounds are the endpoints' measurement
    (1.03, None, False),  # settled, but under the resolution: the endpoints time it (and say it) themselves
    (1.12, None, False),  # listed only beside an A/A control (under 1.2x): timed anew with one
    (100.0, 8, False),  # --rounds 8 asked for: the endpoints time the rounds asked
])
def test_a_screen_that_settles_a_listed_slowdown_is_the_endpoints_measurement_and_nothing_else_is(ratio, rounds,
                                                                                                  taken):
    """#64 item 3 on built runs: the time screen's rounds (the endpoints' own adaptive design, at fewer looks) serve
    as the endpoints' timed probe only where they settle a slowdown the endpoints list as they stand; the probe then
    replays nothing, and the confirmation (a fresh probe) still measures anew."""
    from dataclasses import replace

    from timed_runs import timed_run

    from reprobundle.investigate.search.build_search import Probes
    from reprobundle.investigate.search.release_search import BISECT_OPTIONS
    from reprobundle.run.spent import Ledger

    ledger, replayed = Ledger(), []
    probes = Probes(None, None, replace(BISECT_OPTIONS, rounds=rounds), None, None, None, ledger, False)
    drift = [1.0, 1.03, 0.98, 1.01]
    screened = [timed_run("0.5.0", "g1", drift, "good", seed=1),
                timed_run("0.5.1", "g1", [ratio * d for d in drift], "bad", seed=2)]
    assert probes.taken_as_endpoints("retrace", ("0.5.0", "0.5.1"), screened) is taken
    probes.seen.setdefault(("retrace", True, ("0.5.0", "0.5.1"), None), replayed)  # else: what the probe replays
    ends = probes.probe("retrace")(["0.5.0", "0.5.1"])
    assert (ends == screened) is taken and (ends is replayed) is not taken
    assert ledger.probes == []  # nothing replayed here either way (the stand-in above plays the replay)


@pytest.mark.parametrize("left, cut_at, rest_again", [
    ([("retrace", "bits"), ("retrace", "sweep")], "kinds", False),  # Ctrl-C in the bits stage: the sweep was left
    ([("retrace", "sweep")], "kinds", False),  # in the sweep
    ([("retrace", "rest"), ("retrace", "bits"), ("retrace", "sweep")], "split", True),  # in the rest of the window
])
def test_a_stage_cut_short_leaves_the_rest_of_the_window_to_search_again_only_where_it_was_left(left, cut_at,
                                                                                                 rest_again):
    """investigate's stages after the headline (search/headline_first.py) cut by Ctrl-C or --max-time: the stored
    headline is `cut_at` "split" (the next call searches the rest of its window again) only where that stage was
    among those left; a sweep left is run again by any resumed call on its own (CI found a resumed call searching
    the rest of a window it had never left: the sweep alone had made the cut "split")."""
    from reprobundle.investigate.search.bisection import BisectResult
    from reprobundle.investigate.search.headline_first import REST, HeadlineFirst

    for between_stages in (False, True):  # cut inside a stage, or stored between two with these still to run
        search = object.__new__(HeadlineFirst)  # no store: only the cut's bookkeeping is asked
        search.head = BisectResult("0.4.34", "0.4.36", "time", "0.4.35", "0.4.34", mode="retrace")
        search.ends, search.set_aside, search.pending = ("0.4.34", "0.4.36"), [], list(left)
        if between_stages:
            unfinished, stored_cut, _ = search._unfinished()
        else:
            search._cut(list(left), "interrupted by Ctrl-C")
            unfinished, stored_cut = search.head.unfinished, search.head.cut_at
        assert unfinished and stored_cut == cut_at
        assert (stored_cut == "split") is rest_again is any(kind == REST for _, kind in left)
        if not between_stages:
            assert [(s["criterion"], s["unfinished"]) for s in search.set_aside] == [
                ("bits", True)] * any(kind == "bits" for _, kind in left)


def test_a_stage_whose_time_step_was_skipped_says_it_did_not_look_not_that_nothing_changed():
    """The retraced program's second look at time, skipped where the frozen module's slowdown stood
    (KindSearches.screen), is said by its stage as not looked at and why; a stage that looked and found nothing says
    so."""
    from reprobundle.investigate.search.headline_first import Stage

    skipped = Stage("search time (retraced)", skipped=["time (retraced): the frozen module's slowdown stands"])
    assert skipped.said == "not looked at: time (retraced): the frozen module's slowdown stands"
    assert Stage("search bits (retraced)").said == "no other change"
