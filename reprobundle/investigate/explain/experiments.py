"""Explain a regression: which changed default, compiler pass or flag, and a workaround if one exists.

1. Evidence: both releases compiled and run once, untimed, with per-pass dumps (`--xla_dump_hlo_pass_re=.*`): the
   passes that changed the module on each side and where the two pipelines diverge (analysis/passes.py), the ops
   whose fusion changed (analysis/hlo_diff.fusion_diff). Frozen or retraced is chosen as bisect chooses
   (investigate/search/mode_choice.py): a JAX option's change never shows in the frozen module, so when only the retraced
   outputs differ, the explanation retraces. The criterion: outputs when they differ beyond the tolerance (or
   `by`), else time.
2. Experiments, each the candidate under one setting (`plan`): each default that changed between the two releases
   set back (investigate/explain/default_experiments.py: flags, and JAX options on the retraced program); every pass that
   changed the module only on the candidate, or differently on both, disabled (`--xla_disable_hlo_passes=NAME`);
   the flags of the platform's curated set (CPU_FLAGS, GPU_FLAGS) that relate to the ops that moved, toggled.
3. Cheap first: every experiment screened on the frozen module in one long-lived worker per release, a new compile
   with its flag as a compile option (experiment_screen.py); only those that moved toward the baseline (and those the
   screen cannot serve: retraced ones) go on, at most MAX_MEASURED.
4. The measurement decides: by outputs, one stored replay running each once, judged against the baseline's outputs;
   by time, one replay of [baseline, candidate, experiments] timed in the same paired rounds, stored as runs, with
   the reach's contenders (the first changed default's, on the releases after the candidate: release_reach.py) in
   the same rounds, each answered at the 5% the tool measures (the budget's `slowdown_only`); per
   experiment its optimized HLO against the baseline's (`hlo_same_as_baseline`, up to names;
   `fusions_same_as_baseline`), its outputs, its verdict against the baseline and against the candidate.
5. analysis/diagnosis.py says what the experiments showed; a changed default that restored the baseline is said as
   the change, with the lines to paste and where it still works.
"""

from __future__ import annotations

import io
import logging
import time
import zipfile
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from ...analysis.diagnosis import diagnose
from ...analysis.hlo_diff import FREE_OPCODES, fusion_diff
from ...analysis.passes import pass_diff, read_pipeline, same_hlo
from ...bundle.model import run_label
from ...bundle.registry import Bundle, Registry
from ...envs.platforms import one_process_at_a_time
from ...errors import ReplayError, ReproBundleError, TimeSpentError
from ...logs import Status
from ...run.contenders import FROZEN, RETRACE, ContenderSpec, Settings
from ...run.replay_options import ReplayOptions
from ...run.retrace import retrace_refusal
from ..search.bisection import BEYOND, BITS_ONLY
from .default_experiments import DefaultChange, experiment_spec, option_refusal, workaround_lines
from .experiment_screen import Screened, compile_options, extra_flags

log = logging.getLogger(__name__)

PASS_DUMP_FLAGS = ("--xla_dump_hlo_pass_re=.*",)
MAX_PASS_EXPERIMENTS = 4
MAX_FLAG_EXPERIMENTS = 3
MAX_MEASURED = 6  # experiments in the measurement after the screen
MAX_DUMP_BYTES = 512 << 20  # what is read of one side's pass dumps
ANY_OP = "*"


@dataclass(frozen=True)
class FlagToggle:
    """A documented XLA flag, set away from its default, and the ops it concerns (ANY_OP: every op's code)."""

    flag: str
    ops: frozenset[str]
    why: str


# Curated from the flag definitions of XLA (xla/debug_options_flags.cc, openxla/xla, the releases of jaxlib
# 0.7-0.8): flags that change how ops are compiled or run, not what they compute. Each is toggled away from its
# default in those releases. A release that does not define one fails that experiment only (run/contenders.py).
CPU_FLAGS = (
    FlagToggle("--xla_cpu_use_fusion_emitters=false", frozenset({ANY_OP}),
               "fusions and the ops wrapped into them are compiled by the older elemental emitters"),
    FlagToggle("--xla_cpu_use_xnnpack=false", frozenset({"dot", "convolution", "reduce", "add", "multiply"}),
               "no XNNPACK for the ops it supports"),
    FlagToggle("--xla_cpu_enable_concurrency_optimized_scheduler=false", frozenset({ANY_OP}),
               "the memory-optimizing scheduler instead of the concurrency-optimized one"),
    FlagToggle("--xla_cpu_copy_insertion_use_region_analysis=true", frozenset({"copy", "while", "conditional"}),
               "region-based analysis in copy insertion"),
)
GPU_FLAGS = (
    FlagToggle("--xla_gpu_enable_triton_gemm=false", frozenset({"dot", "fusion"}), "GEMMs by cuBLAS, not Triton"),
    FlagToggle("--xla_gpu_autotune_level=0", frozenset({"dot", "convolution"}), "no autotuning of GEMMs and convs"),
    FlagToggle("--xla_gpu_enable_command_buffer=", frozenset({ANY_OP}), "kernels launched one by one, no CUDA graphs"),
    FlagToggle("--xla_gpu_enable_reduction_epilogue_fusion=false", frozenset({"reduce"}),
               "no epilogue fusion into reductions"),
    FlagToggle("--xla_gpu_enable_latency_hiding_scheduler=true", frozenset({"all-reduce", "all-gather",
                                                                            "reduce-scatter", "collective-permute"}),
               "the latency-hiding scheduler for collectives"),
)


