"""Replay: run a stored bundle on one or more JAX versions and record each run beside the bundle.

Each version runs the worker in its own environment (see envs.py), all versions timed together in interleaved
rounds (see schedule.py); what goes wrong in one version (no environment, incompatible artifact, crash, hang) is
that version's run record, and the others still run.
"""

from __future__ import annotations

import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from ..analysis.hlo import median_per_op
from ..analysis.verdict import check_outputs
from ..bundle import manifest as mf
from ..bundle.dims import resized_inputs
from ..bundle.registry import Bundle, Registry, utc_now
from ..bundle.trees import output_names
from ..errors import CorruptBundleError, ReproBundleError
from .execution import Timing, build_job, dtype_of, environment_of, store_result
from .schedule import (
    DEFAULT_STEPS,
    Contender,
    Measurement,
    measure_interleaved,
    rounds_for,
)

DEFAULT_TIMEOUT_S = 1800.0
# One profile of a few iterations can put a small op off by several times on a noisy machine; the per-op table is
# the median over the profiles of the first rounds (only the first round's trace is kept as an artifact).
PROFILED_ROUNDS = 3


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


def _record(bundle: Bundle, requested: str, status: str, reason: str, **extra) -> dict:
    run = {
        "format": mf.RUN_FORMAT,
        "format_version": mf.RUN_VERSION,
        "run_id": Registry.new_run_id(),
        "bundle_id": bundle.ref.bundle_id,
        "bundle": str(bundle.ref),
        "created": utc_now(),
        "requested": requested,
        "status": status,
        "reason": reason,
        "environment": {},
        "outputs": [],
        "check": None,
        "artifacts": {},
    }
    run.update(extra)
    return run


def _measured_run(registry: Registry, bundle: Bundle, requested: str, measured: Measurement, *,
                  reference: Sequence[np.ndarray] | None, warmup: int, group: str, at_sizes: str = "") -> dict:
    """A contender's measurement as a run record (not yet stored)."""
    outcome = measured.outcome
    result = outcome.result or {}
    extra = {"duration_s": outcome.duration_s, "route": result.get("route"),
             "attempts": [{"route": str(a.get("route")), "error": str(a.get("error"))}
                          for a in result.get("attempts") or []],
             "environment": environment_of(result)}
    if measured.failed_round is not None:
        return _record(bundle, requested, outcome.status if outcome.status in mf.RUN_STATUSES else "error",
                       outcome.reason, **extra)
    stored = store_result(registry, result, warmup=warmup)
    stored.timing.update(samples_ns=measured.samples_ns, steps=measured.steps, rounds=measured.rounds, group=group)
    if len(measured.per_op_tables) > 1:
        stored.per_op = median_per_op(measured.per_op_tables)
    if at_sizes:
        extra["labels"] = {"shape": at_sizes}
    if reference is None:
        return _record(bundle, requested, "ok", f"replayed at {at_sizes} on synthetic inputs: outputs are not "
                       "compared with the reference, which ran at the packed sizes", outputs=stored.outputs,
                       artifacts=stored.artifacts, timing=stored.timing, per_op=stored.per_op, **extra)
    check = check_outputs(reference, stored.arrays)
    status = "ok" if check["ok"] else "mismatch"
    reason = "" if check["ok"] else _mismatch_reason(check, output_names(bundle.manifest))
    return _record(bundle, requested, status, reason, outputs=stored.outputs, check=check,
                   artifacts=stored.artifacts, timing=stored.timing, per_op=stored.per_op, **extra)


def _mismatch_reason(check: dict, names: Sequence[str]) -> str:
    if check.get("reason"):
        return check["reason"]
    for name, leaf in zip(names, check["leaves"]):
        if not leaf["ok"]:
            return (f"{name}: {leaf['reason']}" if leaf.get("reason") else f"{name}: {leaf['mismatched']} elements outside tolerance "
                    f"(max abs err {leaf['max_abs_err']:.3g}, rtol {leaf['rtol']:g}, atol {leaf['atol']:g})")
    return "outputs differ"


def replay(registry: Registry, bundle: Bundle, versions: Sequence[str] = ("installed",), *,
           timing: Timing = Timing(repeat=DEFAULT_STEPS), timeout_s: float = DEFAULT_TIMEOUT_S, dump: bool = True,
           profile: bool = True,
           python: str | None = None, env_manager=None, progress: Callable[[str], None] | None = None,
           memory_limit_bytes: int | None = None, store_runs: bool = True,
           shapes: dict[str, int] | None = None) -> list[dict]:
    """Replay `bundle` on each version ("installed" is the host interpreter) and return the run records, in the
    order of `versions`. The versions are timed together, interleaved (see schedule.py); runs measured together
    share `timing.group`, which is what lets the verdict pair their samples.

    `shapes` ({"b": 16}) runs a shape-polymorphic bundle at other sizes, on synthetic inputs; its outputs are then
    compared between the versions but not with the reference, which ran at the packed sizes."""
    m = bundle.manifest
    resized = None
    if shapes:
        from ..worker.synthetic import synthetic_spec

        resized = resized_inputs(m, shapes, synthetic_spec)
    reference = None if resized else reference_arrays(registry, bundle)
    runs: dict[int, dict] = {}
    contenders: list[tuple[int, str, Contender]] = []
    at_sizes = ", ".join(f"{k}={v}" for k, v in sorted((shapes or {}).items()))

    def write_job(folder: Path, round_index: int) -> Path:
        return build_job(registry, m["function"], resized or m["inputs"]["leaves"], folder, timing=timing,
                         dump=dump and round_index == 0, profile=profile and round_index < PROFILED_ROUNDS,
                         lockstep=True)

    for index, requested in enumerate(versions):
        start = time.perf_counter()
        if requested == "installed" and python is None:
            interpreter: str | Path = sys.executable
        else:
            try:
                if env_manager is None:
                    from .envs import EnvironmentManager

                    env_manager = EnvironmentManager(python=python)
                interpreter = env_manager.ensure(requested, progress=progress).python_executable
            except ReproBundleError as e:
                runs[index] = _record(bundle, requested, "error", f"no environment for jax {requested}: {e.message}",
                                      duration_s=time.perf_counter() - start)
                continue

        contenders.append((index, requested, Contender(str(index), interpreter, write_job, label=requested)))
    if progress and contenders:
        progress(f"replaying {bundle.ref} on jax " + ", ".join(requested for _, requested, _ in contenders))
    rounds = rounds_for(len(contenders), timing.repeat, timing.rounds)
    group = Registry.new_run_id()
    with tempfile.TemporaryDirectory(prefix="reprobundle-replay-") as tmp:
        measured = measure_interleaved([c for _, _, c in contenders], Path(tmp), steps=timing.repeat,
                                       rounds=rounds, timeout_s=timeout_s, memory_limit_bytes=memory_limit_bytes,
                                       progress=progress)
        for index, requested, contender in contenders:
            runs[index] = _measured_run(registry, bundle, requested, measured[contender.key], reference=reference,
                                        warmup=timing.warmup, group=group, at_sizes=at_sizes)
    ordered = [runs[i] for i in range(len(versions))]
    if store_runs:
        for run in ordered:
            registry.put_run(run)
    return ordered
