"""Sweep: replay many bundles on a baseline and a candidate JAX version, one task per bundle, and sum them up.

`run_replay_task` carries out one task (fleet/executor.py's `ReplayTask`) on whichever machine runs it: it opens
the task's registry, replays the bundle on the versions timed together (replay.py, adaptive budget unless rounds
are fixed), stores the runs there and returns a plain JSON summary (`summarize`). The driver (`sweep`) skips
bundles that already have a finished result for the same pair and options (`stored_runs`: resume), hands the rest
to an executor, and returns the summaries in selection order.

Resume rule: a bundle is finished when one replay (one `group`) holds a run of each requested version (`requested`
equal; for "installed", also its recorded jax equal to this host's; never for a local build, `--jax PATH`), made with
the same timing options (`options_match`: the warmup, the budget replay.py plans from repeat/rounds/max_time —
adaptive or fixed, steps per round, max rounds, max time —, the pinned CPUs, and the platform when one was asked for),
and every run of it came to an outcome a replay decides (`FINISHED`: ok, mismatch, incompatible); a crash, a timeout
or an error (no environment, out of memory) may not happen again, so that bundle is replayed. The latest such replay
is shown, marked stored.
"""

from __future__ import annotations

import importlib.metadata
import json
import logging
import socket
import time
from dataclasses import replace
from typing import Any, Callable, Iterator, Mapping, Sequence

from ..bundle.model import run_label
from ..bundle.registry import Bundle, Registry
from ..envs.local_jax import is_path_request
from ..errors import DiskFullError, ReproBundleError, StoreError, UsageError
from ..run.budget import plan
from ..run.compare import compare_runs
from ..run.replay_options import ReplayOptions
from ..run.spent import of_runs
from ..text import exception_line, first_line
from .executor import Executor, ReplayTask, RunSummary, TaskResult, failed_result, result_skeleton

log = logging.getLogger(__name__)

# Output status of a bundle across the two versions, worst last.
OUTPUT_OK, OUTPUT_MISMATCH, OUTPUT_FAILED = "ok", "mismatch", "failed"
TIMED = ("ok", "mismatch")
FINISHED = (*TIMED, "incompatible")  # what a stored replay's runs came to, for a sweep to resume past it


# ------------------------------------------------------------------------------------------------ one task


def run_replay_task(task: ReplayTask, progress: Callable[[str], None] | None = None) -> TaskResult:
    """Replay `task.ref` of the registry at `task.store` on `task.versions` timed together, store the runs there,
    and return the summary (see `summarize`; plain JSON). A bundle that does not replay (no environment,
    incompatible, crash, a platform this machine lacks, a corrupt blob) is a summary with its runs' statuses or
    status "failed"; only infrastructure failures raise (the store unreachable: StoreError; anything unexpected).
    `progress` gets the replay's lines (in-process executors only: a task crosses machines without it)."""
    from ..bundle.collection import sweep_scratch
    from ..bundle.transfer import prefetch
    from ..envs.manager import EnvironmentManager
    from ..run.contenders import task_contenders
    from ..run.replay import replay

    sweep_scratch()  # what a cancelled or killed task left on this machine (its folder's lock is free): gone first
    start = time.perf_counter()
    registry = Registry.open(task.store)
    bundle = None
    try:
        bundle = registry.resolve(task.ref)
        prefetch(registry, bundle)
        runs = replay(registry, bundle, task_contenders(task.versions, task.mode), task.options,
                      env_manager=EnvironmentManager(task.env), store_runs=False, progress=progress)
    except (StoreError, DiskFullError):
        raise
    except ReproBundleError as e:
        failed = failed_result(task, e.message, wall_s=time.perf_counter() - start)
        if bundle is not None:
            failed.update(_identity(bundle))  # type: ignore[typeddict-item]
        return failed
    registry.put_runs(runs)
    return summarize(registry, bundle, runs, task, wall_s=time.perf_counter() - start)


