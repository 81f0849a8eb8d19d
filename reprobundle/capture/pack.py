"""Packing: an ExportedFunction plus inputs becomes a published bundle.

Order of writes: function and input blobs, then the reference run (the worker on the packing interpreter, so
the reference is measured exactly as every later replay), its output and artifact blobs, the manifest last.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .. import __version__
from ..bundle import manifest as mf
from ..bundle.registry import BundleRef, Registry, utc_now
from ..errors import FormatError, UsageError
from ..logs import Status
from ..run.execution import (
    Timing,
    build_job,
    dtype_of,
    environment_of,
    failed_run_error,
    run_worker,
    store_result,
)
from ..store.scratch import scratch_dir, temp_folder
from ..units import human_bytes
from ..worker.synthetic import synthetic_spec
from .export import ExportedFunction, as_bytes, check_inputs, reference_platform
from .pack_options import PackOptions
from .source import Program


def _checked_labels(labels: dict[str, str] | None) -> dict[str, str]:
    labels = dict(labels or {})
    for k, v in labels.items():
        if not isinstance(k, str) or not isinstance(v, str) or not k:
            raise UsageError(f"invalid label {k!r}={v!r}", hint="labels are key=value strings")
    return labels


def _program_section(registry: Registry, program: Program) -> dict:
    """Manifest 3's `function.program`: the source files as blobs, listed by path."""
    section: dict[str, Any] = {
        "script": program.script, "factory": program.factory, "packages": dict(program.packages),
        "files": [{"path": path, "blob": registry.put_blob(data)} for path, data in program.files.items()]}
    if program.skipped:
        section["skipped"] = list(program.skipped)
    if program.static:
        section["static"] = list(program.static)
    return section


def _function_section(registry: Registry, fn: ExportedFunction, source: str | None,
                      program: Program | None = None) -> dict:
    function: dict[str, Any] = {
        "kind": fn.kind,
        "fields": fn.fields,
        "in_tree": fn.in_tree,
        "out_tree": fn.out_tree,
        "exported": registry.put_blob(fn.serialized) if fn.serialized is not None else None,
        "mlir_module": registry.put_blob(fn.mlir_module),
        "mlir_module_compat": registry.put_blob(fn.mlir_module_compat) if fn.mlir_module_compat else None,
        "stablehlo_text": registry.put_blob(fn.stablehlo_text.encode()),
        "source": registry.put_blob(source.encode()) if source else None,
    }
    if fn.serialization_version is not None:
        function["serialization_version"] = fn.serialization_version
    if fn.output_paths is not None:
        function["outputs"] = fn.output_paths
    if fn.static:
        function["static"] = fn.static
    if fn.traced_by:
        function["traced_by"] = {"jax": fn.traced_by}
    if program is not None:
        function["program"] = _program_section(registry, program)
    return function


def _named(leaves: list[dict], paths: list[dict] | None) -> list[dict]:
    """Input leaves with their key paths (and PRNG key impls) when the capture knows them."""
    return leaves if paths is None else [{**leaf, **named} for leaf, named in zip(leaves, paths)]


def _real_input_leaves(registry: Registry, leaves: Sequence[np.ndarray]) -> list[dict]:
    return [{"shape": [int(d) for d in leaf.shape], "dtype": np.dtype(leaf.dtype).name,
             "blob": registry.put_blob(as_bytes(leaf))} for leaf in leaves]


