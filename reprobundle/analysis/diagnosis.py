"""What explain's experiments showed, as one summary sentence: a workaround, a cause without a workaround, or that
they did not separate the two versions. A diagnosis is a claim: it says only what an experiment measured.

An experiment is the candidate release under one setting (a default that changed set back, a pass disabled, a flag
toggled). By time it is timed in the same paired rounds as the baseline and the candidate; its facts
(investigate/explain/experiments.py gathers them): status, `outputs_ok` (its outputs within the tolerance of the baseline's run,
not of the packing release's reference), `hlo_same_as_baseline` (its optimized
HLO is the baseline's up to names), `fusions_same_as_baseline` (the same fusions and unfused ops), its verdict
against the baseline and against the candidate (ratio, 95% interval, settled). By outputs it ran once, and
`outputs_vs_baseline` says how its outputs differ from the baseline's run: the same bits, within the tolerance, or
beyond it. An experiment whose setting is a default that changed between the releases names the change: the
diagnosis then says it as the change ("the default of FLAG changed from A to B ...; with FLAG=A, ...").
"""

from __future__ import annotations

import math

from ..text import counted

WORKAROUND = "workaround"
CAUSE = "cause"  # the change is located (not in the HLO passes, or not in the fusion decision), without a workaround
NOT_SEPARATED = "not-separated"
NO_REGRESSION = "no-regression"
NOT_SETTLED = "not-settled"  # slower in the whole 95% interval, but too few rounds to settle it (verdict.leaning)
PARTIAL = "partial"  # an experiment settled faster than the candidate, not shown to restore the baseline's time


def ratio_text(v: dict) -> str:
    lo, hi = v["ci95"]
    return f"{v['ratio']:.2f}x [{lo:.2f}-{hi:.2f}]"


def restores(v: dict | None) -> bool:
    """The experiment's time is not measurably worse than the baseline's, and the verdict was reached (settled same or
    faster); or its rounds ruled out a slowdown of the 5% this measures (`ruled_out`: analysis/resolution.py), or,
    where the measurement was judged against a confirmed change (`side`: analysis/which_end.py), it is like the
    baseline's end of that change, not the candidate's; either only where it is not shown slower than the baseline
    at all (a workaround that halves a 4x slowdown is on the baseline's side of it, and restores nothing)."""
    from .verdict import shown_slower

    if v is None:
        return False
    if v.get("side") == "good" or v.get("ruled_out"):
        return not shown_slower(v)
    return v.get("verdict") in ("same", "faster") and bool(v.get("settled"))


def still_slower(v: dict | None) -> bool:
    """Slower than the baseline: its verdict, or its side of a confirmed change (like the candidate's end)."""
    return v is not None and (v.get("verdict") == "slower" or v.get("side") == "bad")


def diagnose(baseline: str, candidate: str, regression: dict | None, experiments: list[dict],
             by: str = "time") -> dict:
    """{"kind", "summary", "workaround": experiment | None, "cause": experiment | None, "partial": experiment |
    None, "default": the changed default the answer names | None}.

    `regression`: by time the candidate's verdict against the baseline, by outputs {"outputs": same|bits|beyond};
    `experiments`: each {"label", "setting", "status", "outputs_ok", "hlo_same_as_baseline",
    "fusions_same_as_baseline", "vs_baseline": verdict | None, "vs_candidate": verdict | None,
    "outputs_vs_baseline", "default": the change it sets back | None, "moved": str}.
    """
    if by != "time":
        return _diagnose_outputs(baseline, candidate, regression, experiments, by)
    out = _nothing_to_explain(baseline, candidate, regression)
    if out["kind"] != NOT_SEPARATED:
        return out
    # "mismatch" is against the packing release's reference; outputs_ok is against the baseline's outputs
    ran = [e for e in experiments if e.get("status") in ("ok", "mismatch") and e.get("outputs_ok")]
    best = _best_workaround(ran)
    if best is not None:
        out.update(kind=WORKAROUND, workaround=best, default=best.get("default"),
                   summary=_restored_text(best, baseline, candidate))
    partial = _best_partial(ran) if best is None else None
    if partial is not None:  # a settled move back says more than where the rest of the change is not
        out.update(kind=PARTIAL, partial=partial, default=partial.get("default"),
                   summary=_partial_text(partial, baseline, candidate, regression))
    cause = _best_cause(ran)
    if cause is not None:
        out["cause"] = cause
        text = _cause_text(cause, baseline, candidate)
        if out["kind"] == NOT_SEPARATED:
            out.update(kind=CAUSE, summary=text)
        elif cause is not partial:
            out["summary"] += "; " + text
    if out["kind"] == NOT_SEPARATED and regression is not None:
        out["summary"] = (f"{candidate} is {ratio_text(regression)} of {baseline}'s time, and "
                          f"{_tried(experiments, 'separate them')}: none restored {baseline}'s time with ok "
                          f"outputs, none reached {baseline}'s HLO or fusions while staying slower")
    return out


