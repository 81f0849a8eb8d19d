"""Replay: run a stored bundle on one or more JAX versions and record each run beside the bundle.

Each version runs the worker in its own environment (see envs.py), all versions timed together in interleaved
rounds (see schedule.py); what goes wrong in one version (no environment, incompatible artifact, crash, hang) is
that version's run record, and the others still run.
"""

from __future__ import annotations

import json
import logging
import math
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Mapping, Sequence, cast

import numpy as np

from ..analysis.busy import busy_reason
from ..analysis.hlo_diff import median_per_op
from ..analysis.verdict import check_outputs
from ..analysis.which_end import Ends
from ..bundle import manifest as mf
from ..bundle.dims import resized_inputs
from ..bundle.model import RunRecord, RunStatus
from ..bundle.registry import Bundle, Registry, utc_now
from ..bundle.trees import output_names
from ..config import settings as env_settings
from ..envs.platforms import PlatformChoice, choose_platform, detect_devices, one_process_at_a_time
from ..errors import CorruptBundleError, ReproBundleError
from ..logs import Status
from ..store.scratch import scratch_dir, temp_folder
from ..worker.dtypes import WIDE_64
from . import spent
from .budget import Budget, plan
from .conditions import conditions, snapshot
from .contenders import RETRACE, ContenderSpec, as_specs, is_control
from .execution import (
    PhaseLimits,
    Timing,
    build_job,
    check_leaf_size,
    dtype_of,
    environment_of,
    store_result,
    worker_memory_limit,
)
from .replay_options import ReplayOptions
from .retrace import lowering_fields, retrace_refusal
from .schedule import (
    Contender,
    Measurement,
    measure_interleaved,
    processes_at_once,
    rounds_for,
    shared_keys,
)

if TYPE_CHECKING:
    from ..envs.manager import EnvironmentManager

log = logging.getLogger(__name__)

# One profile of a few iterations can put a small op off by several times on a noisy machine; the per-op table is
# the median over the profiles of the first rounds (only the first round's trace is kept as an artifact). Two: a
# profile costs each worker ~1 s at the end of its round, and an adaptive replay may settle in three rounds.
PROFILED_ROUNDS = 2
# Untimed calls of a worker after the first round: the first round's warmup also measured the call (how many calls
# a step holds); a later round's workers only need their first calls (allocations, thread pools) out of the way.
LATER_WARMUP = 2


def leaf_array(data: bytes, leaf: dict) -> np.ndarray:
    """The array a stored leaf holds; a blob that does not hold exactly shape x dtype bytes is corrupt (checked
    before numpy sees the shape, so a hostile shape allocates nothing)."""
    dtype = dtype_of(leaf["dtype"])
    want = math.prod(leaf["shape"]) * dtype.itemsize
    if len(data) != want:
        raise CorruptBundleError(f"blob {leaf['blob']['digest']} holds {len(data)} bytes, but its leaf declares "
                                 f"{leaf['dtype']}{list(leaf['shape'])} ({want} bytes)",
                                 hint="the manifest is inconsistent with its blobs; fetch the bundle again")
    return np.frombuffer(data, dtype=dtype).reshape(leaf["shape"])


def reference_arrays(registry: Registry, bundle: Bundle) -> list[np.ndarray]:
    return [leaf_array(registry.get_blob(leaf["blob"]), leaf) for leaf in bundle.manifest["reference"]["outputs"]]


def _record(bundle: Bundle, spec: ContenderSpec, status: str, reason: str, **extra: Any) -> dict:
    """A run record of `bundle` on `spec` (its fields: bundle/model.py's RunRecord; `extra` its optional ones),
    not yet stored. The one place replay builds a record: every status goes through here."""
    if status not in mf.RUN_STATUSES:
        raise ValueError(f"not a run status: {status!r}")
    run = RunRecord(
        format=mf.RUN_FORMAT,
        format_version=mf.RUN_VERSION,
        run_id=Registry.new_run_id(),
        bundle_id=bundle.ref.bundle_id,
        bundle=str(bundle.ref),
        created=utc_now(),
        requested=spec.jax,
        status=cast(RunStatus, status),
        reason=reason,
        environment={},
        outputs=[],
        check=None,
        artifacts={},
        contender={**spec.redacted().as_record(), "label": spec.redacted().label},
    )
    return {**run, **extra}


