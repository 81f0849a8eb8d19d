"""Bisect by what the user saw (`--by outputs|bits|time`, and the automatic choice saying why) and the layer that
changed at the boundary it found (the compiler, JAX's lowering, or both), with the command to run next (#30)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import quick

from reprobundle import api
from reprobundle.errors import UsageError
from reprobundle.investigate.search.bisection import BITS_ONLY, SAME, BisectResult, bisect
from reprobundle.investigate.search.boundary import boundary_layer, boundary_runs, next_commands
from reprobundle.run.contenders import control_of

PROGRAMS = Path(__file__).parent / "programs" / "retrace"
VERSIONS = ["0.4.30", "0.4.31", "0.4.33", "0.4.34", "0.5.0", "0.5.1", "0.6.0", "0.7.0", "0.7.2", "0.8.0"]
ROUNDS, STEPS = 5, 10
CONTROL = control_of("0.5.0")  # the last good release timed against itself (analysis/resolution.py)


def _replayer(slow_from: str, bits_from: str, factor: float = 1.15, only_beside: str | None = None, seed: int = 0):
    """Versions timed together: `factor` times the time (15% slower) from `slow_from` on, other last bits of their
    outputs from `bits_from` on (each run carries its outputs' bits as a number the comparison below reads). With
    `only_beside`, the time moves only in a probe that holds that release (a change no second measurement repeats)."""
    calls = []

    def replay_together(versions):
        calls.append(list(versions))
        rng = np.random.default_rng(seed + len(calls))
        drift = np.exp(0.3 * np.cumsum(rng.standard_normal(ROUNDS * STEPS)) / 10)
        runs = []
        moves = only_beside is None or only_beside in versions
        for v in versions:
            v = v.split(":")[0]  # an A/A control (run/contenders.control_of) is its release, timed again
            median = 10.0 * factor if moves and VERSIONS.index(v) >= VERSIONS.index(slow_from) else 10.0
            noise = np.exp(0.02 * rng.standard_normal(ROUNDS * STEPS))
            samples = (median * 1e6 * drift * noise).astype(int).tolist()
            timing = {"samples_ns": samples, "steps": [1] * len(samples), "rounds": [STEPS] * ROUNDS,
                      "group": f"g{len(calls)}"}
            runs.append({"requested": v, "status": "ok", "reason": "", "timing": timing,
                         "bits": int(VERSIONS.index(v) >= VERSIONS.index(bits_from))})
        return runs

    return replay_together, calls


def _apart(a: dict, b: dict) -> str:
    return SAME if a["bits"] == b["bits"] else BITS_ONLY


def test_bits_within_the_tolerance_are_named_by_the_automatic_choice_and_bisected_by_bits():
    # the user's case: a release changed the last bits, an earlier one got a little slower
    replay_together, _ = _replayer(slow_from="0.5.1", bits_from="0.7.0")
    chosen = bisect(VERSIONS, "0.4.30", "0.8.0", replay_together, outputs_differ=_apart)
    assert (chosen.criterion, chosen.first_bad, chosen.by) == ("time", "0.5.1", None)
    assert "differ in bits, within the tolerance" in chosen.why and "--by bits" in chosen.why
    by_bits = bisect(VERSIONS, "0.4.30", "0.8.0", replay_together, outputs_differ=_apart, by="bits")
    assert (by_bits.criterion, by_bits.first_bad, by_bits.last_good) == ("bits", "0.7.0", "0.6.0")
    assert by_bits.why.startswith("--by bits: ") and by_bits.outputs_apart == BITS_ONLY
    assert by_bits.evidence["0.6.0"] == "outputs are jax 0.4.30's bit for bit"
    by_time = bisect(VERSIONS, "0.4.30", "0.8.0", replay_together, outputs_differ=_apart, by="time")
    assert (by_time.criterion, by_time.first_bad) == ("time", "0.5.1") and by_time.why.startswith("--by time: ")
    with pytest.raises(UsageError, match="not distinguishable by --by outputs: .* differ in bits") as caught:
        bisect(VERSIONS, "0.4.30", "0.8.0", replay_together, outputs_differ=_apart, by="outputs")
    assert caught.value.hint == "bisect --by bits"
    with pytest.raises(UsageError, match="is not one of outputs, bits, time"):
        bisect(VERSIONS, "0.4.30", "0.8.0", replay_together, outputs_differ=_apart, by="speed")


def test_every_change_in_the_window_is_reported_bits_at_one_release_and_time_at_another():
    from reprobundle.investigate.search.bisection import bisect_every_change

    replay_together, _ = _replayer(slow_from="0.5.1", bits_from="0.7.0")
    found = bisect_every_change(VERSIONS, "0.4.30", "0.8.0", replay_together, outputs_differ=_apart)
    assert (found.criterion, found.first_bad) == ("time", "0.5.1")
    (bits,) = found.also
    assert (bits["criterion"], bits["first_bad"], bits["last_good"]) == ("bits", "0.7.0", "0.6.0")
    assert bits["classes"]["0.6.0"] == "good" and bits["classes"]["0.7.0"] == "bad"  # its own classes, apart
    # asked for one criterion, only that one
    assert bisect_every_change(VERSIONS, "0.4.30", "0.8.0", replay_together, outputs_differ=_apart,
                               by="time").also == []


def _run(version: str, mode: str, bits: int) -> dict:
    return {"requested": version, "status": "ok", "reason": "", "contender": {"mode": mode}, "bits": bits}


@pytest.mark.parametrize("frozen_bits, lowered, layer", [((0, 1), False, "compiler"), ((0, 0), True, "lowering"),
                                                         ((0, 1), True, "both"), ((0, 0), False, "neither")])
def test_the_layer_at_the_boundary_and_what_to_run_next(frozen_bits, lowered, layer):
    result = BisectResult("0.4.30", "0.8.0", "bits", first_bad="0.5.1", last_good="0.5.0")
    runs = {("0.5.0", "frozen"): _run("0.5.0", "frozen", frozen_bits[0]),
            ("0.5.1", "frozen"): _run("0.5.1", "frozen", frozen_bits[1]),
            ("0.5.0", "retrace"): _run("0.5.0", "retrace", 0), ("0.5.1", "retrace"): _run("0.5.1", "retrace", 1)}
    found = boundary_layer(result, runs, _apart, lambda a, b: {"changed": lowered, "text": "+1 erf_inv at m.py:3"})
    assert found["layer"] == layer, found
    assert found["retraced"]["changed"] is True and found["frozen"]["changed"] is (frozen_bits[1] == 1)
    steps = {s["what"]: s["command"] for s in next_commands(result, found, "m", ["--store", "/s"], ["--rounds", "1"])}
    minimize = "reprobundle minimize m --jax 0.5.0 --jax 0.5.1 --outputs --bits --store /s"
    lowering = "reprobundle replay m --jax 0.5.0 --jax 0.5.1 --retrace --baseline '0.5.0 retraced' --rounds 1 --store /s"
    assert steps == {"compiler": {"minimize": minimize}, "lowering": {"lowering diff": lowering},
                     "both": {"minimize": minimize, "lowering diff": lowering}, "neither": {}}[layer]
    if layer == "lowering":
        assert found["text"].endswith("JAX's lowering changed from jax 0.5.0 to 0.5.1: +1 erf_inv at m.py:3")


def test_the_layer_comes_from_the_last_good_releases_own_lowering_when_the_packed_module_cannot_load_there():
    """Packed on a newer release, the frozen module does not load on the last good one; both releases lower the
    program to the same StableHLO and its outputs differ: the compiler and runtime changed, not "undecided"."""
    result = BisectResult("0.4.30", "0.8.0", "outputs vs good", first_bad="0.5.1", last_good="0.5.0")
    runs = {("0.5.0", "frozen"): {**_run("0.5.0", "frozen", 0), "status": "incompatible",
                                  "reason": "StableHLO 1.15 above 1.1"},
            ("0.5.1", "frozen"): _run("0.5.1", "frozen", 1),
            ("0.5.0", "retrace"): _run("0.5.0", "retrace", 0), ("0.5.1", "retrace"): {
                **_run("0.5.1", "retrace", 1)}}

    def beyond(a, b):
        return SAME if a["bits"] == b["bits"] else "beyond"

    found = boundary_layer(result, runs, beyond, lambda a, b: {"changed": False, "text": ""})
    assert found["layer"] == "compiler" and found["frozen"]["changed"] is True, found
    assert "could not be judged on jax 0.5.0 (incompatible: StableHLO 1.15 above 1.1)" in found["frozen"]["evidence"]
    assert "the same on both" in found["text"] and "the same StableHLO" in found["text"]
    # with a lowering that changed too, the packed module's failure leaves it undecided (no frozen pair to judge)
    changed = boundary_layer(result, runs, beyond, lambda a, b: {"changed": True, "text": "+1 op at m.py:3"})
    assert changed["layer"] is None


@pytest.mark.parametrize("criterion, mode, asked", [("time", "retrace", [("both", True, ["0.5.0", "0.5.1"])]),
                                                    ("time", "frozen", [("retrace", False, ["0.5.0", "0.5.1"])]),
                                                    ("bits", "frozen", [("retrace", True, ["0.5.0", "0.5.1"])]),
                                                    ("outputs vs good", "retrace",
                                                     [("frozen", True, ["0.5.0", "0.5.1"])])])
def test_the_boundary_reuses_the_bisections_runs_and_completes_the_other_mode(criterion, mode, asked):
    """What the bisection ran in its own mode is reused; the other mode is replayed (untimed after a frozen
    bisection by time: only its StableHLO is read); a retraced bisection by time times all four together."""
    result = BisectResult("0.4.30", "0.8.0", criterion, first_bad="0.5.1", last_good="0.5.0")
    result.runs = {v: _run(v, mode, 0) for v in ("0.4.30", "0.5.0", "0.5.1", "0.8.0")}
    calls = []

    def probe_for(m, timed=True, ends=None):
        def replay_together(versions):
            calls.append((m, timed, list(versions)))
            return [_run(v, one, 0) for v in versions for one in ((["frozen", "retrace"]) if m == "both" else [m])]
        return replay_together

    runs = boundary_runs(result, mode, probe_for)
    assert calls == asked
    assert sorted(runs) == [("0.5.0", "frozen"), ("0.5.0", "retrace"), ("0.5.1", "frozen"), ("0.5.1", "retrace")]
    if (criterion, mode) != ("time", "retrace"):  # the bisection's own runs are reused
        assert runs[("0.5.1", mode)] is result.runs["0.5.1"]


@pytest.mark.parametrize("lowered, layer", [(False, "compiler"), (True, "both")])
def test_a_frozen_bisection_by_time_names_the_layer_from_its_own_timing_and_the_untimed_lowering(lowered, layer):
    result = BisectResult("0.4.30", "0.8.0", "time", first_bad="0.5.1", last_good="0.5.0", log_ratio=0.5)
    result.evidence = {"0.5.0": "1.01x [0.99-1.03] vs jax 0.4.30", "0.5.1": "1.60x [1.55-1.66] vs jax 0.4.30"}
    runs = {(v, m): _run(v, m, 0) for v in ("0.5.0", "0.5.1") for m in ("frozen", "retrace")}
    found = boundary_layer(result, runs, _apart, lambda a, b: {"changed": lowered, "text": "+1 op at m.py:3"},
                           "frozen")
    assert found["layer"] == layer and found["frozen"]["changed"] is True
    assert "1.60x [1.55-1.66]" in found["frozen"]["evidence"] and "untimed" in found["retraced"]["evidence"]


def test_a_faster_boundary_is_minimized_with_the_slower_release_second():
    result = BisectResult("0.4.30", "0.8.0", "time", first_bad="0.5.1", last_good="0.5.0", log_ratio=-0.2)
    (step,) = next_commands(result, {"layer": "compiler"}, "m")
    assert step["command"] == "reprobundle minimize m --jax 0.5.1 --jax 0.5.0 --slower"


@pytest.mark.crossversion
def test_bisect_names_the_lowering_when_the_retraced_numbers_change(store_dir):
    # threefry became partitionable in 0.5.0: the program lowers to other ops, the frozen module computes the same
    api.pack_script(str(PROGRAMS / "rng.py"), name="rng", store=str(store_dir), **quick.PACK)
    result, comparison = api.bisect("rng", "0.4.38", "0.5.1", store=str(store_dir), warmup=1, repeat=2, rounds=1)
    # no flag: the endpoints ran both ways, the frozen module computed the same bits, the retraced ones differed;
    # the outputs are bisected retraced, the frozen module's time is examined too, and the retraced program's (0.5.0
    # lowers it to other StableHLO: a slowdown there would not show in the frozen module) (with rounds=1 they tell
    # nothing apart: said as no regression, never the headline)
    assert result.mode == "retrace" and result.mode_why == (
        "bisected by outputs (retraced), then time (frozen), then time (retraced) unless the frozen module is found "
        "slower (the most severe first): the retraced program's outputs differ beyond the tolerance, and jax 0.5.1 "
        "lowers it to other StableHLO than jax 0.4.38; the frozen module's outputs are the same bit for bit")
    # the mode choice's retraced endpoints were the bisection's first probe, not run again
    assert [p["what"] for p in result.spent["probes"]][:3] == ["untimed", "untimed retrace", "untimed retrace"]
    assert result.spent["probes"][2]["versions"] != ["0.4.38", "0.5.1"]
    # packed on a release after 0.5.0, so 0.4.38 itself mismatches the reference: the endpoints differ from each
    # other, and each release is judged by whether its numbers are the good release's
    assert (result.criterion, result.first_bad, result.last_good) == ("outputs vs good", "0.5.0", "0.4.38")
    assert comparison["baseline"] == "0.4.38 retraced"
    # the frozen module's time (the same module on both: about 1.0x) is examined and, one round telling nothing
    # apart, said as no regression; a time change beside the headline only with its confirmation
    assert all(a["confirmation"]["confirmed"] for a in result.also if a["criterion"] == "time")
    assert sorted(s["mode"] for s in result.set_aside + result.also if s["criterion"] == "time") == [
        "frozen", "retrace"]
    layer = result.layer
    assert layer["layer"] == "lowering", layer
    assert layer["frozen"] == {"changed": False, "evidence": "outputs are jax 0.4.38's bit for bit"}
    assert layer["lowering"]["changed"] and "rng.py:8" in layer["lowering"]["text"]
    (step,) = layer["next"]
    assert step["what"] == "lowering diff" and step["command"].startswith(
        "reprobundle replay rng --jax 0.4.38 --jax 0.5.0 --retrace --baseline '0.4.38 retraced'")
    # the answer is a record beside the runs it rests on, and the issue body says it
    registry = api.open_registry(str(store_dir))
    bundle = registry.resolve("rng")
    (answer,) = registry.answers(bundle.ref.bundle_id)
    assert answer["answer_id"] == result.answer_id and answer["command"] == "reprobundle bisect rng --good 0.4.38 --bad 0.5.1"
    assert (answer["answer"]["first_bad"], answer["answer"]["mode"], answer["answer"]["layer"]["layer"]) == (
        "0.5.0", "retrace", "lowering")
    assert set(answer["runs"]) <= {r["run_id"] for r in registry.runs(bundle.ref.bundle_id)} and answer["runs"]
    from reprobundle.investigate.report.issue_facts import issue_data
    from reprobundle.render.issue import issue_markdown

    data = issue_data("rng", store=str(store_dir))
    assert "from jax 0.5.0 (last good 0.4.38; JAX's lowering)" in data["title"] and "rng.py:8" in issue_markdown(data)


@pytest.mark.crossversion
def test_bisect_by_bits_names_the_compiler_release_whose_last_bits_changed(store_dir):
    from cli_runner import cli

    api.pack_script(str(PROGRAMS / "colsum.py"), name="colsum", store=str(store_dir), **quick.PACK)
    code, out, err = cli("bisect", "colsum", "--good", "0.4.38", "--bad", "0.5.1", "--by", "bits", "--warmup", "1",
                         "--repeat", "2", "--rounds", "1", "--json", store=store_dir)
    assert code == 0, err
    data = json.loads(out)
    assert (data["criterion"], data["first_bad"], data["last_good"], data["by"]) == ("bits", "0.5.1", "0.5.0", "bits")
    assert data["classes"] == {"0.4.38": "good", "0.5.1": "bad", "0.5.0": "good"}
    # judged by bits: every probe ran each version once, untimed (the endpoints side by side), and said where its
    # time went; the JSON carries no raw samples
    spent = data["spent"]
    # (both ways at the endpoints, both show the bits: the retraced program, as the user runs it, is bisected; the
    # layer check replays the frozen pair at the boundary)
    assert [(p["what"], p["versions"], p["at_once"]) for p in spent["probes"]] == [
        ("untimed", ["0.4.38", "0.5.1"], 2), ("untimed retrace", ["0.4.38", "0.5.1"], 2),
        ("untimed retrace", ["0.5.0"], 1), ("untimed", ["0.5.0"], 1)]  # frozen 0.5.1: the survey's run, reused
    assert data["mode"] == "retrace" and data["mode_why"].startswith("bisected by bits (retraced) (--by bits): ")
    assert all(p["what"].startswith("untimed") and p["spent"]["start"] > 0 for p in spent["probes"])
    assert spent["wall_s"] >= spent["probe_wall_s"] > 0
    assert all("samples_ns" not in row and row["n"] >= 1 for row in data["comparison"]["rows"])
    assert data["why"] == "--by bits: the outputs of jax 0.4.38 and 0.5.1 differ in bits, within the tolerance"
    layer = data["layer"]
    # the same StableHLO on both sides (retraced by each), the frozen module's last bits changed: the compiler
    assert (layer["layer"], layer["lowering"]["changed"], layer["frozen"]["changed"]) == ("compiler", False, True)
    assert layer["next"] == [{"what": "minimize", "command": f"reprobundle minimize colsum --jax 0.5.0 --jax 0.5.1 "
                                                            f"--outputs --bits --store {store_dir}"}]
    # chosen by itself on the same bundle: time examined first (one round tells nothing apart: set aside, or a
    # change its confirmation reproduced), then the bits, found at the same release
    chosen, _ = api.bisect("colsum", "0.4.38", "0.5.1", store=str(store_dir), warmup=1, repeat=2, rounds=1,
                           layer=False)
    found = [(chosen.criterion, chosen.first_bad)] + [(a["criterion"], a["first_bad"]) for a in chosen.also]
    assert ("bits", "0.5.1") in found and chosen.criterion in ("bits", "time"), found
    assert chosen.criterion == "bits" or chosen.confirmation["confirmed"]


@pytest.mark.parametrize("frozen,retraced,mode,said", [
    ((("ok", 0), ("ok", 1)), None, "frozen", "frozen: the frozen module's outputs differ in bits"),
    ((("ok", 0), ("ok", 0)), (("ok", 0), ("ok", 1)), "retrace", "the frozen module computes the same bits on both, "
                                                                "and the program as each release lowers it gives "
                                                                "outputs that differ in bits"),
    ((("incompatible", 0), ("ok", 0)), (("ok", 0), ("ok", 0)), "retrace", "the frozen module does not run on both "
                                                                         "(jax 0.4.30 incompatible), and the program "
                                                                         "as each release lowers it runs on both"),
    ((("ok", 0), ("ok", 0)), (("ok", 0), ("ok", 0)), "frozen", "the retraced program's outputs are the same too, "
                                                              "so time decides on the frozen module"),
    ((("ok", 0), ("ok", 0)), "no program", "frozen", "frozen: cannot retrace it: no program"),
    ((("ok", 0), ("ok", 0)), (("error", 0, "retrace: 2 array leaves\ntraceback"), ("error", 0, "retrace: 2 array leaves")),
     "frozen", "the retraced program does not run on both (jax 0.4.30 error, jax 0.8.0 error: retrace: 2 array "
               "leaves)"),
])
def test_the_mode_is_chosen_from_the_endpoints_run_both_ways(frozen, retraced, mode, said):
    """bisect without --retrace or --frozen (investigate/search/mode_choice.py): retraced only when the retraced outputs tell
    the endpoints apart and the frozen ones do not (or the frozen module does not run); each run once."""
    from reprobundle.investigate.search.mode_choice import choose_mode

    asked = []

    def replay(runs):
        def together(versions):
            asked.append(list(versions))
            return [{"requested": v, "status": s, "bits": b, "reason": why[0] if why else None}
                    for v, (s, b, *why) in zip(versions, runs)]
        return together

    got = choose_mode("0.4.30", "0.8.0", replay(frozen), None if isinstance(retraced, str) else replay(retraced),
                      _apart, refusal="cannot retrace it: no program" if isinstance(retraced, str) else None)
    assert got[0] == mode and said in got[1], got
    assert asked == [["0.4.30", "0.8.0"]] * (1 if retraced is None or isinstance(retraced, str) else 2)


@pytest.mark.crossversion
def test_investigate_goes_from_two_releases_to_the_issue_body(store_dir, tmp_path):
    """`investigate` on a real lowering change with no flag: the bisection retraces by itself and names 0.5.0 and
    JAX's lowering; explain at the boundary retraces and names the JAX option whose default flipped there, with the
    line that restores the old numbers; minimize says why it does not apply to a lowering change; the issue body is
    written and says the release, the layer and the workaround from the answers stored on the way."""
    from cli_runner import cli

    api.pack_script(str(PROGRAMS / "rng.py"), name="rng", store=str(store_dir), **quick.PACK)
    issue = tmp_path / "rng-issue.md"
    report, page = tmp_path / "investigation.md", tmp_path / "investigation.html"
    code, out, err = cli("investigate", "rng", "--good", "0.4.38", "--bad", "0.5.1", "--issue", str(issue), "--json",
                         "--report", str(report), "--html", str(page), store=store_dir)
    assert code == 0, err
    data = json.loads(out)
    assert (data["first_bad"], data["layer"]) == ("0.5.0", "lowering")
    steps = {s["name"]: s for s in data["steps"]}
    # the headline's chain and its report first (#64), then the rest: its window, the frozen module's time, the
    # retraced program's (0.5.0 lowers it to other StableHLO), every release of the window run once (the changes of
    # outputs or bits no bisection saw)
    assert [s["name"] for s in data["steps"]][:10] == ["bisect", "explain", "commits", "minimize", "newest", "issue",
                                                       "search outputs (retraced)", "search time (frozen)",
                                                       "search time (retraced)", "run every release once"]
    assert data["left_at_report"] == ["other outputs changes between 0.4.38 and 0.5.1 (retraced)", "time (frozen)",
                                      "time (retraced)", "every release between 0.4.38 and 0.5.1 run once"]
    assert steps["commits"]["status"] == "skipped" and "--jax-repo" in steps["commits"]["answer"]  # no clone here
    assert steps["bisect"]["status"] == "answered" and steps["bisect"]["stored"]  # the answer record's id
    # what it looked at and why, in one line: both ways at the endpoints, every kind present, the most severe first
    assert data["chosen"].startswith("bisected by outputs (retraced), then time (frozen), then time (retraced) "
                                     "unless the frozen module is found slower (the most severe first): ")
    assert steps["bisect"]["answer"].endswith("; chosen: " + data["chosen"])
    assert steps["explain"]["status"] == "answered" and steps["explain"]["stored"]
    assert steps["explain"]["answer"].startswith("the default of jax_threefry_partitionable changed from False (jax "
                                                 "0.4.38) to True (jax 0.5.0)")
    assert steps["explain"]["command"] == ("reprobundle explain rng --jax 0.4.38 --jax 0.5.0 --retrace --by outputs "
                                           f"--store {store_dir}")
    assert steps["minimize"]["status"] == "skipped" and "lowering" in steps["minimize"]["answer"]
    assert steps["issue"]["stored"] == str(issue) and "from jax 0.5.0 (last good 0.4.38; JAX's lowering)" in steps["issue"]["answer"]
    body = issue.read_text()
    assert "### Which release, which layer" in body and "bisect: " in err  # progress on stderr
    assert "### Why, and a workaround" in body and 'jax.config.update("jax_threefry_partitionable", False)' in body
    markdown, html_page = report.read_text(), page.read_text()  # one report: each step, its time, its rerun command
    assert "First bad release: **0.5.0**; layer: **lowering**" in markdown and "Chosen: bisected by outputs" in markdown
    assert steps["explain"]["command"] in markdown and "| explain | answered |" in markdown
    assert "jax_threefry_partitionable" in html_page and "<h2>minimize</h2>" in html_page


# -- #48: a regression is the bad side worse; every change the endpoints show, the most severe first -------------

def test_a_faster_bad_end_is_no_regression_and_the_bits_are_what_is_bisected():
    """0.5.1 on is 0.7x the time (faster), the last bits change at 0.7.0: no release is called bad by time; the
    speedup is said as such and the bits are bisected."""
    replay_together, _ = _replayer(slow_from="0.5.1", bits_from="0.7.0", factor=0.7)
    found = bisect(VERSIONS, "0.4.30", "0.8.0", replay_together, outputs_differ=_apart)
    assert (found.criterion, found.first_bad, found.last_good) == ("bits", "0.7.0", "0.6.0")
    (aside,) = found.set_aside
    assert aside["criterion"] == "time" and aside["why"].startswith("jax 0.8.0 is 0.70x [")
    assert aside["why"].endswith("of jax 0.4.30's time: faster; nothing regressed by time"), aside
    assert found.why.endswith("differ in bits, within the tolerance: judged by bits")
    # asked for time, or nothing else differs: no first bad release, the speedup is the answer
    with pytest.raises(UsageError, match="faster; nothing regressed by time"):
        bisect(VERSIONS, "0.4.30", "0.8.0", replay_together, outputs_differ=_apart, by="time")
    same_bits, _ = _replayer(slow_from="0.5.1", bits_from="0.8.0", factor=0.7)
    with pytest.raises(UsageError, match="faster; nothing regressed by time"):
        bisect(VERSIONS, "0.4.30", "0.7.2", same_bits, outputs_differ=_apart)


def test_a_time_change_the_confirmation_does_not_reproduce_is_no_first_bad_release():
    """The bisection's probes (each beside the good end) see 0.5.1 on as slower, but timed again beside the last
    good release it is 1.0x: unconfirmed, set aside; the bits change that did reproduce is the answer."""
    from reprobundle.investigate.search.bisection import bisect_every_change, standing
    from reprobundle.investigate.search.mode_choice import bisect_each

    replay_together, calls = _replayer(slow_from="0.5.1", bits_from="0.7.0", only_beside="0.4.30")
    timed = bisect(VERSIONS, "0.4.30", "0.8.0", replay_together, outputs_differ=_apart, by="time")
    # a 1.15x slowdown: under 1.2x, so its confirmation times the last good release against itself too
    assert (timed.first_bad, timed.last_good) == ("0.5.1", "0.5.0") and calls[-1] == ["0.5.0", "0.5.1", CONTROL]
    assert not standing(timed) and timed.confirmation["why"].startswith("unconfirmed: jax 0.5.1 looked slower")
    assert "not a first bad release" in timed.confirmation["why"] and timed.confirmation["verdict"] != "slower"
    found = bisect_every_change(VERSIONS, "0.4.30", "0.8.0", replay_together, outputs_differ=_apart)
    assert (found.criterion, found.first_bad) == ("bits", "0.7.0")
    assert [(s["criterion"], s["first_bad"]) for s in found.set_aside] == [("time", "0.5.1")]
    # alone, it is no answer at all: nothing is named a first bad release
    with pytest.raises(UsageError, match="no change stood between the endpoints: time .frozen.: unconfirmed"):
        bisect_each([("frozen", "time")], lambda m, k: bisect(VERSIONS, "0.4.30", "0.8.0", replay_together,
                                                               outputs_differ=_apart, by=k), None, None)


def test_the_kinds_are_bisected_one_at_a_time_and_a_later_one_that_fails_is_a_line_not_the_end():
    """#64: mode_choice.standing_each runs plan's bisections one at a time, each yielded as it ends (investigate
    reports the first that stands before the next is run); after one stood, a later kind whose bisection fails
    (a worker that hung: ReplayError) is set aside with why, and the headline is kept; before any stood, the
    error is the answer."""
    from reprobundle.errors import ReplayError
    from reprobundle.investigate.search.mode_choice import bisect_each, standing_each

    replay_together, _ = _replayer(slow_from="0.5.1", bits_from="0.7.0")
    ran = []

    def run_one(mode, kind):
        ran.append(kind)
        if kind == "bits":
            raise ReplayError("jax 0.7.0: the worker ran past the limit of 61 s for 1 call during phase 'execute'")
        return bisect(VERSIONS, "0.4.30", "0.8.0", replay_together, outputs_differ=_apart, by=kind)

    set_aside: list[dict] = []
    steps = standing_each([("frozen", "time"), ("frozen", "bits")], run_one, None, "why", set_aside)
    at, first = next(steps)
    assert (at, first.criterion, first.first_bad) == (0, "time", "0.5.1") and ran == ["time"]  # nothing more yet
    assert list(steps) == [(1, None)] and ran == ["time", "bits"]
    assert set_aside == [{"criterion": "bits", "mode": "frozen", "why": "not bisected: jax 0.7.0: the worker ran "
                                                                         "past the limit of 61 s for 1 call during "
                                                                         "phase 'execute'"}]
    head = bisect_each([("frozen", "time"), ("frozen", "bits")], run_one, None, "why")
    assert head.first_bad == "0.5.1" and head.set_aside[0]["why"].startswith("not bisected: jax 0.7.0")
    with pytest.raises(ReplayError):  # nothing stood before it: the error is the answer
        bisect_each([("frozen", "bits"), ("frozen", "time")], run_one, None, "why")


def _outputs_from(first_bad: str):
    """A retraced program whose outputs move beyond the tolerance from `first_bad` on (untimed checks)."""
    def check(versions):
        return [{"requested": v, "status": "ok", "reason": "", "contender": {"mode": "retrace"},
                 "bits": int(VERSIONS.index(v) >= VERSIONS.index(first_bad))} for v in versions]
    return check


def _beyond(a: dict, b: dict) -> str:
    return SAME if a["bits"] == b["bits"] else "beyond"


def test_every_change_the_endpoints_show_is_bisected_the_most_severe_first():
    """The retraced outputs change at 0.6.0 (beyond the tolerance), the frozen module's time at 0.4.34: the survey
    of the endpoints finds both, the outputs are the headline and the slowdown is said beside it with its own
    first bad release; the plan says what it chose and why in one line."""
    from reprobundle.investigate.search.mode_choice import bisect_each, plan, survey

    frozen_timed, _ = _replayer(slow_from="0.4.34", bits_from="0.8.0", factor=1.5)
    def frozen_checks(versions):  # the frozen module: the same bits on every release
        return [{**run, "bits": 0} for run in frozen_timed(versions)]
    retraced = _outputs_from("0.6.0")
    found = survey("0.4.30", "0.8.0", {"frozen": frozen_checks, "retrace": retraced}, _beyond)
    assert {m: f["apart"] for m, f in found.items()} == {"frozen": SAME, "retrace": "beyond"}
    steps, why = plan(found, None)
    assert steps == [("retrace", "outputs"), ("frozen", "time")]
    assert why.startswith("bisected by outputs (retraced), then time (frozen) (the most severe first): the retraced "
                          "program's outputs differ beyond the tolerance; the frozen module's outputs are the same")

    def run_one(mode, kind):
        if mode == "retrace":
            return bisect(VERSIONS, "0.4.30", "0.8.0", retraced, outputs_differ=_beyond, by=kind)
        return bisect(VERSIONS, "0.4.30", "0.8.0", frozen_timed, outputs_differ=_apart, by=kind)

    head = bisect_each(steps, run_one, None, why)
    assert (head.criterion, head.first_bad, head.last_good, head.mode) == ("outputs vs good", "0.6.0", "0.5.1",
                                                                          "retrace")
    assert head.by is None and not head.why.startswith("--by") and head.mode_why == why
    (slower,) = head.also
    assert (slower["criterion"], slower["mode"], slower["first_bad"], slower["last_good"]) == (
        "time", "frozen", "0.4.34", "0.4.33")
    assert head.set_aside == [] and head.also_runs  # the slowdown's runs go with the answer
    # --by narrows it to one kind; a frozen module that shows only bits has them bisected after time
    assert plan(found, "time")[0] == [("frozen", "time")]
    bits = {"frozen": {"apart": BITS_ONLY, "said": "b"}, "retrace": {"apart": "beyond", "said": "o"}}
    assert plan(bits, None)[0] == [("retrace", "outputs"), ("frozen", "time"), ("frozen", "bits")]
    assert plan(bits, "bits")[0] == [("retrace", "bits")]  # --by bits: any difference, the retraced first
    unrunnable = {"frozen": {"apart": None, "said": "f"}, "retrace": {"apart": SAME, "said": "r"}}
    assert plan(unrunnable, None)[0] == [("retrace", "time")]  # timed where it runs


def test_a_slowdown_of_jaxs_lowering_is_looked_for_in_the_retraced_program_where_the_lowering_changed():
    """The frozen module keeps its time and its bits; the program as the later releases lower it (other StableHLO
    from 0.6.0 on) is 1.5x slower from 0.6.0 and changes its last bits there. Time on the frozen module alone would
    say nothing about it (a slowdown of JAX's lowering never shows there): where the survey's retraced runs were
    lowered to other StableHLO, the retraced program's time is screened too, after the frozen module's, and its
    slowdown is the headline. Where the lowering is the same, or unknown, time stays on the frozen module alone;
    where the frozen module's own slowdown stood, the second look is skipped (its screen says so), never listed."""
    from reprobundle.investigate.search.mode_choice import bisect_each, plan, screened, survey

    frozen_timed, _ = _replayer(slow_from="0.4.30", bits_from="0.4.30", factor=1.0)  # nothing moves
    retraced, _ = _replayer(slow_from="0.6.0", bits_from="0.6.0", factor=1.5)

    def lowering(a: dict, b: dict) -> bool:  # what the survey's two retraced runs' StableHLO say
        return (VERSIONS.index(a["requested"]) >= VERSIONS.index("0.6.0")) != (
            VERSIONS.index(b["requested"]) >= VERSIONS.index("0.6.0"))

    found = survey("0.4.30", "0.8.0", {"frozen": frozen_timed, "retrace": retraced}, _apart, lowering)
    assert found["retrace"]["lowered"] is True and "frozen" in found and "lowered" not in found["frozen"]
    assert found["retrace"]["said"].endswith(", and jax 0.8.0 lowers it to other StableHLO than jax 0.4.30")
    steps, why = plan(found, None)
    assert steps == [("frozen", "time"), ("retrace", "time"), ("retrace", "bits")]
    assert why.startswith("bisected by time (frozen), then time (retraced) unless the frozen module is found slower, "
                          "then bits (retraced) ")
    # the same survey where the releases lower it alike (or it is not known): time on the frozen module alone
    for same in (lambda a, b: False, lambda a, b: None):
        alike = survey("0.4.30", "0.8.0", {"frozen": frozen_timed, "retrace": retraced}, _apart, same)
        assert plan(alike, None)[0] == [("frozen", "time"), ("retrace", "bits")]
    # screened: beside another kind, every time step; time alone (asked for or not), the retraced look only (the
    # frozen module's time measured in full); asked for another kind, none
    screens: list[str] = []

    def screen(mode: str) -> dict:
        screens.append(mode)
        return {"seen": "slower" if mode == "retrace" else "same", "said": f"{mode} screened", "good": "0.4.30",
                "bad": "0.8.0", "ratio": 1.0, "interval": [0.98, 1.02], "rounds": 3, "not_ruled_out": 1.05,
                "noise": 0.01}

    assert screened(steps, None, screen) is screen and screened(steps, "bits", screen) is None
    for by in (None, "time"):
        only_time = screened([("frozen", "time"), ("retrace", "time")], by, screen)
        assert only_time is not None and only_time("frozen") is None
        assert only_time("retrace")["said"] == "retrace screened"
    assert screened([("frozen", "time")], None, screen) is None
    screens.clear()

    def run_one(mode, kind):
        return bisect(VERSIONS, "0.4.30", "0.8.0", frozen_timed if mode == "frozen" else retraced,
                      outputs_differ=_apart, by=kind)

    head = bisect_each(steps, run_one, None, why, screen_time=screened(steps, None, screen))
    assert screens == ["frozen", "retrace"]  # the frozen module's screen saw nothing: only the retraced time bisected
    assert (head.criterion, head.mode, head.first_bad, head.last_good) == ("time", "retrace", "0.6.0", "0.5.1")
    assert [(a["criterion"], a["mode"], a["first_bad"]) for a in head.also] == [("bits", "retrace", "0.6.0")]
    assert [(s["criterion"], s["mode"]) for s in head.set_aside] == [("time", "frozen")]
    # the frozen module 1.5x slower from 0.4.34 too, measured in full (time the only kind): it stands, and the
    # retraced look is skipped as KindSearches.screen skips it (no second bisection of one slowdown, nothing listed)
    slower_frozen, _ = _replayer(slow_from="0.4.34", bits_from="0.4.30", factor=1.5)
    stood: list = []
    said: list[str] = []

    def run_both(mode, kind):
        found = bisect(VERSIONS, "0.4.30", "0.8.0", slower_frozen if mode == "frozen" else retraced,
                       outputs_differ=_apart, by=kind)
        stood.append(mode)
        return found

    def second_look(mode: str) -> dict:
        return {"skip": "the frozen module's slowdown stands"} if "frozen" in stood else screen(mode)

    time_only = [("frozen", "time"), ("retrace", "time")]
    head = bisect_each(time_only, run_both, None, "why", said.append, screened(time_only, None, second_look))
    assert stood == ["frozen"] and (head.mode, head.first_bad) == ("frozen", "0.4.34")
    assert head.also == [] and head.set_aside == []
    assert "bisect: time (retrace) not looked at: the frozen module's slowdown stands" in said


def test_the_survey_reads_whether_the_lowering_changed_from_the_retraced_runs_stablehlo(small_store_template,
                                                                                          tmp_path):
    """probes.lowered_differently on a real store: the same program with other locations and value names is the
    same lowering, another op is another; a run without its StableHLO (a frozen run), or whose blob the store lacks,
    says nothing (None), and the survey then keeps time on the frozen module alone."""
    from small_bundle import copy_of

    from reprobundle.investigate.search.probes import lowered_differently

    registry = api.open_registry(str(copy_of(small_store_template, tmp_path / "store")))
    module = ('module @jit_f {{\n  func.func public @main(%arg0: tensor<4xf32> loc("x")) -> tensor<4xf32> {{\n'
              '    %0 = stablehlo.{op} %arg0 : tensor<4xf32> loc({loc})\n    return %0 : tensor<4xf32>\n  }}\n}}\n')

    def run(text: str | None) -> dict:
        return {"artifacts": {} if text is None else
                {"stablehlo_retraced": {"blob": registry.put_blob(text.encode()), "media_type": "text/plain"}}}

    differently = lowered_differently(registry)
    sine = run(module.format(op="sine", loc='"f.py":3:0'))
    assert differently(sine, run(module.format(op="sine", loc='"f.py":4:2'))) is False
    assert differently(sine, run(module.format(op="cosine", loc='"f.py":3:0'))) is True
    assert differently(sine, run(None)) is None
    lost = {"artifacts": {"stablehlo_retraced": {"blob": {"digest": "sha256:" + "0" * 64, "size": 1}}}}
    assert differently(sine, lost) is None


@pytest.mark.crossversion
def test_a_program_faster_on_the_later_release_is_never_a_regression(store_dir):
    """Retraced, 0.5.0 runs 40 laps of its loop and 0.5.1 one (tests/programs/retrace/faster_later.py: about a tenth
    of the time on any machine), and the column sum's last bits change with 0.5.1's compiler: the speedup is said as
    one and nothing is called bad by time; the bits are the answer."""
    from cli_runner import cli

    api.pack_script(str(PROGRAMS / "faster_later.py"), name="fl", store=str(store_dir), **quick.PACK)
    code, out, err = cli("bisect", "fl", "--good", "0.5.0", "--bad", "0.5.1", "--retrace", "--warmup", "1",
                         "--rounds", "3", "--no-layer", "--json", store=store_dir)
    assert code == 0, err
    data = json.loads(out)
    assert (data["criterion"], data["first_bad"], data["mode"]) == ("bits", "0.5.1", "retrace"), data["why"]
    (faster,) = data["set_aside"]
    assert (faster["criterion"], faster["mode"]) == ("time", "retrace")
    assert faster["why"].startswith("jax 0.5.1 is 0.") and "faster" in faster["why"], faster
    assert "nothing regressed by time" in faster["why"] and data["also"] == []
    assert data["mode_why"].startswith("bisected by time (retraced), then bits (retraced) (the most severe first)")
    # asked for time: no first bad release, the speedup is the answer
    code, out, err = cli("bisect", "fl", "--good", "0.5.0", "--bad", "0.5.1", "--retrace", "--by", "time",
                         "--warmup", "1", "--rounds", "3", "--no-layer", store=store_dir)
    assert code != 0 and "faster" in err and "nothing regressed by time" in err, err
    assert "first bad release" not in out


@pytest.mark.crossversion
def test_outputs_retraced_at_one_release_and_bits_frozen_at_another_are_both_bisected_outputs_first(store_dir):
    """tests/programs/retrace/rng_colsum.py: its retraced numbers change beyond the tolerance at 0.5.0 (JAX's
    lowering), its frozen module's last bits at 0.5.1 (the compiler). With no flag, both are bisected, each to its
    own release, the outputs change the headline; the frozen time was examined too, in one round (nothing here is
    about time: a screen of one round judges nothing and sets it aside, where three rounds could see noise as a
    slowdown on a loaded machine and bisect it), never the headline."""
    api.pack_script(str(PROGRAMS / "rng_colsum.py"), name="rc", store=str(store_dir), **quick.PACK)
    result, _ = api.bisect("rc", "0.4.38", "0.5.1", store=str(store_dir), warmup=1, repeat=2, rounds=1)
    assert (result.criterion, result.first_bad, result.last_good, result.mode) == ("outputs vs good", "0.5.0",
                                                                                   "0.4.38", "retrace")
    # the retraced program's time is looked at too: 0.5.0 lowers it to other StableHLO (threefry)
    assert result.mode_why.startswith("bisected by outputs (retraced), then time (frozen), then time (retraced) "
                                      "unless the frozen module is found slower, then bits (frozen)")
    bits = [a for a in result.also if a["criterion"] == "bits"]
    assert [(a["mode"], a["first_bad"], a["last_good"]) for a in bits] == [("frozen", "0.5.1", "0.5.0")]
    timed = [a for a in result.also if a["criterion"] == "time"] + [
        s for s in result.set_aside if s["criterion"] == "time"]
    assert sorted(t["mode"] for t in timed) == ["frozen", "retrace"]
    assert result.layer["layer"] == "lowering"  # the headline's boundary
    assert [c.layer["layer"] for c in result.changes if c.criterion == "bits"] == ["compiler"]  # each its own layer
    registry = api.open_registry(str(store_dir))
    answers = registry.answers(registry.resolve("rc").ref.bundle_id)  # each change's own, the headline's last
    answer = answers[-1]
    assert answer["answer_id"] == result.answer_id and len(answers) == 1 + len(result.changes)
    assert [a["first_bad"] for a in answer["answer"]["also"] if a["criterion"] == "bits"] == ["0.5.1"]
    assert [(c["kind"], c["first_bad"]) for c in answer["answer"]["changes"]][:1] == [("outputs", "0.5.0")]


def test_the_answer_says_each_other_change_and_what_is_no_regression_on_a_line_of_its_own():
    from reprobundle.render.listing import bisect_text

    result = BisectResult("0.4.30", "0.8.0", "outputs vs good", first_bad="0.6.0", last_good="0.5.1",
                          classes={"0.4.30": "good", "0.8.0": "bad"},
                          also=[{"criterion": "time", "mode": "frozen", "first_bad": "0.4.34", "last_good": "0.4.33",
                                 "why": "w", "evidence": "1.50x [1.45-1.55] vs jax 0.4.30 timed beside it: slower"}],
                          set_aside=[{"criterion": "bits", "mode": "retrace", "why": "line\nbreak"}])
    lines = bisect_text(result, "m", None, False).splitlines()
    assert "  also: time (frozen) changed at jax 0.4.34 (last good 0.4.33): 1.50x [1.45-1.55] vs jax 0.4.30 timed " \
           "beside it: slower" in lines
    assert "  no regression: bits (retraced): line\\nbreak" in lines  # a record's text stays on its line


# -- #57: time only what the answer needs; #56: a confirmation measures anew ----------------------------------------

def test_the_time_screen_sees_a_slowdown_beyond_its_noise_and_says_what_it_cannot_rule_out():
    from reprobundle.analysis.time_screen import screen

    slower = screen([0.30, 0.28, 0.33])  # 1.35x, a round's noise of ~2.5%
    assert slower["seen"] == "slower" and 1.3 < slower["ratio"] < 1.4 and slower["not_ruled_out"] is None
    faster = screen([-0.7, -0.72, -0.69, -0.71])
    assert faster["seen"] == "faster" and faster["interval"][1] < 1
    noisy = screen([0.05, -0.04, 0.08, -0.02, 0.03])  # no slowdown beyond a round's noise of ~5%
    assert noisy["seen"] == "same" and noisy["rounds"] == 5 and 0.04 < noisy["noise"] < 0.06
    assert noisy["interval"][0] < 1 < noisy["not_ruled_out"] == noisy["interval"][1]
    tiny = screen([0.01, 0.012, 0.011])  # certain, but under 2%: no slowdown
    assert tiny["seen"] == "same"
    assert screen([0.3])["seen"] is None and screen([])["rounds"] == 0  # one round: no noise to judge by


def test_an_outputs_change_screens_time_and_bisects_it_only_where_the_screen_sees_a_slowdown():
    """The retraced outputs change at 0.6.0; the frozen module is 1.5x slower from 0.4.34 on, or the same. With no
    flag, time is a screen after the outputs' bisection: only a slowdown it sees beyond its noise is bisected (and
    confirmed by a probe that measures anew); one it does not see is said with what it could not rule out. Asked
    for time, or where nothing else changed, time is measured in full and never screened."""
    from reprobundle.investigate.search.mode_choice import bisect_each, time_screen

    retraced = _outputs_from("0.6.0")
    for factor, bisected in ((1.5, True), (1.0, False)):
        frozen_timed, calls = _replayer(slow_from="0.4.34", bits_from="0.8.0", factor=factor)
        order: list[str] = []

        def run_one(mode, kind, frozen_timed=frozen_timed):
            order.append(kind)
            if mode == "retrace":
                return bisect(VERSIONS, "0.4.30", "0.8.0", retraced, outputs_differ=_beyond, by=kind)
            return bisect(VERSIONS, "0.4.30", "0.8.0", frozen_timed, outputs_differ=_apart, by=kind,
                          confirm_with=frozen_timed)

        def screen_time(mode, frozen_timed=frozen_timed):
            order.append("screen")
            return time_screen("0.4.30", "0.8.0", frozen_timed)

        head = bisect_each([("retrace", "outputs"), ("frozen", "time")], run_one, None, "w", screen_time=screen_time)
        assert (head.criterion, head.first_bad) == ("outputs vs good", "0.6.0")
        assert order[:2] == ["outputs", "screen"]  # the outputs first: never held back by the screen
        if bisected:
            assert order == ["outputs", "screen", "time"] and head.set_aside == []
            (slower,) = head.also
            assert (slower["criterion"], slower["first_bad"]) == ("time", "0.4.34")
            assert slower["confirmation"]["confirmed"]
        else:
            assert order == ["outputs", "screen"] and head.also == [] and calls == [["0.4.30", "0.8.0"]]
            (aside,) = head.set_aside
            assert aside["criterion"] == "time" and aside["screen"]["rounds"] == ROUNDS
            assert aside["why"].startswith("jax 0.8.0 is 1.0") and " in a screen of 5 paired rounds (" in aside["why"]
            assert "no slowdown beyond the noise; a slowdown under 1.0" in aside["why"]
            assert "is not ruled out: the screen's noise was " in aside["why"]
    # asked for time, or time alone: no screen
    asked = []
    bisect_each([("frozen", "time")], lambda m, k: bisect(VERSIONS, "0.4.30", "0.8.0", _replayer("0.4.34", "0.8.0")[0],
                                                          outputs_differ=_apart, by=k), None, "w",
                screen_time=lambda mode: asked.append(mode) or {})
    bisect_each([("retrace", "outputs"), ("frozen", "time")],
                lambda m, k: bisect(VERSIONS, "0.4.30", "0.8.0", retraced if m == "retrace" else
                                    _replayer("0.4.34", "0.8.0")[0], outputs_differ=_beyond, by=k), "time", "w",
                screen_time=lambda mode: asked.append(mode) or {})
    assert asked == []


def test_a_confirmation_is_a_measurement_of_its_own():
    """The confirmation's pair is the endpoints here (nothing lies between 0.4.31 and 0.4.33): its probe measures
    anew, and its figures are its own, never the endpoints' repeated; a probe that hands back the bisection's own
    runs is refused."""
    timed, calls = _replayer(slow_from="0.4.33", bits_from="0.8.0")
    fresh, fresh_calls = _replayer(slow_from="0.4.33", bits_from="0.8.0", seed=100)  # new processes, new rounds
    remembered: dict = {}

    def remembering(versions):
        return remembered.setdefault(tuple(versions), timed(versions))

    r = bisect(VERSIONS, "0.4.31", "0.4.33", remembering, outputs_differ=_apart, by="time", confirm_with=fresh)
    # a 1.15x slowdown: under 1.2x, so the endpoints are timed again beside the good release against itself (an A/A
    # control in the same rounds), and so is the confirmation
    control = control_of("0.4.31")
    assert calls == [["0.4.31", "0.4.33"], ["0.4.31", "0.4.33", control]]
    assert fresh_calls == [["0.4.31", "0.4.33", control]]
    assert r.confirm_runs[1] is not r.runs["0.4.33"] and r.confirmation["confirmed"]
    assert r.confirmation["ratio"] != pytest.approx(r.ends_verdict["ratio"], rel=1e-9)
    with pytest.raises(AssertionError, match="must measure anew"):
        bisect(VERSIONS, "0.4.31", "0.4.33", remembering, outputs_differ=_apart, by="time")


@pytest.mark.crossversion
def test_a_slowdown_the_screen_sees_is_bisected_and_confirmed_by_rounds_of_its_own(store_dir):
    """tests/programs/retrace/slower_later.py retraced: 0.5.1 runs 200 laps of its loop where 0.5.0 runs one (tens
    of times the time on any machine: settled in 4 paired rounds even at load 12 on 2 cores), and its bits change there too. The bits change the endpoints show makes time a
    bounded screen, which sees the slowdown; only then are the endpoints timed in full, and the confirmation times
    the same pair again in processes and rounds of its own: its runs and its figures are not the endpoints'."""
    api.pack_script(str(PROGRAMS / "slower_later.py"), name="sl", store=str(store_dir), **quick.PACK)
    result, _ = api.bisect("sl", "0.5.0", "0.5.1", store=str(store_dir), mode="retrace", warmup=1, repeat=32,
                           rounds=4, layer=False)
    assert [(a["criterion"], a["first_bad"]) for a in [vars(result), *result.also] if a["criterion"] == "bits"] == [
        ("bits", "0.5.1")]
    probes = [(p["what"], p["versions"]) for p in result.spent["probes"]]
    assert probes[:3] == [("untimed retrace", ["0.5.0", "0.5.1"]), ("screen retrace", ["0.5.0", "0.5.1"]),
                          ("timed retrace", ["0.5.0", "0.5.1"])], probes  # the screen saw it: timed in full
    # the endpoints settled as slower (a verdict, so it rests on the machine: under heavy load the full measurement
    # may not settle it, said then as no regression) go to the confirmation, a measurement of its own
    confirmation = result.confirmation if result.criterion == "time" else next(
        (s.get("confirmation") for s in result.set_aside if s["criterion"] == "time"), None)
    if confirmation is None:
        assert "confirm retrace" not in [what for what, _ in probes]
        return
    # (on a busy machine the confirmation also times 0.5.0 against itself: an A/A control, its runs apart)
    assert probes[3][0] == "confirm retrace" and probes[3][1][:2] == ["0.5.0", "0.5.1"]
    assert probes[3][1][2:] in ([], [control_of("0.5.0")]) and len(confirmation["run_ids"]) == 2
    assert not set(confirmation["run_ids"]) & {r["run_id"] for r in result.runs.values()}
    # two measurements, two figures (the endpoints' verdict is the answer's own where time is its headline; where
    # the confirmation set the slowdown aside, as a busy machine's control may, the headline is the bits)
    ends = result.ends_verdict if result.criterion == "time" else None
    assert ends is None or confirmation["ratio"] != ends["ratio"]
    assert confirmation["why"].startswith(("confirmed: jax 0.5.1 timed again beside jax 0.5.0: ",
                                           "unconfirmed: jax 0.5.1 looked slower in the bisection"))


@pytest.mark.crossversion
def test_investigate_starts_no_work_past_max_time_and_keeps_what_it_answered(store_dir, tmp_path):
    """colsum's bits change at 0.5.1. With --max-time 30 s, whatever this machine manages in them: every probe of
    the bisection started with time left (from the steps' recorded start times, not the wall clock), no later step
    started past it, and a bisection the time ended says so: unfinished, or failed for --max-time, never a
    traceback; what it answered is stored."""
    api.pack_script(str(PROGRAMS / "colsum.py"), name="colsum", store=str(store_dir), **quick.PACK)
    budget = 30.0
    found = api.investigate("colsum", "0.5.0", "0.5.1", store=str(store_dir), max_time_s=budget,
                            issue_path=tmp_path / "colsum-issue.md")
    data = found.data()
    assert data["max_time_s"] == budget
    bisected, *later = data["steps"]
    assert bisected["name"] == "bisect" and bisected["started_s"] == 0.0 and bisected["probes"]
    assert all(p["at_s"] < budget for p in bisected["probes"]), bisected["probes"]
    assert all(s["started_s"] is None or s["started_s"] < budget for s in later
               if not s["name"].startswith("issue")), later
    if bisected["status"] == "failed":  # the time ran out before any answer
        assert "--max-time 30 s spent" in bisected["answer"]
        assert all(s["status"] == "skipped" for s in later)
        return
    assert bisected["status"] == "answered" and found.first_bad == "0.5.1" and bisected["stored"]
    assert (tmp_path / "colsum-issue.md").exists()


def test_a_headline_slowdown_explain_does_not_settle_is_unsettled_not_a_first_bad_release():
    from reprobundle.investigate.chain import Investigation, _settled_again
    from reprobundle.render.listing import investigation_text

    result = BisectResult("0.8.0", "0.9.0", "time", first_bad="0.9.0", last_good="0.8.2")
    out = Investigation("p", "0.8.0", "0.9.0", first_bad="0.9.0")  # (no steps: the text says "commit")
    _settled_again(out, result, {"verdict": "slower", "ratio": 1.09, "ci95": [1.06, 1.12], "settled": True})
    assert out.unsettled is None and out.first_bad == "0.9.0"  # settled again: it stands
    _settled_again(out, result, {"verdict": "same", "ratio": 1.03, "ci95": [0.99, 1.07], "settled": False})
    assert out.first_bad is None and out.unsettled.startswith("unsettled: jax 0.9.0 looked slower than jax 0.8.2")
    assert "1.030x [0.990-1.070] (same, not settled)" in out.unsettled
    assert "first bad commit (none)" in investigation_text(out.data()) and out.unsettled in investigation_text(
        out.data())
    outputs = Investigation("p", "0.8.0", "0.9.0", first_bad="0.9.0")
    _settled_again(outputs, BisectResult("0.8.0", "0.9.0", "outputs", "0.9.0", "0.8.2"), None)
    assert outputs.first_bad == "0.9.0" and outputs.unsettled is None  # only a slowdown is settled by time
