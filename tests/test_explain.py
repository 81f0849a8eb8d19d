"""Explaining a regression (#20): contenders under settings, the per-pass dump diff, explain's experiments and
diagnosis, replays at several sizes. The cross-version tests use the cached 0.7.2 and 0.8.0 environments and assert
structure (which pass acted where, which experiment reached the baseline's HLO, that a verdict with an interval
exists), never which way the time went."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import quick

import reprobundle
from reprobundle import api
from reprobundle.analysis.diagnosis import CAUSE, NO_REGRESSION, NOT_SEPARATED, NOT_SETTLED, PARTIAL, WORKAROUND, diagnose
from reprobundle.analysis.passes import canonical, pass_diff, read_pipeline, same_hlo
from reprobundle.bundle.dims import parse_size_lists, several_sizes
from reprobundle.errors import UsageError
from reprobundle.investigate.explain.experiments import Evidence, plan
from reprobundle.render import explain as explain_render
from reprobundle.render import sizes as sizes_render
from reprobundle.run.contenders import parse_variant, unknown_flag_reason
from reprobundle.worker.settings import parse_config_value

# ------------------------------------------------------------------------------------------------ pure parts

MODULE = """HloModule jit_f, entry_computation_layout={{(f32[4]{{0}})->f32[4]{{0}}}}

%fused_computation.{n} (param_0.{n}: f32[4]) -> f32[4] {{
  %param_0.{n} = f32[4]{{0}} parameter(0)
  ROOT %exp.{n} = f32[4]{{0}} exponential(%param_0.{n}), metadata={{op_name="jit(f)/exp" source_line={n}}}
}}