@dataclass
class Experiment:
    kind: str  # "pass" | "flag" | "default"
    what: str  # the pass name, the flag, or the flag or option whose default changed
    why: str
    spec: ContenderSpec
    change: DefaultChange | None = None  # kind "default": what changed between the two releases
    screened: Screened | None = None

    @property
    def setting(self) -> str:
        return self.spec.settings.describe()


@dataclass
class Evidence:
    passes: dict
    fusion: dict | None
    moved_ops: list[str]
    hlo: dict[str, str | None] = field(default_factory=dict)  # side ("baseline"/"candidate") -> optimized HLO
    failed: dict[str, str] = field(default_factory=dict)  # side -> why its evidence run failed
    runs: list[dict] = field(default_factory=list)  # the two evidence runs (untimed, not stored as runs)


def with_flags(spec: ContenderSpec, flags: Sequence[str]) -> ContenderSpec:
    s = spec.settings
    return ContenderSpec(spec.jax, spec.mode, Settings(tuple(s.xla_flags) + tuple(flags), s.jax_config, s.env))


def dump_files(registry: Registry, run: dict) -> dict[str, bytes]:
    """The pass dump files of a run's stored XLA dump ({name: bytes}), up to MAX_DUMP_BYTES."""
    art = (run.get("artifacts") or {}).get("xla_dump")
    if not art:
        return {}
    files: dict[str, bytes] = {}
    total = 0
    with zipfile.ZipFile(io.BytesIO(registry.get_blob(art["blob"]))) as zf:
        for info in zf.infolist():
            if not info.filename.endswith(".txt") or not info.filename.rsplit("/", 1)[-1].startswith("module_"):
                continue
            total += info.file_size
            if total > MAX_DUMP_BYTES:
                log.warning("%s: pass dumps over %d MiB: the rest is not read", run_label(run), MAX_DUMP_BYTES >> 20)
                break
            files[info.filename] = zf.read(info)
    return files


def hlo_of(registry: Registry, run: dict) -> str | None:
    art = (run.get("artifacts") or {}).get("hlo_after")
    return registry.get_blob(art["blob"]).decode("utf-8", "replace") if art else None


def moved_ops(diff: dict | None) -> list[str]:
    """The ops whose fusion changed between the two optimized modules (opcodes, free ops left out)."""
    if not diff:
        return []
    ops: dict[str, None] = {}
    for move in diff.get("moves") or []:
        ops.setdefault(str(move["op"]), None)
    for key in ("appeared", "disappeared", "unfused_only_base", "unfused_only_cand"):
        for node in diff.get(key) or []:
            for op in node.get("ops") or {}:
                ops.setdefault(str(op), None)
    for entry in diff.get("refused") or []:
        for part in str(entry.get("label", "")).split("+"):
            ops.setdefault(part.split("×")[0], None)
    return [op for op in ops if op and op not in FREE_OPCODES]


def evidence_runs(baseline: ContenderSpec, candidate: ContenderSpec, replay_fn: Callable[..., list[dict]],
                  options: ReplayOptions) -> list[dict]:
    """Both compiled and run once with per-pass dumps, untimed and side by side (not stored as runs)."""
    once = replace(options.outputs_only(), dump=True)
    return replay_fn([with_flags(baseline, PASS_DUMP_FLAGS), with_flags(candidate, PASS_DUMP_FLAGS)], once,
                     store_runs=False, what="evidence" + ("" if baseline.mode == FROZEN else f" {baseline.mode}"))


