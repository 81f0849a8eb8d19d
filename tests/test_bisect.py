"""Bisect's search logic on run records whose samples come from a known step change."""

import numpy as np
import pytest
from audit import audited
from cli_runner import cli
from small_bundle import copy_of

from reprobundle.envs.manager import EnvironmentManager
from reprobundle.errors import UsageError
from reprobundle.investigate.search.bisection import bisect, first_bad_text, standing
from reprobundle.render.listing import bisect_left_out_text

VERSIONS = ["0.4.30", "0.4.31", "0.4.33", "0.4.34", "0.5.0", "0.5.1", "0.6.0", "0.7.0", "0.7.2", "0.8.0"]


ROUNDS, STEPS = 5, 10
# the step change the searches here find: 1.3x, a slowdown whose interval lies above analysis/resolution.py's
# CONTROL_UNDER, so that on these runs (no busy machine recorded) no A/A control is asked for (test_resolution.py
# judges those)
SLOW_MS = 13.0


def _together(versions, medians_ms, statuses, seed):
    """Run records as an interleaved replay makes them: rounds of fresh processes (each with its own speed
    offset), steps that share the machine's drift, a group id shared by the runs timed together."""
    rng = np.random.default_rng(seed)
    drift = np.exp(0.3 * np.cumsum(rng.standard_normal(ROUNDS * STEPS)) / 10)  # slow machine-wide wander
    runs = []
    for v, median_ms, status in zip(versions, medians_ms, statuses):
        process = np.repeat(np.exp(0.015 * rng.standard_normal(ROUNDS)), STEPS)
        noise = np.exp(0.02 * rng.standard_normal(ROUNDS * STEPS))
        samples = (median_ms * 1e6 * drift * process * noise).astype(int).tolist()
        timing = {"samples_ns": samples, "steps": [1] * len(samples), "rounds": [STEPS] * ROUNDS,
                  "group": f"g{seed}"}
        runs.append({"requested": v, "status": status, "reason": "", "timing": timing})
    return runs


def _replayer(first_bad, *, broken=(), wrong_outputs=False):
    tested = []

    def replay_together(versions):
        tested.append(list(versions))
        medians, statuses = [], []
        for v in versions:
            slow = VERSIONS.index(v) >= VERSIONS.index(first_bad)
            medians.append(10.0 if wrong_outputs or not slow else SLOW_MS)
            statuses.append("mismatch" if wrong_outputs and slow else "ok")
        runs = _together(versions, medians, statuses, seed=len(tested))
        return [{"requested": v, "status": "crashed", "reason": "SIGSEGV"} if v in broken else run
                for v, run in zip(versions, runs)]

    return replay_together, tested


@pytest.mark.parametrize("first_bad", VERSIONS[1:])
def test_finds_first_slow_release(first_bad):
    replay_one, tested = _replayer(first_bad)
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one)
    assert r.first_bad == first_bad
    assert r.criterion == "time"
    assert tested[0] == ["0.4.30", "0.8.0"]  # the endpoints, timed together
    assert all(call[0] == "0.4.30" and len(call) == 2 for call in tested[1:-1])  # each probe beside the good one
    assert tested[-1] == [r.last_good, first_bad]  # then the answer timed again: the confirmation
    assert r.confirmation["confirmed"] and r.confirmation["why"].startswith("confirmed: ")
    assert len(tested) <= 1 + 4 + 1  # endpoints + log2(8 candidates) + 1, the confirmation
    # the bad end by its paired verdict; each probe by the sequential test between the two ends the endpoints
    # measured (analysis/which_end.py)
    said = "paired rounds" if first_bad == "0.8.0" else "like the bad end in "
    assert said in r.evidence[first_bad]
    if first_bad != "0.8.0":
        assert "(sequential test against the endpoints' 1." in r.evidence[first_bad]


def test_a_time_bisections_probes_are_told_the_change_its_endpoints_measured():
    """`sided_probe` gets the ends the timed endpoints measured and times every probe between them; the endpoints and
    the confirmation are timed as before."""
    replay_one, tested = _replayer("0.5.1")
    asked, probed = [], []

    def sided_probe(ends):
        asked.append(ends)

        def probe(versions):
            probed.append(list(versions))
            return replay_one(versions)
        return probe

    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one, sided_probe=sided_probe)
    assert (r.first_bad, r.last_good) == ("0.5.1", "0.5.0") and r.confirmation["confirmed"]
    [ends] = asked
    assert ends.ratio == pytest.approx(1.3, rel=0.05) and ends.dof == ROUNDS - 1
    assert probed == tested[1:-1] and tested[0] == ["0.4.30", "0.8.0"] and tested[-1] == ["0.5.0", "0.5.1"]


