"""Explain a regression: which compiler pass or flag, and a workaround if one exists.

1. Evidence: one short replay of the baseline and the candidate with per-pass dumps (`--xla_dump_hlo_pass_re=.*`):
   the passes that changed the module on each side and where the two pipelines diverge (analysis/passes.py), and
   the ops whose fusion changed (analysis/hlo_diff.fusion_diff of the optimized HLO).
2. Experiments chosen from that evidence, each the candidate under one setting (`plan`): every pass that changed the
   module only on the candidate, or differently on both, disabled (`--xla_disable_hlo_passes=NAME`); and the flags of
   the platform's curated set (CPU_FLAGS, GPU_FLAGS) that relate to the ops that moved, toggled.
3. One replay of [baseline, candidate, candidate + each setting], all timed in the same paired rounds, stored as
   runs; per experiment: its optimized HLO against the baseline's (`hlo_same_as_baseline`, up to names;
   `fusions_same_as_baseline`), its outputs against the reference, and its verdict against the baseline.
4. analysis/diagnosis.py says what the experiments showed.
"""

from __future__ import annotations

import io
import logging
import time
import zipfile
from dataclasses import dataclass, field, replace
from typing import Callable, Sequence

from ..analysis.diagnosis import diagnose
from ..analysis.hlo_diff import FREE_OPCODES, fusion_diff
from ..analysis.passes import pass_diff, read_pipeline, same_hlo
from ..bundle.model import run_label
from ..bundle.registry import Bundle, Registry
from ..errors import ReplayError
from ..logs import Status
from ..run.contenders import ContenderSpec, Settings
from ..run.options import ReplayOptions

log = logging.getLogger(__name__)

PASS_DUMP_FLAGS = ("--xla_dump_hlo_pass_re=.*",)
MAX_PASS_EXPERIMENTS = 4
MAX_FLAG_EXPERIMENTS = 3
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
    kind: str  # "pass" | "flag"
    what: str  # the pass name or the flag
    why: str
    spec: ContenderSpec

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


def gather_evidence(registry: Registry, bundle: Bundle, baseline: ContenderSpec, candidate: ContenderSpec,
                    replay_fn: Callable[..., list[dict]], options: ReplayOptions) -> Evidence:
    """Compile and run both once with per-pass dumps (not stored as runs) and read what the passes did."""
    once = replace(options.outputs_only(), dump=True)  # compiled side by side: nothing here is timed
    runs = replay_fn([with_flags(baseline, PASS_DUMP_FLAGS), with_flags(candidate, PASS_DUMP_FLAGS)], once,
                     store_runs=False)
    failed = {side: f"{run['status']}: {run['reason']}" for side, run in zip(("baseline", "candidate"), runs)
              if run["status"] not in ("ok", "mismatch")}
    pipelines = [read_pipeline(dump_files(registry, run)) if run["status"] in ("ok", "mismatch") else None
                 for run in runs]
    hlo = {side: hlo_of(registry, run) for side, run in zip(("baseline", "candidate"), runs)}
    fusion = fusion_diff(hlo["baseline"], hlo["candidate"]) if hlo["baseline"] and hlo["candidate"] else None
    return Evidence(pass_diff(pipelines[0], pipelines[1]), fusion, moved_ops(fusion), hlo, failed)


def plan(evidence: Evidence, candidate: ContenderSpec, platform: str) -> list[Experiment]:
    """The experiments on the candidate that the evidence calls for (see the module's docstring)."""
    return _pass_experiments(evidence, candidate) + _flag_experiments(evidence, candidate, platform)


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


def _verdict(row: dict | None) -> dict | None:
    if not row or row.get("verdict") in (None, "baseline"):
        return None
    return {k: row.get(k) for k in ("verdict", "ratio", "ci95", "p_value", "settled", "rounds")}


