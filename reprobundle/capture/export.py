"""Capture a JAX function as data: the only module that runs JAX in the host process.

It turns a jittable function and its arguments, an already serialized `jax.export` artifact, or a raw StableHLO
module into an `ExportedFunction` (bytes and plain fields, nothing tied to this JAX version) plus the flat input
leaves as numpy arrays.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from ..envs.platforms import PLATFORMS, canonical_platforms, choose_platform, detect_devices, one_process_at_a_time
from ..errors import InputMismatchError, ReplayError, UsageError
from ..text import clean, exception_line
from ..worker.dtypes import MLIR_ELEMENT_DTYPES as MLIR_ELEMENT_DTYPES  # investigate/minimize/pieces.py's import
from .flatten import flatten_call


@dataclass(frozen=True)
class ExportedFunction:
    kind: str  # "jax.export" or "stablehlo"
    fields: dict  # manifest.function.fields: what rebuilds an Exported without its flatbuffer
    in_tree: dict
    out_tree: dict
    mlir_module: bytes  # StableHLO portable artifact as the packing JAX serialized it
    stablehlo_text: str
    serialized: bytes | None = None  # jax.export flatbuffer
    mlir_module_compat: bytes | None = None  # same module at the oldest StableHLO version this jaxlib writes
    serialization_version: int | None = None
    input_paths: list[dict] | None = None  # per input leaf: {"path", "key_impl"?} (manifest 2)
    output_paths: list[dict] | None = None  # per output leaf: {"path", "key_impl"?}
    static: list[dict] | None = None  # values baked into the export: {"path", "type", "repr"}
    traced_by: str | None = None  # the JAX release that traced it, when this process did


def _dtype_name(dtype) -> str:
    return np.dtype(dtype).name


def _compat_artifact(exp) -> bytes | None:
    from ..worker.stablehlo import serialize_compat_artifact

    try:
        return serialize_compat_artifact(exp)
    except Exception:  # the compat artifact is an extra route; its absence is recorded, not fatal
        return None


def _from_exported(exp, serialized: bytes | None) -> ExportedFunction:
    from jax._src.export import serialization

    from ..worker.describe import describe_tree, exported_fields

    return ExportedFunction(
        kind="jax.export",
        fields=exported_fields(exp),
        in_tree=describe_tree(exp.in_tree),
        out_tree=describe_tree(exp.out_tree),
        mlir_module=bytes(exp.mlir_module_serialized),
        stablehlo_text=exp.mlir_module(),
        serialized=serialized if serialized is not None else bytes(exp.serialize()),
        mlir_module_compat=_compat_artifact(exp),
        serialization_version=getattr(serialization, "_SERIALIZATION_VERSION", None),
    )


def lowering_platforms(platforms: Iterable[str] | str | None) -> tuple[str, ...] | None:
    """`--platforms cuda,cpu` as jax.export's platforms ("gpu" -> "cuda"); None: the default backend's."""
    if platforms is None:
        return None
    names = canonical_platforms(platforms.split(",") if isinstance(platforms, str) else platforms)
    bad = [p for p in names if p not in PLATFORMS]
    if bad or not names:
        raise UsageError(f"unknown platform(s) {', '.join(bad) or '(none given)'}",
                         hint="--platforms takes a comma-separated subset of cpu, cuda, rocm, tpu")
    return tuple(names)


# Accelerators this process keeps off (keep_host_off_device): there, but for the reference worker, not this process.
_KEPT_OFF: set[str] = set()


def keep_host_off_device() -> tuple[str, ...]:
    """Before this process imports jax: where the machine's accelerator admits one process at a time (a TPU), this
    process runs JAX on the CPU only (JAX_PLATFORMS=cpu for itself; a worker's job sets its own platform), so that
    the reference worker can open the chip. Returns the platforms kept off, the ones to lower for; () where jax is
    imported already, JAX_PLATFORMS is the user's, or no such accelerator is here."""
    if "jax" in sys.modules or os.environ.get("JAX_PLATFORMS"):
        return ()
    here = [p for p in detect_devices().platforms if one_process_at_a_time(p)]
    if here:
        os.environ["JAX_PLATFORMS"] = "cpu"
        _KEPT_OFF.update(here)
    return tuple(here)


def reference_platform(platforms: Sequence[str]) -> str:
    """Where the reference run goes: of the artifact's platforms, the first accelerator this process's jax has
    devices for, or that this process keeps off for the worker (keep_host_off_device), else the CPU (the rule
    replays follow too); ReplayError when it has none of them."""
    from jax._src import xla_bridge

    try:
        names = list(xla_bridge.backends())
    except Exception:  # no backend at all: the worker will say why
        names = ["cpu"]
    names = sorted(_KEPT_OFF) + names
    present = []
    for name in names:
        try:
            present.append(str(xla_bridge.canonicalize_platform(name)))
        except Exception:
            present.append(name)
    try:
        return choose_platform(platforms, present, what="the exported function").platform
    except ReplayError as e:
        raise ReplayError(f"{e.message}: no reference run can be made here",
                          hint=f"pack it where its platform is, or add cpu: --platforms {','.join(platforms)},cpu "
                               "(the reference then runs on the CPU)") from None


def export_function(fn: Callable, args: Sequence[Any], kwargs: dict | None = None,
                    static: Iterable[int | str] = (), platforms: Sequence[str] | str | None = None
                    ) -> tuple[ExportedFunction, list[np.ndarray]]:
    """Export `fn(*args, **kwargs)` with `jax.export` and return it with the flat input leaves.

    The artifact is the flat function of `flatten.flatten_call`: any pytree goes in and out, non-array leaves
    and the arguments named in `static` are baked in, and the trees are described in the returned fields.
    `platforms` ("cuda,cpu"): lower one artifact for each of them (jax.export does so on any machine); default:
    the platform of this process's default backend.
    """
    import jax
    from jax import export

    lowering = lowering_platforms(platforms)
    if isinstance(fn, export.Exported):
        if lowering is not None and tuple(fn.platforms) != lowering:
            raise UsageError(f"this Exported was lowered for {', '.join(fn.platforms)}; --platforms cannot change that",
                             hint="export it again with jax.export.export(f, platforms=...), or pass the function")
        return _exported_object(fn, args, kwargs)
    kwargs = kwargs or {}
    if not callable(fn):
        raise UsageError(f"{fn!r} is not callable", hint="pass a function, a jax.jit object or a jax.export.Exported")
    call = flatten_call(fn, tuple(args), dict(kwargs), static)
    try:
        exp = (export.export(jax.jit(call.fn_flat)) if lowering is None else
               export.export(jax.jit(call.fn_flat), platforms=lowering))(*call.dynamic)
    except Exception as e:
        raise _export_refusal(call.fn_flat.__name__, e) from e
    if exp.nr_devices != 1:
        raise UsageError(f"cannot pack {call.fn_flat.__name__!r}: it is sharded over {exp.nr_devices} devices, and "
                         "reprobundle packs single-device computations",
                         hint="pack it with its inputs on one device (jax.device_put(x, jax.devices()[0])), or pack "
                              "the per-device computation (the body of your shard_map)")
    leaves = host_leaves(call.dynamic)
    captured = _from_exported(exp, None)
    return dataclasses.replace(captured, in_tree=call.in_tree, out_tree=dict(call.out_tree),
                               input_paths=call.input_leaves, output_paths=list(call.outputs),
                               static=call.static, traced_by=jax.__version__), leaves


def _export_refusal(name: str, e: Exception) -> UsageError:
    """One typed line for what jax.export refuses, with what to do instead where it is known."""
    text = f"{type(e).__name__}: {e}"
    known = (
        (("callback",), "a host callback (jax.pure_callback, io_callback, jax.debug.print/callback) cannot be "
                         "exported", "remove the callback from the function, or pack the part around it"),
        (("effect",), "the function has effects jax.export cannot serialize",
         "pack a version of the function without side effects (callbacks, ordered effects)"),
    )
    lowered = text.lower()
    for words, what, hint in known:
        if any(w in lowered for w in words):
            return UsageError(f"cannot pack {name!r}: {what} ({exception_line(e)})", hint=hint)
    return UsageError(f"jax.export could not export {name!r}: {exception_line(e)}",
                      hint="the function must be jittable with these arguments")


def _exported_object(exp, args, kwargs) -> tuple[ExportedFunction, list[np.ndarray]]:
    """An `Exported` the user made (possibly with symbolic shapes), with the concrete arguments to feed it."""
    import jax

    leaves = [_as_jax_sees_it(np.asarray(x)) for x in jax.tree_util.tree_leaves((tuple(args), kwargs or {}))]
    try:
        serialized = bytes(exp.serialize())
    except Exception as e:
        raise UsageError(f"the Exported for {exp.fun_name!r} cannot be serialized: {exception_line(e)}",
                         hint="pass the function itself instead: reprobundle exports it with flat arguments") from None
    return _from_exported(exp, serialized), leaves


def host_leaves(dynamic: Sequence[Any]) -> list[np.ndarray]:
    """A flat call's input leaves as a bundle stores them: NumPy arrays of the dtypes jax computes with. On CPU
    they may share memory with the jax arrays; copy them where the call that follows may donate its inputs."""
    return [_as_jax_sees_it(np.asarray(x)) for x in dynamic]


def _as_jax_sees_it(leaf: np.ndarray) -> np.ndarray:
    """The array jax computes with: without jax_enable_x64, a float64 NumPy input is float32 inside the export,
    so that is what the bundle stores (a copy only when the dtype changes)."""
    import jax

    dtype = jax.dtypes.canonicalize_dtype(leaf.dtype)
    return leaf if dtype == leaf.dtype else leaf.astype(dtype)


def load_exported(data: bytes) -> ExportedFunction:
    """Read a `jax.export` artifact someone serialized (with `Exported.serialize()`)."""
    from jax import export

    try:
        exp = export.deserialize(bytearray(data))
    except Exception as e:
        raise UsageError(f"not a jax.export artifact this JAX can read: {type(e).__name__}: {e}",
                         hint="serialize it with jax.export.export(f)(*args).serialize() and save the bytes") from None
    return _from_exported(exp, bytes(data))


def stablehlo_signature(text: str) -> tuple[list[dict], list[dict]]:
    """In and out avals of the module's public @main (worker/signature.py); a dynamic dimension
    (`tensor<?x4xf32>`) is None."""
    from ..worker.protocol import exc_line
    from ..worker.signature import SignatureError, main_signature

    try:
        signature = main_signature(text)
    except SignatureError as e:
        cause = f": {clean(exc_line(e.cause), 400)}" if e.cause is not None else ""
        raise UsageError(f"{e}{cause}", hint=e.hint or "") from None
    return signature["in_avals"], signature["out_avals"]


def _specialize(text: str, in_avals: list[dict], shapes: Sequence[Sequence[int]]) -> str:
    """The module with @main's dynamic dimensions set to the inputs' sizes and shapes refined through its body
    (the StableHLO refine-shapes pass jax.export runs on shape-polymorphic modules)."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    from ..worker.signature import main_function

    if len(shapes) != len(in_avals):
        raise InputMismatchError(f"@main takes {len(in_avals)} arguments, {len(shapes)} inputs were given")
    for i, (aval, shape) in enumerate(zip(in_avals, shapes)):
        if len(aval["shape"]) != len(shape) or any(d is not None and d != s for d, s in zip(aval["shape"], shape)):
            raise InputMismatchError(f"argument {i}: @main expects {aval['dtype']}{aval['shape']} (None: any size), "
                                     f"got the shape {list(shape)}")
    with mlir.make_ir_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        main = main_function(module)
        ftype = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
        concrete = [ir.RankedTensorType.get([int(d) for d in shape], ir.RankedTensorType(t).element_type)
                    for t, shape in zip(ftype.inputs, shapes)]
        main.attributes["function_type"] = ir.TypeAttr.get(ir.FunctionType.get(concrete, ftype.results))
        for argument, t in zip(main.regions[0].blocks[0].arguments, concrete):
            argument.set_type(t)
        try:
            refined = mlir.refine_polymorphic_shapes(module)
        except Exception as e:
            raise UsageError(f"cannot specialize the module's dynamic dimensions to the inputs: {exception_line(e)}",
                             hint="export the module at static shapes") from None
        return str(refined)


def concrete_module(serialized: bytes, leaves: Sequence[np.ndarray]) -> str:
    """The StableHLO of a shape-polymorphic `jax.export` artifact at the sizes of `leaves` (all of the function's
    inputs): jax's own call of the artifact, lowered and refined (its dimension variables solved, its shape
    assertions folded, its functions inlined), locations kept."""
    import jax
    from jax import export
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    exp = export.deserialize(bytearray(serialized))
    try:
        lowered = jax.jit(exp.call, keep_unused=True).lower(
            *[jax.ShapeDtypeStruct(np.shape(x), np.asarray(x).dtype) for x in leaves])
        with mlir.make_ir_context(), ir.Location.unknown():
            module = ir.Module.parse(lowered.as_text(debug_info=True))
            return str(mlir.refine_polymorphic_shapes(module).operation.get_asm(enable_debug_info=True))
    except Exception as e:
        raise UsageError(f"cannot specialize the bundle's symbolic shapes to its packed sizes: {exception_line(e)}",
                         hint="pack it at concrete sizes") from None


def load_stablehlo(text: str, input_shapes: Sequence[Sequence[int]] | None = None,
                   platform: str | None = None) -> ExportedFunction:
    """Wrap a raw StableHLO module (e.g. the module.mlir of an IR dump) as a jax.export artifact.

    The module's public @main is called with the input leaves in order, on one device, with no effects; the
    platform is `platform`, else the host's default backend's. A module with dynamic dimensions is specialized to
    `input_shapes` (the bundle then runs at those sizes). The result is a regular `Exported`, serialized by this JAX.
    """
    from jax._src.export import _export

    from ..worker.environment import lowering_platform
    from ..worker.rebuild import RebuildError, rebuild_exported
    from ..worker.stablehlo import serialize_compat_artifact

    in_avals, out_avals = stablehlo_signature(text)
    if any(d is None for aval in in_avals + out_avals for d in aval["shape"]):
        if input_shapes is None:
            raise UsageError("the StableHLO module has dynamic dimensions, so it needs real inputs to fix their sizes",
                             hint="pass --inputs FILE.npz")
        text = _specialize(text, in_avals, input_shapes)
        in_avals, out_avals = stablehlo_signature(text)
        if any(d is None for aval in out_avals for d in aval["shape"]):
            raise UsageError("the module's output sizes stay dynamic at these input sizes",
                             hint="export the module at static shapes")
    try:
        artifact = serialize_compat_artifact(text)
    except Exception as e:
        raise UsageError(f"cannot serialize the StableHLO module: {exception_line(e)}") from None
    fields = {"fun_name": "main", "in_avals": in_avals, "out_avals": out_avals, "nr_devices": 1,
              "platforms": [platform or lowering_platform()]}
    try:
        exp, _ = rebuild_exported(_export, fields, artifact)
    except RebuildError as e:
        raise UsageError(f"this JAX cannot make a jax.export artifact of the StableHLO module: {e}",
                         hint="pack it with a JAX from 0.4.30 to 0.12 whose ml_dtypes has every dtype @main uses"
                         ) from None
    captured = _from_exported(exp, None)
    return dataclasses.replace(captured, kind="stablehlo", stablehlo_text=text)


@dataclass
class OpText:
    """One top-level op of a function as text and names (investigate/minimize/pieces.py splits functions with these)."""

    name: str  # stablehlo.dot_general
    asm: str  # the op printed without locations, with the function's value names
    results: list[str]  # %5, or %7#0 %7#1
    result_types: list[str]
    operands: list[str]
    location: str  # the op's location printed (file:line frames, innermost first)
    captured: list[str] = field(default_factory=list)  # outer values its regions use (a while's bound, a constant)

    @property
    def uses(self) -> list[str]:
        """Every value of the enclosing function the op reads: its operands, then what its regions capture."""
        return self.operands + [v for v in self.captured if v not in self.operands]


@dataclass
class FunctionText:
    name: str  # the function the body is of: @main, or the function @main only calls
    args: list[str]
    arg_types: list[str]
    ops: list[OpText]  # without the return
    returned: list[str]
    callees: list[str]  # the text of every function it calls, transitively, made private


def function_ops(text: str) -> FunctionText:
    """The ops of a StableHLO module's main computation, read with the jaxlib MLIR bindings: @main's body, or the
    body of the function @main only calls (and returns), descending through such wrappers."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context(), ir.Location.unknown():
        try:
            module = ir.Module.parse(text)
        except Exception as e:
            raise UsageError(f"the StableHLO does not parse here: {exception_line(e)}") from None
        funcs = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in module.body.operations
                 if "sym_name" in op.attributes}
        if "main" not in funcs:
            raise UsageError("the StableHLO module has no @main function")
        name = _unwrapped_main(funcs, ir)
        block = funcs[name].regions[0].blocks[0]
        ops = list(block.operations)
        callees = _callee_texts(funcs, name, ir)
        args = [a.get_name() for a in block.arguments]
        return FunctionText(
            name=name, args=args, arg_types=[str(a.type) for a in block.arguments],
            ops=_op_texts(ops[:-1], set(args)), returned=[v.get_name() for v in ops[-1].operands], callees=callees)