def test_a_retraced_slowdowns_layer_check_times_both_pairs_against_the_change_the_endpoints_measured():
    """After a retraced bisection by time, the four boundary runs are one timed replay told the bisection's change
    (its rounds stop once each pair's side is known), and each pair is judged by that test: the frozen module like
    the good end (the lowering's change), the retraced pair like the bad end."""
    from reprobundle.investigate.search.boundary import BOTH, RETRACE, boundary_layer, boundary_runs

    replay_one, _ = _replayer("0.5.1")
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one)
    asked = []

    def probe_for(mode, timed=True, ends=None):
        asked.append((mode, timed, ends))

        def probe(pair):  # frozen: the same time on both; retraced: the bisection's change
            frozen = _together(pair, [10.0, 10.0], ["ok", "ok"], seed=91)
            retraced = _together(pair, [10.0, SLOW_MS], ["ok", "ok"], seed=92)
            for run in retraced:
                run["contender"] = {"mode": RETRACE}
                run["timing"]["group"] = frozen[0]["timing"]["group"]
            return frozen + retraced
        return probe

    runs = boundary_runs(r, RETRACE, probe_for)
    [(mode, timed, ends)] = asked
    assert (mode, timed) == (BOTH, True) and ends is not None and ends.ratio == pytest.approx(1.3, rel=0.05)
    layer = boundary_layer(r, runs, None, lambda a, b: {"changed": True, "text": "other ops"}, RETRACE)
    assert layer["layer"] == "lowering", layer
    assert "like the good end" in layer["frozen"]["evidence"] and "like the bad end" in layer["retraced"]["evidence"]


def test_output_regression_uses_outputs():
    replay_one, _ = _replayer("0.5.1", wrong_outputs=True)
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one)
    assert (r.criterion, r.first_bad, r.last_good) == ("outputs", "0.5.1", "0.5.0")


def test_untestable_versions_are_skipped():
    replay_one, _ = _replayer("0.6.0", broken={"0.5.1"})
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one)
    assert r.first_bad == "0.6.0"
    assert r.classes["0.5.1"] == "skip"
    assert r.last_good == "0.5.0"


def test_indistinguishable_endpoints():
    def same(versions):
        return _together(versions, [10.0] * len(versions), ["ok"] * len(versions), seed=7)

    with pytest.raises(UsageError, match="not distinguishable"):
        bisect(VERSIONS, "0.4.30", "0.8.0", same)
    with pytest.raises(UsageError, match="must be older"):
        bisect(VERSIONS, "0.8.0", "0.4.30", same)


def test_endpoints_a_slowdown_of_5_percent_is_ruled_out_between_are_no_regression():
    """A bad end 0.97x of the good end's time, too noisy to settle "faster" or "the same": the rounds that only a
    slowdown answers stop once one is ruled out (run/budget.py), and the bisection says so, not "more rounds"."""
    ratios = [-0.03, -0.01, -0.05, -0.03]

    def timed(versions):
        common = {"steps": [1] * 16, "rounds": [4] * 4, "group": "g"}
        good = {"samples_ns": [10_000_000] * 16, **common}
        bad = {"samples_ns": [int(1e7 * np.exp(d)) for d in ratios for _ in range(4)], **common}
        return [{"requested": v, "status": "ok", "reason": "", "timing": t} for v, t in zip(versions, (good, bad))]

    with pytest.raises(UsageError, match=r"not distinguishable.*0\.97x .*a slowdown of 5% or more ruled out in 4 "
                                         r"rounds; nothing regressed by time"):
        bisect(VERSIONS, "0.4.30", "0.8.0", timed)


def _checker(first_bad, *, broken=()):
    """An outputs-only probe (each version once, untimed): its calls, and the runs a replay makes of them."""
    checked = []

    def check_together(versions):
        checked.append(list(versions))
        return [{"requested": v, "status": "crashed", "reason": "SIGSEGV"} if v in broken else
                {"requested": v, "status": "mismatch" if first_bad and VERSIONS.index(v) >= VERSIONS.index(first_bad)
                 else "ok",
                 "reason": "", "timing": {}} for v in versions]

    return check_together, checked