def _nothing_to_explain(baseline: str, candidate: str, regression: dict | None) -> dict:
    """A diagnosis of kind NOT_SETTLED or NO_REGRESSION when there is no settled slowdown to explain, else an empty
    NOT_SEPARATED one to fill in."""
    from .verdict import leaning, leaning_text

    out: dict = {"kind": NOT_SEPARATED, "summary": "", "workaround": None, "cause": None, "partial": None,
                 "default": None}
    if (regression or {}).get("side") == "bad":  # like the confirmed first bad release: a slowdown to explain
        return out
    if leaning(regression) == "slower":  # a large difference few rounds could not settle: never "no regression"
        out.update(kind=NOT_SETTLED, summary=f"{candidate} against {baseline}: {leaning_text(regression or {})}; "
                                             "the experiments are judged only against a settled slowdown")
    elif not still_slower(regression):
        out.update(kind=NO_REGRESSION, summary=_no_regression_summary(baseline, candidate, regression))
    return out


def _tried(experiments: list[dict], did_not: str) -> str:
    """`the 5 experiments measured (2 more screened out: ...) did not DID_NOT`; where the screen left none to
    measure, `no experiment was measured (the 3 experiments tried screened out: ...)`."""
    measured = [e for e in experiments if e.get("measured", True)]
    out = len(experiments) - len(measured)
    moved = f"they did not move {'it' if out == 1 else 'them'} toward the baseline"
    if not measured and out:
        return f"no experiment was measured (the {counted(out, 'experiment')} tried screened out: {moved})"
    return f"the {counted(len(measured), 'experiment')} measured" + (
        f" ({out} more screened out: {moved})" if out else "") + f" did not {did_not}"


def _said_as_change(e: dict, what: str) -> str:
    """`the default of FLAG changed from A to B ...; with --FLAG=A, <what>` for a changed default, else the
    setting."""
    change = e.get("default")
    if change:
        return f"{e['why']}; with {set_back(change)}, {what}"
    return f"with {e['setting']}, {what}"


def set_back(change: dict) -> str:
    """`--xla_cpu_use_thunk_runtime=false`, `jax_threefry_partitionable=False`: the changed default set back."""
    value = False if change.get("a") is None else change["a"]
    if change.get("kind") == "flag":
        from .release_delta import flag_value

        return f"--{change['name']}={flag_value(value)}"
    return f"{change['name']}={value!r}"


def restored_basis(v: dict, baseline: str, candidate: str) -> str:
    """How a restore was decided, where its verdict did not settle it: ` (like 0.4.31, not 0.4.33: the test between
    the confirmed ends (4.38x, 1% error each way) decided in 1 round)`, ` (a slowdown of 5% ruled out in 6
    rounds)`; "" for a settled one."""
    if v.get("settled") and v.get("verdict") in ("same", "faster"):
        return ""
    if v.get("side") is None and v.get("ruled_out"):
        from .sequential import DETECT_EFFECT
        from .which_end import rounds_text

        return f" (a slowdown of {DETECT_EFFECT:.0%} ruled out in {rounds_text(int(v['ruled_out']))})"
    return f" (like {baseline}, not {candidate}: {v.get('side_said') or 'the test between the confirmed ends'})"