def _reference_run(registry: Registry, function: dict, input_leaves: list[dict], *, python: str | None,
                   timing: Timing, dump: bool, profile: bool, timeout_s: float, describe: bool = False,
                   progress: Callable[[str], None] | None = None, platform: str | None = None):
    """Run the worker once on the packing interpreter (on `platform`, when given); returns (outcome, stored
    result)."""
    if progress:
        what = ["load and compile", f"{timing.warmup} warm-up and {timing.repeat} timed calls"]
        what += (["profile"] if profile else []) + (["XLA dump"] if dump else [])
        progress(Status("reference run in a worker process: " + ", ".join(what), "reference"))
    with scratch_dir(temp_folder(), "reprobundle-pack-") as tmp:  # a killed pack's folder: gc removes it
        job = build_job(registry, function, input_leaves, Path(tmp), timing=timing, dump=dump, profile=profile,
                        routes=["deserialize"] if describe else None, describe=describe, platform=platform)
        outcome = run_worker(python or sys.executable, job, timeout_s=timeout_s)
        if outcome.status != "ok":
            raise failed_run_error(outcome, "the reference run on the packing JAX failed",
                                   hint=_stderr_hint(outcome.stderr_tail))
        assert outcome.result is not None  # an ok outcome carries the worker's result
        stored = store_result(registry, outcome.result, warmup=timing.warmup)
        if describe:
            function.update(_described_function(registry, outcome.result["description"]))
    return outcome, stored


def _described_function(registry: Registry, desc: dict) -> dict:
    def blob(path):
        return registry.put_blob_file(path) if path else None

    section = {"fields": desc["fields"], "in_tree": desc["in_tree"], "out_tree": desc["out_tree"],
               "mlir_module": blob(desc["mlir_module"]), "mlir_module_compat": blob(desc.get("mlir_module_compat")),
               "stablehlo_text": blob(desc["stablehlo_text"])}
    if desc.get("serialization_version") is not None:
        section["serialization_version"] = int(desc["serialization_version"])
    return section


def _publish(registry: Registry, *, name: str, description: str, labels: dict, parent: str | None, function: dict,
             input_leaves: list[dict], outcome, stored) -> BundleRef:
    manifest = {
        "format": mf.MANIFEST_FORMAT,
        "format_version": mf.MANIFEST_VERSION,
        "name": name,
        "version": 0,  # allocated by publish
        "created": utc_now(),
        "description": description,
        "labels": labels,
        "parent": parent,
        "tool": {"name": "reprobundle", "version": __version__},
        "function": function,
        "inputs": {"leaves": input_leaves},
        "reference": {"outputs": stored.outputs, "timing": stored.timing, "route": outcome.result.get("route") or "",
                      "per_op": stored.per_op},
        "environment": environment_of(outcome.result),
        "artifacts": stored.artifacts,
    }
    return registry.publish(manifest)


def pack(registry: Registry, fn: ExportedFunction, leaves: Sequence[np.ndarray] | None, options: PackOptions, *,
         parent: str | None = None, source: str | None = None, python: str | None = None,
         progress: Callable[[str], None] | None = None, program: Program | None = None) -> BundleRef:
    """Publish a bundle of a function exported by this process's JAX as `options` say (capture/pack_options.py; its
    `store` is the caller's: `registry`); the reference runs on `python`. `progress` gets a line (a logs.Status) as
    each phase starts: inputs, reference, publish. `program`: the source a replay can retrace (capture/source.py),
    stored as blobs."""
    say = progress or (lambda _line: None)
    name, seed = _checked_name(options.name), options.seed
    labels = _checked_labels(dict(options.labels))
    in_avals = fn.fields["in_avals"]
    if options.synthetic_inputs:
        if any(isinstance(d, str) for aval in in_avals for d in aval["shape"]):
            raise UsageError("synthetic inputs need concrete shapes, and this function has symbolic dimensions",
                             hint="pass real inputs; replay --shape NAME=SIZE then runs other sizes synthetically")
        input_leaves = [{**aval, "synthetic": synthetic_spec(aval["dtype"], seed + i)} for i, aval in enumerate(in_avals)]
    else:
        if leaves is None:
            raise UsageError("no inputs given", hint="pass the inputs, or use synthetic inputs")
        check_inputs(fn.fields, leaves)
        size = sum(int(np.asarray(leaf).nbytes) for leaf in leaves)
        say(Status(f"storing {len(leaves)} input array{'s' if len(leaves) != 1 else ''} ({human_bytes(size)}) and "
                   "the function", "inputs"))
        input_leaves = _real_input_leaves(registry, leaves)
    input_leaves = _named(input_leaves, fn.input_paths)
    function = _function_section(registry, fn, source, program)
    platform = reference_platform(fn.fields.get("platforms") or ["cpu"])  # the first accelerator it has, else cpu
    outcome, stored = _reference_run(registry, function, input_leaves, python=python, timing=options.timing,
                                     dump=options.dump, profile=options.profile, timeout_s=options.worker_timeout_s,
                                     progress=progress, platform=platform)
    say(Status(f"publishing {name} (blobs first, the manifest last)", "publish"))
    return _publish(registry, name=name, description=options.description, labels=labels, parent=parent,
                    function=function, input_leaves=input_leaves, outcome=outcome, stored=stored)