@pytest.mark.parametrize("jobs", [1, 2, 3])
@pytest.mark.parametrize("first_bad", VERSIONS[1:])
def test_an_outputs_bisection_with_several_probes_a_step_finds_what_one_at_a_time_finds(first_bad, jobs):
    replay_one, timed = _replayer(first_bad)
    check_together, checked = _checker(first_bad)
    one = bisect(VERSIONS, "0.4.30", "0.8.0", _replayer(first_bad, wrong_outputs=True)[0])
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one, check_together=check_together, jobs=jobs)
    assert (r.criterion, r.first_bad, r.last_good) == ("outputs", one.first_bad, one.last_good) == \
        ("outputs", first_bad, VERSIONS[VERSIONS.index(first_bad) - 1])
    assert timed == []  # outputs told the endpoints apart: nothing was timed
    assert checked[0] == ["0.4.30", "0.8.0"] and all(1 <= len(c) <= jobs for c in checked[1:])
    # 8 candidates: binary search takes up to 4 steps, a 3-way split 2-3, a 4-way split 2
    assert len(checked) - 1 <= {1: 4, 2: 3, 3: 2}[jobs]


def test_several_probes_a_step_skip_what_does_not_run():
    check_together, _ = _checker("0.6.0", broken={"0.5.1", "0.7.0"})
    r = bisect(VERSIONS, "0.4.30", "0.8.0", _replayer("0.6.0")[0], check_together=check_together, jobs=2)
    assert (r.first_bad, r.last_good) == ("0.6.0", "0.5.0")
    assert r.classes["0.5.1"] == "skip"


def test_endpoints_whose_outputs_agree_are_timed_and_time_probes_stay_one_at_a_time():
    replay_one, timed = _replayer("0.5.1")
    check_together, checked = _checker(None)  # every version matches the reference
    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one, check_together=check_together, jobs=3)
    assert (r.criterion, r.first_bad) == ("time", "0.5.1")
    assert checked == [["0.4.30", "0.8.0"]]  # the endpoints' outputs, once; then only timed probes
    assert timed[0] == ["0.4.30", "0.8.0"] and all(c[0] == "0.4.30" and len(c) == 2 for c in timed[1:-1])
    assert timed[-1] == [r.last_good, "0.5.1"]  # the confirmation


def test_split_points_and_what_the_next_step_may_test():
    from reprobundle.investigate.search.bisection import next_picks, split_points

    assert split_points(VERSIONS, 1) == [VERSIONS[5]]  # the binary search's middle
    assert split_points(VERSIONS, 2) == [VERSIONS[3], VERSIONS[6]]
    assert split_points(["a", "b"], 5) == ["a", "b"]
    assert next_picks(VERSIONS, [VERSIONS[3], VERSIONS[6]], 2) == \
        split_points(VERSIONS[:3], 2) + split_points(VERSIONS[4:6], 2) + split_points(VERSIONS[7:], 2)


def test_a_workers_phases_become_where_its_time_went():
    from reprobundle.run.spent import Ledger, of_runs, worker_spent

    result = {"phase_s": {"validate": 0.1, "inputs": 0.2, "import_jax": 1.0, "route:deserialize": 0.5,
                          "hlo_text": 0.1, "execute": 0.05, "timing": 2.0, "calibrate": 0.3, "profile": 0.4},
              "compile_s": 0.4, "samples_ns": [500_000_000, 500_000_000]}
    spent = worker_spent(5.0, result)
    assert spent == {"start": 1.95, "load": 0.2, "compile": 0.4, "calibrate": 0.35, "timed": 1.0,
                     "profile": 0.4, "wait": 0.7}
    ledger = Ledger()
    ledger.record("outputs", ["0.4.30"], 5.0, of_runs([{"spent": spent}, {"spent": {"env": 2.0}}]), at_once=2)
    data = ledger.as_dict()
    assert data["total"]["env"] == 2.0 and data["probes"][0]["at_once"] == 2


def test_the_time_table_and_the_json_without_samples():
    from reprobundle.render.spent import spent_text, without_samples
    from reprobundle.run.spent import Ledger

    ledger = Ledger()
    ledger.record("outputs", ["0.4.30", "0.10.2"], 3.94, {"env": 0.5, "start": 3.4, "compile": 0.07}, at_once=2)
    ledger.record("timed", ["0.4.38"], 12.0, {"start": 1.3, "timed": 8.0, "wait": 1.0})
    text = spent_text(ledger.as_dict())
    header, rule, first, second, total, *footer = text.splitlines()
    assert header.split() == ["probe", "versions", "at", "once", "wall", "s", "env", "start", "compile", "timed",
                              "wait"]
    assert first.split()[:5] == ["outputs", "0.4.30,", "0.10.2", "2", "3.9"]
    assert total.split() == ["total", "15.9", "0.5", "4.7", "0.1", "8.0", "1.0"]
    assert all(len(line) <= 100 for line in text.splitlines()) and "2 probe(s)" in " ".join(footer)
    comparison = {"rows": [{"label": "0.4.30", "samples_ns": [1, 2, 3], "median_ns": 2.0, "n": 3}], "top": 1}
    assert without_samples(comparison) == {"rows": [{"label": "0.4.30", "median_ns": 2.0, "n": 3}], "top": 1}
    assert comparison["rows"][0]["samples_ns"] == [1, 2, 3]  # the caller's data is left as it was