def _measured_run(registry: Registry, bundle: Bundle, spec: ContenderSpec, measured: Measurement, *,
                  reference: Sequence[np.ndarray] | None, warmup: int, group: str, at_sizes: str = "") -> dict:
    """A contender's measurement as a run record (not yet stored)."""
    outcome = measured.outcome
    assert outcome is not None, "a measured contender always has an outcome"
    result = outcome.result or {}
    _log_worker_notes(spec.redacted().label, result)
    extra = _worker_fields(outcome.duration_s, result)
    if measured.failed_round is not None:
        return _record(bundle, spec, outcome.status if outcome.status in mf.RUN_STATUSES else "error",
                       outcome.reason, **extra)
    stored = store_result(registry, result, warmup=warmup)
    assert stored.timing is not None, "a worker's result always holds samples_ns (the worker starts it empty)"
    stored.timing.update(samples_ns=measured.samples_ns, steps=measured.steps, rounds=measured.rounds, group=group)
    if len(measured.per_op_tables) > 1:
        stored.per_op = median_per_op(measured.per_op_tables)
    if at_sizes:
        extra["labels"] = {"shape": at_sizes}
    if spec.mode == RETRACE:
        extra.update(lowering_fields(registry, bundle.manifest, stored.artifacts))
    if reference is None:
        return _record(bundle, spec, "ok", f"replayed at {at_sizes} on synthetic inputs: outputs are not "
                       "compared with the reference, which ran at the packed sizes", outputs=stored.outputs,
                       artifacts=stored.artifacts, timing=stored.timing, per_op=stored.per_op, **extra)
    names = output_names(bundle.manifest)
    check = check_outputs(reference, stored.arrays, names)
    status = "ok" if check["ok"] else "mismatch"
    reason = "" if check["ok"] else _mismatch_reason(check, names)
    return _record(bundle, spec, status, reason, outputs=stored.outputs, check=check,
                   artifacts=stored.artifacts, timing=stored.timing, per_op=stored.per_op, **extra)


def _worker_fields(duration_s: float, result: dict) -> dict[str, Any]:
    """What every measured run records of its worker: time, route, failed routes, environment, notes."""
    return {"duration_s": duration_s, "route": result.get("route"),
            "attempts": [{"route": str(a.get("route")), "error": str(a.get("error"))}
                         for a in result.get("attempts") or []],
            "environment": environment_of(result), "notes": [str(n) for n in result.get("notes") or []]}


def _log_worker_notes(requested: str, result: dict) -> None:
    for attempt in result.get("attempts") or []:  # the routes that did not work, before the one that did
        log.info("jax %s: route %s did not load: %s", requested, attempt.get("route"), attempt.get("error"))
    for note in result.get("notes") or []:
        log.info("jax %s: %s", requested, note)


def _mismatch_reason(check: dict, names: Sequence[str]) -> str:
    if check.get("reason"):
        return check["reason"]
    for name, leaf in zip(names, check["leaves"]):
        if not leaf["ok"]:
            if leaf.get("reason"):
                return f"{name}: {leaf['reason']}"
            return f"{name}: {leaf['mismatched']} elements outside tolerance; " + worst_element_text(name, leaf)
    return "outputs differ"


def worst_element_text(name: str, leaf: dict) -> str:
    """`worst at out[0, 3, 17]: expected 2981.5, got 2981.2 (abs err 0.32 > allowed 0.25 = 1024 ulps ... )`."""
    worst = leaf.get("worst")
    tolerance = (f"allowed: atol {leaf.get('atol_scaled', leaf['atol']):.3g} (scaled to max |reference| "
                 f"{leaf.get('scale', 0.0):.3g}) + rtol {leaf['rtol']:g} x |reference|")
    if not worst:
        return f"max abs err {leaf['max_abs_err']:.3g}; {tolerance}"
    at = name + ("[" + ", ".join(str(i) for i in worst["index"]) + "]" if worst["index"] else "")
    return (f"worst at {at}: expected {worst['expected']}, got {worst['actual']} (abs err {worst['abs_err']:.3g}, "
            f"allowed {worst['allowed']:.3g}); max abs err {leaf['max_abs_err']:.3g}; {tolerance}")