def pack_serialized_in(registry: Registry, serialized: bytes, leaves: Sequence[np.ndarray], options: PackOptions,
                       *, python: str, parent: str | None = None,
                       progress: Callable[[str], None] | None = None) -> BundleRef:
    """Publish a bundle of a serialized jax.export artifact that the host's JAX need not read: the worker in
    `python` (an environment of another JAX version) deserializes it, describes it and makes the reference."""
    name = _checked_name(options.name)
    labels = _checked_labels(dict(options.labels))
    input_leaves = _real_input_leaves(registry, leaves)
    function: dict[str, Any] = {"kind": "jax.export", "exported": registry.put_blob(serialized), "fields": None}
    outcome, stored = _reference_run(registry, function, input_leaves, python=python, timing=options.timing,
                                     dump=options.dump, profile=options.profile, timeout_s=options.worker_timeout_s,
                                     describe=True, progress=progress)
    leaves = _typed_by_avals(leaves, function["fields"]["in_avals"])
    for spec, leaf in zip(input_leaves, leaves):
        spec["dtype"] = np.dtype(leaf.dtype).name  # same bytes, same blob: only the name changes
    check_inputs(function["fields"], leaves)
    return _publish(registry, name=name, description=options.description, labels=labels, parent=parent,
                    function=function, input_leaves=input_leaves, outcome=outcome, stored=stored)


def _checked_name(name: str | None) -> str:
    if name is None:
        raise UsageError("a bundle needs a name", hint="give one: name=...")
    mf.check_name(name)
    return name


def _typed_by_avals(leaves: Sequence[np.ndarray], avals: Sequence[dict]) -> list[np.ndarray]:
    """Raw-byte leaves (void dtype: how numpy.savez stores bfloat16, float8_*, int4...) as the dtype of their aval
    when the item sizes agree, as api.load_npz does when it knows the avals (the worker does the same)."""
    typed = list(leaves)
    for i, (leaf, aval) in enumerate(zip(typed, avals)):
        if leaf.dtype.type is not np.void or leaf.dtype.names is not None:  # ml_dtypes types are kind "V" too
            continue
        try:
            want = dtype_of(aval["dtype"])
        except FormatError:
            continue
        if want.type is not np.void and want.itemsize == leaf.dtype.itemsize:
            typed[i] = leaf.view(want)
    return typed


def _stderr_hint(tail: str) -> str:
    lines = [l for l in tail.strip().splitlines() if l.strip()]
    if "multi-process lockfile" in tail or "TPU is already in use" in tail:  # libtpu: another process holds it
        return ("another process holds the TPU (this one, if it ran JAX on it): pack from the command line "
                "(`reprobundle pack script.py`), or start Python with JAX_PLATFORMS=cpu and pack with "
                "platforms=('tpu',): the reference then runs on the chip in a worker")
    return f"worker said: {lines[-1]}" if lines else "run with REPROBUNDLE_DEBUG=1 for details"