def test_a_release_the_index_cannot_install_in_the_window_is_named_in_the_answer(tmp_path):
    # the package index's real data (yanked and jaxlib-less releases), read as a bisection reads it
    left_out = EnvironmentManager(tmp_path).left_out_versions()
    assert left_out["0.4.32"] == "yanked" and left_out["0.4.16"] == "no jaxlib for it on the index"
    replay_one, tested = _replayer("0.4.33")
    r = bisect(VERSIONS, "0.4.31", "0.4.33", replay_one, left_out=left_out)
    assert (r.first_bad, r.last_good, r.candidates) == ("0.4.33", "0.4.31", [])
    assert r.left_out == {"0.4.32": "yanked"} and tested == [["0.4.31", "0.4.33"]] * 2  # named, never replayed
    # (the endpoints, then the same two timed again: the confirmation)
    text = bisect_left_out_text(r.left_out, r.last_good, r.first_bad)
    assert text.splitlines() == [
        "  not tested: 0.4.32 (yanked), not installable from the package index",
        "  so the change may have come in 0.4.32, between the last good release 0.4.31 and the first bad one 0.4.33"]
    # a wider window names each one left out, and says "may have come in" only of those at the boundary
    wide = bisect(VERSIONS, "0.4.30", "0.5.0", _replayer("0.4.34")[0], left_out=left_out)
    assert list(wide.left_out) == ["0.4.32"] and (wide.last_good, wide.first_bad) == ("0.4.33", "0.4.34")
    assert "may have come in" not in bisect_left_out_text(wide.left_out, wide.last_good, wide.first_bad)
    assert bisect(VERSIONS, "0.4.33", "0.5.0", _replayer("0.4.34")[0], left_out=left_out).left_out == {}


def test_an_endpoint_that_is_no_release_is_refused_before_anything_runs(small_store_template, tmp_path):
    store = copy_of(small_store_template, tmp_path / "store")
    with audited() as did:
        code, out, err = cli("bisect", "small", "--good", "0.4.30", "--bad", "0.4.99", "--rounds", "2", store=store)
    assert code == 2 and out == "" and did.processes == []  # no environment made, no worker started
    assert err.count("error:") == 1 and "0.4.99" in err and "is not a release on the package index" in err
    assert "pick endpoints on which the bundle runs" not in err and "hint: the installable releases run from" in err
    assert not list((store / "runs").glob("*/*"))  # nothing replayed, nothing stored
    assert "did you mean 0.4.38?" in err  # the nearest release the index has
    # a digit left off the end is the likelier slip: 0.4.3 was 0.4.3x, not 0.4.13
    code, out, err = cli("bisect", "small", "--good", "0.4.3", "--bad", "0.4.31", store=store)
    assert code == 2 and "did you mean 0.4.30?" in err, err
    # #63: `--good 0.6` ran as a version of its own ("jax 0.6") and stored an answer with "?" for its release
    for command in ("bisect", "investigate"):
        with audited() as did:
            code, out, err = cli(command, "small", "--good", "0.5", "--bad", "0.5.1", store=store)
        assert code == 2 and did.processes == [] and err.count("error:") == 1, err
        assert "--good '0.5': did you mean 0.5.0?" in err, err
    assert "hint: name the release as the package index does: --good 0.5.0" in err
    assert not list((store / "runs").glob("*/*")) and not list(store.glob("answers/*/*"))


def test_bisect_max_time_too_small_for_its_first_probe_ends_with_one_line_and_runs_nothing(small_store_template,
                                                                                            tmp_path):
    """#57: bisect --max-time bounds the whole bisection: a budget no probe fits in starts none (TimeSpentError)."""
    store = copy_of(small_store_template, tmp_path / "store")
    with audited() as did:
        code, out, err = cli("bisect", "small", "--good", "0.4.30", "--bad", "0.4.31", "--max-time", "0.000001",
                             store=store)
    assert code != 0 and out == "" and did.processes == [], err  # no worker started
    assert err.count("error:") == 1 and "--max-time 1e-06 s spent" in err and "Traceback" not in err, err
    assert not list((store / "runs").glob("*/*"))


