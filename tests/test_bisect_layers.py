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
from reprobundle.investigate.bisection import BITS_ONLY, SAME, BisectResult, bisect
from reprobundle.investigate.boundary import boundary_layer, boundary_runs, next_commands

PROGRAMS = Path(__file__).parent / "programs" / "retrace"
VERSIONS = ["0.4.30", "0.4.31", "0.4.33", "0.4.34", "0.5.0", "0.5.1", "0.6.0", "0.7.0", "0.7.2", "0.8.0"]
ROUNDS, STEPS = 5, 10


def _replayer(slow_from: str, bits_from: str):
    """Versions timed together: 15% slower from `slow_from` on, other last bits of their outputs from `bits_from`
    on (each run carries its outputs' bits as a number the comparison below reads)."""
    calls = []

    def replay_together(versions):
        calls.append(list(versions))
        rng = np.random.default_rng(len(calls))
        drift = np.exp(0.3 * np.cumsum(rng.standard_normal(ROUNDS * STEPS)) / 10)
        runs = []
        for v in versions:
            median = 11.5 if VERSIONS.index(v) >= VERSIONS.index(slow_from) else 10.0
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
    from reprobundle.investigate.bisection import bisect_every_change

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

    def probe_for(m, timed=True):
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
    # no flag: the endpoints ran both ways, the frozen module computed the same bits, the retraced ones differed
    assert result.mode == "retrace" and result.mode_why == (
        "retraced: the frozen module computes the same bits on both, and the program as each release lowers it gives "
        "outputs that differ beyond the tolerance")
    # the mode choice's retraced endpoints were the bisection's first probe, not run again
    assert [p["what"] for p in result.spent["probes"]][:3] == ["untimed", "untimed retrace", "untimed retrace"]
    assert result.spent["probes"][2]["versions"] != ["0.4.38", "0.5.1"]
    # packed on a release after 0.5.0, so 0.4.38 itself mismatches the reference: the endpoints differ from each
    # other, and each release is judged by whether its numbers are the good release's
    assert (result.criterion, result.first_bad, result.last_good) == ("outputs vs good", "0.5.0", "0.4.38")
    assert comparison["baseline"] == "0.4.38 retraced"
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
    from reprobundle.investigate.issue import issue_data
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
    assert [(p["what"], p["versions"], p["at_once"]) for p in spent["probes"]] == [
        ("untimed", ["0.4.38", "0.5.1"], 2), ("untimed", ["0.5.0"], 1), ("untimed retrace", ["0.5.0", "0.5.1"], 2)]
    assert all(p["what"].startswith("untimed") and p["spent"]["start"] > 0 for p in spent["probes"])
    assert spent["wall_s"] >= spent["probe_wall_s"] > 0
    assert all("samples_ns" not in row and row["n"] >= 1 for row in data["comparison"]["rows"])
    assert data["why"] == "--by bits: the outputs of jax 0.4.38 and 0.5.1 differ in bits, within the tolerance"
    layer = data["layer"]
    # the same StableHLO on both sides (retraced by each), the frozen module's last bits changed: the compiler
    assert (layer["layer"], layer["lowering"]["changed"], layer["frozen"]["changed"]) == ("compiler", False, True)
    assert layer["next"] == [{"what": "minimize", "command": f"reprobundle minimize colsum --jax 0.5.0 --jax 0.5.1 "
                                                            f"--outputs --bits --store {store_dir}"}]
    # chosen by itself on the same bundle, the bisection does not judge by bits, and says that they differ
    try:
        chosen, _ = api.bisect("colsum", "0.4.38", "0.5.1", store=str(store_dir), warmup=1, repeat=2, rounds=1,
                               layer=False)
        said = chosen.why  # the one-round time verdict happened to settle: judged by time
        assert chosen.criterion == "time"
    except UsageError as e:
        said = f"{e} {e.hint}"
    assert "the outputs of jax 0.4.38 and 0.5.1 differ in bits, within the tolerance" in said and "--by bits" in said


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
])
def test_the_mode_is_chosen_from_the_endpoints_run_both_ways(frozen, retraced, mode, said):
    """bisect without --retrace or --frozen (investigate/mode_choice.py): retraced only when the retraced outputs tell
    the endpoints apart and the frozen ones do not (or the frozen module does not run); each run once."""
    from reprobundle.investigate.mode_choice import choose_mode

    asked = []

    def replay(runs):
        def together(versions):
            asked.append(list(versions))
            return [{"requested": v, "status": s, "bits": b} for v, (s, b) in zip(versions, runs)]
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
    assert [s["name"] for s in data["steps"]] == ["bisect", "explain", "minimize", "issue"]
    assert steps["bisect"]["status"] == "answered" and steps["bisect"]["stored"]  # the answer record's id
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
    assert "First bad release: **0.5.0**; layer: **lowering**" in markdown
    assert steps["explain"]["command"] in markdown and "| explain | answered |" in markdown
    assert "jax_threefry_partitionable" in html_page and "<h2>minimize</h2>" in html_page