def evidence_of(registry: Registry, runs: list[dict]) -> Evidence:
    """What the passes did on each side of the two evidence runs, and the ops whose fusion changed."""
    failed = {side: f"{run['status']}: {run['reason']}" for side, run in zip(("baseline", "candidate"), runs)
              if run["status"] not in ("ok", "mismatch")}
    pipelines = [read_pipeline(dump_files(registry, run)) if run["status"] in ("ok", "mismatch") else None
                 for run in runs]
    hlo = {side: hlo_of(registry, run) for side, run in zip(("baseline", "candidate"), runs)}
    fusion = fusion_diff(hlo["baseline"], hlo["candidate"]) if hlo["baseline"] and hlo["candidate"] else None
    return Evidence(pass_diff(pipelines[0], pipelines[1]), fusion, moved_ops(fusion), hlo, failed, runs)


def plan(evidence: Evidence, candidate: ContenderSpec, platform: str,
         changes: Sequence[DefaultChange] = ()) -> list[Experiment]:
    """The experiments on the candidate that the evidence and the release delta call for (the module's docstring):
    the changed defaults first, then the passes, then the curated flags; a setting twice is tried once."""
    experiments = _default_experiments(changes, candidate) + _pass_experiments(evidence, candidate) + \
        _flag_experiments(evidence, candidate, platform)
    return _once_each(experiments)


def _once_each(experiments: list[Experiment]) -> list[Experiment]:
    """The experiments in order, a setting met again left out."""
    seen: set[ContenderSpec] = set()
    out = []
    for e in experiments:
        if e.spec not in seen:
            seen.add(e.spec)
            out.append(e)
    return out


def _default_experiments(changes: Sequence[DefaultChange], candidate: ContenderSpec) -> list[Experiment]:
    return [Experiment("default", f"--{c.name}" if c.kind == "flag" else c.name, c.sentence(),
                       experiment_spec(c, candidate, candidate.mode), c) for c in changes]


def _pass_experiments(evidence: Evidence, candidate: ContenderSpec) -> list[Experiment]:
    """Each pass that changed the module only on the candidate, or differently on both, disabled: the pass where the
    pipelines diverge first, at most MAX_PASS_EXPERIMENTS."""
    passes = evidence.passes.get("passes") or []
    divergence = ((evidence.passes.get("divergence") or {}).get("candidate") or {}).get("pass")
    first = [p for p in passes if p["name"] == divergence and p["candidate"]]
    acting = [p for p in passes if (p["candidate"] and not p["baseline"]) or p["effect_differs"]]
    chosen = list({p["name"]: p for p in first + acting}.values())[:MAX_PASS_EXPERIMENTS]
    experiments = []
    for p in chosen:
        why = "changed the module only on the candidate" if not p["baseline"] else \
            "changed the module on both, differently"
        if p["name"] == divergence:
            why += "; the pipelines diverge there"
        experiments.append(Experiment("pass", p["name"], why,
                                      with_flags(candidate, (f"--xla_disable_hlo_passes={p['name']}",))))
    return experiments


def _flag_experiments(evidence: Evidence, candidate: ContenderSpec, platform: str) -> list[Experiment]:
    """The platform's curated flags that concern the ops whose fusion changed (or every op's code, when anything
    changed), toggled: at most MAX_FLAG_EXPERIMENTS."""
    moved = set(evidence.moved_ops)
    changed = bool(moved) or not evidence.passes.get("identical", True)
    flags = GPU_FLAGS if platform in ("cuda", "rocm") else CPU_FLAGS if platform == "cpu" else ()
    related = [f for f in flags if (ANY_OP in f.ops and changed) or f.ops & moved]
    experiments = []
    for f in related[:MAX_FLAG_EXPERIMENTS]:
        ops = sorted(moved if ANY_OP in f.ops else f.ops & moved)
        why = f.why + (f" (ops that moved: {', '.join(ops[:4])})" if ops else "")
        experiments.append(Experiment("flag", f.flag, why, with_flags(candidate, (f.flag,))))
    return experiments


def row_verdict(row: dict | None) -> dict | None:
    if not row or row.get("verdict") in (None, "baseline"):
        return None
    return {k: row.get(k) for k in (*_VERDICT_KEYS, *_JUDGED_KEYS) if k in row or k not in _JUDGED_KEYS}


_VERDICT_KEYS = ("verdict", "ratio", "ci95", "p_value", "settled", "rounds")
_JUDGED_KEYS = ("side", "side_said", "ruled_out")  # on a row where the rounds were judged so too


def add_ruled_out(rows: list[dict], runs: list[dict]) -> None:
    """Each timed run whose paired rounds beside the baseline's run (runs[0]) ruled out a slowdown of the 5% this
    measures gets the round that did, as `ruled_out` on its comparison row (analysis/resolution.slowdown_ruled_out:
    what the budget's `slowdown_only` stopped its rounds by)."""
    from ...analysis.resolution import slowdown_ruled_out

    by_label = {r.get("label"): r for r in rows}
    for run in runs[1:]:
        row = by_label.get(run_label(run))
        if row is not None and _ran(runs[0]) and _ran(run):
            found = slowdown_ruled_out(runs[0].get("timing") or {}, run.get("timing") or {})
            if found is not None:
                row["ruled_out"] = found