def test_investigate_is_directed_by_by_and_a_criterion_it_does_not_know_is_refused_before_anything_runs(
        small_store_template, tmp_path):
    store = copy_of(small_store_template, tmp_path / "store")
    with audited() as did:
        code, out, err = cli("investigate", "small", "--good", "0.4.30", "--bad", "0.4.31", "--by", "speed",
                             "--frozen", store=store)
    assert code == 2 and out == "" and did.processes == []
    assert err.count("error:") == 1 and "--by 'speed' is not one of outputs, bits, time" in err, err
    assert "hint: leave --by out to look for every kind" in err, err
    code, _, err = cli("bisect", "small", "--good", "0.4.30", "--bad", "0.4.31", "--by", "tme", store=store)
    assert code == 2 and err.count("error:") == 1 and "hint: did you mean --by time?" in err, err
    # an endpoint that is no JAX version is named by the option that gave it
    with audited() as did:
        code, out, err = cli("investigate", "small", "--good", "0.4.30", "--bad", "jax-0.5.0", store=store)
    assert code == 2 and did.processes == [] and "--bad 'jax-0.5.0' is not a JAX version" in err, err
    assert "--jax" not in err


def test_an_endpoint_that_did_not_run_says_its_status_once_with_a_hint_that_fits():
    def no_environment(versions):
        return [{"requested": v, "status": "error", "reason": f"no environment for jax {v}: the disk is full"}
                if v == "0.8.0" else run for v, run in zip(versions, _together(versions, [10.0] * 2, ["ok"] * 2, 1))]

    with pytest.raises(UsageError) as e:
        bisect(VERSIONS, "0.4.30", "0.8.0", no_environment)
    assert str(e.value) == "the bad version 0.8.0 did not run (error): no environment for jax 0.8.0: the disk is full"
    assert "environments can be made" in e.value.hint
    replay_one, _ = _replayer("0.6.0", broken={"0.4.30"})
    with pytest.raises(UsageError) as e:
        bisect(VERSIONS, "0.4.30", "0.8.0", replay_one)
    assert str(e.value) == "the good version 0.4.30 did not run (crashed): SIGSEGV"
    assert e.value.hint == "pick endpoints on which the bundle runs"


def test_a_release_faster_than_both_ends_is_said():
    """A time series that is not monotone: 0.5.1 runs at 0.7x of the good end's time, the bad end at 1.3x. The
    bisection still names the first slow release, and says the one beyond both ends when it tested it."""
    medians = {v: 10.0 for v in VERSIONS}
    medians.update({"0.5.1": 7.0, "0.7.0": SLOW_MS, "0.7.2": SLOW_MS, "0.8.0": SLOW_MS})
    calls = []

    def replay_together(versions):
        calls.append(versions)
        return _together(versions, [medians[v] for v in versions], ["ok"] * len(versions), seed=len(calls))

    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay_together)
    assert (r.first_bad, r.last_good) == ("0.7.0", "0.6.0")
    tested = {v for call in calls for v in call}
    assert "0.5.1" in tested  # the middle of the window: the first probe
    [outlier] = r.beyond_ends
    assert (outlier["version"], outlier["direction"]) == ("0.5.1", "faster")
    assert "faster than both ends" in outlier["why"] and outlier["ci95"][1] < 1


def test_a_monotone_series_says_nothing_beyond_its_ends():
    replay_one, _ = _replayer("0.5.1")
    assert bisect(VERSIONS, "0.4.30", "0.8.0", replay_one).beyond_ends == []


def test_beyond_ends_needs_the_whole_interval_past_the_bad_end():
    from reprobundle.investigate.search.bisection import beyond_ends

    ends = {"verdict": "slower", "ratio": 1.2, "ci95": [1.1, 1.3], "settled": True}
    assert beyond_ends(ends, {"verdict": "slower", "ratio": 2.0, "ci95": [1.8, 2.2], "settled": True}) == "slower"
    assert beyond_ends(ends, {"verdict": "slower", "ratio": 1.4, "ci95": [1.25, 1.6], "settled": True}) is None
    assert beyond_ends(ends, {"verdict": "faster", "ratio": 0.8, "ci95": [0.7, 0.9], "settled": True}) == "faster"
    assert beyond_ends(ends, {"verdict": "faster", "ratio": 0.8, "ci95": [0.7, 0.9], "settled": False}) is None
    assert beyond_ends(ends, {"verdict": "same", "ratio": 1.0, "ci95": [0.98, 1.02], "settled": True}) is None


def test_beyond_ends_says_nothing_without_intervals():
    from reprobundle.investigate.search.bisection import beyond_ends

    ends = {"verdict": "slower", "ratio": 1.4, "ci95": None}
    assert beyond_ends(ends, {"verdict": "slower", "ratio": 1.2, "ci95": None}) is None