def _op_texts(ops: list, outer: set[str]) -> list[OpText]:
    """The ops of one block as OpText; `outer` names the values visible before the block (its arguments, what
    encloses it): with the results of the block's own ops, what a region may capture."""
    visible = outer | {r.get_name() for op in ops for r in op.results}
    return [OpText(op.name, op.get_asm(enable_debug_info=False).strip(), [r.get_name() for r in op.results],
                   [str(r.type) for r in op.results], [v.get_name() for v in op.operands], str(op.location),
                   _captured(op, visible))
            for op in ops]


def _captured(op, visible: set[str]) -> list[str]:
    """The values of the enclosing block that the op's regions use, in the order first met. By name: MLIR's printer
    never gives a region's own value a name that is visible around it, so a name in `visible` is the outer value."""
    found: list[str] = []

    def walk(parent) -> None:
        for region in parent.regions:
            for inner_block in region.blocks:
                for inner in inner_block.operations:
                    found.extend(n for n in (v.get_name() for v in inner.operands) if n in visible and n not in found)
                    walk(inner)

    walk(op)
    return found


@dataclass
class RegionText:
    """The computation inside one top-level op of the main computation (investigate/minimize/reduction.py opens it): a
    `func.call`'s callee body, or a `stablehlo.while`'s body (one iteration)."""

    kind: str  # "call" or "while"
    operands: list[str]  # the op's operands, in the main computation's names
    results: list[str]  # the op's results
    args: list[str]  # the region's block arguments (bound to the operands)
    ops: list[OpText]  # the region's ops, without its terminator, in the region's own names
    yielded: list[str]  # what the region's terminator returns (bound to the results)