def few_rounds(v: dict) -> bool:
    """Whether a verdict decided by its side of a confirmed change (`side`) came from fewer rounds than make a
    figure (which_end.MIN_FIGURE_ROUNDS): said by its side alone, never with a ratio."""
    from .which_end import MIN_FIGURE_ROUNDS

    return v.get("side") is not None and int(v.get("rounds") or 0) < MIN_FIGURE_ROUNDS


def side_alone(v: dict, baseline: str, candidate: str) -> str:
    """`like 0.4.31, not 0.4.33 (the test between the confirmed ends (4.38x, 1% error each way) decided in 1
    round)`: a verdict `few_rounds` says by its side alone."""
    return f"like {baseline}, not {candidate} ({v.get('side_said') or 'the test between the confirmed ends'})"


def _restored_text(e: dict, baseline: str, candidate: str) -> str:
    v = e["vs_baseline"]
    sided = restored_basis(v, baseline, candidate)
    if few_rounds(v) and sided:
        how = side_alone(v, baseline, candidate)
        return _said_as_change(e, f"{candidate} runs {how}, outputs ok") if e.get("default") else \
            f"workaround: on {candidate}, {e['setting']} restores {baseline}'s time: {how}, outputs ok"
    what = f"{candidate} runs {ratio_text(v)} of {baseline}'s time{sided}, outputs ok"
    return _said_as_change(e, what) if e.get("default") else f"workaround: on {candidate}, {e['setting']} restores " \
        f"{ratio_text(v)} of {baseline}'s time{sided}, outputs ok"


def moved_back(e: dict) -> bool:
    """Part of the change undone by the experiment: settled faster than the candidate in the same paired rounds, or,
    where the measurement was judged against a confirmed change (an investigation's: analysis/which_end.py), like the
    last good end of that change rather than the first bad one (at least half of it undone, in log terms, decided at
    1% error each way), whichever way its rounds ended: the test stops them as soon as every side is known, often
    before the group-sequential verdicts could settle (at 3 rounds |t| must reach ~32)."""
    against = e.get("vs_candidate") or {}
    if against.get("verdict") == "faster" and against.get("settled"):
        return True
    return (e.get("vs_baseline") or {}).get("side") == "good"


def _best_partial(ran: list[dict]) -> dict | None:
    """An experiment that undid part of the change (`moved_back`) without restoring the baseline's time: the largest
    move (the nearest the baseline's time), changed defaults first."""
    moved = [e for e in ran if moved_back(e)]
    if not moved:
        return None
    return sorted(moved, key=lambda e: (not e.get("default"), (e.get("vs_baseline") or {}).get("ratio", math.inf)))[0]


def _partial_text(e: dict, baseline: str, candidate: str, regression: dict | None) -> str:
    """`with S, V runs 1.05x [1.03-1.08] of U's time instead of 6.19x [...] (settled faster than without it: 0.17x
    [...]), outputs ok: part of the change, not shown to be all of it`; decided by its side of a confirmed change:
    `(like U, not V: the test between the confirmed ends (146.81x, 1% error each way) decided in 1 round)`."""
    against = e.get("vs_baseline")
    if against and few_rounds(against):  # a side decided in fewer rounds than make a figure: said alone
        now = "runs"
    elif against and against.get("ci95"):
        now = f"runs {ratio_text(against)} of {baseline}'s time"
        if regression and regression.get("ci95"):
            now += f" instead of {ratio_text(regression)}"
    else:
        now = "runs faster"
    back = e.get("vs_candidate") or {}
    if back.get("verdict") == "faster" and back.get("settled"):
        how = f" (settled faster than without it: {ratio_text(back)})"
    else:  # like the confirmed change's last good end: how that was decided
        how = f" (like {baseline}, not {candidate}: {(against or {}).get('side_said') or 'the test between its ends'})"
    what = f"{candidate} {now}{how}, outputs ok: part of the change, not shown to be all of it"
    return _said_as_change(e, what)


_OUTPUTS_SAID = {"same": "bit for bit", "bits": "within the tolerance (some bits differ)"}