def _phase(progress: Callable[[str], None] | None, phase: str) -> Callable[[str], None] | None:
    """`progress` with each line tagged as `phase` (lines of a lower layer that knows no phases)."""
    if progress is None:
        return None
    return lambda line: progress(line if isinstance(line, Status) else Status(line, phase))


def replay_platform(bundle: Bundle, override: str | None = None) -> PlatformChoice:
    """The platform a replay of `bundle` runs on (see platforms.choose_platform); devices are detected only when
    the bundle was lowered for an accelerator or --platform names one."""
    fields = (bundle.manifest.get("function") or {}).get("fields") or {}
    lowered = [str(p) for p in fields.get("platforms") or ["cpu"]]
    present = ["cpu"] if lowered == ["cpu"] and override in (None, "cpu") else detect_devices().platforms
    return choose_platform(lowered, present, override, what=str(bundle.ref))


def replay(registry: Registry, bundle: Bundle, versions: Sequence[str | ContenderSpec] = ("installed",),
           options: ReplayOptions | None = None, *, env_manager: EnvironmentManager | None = None,
           progress: Callable[[str], None] | None = None, store_runs: bool = True, **settings: Any) -> list[dict]:
    """Replay `bundle` on each version ("installed" is the host interpreter) and return the run records, in the
    order of `versions`. The versions are timed together, interleaved (see schedule.py); runs measured together
    share `timing.group`, which is what lets the verdict pair their samples. `options` (run/replay_options.py), or
    `settings` naming some of its fields (a Timing as `timing`), say how.

    Every version runs on one platform: `options.platform` ("cpu", "cuda", "cuda12", "rocm", "tpu") if given, else
    the first of the bundle's accelerator platforms this machine has, else the CPU (replay_platform); each run's
    environment records the platform and device it ran on.

    `options.shapes` ({"b": 16}) runs a shape-polymorphic bundle at other sizes, on synthetic inputs; its outputs are
    then compared between the versions but not with the reference, which ran at the packed sizes.

    Without `options.rounds`, several versions are timed in as many rounds as their verdicts need to settle
    (budget.py), within `options.max_time_s`; `options.pin` runs every worker on the same CPUs and threads
    (schedule.Pin). Each run's environment keeps the conditions of the measurement (`conditions`: load, CPUs, busy
    processes, memory, the schedule) and its worker's own (`process`: affinity, threads, thread settings).

    `env_manager` makes each version's environment (its configuration, envs/env_config.py: root, --python, indexes);
    None: one with the defaults, made when a version needs it. "installed" is this interpreter unless the
    configuration names one with --python."""
    return replay_together(registry, [bundle], versions, options, env_manager=env_manager, progress=progress,
                           store_runs=store_runs, **settings)[0]


@dataclass
class _Target:
    """One bundle as a replay times it: its inputs (resized or packed), its reference, its platform."""

    bundle: Bundle
    leaves: list[dict]
    reference: Sequence[np.ndarray] | None  # None at other sizes: outputs are compared between versions only
    platform: PlatformChoice
    limits: PhaseLimits  # how long its workers' phases may run (its call limit from its reference's times)


@dataclass
class _Timed:
    """One bundle on one contender, timed in the measurement."""

    bundle_index: int
    version_index: int
    spec: ContenderSpec
    contender: Contender
    packages: dict  # a retrace's program packages in its environment ({} otherwise)
    env_s: float = 0.0  # seconds its environment took to be ready (found in the cache, or made)