def add_sides(rows: list[dict], runs: list[dict], ends: tuple[float, float, int]) -> None:
    """Each timed run's side of the confirmed change beside the baseline's run (`ends`: analysis/which_end.py, what
    the budget stopped its rounds by), on its comparison row: "side" ("good": like the baseline's end of the change,
    "bad": like the candidate's) and how it was decided; a run the test left undecided is judged by its verdict."""
    from ...analysis.verdict import paired_log_ratios
    from ...analysis.which_end import ERROR, Ends, rounds_text, which_end

    change = Ends(*ends)
    by_label = {r.get("label"): r for r in rows}
    for run in runs[1:]:
        row = by_label.get(run_label(run))
        if row is None or not (_ran(runs[0]) and _ran(run)):
            continue
        found = which_end(paired_log_ratios(runs[0].get("timing") or {}, run.get("timing") or {}) or [], change)
        if found.side is not None:
            row["side"] = found.side
            row["side_said"] = (f"the test between the confirmed ends ({change.ratio:.2f}x, {ERROR:.0%} error each "
                                f"way) decided in {rounds_text(found.rounds)}")


def experiment_facts(exp: Experiment, run: dict | None, rows: dict[str, dict], diffs: dict[str, dict],
                     baseline_hlo: str | None, hlo: str | None, apart: str | None = None) -> dict:
    """What one experiment showed, as data; `run` None: the screen left it out of the measurement. `apart`: how its
    outputs differ from the baseline's run (same, bits, beyond), when outputs judge."""
    facts = {"kind": exp.kind, "what": exp.what, "why": exp.why, "setting": exp.setting, "jax": exp.spec.jax,
             "mode": exp.spec.mode, "default": exp.change.as_record() if exp.change else None,
             "screen": exp.screened.as_record() if exp.screened else None, "measured": run is not None,
             "outputs_vs_baseline": apart}
    if run is None:
        return {**facts, "label": exp.spec.label, "status": "screened out", "reason": "", "outputs_ok": None,
                "hlo_same_as_baseline": None, "fusions_same_as_baseline": None, "fusion": None, "vs_baseline": None,
                "moved": None}
    label = run_label(run)
    row = rows.get(label) or {}
    fusion = fusion_diff(baseline_hlo, hlo) if baseline_hlo and hlo else None
    check = run.get("check") or {}
    return {**facts, "label": label, "status": run["status"], "reason": run.get("reason", ""),
            # against the baseline's outputs where both ran (the release it is compared with), never the packing
            # release's reference: a bundle packed on 0.10.2 has 0.10.2's outputs, which 0.4.31 need not give
            "outputs_ok": None if run["status"] not in ("ok", "mismatch") else apart != BEYOND if apart is not None
            else bool(check.get("ok")),
            "hlo_same_as_baseline": same_hlo(baseline_hlo, hlo),
            "fusions_same_as_baseline": None if fusion is None else bool(fusion["identical"]),
            "fusion": fusion["summary"] if fusion else None,
            "vs_baseline": row_verdict(row), "moved": (diffs.get(label) or {}).get("moved")}


@dataclass
class Setup:
    """What explain is given besides the two contenders: how to replay, compare, screen and read the releases.

    `replay_fn(contenders, options, store_runs=...) -> runs` replays this bundle (run/replay.replay with the caller's
    environment); `compare_fn(runs, baseline_label) -> comparison` compares stored runs; `worker_for(spec)` makes a
    module worker for the screen (None: no screen); `changes_fn()` -> (DefaultChange list, left out, note) of the
    two releases (None: the release delta is not used); `flag_types`: the candidate's XLA flags by name (release
    facts), for the screen's compile options; `reach_fn(change, spec, baseline, candidate, by, measured)` -> where a
    workaround still works (investigate/explain/release_reach.reach, measured, its timed runs taken from `measured`
    where the measurement timed them: `reach_ahead(change, spec, baseline, candidate)` names them)."""

    replay_fn: Callable[..., list[dict]]
    compare_fn: Callable[[list[dict], str], dict]
    platform: str
    options: ReplayOptions
    mode: str = "auto"  # "auto" | FROZEN | RETRACE
    by: str | None = None  # "outputs" | "bits" | "time"; None: chosen from the endpoints
    worker_for: Callable[[ContenderSpec], Any] | None = None
    changes_fn: Callable[[], tuple[list[DefaultChange], list[dict], str | None]] | None = None
    flag_types: Callable[[], dict | None] = lambda: None
    # (change, spec, baseline, candidate, by, runs measured already by contender) -> the reach
    reach_fn: Callable[[DefaultChange, ContenderSpec, ContenderSpec, ContenderSpec, str, dict], dict | None] | None = None
    # (change, spec, baseline, candidate) -> the contenders the reach times, timed in the measurement's rounds
    reach_ahead: Callable[[DefaultChange, ContenderSpec, ContenderSpec, ContenderSpec], list[ContenderSpec]] | None = \
        None
    profile: bool = False  # the per-op profile in the measurement (a report's table); off: the time goes to timing
    progress: Callable[[str], None] | None = None
    ledger: Any = None  # run/spent.Ledger: the screen is recorded there as a probe of its own

    def say(self, text: str, phase: str) -> None:
        if self.progress:
            self.progress(Status(text, phase))