ENTRY %main.{n} (x.{n}: f32[4]) -> f32[4] {{
  %x.{n} = f32[4]{{0}} parameter(0)
  ROOT %{op}.{n} = f32[4]{{0}} {body}
}}
"""


def _module(n: int, wrapped: bool) -> str:
    body = f"fusion(%x.{n}), kind=kLoop, calls=%fused_computation.{n}" if wrapped else f"exponential(%x.{n})"
    return MODULE.format(n=n, op="fusion" if wrapped else "exp", body=body)


def test_canonical_ignores_names_ids_and_metadata():
    assert canonical(_module(1, False)) == canonical(_module(7, False))
    assert same_hlo(_module(1, True), _module(9, True)) is True
    assert same_hlo(_module(1, True), _module(1, False)) is False
    assert same_hlo(_module(1, True), None) is None


def _dumps(steps: list[tuple[str, str, str, str]]) -> dict[str, bytes]:
    """{file name: text} for (pipeline, after, before, text) in pipeline order, as XLA names them."""
    return {f"module_0003.jit_f.{i:04d}.{pipe}.after_{after}.before_{before}.txt": text.encode()
            for i, (pipe, after, before, text) in enumerate(steps)}


def test_pass_diff_names_the_pass_acting_only_on_the_candidate_and_where_the_modules_diverge():
    plain, wrapped = _module(1, False), _module(2, True)
    baseline = _dumps([("opt", "pipeline-start", "algsimp", plain), ("opt", "algsimp", "fusion-wrapper", plain + " "),
                       ("late", "pipeline-start", "dce", _module(3, False))])
    candidate = _dumps([("opt", "pipeline-start", "algsimp", _module(4, False)),
                        ("opt", "fusion-wrapper", "dce", wrapped)])
    d = pass_diff(read_pipeline(baseline), read_pipeline(candidate))
    by_name = {p["name"]: p for p in d["passes"]}
    # algsimp's file only renamed things on the baseline (XLA said "changed"): not a change
    assert "algsimp" not in by_name
    fw = by_name["fusion-wrapper"]
    assert fw["candidate"] and not fw["baseline"] and fw["baseline_runs"]  # it ran on the baseline, changing nothing
    assert d["divergence"]["candidate"]["pass"] == "fusion-wrapper"
    assert d["divergence"]["candidate"]["effect"] == {"exponential": -1, "fusion": 1}
    assert "fusion-wrapper" in d["summary"]
    assert pass_diff(None, read_pipeline(candidate))["note"].startswith("no per-pass dump from the baseline")


def _verdict(ratio, verdict, settled=True, lo=None, hi=None):
    return {"verdict": verdict, "ratio": ratio, "ci95": [lo or ratio * 0.98, hi or ratio * 1.02], "settled": settled}


def _experiment(setting, vs, hlo_same=False, fusions_same=False, status="ok", outputs_ok=True):
    return {"label": f"0.8.0 [{setting}]", "setting": setting, "status": status, "outputs_ok": outputs_ok,
            "hlo_same_as_baseline": hlo_same, "fusions_same_as_baseline": fusions_same, "vs_baseline": vs,
            "moved": ""}


def test_diagnosis_claims_only_what_an_experiment_showed():
    slower = _verdict(1.17, "slower")
    fix = _experiment("XLA_FLAGS=--a", _verdict(1.0, "same"))
    located = _experiment("XLA_FLAGS=--b", _verdict(1.16, "slower"), hlo_same=True, fusions_same=True)
    d = diagnose("0.7.2", "0.8.0", slower, [fix])
    assert d["kind"] == WORKAROUND and d["workaround"] is fix and "XLA_FLAGS=--a restores 1.00x" in d["summary"]
    d = diagnose("0.7.2", "0.8.0", slower, [located])
    assert d["kind"] == CAUSE and "not in an HLO pass" in d["summary"] and d["workaround"] is None
    fusions_only = _experiment("XLA_FLAGS=--c", _verdict(1.16, "slower"), fusions_same=True)
    d = diagnose("0.7.2", "0.8.0", slower, [fusions_only])
    assert d["kind"] == CAUSE and "not in an HLO pass" not in d["summary"] and "fusion" in d["summary"]
    # unsettled, a mismatch, a failure: no claim
    unsure = _experiment("XLA_FLAGS=--d", _verdict(1.0, "same", settled=False))
    wrong = _experiment("XLA_FLAGS=--e", _verdict(1.0, "same"), outputs_ok=False)
    failed = _experiment("XLA_FLAGS=--f", None, status="error", outputs_ok=None)
    d = diagnose("0.7.2", "0.8.0", slower, [unsure, wrong, failed])
    assert d["kind"] == NOT_SEPARATED and "3 experiments measured did not separate them" in d["summary"]
    # every experiment screened out: none measured, said as such (not "the 0 experiments measured")
    screened = [dict(e, measured=False) for e in (unsure, wrong)]
    d = diagnose("0.7.2", "0.8.0", slower, screened)
    assert d["kind"] == NOT_SEPARATED and d["summary"].startswith(
        "0.8.0 is 1.17x") and ", and no experiment was measured (the 2 experiments tried screened out: they did not " \
        "move them toward the baseline): none restored 0.7.2's time" in d["summary"], d["summary"]
    assert diagnose("0.7.2", "0.8.0", _verdict(1.0, "same"), [fix])["kind"] == NO_REGRESSION


def test_a_workaround_whose_rounds_rule_out_a_5_percent_slowdown_restores_at_the_tools_resolution():
    """Explain's rounds stop once each contender is answered at the 5% the design has power for (budget's
    `slowdown_only`): a workaround whose rounds ruled out a 5% slowdown beside the baseline restores its time, said
    with the rounds that did, where nothing shows it slower; not one shown slower, nor one ruled out of nothing."""
    import numpy as np

    from reprobundle.analysis.resolution import slowdown_ruled_out
    from reprobundle.investigate.explain.experiments import add_ruled_out, row_verdict

    def timing(medians):  # one step a round, paired with the baseline's by the group
        return {"samples_ns": [int(m) for m in medians], "steps": [1] * len(medians), "rounds": [1] * len(medians),
                "group": "g"}

    rng = np.random.default_rng(0)
    base = 1e6 * np.exp(rng.normal(0, 0.01, 12))
    level, slow = base * np.exp(rng.normal(0, 0.005, 12)), base * 1.3 * np.exp(rng.normal(0, 0.005, 12))
    assert slowdown_ruled_out(timing(base), timing(level)) is not None
    assert slowdown_ruled_out(timing(base), timing(slow)) is None
    assert slowdown_ruled_out(timing(base), {**timing(level), "group": "other"}) is None  # not timed together
    runs = [{"label": lbl, "status": "ok", "timing": timing(t), "requested": lbl, "contender": {"label": lbl}}
            for lbl, t in (("0.4.31", base), ("0.4.33", slow), ("0.4.33 [XLA_FLAGS=--a]", level))]
    rows = [{"label": "0.4.33", **_verdict(1.3, "slower")},
            {"label": "0.4.33 [XLA_FLAGS=--a]", **_verdict(1.0, "same", settled=False, lo=0.97, hi=1.06)}]
    add_ruled_out(rows, runs)
    assert "ruled_out" not in rows[0] and rows[1]["ruled_out"] >= 3
    fixed = row_verdict(rows[1])
    d = diagnose("0.4.31", "0.4.33", _verdict(1.3, "slower"), [_experiment("XLA_FLAGS=--a", fixed)])
    assert d["kind"] == WORKAROUND and (f"XLA_FLAGS=--a restores 1.00x [0.97-1.06] of 0.4.31's time (a slowdown of 5% "
                                        f"ruled out in {fixed['ruled_out']} rounds), outputs ok") in d["summary"]
    shown = {**fixed, **_verdict(1.03, "slower", lo=1.02, hi=1.04)}  # settled 1.03x slower: no restore
    assert diagnose("0.4.31", "0.4.33", _verdict(1.3, "slower"), [_experiment("XLA_FLAGS=--a", shown)])["kind"] \
        != WORKAROUND
    unsure = {k: v for k, v in fixed.items() if k != "ruled_out"}
    assert diagnose("0.4.31", "0.4.33", _verdict(1.3, "slower"), [_experiment("XLA_FLAGS=--a", unsure)])["kind"] \
        != WORKAROUND


def test_experiments_judged_against_the_confirmed_change_restore_only_where_nothing_shows_them_slower():
    """In an investigation explain's measurement stops each contender once the test between the confirmed ends says
    its side (chain._explain_step gives it the confirmation's ends): the candidate like the first bad release is the
    slowdown to explain, settled or not; an experiment like the last good release restores it only where its own
    interval does not show it slower at all (half of a 4x slowdown is the last good release's side, and no
    workaround)."""
    sided_bad = {**_verdict(4.3, "same", settled=False, lo=3.0, hi=6.0), "side": "bad"}
    like_good = {**_verdict(1.01, "same", settled=False, lo=0.95, hi=1.08), "side": "good",
                 "side_said": "the test between the confirmed ends (4.40x, 1% error each way) decided in 1 round"}
    d = diagnose("0.4.31", "0.4.33", sided_bad, [_experiment("XLA_FLAGS=--a", like_good)])
    # decided in 1 round: said by its side alone, no figure (#63 item 7); from 3 rounds on, with the figure
    assert d["kind"] == WORKAROUND and "XLA_FLAGS=--a restores 0.4.31's time: like 0.4.31, not 0.4.33 (the test " \
        "between the confirmed ends (4.40x, 1% error each way) decided in 1 round), outputs ok" in d["summary"], \
        d["summary"]
    three = {**like_good, "rounds": 3, "side_said": like_good["side_said"].replace("1 round", "3 rounds")}
    d = diagnose("0.4.31", "0.4.33", sided_bad, [_experiment("XLA_FLAGS=--a", three)])
    assert d["kind"] == WORKAROUND and "XLA_FLAGS=--a restores 1.01x [0.95-1.08] of 0.4.31's time (like 0.4.31, " \
        "not 0.4.33: the test between the confirmed ends (4.40x, 1% error each way) decided in 3 rounds), " \
        "outputs ok" in d["summary"], d["summary"]
    half = {**_verdict(2.0, "slower", settled=True, lo=1.9, hi=2.1), "side": "good"}
    half_unsettled = {**_verdict(2.0, "same", settled=False, lo=1.5, hi=2.6), "side": "good"}
    for v in (half, half_unsettled):
        assert diagnose("0.4.31", "0.4.33", sided_bad, [_experiment("XLA_FLAGS=--b", v)])["kind"] != WORKAROUND
    # without a side the verdict alone judges, as before
    assert diagnose("0.4.31", "0.4.33", {**sided_bad, "side": None}, [])["kind"] == NOT_SETTLED


def test_where_a_workaround_still_works_is_judged_by_its_side_of_the_confirmed_change_too():
    """The reach in an investigation (release_reach._reach_result): the workaround on a later release like the last
    good one restores, like the first bad one is ignored; a release alone shown slower is never "nothing to undo"."""
    from reprobundle.investigate.explain.release_reach import _reach_result

    slow = {**_verdict(4.3, "same", settled=False, lo=3.5, hi=5.0), "side": "bad"}
    good = {**_verdict(1.02, "same", settled=False, lo=0.96, hi=1.09), "side": "good",
            "side_said": "the test between the confirmed ends (4.40x, 1% error each way) decided in 1 round"}
    found = _reach_result("0.4.35", "0.4.31", slow, good, None)
    assert found == {"result": "restores", "text": "0.4.35: restores (like 0.4.31, not 0.4.35 (the test between the "
                     "confirmed ends (4.40x, 1% error each way) decided in 1 round))"}  # no figure from 1 round
    three = {**good, "rounds": 3, "side_said": good["side_said"].replace("1 round", "3 rounds")}
    assert _reach_result("0.4.35", "0.4.31", slow, three, None) == {
        "result": "restores", "text": "0.4.35: restores (1.02x [0.96-1.09] of 0.4.31's time (like 0.4.31, not "
        "0.4.35: the test between the confirmed ends (4.40x, 1% error each way) decided in 3 rounds))"}
    still = {**_verdict(4.2, "same", settled=False, lo=3.4, hi=5.1), "side": "bad"}
    assert _reach_result("0.4.35", "0.4.31", slow, still, None)["result"] == "ignored"
    half = {**_verdict(1.5, "same", settled=False, lo=1.3, hi=1.7), "side": "good"}
    assert _reach_result("0.4.35", "0.4.31", half, good, None)["result"] == "restores"  # not "nothing to undo"
    gone = {**_verdict(1.0, "same", settled=False, lo=0.95, hi=1.05), "side": "good"}
    assert _reach_result("0.4.35", "0.4.31", gone, good, None)["result"] == "nothing to undo"
    # a release alone 1.02x, leaning slower, whose rounds ruled out a 5% slowdown: nothing to undo at this resolution
    small = {**_verdict(1.02, "slower", settled=False, lo=0.99, hi=1.04), "ruled_out": 6}
    assert _reach_result("0.4.35", "0.4.31", small, good, None)["result"] == "nothing to undo"
    assert _reach_result("0.4.35", "0.4.31", {**small, "ruled_out": None}, good, None)["result"] != "nothing to undo"
    # like the last good release, yet shown slower than it: most of the change undone, not all (#63)
    most = {**_verdict(1.27, "same", settled=False, lo=1.2, hi=1.34), "side": "good", "side_said": good["side_said"],
            "rounds": 3}
    found = _reach_result("0.4.35", "0.4.31", slow, most, None)
    assert found["result"] == "partly" and found["text"].startswith("0.4.35: helps partly (1.27x [1.20-1.34] of 0.4.31's "
                                                                    "time (like 0.4.31, not 0.4.35: the test between")
    found = _reach_result("0.4.35", "0.4.31", slow, {**most, "rounds": 1}, None)  # 1 round: no figure
    assert found["result"] == "partly" and found["text"].startswith("0.4.35: helps partly (like 0.4.31, not 0.4.35 (")


def test_each_timed_contender_gets_its_side_of_the_confirmed_change_on_its_row():
    """explain's measurement in an investigation: every contender beside the baseline's run gets the side the test
    between the confirmed ends says (what its rounds were stopped by), the baseline none; one it cannot place none."""
    from timed_runs import timed_run

    from reprobundle.analysis.which_end import Ends
    from reprobundle.investigate.explain.experiments import add_sides, row_verdict

    runs = [timed_run("0.4.31", "e", [1.0] * 3, "b", 1), timed_run("0.4.33", "e", [3.8] * 3, "c", 2),
            timed_run("0.4.33", "e", [1.01] * 3, "x", 3, label="0.4.33 [XLA_FLAGS=--a]"),
            timed_run("0.4.33", "e", [1.95, 1.95, 1.95], "m", 4, label="0.4.33 [XLA_FLAGS=--m]")]
    rows = [{"label": label, "verdict": "x"} for label in ("0.4.31", "0.4.33", "0.4.33 [XLA_FLAGS=--a]",
                                                           "0.4.33 [XLA_FLAGS=--m]")]
    ends = Ends.of([1.33, 1.34, 1.35])
    assert ends is not None
    add_sides(rows, runs, ends.as_data())
    assert [r.get("side") for r in rows] == [None, "bad", "good", None]
    assert row_verdict(rows[2])["side_said"].startswith("the test between the confirmed ends (3.82x, 1% error")
    assert "side" not in row_verdict({"label": "0.4.33", "verdict": "slower"})


def test_the_while_loops_investigation_names_the_thunk_runtime_as_its_cause_however_its_rounds_end():
    """#63: the while loop, 147x slower from 0.4.33. In an investigation explain's rounds end once the test between
    the confirmed ends says every contender's side (here at the third round), before the group-sequential verdicts
    can settle anything (at 3 rounds |t| must reach ~32); `--xla_cpu_use_thunk_runtime=false` brought 0.4.33 to
    ~1.27x of 0.4.31's time, like 0.4.31 and not 0.4.33, yet shown slower than 0.4.31: it is named as the cause,
    partial, with its figure and how it was decided, and its line to paste; never "did not separate them". Judged
    on built runs (tests/timed_runs.py) through explain's own steps: the comparison, the sides, the facts, the
    verdicts against the candidate, the diagnosis, the lines."""
    import math
    import re

    from timed_runs import timed_run

    from reprobundle.analysis.comparison import build_comparison
    from reprobundle.analysis.which_end import Ends
    from reprobundle.investigate.explain import experiments as E
    from reprobundle.investigate.explain.default_experiments import DefaultChange, experiment_spec
    from reprobundle.investigate.search.bisection import SAME
    from reprobundle.render.change_table import names_a_cause
    from reprobundle.run.contenders import ContenderSpec
    from reprobundle.run.replay_options import ReplayOptions

    change = DefaultChange("flag", "xla_cpu_use_thunk_runtime", False, True, "0.4.31", "0.4.33", "bool")
    exp = E.Experiment("default", "--xla_cpu_use_thunk_runtime", change.sentence(),
                     experiment_spec(change, ContenderSpec("0.4.33"), "frozen"), change)
    # the candidate's rounds spread as a busy machine's do; the experiment's about 1.27x
    runs = [timed_run("0.4.31", "w", [1.0] * 3, "b", 1), timed_run("0.4.33", "w", [90.0, 147.0, 240.0], "c", 2),
            timed_run("0.4.33", "w", [1.20, 1.27, 1.34], "x", 3, label=exp.spec.label)]

    def compare(measured, base):
        return build_comparison({}, measured, base, hlo_texts={}, outputs={})

    ends = Ends.of([math.log(r) for r in (110.0, 146.81, 196.0)])  # the confirmation's rounds
    assert ends is not None
    comparison = compare(runs, "0.4.31")
    E.add_sides(comparison["rows"], runs, ends.as_data())
    rows = {r["label"]: r for r in comparison["rows"]}
    facts = E.experiment_facts(exp, runs[2], rows, {}, None, None, SAME)
    setup = E.Setup(replay_fn=lambda *a, **k: [], compare_fn=compare, platform="cpu", options=ReplayOptions())
    E._against_candidate([facts], runs, setup)
    regression = E.row_verdict(rows["0.4.33"])
    # what the rounds gave: nothing settled, every side decided
    assert not regression["settled"] and regression["side"] == "bad"
    assert not facts["vs_baseline"]["settled"] and facts["vs_baseline"]["side"] == "good"
    assert facts["vs_candidate"]["verdict"] != "faster" or not facts["vs_candidate"]["settled"]
    d = diagnose("0.4.31", "0.4.33", regression, [facts])
    assert d["kind"] == PARTIAL and d["partial"] is facts and d["default"]["name"] == "xla_cpu_use_thunk_runtime"
    assert names_a_cause(d)
    assert d["summary"].startswith("the default of --xla_cpu_use_thunk_runtime changed from false (jaxlib 0.4.31) to "
                                   "true (jaxlib 0.4.33); with --xla_cpu_use_thunk_runtime=false, 0.4.33 runs 1.2"), d
    assert re.search(r" of 0\.4\.31's time instead of 147\.05x \[[\d.-]+\] \(like 0\.4\.31, not 0\.4\.33: the test "
                     r"between the confirmed ends \(146\.83x, 1% error each way\) decided in \d rounds?\), outputs ok: "
                     r"part of the change, not shown to be all of it$", d["summary"]), d["summary"]
    E._add_reach(d, [exp], setup, (ContenderSpec("0.4.31"), ContenderSpec("0.4.33")), "time")  # no reach asked here
    assert d["lines"] == {"XLA_FLAGS": 'XLA_FLAGS="$XLA_FLAGS --xla_cpu_use_thunk_runtime=false"'}
    # an experiment still like the first bad release is no part of the change
    still = {**facts, "vs_baseline": {**facts["vs_baseline"], "ratio": 140.0, "side": "bad"}}
    assert diagnose("0.4.31", "0.4.33", regression, [still])["kind"] == NOT_SEPARATED


def test_a_large_slowdown_too_few_rounds_settled_is_never_called_no_regression():
    """The user's case: ~100x slower, 3 rounds timed (the budget went elsewhere), the group-sequential test not
    settled (at 3 rounds |t| must reach ~32). The verdict stays unsettled, and nothing calls it "no regression" or
    "not measurably different": the diagnosis, replay's headline and bisect say it leans slower and what settles it."""
    import math

    from reprobundle.analysis import comparison as C
    from reprobundle.analysis.diagnosis import NOT_SETTLED
    from reprobundle.analysis.verdict import _sequential

    hundredfold = _sequential([math.log(105) + x for x in (-0.3, 0.0, 0.3)], 0.02)
    assert hundredfold["verdict"] == "same" and hundredfold["settled"] is False  # the test's own answer, unchanged
    d = diagnose("0.4.31", "0.4.33", hundredfold, [_experiment("XLA_FLAGS=--a", _verdict(1.0, "same"))])
    assert d["kind"] == NOT_SETTLED and d["workaround"] is None
    assert "105.00x the time in 3 rounds, slower in the whole interval" in d["summary"]
    assert "but not settled" in d["summary"]
    assert "no regression" not in d["summary"] and "not measurably" not in d["summary"]
    base = {"label": "0.4.31", "requested": "0.4.31", "jax": "0.4.31", "status": "ok", "median_ns": 1000,
            "ratio": 1.0, "together": True}
    row = {**base, "label": "0.4.33", "requested": "0.4.33", "jax": "0.4.33", "median_ns": 105000,
           **{k: hundredfold[k] for k in ("ratio", "verdict", "ci95", "p_value", "rounds", "settled", "equivalence")},
           "decided_at": None}
    headline = C.headlines([base, row], base)[0]
    assert headline["direction"] == "unsettled" and headline["text"].startswith("jax 0.4.33 leans slower than")
    assert "not measurably different" not in headline["text"]
    # an unsettled verdict whose interval holds 1 is still what it was
    near = _sequential([math.log(1.01) + x for x in (-0.3, 0.0, 0.3)], 0.02)
    assert diagnose("0.4.31", "0.4.33", near, [])["kind"] == NO_REGRESSION


def test_plan_disables_the_candidates_own_passes_and_toggles_related_flags():
    passes = {"passes": [{"name": "fusion-wrapper", "baseline": False, "candidate": True, "effect_differs": False},
                         {"name": "algsimp", "baseline": True, "candidate": True, "effect_differs": False}],
              "divergence": {"candidate": {"pass": "fusion-wrapper"}}, "identical": False}
    exps = plan(Evidence(passes, None, ["reduce-window"]), parse_variant("0.8.0:X=1"), "cpu")
    assert exps[0].kind == "pass" and exps[0].spec.settings.xla_flags == ("--xla_disable_hlo_passes=fusion-wrapper",)
    assert exps[0].spec.settings.env == (("X", "1"),)  # the candidate's own settings stay
    assert not any(e.what == "algsimp" for e in exps)
    flags = [e.what for e in exps if e.kind == "flag"]
    assert "--xla_cpu_use_fusion_emitters=false" in flags and not any("gpu" in f for f in flags)
    assert all("gpu" in e.what for e in plan(Evidence(passes, None, ["dot"]), parse_variant("0.8.0:X=1"), "cuda")
               if e.kind == "flag")


def test_config_values_take_the_options_type_and_unknown_flags_are_read_from_xla():
    assert parse_config_value(False, "true") is True and parse_config_value(0, "3") == 3
    assert parse_config_value(None, "highest") == "highest" and parse_config_value(1.0, "2") == 2.0
    with pytest.raises(ValueError):
        parse_config_value(True, "maybe")
    tail = "F1201 parse_flags_from_env.cc:234] Unknown flag in XLA_FLAGS: --xla_bogus=1\n*** SIGABRT"
    assert "--xla_bogus=1" in unknown_flag_reason(tail) and unknown_flag_reason("Segmentation fault") is None


def test_several_sizes():
    assert several_sizes(["seq=128,256"]) and not several_sizes(["seq=128"])
    assert parse_size_lists(["seq=128, 256", "b=2"]) == [{"seq": 128, "b": 2}, {"seq": 256, "b": 2}]
    with pytest.raises(UsageError):
        parse_size_lists(["seq=128,x"])


# ------------------------------------------------------------------------------------------------ across releases


@pytest.fixture(scope="module")
def attention_store(tmp_path_factory):
    from attention import make_small

    store = str(tmp_path_factory.mktemp("explain") / "store")
    fn, args = make_small()
    reprobundle.pack(fn, *args, name="attention-small", store=store, **quick.PACK)
    return store


def test_explains_screen_and_phases_start_nothing_that_would_end_past_max_time():
    """#57: the screen leaves the measurement its room: an experiment is not screened where it would leave less than
    the measurement's estimate (the evidence's wall time); the ledger estimates a kind not seen yet by its first word
    ("evidence retrace" as the frozen evidence took). No clock: the seconds left are given."""
    from reprobundle.investigate.explain.experiment_screen import no_time
    from reprobundle.run.spent import Ledger

    assert no_time(None, [5.0], 30.0) is None and no_time(lambda: None, [5.0], 30.0) is None  # no bound
    assert no_time(lambda: 100.0, [], 30.0) is None  # the first: while more than the reserve is left
    assert no_time(lambda: 40.0, [4.0, 6.0, 20.0], 30.0) is None  # 40 - 6 > 30
    said = no_time(lambda: 35.0, [4.0, 6.0, 20.0], 30.0)
    assert said.startswith("not screened: --max-time: 35 s left, a screen takes ~6 s") and "~30 s" in said
    assert no_time(lambda: 30.0, [], 30.0) is not None
    ledger = Ledger(max_time_s=3600.0)
    ledger.record("evidence", ["0.4.31", "0.4.33"], 12.0, {})
    assert ledger.expected("evidence retrace") == 12.0 and ledger.expected("experiments") == 0.0
    ledger.record("evidence retrace", ["0.4.31", "0.4.33"], 20.0, {})
    assert ledger.expected("evidence retrace") == 20.0 and ledger.expected("evidence") == 12.0


@pytest.mark.crossversion
def test_explain_with_no_time_for_its_evidence_ends_with_one_line_and_runs_nothing(attention_store):
    """#57: explain --max-time too small for its first replay: TimeSpentError, said in one line, nothing run."""
    from cli_runner import cli

    registry, bundle = reprobundle.api.resolve("attention-small", attention_store)
    before = len(registry.runs(bundle.ref.bundle_id))
    code, _, err = cli("explain", "attention-small", "--jax", "0.4.31", "--jax", "0.4.33", "--max-time", "0.000001",
                       store=attention_store)
    assert code != 0 and "--max-time 1e-06 s spent" in err and "Traceback" not in err, err
    assert len(registry.runs(bundle.ref.bundle_id)) == before


@pytest.mark.crossversion
def test_settings_reach_only_their_contender_and_an_unknown_flag_is_that_contenders_error(attention_store):
    runs = api.replay("attention-small", ["0.8.0"], store=attention_store, warmup=1, repeat=2, rounds=1,
                      profile=False, variants=["0.8.0:XLA_FLAGS=--xla_disable_hlo_passes=fusion-wrapper;"
                                               "XLA_REPROBUNDLE_TEST=on;jax_enable_x64=false",
                                               "0.7.2:XLA_FLAGS=--xla_no_such_flag_anywhere=1"]).runs
    plain, variant, unknown = runs
    assert plain["status"] == variant["status"] == "ok", (plain["reason"], variant["reason"])
    assert unknown["status"] == "error" and "--xla_no_such_flag_anywhere=1" in unknown["reason"]
    assert variant["contender"]["settings"]["xla_flags"] == ["--xla_disable_hlo_passes=fusion-wrapper"]
    assert "fusion-wrapper" in variant["contender"]["label"]
    # the environment variable and the config option reached the variant's worker only
    assert variant["environment"]["env_vars"].get("XLA_REPROBUNDLE_TEST") == "on"
    assert "XLA_REPROBUNDLE_TEST" not in plain["environment"]["env_vars"]
    assert any("jax.config.update('jax_enable_x64', False)" in n for n in variant["notes"])
    assert not any("contender settings" in n for n in plain["notes"])
    # the flag reached XLA in the variant only: its fusions are 0.8.0's without the wrapped ones
    registry = api.open_registry(attention_store)
    hlo = {r["run_id"]: registry.get_blob(r["artifacts"]["hlo_after"]["blob"]).decode() for r in (plain, variant)}
    assert "wrapped_" in hlo[plain["run_id"]] and "wrapped_" not in hlo[variant["run_id"]]
    comparison = api.replay_comparison(api.ReplayResult(registry, registry.resolve("attention-small"), runs))
    assert "--variant 0.8.0:" in comparison["reproduce"]["command"].replace("'", "")


def test_flags_applied_at_compile_share_the_process_and_a_refused_option_is_that_contenders_error(tmp_path):
    # explain measures an experiment whose flag acts at compile in the candidate's process (ContenderSpec.at_compile)
    from reprobundle.run.contenders import ContenderSpec, Settings
    from reprobundle.run.execution import Timing
    from reprobundle.run.replay import replay

    store = str(tmp_path / "store")
    reprobundle.pack(jax.jit(_tiny_loop), np.ones(4, np.float32), np.float32(1e-3), name="loop", store=store,
                     **quick.PACK)
    unoptimized = ContenderSpec("installed", settings=Settings(("--xla_disable_all_hlo_passes=true",)),
                                at_compile=(("xla_disable_all_hlo_passes", True),))
    bogus = ContenderSpec("installed", settings=Settings(("--xla_reprobundle_no_such_option=1",)),
                          at_compile=(("xla_reprobundle_no_such_option", 1),))
    registry = api.open_registry(store)
    plain, unopt, refused = replay(registry, registry.resolve("loop"), [ContenderSpec("installed"), unoptimized, bogus],
                                       timing=Timing(warmup=1, repeat=2), rounds=1, profile=False)
    assert plain["status"] == unopt["status"] == "ok", (plain["reason"], unopt["reason"])
    assert refused["status"] == "error" and "XLA did not compile with the options" in refused["reason"]
    assert "xla_reprobundle_no_such_option=1" in refused["reason"]
    assert unopt["environment"]["conditions"]["compile_options"] == {"xla_disable_all_hlo_passes": True}
    assert unopt["environment"]["conditions"]["workers"] == "shared"  # one process served all three
    assert "compile_options" not in plain["environment"]["conditions"]
    # what a user pastes is recorded, not how the worker applied it
    assert unopt["contender"]["settings"]["xla_flags"] == ["--xla_disable_all_hlo_passes=true"]
    # the option reached the compile: no HLO pass ran on its module
    hlo = {r["run_id"]: registry.get_blob(r["artifacts"]["hlo_after"]["blob"]).decode() for r in (plain, unopt)}
    assert hlo[plain["run_id"]] != hlo[unopt["run_id"]]


@pytest.mark.crossversion
def test_explain_attention_names_fusion_wrapper_and_its_experiment(attention_store, tmp_path):
    # the pass experiments' mechanics, all measured (the release delta and the screen have tests of their own)
    result = api.explain("attention-small", ["0.7.2", "0.8.0"], store=attention_store, warmup=1, repeat=6, rounds=3,
                         release_delta=False, screen=False)
    fw = next(p for p in result["passes"] if p["name"] == "fusion-wrapper")
    assert fw["candidate"] and not fw["baseline"]
    exp = next(e for e in result["experiments"] if e["what"] == "fusion-wrapper")
    assert exp["kind"] == "pass" and exp["status"] == "ok" and exp["outputs_ok"]
    assert exp["fusions_same_as_baseline"] is True
    v = exp["vs_baseline"]
    assert v["verdict"] in ("slower", "faster", "same") and v["ci95"][0] <= v["ratio"] <= v["ci95"][1]
    assert result["diagnosis"]["kind"] in (WORKAROUND, CAUSE, NOT_SEPARATED, NO_REGRESSION, NOT_SETTLED, PARTIAL)
    assert result["diagnosis"]["summary"]
    workaround = result["diagnosis"]["workaround"]
    if workaround:  # the Reproduce block replays it
        assert "--variant" in result["reproduce"]["command"]
    data = explain_render.explain_data(result)
    json.dumps(data, default=str)
    assert "fusion-wrapper" in explain_render.to_text(data) and "fusion-wrapper" in explain_render.to_markdown(data)
    assert "<table" in explain_render.to_html(data)


@pytest.mark.crossversion
def test_symbolic_bundle_at_three_sizes_gives_a_table_and_a_chart(tmp_path):
    from jax import export

    def f(x, w):
        return jax.nn.softmax(x @ w, axis=-1)

    seq, = export.symbolic_shape("seq")
    exp = export.export(jax.jit(f))(jax.ShapeDtypeStruct((seq, 16), jnp.float32),
                                    jax.ShapeDtypeStruct((16, 16), jnp.float32))
    rng = np.random.default_rng(0)
    store = str(tmp_path / "store")
    reprobundle.pack(exp, rng.standard_normal((8, 16), dtype=np.float32), rng.standard_normal((16, 16), dtype=np.float32),
                     name="poly", store=store, **quick.PACK)
    data = api.replay_sizes("poly", ["0.7.2", "0.8.0"], ["seq=32,64,128"], store=store, warmup=1, repeat=3, rounds=3,
                            profile=False, dump=False)
    assert [s["shape"] for s in data["sizes"]] == ["seq=32", "seq=64", "seq=128"]
    for size in data["sizes"]:
        (row,) = size["rows"]
        assert row["label"] == "0.8.0" and row["status"] == "ok" and row["ratio"] and row["ci95"]
        assert row["outputs"] == "ok"
    text = sizes_render.to_text(data)
    assert all(s in text for s in ("seq=32", "seq=64", "seq=128"))
    page = sizes_render.to_html(data)
    assert page.count("<circle") == 3 and "<polyline" in page and "http" not in page.replace(
        "http://www.w3.org/2000/svg", "")
    assert sizes_render.to_markdown(data).count("| seq=") == 3


def test_where_the_time_moved_reports_a_fusion_change_as_a_change_not_a_cause():
    from reprobundle.analysis.comparison import moved_line
    from reprobundle.render.comparison import fusion_note

    base = {"label": "0.7.2", "median_ns": 1.0e6, "ratio": 1.0, "verdict": "baseline"}
    row = {"label": "0.8.0", "median_ns": 1.2e6, "ratio": 1.2, "verdict": "slower"}
    top = {"base_name": "reduce-window", "cand_name": "wrapped_reduce-window", "signature": "reduce-window",
           "match": "wrapped", "source": "attention.py:25", "base_ns": 1e5, "cand_ns": 3e5, "delta_ns": 2e5,
           "ratio": 3.0}
    diff = {"per_op": [top], "moved_row": top, "moved_how": "explains", "fusion": {"identical": False}}
    line = moved_line(row, base, diff)
    assert "most moved: reduce-window -> wrapped_reduce-window" in line
    assert "its fusion changed too (wrapped): a change, not shown to be the cause" in line
    assert "reprobundle explain" in line
    same_fusion = {**top, "match": "name", "cand_name": "reduce-window"}
    assert "not shown to be the cause" not in moved_line(row, base, {**diff, "per_op": [same_fusion],
                                                                     "moved_row": same_fusion})
    assert "not why" in fusion_note({"identical": False}) and fusion_note({"identical": True}) == ""


def test_cli_refuses_what_explain_and_variant_cannot_use(tmp_path):
    from cli_runner import cli

    code, _, err = cli("explain", "anything", "--jax", "0.8.0", store=tmp_path / "store")
    assert code == UsageError.exit_code and "two different versions" in err
    code, _, err = cli("replay", "anything", "--variant", "0.8.0", store=tmp_path / "store")
    assert code == UsageError.exit_code and "is not JAX:NAME=VALUE" in err


def test_a_sweep_of_one_function_at_several_signatures_gives_its_ratio_by_size():
    from reprobundle.fleet.executor import result_skeleton
    from reprobundle.render import sweep as sweep_render

    def result(ref, seq, ratio, function="attention"):
        return {**result_skeleton(ref, ["0.7.2", "0.8.0"]), "function": function, "ratio": ratio,
                "ci95": [ratio * 0.95, ratio * 1.05], "verdict": "slower" if ratio > 1.05 else "same", "settled": True,
                "input_shapes": [f"float32[1,{seq},512]", "float32[512,512]"], "wall_s": 1.0, "host": "h"}

    data = {"results": [result("attention@3", 512, 1.2), result("attention@1", 128, 1.0),
                        result("attention@2", 256, 1.1), result("other@1", 8, 1.0, "other")],
            "baseline": "0.7.2", "candidate": "0.8.0", "jax": {}, "counts": {
                "total": 4, "slower": 2, "faster": 0, "same": 2, "unjudged": 0, "mismatch": 0, "failed": 0,
                "stored": 0}, "store": "s", "executor": "local", "options": {}, "rerun": False}
    (by_size,) = sizes_render.sweep_sizes(data)
    assert by_size["bundle"] == "attention"
    assert [s["shape"] for s in by_size["sizes"]] == ["float32[1,128,512] (attention@1)",
                                                      "float32[1,256,512] (attention@2)",
                                                      "float32[1,512,512] (attention@3)"]
    text = sweep_render.to_text(data)
    assert "attention: time against 0.7.2 by size" in text and "1.20x [1.14-1.26]" in text
    page = sweep_render.to_html(data)
    assert page.count("<circle") == 3 and "by size" in page
    assert "attention: time against 0.7.2 by size" in sweep_render.to_markdown(data)


def test_a_contenders_secret_settings_are_masked_where_they_are_recorded():
    spec = parse_variant("0.8.0:XLA_FLAGS=--xla_gpu_cuda_data_dir=/x/ghp_AAAABBBBCCCCDDDDEEEEFFFFGGGGHHHH1234 "
                         "--xla_cpu_use_xnnpack=false;HF_TOKEN=abc;JAX_PLATFORM_NAME=cpu")
    shown = spec.redacted()
    assert "ghp_" not in shown.label and "abc" not in shown.label
    assert "--xla_cpu_use_xnnpack=false" in shown.label and "JAX_PLATFORM_NAME=cpu" in shown.label
    assert spec.settings.env == (("HF_TOKEN", "abc"), ("JAX_PLATFORM_NAME", "cpu"))  # the worker gets the real ones


@pytest.mark.crossversion
def test_a_flag_that_changes_outputs_changes_only_its_contenders_runs(tmp_path):
    """XLA's fast math told to assume no NaN folds `x != x` to false: under that variant the NaN count is 0, which
    mismatches the reference on any machine, while the same release without the setting matches it."""
    def nan_count(x):
        return jnp.sum(x != x).astype(jnp.float32) + jnp.sum(jnp.where(x != x, 0.0, x))

    store = str(tmp_path / "store")
    x = np.where(np.linspace(-2, 2, 64) > 1, np.nan, np.linspace(-2, 2, 64)).astype(np.float32)
    reprobundle.pack(jax.jit(nan_count), x, name="nans", store=store, **quick.PACK)
    fast = "0.8.0:XLA_FLAGS=--xla_cpu_enable_fast_math=true --xla_cpu_fast_math_honor_nans=false"
    plain, variant = api.replay("nans", ["0.8.0"], store=store, warmup=1, repeat=2, rounds=1, profile=False,
                                dump=False, variants=[fast]).runs
    assert plain["status"] == "ok", plain["reason"]
    assert variant["status"] == "mismatch" and variant["contender"]["settings"]["xla_flags"] == [
        "--xla_cpu_enable_fast_math=true", "--xla_cpu_fast_math_honor_nans=false"]


# ------------------------------------------------------------------------------------------ the release delta


def _tiny_loop(x, lr):
    """2000 steps of a while loop doing almost nothing: jaxlib 0.4.33's new CPU runtime (the thunk runtime, on by
    default from that release) dispatches each step's thunks, several times slower than 0.4.31's compiled loop on
    any machine."""
    return jax.lax.fori_loop(0, 2000, lambda i, v: v * (1 - lr) + lr, x)


@pytest.mark.crossversion
def test_explain_names_the_cpu_runtime_default_that_flipped_in_0_4_33(tmp_path):
    from cli_runner import cli

    from reprobundle.analysis.diagnosis import PARTIAL

    store = str(tmp_path / "store")
    reprobundle.pack(jax.jit(_tiny_loop), np.ones(4, np.float32), np.float32(1e-3), name="loop", store=store,
                     **quick.PACK)
    # 6 fixed rounds: the experiment's 5-30x move settles in them on any machine, while a reach row near 1.05x would
    # take adaptive rounds up to 32 (this test took 23-77 CPU-s by the machine's noise; a row "not settled" is
    # accepted below); --max-time bounds a busy machine's rounds; the reach is not started where the time left
    # cannot hold it (a probe of the experiments' size): 300 s leaves it room after a measurement of up to ~200 s
    code, out, err = cli("explain", "loop", "--jax", "0.4.31", "--jax", "0.4.33", "--max-time", "300", "--json",
                         "--rounds", "6", "--reach", "0.4.34", "--reach", "0.8.0", store=tmp_path / "store")
    assert code == 0, err
    result = json.loads(out)
    assert (result["mode"], result["by"]) == ("frozen", "time")
    assert "bundle cannot be retraced" in result["mode_why"] or "cannot retrace" in result["mode_why"]
    exp = next(e for e in result["experiments"] if e["kind"] == "default")
    assert exp["what"] == "--xla_cpu_use_thunk_runtime" and exp["setting"] == "XLA_FLAGS=--xla_cpu_use_thunk_runtime=false"
    # screened as a compile option in the candidate's one worker, and it moved the time back (a 5-30x difference)
    assert exp["screen"]["how"] == "compile option" and exp["screen"]["moved"] is True and exp["measured"]
    assert exp["vs_candidate"]["verdict"] == "faster" and exp["vs_candidate"]["settled"]
    # measured with its flag applied to its compile, in the candidate's process of each round; recorded as such
    registry = api.open_registry(store)
    stored = {r["run_id"]: r for r in registry.runs(registry.resolve("loop").ref.bundle_id)}
    exp_run = next(stored[i] for i in result["run_ids"]
                   if stored[i]["contender"]["label"] == "0.4.33 [XLA_FLAGS=--xla_cpu_use_thunk_runtime=false]")
    conditions = exp_run["environment"]["conditions"]
    assert conditions["compile_options"] == {"xla_cpu_use_thunk_runtime": False}
    assert conditions["workers"] == "shared"
    assert exp_run["contender"]["settings"]["xla_flags"] == ["--xla_cpu_use_thunk_runtime=false"]
    # a pass that the screen saw not move is not timed
    assert all(e["measured"] is bool((e["screen"] or {}).get("moved") is not False) for e in result["experiments"])
    d = result["diagnosis"]
    assert d["kind"] in (WORKAROUND, PARTIAL) and d["default"]["name"] == "xla_cpu_use_thunk_runtime"
    assert d["summary"].startswith("the default of --xla_cpu_use_thunk_runtime changed from false (jaxlib 0.4.31) to "
                                   "true (jaxlib 0.4.33); with --xla_cpu_use_thunk_runtime=false, 0.4.33 runs ")
    assert d["lines"]["XLA_FLAGS"] == 'XLA_FLAGS="$XLA_FLAGS --xla_cpu_use_thunk_runtime=false"'
    # the compile-option form is offered: the candidate's runs applied it as one
    assert d["lines"]["compile"] == 'jax.jit(f).lower(*args).compile({"xla_cpu_use_thunk_runtime": False})'
    # the reach, measured on two later releases: each said from runs (stored, timed with the baseline and the
    # release without the workaround); 0.8.0 still parses the flag but refuses it as a compile option
    reach = d["reach"]
    rows = {r["release"]: r for r in reach["releases"]}
    assert set(rows) == {"0.4.34", "0.8.0"}, reach
    assert all(r["result"] in ("restores", "partly", "ignored", "nothing to undo", "not settled") for r in rows.values())
    assert all(r["vs_release"] and r["alone_vs_baseline"] for r in rows.values()), reach
    assert reach["compile"]["accepted"][0] == "0.4.33" and "0.4.34" in reach["compile"]["accepted"]
    assert reach["compile"]["refused"] == {"0.8.0": "No such compile option"}, reach["compile"]
    assert "0.4.34: " in reach["text"] and "the compile-option form is refused on 0.8.0" in reach["text"]
    assert reach["run_ids"] and set(reach["run_ids"]) <= set(stored)
    # one measurement for both claims (#64): the reach's releases timed in the experiments' rounds, one replay group
    assert {stored[i]["group"] for i in reach["run_ids"]} == {stored[i]["group"] for i in result["run_ids"]}
    # JAX options cannot matter to a frozen module: not tried, and why
    assert any("acts while tracing" in t["why"] for t in result["not_tried"])
    assert "--variant 0.4.33:XLA_FLAGS=--xla_cpu_use_thunk_runtime=false" in result["reproduce"]["command"].replace(
        "'", "")
    # the answer is a record beside its runs, and the issue body carries the cause and the line to paste
    (answer,) = [a for a in registry.answers(registry.resolve("loop").ref.bundle_id) if a["kind"] == "explanation"]
    assert answer["answer_id"] == result["answer_id"] and answer["answer"]["diagnosis"]["default"]["name"] == \
        "xla_cpu_use_thunk_runtime"
    assert answer["command"] == "reprobundle explain loop --jax 0.4.31 --jax 0.4.33"
    from reprobundle.investigate.report.issue_facts import issue_data
    from reprobundle.render.issue import issue_markdown

    body = issue_markdown(issue_data("loop", store=store))
    assert 'XLA_FLAGS="$XLA_FLAGS --xla_cpu_use_thunk_runtime=false"' in body
    assert "the default of --xla\\_cpu\\_use\\_thunk\\_runtime changed" in body


@pytest.mark.crossversion
def test_a_workarounds_reach_runs_to_the_newest_release_and_names_the_release_and_commit_that_removed_it(tmp_path):
    """#63: `jax.random.randint` changed at 0.7.2 (`jax_safer_randint` on by default); its workaround,
    `jax.config.update("jax_safer_randint", False)`, is deprecated by 0.7.2 itself, was removed in 0.9.0 (a9dac1167d
    in JAX's history) and is unknown on 0.12.1. The reach of that workaround, asked for 0.8.0 and the newest
    release: 0.8.0 measured (tests/programs/retrace/randint8.py, by outputs), 0.12.1 told gone before any replay
    (its release facts list no such option; the pasted line raises there), the releases' own deprecation warning,
    and the release and commit that removed it from a JAX repository made here (tests/jax_history.py, over 0.8.0's
    and 0.12.1's config.py); without a repository, what the releases checked can say."""
    import functools
    from pathlib import Path

    from jax_history import RANDINT_TITLES, make_option_removal_history, site_jax

    from reprobundle.investigate.explain.default_experiments import DefaultChange, experiment_spec, workaround_lines
    from reprobundle.investigate.explain.explanation import recorded
    from reprobundle.investigate.explain.release_reach import GONE, ReachAsk, reach
    from reprobundle.investigate.explain.setting_life import removal
    from reprobundle.investigate.search.probes import output_difference
    from reprobundle.render.change_table import reach_text
    from reprobundle.run.compare import comparison_of
    from reprobundle.run.contenders import RETRACE, ContenderSpec
    from reprobundle.run.replay import replay
    from reprobundle.run.replay_options import ReplayOptions
    from reprobundle.run.spent import Ledger

    manager = api.environment_manager()
    repo = tmp_path / "jax"
    shas = make_option_removal_history(repo, site_jax(manager.ensure("0.8.0")), site_jax(manager.ensure("0.12.1")))
    store = str(tmp_path / "store")
    api.pack_script(str(Path(__file__).parent / "programs" / "retrace" / "randint8.py"), name="randint8", store=store,
                    **quick.PACK)
    registry, bundle = api.resolve("randint8", store)
    change = DefaultChange("option", "jax_safer_randint", False, True, "0.7.1", "0.7.2", "bool")
    assert workaround_lines(change)["config"] == 'jax.config.update("jax_safer_randint", False)'
    ask = ReachAsk(ContenderSpec("0.5.3", RETRACE), ContenderSpec("0.7.2", RETRACE), "outputs",
                   lambda runs, base: comparison_of(registry, bundle, runs, base, reproduce=False),
                   output_difference(registry, bundle), ["0.8.0", "0.12.1"], str(repo))
    replay_fn = recorded(Ledger(None), functools.partial(replay, registry, bundle, env_manager=manager))  # explain's
    found = reach(manager, change, experiment_spec(change, ContenderSpec("0.7.2"), RETRACE), replay_fn,
                  ReplayOptions(), "cpu", ask)
    rows = {r["release"]: r for r in found["releases"]}
    assert set(rows) == {"0.8.0", "0.12.1"}, found
    assert rows["0.8.0"]["result"] not in (GONE, "failed"), rows  # measured: it ran with the option set
    assert rows["0.12.1"]["result"] == GONE and "Unrecognized config option: jax_safer_randint" in rows["0.12.1"]["text"]
    said = found["said"]
    assert (said["0.8.0"]["defined"], said["0.12.1"]["defined"]) == (True, False)  # the release facts
    assert (said["0.7.2"]["accepted"], said["0.8.0"]["accepted"], said["0.12.1"]["accepted"]) == (True, True, False)
    warning = ("DeprecationWarning: The jax_safer_randint configuration is deprecated in JAX v0.7.2 and will be removed "
               "in JAX v0.9.0.")
    assert found["deprecated"] == {"releases": ["0.7.2", "0.8.0"], "said": warning,
                                   "text": f"deprecated: 0.7.2, 0.8.0 warn when it is set (JAX says: {warning})"}
    removed = found["removed"]
    assert (removed["release"], removed["commit"], removed["title"]) == ("0.9.0", shas[1], RANDINT_TITLES[1])
    assert removed["text"] == (f"removed in 0.9.0 ({shas[1][:10]}): on 0.12.1 the option is unknown (AttributeError: "
                               "Unrecognized config option: jax_safer_randint)")
    assert found["text"].endswith(f"{found['deprecated']['text']}; {removed['text']}"), found["text"]
    report = reach_text(found)
    assert report is not None and report.endswith(f"{found['deprecated']['text']}; {removed['text']}"), report
    # without a repository: what the releases checked say (0.12.1 is not the release after 0.8.0)
    alone = removal(said, change, None, manager.available_versions())
    assert alone is not None and alone["release"] is None and alone["text"].startswith(
        "removed after 0.8.0, by 0.12.1: on 0.12.1 the option is unknown (AttributeError: ")


@pytest.mark.crossversion
def test_explain_retraces_by_itself_and_names_the_prng_option_that_flipped_in_0_5_0(tmp_path):
    from pathlib import Path

    store = str(tmp_path / "store")
    api.pack_script(str(Path(__file__).parent / "programs" / "retrace" / "rng.py"), name="rng", store=store,
                    **quick.PACK)
    result = api.explain("rng", ["0.4.38", "0.5.0"], store=store)
    # the frozen module computes the same bits on both: only the retraced program shows the change
    assert result["mode"] == "retrace" and result["mode_why"].startswith("retraced: the frozen module computes the same")
    assert result["by"] == "outputs" and result["regression"] == {"outputs": "beyond"}
    d = result["diagnosis"]
    assert d["kind"] == WORKAROUND and d["default"]["name"] == "jax_threefry_partitionable"
    assert d["summary"] == ("the default of jax_threefry_partitionable changed from False (jax 0.4.38) to True (jax "
                            "0.5.0); with jax_threefry_partitionable=False, 0.5.0 retraced gives 0.4.38 retraced's "
                            "outputs bit for bit")
    assert d["lines"] == {"config": 'jax.config.update("jax_threefry_partitionable", False)',
                          "env": "JAX_THREEFRY_PARTITIONABLE=false"}
    exp = d["workaround"]
    assert exp["mode"] == "retrace" and exp["outputs_vs_baseline"] == "same" and exp["screen"]["how"] == "not screened"
    # an untimed outputs regression: nothing was timed
    assert all(p["what"] != "experiments" or p["spent"].get("timed", 0) < 1 for p in result["spent"]["probes"])
    text = explain_render.to_text(explain_render.explain_data(result))
    assert 'jax.config.update("jax_threefry_partitionable", False)' in text


@pytest.mark.crossversion
def test_a_change_no_default_caused_is_given_no_default_as_its_cause(tmp_path):
    """The candidate's outputs differ by a setting of its own (fast math assuming no NaN folds `x != x`), not by a
    default that changed between 0.5.3 and 0.7.2 (XNNPACK on by default, and JAX options the frozen module cannot
    show): the changed flag is set back and does not give the baseline's outputs, so no default is named; screened by
    outputs in the candidate's worker. (0.4.33 and 0.5.0 do not fold it: the setting's effect is 0.7's.)"""
    from reprobundle.run.contenders import parse_variant

    def nan_count(x):
        return jnp.sum(x != x).astype(jnp.float32) + jnp.sum(jnp.where(x != x, 0.0, x))

    store = str(tmp_path / "store")
    x = np.where(np.linspace(-2, 2, 64) > 1, np.nan, np.linspace(-2, 2, 64)).astype(np.float32)
    reprobundle.pack(jax.jit(nan_count), x, name="nans", store=store, **quick.PACK)
    fast = parse_variant("0.7.2:XLA_FLAGS=--xla_cpu_enable_fast_math=true --xla_cpu_fast_math_honor_nans=false")
    result = api.explain("nans", ["0.5.3", fast], store=store)
    assert result["by"] == "outputs" and result["regression"] == {"outputs": "beyond"}
    defaults = [e for e in result["experiments"] if e["kind"] == "default"]
    assert [e["what"] for e in defaults] == ["--xla_cpu_use_xnnpack"]
    assert all(e["outputs_vs_baseline"] in (None, "beyond") and (e["screen"] or {}).get("moved") is not True
               for e in defaults)
    d = result["diagnosis"]
    assert d["default"] is None and "the default of" not in d["summary"]
    if d["kind"] != WORKAROUND:  # a pass disabled may give the outputs back; then it is named, as a setting
        assert d["kind"] == NOT_SEPARATED and "did not give 0.5.3's outputs back" in d["summary"]


def test_the_release_delta_becomes_experiments_for_this_platform_with_the_lines_to_paste():
    from reprobundle.investigate.explain.default_experiments import default_changes, experiment_spec, workaround_lines
    from reprobundle.investigate.explain.experiment_screen import compile_options

    delta = {"a": "0.4.31", "b": "0.4.33", "xla_flags": {
        "changed": [{"name": "xla_cpu_use_thunk_runtime", "a": False, "b": True, "type": "bool"},
                    {"name": "xla_gpu_enable_triton_gemm", "a": False, "b": True, "type": "bool"},
                    {"name": "xla_dump_to", "a": "", "b": "/tmp", "type": "string"},
                    {"name": "xla_cpu_strategy", "a": "A", "b": "B", "type": "enum"}],
        "added": [{"name": "xla_cpu_new_thing", "default": True, "type": "bool"},
                  {"name": "xla_cpu_off_thing", "default": False, "type": "bool"}], "removed": []},
        "jax_options": {"changed": [{"name": "jax_threefry_partitionable", "a": False, "b": True, "type": "bool"}],
                        "added": [], "removed": []}}
    changes, left = default_changes(delta, "cpu")
    assert [c.name for c in changes] == ["xla_cpu_use_thunk_runtime", "xla_cpu_new_thing", "jax_threefry_partitionable"]
    assert left == [{"name": "--xla_cpu_strategy", "why": "a enum flag has no value a command line spells reliably"}]
    thunk, new, option = changes
    assert new.sentence() == "--xla_cpu_new_thing is new in jaxlib 0.4.33, on by default"
    spec = experiment_spec(new, parse_variant("0.4.33:XLA_FLAGS=--keep=1;X=1"), "frozen")
    assert spec.settings.xla_flags == ("--keep=1", "--xla_cpu_new_thing=false") and spec.settings.env == (("X", "1"),)
    retraced = experiment_spec(option, parse_variant("0.4.33:X=1"), "frozen")
    assert retraced.mode == "retrace" and retraced.settings.jax_config == (("jax_threefry_partitionable", "false"),)
    assert workaround_lines(thunk)["XLA_FLAGS"] == 'XLA_FLAGS="$XLA_FLAGS --xla_cpu_use_thunk_runtime=false"'
    assert workaround_lines(option) == {"config": 'jax.config.update("jax_threefry_partitionable", False)',
                                        "env": "JAX_THREEFRY_PARTITIONABLE=false"}
    # a compile option only where the release's facts say it is a scalar DebugOptions field
    types = {"xla_cpu_use_thunk_runtime": {"type": "bool"}, "xla_disable_hlo_passes": {"type": "repeated string"},
             "xla_fuel": {"type": "string", "source": "help"}, "xla_backend_optimization_level": {"type": "int32"}}
    assert compile_options(["--xla_cpu_use_thunk_runtime=false", "--xla_backend_optimization_level=1"], types) == {
        "xla_cpu_use_thunk_runtime": False, "xla_backend_optimization_level": 1}
    assert compile_options(["--xla_disable_hlo_passes=algsimp"], types) is None
    assert compile_options(["--xla_fuel=1"], types) is None and compile_options(["--xla_unknown=1"], types) is None


def test_a_default_set_back_is_said_as_the_change_and_a_settled_move_back_as_part_of_it():
    from reprobundle.analysis.diagnosis import PARTIAL

    change = {"kind": "flag", "name": "xla_cpu_use_thunk_runtime", "a": False, "b": True}
    why = "the default of --xla_cpu_use_thunk_runtime changed from false (jaxlib 0.4.31) to true (jaxlib 0.4.33)"
    slower = _verdict(6.19, "slower")
    back = {**_experiment("XLA_FLAGS=--xla_cpu_use_thunk_runtime=false", _verdict(1.0, "same")), "default": change,
            "why": why}
    flag = _experiment("XLA_FLAGS=--b", _verdict(0.99, "same"))
    d = diagnose("0.4.31", "0.4.33", slower, [flag, back])
    assert d["kind"] == WORKAROUND and d["default"] is change  # the changed default is named, though the flag is faster
    assert d["summary"].startswith(why + "; with --xla_cpu_use_thunk_runtime=false, 0.4.33 runs 1.00x")
    part = {**back, "vs_baseline": _verdict(1.05, "slower"), "vs_candidate": _verdict(0.17, "faster"),
            "fusions_same_as_baseline": True}
    d = diagnose("0.4.31", "0.4.33", slower, [part])
    assert d["kind"] == PARTIAL and d["partial"] is part and "instead of 6.19x" in d["summary"]
    assert "not shown to be all of it" in d["summary"] and "the fusion change is not the cause" not in d["summary"]
    unsettled = {**part, "vs_candidate": _verdict(0.9, "faster", settled=False)}
    assert diagnose("0.4.31", "0.4.33", slower, [unsettled])["kind"] == CAUSE  # no settled move: the old reading
    # by outputs: restored bit for bit, within the tolerance, or not at all
    option = {"kind": "option", "name": "jax_threefry_partitionable", "a": False, "b": True}
    exp = {**_experiment("jax_threefry_partitionable=false", None, status="mismatch"), "default": option,
           "why": "the default of jax_threefry_partitionable changed", "outputs_vs_baseline": "same"}
    d = diagnose("0.4.38", "0.5.0", {"outputs": "beyond"}, [exp], by="outputs")
    assert d["kind"] == WORKAROUND and d["summary"].endswith("with jax_threefry_partitionable=False, 0.5.0 gives "
                                                             "0.4.38's outputs bit for bit")
    d = diagnose("0.4.38", "0.5.0", {"outputs": "beyond"}, [{**exp, "outputs_vs_baseline": "beyond"}], by="outputs")
    assert d["kind"] == NOT_SEPARATED and d["default"] is None and "did not give 0.4.38's outputs back" in d["summary"]
    assert diagnose("0.4.38", "0.5.0", {"outputs": "bits"}, [], by="bits")["kind"] == NOT_SEPARATED
    assert diagnose("0.4.38", "0.5.0", {"outputs": "bits"}, [], by="outputs")["kind"] == NO_REGRESSION


def test_the_reach_is_measured_on_the_windows_releases_after_the_first_bad_one():
    """investigate hands explain the releases its bisection tested after the first bad one (cached by then): at
    most three, the next, one between and the last; none after it: explain's own choice (those cached here)."""
    from reprobundle.investigate.explain.release_reach import window_releases

    tested = ["0.4.30", "0.4.31", "0.4.33", "0.4.34", "0.5.0", "0.6.0", "0.7.2", "0.8.0"]
    assert window_releases(tested, "0.4.33") == ["0.4.34", "0.6.0", "0.8.0"]
    assert window_releases(["0.4.31", "0.4.33", "0.4.35"], "0.4.33") == ["0.4.35"]
    assert window_releases(["0.4.31", "0.4.33"], "0.4.33") is None
    # and the newest release, where a maintainer checks it (#63): the window's end is not the reach's
    assert window_releases(tested, "0.4.33", "0.12.1") == ["0.4.34", "0.6.0", "0.8.0", "0.12.1"]
    assert window_releases(["0.4.31", "0.4.33"], "0.4.33", "0.12.1") == ["0.12.1"]
    assert window_releases(tested, "0.4.33", "0.8.0") == ["0.4.34", "0.6.0", "0.8.0"]


@pytest.mark.crossversion
def test_minimize_of_the_readme_attention_example_gives_a_piece_or_says_why_within_its_budget(attention_store):
    """The README's example between 0.7.2 and 0.8.0 (its small size): minimize used to fail there before the search
    began ("the baseline cannot compute the function's intermediate values: timeout in execute"). Now it gives a
    piece (or the whole, said as "could not shrink") by its --max-time, or one clear error that says why the whole
    shows no difference at this size. No direction or size of the change is asserted: it is this machine's."""
    from reprobundle.investigate.minimize.reduction import PropertyNotShown, could_not_shrink

    try:
        result = api.minimize("attention-small", ["0.7.2", "0.8.0"], store=attention_store, max_time_s=45,
                              check=False)
    except PropertyNotShown as e:
        assert "does not" in e.message or "no difference" in e.message, e.message
        return
    assert result.stopped in ("done", "max-time") and result.tested >= 1
    assert result.ops_after <= result.ops_before and result.packed
    if result.property == "slower" and could_not_shrink(result) is None:
        assert result.piece["moved_ns"] >= result.piece["min_moved_ns"] > 0


def test_an_experiments_outputs_are_judged_against_the_baseline_not_the_packing_release():
    """A bundle packed on a newer release has that release's outputs as its reference: the baseline (the last good
    release) and a workaround that gives its outputs both read "mismatch" against it. The experiment's outputs are
    judged against the baseline's run: within its tolerance, it is ok and can be the workaround, and its row says
    so (never "ok" beside "differ from the reference")."""
    from reprobundle.investigate.explain.experiments import Experiment, experiment_facts
    from reprobundle.investigate.search.bisection import BEYOND, SAME
    from reprobundle.run.contenders import ContenderSpec, Settings

    exp = Experiment("flag", "--a", "why", ContenderSpec("0.8.0", settings=Settings(("--a",))))
    run = {"status": "mismatch", "check": {"ok": False}, "contender": {"label": "0.8.0 [XLA_FLAGS=--a]"},
           "reason": "", "environment": {"jax": "0.8.0"}}
    facts = experiment_facts(exp, run, {}, {}, None, None, SAME)
    assert facts["outputs_ok"] is True
    facts["vs_baseline"] = _verdict(1.0, "same")
    d = diagnose("0.7.2", "0.8.0", _verdict(1.17, "slower"), [facts])
    assert d["kind"] == WORKAROUND and d["workaround"] is facts
    cells = explain_render.experiment_cells(facts)
    assert cells[1:3] == ["ran", "the same bits of the baseline's"]
    beyond = experiment_facts(exp, {**run, "status": "ok", "check": {"ok": True}}, {}, {}, None, None, BEYOND)
    assert beyond["outputs_ok"] is False
    assert explain_render.experiment_cells(beyond)[2] == "beyond the tolerance of the baseline's"