@dataclass(frozen=True)
class _Comparisons:
    """What a measurement of several bundles compares: each bundle's versions among themselves (replay_together),
    every contender with the first bundle's first version (`one_group`: replay_pair), pieces of one function whose
    largest move the budget looks for (`largest_move`: replay_pieces)."""

    one_group: bool = False
    largest_move: bool = False


def replay_together(registry: Registry, bundles: Sequence[Bundle],
                    versions: Sequence[str | ContenderSpec] = ("installed",), options: ReplayOptions | None = None, *,
                    env_manager: EnvironmentManager | None = None, progress: Callable[[str], None] | None = None,
                    store_runs: bool = True, **settings: Any) -> list[list[dict]]:
    """Replay each of `bundles` on each version, all in one interleaved measurement (see replay, whose options these
    are), and return per bundle its run records in the order of `versions`. Each bundle's versions are compared
    among themselves: the budget judges them against the bundle's first version, and their steps make the same
    number of calls (schedule.Contender.group)."""
    return _replay_measured(registry, bundles, versions, _options(options, settings), _Comparisons(),
                            env_manager=env_manager, progress=progress, store_runs=store_runs)


def replay_pieces(registry: Registry, pieces: Sequence[Bundle], versions: Sequence[str | ContenderSpec],
                  options: ReplayOptions, *, env_manager: EnvironmentManager | None = None,
                  progress: Callable[[str], None] | None = None, store_runs: bool = True) -> list[list[dict]]:
    """isolate's measurement: `pieces` (bundles, the pieces of one function) replayed as replay_together does, and
    the budget stops timing those that cannot hold the function's largest move (budget.py)."""
    return _replay_measured(registry, pieces, versions, options, _Comparisons(largest_move=True),
                            env_manager=env_manager, progress=progress, store_runs=store_runs)


def replay_pair(registry: Registry, bundles: Sequence[Bundle], versions: Sequence[str | ContenderSpec],
                options: ReplayOptions, *, env_manager: EnvironmentManager | None = None,
                progress: Callable[[str], None] | None = None, store_runs: bool = True) -> list[list[dict]]:
    """`compare A B --replay`'s measurement: `bundles` are one program traced by several releases, replayed as
    replay_together does, but every contender is compared with the first bundle's first version, and all make the
    same number of calls a step."""
    return _replay_measured(registry, bundles, versions, options, _Comparisons(one_group=True),
                            env_manager=env_manager, progress=progress, store_runs=store_runs)


def _options(options: ReplayOptions | None, settings: Mapping[str, Any]) -> ReplayOptions:
    if options is None:
        return ReplayOptions.of(**settings)
    if settings:
        raise TypeError(f"replay takes options or settings, not both ({', '.join(settings)})")
    return options


def _replay_measured(registry: Registry, bundles: Sequence[Bundle], versions: Sequence[str | ContenderSpec],
                     options: ReplayOptions, comparisons: _Comparisons, *, env_manager: EnvironmentManager | None,
                     progress: Callable[[str], None] | None, store_runs: bool) -> list[list[dict]]:
    """The three entry points' one measurement: contenders, budget, interleaved rounds, run records, stored as one
    group."""
    first_look, started = snapshot(), time.monotonic()  # --max-time counts from here: environments included
    specs = as_specs(versions)
    interpreters = _Interpreters(env_manager, progress, options.retrace_packages)
    targets = [_target(registry, bundle, options) for bundle in bundles]
    jobs = _JobOptions(options.timing, options.dump, options.profile, options.memory_check,
                       options.fresh_workers)
    timed, runs = _contenders(registry, bundles, targets, specs, jobs, interpreters, comparisons.one_group)
    budget = _budget(timed, len(bundles), options, comparisons)
    _say_start(progress, bundles, timed, budget)
    group = Registry.new_run_id()
    with scratch_dir(temp_folder(), "reprobundle-replay-") as tmp:  # a killed replay's folder: gc removes it
        contenders = [t.contender for t in timed]
        alternate = _alternated(bundles, targets, contenders)
        platform = "cpu" if all(t.platform.platform == "cpu" for t in targets) else "accelerator"
        measured, measured_under = _measure(contenders, budget, Path(tmp), first_look, options=options,
                                            progress=progress, platform=platform, alternate=alternate,
                                            started=started)
        at_sizes = ", ".join(f"{k}={v}" for k, v in sorted((options.shapes or {}).items()))
        shared = set() if alternate else shared_keys(contenders)
        for t in timed:
            runs[t.bundle_index, t.version_index] = _timed_run(registry, targets[t.bundle_index], t, measured,
                                                               measured_under, budget, warmup=options.warmup,
                                                               group=group, at_sizes=at_sizes,
                                                               build=interpreters.builds.get(t.spec.jax),
                                                               shared=shared)
    ordered = [[runs[b, i] for i in range(len(specs))] for b in range(len(bundles))]
    every = [run for per_bundle in ordered for run in per_bundle]
    for run in every:
        run["group"] = group  # every run of this replay, timed or not: what `compare` picks a replay's runs by
    if store_runs:  # the group at once: a replay interrupted while storing leaves no half group as a result
        registry.put_runs(every)
    return ordered