def explain(registry: Registry, bundle: Bundle, baseline: ContenderSpec, candidate: ContenderSpec,
            setup: Setup) -> dict:
    """The evidence, the mode and criterion, the experiments (passes, curated flags, changed defaults), the screen,
    the measurement and the diagnosis (see the module's docstring). `setup.options.max_time_s` bounds the whole.
    Returns {"baseline", "candidate", "platform", "mode", "mode_why", "by", "by_why", "passes", "fusion",
    "moved_ops", "experiments", "not_tried", "screen", "diagnosis", "comparison", "runs", "wall_s"}."""
    start = time.monotonic()
    chosen = choose(registry, bundle, baseline, candidate, setup)
    baseline, candidate = (replace(s, mode=chosen.mode) for s in (baseline, candidate))
    evidence = evidence_of(registry, chosen.evidence)
    if evidence.failed:
        raise ReplayError(f"{bundle.ref}: " + "; ".join(f"the {side} did not run ({why})"
                                                         for side, why in evidence.failed.items()),
                          hint="explain needs both versions to run; replay them to see why")
    changes, not_tried, delta_note = setup.changes_fn() if setup.changes_fn else ([], [], None)
    refusal = option_refusal(chosen.mode, retrace_refusal(bundle.manifest))
    if refusal:
        not_tried += [{"name": c.name, "why": refusal} for c in changes if c.kind == "option"]
        changes = [c for c in changes if c.kind != "option"]
    experiments = plan(evidence, candidate, setup.platform, changes)
    experiments, undefined = _defined_here(experiments, setup.flag_types(), candidate)
    not_tried += undefined
    setup.say(f"{len(experiments)} experiment(s) from the passes, the flags and the defaults that changed", "plan")
    screen_note = _screen(registry, bundle, baseline, candidate, experiments, chosen, setup)
    measured = _to_measure(experiments, chosen.by)
    ahead = _reach_ahead(measured, setup, baseline, candidate, chosen.by)
    left = _time_left(setup, start)
    runs, comparison, facts, timed = _measure(registry, bundle, (baseline, candidate), experiments, measured,
                                              chosen.by, setup, left, ahead)
    regression = _regression(runs, comparison, chosen, registry, bundle)
    diagnosis = diagnose(baseline.label, candidate.label, regression, facts, by=chosen.by)
    _add_reach(diagnosis, experiments, setup, (baseline, candidate), chosen.by, timed)
    return {"baseline": baseline.label, "candidate": candidate.label, "platform": setup.platform,
            "mode": chosen.mode, "mode_why": chosen.mode_why, "by": chosen.by, "by_why": chosen.by_why,
            "regression": regression, "passes": evidence.passes["passes"],
            "pass_diff": {k: v for k, v in evidence.passes.items() if k != "passes"},
            "fusion": evidence.fusion["summary"] if evidence.fusion else None, "moved_ops": evidence.moved_ops,
            "experiments": facts, "not_tried": not_tried, "delta_note": delta_note, "screen": screen_note,
            "diagnosis": diagnosis, "comparison": comparison, "runs": runs, "wall_s": time.monotonic() - start}


def _time_left(setup: Setup, start: float) -> float | None:
    """What the measurement may spend: the seconds of --max-time left (at least 1: its rounds end within it; the
    screen left it room), None where there is no bound."""
    left = setup.ledger.left() if setup.ledger is not None else None
    if left is None and setup.options.max_time_s is not None:
        left = setup.options.max_time_s - (time.monotonic() - start)
    return None if left is None else max(1.0, left)


