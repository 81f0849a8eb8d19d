"""Which layer changed at the boundary a bisection found, and the command that goes on from there.

The last good and the first bad release each run the bundle frozen (the stored StableHLO: only XLA and the runtime
differ between them) and retraced (the program lowered by each release). Judged by the bisection's own criterion:
- the compiler: the frozen module shows the change between the two, and both releases lower the program to the
  same StableHLO (locations, names and debug info aside);
- JAX's lowering: the retraced StableHLO differs, and the frozen module does not show the change;
- both: the frozen module shows it and the lowering differs too;
- neither: the frozen module does not show it and the lowering is the same (the change did not show again).
What the bisection already ran in its own mode is reused and only the other mode is replayed: for outputs, once
each, untimed; for time after a frozen bisection, the frozen change is the bisection's own finding (the last good
and the first bad release each timed beside the good end in paired rounds, then the two timed beside each other:
its confirmation, whose paired verdict decides whether the change showed again), so the retraced pair runs once,
untimed, for its StableHLO alone; for time after a retraced bisection (`--retrace`), all four run timed together,
each pair's rounds ending once the test between the bisection's two ends (analysis/which_end.py) says which end it
is like, and judged by it (a frozen module the change left alone took up to 32 rounds to settle "same" before).

The next command: `minimize` between the two releases for a compiler change (the frozen module holds the change,
so it can be made smaller); the retraced replay whose report shows the lowering diff with its source lines for a
lowering change (a property of JAX's lowering is no property of the frozen module: minimize cannot keep it).
"""

from __future__ import annotations

import shlex
from typing import Callable, Sequence

from ...bundle.registry import Bundle, Registry
from ...errors import ReplayError
from .bisection import (
    BEYOND,
    BITS,
    ERROR,
    OUTPUTS,
    OUTPUTS_VS_GOOD,
    SAME,
    TIME,
    BisectResult,
    OutputsDiffer,
    ReplayTogether,
    by_outputs,
    classify,
    endpoints_ends,
)

FROZEN, RETRACE, BOTH = "frozen", "retrace", "both"
ProbeFor = Callable[..., ReplayTogether]  # (mode: "frozen", "retrace", "both", timed=True, ends=None) -> its probe
LoweringOf = Callable[[dict, dict], "dict | None"]  # (retraced run, retraced run) -> lowering_diff, or None
WORDS = {"compiler": "XLA (the compiler)", "lowering": "JAX's lowering",
         "both": "both XLA (the compiler) and JAX's lowering", "neither": "neither layer: the change did not show again"}


def layer_at_boundary(registry: Registry, bundle: Bundle, result: BisectResult, mode: str, probe_for: ProbeFor,
                      outputs_differ: OutputsDiffer | None, progress: Callable[[str], None] | None = None,
                      next_args: tuple[str, Sequence[str], Sequence[str]] | None = None) -> dict:
    """Which layer changed between the bisection's last good and first bad release (boundary_layer): both replayed
    frozen and retraced with `probe_for`'s probes, the retraced StableHLO read from the runs' artifacts. With
    `next_args` (the bundle's ref, the --store arguments, the replay's), its "next" commands (next_commands)."""
    try:
        found = _layer_at_boundary(registry, bundle, result, mode, probe_for, outputs_differ, progress)
    except ReplayError as e:  # the bisection's answer stands without its layer
        found = {"layer": None, "last_good": result.last_good, "first_bad": result.first_bad, "frozen": None,
                 "retraced": None, "lowering": None, "text": f"undecided: the boundary's replay failed: {e}"}
    if next_args is not None:
        found["next"] = next_commands(result, found, *next_args)
    return found


def _layer_at_boundary(registry: Registry, bundle: Bundle, result: BisectResult, mode: str, probe_for: ProbeFor,
                       outputs_differ: OutputsDiffer | None, progress: Callable[[str], None] | None) -> dict:
    from ...analysis.lowering_diff import lowering_diff
    from ...run.retrace import program_file_names, retrace_refusal

    refusal = retrace_refusal(bundle.manifest)
    if refusal is not None:
        return unretraceable(result, refusal)
    if progress:
        progress(f"bisect: which layer changed from {result.last_good} to {result.first_bad}: "
                 "both replayed frozen and retraced")
    from .probes import retraced_text

    runs = boundary_runs(result, mode, probe_for)

    def lowering_of(a: dict, b: dict) -> dict | None:
        before, after = retraced_text(registry, a), retraced_text(registry, b)
        return lowering_diff(before, after, program_file_names(bundle.manifest)) if before and after else None

    return boundary_layer(result, runs, outputs_differ, lowering_of, mode)