def run_replay_tasks(tasks: Sequence[ReplayTask], progress: Callable[[str], None] | None = None) -> list[TaskResult]:
    """Tasks that differ only in their bundle (one store, the same versions, options, environments and mode) carried
    out as run_replay_task does, but all measured together (replay.replay_together): each version's worker process
    of a round serves every bundle (schedule.Contender.shares), so a batch starts two processes a round, not two
    per bundle. Each bundle keeps its own comparison and its own adaptive budget; `wall_s` is the batch's wall time
    split between its bundles in proportion to their worker seconds. Returns the results in the order of
    `tasks`."""
    from ..bundle.collection import sweep_scratch
    from ..bundle.transfer import prefetch
    from ..envs.manager import EnvironmentManager
    from ..run.contenders import task_contenders
    from ..run.replay import replay_together

    sweep_scratch()
    start = time.perf_counter()
    first = tasks[0]
    registry = Registry.open(first.store)
    results: list[TaskResult | None] = [None] * len(tasks)
    resolved: list[tuple[int, Bundle]] = []
    for i, task in enumerate(tasks):
        try:
            bundle = registry.resolve(task.ref)
            prefetch(registry, bundle)
            resolved.append((i, bundle))
        except (StoreError, DiskFullError):
            raise
        except ReproBundleError as e:
            results[i] = failed_result(task, e.message)
    if resolved:
        try:
            runs = replay_together(registry, [b for _, b in resolved], task_contenders(first.versions, first.mode),
                                   first.options, env_manager=EnvironmentManager(first.env), store_runs=False,
                                   progress=progress)
        except (StoreError, DiskFullError):
            raise
        except ReproBundleError as e:  # one bundle's refusal (a corrupt blob, a bad shape): each alone, so it fails alone
            if len(tasks) == 1:
                return [failed_result(first, e.message, wall_s=time.perf_counter() - start)]
            log.info("a batch of %d bundles could not be measured together (%s): each is replayed alone", len(tasks),
                     e.message)
            return [run_replay_task(task, progress) for task in tasks]
        walls = _shares(time.perf_counter() - start, [sum(of_runs(per_bundle).values()) for per_bundle in runs])
        for (i, bundle), per_bundle, wall_s in zip(resolved, runs, walls):
            registry.put_runs(per_bundle)
            results[i] = summarize(registry, bundle, per_bundle, tasks[i], wall_s=wall_s)
    return [r if r is not None else failed_result(t, "not replayed") for r, t in zip(results, tasks)]


def _shares(wall_s: float, worker_s: Sequence[float]) -> list[float]:
    """A batch's wall time split between its bundles in proportion to their worker seconds (evenly without any)."""
    total = sum(worker_s)
    return [wall_s * (w / total if total > 0 else 1 / len(worker_s)) for w in worker_s]


# A local sweep measures this many bundles together at most, holding no more than this many input bytes in each
# version's worker process: one process a round serves them all, so its memory is theirs together.
BATCH_BUNDLES = 20
BATCH_INPUT_BYTES = 256 << 20


def batches(bundles: Sequence[Bundle], template: ReplayTask, executor: Executor) -> list[list[int]]:
    """The bundles (indexes) a sweep measures together: consecutive ones, up to BATCH_BUNDLES and
    BATCH_INPUT_BYTES of inputs, on the local executor (a Ray task is one bundle on a node), in frozen mode (a
    retrace never shares a process), unless fresh workers or a time limit per bundle (--max-time) are asked for;
    otherwise each bundle alone."""
    options = template.options
    if executor.name != "local" or template.mode != "frozen" or options.fresh_workers or \
            options.max_time_s is not None:
        return [[i] for i in range(len(bundles))]
    out: list[list[int]] = []
    held = 0
    for i, bundle in enumerate(bundles):
        size = sum(int((leaf.get("blob") or {}).get("size") or 0)
                   for leaf in (bundle.manifest.get("inputs") or {}).get("leaves") or [])
        if not out or len(out[-1]) >= BATCH_BUNDLES or held + size > BATCH_INPUT_BYTES:
            out.append([])
            held = 0
        out[-1].append(i)
        held += size
    return out


def _identity(bundle: Bundle) -> dict:
    """Which bundle, and for a bundle that `capture` made, the function it captured and its input shapes: one
    function captured at several signatures (`--all-signatures`) is shown by size (render/sizes.sweep_sizes)."""
    m = bundle.manifest
    leaves = (m.get("inputs") or {}).get("leaves") or []
    labels = m.get("labels") or {}
    captured = labels.get("capture.function") if "capture.signature" in labels else None
    return {"ref": str(bundle.ref), "bundle_id": bundle.ref.bundle_id, "store": bundle.ref.store_url,
            "function": None if captured is None else str(captured),
            "input_shapes": [f"{leaf.get('dtype')}[{','.join(str(d) for d in leaf.get('shape') or [])}]"
                             for leaf in leaves]}