def _budget(timed: Sequence[_Timed], bundle_count: int, options: ReplayOptions, comparisons: _Comparisons) -> Budget:
    """The budget of the measurement: one group per bundle (its versions judged against its first), or one."""
    keys = [t.contender.key for t in timed]
    groups = [keys] if comparisons.one_group else \
        [[t.contender.key for t in timed if t.bundle_index == b] for b in range(bundle_count)]
    return plan(keys, options.repeat, options.rounds, options.max_time_s, max_rounds=options.max_rounds,
                largest_move=comparisons.largest_move, groups=groups,
                ends=Ends(*options.ends) if options.ends else None, slowdown_only=options.slowdown_only,
                controls=[t.contender.key for t in timed if is_control(t.spec)])


def _say_start(progress: Callable[[str], None] | None, bundles: Sequence[Bundle], timed: Sequence[_Timed],
               budget: Budget) -> None:
    if progress and timed:
        first = timed[0].bundle_index
        refs = [str(bundle.ref) for bundle in bundles]
        what = ", ".join(refs) if len(refs) <= 3 else f"{len(refs)} bundles ({refs[0]} ... {refs[-1]})"
        contenders = [t.contender for t in timed]
        shared = shared_keys(contenders)
        processes = processes_at_once(contenders)
        at_once = f", {processes} process{'es' if processes != 1 else ''} a round" if shared else ""
        progress(Status(f"replaying {what} on jax "
                        + ", ".join(t.spec.redacted().label for t in timed if t.bundle_index == first) + at_once,
                        "start", 0, budget.rounds))


def _contenders(registry: Registry, bundles: Sequence[Bundle], targets: Sequence[_Target],
                specs: Sequence[ContenderSpec], jobs: _JobOptions, interpreters: _Interpreters,
                one_group: bool) -> tuple[list[_Timed], dict[tuple[int, int], dict]]:
    """Each bundle on each contender: timed, or (without an environment, or refused) its error record at once."""
    runs: dict[tuple[int, int], dict] = {}
    timed: list[_Timed] = []
    for b, target in enumerate(targets):
        for index, spec in enumerate(specs):
            entry = _timed_entry(registry, bundles, b, target, index, spec, jobs, interpreters,
                                 group=0 if one_group else b)
            if isinstance(entry, _Timed):
                timed.append(entry)
            else:
                runs[b, index] = entry
    return timed, runs