def boundary_runs(result: BisectResult, mode: str, probe_for: ProbeFor) -> dict[tuple[str, str], dict]:
    """(version, mode) -> run, for the last good and first bad release, frozen and retraced: the bisection's own
    runs, the other mode replayed (untimed after a frozen bisection by time); after a retraced bisection by time, one
    replay of all four timed together."""
    pair = [result.last_good, result.first_bad]
    if result.criterion == TIME and mode == FROZEN:
        timed = result.confirm_runs or [result.runs[v] for v in pair if v in result.runs]
        runs = timed + probe_for(RETRACE, timed=False)(pair)
    elif result.criterion == TIME:  # each pair's rounds end once its side of the bisection's change is known
        runs = probe_for(BOTH, ends=endpoints_ends(result))(pair)
    else:
        runs = [result.runs[v] for v in pair if v in result.runs]
        unrun = [v for v in pair if v not in result.runs]  # classed without a replay (bisect --nightly)
        runs += probe_for(mode)(unrun) if unrun else []
        runs += probe_for(RETRACE if mode == FROZEN else FROZEN)(pair)
    return {(run["requested"], (run.get("contender") or {}).get("mode", FROZEN)): run for run in runs}


def boundary_layer(result: BisectResult, runs: dict[tuple[str, str], dict], outputs_differ: OutputsDiffer | None,
                   lowering_of: LoweringOf, mode: str | None = None) -> dict:
    """{"layer": "compiler" | "lowering" | "both" | "neither" | None, "last_good", "first_bad", "frozen" and
    "retraced": {"changed": bool | None, "evidence"}, "lowering": {"changed", "text"} | None, "text"}. `mode`: the
    one the bisection searched in (a frozen bisection by time has shown the frozen change itself)."""
    good, bad = result.last_good, result.first_bad
    if result.criterion == TIME and mode == FROZEN:
        frozen = _bisected(result)
        retraced = {"changed": None, "evidence": "run once, untimed, for the StableHLO each release lowers it to"}
    else:
        frozen = _shows(result, runs.get((good, FROZEN)), runs.get((bad, FROZEN)), outputs_differ)
        retraced = _shows(result, runs.get((good, RETRACE)), runs.get((bad, RETRACE)), outputs_differ)
    lowering = None
    if runs.get((good, RETRACE)) is not None and runs.get((bad, RETRACE)) is not None:
        lowering = lowering_of(runs[(good, RETRACE)], runs[(bad, RETRACE)])
    lowered = None if lowering is None else bool(lowering["changed"])
    if frozen["changed"] is None and lowered is False and retraced["changed"] is not None:
        frozen = _own_lowering(good, frozen, retraced)
    layer = _layer(frozen["changed"], lowered)
    return {"layer": layer, "last_good": good, "first_bad": bad, "frozen": frozen, "retraced": retraced,
            "lowering": None if lowering is None else {"changed": lowered, "text": lowering["text"]},
            "text": _layer_text(layer, good, bad, frozen, lowered, lowering)}


def _own_lowering(good: str, frozen: dict, retraced: dict) -> dict:
    """The frozen pair could not be judged (the packed module does not load on the last good release: a newer
    StableHLO, a new kernel), but both releases lower the program to the same StableHLO: the retraced pair then
    runs one program on both, the last good release's own lowering, and judges the compiler and runtime."""
    return {"changed": retraced["changed"],
            "evidence": f"the packed module could not be judged on jax {good} ({frozen['evidence']}); judged on the "
                        f"StableHLO both lower the program to, the same on both: {retraced['evidence']}"}


def _bisected(result: BisectResult) -> dict:
    """The frozen change at the boundary as the bisection timed it (each release beside the good end) and as its
    confirmation timed it again (the first bad beside the last good release): changed only where that repeated."""
    def said(version: str) -> str:
        return f"jax {version}: {result.evidence.get(version) or result.classes.get(version) or 'the good end'}"
    found = f"the bisection timed it, each release beside jax {result.good}: {said(result.last_good)}; " \
            f"{said(result.first_bad)}"
    if result.confirmation is None:
        return {"changed": True, "evidence": found}
    return {"changed": bool(result.confirmation["confirmed"]), "evidence": f"{found}; {result.confirmation['why']}"}


def unretraceable(result: BisectResult, refusal: str) -> dict:
    """The layer of a frozen bisection's boundary whose bundle cannot be retraced: the frozen module showed the
    change (that is what the bisection judged), the lowering is unknown."""
    frozen = {"changed": True, "evidence": result.evidence.get(result.first_bad, "")}
    return {"layer": "compiler", "last_good": result.last_good, "first_bad": result.first_bad, "frozen": frozen,
            "retraced": {"changed": None, "evidence": refusal}, "lowering": None,
            "text": f"XLA (the compiler): the frozen module changed from jax {result.last_good} to "
                    f"{result.first_bad} ({frozen['evidence']}); JAX's lowering was not checked: {refusal}"}