# ------------------------------------------------------------------------------------------------ summaries


def summarize(registry: Registry, bundle: Bundle, runs: Sequence[dict], task: ReplayTask, *, wall_s: float,
              stored: bool = False, host: str | None = None) -> TaskResult:
    """One bundle's result as plain JSON: the runs (version, concrete jax, run id, status, reason), per candidate
    (every version after the first, the baseline) its verdict against the baseline (ratio, 95% interval, p, method,
    settled), output status ("ok", "mismatch": its outputs differ from the reference or from the baseline's,
    "failed": it did not run) and the op that moved most, in `candidates`; the top-level verdict fields are those of
    the worst candidate (a mismatch or failure first, then the highest ratio), what one line of a table shows. The
    host is None for a stored result (run records keep no host name)."""
    versions = contender_labels(task.versions, task.mode)  # the runs' labels: `0.8.0 retraced` in a retrace sweep
    out = result_skeleton(str(bundle.ref), versions)
    out.update(_identity(bundle))  # type: ignore[typeddict-item]
    out.update({"stored": stored, "group": runs[0].get("group") if runs else None, "wall_s": round(wall_s, 3),
                "spent": of_runs(runs),
                "host": None if stored else host or socket.gethostname(), "options": task.options_record()})
    out["runs"] = [_run_summary(r) for r in runs]
    out.update(_verdicts(registry, bundle, runs, versions))  # type: ignore[typeddict-item]
    out.update(_outputs_of_runs(runs) if out["outputs"] == OUTPUT_OK else {})  # type: ignore[typeddict-item]
    return _plain(out)


def _run_summary(run: dict) -> RunSummary:
    return {"version": run_label(run), "jax": str((run.get("environment") or {}).get("jax") or run_label(run)),
            "run_id": run["run_id"], "status": run["status"], "reason": first_line(run.get("reason") or "", 300),
            "created": run.get("created")}


def _verdicts(registry: Registry, bundle: Bundle, runs: Sequence[dict], versions: Sequence[str]) -> dict[str, Any]:
    """The medians, each candidate's part, and the worst candidate's fields at the top level."""
    baseline = versions[0]
    by_label = {run_label(r): r for r in runs}
    base_ok = baseline in by_label and by_label[baseline]["status"] in TIMED
    comparison = compare_runs(registry, bundle, runs, baseline) if base_ok else None
    rows = {row["requested"]: row for row in comparison["rows"]} if comparison else {}
    out: dict[str, Any] = {"medians_ns": [rows[v]["median_ns"] if v in rows else None for v in versions]}
    out["candidates"] = [_candidate(comparison, rows.get(v), [by_label[k] for k in (baseline, v) if k in by_label],
                                    v, baseline) for v in versions[1:]]
    worst = max(out["candidates"], key=_severity, default=None)
    if worst is not None:
        out.update({k: worst[k] for k in _CANDIDATE_FIELDS})
    return out


_CANDIDATE_FIELDS = ("verdict", "ratio", "ci95", "p_value", "method", "settled", "headline", "outputs",
                     "outputs_detail", "moved", "moved_line")


def _candidate(comparison: dict | None, row: dict | None, runs: list[dict], candidate: str, baseline: str) -> dict:
    """One candidate's part of a bundle's result (the _CANDIDATE_FIELDS and its version)."""
    out: dict[str, Any] = {"version": candidate, "verdict": None, "ratio": None, "ci95": None, "p_value": None,
                           "method": None, "settled": None, "headline": "", "outputs": OUTPUT_OK,
                           "outputs_detail": "", "moved": None, "moved_line": ""}
    out.update(_outputs_of_runs(runs))
    if comparison is None or row is None or candidate == baseline:
        return out
    out.update(verdict=row["verdict"], ratio=row["ratio"], ci95=row["ci95"], p_value=row["p_value"],
               method=row["method"], settled=row["settled"])
    out["headline"] = next((h["text"] for h in comparison["headlines"] if h.get("label") == row["label"]), "")
    vs_base = row.get("err_base")
    if out["outputs"] == OUTPUT_OK and vs_base is not None and not vs_base.get("ok", True):
        out["outputs"] = OUTPUT_MISMATCH
        out["outputs_detail"] = (f"jax {candidate} vs {baseline}: outputs differ (max abs err "
                                 f"{vs_base.get('max_abs_err')})" + (f" in {vs_base['worst']}" if vs_base.get("worst")
                                                                     else ""))
    out.update(_moved(comparison, row))
    return out