@dataclass
class Chosen:
    mode: str
    mode_why: str | None
    by: str
    by_why: str
    evidence: list[dict]  # the evidence runs of that mode
    apart: str | None  # how the two sides' outputs differ in that mode


def choose(registry: Registry, bundle: Bundle, baseline: ContenderSpec, candidate: ContenderSpec,
           setup: Setup) -> Chosen:
    """Frozen or retraced (investigate/search/mode_choice.py, as bisect chooses: retraced when only the retraced outputs
    differ) and the criterion: outputs when they differ beyond the tolerance (bits with `by` "bits"), else time."""
    from ..search.mode_choice import choose_mode
    from ..search.probes import output_difference

    apart = output_difference(registry, bundle)
    setup.say(f"compiling {bundle.ref} on {baseline.label} and {candidate.label} with per-pass dumps", "evidence")
    seen: dict[str, list[dict]] = {}

    def runs_in(mode: str):
        def replay(_versions):
            if mode not in seen:
                seen[mode] = evidence_runs(replace(baseline, mode=mode), replace(candidate, mode=mode),
                                           setup.replay_fn, setup.options)
            return seen[mode]
        return replay

    if setup.mode == "auto":
        refusal = retrace_refusal(bundle.manifest)
        try:
            mode, mode_why = choose_mode(baseline.label, candidate.label, runs_in(FROZEN),
                                         None if refusal else runs_in(RETRACE), apart, refusal)
        except TimeSpentError as e:  # the frozen evidence ran; the retraced one would end past --max-time
            mode, mode_why = FROZEN, f"frozen: the retraced program was not run: {e.message}"
    else:
        mode, mode_why = setup.mode, None
    runs = runs_in(mode)([])
    ran = all(r["status"] in ("ok", "mismatch") for r in runs)
    how = apart(*runs) if ran else None
    by, by_why = _criterion(setup.by, how)
    return Chosen(mode, mode_why, by, by_why, runs, how)


def _criterion(asked: str | None, apart: str | None) -> tuple[str, str]:
    if asked:
        return asked, f"--by {asked}"
    if apart == BEYOND:
        return "outputs", "the outputs differ beyond the tolerance: each experiment is judged by its outputs, untimed"
    if apart == BITS_ONLY:
        return "time", ("the outputs differ in bits only, within the tolerance: time judges (--by bits judges those "
                        "bits instead)")
    return "time", "the outputs are the same: time judges"


def _screen(registry: Registry, bundle: Bundle, baseline: ContenderSpec, candidate: ContenderSpec,
            experiments: list[Experiment], chosen: Chosen, setup: Setup) -> dict:
    """Each experiment screened on the frozen module (experiment_screen.py); retraced ones are not screened."""
    from ...bundle.trees import output_names
    from ..minimize.reduction import packed_module
    from .experiment_screen import Screened, screen

    if not experiments:
        return {"note": "nothing to screen"}
    why = _not_screened(setup, chosen)
    if why:
        for e in experiments:
            e.screened = Screened("not screened")
        return {"note": f"not screened: {why}"}
    assert setup.worker_for is not None  # _not_screened said so
    setup.say(f"screening {len(experiments)} experiment(s) on the frozen module, one worker per release", "screen")
    text, inputs = packed_module(registry, bundle)
    t0 = time.monotonic()
    ledger = setup.ledger
    result = screen(text, inputs, baseline, candidate, [e.spec for e in experiments], by=chosen.by,
                    flag_types=setup.flag_types(), worker_for=setup.worker_for,
                    output_names=output_names(bundle.manifest), progress=setup.progress,
                    time_left=ledger.left if ledger is not None else None,
                    reserve_s=ledger.expected("evidence") if ledger is not None else 0.0)
    for e, screened in zip(experiments, result.results):
        e.screened = screened
    wall_s = time.monotonic() - t0
    if setup.ledger is not None:
        setup.ledger.record("screen", [baseline.label, candidate.label], wall_s, {})
    return {"note": result.note, "base_ns": result.base_ns, "cand_ns": result.cand_ns, "wall_s": wall_s}


def _not_screened(setup: Setup, chosen: Chosen) -> str:
    """Why the experiments go to the measurement unscreened ("" where the screen runs): the screen holds a
    module worker per release at once, which a TPU, one process at a time, does not admit; there every experiment
    is measured in the alternated rounds."""
    if setup.worker_for is None:
        return "no screen asked"
    if chosen.mode == RETRACE:
        return "a retraced program is lowered anew by each contender"
    if one_process_at_a_time(setup.platform):
        return f"a {setup.platform.upper()} admits one process at a time: each experiment is measured in alternation"
    return ""