def _timed_run(registry: Registry, target: _Target, timed: _Timed, measured: dict[str, Measurement],
               measured_under: dict, budget: Budget, *, warmup: int, group: str, at_sizes: str,
               build: dict | None = None, shared: Collection[str] = ()) -> dict:
    """The run record of one timed contender, with the conditions it was measured under (a contender the budget
    retired early keeps its own schedule) and the build it ran on (`jax_build`, JaxEnvironment.build_record)."""
    key = timed.contender.key
    run = _measured_run(registry, target.bundle, timed.spec, measured[key], reference=target.reference,
                        warmup=warmup, group=group, at_sizes=at_sizes)
    rounds_run = max((len(x.rounds) for x in measured.values()), default=0)
    run["spent"] = spent.add({"env": round(timed.env_s, 4)}, measured[key].spent)
    run["environment"]["conditions"] = measured_under if key not in budget.retired else \
        {**measured_under, "schedule": budget.describe(rounds_run, key)}
    if timed.contender.shares in shared:  # its process served other bundles too (schedule.Contender.shares)
        run["environment"]["conditions"] = {**run["environment"]["conditions"], "workers": "shared"}
    if timed.spec.at_compile:  # its XLA flags reached its compile as options, not XLA_FLAGS (ContenderSpec)
        run["environment"]["conditions"] = {**run["environment"]["conditions"],
                                            "compile_options": dict(timed.spec.at_compile)}
    if timed.packages:
        run["packages"] = timed.packages
    if build is not None:
        run["environment"]["jax_build"] = build
        if build.get("source_build"):  # said where every report shows the run's notes
            run["notes"] = [*run.get("notes", []), f"{build['path']}: {build['source_build']}"]
    return run


@dataclass
class _JobOptions:
    """What each round's job asks of its worker."""

    timing: Timing
    dump: bool
    profile: bool
    memory_check: bool = True
    fresh_workers: bool = False  # not a job's: whether its contender may share a process (_process_key)


def _job_writer(registry: Registry, target: _Target, spec: ContenderSpec,
                options: _JobOptions) -> Callable[[Path, int], Path]:
    def write_job(folder: Path, round_index: int) -> Path:
        # Later rounds keep only their timings (and profiles): their workers warm up less and skip the package list.
        later = round_index > 0
        timing = options.timing
        return build_job(registry, target.bundle.manifest["function"], target.leaves, folder,
                         timing=replace(timing, warmup=min(timing.warmup, LATER_WARMUP)) if later else timing,
                         dump=options.dump and round_index == 0,
                         profile=options.profile and round_index < PROFILED_ROUNDS,
                         lockstep=True, platform=target.platform.platform, brief_environment=later, contender=spec,
                         retrace_cache=folder.parent / "retraced.jaxexport",  # one folder per contender's rounds
                         memory_check=options.memory_check)
    return write_job


def _target(registry: Registry, bundle: Bundle, options: ReplayOptions) -> _Target:
    """The bundle's inputs at `options.shapes` (synthetic) or as packed, its reference, the platform it replays on
    and its phase limits (the call limit from the reference's times only at the packed sizes)."""
    shapes, platform = options.shapes, options.platform
    m = bundle.manifest
    resized = None
    if shapes:
        from ..worker.synthetic import synthetic_spec

        resized = resized_inputs(m, dict(shapes), synthetic_spec)
    reference = None if resized else reference_arrays(registry, bundle)
    choice = replay_platform(bundle, platform)
    log.info("%s: replaying on %s (%s)", bundle.ref, choice.platform, choice.reason)
    leaves = resized or m["inputs"]["leaves"]
    for index, leaf in enumerate(leaves):  # a shape that lies about its blob fails here, before anything allocates
        check_leaf_size(leaf, index, None if "synthetic" in leaf else (leaf.get("blob") or {}).get("size"))
    reference_ns = None if resized else ((m.get("reference") or {}).get("timing") or {}).get("samples_ns")
    return _Target(bundle, leaves, reference, choice, options.limits(reference_ns))