def region_ops(text: str, index: int) -> RegionText | None:
    """The region of the main computation's top-level op `index` (as function_ops numbers them) when it is a
    `func.call` of a function in the module or a `stablehlo.while`; None for any other op."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        funcs = {ir.StringAttr(op.attributes["sym_name"]).value: op for op in module.body.operations
                 if "sym_name" in op.attributes}
        op = list(funcs[_unwrapped_main(funcs, ir)].regions[0].blocks[0].operations)[index]
        if op.name == "func.call":
            callee = funcs.get(ir.FlatSymbolRefAttr(op.attributes["callee"]).value)
            if callee is None:
                return None
            kind, block = "call", callee.regions[0].blocks[0]
        elif op.name == "stablehlo.while":
            kind, block = "while", op.regions[1].blocks[0]
        else:
            return None
        inner = list(block.operations)
        args = [a.get_name() for a in block.arguments]
        return RegionText(
            kind=kind, operands=[v.get_name() for v in op.operands], results=[r.get_name() for r in op.results],
            args=args, ops=_op_texts(inner[:-1], set(args)), yielded=[v.get_name() for v in inner[-1].operands])


def _unwrapped_main(funcs: dict, ir) -> str:
    """@main, or the function @main only calls and returns (descending through such wrappers)."""
    name = "main"
    while True:
        callee = _only_called(funcs[name], ir)
        if callee is None or callee not in funcs:
            return name
        name = callee


def _only_called(func, ir) -> str | None:
    """The callee of a function whose body is one call and the return of exactly its results, else None."""
    body = list(func.regions[0].blocks[0].operations)
    if not (len(body) == 2 and body[0].name == "func.call" and body[1].name == "func.return"):
        return None
    if [v.get_name() for v in body[1].operands] != [r.get_name() for r in body[0].results]:
        return None
    return ir.FlatSymbolRefAttr(body[0].attributes["callee"]).value


def _callee_texts(funcs: dict, name: str, ir) -> list[str]:
    """The text of every function `name` calls, transitively, in the order first met, each made private."""
    seen, todo, callees = {name}, [name], []

    def walk(op) -> None:
        if op.name == "func.call":
            callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
            if callee in funcs and callee not in seen:
                seen.add(callee)
                todo.append(callee)
                callees.append(str(funcs[callee].get_asm(enable_debug_info=False)).strip().replace(
                    "func.func public", "func.func private"))
        for region in op.regions:
            for inner_block in region.blocks:
                for inner in inner_block.operations:
                    walk(inner)

    while todo:
        for op in funcs[todo.pop()].regions[0].blocks[0].operations:
            walk(op)
    return callees


def check_inputs(fields: dict, leaves: Sequence[np.ndarray]) -> None:
    """Raise InputMismatchError naming the first argument whose count, shape or dtype is wrong."""
    expected = fields["in_avals"]
    if len(leaves) != len(expected):
        raise InputMismatchError(
            f"the function takes {len(expected)} array arguments, {len(leaves)} were given",
            hint="the inputs must match the exported function's flattened arguments, in order",
        )
    for i, (leaf, aval) in enumerate(zip(leaves, expected)):
        got = {"shape": [int(d) for d in leaf.shape], "dtype": _dtype_name(leaf.dtype)}
        symbolic_fits = len(got["shape"]) == len(aval["shape"]) and all(
            isinstance(want, str) or want == have for want, have in zip(aval["shape"], got["shape"]))
        if got["dtype"] != aval["dtype"] or not symbolic_fits:
            raise InputMismatchError(
                f"argument {i}: expected {aval['dtype']}{aval['shape']}, got {got['dtype']}{got['shape']}",
                hint="pass inputs with the shapes and dtypes the function was exported for",
            )


def as_bytes(leaf: np.ndarray) -> memoryview:
    """The raw C-order bytes of an array without copying when it is already contiguous."""
    arr = np.ascontiguousarray(leaf)
    return arr.reshape(-1).view(np.uint8).data