def test_an_error_on_the_bad_side_is_a_regression_bisected_untimed():
    """From 0.6.0 on the module fails to compile where 0.4.30 runs it: the first release that fails is the answer,
    each probe untimed; a release without an environment is skipped, never called bad; the next command minimizes
    the error."""
    from reprobundle.investigate.search.boundary import next_commands
    from reprobundle.investigate.search.mode_choice import plan, survey

    checked = []

    def check_together(versions):
        checked.append(list(versions))
        return [{"requested": v, "status": "error", "reason": "no environment for jax 0.5.1: the disk is full"}
                if v == "0.5.1" else
                {"requested": v, "status": "error", "reason": "INVALID_ARGUMENT: compile failed"}
                if VERSIONS.index(v) >= VERSIONS.index("0.6.0") else
                {"requested": v, "status": "ok", "reason": "", "timing": {}} for v in versions]

    r = bisect(VERSIONS, "0.4.30", "0.8.0", _replayer("0.8.0")[0], check_together=check_together,
               outputs_differ=lambda a, b: "same")
    assert (r.criterion, r.first_bad, r.last_good) == ("error", "0.6.0", "0.5.0"), r.classes
    assert r.why == "jax 0.8.0 fails (error: INVALID_ARGUMENT: compile failed) where jax 0.4.30 runs"
    assert r.classes["0.5.1"] == "skip" and r.evidence["0.6.0"] == "error: INVALID_ARGUMENT: compile failed"
    assert r.confirmation is None  # untimed: nothing to confirm
    (step,) = next_commands(r, {"layer": "compiler"}, "m")
    assert step["command"] == "reprobundle minimize m --jax 0.5.0 --jax 0.6.0 --error"
    # the survey ranks it with the outputs: bisected first, and time on the mode that runs on both
    found = survey("0.4.30", "0.8.0", {"frozen": check_together,
                                       "retrace": lambda vs: [{"requested": v, "status": "ok"} for v in vs]},
                   lambda a, b: "same")
    assert found["frozen"]["said"] == "the frozen module fails on jax 0.8.0 (error) and runs on jax 0.4.30"
    assert plan(found, None)[0] == [("frozen", "outputs"), ("retrace", "time")]


def test_a_probe_that_would_end_past_max_time_is_not_started_and_the_search_keeps_what_it_narrowed():
    """The ledger refuses a probe once --max-time is spent (TimeSpentError, said by the search as what it had
    narrowed); no clock is read by this test: a budget of zero is spent before the first probe, one of an hour never."""
    from reprobundle.errors import TimeSpentError
    from reprobundle.run.spent import Ledger

    spent, roomy = Ledger(max_time_s=0.0), Ledger(max_time_s=3600.0)
    replay_one, tested = _replayer("0.5.1")
    with pytest.raises(TimeSpentError, match="--max-time 0 s spent"):
        spent.watched("timed", replay_one)(["0.4.30", "0.8.0"])
    assert tested == [] and spent.probes == []
    roomy.watched("timed", replay_one)(["0.4.30", "0.8.0"])
    (probe,) = roomy.probes
    assert tested == [["0.4.30", "0.8.0"]] and 0 <= probe["at_s"] <= roomy.as_dict()["wall_s"]
    # the endpoints answered, then the time ran out: the window so far is the answer, said as unfinished
    calls = []

    def then_spent(versions):
        calls.append(list(versions))
        if len(calls) > 2:
            raise TimeSpentError("--max-time 10 s spent: 0 s left, and a timed probe takes ~3 s here")
        return replay_one(versions)

    r = bisect(VERSIONS, "0.4.30", "0.8.0", then_spent)
    assert r.unfinished.startswith("--max-time 10 s spent") and "untested" in r.unfinished
    assert r.classes[r.first_bad] == "bad" and r.classes[r.last_good] == "good"
    # the confirmation could not start either: neither confirmed nor refuted, the finding stands unfinished (#63)
    assert r.confirmation["confirmed"] is None and r.confirmation["cut"] == "--max-time"
    assert "not timed again" in r.confirmation["why"] and standing(r)