def _severity(candidate: dict) -> tuple:
    rank = {OUTPUT_FAILED: 2, OUTPUT_MISMATCH: 1}.get(candidate["outputs"], 0)
    ratio = candidate["ratio"]
    return rank, -1.0 if ratio is None or ratio != ratio else ratio


def contender_labels(versions: Sequence[str], mode: str = "frozen") -> list[str]:
    """The labels of a task's runs (`0.8.0`, `0.8.0 retraced`): one contender per version in the task's mode."""
    from ..run.contenders import task_contenders

    return [spec.label for spec in task_contenders(versions, mode)] if mode != "both" else list(versions)


def _outputs_of_runs(runs: Sequence[dict]) -> dict[str, Any]:
    """{"outputs", "outputs_detail"} when a version failed or its outputs differ from the reference; else nothing
    (the skeleton's "ok")."""
    failed = [r for r in runs if r["status"] not in TIMED]
    if failed:
        return {"outputs": OUTPUT_FAILED,
                "outputs_detail": "; ".join(f"jax {r['requested']}: {r['status']}: {first_line(r.get('reason'), 400)}"
                                            for r in failed)}
    mismatched = [r for r in runs if r["status"] == "mismatch"]
    if mismatched:
        return {"outputs": OUTPUT_MISMATCH,
                "outputs_detail": "; ".join(f"jax {r['requested']} vs the packed reference: "
                                            f"{first_line(r['reason'], 400)}" for r in mismatched)}
    return {}


def _moved(comparison: dict, row: dict) -> dict[str, Any]:
    """The candidate's fusion and per-op move ({"moved_line", "moved"}), if the comparison has its diff."""
    from ..analysis.comparison import describe_move

    diff = next((d for d in comparison["diffs"] if d["label"] == row["label"]), None)
    if diff is None:
        return {}
    return {"moved_line": diff["moved"], "moved": describe_move(diff["moved_row"]) if diff["moved_row"] else None}


def _plain(value: Any) -> Any:
    """JSON values only (numpy scalars and tuples become floats and lists): a summary crosses machines."""
    return json.loads(json.dumps(value, default=lambda x: x.item() if hasattr(x, "item") else str(x)))


# ------------------------------------------------------------------------------------------------ resume


def host_jax() -> str | None:
    """The jax version installed beside this process (what "installed" means here), read without importing jax."""
    try:
        return importlib.metadata.version("jax")
    except importlib.metadata.PackageNotFoundError:
        return None


def options_match(run: dict, options: ReplayOptions) -> bool:
    """Whether `run` was timed with `options` (see the module's resume rule); a run that stopped before timing
    (incompatible) is judged on what it recorded."""
    env = run.get("environment") or {}
    conditions = env.get("conditions") or {}
    timing = run.get("timing") or {}
    if timing and timing.get("warmup") != options.warmup:
        return False
    schedule = conditions.get("schedule")
    if schedule is not None and not _same_schedule(schedule, options):
        return False
    if run["status"] not in TIMED:
        return True
    pinned = (conditions.get("pin") or {}).get("cpus")
    if list(pinned or []) != list(options.pin or []):
        return False
    # "cuda12" asks for a build of the platform the run records, "cuda"
    return not options.platform or str(options.platform).startswith(str(env.get("platform")))


def _same_schedule(schedule: dict, options: ReplayOptions) -> bool:
    """Whether a run's recorded schedule is the budget replay.py plans from these options."""
    budget = plan(["baseline", "candidate"], options.repeat, options.rounds, options.max_time_s)
    if bool(schedule.get("adaptive")) != budget.adaptive or schedule.get("steps_per_round") != budget.steps_per_round:
        return False
    if budget.adaptive:
        return schedule.get("max_rounds") == budget.rounds and schedule.get("max_time_s") == budget.max_time_s
    return schedule.get("rounds") == budget.rounds