def _defined_here(experiments: list[Experiment], flag_types: dict | None,
                  candidate: ContenderSpec) -> tuple[list[Experiment], list[dict]]:
    """The curated flag experiments the candidate's release defines (its release facts); the others, not tried."""
    if not flag_types:
        return experiments, []
    kept, left = [], []
    for e in experiments:
        name = e.what.lstrip("-").partition("=")[0]
        if e.kind == "flag" and name not in flag_types:
            left.append({"name": e.what, "why": f"jax {candidate.jax}'s XLA does not define it"})
        else:
            kept.append(e)
    return kept, left


_PRIORITY = {"default": 0, "pass": 1, "flag": 2}


def _to_measure(experiments: list[Experiment], by: str) -> list[Experiment]:
    """The experiments the measurement takes: those the screen saw move toward the baseline, and those it could not
    judge (not screened, or by time where it saw no slowdown), at most MAX_MEASURED; changed defaults first."""
    def wanted(e: Experiment) -> bool:
        s = e.screened
        return s is None or s.moved is True or (s.moved is None and not s.error)

    chosen = [e for e in experiments if wanted(e)]
    chosen.sort(key=lambda e: (_PRIORITY.get(e.kind, 3), not (e.screened and e.screened.moved),
                               (e.screened.median_ns or 0) if e.screened else 0))
    return chosen[:MAX_MEASURED]


def _reach_ahead(measured: list[Experiment], setup: Setup, baseline: ContenderSpec, candidate: ContenderSpec,
                 by: str) -> list[ContenderSpec]:
    """The contenders of the reach of the first changed default measured (the one a workaround names, where one
    restores), by time: timed in the measurement's rounds, one measurement for both claims; [] where there is none
    or they cannot be had (the reach then says why, as it would have)."""
    exp = next((e for e in measured if e.change is not None), None)
    if by != "time" or exp is None or exp.change is None or setup.reach_ahead is None:
        return []
    try:
        return setup.reach_ahead(exp.change, exp.spec, baseline, candidate)
    except ReproBundleError as e:
        log.info("the reach of %s is not timed with the experiments: %s", exp.what, e.message)
        return []


def _measure(registry: Registry, bundle: Bundle, pair: tuple[ContenderSpec, ContenderSpec],
             experiments: list[Experiment], measured: list[Experiment], by: str, setup: Setup, left: float | None,
             ahead: Sequence[ContenderSpec] = ()) -> tuple[list[dict], dict, list[dict], dict]:
    """One stored replay of [baseline, candidate, measured..., the reach's contenders `ahead` not among them]: by
    outputs each once, untimed; by time in the same paired rounds. Its runs but the reach's, the comparison and
    each experiment's facts (in the plan's order), and every run by its contender (where the reach takes its own)."""
    baseline, candidate = pair
    flag_types = setup.flag_types()
    own = [baseline, candidate, *(_as_measured(e, candidate, flag_types) for e in measured)]
    contenders = own + [c for c in dict.fromkeys(ahead) if c not in own]
    if by == "time":
        setup.say(f"timing {len(measured)} experiment(s) with both in paired rounds", "experiments")
        # each answered at the resolution the tool measures: a workaround restores where a 5% slowdown beside the
        # baseline is ruled out, not where the two are shown the same within it (up to 32 rounds)
        options = replace(setup.options, dump=True, profile=setup.profile, max_time_s=left, slowdown_only=True)
    else:
        setup.say(f"running {len(measured)} experiment(s) once each, judged by their outputs", "experiments")
        options = replace(setup.options.outputs_only(), dump=True)
    every = setup.replay_fn(contenders, options, store_runs=True, bounded=False)  # its rounds end within `left`
    runs = every[:len(own)]
    comparison = setup.compare_fn(runs, run_label(runs[0]))
    if by == "time":
        add_ruled_out(comparison["rows"], runs)
    if by == "time" and options.ends:
        add_sides(comparison["rows"], runs, options.ends)
    facts = _facts_of(registry, bundle, experiments, dict(zip((e.spec for e in measured), runs[2:])), runs,
                      comparison)
    if by == "time":
        _against_candidate(facts, runs, setup)
    return runs, comparison, facts, dict(zip(contenders, every))


def _facts_of(registry: Registry, bundle: Bundle, experiments: list[Experiment], by_spec: dict, runs: list[dict],
              comparison: dict) -> list[dict]:
    """Each experiment's facts (experiment_facts), in the plan's order, from its run (`by_spec`) beside the
    baseline's (runs[0]) and the measurement's comparison."""
    from ..search.probes import output_difference

    rows = {r["label"]: r for r in comparison["rows"]}
    diffs = {d["label"]: d for d in comparison["diffs"]}
    baseline_hlo = hlo_of(registry, runs[0])
    apart = output_difference(registry, bundle)
    facts = []
    for e in experiments:
        run = by_spec.get(e.spec)
        how = apart(runs[0], run) if run is not None and _ran(runs[0]) and _ran(run) else None
        facts.append(experiment_facts(e, run, rows, diffs, baseline_hlo, hlo_of(registry, run) if run else None,
                                      how))
    return facts