def _shows(result: BisectResult, good_run: dict | None, bad_run: dict | None,
           outputs_differ: OutputsDiffer | None) -> dict:
    """Whether the pair (good, bad) in one mode shows the change the bisection judged: {"changed", "evidence"}."""
    if good_run is None or bad_run is None:
        return {"changed": None, "evidence": "not replayed"}
    if good_run["status"] not in ("ok", "mismatch"):  # nothing to judge the bad one against
        return {"changed": None, "evidence": f"{good_run['status']}: {good_run.get('reason', '')}"}
    if result.criterion in (OUTPUTS_VS_GOOD, BITS) and outputs_differ is None:
        return {"changed": None, "evidence": "outputs not compared"}
    cls, evidence = _classify_pair(result, good_run, bad_run, outputs_differ)
    if cls == "skip" or (result.criterion == OUTPUTS and good_run["status"] not in ("ok", "mismatch")):
        return {"changed": None, "evidence": evidence}
    if result.criterion == OUTPUTS and good_run["status"] == "mismatch" and cls == "bad":
        apart = outputs_differ(good_run, bad_run) if outputs_differ is not None else None
        said = by_outputs(apart or SAME, good_run["requested"], OUTPUTS_VS_GOOD)[1]
        return {"changed": None if apart is None else apart == BEYOND,
                "evidence": f"both mismatch the reference; {said}"}
    return {"changed": cls == "bad", "evidence": evidence}


def _classify_pair(result: BisectResult, good_run: dict, bad_run: dict,
                   outputs_differ: OutputsDiffer | None) -> tuple[str, str]:
    """The bad run's class beside the good one by the bisection's criterion (by time: against its two ends)."""
    ends = endpoints_ends(result) if result.criterion == TIME else None
    return classify(bad_run, good_run, result.log_ratio, result.criterion, outputs_differ, ends)


def _layer(frozen: bool | None, lowered: bool | None) -> str | None:
    if frozen and lowered:
        return "both"
    if frozen and lowered is False:
        return "compiler"
    if frozen is False and lowered:
        return "lowering"
    if frozen is False and lowered is False:
        return "neither"
    return None


def _layer_text(layer: str | None, good: str, bad: str, frozen: dict, lowered: bool | None,
                lowering: dict | None) -> str:
    said = {True: f"the frozen module shows the change ({frozen['evidence']})",
            False: f"the frozen module does not show the change ({frozen['evidence']})",
            None: f"the frozen module could not be judged ({frozen['evidence']})"}[frozen["changed"]]
    lowered_text = {True: f"JAX's lowering changed from jax {good} to {bad}: {lowering['text'] if lowering else ''}",
                    False: f"jax {good} and {bad} lower the program to the same StableHLO",
                    None: "the retraced StableHLO of both could not be compared"}[lowered]
    head = WORDS[layer] if layer else "undecided"
    return f"{head}: {said}; {lowered_text}"


def next_commands(result: BisectResult, layer: dict, ref: str, store_args: Sequence[str] = (),
                  replay_args: Sequence[str] = ()) -> list[dict]:
    """What to run next from the boundary: [{"what", "command"}]; minimize for a compiler change (its property:
    the bisection's criterion), the retraced replay that shows the lowering diff for a lowering change (with the
    bisection's `replay_args`). `store_args`: `--store URL` where the bundle is not in the default store."""
    good, bad = result.last_good, result.first_bad
    store = "".join(f" {shlex.quote(a)}" for a in store_args)
    tail = "".join(f" {shlex.quote(a)}" for a in replay_args) + store
    out = []
    if layer["layer"] in ("compiler", "both"):
        if result.criterion == TIME:
            slower = [good, bad] if (result.log_ratio or 0.0) >= 0 else [bad, good]  # B is the slower one
            pair, prop = slower, "--slower"
        else:
            pair, prop = [good, bad], {BITS: "--outputs --bits", ERROR: "--error"}.get(result.criterion, "--outputs")
        out.append({"what": "minimize", "command": f"reprobundle minimize {shlex.quote(ref)} --jax {pair[0]} "
                                                   f"--jax {pair[1]} {prop}{store}"})
    lowered = (layer.get("lowering") or {}).get("changed")
    if layer["layer"] in ("lowering", "both") or layer["layer"] is None and lowered:  # undecided: still show it
        out.append({"what": "lowering diff",
                    "command": f"reprobundle replay {shlex.quote(ref)} --jax {good} --jax {bad} --retrace "
                               f"--baseline {shlex.quote(good + ' retraced')}{tail}"})
    return out
