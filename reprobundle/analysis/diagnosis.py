"""What explain's experiments showed, as one summary sentence: a workaround, a cause without a workaround, or that
they did not separate the two versions. A diagnosis is a claim: it says only what an experiment measured.

An experiment is the candidate release under one setting (a pass disabled, a flag toggled), timed in the same paired
rounds as the baseline and the candidate. Its facts (investigate/explain.py gathers them): status, outputs against the
reference, `hlo_same_as_baseline` (its optimized HLO is the baseline's up to names), `fusions_same_as_baseline`
(the same fusions and unfused ops), and its verdict against the baseline (ratio, 95% interval, settled).
"""

from __future__ import annotations

WORKAROUND = "workaround"
CAUSE = "cause"  # the change is located (not in the HLO passes, or not in the fusion decision), without a workaround
NOT_SEPARATED = "not-separated"
NO_REGRESSION = "no-regression"
NOT_SETTLED = "not-settled"  # slower in the whole 95% interval, but too few rounds to settle it (verdict.leaning)


def _ratio_text(v: dict) -> str:
    lo, hi = v["ci95"]
    return f"{v['ratio']:.2f}x [{lo:.2f}-{hi:.2f}]"


def restores(v: dict | None) -> bool:
    """The experiment's time is not measurably worse than the baseline's, and the verdict was reached (settled same or
    faster)."""
    return v is not None and v.get("verdict") in ("same", "faster") and bool(v.get("settled"))


def still_slower(v: dict | None) -> bool:
    return v is not None and v.get("verdict") == "slower"


def diagnose(baseline: str, candidate: str, regression: dict | None, experiments: list[dict]) -> dict:
    """{"kind", "summary", "workaround": experiment | None, "cause": experiment | None}.

    `regression`: the candidate's verdict against the baseline; `experiments`: each {"label", "setting", "status",
    "outputs_ok", "hlo_same_as_baseline", "fusions_same_as_baseline", "vs_baseline": verdict | None, "moved": str}.
    """
    from .verdict import leaning, leaning_text

    out: dict = {"kind": NOT_SEPARATED, "summary": "", "workaround": None, "cause": None}
    if leaning(regression) == "slower":  # a large difference few rounds could not settle: never "no regression"
        out.update(kind=NOT_SETTLED, summary=f"{candidate} against {baseline}: {leaning_text(regression or {})}; "
                                             "the experiments are judged only against a settled slowdown")
        return out
    if not still_slower(regression):
        out["kind"] = NO_REGRESSION
        out["summary"] = _no_regression_summary(baseline, candidate, regression)
        return out
    ran = [e for e in experiments if e.get("status") == "ok" and e.get("outputs_ok")]
    best = _best_workaround(ran)
    if best is not None:
        out.update(kind=WORKAROUND, workaround=best,
                   summary=f"workaround: on {candidate}, {best['setting']} restores {_ratio_text(best['vs_baseline'])} "
                           f"of {baseline}'s time, outputs ok")
    cause = _best_cause(ran)
    if cause is not None:
        out["cause"] = cause
        text = _cause_text(cause, baseline, candidate)
        if out["kind"] == WORKAROUND:
            out["summary"] += "; " + text
        else:
            out.update(kind=CAUSE, summary=text)
    if out["kind"] == NOT_SEPARATED and regression is not None:
        tried = len(experiments)
        out["summary"] = (f"{candidate} is {_ratio_text(regression)} of {baseline}'s time, and the {tried} "
                          f"experiment{'s' if tried != 1 else ''} did not separate them: none restored "
                          f"{baseline}'s time with ok outputs, none reached {baseline}'s HLO or fusions while "
                          "staying slower")
    return out


def _no_regression_summary(baseline: str, candidate: str, regression: dict | None) -> str:
    """Why there is nothing to explain: no verdict, a settled same or faster, or not measurably slower."""
    if regression is None or not regression.get("ci95"):
        return (f"{candidate} got no verdict against {baseline} in this replay: there is no measured "
                "regression for the experiments to explain")
    if regression.get("settled"):
        word = "faster than" if regression["verdict"] == "faster" else "the same as"
        return (f"{candidate} is {word} {baseline} here ({_ratio_text(regression)}, settled): there is "
                "no regression here to explain")
    return (f"{candidate} was not measurably slower than {baseline} in this replay "
            f"({_ratio_text(regression)}, not settled: more rounds or a quieter machine may show a "
            "change): no measured regression for the experiments to explain")


def _best_workaround(ran: list[dict]) -> dict | None:
    """The experiment that restores the baseline's time by the most, or None."""
    fixes = sorted((e for e in ran if restores(e.get("vs_baseline"))), key=lambda e: e["vs_baseline"]["ratio"])
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
                f"{_ratio_text(e['vs_baseline'])} slower: the change is in code generation or the runtime{where}, "
                "not in an HLO pass")
    return (f"with {baseline}'s fusion structure ({e['setting']}), {candidate} is still "
            f"{_ratio_text(e['vs_baseline'])} slower: the fusion change is not the cause{where}; the "
            "optimized HLO still differs in other ways, so code generation, the runtime or another pass")