def _as_measured(e: Experiment, candidate: ContenderSpec, flag_types: dict | None) -> ContenderSpec:
    """The experiment's contender in the measurement: where the screen saw its flag act as a compile option, the
    worker applies it to the compile, so that it shares the candidate's process each round (one start fewer a
    round); else as XLA_FLAGS in a process of its own."""
    if e.spec.mode == RETRACE or e.screened is None or e.screened.how != "compile option":
        return e.spec
    options = compile_options(extra_flags(e.spec, candidate), flag_types)
    return replace(e.spec, at_compile=tuple(sorted(options.items()))) if options else e.spec


def _ran(run: dict) -> bool:
    return run["status"] in ("ok", "mismatch")


def _against_candidate(facts: list[dict], runs: list[dict], setup: Setup) -> None:
    """Each timed experiment's verdict against the candidate too (the same paired rounds): one that did not settle
    against the baseline may still have settled faster than the candidate."""
    if not any(f["measured"] for f in facts) or not _ran(runs[1]):
        return
    rows = {r["label"]: r for r in setup.compare_fn(runs, run_label(runs[1]))["rows"]}
    for f in facts:
        if f["measured"]:
            f["vs_candidate"] = row_verdict(rows.get(f["label"]))


def _regression(runs: list[dict], comparison: dict, chosen: Chosen, registry: Registry, bundle: Bundle) -> dict | None:
    """By time: the candidate's verdict against the baseline; by outputs: how its outputs differ from the baseline's
    ({"outputs": same|bits|beyond})."""
    if chosen.by != "time":
        from ..search.probes import output_difference

        if not (_ran(runs[0]) and _ran(runs[1])):
            return None
        return {"outputs": output_difference(registry, bundle)(runs[0], runs[1])}
    rows = {r["label"]: r for r in comparison["rows"]}
    return row_verdict(rows.get(run_label(runs[1]))) if _ran(runs[1]) else None


def _add_reach(diagnosis: dict, experiments: list[Experiment], setup: Setup,
               pair: tuple[ContenderSpec, ContenderSpec], by: str, timed: dict | None = None) -> None:
    """Where the workaround of a changed default still works, measured on the releases after the candidate's (a flag
    can be removed, or stay and do nothing), and the lines to paste: a flag's compile-option form only where a run
    showed XLA accepts it on the candidate."""
    found = diagnosis.get("workaround") or diagnosis.get("partial")
    if not found or not found.get("default"):
        return
    baseline, candidate = pair
    exp = next(e for e in experiments if e.change and e.change.as_record() == found["default"])
    change = exp.change
    assert change is not None
    reach = None
    if setup.reach_fn:
        setup.say(f"measuring where {exp.what} still works", "reach")
        try:
            if setup.ledger is not None:  # measured as the experiments were: not started past --max-time
                setup.ledger.check("experiments")
            reach = setup.reach_fn(change, exp.spec, baseline, candidate, by, timed or {})
        except ReproBundleError as e:  # a later release that cannot be had here: the diagnosis stands without it
            reach = {"releases": [], "compile": None, "run_ids": [], "text": f"not measured: {e.message}"}
        diagnosis["reach"] = reach
    diagnosis["lines"] = _pasted_lines(change, exp, found, reach, candidate)


def _pasted_lines(change: DefaultChange, exp: Experiment, found: dict, reach: dict | None,
                  candidate: ContenderSpec) -> dict[str, str]:
    """The workaround's lines to paste; a flag's compile-option form only where a run on the candidate applied it
    as a compile option and ran (the measurement's, or the reach's check), never where XLA refused it."""
    lines = workaround_lines(change)
    if "compile" not in lines:
        return lines
    compiled = (reach or {}).get("compile") or {}
    accepted = candidate.jax in (compiled.get("accepted") or ()) or (
        _compile_accepted(exp, found) and candidate.jax not in (compiled.get("refused") or {}))
    if not accepted:
        del lines["compile"]
    return lines


def _compile_accepted(exp: Experiment, facts: dict) -> bool:
    """Whether a run on the candidate applied the experiment's flag as a compile option and ran: the screen's
    compile, or the measurement's."""
    screened = exp.screened
    return bool(screened and screened.how == "compile option" and not screened.error) and facts.get("status") in (
        "ok", "mismatch")