def stored_runs(registry: Registry, bundle: Bundle, versions: Sequence[str], options: ReplayOptions,
                mode: str = "frozen") -> list[dict] | None:
    """The runs of the latest replay of `bundle` that holds every version of `versions` timed with `options`
    (in the order of `versions`), or None: the resume rule of this module. A local build (`--jax PATH`) changes in
    place, so a replay with one is never resumed."""
    if any(is_path_request(v) for v in versions):
        return None
    here = host_jax()
    labels = contender_labels(versions, mode)
    for members in _replays_newest_first(registry, bundle):
        by_version = {run_label(r): r for r in members}
        chosen = [by_version[v] for v in labels if v in by_version]
        if len(chosen) == len(versions) and all(_resumable(r, options, here) for r in chosen):
            return chosen
    return None


def _replays_newest_first(registry: Registry, bundle: Bundle) -> list[list[dict]]:
    groups: dict[str, list[dict]] = {}
    for stored in registry.runs(bundle.ref.bundle_id):
        if stored.get("group"):
            groups.setdefault(stored["group"], []).append(stored)
    return sorted(groups.values(), key=lambda g: max(r["created"] for r in g), reverse=True)


def _resumable(run: dict, options: ReplayOptions, here: str | None) -> bool:
    """A finished run timed with `options`; on "installed", made with the jax this host has now."""
    if run["status"] not in FINISHED or not options_match(run, options):
        return False
    return run_label(run) != "installed" or str((run.get("environment") or {}).get("jax")) == str(here)


# ------------------------------------------------------------------------------------------------ the driver


def sweep(registry: Registry, bundles: Sequence[Bundle], template: ReplayTask, *, executor: Executor,
          rerun: bool = False, fn: Callable[[ReplayTask], TaskResult] = run_replay_task,
          fn_many: Callable[[Sequence[ReplayTask]], list[TaskResult]] = run_replay_tasks,
          progress: Callable[[int, int, TaskResult | None], None] | None = None) -> list[TaskResult]:
    """Replay each bundle as `template` says (its versions, options, environments and mode; its store and ref are
    each bundle's) through `executor` (a bundle already finished for the same versions and options is summed up
    from its stored runs instead, unless `rerun`), and return one summary per bundle, in the order of `bundles`.
    `fn` carries out a task (run_replay_task, or a partial of it with a progress callable for an in-process
    executor); `fn_many` a batch of bundles measured together here (run_replay_tasks; see `batches`).
    `progress(done, total, result)` counts the bundles replayed now (`total` of them): it gets each stored result
    first (done 0), then (0, total, None) before the first task, then each task's result as it finishes (a batch's
    all at its end)."""
    tasks = [replace(template, store=registry.url, ref=str(bundle.ref)) for bundle in bundles]
    results: list[TaskResult | None] = [None] * len(bundles)
    todo: list[int] = []
    for i, (bundle, task) in enumerate(zip(bundles, tasks)):
        runs = None if rerun else stored_runs(registry, bundle, task.versions, task.options, task.mode)
        if runs is None:
            todo.append(i)
            continue
        results[i] = summarize(registry, bundle, runs, task, wall_s=0.0, stored=True)
        if progress:
            progress(0, len(todo), results[i])
    if progress:
        progress(0, len(todo), None)
    done = 0
    for finished in _carried_out(executor, fn, fn_many, [bundles[i] for i in todo], [tasks[i] for i in todo]):
        done += len(finished)  # a batch's bundles all finish at its end: counted at once, so the ETA holds
        for k, result in finished:
            results[todo[k]] = result
            if progress:
                progress(done, len(todo), result)
    # an executor that lost a task breaks its contract: say so rather than drop the bundle
    return [r if r is not None else failed_result(task, f"the {executor.name} executor returned no result for this "
                                                        "bundle") for r, task in zip(results, tasks)]


def _carried_out(executor: Executor, fn: Callable[[ReplayTask], TaskResult],
                 fn_many: Callable[[Sequence[ReplayTask]], list[TaskResult]], bundles: Sequence[Bundle],
                 tasks: Sequence[ReplayTask]) -> Iterator[list[tuple[int, TaskResult]]]:
    """The (index, result) of the tasks that finished together: a bundle alone through the executor, a batch
    (`batches`) by `fn_many` here; a batch that raised is each of its bundles' failure, as the local executor makes
    one task's."""
    if not tasks:
        return
    groups = batches(bundles, tasks[0], executor)
    if all(len(group) == 1 for group in groups):
        yield from ([item] for item in executor.run(fn, tasks))
        return
    for group in groups:
        start = time.perf_counter()
        try:
            done = fn_many([tasks[i] for i in group])
        except DiskFullError:  # the machine's condition, not these bundles' result: the sweep stops
            raise
        except Exception as e:  # noqa: BLE001 - one batch's failure is its bundles' result; the sweep goes on
            error = e.message if isinstance(e, ReproBundleError) else exception_line(e)
            done = [failed_result(tasks[i], error, wall_s=(time.perf_counter() - start) / len(group)) for i in group]
        yield list(zip(group, done))