class _Interpreters:
    """The Python interpreter of each (JAX version, platform build), resolved once per replay; a version without an
    environment keeps its error."""

    def __init__(self, env_manager: EnvironmentManager | None, progress: Callable[[str], None] | None,
                 retrace_packages: Sequence[str] = ()):
        config = getattr(env_manager, "config", None)  # a stand-in manager (a test's) may have none
        self.python = config.python if config is not None else None
        self.env_manager = env_manager
        self.progress = progress
        self.retrace_packages = tuple(retrace_packages)
        self.found: dict[tuple, tuple[str | Path | ReproBundleError, dict]] = {}
        self.builds: dict[str, dict] = {}  # requested -> what its runs record of the build (JaxEnvironment.build_record)

    def get(self, requested: str, choice: PlatformChoice,
            packages: Mapping[str, str] | None = None) -> tuple[str | Path | ReproBundleError, dict]:
        """(interpreter or error, the program's packages there): `packages` ({name: packed version}) are a
        retrace's, resolved beside that jax with the retrace's pins (program_envs.py); None for a frozen replay."""
        where = (requested, f"{choice.platform} {choice.build}",
                 None if packages is None else tuple(sorted(packages.items())))
        if where not in self.found:
            self.found[where] = self._resolve(requested, choice, packages)
        return self.found[where]

    def _resolve(self, requested: str, choice: PlatformChoice,
                 packages: Mapping[str, str] | None) -> tuple[str | Path | ReproBundleError, dict]:
        if requested == "installed" and self.python is None:
            return sys.executable, installed_packages(packages or {})
        on_platform: dict[str, Any] = {} if choice.platform == "cpu" else \
            {"platform": choice.platform, "build": choice.build}
        try:
            if self.env_manager is None:
                from ..envs.manager import EnvironmentManager

                self.env_manager = EnvironmentManager()
            base = self.env_manager.ensure(requested, progress=_phase(self.progress, "environment"), **on_platform)
            self.builds[requested] = base.build_record()
            if packages is None or not (packages or self.retrace_packages):
                return base.python_executable, {}
            from ..envs.program import parse_overrides, program_environment

            env = program_environment(base, self.env_manager.root, packages, parse_overrides(self.retrace_packages),
                                      say=_phase(self.progress, "environment"))
            return env.python_executable, env.packages
        except ReproBundleError as e:
            return e, {}


def program_packages(manifest: Mapping) -> dict[str, str]:
    """The third-party packages a bundle's program imports, {name: version when packed} (manifest 3)."""
    return dict(((manifest.get("function") or {}).get("program") or {}).get("packages") or {})


def installed_packages(packages: Mapping[str, str]) -> dict:
    """The program's packages as this interpreter has them (a retrace on "installed")."""
    from importlib import metadata

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "?"

    return {name: {"version": version(name), "packed": packed} for name, packed in packages.items()}


def _timed_entry(registry: Registry, bundles: Sequence[Bundle], b: int, target: _Target, index: int,
                 spec: ContenderSpec, jobs: _JobOptions, interpreters: _Interpreters, *,
                 group: int) -> _Timed | dict:
    """The bundle on `spec` as a contender of the measurement, or its error record without an environment."""
    start = time.perf_counter()
    retrace = spec.mode == RETRACE
    refusal = retrace_refusal(target.bundle.manifest) if retrace else None
    if refusal:
        return _record(target.bundle, spec, "error", refusal, duration_s=0.0)
    interpreter, packages = interpreters.get(spec.jax, target.platform,
                                             program_packages(target.bundle.manifest) if retrace else None)
    env_s = time.perf_counter() - start
    if isinstance(interpreter, ReproBundleError):
        hint = f" ({interpreter.hint})" if retrace and interpreter.hint else ""
        return _record(target.bundle, spec, "error",
                       f"no environment for jax {spec.jax}: {interpreter.message}{hint}",
                       duration_s=time.perf_counter() - start)
    key = str(index) if len(bundles) == 1 else f"{b}.{index}"
    label = spec.redacted().label if len(bundles) == 1 else f"{target.bundle.ref.name} on {spec.redacted().label}"
    write_job = _job_writer(registry, target, spec, jobs)
    shares = "" if retrace or jobs.fresh_workers else _process_key(interpreter, spec, target)
    return _Timed(b, index, spec, Contender(key, interpreter, write_job, label=label, group=str(group),
                                            limits=target.limits, shares=shares), packages, env_s)