def experiment_facts(exp: Experiment, run: dict, rows: dict[str, dict], diffs: dict[str, dict],
                     baseline_hlo: str | None, hlo: str | None) -> dict:
    """What one experiment showed, as data."""
    label = run_label(run)
    row = rows.get(label) or {}
    fusion = fusion_diff(baseline_hlo, hlo) if baseline_hlo and hlo else None
    check = run.get("check") or {}
    return {"kind": exp.kind, "what": exp.what, "why": exp.why, "label": label, "setting": exp.setting,
            "jax": exp.spec.jax, "status": run["status"], "reason": run.get("reason", ""),
            "outputs_ok": bool(check.get("ok")) if run["status"] in ("ok", "mismatch") else None,
            "hlo_same_as_baseline": same_hlo(baseline_hlo, hlo),
            "fusions_same_as_baseline": None if fusion is None else bool(fusion["identical"]),
            "fusion": fusion["summary"] if fusion else None,
            "vs_baseline": _verdict(row), "moved": (diffs.get(label) or {}).get("moved")}


def explain(registry: Registry, bundle: Bundle, baseline: ContenderSpec, candidate: ContenderSpec, *,
            replay_fn: Callable[..., list[dict]], compare_fn: Callable[[list[dict], str], dict], platform: str,
            options: ReplayOptions, progress: Callable[[str], None] | None = None) -> dict:
    """Run the evidence replay, the experiments and the diagnosis (see the module's docstring).

    `replay_fn(contenders, options, store_runs=...) -> runs` replays this bundle (run/replay.replay with the caller's
    environment); `options.max_time_s` bounds the whole explain; `compare_fn(runs, baseline_label) -> comparison`
    compares stored runs. Returns {"baseline",
    "candidate", "platform", "passes", "fusion", "moved_ops", "experiments", "diagnosis", "comparison", "runs",
    "wall_s"}."""
    start = time.monotonic()
    if progress:
        progress(Status(f"compiling {bundle.ref} on {baseline.label} and {candidate.label} with per-pass dumps",
                        "evidence"))
    evidence = gather_evidence(registry, bundle, baseline, candidate, replay_fn, options)
    if evidence.failed:
        raise ReplayError(f"{bundle.ref}: " + "; ".join(f"the {side} did not run ({why})"
                                                         for side, why in evidence.failed.items()),
                          hint="explain needs both versions to run; replay them to see why")
    experiments = plan(evidence, candidate, platform)
    if progress:
        progress(Status(f"{len(experiments)} experiment(s): " + ", ".join(e.setting for e in experiments), "plan"))
    left = None if options.max_time_s is None else max(30.0, options.max_time_s - (time.monotonic() - start))
    runs = replay_fn([baseline, candidate, *(e.spec for e in experiments)],
                     replace(options, dump=True, profile=True, max_time_s=left), store_runs=True)
    comparison = compare_fn(runs, run_label(runs[0]))
    rows = {r["label"]: r for r in comparison["rows"]}
    diffs = {d["label"]: d for d in comparison["diffs"]}
    baseline_hlo = hlo_of(registry, runs[0])
    facts = [experiment_facts(e, run, rows, diffs, baseline_hlo, hlo_of(registry, run))
             for e, run in zip(experiments, runs[2:])]
    candidate_row = rows.get(run_label(runs[1]))
    diagnosis = diagnose(baseline.label, candidate.label, _verdict(candidate_row) if runs[1]["status"] in
                         ("ok", "mismatch") else None, facts)
    return {"baseline": baseline.label, "candidate": candidate.label, "platform": platform,
            "regression": _verdict(candidate_row), "passes": evidence.passes["passes"],
            "pass_diff": {k: v for k, v in evidence.passes.items() if k != "passes"},
            "fusion": evidence.fusion["summary"] if evidence.fusion else None, "moved_ops": evidence.moved_ops,
            "experiments": facts, "diagnosis": diagnosis, "comparison": comparison, "runs": runs,
            "wall_s": time.monotonic() - start}