def _diagnose_outputs(baseline: str, candidate: str, regression: dict | None, experiments: list[dict],
                      by: str) -> dict:
    """By outputs (or bits): an experiment restores when its outputs are the baseline's (bit for bit, or within the
    tolerance for `outputs`); a changed default that does is named as the change."""
    out: dict = {"kind": NOT_SEPARATED, "summary": "", "workaround": None, "cause": None, "partial": None,
                 "default": None}
    apart = (regression or {}).get("outputs")
    fine = ("same",) if by == "bits" else ("same", "bits")
    if apart is None:
        out.update(kind=NO_REGRESSION, summary=f"{candidate} or {baseline} did not run: no outputs to compare")
        return out
    if apart in fine:
        out.update(kind=NO_REGRESSION, summary=f"{candidate}'s outputs are {baseline}'s {_OUTPUTS_SAID[apart]} in "
                                               "this replay: there is no change of outputs to explain")
        return out
    ran = [e for e in experiments if e.get("status") in ("ok", "mismatch") and e.get("outputs_vs_baseline") in fine]
    if ran:
        best = sorted(ran, key=lambda e: (not e.get("default"), e["outputs_vs_baseline"] != "same"))[0]
        what = f"{candidate} gives {baseline}'s outputs {_OUTPUTS_SAID[best['outputs_vs_baseline']]}"
        out.update(kind=WORKAROUND, workaround=best, default=best.get("default"),
                   summary=_said_as_change(best, what) if best.get("default") else
                   f"workaround: on {candidate}, {best['setting']} gives {baseline}'s outputs "
                   f"{_OUTPUTS_SAID[best['outputs_vs_baseline']]}")
        return out
    how = "beyond the tolerance" if apart == "beyond" else "in bits"
    back = f"give {baseline}'s outputs back"
    out["summary"] = f"{candidate}'s outputs differ from {baseline}'s {how}, and {_tried(experiments, back)}"
    return out


def _no_regression_summary(baseline: str, candidate: str, regression: dict | None) -> str:
    """Why there is nothing to explain: no verdict, a settled same or faster, or not measurably slower."""
    if regression is None or not regression.get("ci95"):
        return (f"{candidate} got no verdict against {baseline} in this replay: there is no measured "
                "regression for the experiments to explain")
    if regression.get("settled"):
        word = "faster than" if regression["verdict"] == "faster" else "the same as"
        return (f"{candidate} is {word} {baseline} here ({ratio_text(regression)}, settled): there is "
                "no regression here to explain")
    return (f"{candidate} was not measurably slower than {baseline} in this replay "
            f"({ratio_text(regression)}, not settled: more rounds or a quieter machine may show a "
            "change): no measured regression for the experiments to explain")


def _best_workaround(ran: list[dict]) -> dict | None:
    """The experiment that restores the baseline's time, a changed default first (it names the cause), then by the
    most, or None."""
    fixes = sorted((e for e in ran if restores(e.get("vs_baseline"))),
                   key=lambda e: (not e.get("default"), e["vs_baseline"]["ratio"]))
    return fixes[0] if fixes else None


def _best_cause(ran: list[dict]) -> dict | None:
    """An experiment that reached the baseline's HLO or fusions and stayed slower, or None."""
    located = [e for e in ran if still_slower(e.get("vs_baseline"))
               and (e.get("hlo_same_as_baseline") or e.get("fusions_same_as_baseline"))]
    if not located:
        return None
    # identical HLO says more than identical fusions: prefer it
    return sorted(located, key=lambda x: (not x.get("hlo_same_as_baseline"), x["vs_baseline"]["ratio"]))[0]


def _cause_text(e: dict, baseline: str, candidate: str) -> str:
    where = f" ({e['moved']})" if e.get("moved") else ""
    if e.get("hlo_same_as_baseline"):
        return (f"with {baseline}'s optimized HLO ({e['setting']}), {candidate} is still "
                f"{ratio_text(e['vs_baseline'])} slower: the change is in code generation or the runtime{where}, "
                "not in an HLO pass")
    return (f"with {baseline}'s fusion structure ({e['setting']}), {candidate} is still "
            f"{ratio_text(e['vs_baseline'])} slower: the fusion change is not the cause{where}; the "
            "optimized HLO still differs in other ways, so code generation, the runtime or another pass")