def _process_key(interpreter: str | Path, spec: ContenderSpec, target: _Target) -> str:
    """What bundles must agree on to share a worker process (schedule.Contender.shares): the interpreter, the
    contender's settings (set before jax starts), the platform, and the 64-bit mode the worker switches on for
    wide inputs or outputs (a process-wide setting). A retrace never shares: its program's modules would meet
    another program's in one interpreter."""
    fields = (target.bundle.manifest.get("function") or {}).get("fields") or {}
    dtypes = [str(leaf.get("dtype")) for leaf in target.leaves] + [str(a.get("dtype"))
                                                                   for a in fields.get("out_avals") or []]
    wide = any(d in WIDE_64 for d in dtypes)
    return json.dumps([str(interpreter), spec.at_start().as_record(), target.platform.platform, wide], sort_keys=True)


def _alternated(bundles: Sequence[Bundle], targets: Sequence[_Target], contenders: Sequence[Contender]) -> bool:
    """Whether the contenders are visited one process at a time (schedule.py's `alternate`): on a TPU, which admits
    one process at a time, or where REPROBUNDLE_SCHEDULE=alternate asks for it (to try that schedule on a CPU)."""
    if len(contenders) < 2:
        return False
    if env_settings().schedule == "alternate":
        return True
    if any(one_process_at_a_time(t.platform.platform) for t in targets):
        log.info("%s: on a TPU only one process holds the chips, so the versions are visited in alternation",
                 ", ".join(str(bundle.ref) for bundle in bundles))
        return True
    return False


def _measure(contenders: Sequence[Contender], budget: Budget, workdir: Path, first_look, *,
             options: ReplayOptions, progress: Callable[[str], None] | None, platform: str = "cpu",
             alternate: bool = False, started: float | None = None) -> tuple[dict[str, Measurement], dict]:
    """The contenders measured in interleaved (or alternated) rounds, adaptive when the budget is and the
    measurement compares something, and the conditions they were measured under; the budget's time counts from
    `started` (time.monotonic(); default now)."""
    before = snapshot()
    _warn_if_busy(first_look, before)
    budget.begin(started)
    pin = options.pinned
    adaptive = budget.adaptive and len(contenders) > 1
    measured = measure_interleaved(contenders, workdir, steps=budget.steps if adaptive else options.repeat,
                                   rounds=budget.rounds if adaptive or not budget.adaptive else
                                   rounds_for(len(contenders), options.repeat, options.rounds),
                                   timeout_s=options.timeout_s,
                                   memory_limit_bytes=worker_memory_limit(
                                       options.memory_limit_bytes,
                                       1 if alternate else processes_at_once(contenders), platform),
                                   progress=progress, more=budget.more if adaptive else None, pin=pin,
                                   concurrent=options.concurrent, alternate=alternate)
    _busy["measured_at"] = time.monotonic()
    measured_under = conditions(before, snapshot())
    measured_under["schedule"] = budget.describe(max((len(x.rounds) for x in measured.values()), default=0))
    if alternate:  # said beside the verdict: the versions met the same drift visit by visit, not step by step
        measured_under["order"] = "alternated"
    if pin is not None:
        measured_under["pin"] = {"cpus": list(pin.cpus), "threads": pin.threads}
    return measured, measured_under


# said once a process (a bisection's or investigation's many replays would repeat it); when this process last
# measured (its own workers are in the 1-minute load average for a minute after)
_busy: dict = {"warned": False, "measured_at": None}
LOAD_MEMORY_S = 60.0


def _warn_if_busy(first_look, before) -> None:
    # what other processes did since the replay started (environments, fetching); the load alone if that was short,
    # and not within a minute of this process's own measurement, whose workers that load still counts
    if before.monotonic - first_look.monotonic > 0.3:
        busy = busy_reason(conditions(first_look, before), now=True)
    elif _busy["measured_at"] is not None and before.monotonic - _busy["measured_at"] < LOAD_MEMORY_S:
        busy = None
    else:
        busy = busy_reason({"load_before": before.loadavg, "cpus": before.cpus}, now=True)
    if busy:
        level = logging.INFO if _busy["warned"] else logging.WARNING
        _busy["warned"] = True
        log.log(level, "%s: timings will be noisier and verdicts need more rounds (each run records it)", busy)