def test_a_search_max_time_cut_short_is_resumed_inside_the_window_it_had_narrowed():
    """#57: the window a search narrowed before --max-time cut it (its stored answer's last good, first bad,
    classes) is where the next search starts: the endpoints checked again, the releases outside it never probed
    again, the first bad release the same as a whole search finds. No clock: the cut is a probe that refuses."""
    from reprobundle.errors import TimeSpentError

    replay, tested = _replayer("0.6.0", wrong_outputs=True)
    calls = []

    def then_spent(versions):  # the endpoints and one step, then the time is spent
        calls.append(list(versions))
        if len(calls) > 2:
            raise TimeSpentError("--max-time 10 s spent: 0 s left, and a timed probe takes ~3 s here")
        return replay(versions)

    cut = bisect(VERSIONS, "0.4.30", "0.8.0", then_spent)
    assert cut.criterion == "outputs" and cut.unfinished and cut.resumed is None and cut.cut_at == "search"
    window = {"criterion": cut.criterion, "last_good": cut.last_good, "first_bad": cut.first_bad,
              "classes": cut.classes, "evidence": cut.evidence}
    lo, hi = VERSIONS.index(cut.last_good), VERSIONS.index(cut.first_bad)
    assert (lo, hi) != (0, len(VERSIONS) - 1)  # the step narrowed it
    tested.clear()
    again = bisect(VERSIONS, "0.4.30", "0.8.0", replay, resume=[{**window, "criterion": "time"}, window])
    assert (again.first_bad, again.last_good, again.unfinished) == ("0.6.0", "0.5.1", None)
    probed = {v for step in tested for v in step}
    assert tested[0] == ["0.4.30", "0.8.0"]  # the endpoints, checked again
    assert probed - {"0.4.30", "0.8.0"} <= set(VERSIONS[lo + 1:hi])  # nothing outside the window again
    assert again.resumed.startswith(f"resumed from a stored search cut short: the change lies after jax "
                                    f"{cut.last_good} and by jax {cut.first_bad}")
    assert again.classes[cut.last_good] == "good" and again.classes[cut.first_bad] == "bad"
    assert not again.searched_whole  # its window's other changes are still to be split out (window_changes.split)
    layer_cut = bisect(VERSIONS, "0.4.30", "0.8.0", replay, resume=[{**window, "cut_at": "layer"}])
    assert layer_cut.searched_whole  # cut only at its layer: its window was split before, not again
    # a window of another criterion, or one outside the endpoints, is no place to start: searched whole
    tested.clear()
    whole = bisect(VERSIONS, "0.4.30", "0.8.0", replay, resume=[{**window, "criterion": "bits"},
                                                                 {**window, "last_good": "0.3.0"}])
    assert whole.resumed is None and whole.first_bad == "0.6.0"
    assert set(calls[1]) <= {v for step in tested for v in step}  # the cut search's first step, probed again


def _cut_by_max_time(run: dict) -> dict:
    """A run whose rounds the schedule ended because another would have ended past --max-time (run/budget.py)."""
    return {**run, "environment": {**run.get("environment", {}),
                                   "conditions": {"schedule": {"stopped": "time limit"}}}}


def test_a_confirmation_max_time_cut_before_it_settled_keeps_the_finding_unfinished_never_no_change():
    """#63: a 50x slowdown whose confirmation --max-time cut after 3 rounds (20x to 125x, not settled) is the answer
    cut short, said with what it measured, never "no change stood": the headline of every kind's bisection, not
    split, its window stored for the next call, which confirms it there."""
    from timed_runs import timed_run

    from reprobundle.investigate.search.mode_choice import bisect_each
    from reprobundle.investigate.search.window_changes import every_change

    replay_one, tested = _replayer("0.5.1")

    def cut_confirmation(pair):
        good, bad = pair
        return [_cut_by_max_time(timed_run(good, "c", [1, 1, 1], "c1", 1)),
                _cut_by_max_time(timed_run(bad, "c", [20, 60, 125], "c2", 2))]

    def run_one(mode, kind):
        return bisect(VERSIONS, "0.4.30", "0.8.0", replay_one, by="time", confirm_with=cut_confirmation)

    r = run_one("frozen", "time")
    assert (r.first_bad, r.last_good) == ("0.5.1", "0.5.0") and standing(r)
    assert r.confirmation["confirmed"] is None and r.confirmation["cut"] == "--max-time"
    assert r.confirmation["run_ids"] == ["c1", "c2"] and r.cut_at == "confirm"
    assert r.unfinished.startswith("the confirmation of jax 0.5.1 was cut by --max-time (53x [")
    said = first_bad_text(r)
    assert said.startswith("first bad release 0.5.1 (0.5.1: 53x [") and said.endswith(
        "] slower in 3 rounds; cut by --max-time)"), said
    head = bisect_each([("frozen", "time")], run_one, "time", None)  # once: "no change stood between the endpoints"
    assert head.first_bad == "0.5.1" and head.unfinished
    (only,) = every_change([("frozen", "time")], run_one, lambda found: [found], "time", None)
    assert only.first_bad == "0.5.1" and only.confirmation["cut"] == "--max-time"
    # the next call starts in the stored window and times the confirmation again: confirmed there
    window = {"criterion": r.criterion, "last_good": r.last_good, "first_bad": r.first_bad, "classes": r.classes,
              "evidence": r.evidence, "cut_at": r.cut_at}
    tested.clear()
    again = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one, by="time", resume=[window])
    assert again.resumed.startswith("resumed from a stored search cut short: the change lies after jax 0.5.0")
    assert tested[0] == ["0.4.30", "0.8.0"] and tested[1:] == [["0.5.0", "0.5.1"]]  # nothing probed again
    assert again.confirmation["confirmed"] and again.unfinished is None
    assert first_bad_text(again) == "first bad release 0.5.1"
    # a confirmation that ran its rounds to the end and did not settle a slowdown still refutes it
    refuted = bisect(VERSIONS, "0.4.30", "0.8.0", replay_one, by="time",
                     confirm_with=lambda pair: [timed_run(v, "s", [1, 1, 1, 1], v, 3) for v in pair])
    assert refuted.confirmation["confirmed"] is False and not standing(refuted) and refuted.unfinished is None