def sweep_report(registry: Registry, bundles: Sequence[Bundle], results: list[TaskResult], template: ReplayTask, *,
                 executor_name: str, rerun: bool, extra_args: Sequence[str]) -> dict:
    """A sweep's plain result (api.sweep's docstring): each bundle's result with its Reproduce block, the two
    versions as concrete ones ("installed" is this host's; `candidate` is the last of `candidates`), the counts."""
    from ..bundle.sharing import reproduce_info

    versions = template.versions
    baseline, candidates = versions[0], list(versions[1:])
    here = {v: host_jax() or v if v == "installed" else v for v in versions}
    for bundle, result in zip(bundles, results):
        concrete = ([r["jax"] for r in result["runs"]] if len(result["runs"]) == len(versions)
                    else [here[v] for v in versions])
        result["reproduce"] = reproduce_info(registry, bundle, concrete, extra_args=list(extra_args))
    return {"format": "reprobundle.sweep", "version": 1, "store": registry.url, "baseline": baseline,
            "candidate": candidates[-1], "candidates": candidates,
            "jax": {"baseline": here[baseline], "candidate": here[candidates[-1]]},
            "executor": executor_name, "options": template.options_record(), "rerun": rerun, "results": results,
            "counts": counts(results)}


# ------------------------------------------------------------------------------------------------ counting


def outcome(result: Mapping[str, Any]) -> str:
    """What a bundle's result comes to, one word: "failed" (a version or the task did not run), "mismatch", else
    the candidate's verdict ("slower", "faster", "same"), "unsettled" (no difference shown, but the rounds ran out
    before a change of the size that matters was ruled out), or "unjudged" (timed too briefly for a verdict)."""
    if result["status"] == "failed" or result["outputs"] == OUTPUT_FAILED:
        return "failed"
    if result["outputs"] == OUTPUT_MISMATCH:
        return "mismatch"
    if result["verdict"] == "same" and result.get("settled") is False:
        return "unsettled"
    return result["verdict"] if result["verdict"] in ("slower", "faster", "same") else "unjudged"


def counts(results: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many bundles came to each outcome, of how many; and how many results were stored ones."""
    out = {"total": len(results), "slower": 0, "faster": 0, "same": 0, "unsettled": 0, "unjudged": 0, "mismatch": 0,
           "failed": 0,
           "stored": sum(1 for r in results if r["stored"])}
    for result in results:
        out[outcome(result)] += 1
    return out


def sweep_versions(baseline: str, candidate: str | Sequence[str], releases: str | None,
                   available: Callable[[], list[str]]) -> tuple[str, tuple[str, ...]]:
    """The baseline and the candidates of a sweep, from --baseline, --candidate (repeatable) and --versions A..B
    (every release from A to B that `available` lists: the package index's; A is the baseline unless --baseline names
    one)."""
    candidates = [candidate] if isinstance(candidate, str) else list(candidate)
    if releases:
        from ..envs.versions import releases_between

        try:
            found = releases_between(releases, available())
        except ValueError as e:
            raise UsageError(str(e), hint="write --versions FIRST..LAST, e.g. 0.7.2..0.9.2") from None
        if not found:
            raise UsageError(f"no release of jax on the package index lies in {releases}",
                             hint="give a range that holds a release, e.g. 0.7.2..0.9.2")
        baseline = baseline or found[0]
        candidates += found
    candidates = [c for c in dict.fromkeys(c for c in candidates if c) if c != baseline]
    if not baseline or not candidates:
        raise UsageError("a sweep compares a baseline with at least one other version",
                         hint="give --baseline VERSION and --candidate VERSION (repeatable) or --versions A..B, e.g. "
                              "--baseline 0.8.0 --candidate 0.8.1")
    return baseline, tuple(candidates)
