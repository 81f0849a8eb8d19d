"""What a bisection asks of the world: replay a bundle on some versions timed together (`replay_probe`, as a
sweep's task on an executor, or here for a read-only store), and how two runs' outputs differ."""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from ...bundle.registry import Bundle, Registry
from ...errors import ReplayError
from ...fleet.executor import Executor, LocalExecutor, ReplayTask
from ...fleet.sweep import run_replay_task
from ...run.replay_options import ReplayOptions
from .bisection import BEYOND, BITS_ONLY, SAME

if TYPE_CHECKING:
    from ...envs.manager import EnvironmentManager


def replay_probe(registry: Registry, bundle: Bundle, options: ReplayOptions, *, executor: Executor | None,
                 env_manager: EnvironmentManager, progress: Callable[[str], None] | None = None,
                 mode: str = "frozen",
                 left: Callable[[], float | None] | None = None) -> Callable[[Sequence[str]], list[dict]]:
    """What a bisection calls to replay `bundle` on versions timed together: a replay task on `executor` (its runs
    stored in the bundle's registry, read back; its environments made as `env_manager`'s configuration says), or,
    for a bundle in a read-only store, a replay here with `env_manager` whose runs are not stored. `left()`: the
    seconds of the command's --max-time left (None: no bound), which bound each replay's rounds. A version may be a
    variant's text (run/contenders.control_of: the A/A control), replayed after the plain versions."""
    # the local executor runs the task here: the replay's own progress lines can go to the display
    carry_out = functools.partial(run_replay_task, progress=progress) \
        if isinstance(executor, LocalExecutor) else run_replay_task

    def replay_together(versions: Sequence[str]) -> list[dict]:
        from ...run.contenders import task_contenders
        from ...run.replay import replay

        bound = _within(options, left() if left else None)
        if registry.store.read_only:
            return replay(registry, bundle, task_contenders(versions, mode), bound, env_manager=env_manager,
                          progress=progress, store_runs=False)
        assert executor is not None
        task = ReplayTask(registry.url, str(bundle.ref), tuple(versions), bound.for_sweep(), env_manager.config, mode)
        (_, outcome), = executor.run(carry_out, [task])
        if outcome["status"] == "failed":
            raise ReplayError(f"replaying {bundle.ref} on jax {', '.join(versions)} failed: {outcome['error']}",
                              hint="rerun with -v to see what the replay did")
        by_id = {r["run_id"]: r for r in registry.runs(bundle.ref.bundle_id)}
        return [by_id[r["run_id"]] for r in outcome["runs"]]

    return replay_together


def _within(options: ReplayOptions, left: float | None) -> ReplayOptions:
    """`options` whose rounds end within `left` seconds (None: as they are)."""
    if left is None:
        return options
    return replace(options, max_time_s=max(1.0, left if options.max_time_s is None else min(options.max_time_s, left)))


def output_difference(registry: Registry, bundle: Bundle) -> Callable[[dict, dict], str]:
    """What a bisection asks of two runs of `bundle`: how their outputs differ. "same": bit for bit, dtypes and
    shapes included; "bits": some bits differ, every element within the check's tolerance; "beyond": beyond it (or
    another dtype, shape or number of outputs). One check_outputs call: its `bit_identical` and `ok`."""
    from ...analysis.verdict import check_outputs
    from ...bundle.trees import output_names
    from ...run.replay import leaf_array

    def arrays(run: dict) -> list[np.ndarray]:
        return [leaf_array(registry.get_blob(leaf["blob"]), leaf) for leaf in run["outputs"]]

    def difference(a: dict, b: dict) -> str:
        check = check_outputs(arrays(a), arrays(b), output_names(bundle.manifest))
        return SAME if check["bit_identical"] else BITS_ONLY if check["ok"] else BEYOND

    return difference


def retraced_text(registry: Registry, run: dict) -> str | None:
    """The StableHLO a retraced run's release lowered the program to (its `stablehlo_retraced` artifact), None
    where the run has none (a frozen run, one that failed before lowering)."""
    art = (run.get("artifacts") or {}).get("stablehlo_retraced")
    return registry.get_blob(art["blob"]).decode("utf-8", "replace") if art else None


def lowered_differently(registry: Registry) -> Callable[[dict, dict], bool | None]:
    """Whether the releases of two retraced runs lowered the program to other StableHLO (locations, names and debug
    info aside: analysis/lowering_diff.same_lowering); None where either run has none, or its text cannot be read
    (not known: the bisections go on without it)."""
    from ...analysis.lowering_diff import same_lowering
    from ...errors import ReproBundleError

    def differently(a: dict, b: dict) -> bool | None:
        try:
            before, after = retraced_text(registry, a), retraced_text(registry, b)
        except ReproBundleError:
            return None
        return None if before is None or after is None else not same_lowering(before, after)

    return differently


def outputs_differ(registry: Registry, bundle: Bundle) -> Callable[[dict, dict], bool]:
    """What a bisection asks of two runs of `bundle`: whether their outputs differ beyond the check's tolerance."""
    difference = output_difference(registry, bundle)
    return lambda a, b: difference(a, b) == BEYOND


def probe_jobs(bundle: Bundle, options) -> int:
    """How many untimed probes a bisection of `bundle` runs at once by default: execution.default_jobs of the
    platform its replays run on (replay_platform: --platform, else the bundle's accelerator here, else the CPU)."""
    from ...errors import ReproBundleError
    from ...run.execution import default_jobs
    from ...run.replay import replay_platform

    try:
        platform = replay_platform(bundle, options.platform).platform
    except ReproBundleError:  # no platform here runs it: the replays say so, as they always did
        platform = "cpu"
    return default_jobs(platform)