def test_a_time_probe_max_time_cut_before_it_said_its_side_is_untested_not_good():
    """#63: a probe whose rounds --max-time ended before the test between the ends said its side (one round, half-way
    between the ends) is no class: the search keeps its window with that release untested, and the answer names
    every release the change may be at."""
    from timed_runs import timed_run

    replay_one, tested = _replayer("0.5.1")

    def replay(versions):
        if list(versions) == ["0.4.30", "0.4.34"]:  # the second probe: cut after one round, undecided
            return [_cut_by_max_time(timed_run(v, "p", [r], v, 5)) for v, r in zip(versions, (1.0, 1.07))]
        return replay_one(versions)

    r = bisect(VERSIONS, "0.4.30", "0.8.0", replay, by="time")
    assert r.cut_at == "search" and "0.4.34" not in r.classes and r.classes["0.5.1"] == "bad"
    assert r.unfinished.startswith("--max-time ended jax 0.4.34's rounds before they said its side")
    assert (r.last_good, r.first_bad) == ("0.4.30", "0.5.1") and r.confirmation["confirmed"]
    assert first_bad_text(r) == "first bad release one of the 5 releases from 0.4.31 to 0.5.1"


@pytest.mark.crossversion
def test_a_bisection_ctrl_c_stopped_is_stored_unfinished_and_the_next_call_resumes_it(tmp_path_factory, tmp_path):
    """#64: Ctrl-C (SIGINT, to a real process) while a probe of the search runs stops the search as --max-time does:
    the window it had narrowed is stored as an unfinished answer, whole (one create-only put), the command says
    "interrupted" and exits 130 with nothing left in its temp folder; the same command again goes on from that
    window ("resumed from a stored search cut short") and finds the first bad release."""
    import os
    import signal
    import subprocess
    import sys
    import threading
    import time

    from shared_stores import bisected_rng_and_colsum

    from reprobundle import api
    from reprobundle.investigate.answers import unfinished

    store = bisected_rng_and_colsum(tmp_path_factory)  # rng@1: its draw changes when 0.5.0 retraces it
    args = ["bisect", "rng", "--good", "0.4.38", "--bad", "0.5.1", "--retrace", "--by", "outputs", "--no-layer"]
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "REPROBUNDLE_STORE": str(store)}
    launcher = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                "from reprobundle.cli import run; run()")
    proc = subprocess.Popen([sys.executable, "-c", launcher, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and proc.poll() is None and \
            not any("starting 0.5.0 retraced" in x for x in lines):
        time.sleep(0.05)
    assert proc.poll() is None, "".join(lines)
    # inside the probe: its worker imports jax (0.7 s of CPU at least) and retraces the program; once that probe
    # ends, the rest (every release of the window run once) is remembered and over within a second
    time.sleep(0.3)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    reader.join(10)
    err = "".join(lines)
    assert proc.returncode == 130 and err.rstrip().endswith("interrupted") and "Traceback" not in err, err
    assert "what was found is stored" in err
    assert list(tmp.iterdir()) == []
    registry = api.open_registry(str(store))
    record = [a for a in registry.answers(registry.resolve("rng").ref.bundle_id) if a["kind"] == "bisection"][-1]
    answer = record["answer"]
    assert unfinished(record) and answer["cut_at"] == "search" and "interrupted by Ctrl-C" in answer["unfinished"]
    assert (answer["last_good"], answer["first_bad"]) == ("0.4.38", "0.5.1") and "0.5.0" not in answer["classes"]
    code, out, err = cli(*args, store=store)
    assert code == 0, err
    assert "resumed from a stored search cut short: the change lies after jax 0.4.38 and by jax 0.5.1" in out, out
    assert out.startswith("first bad release: jax 0.5.0 (last good: 0.4.38; judged by outputs"), out
