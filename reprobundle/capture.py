"""Capture a JAX function as data: the only module that runs JAX in the host process.

It turns a jittable function and its arguments, an already serialized `jax.export` artifact, or a raw StableHLO
module into an `ExportedFunction` (bytes and plain fields, nothing tied to this JAX version) plus the flat input
leaves as numpy arrays.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from .errors import InputMismatchError, UsageError


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


def _dtype_name(dtype) -> str:
    return np.dtype(dtype).name


def aval_spec(aval) -> dict:
    return {"shape": [int(d) for d in aval.shape], "dtype": _dtype_name(aval.dtype)}


def _compat_artifact(exp) -> bytes | None:
    from . import worker

    make = getattr(worker, "serialize_compat_artifact", None)
    if make is None:
        return None
    try:
        return make(exp)
    except Exception:  # the compat artifact is an extra route; its absence is recorded, not fatal
        return None


def _from_exported(exp, serialized: bytes | None) -> ExportedFunction:
    from jax._src.export import serialization

    from .worker import describe_tree, exported_fields

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


def export_function(fn: Callable, args: Sequence[Any], kwargs: dict | None = None) -> tuple[ExportedFunction, list[np.ndarray]]:
    """Export `fn(*args, **kwargs)` with `jax.export` and return it with the flat input leaves."""
    import jax
    from jax import export

    kwargs = kwargs or {}
    if not callable(fn):
        raise UsageError(f"{fn!r} is not callable", hint="pass a function or a jax.jit object")
    jitted = fn if hasattr(fn, "lower") and hasattr(fn, "trace") else jax.jit(fn)
    try:
        exp = export.export(jitted)(*args, **kwargs)
    except Exception as e:
        raise UsageError(f"jax.export could not export {getattr(fn, '__name__', fn)!r}: {type(e).__name__}: {e}",
                         hint="the function must be jittable with these arguments") from e
    leaves = [_as_jax_sees_it(np.asarray(x)) for x in jax.tree_util.tree_leaves((tuple(args), kwargs))]
    return _from_exported(exp, None), leaves


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


_MLIR_DTYPES = {
    "i1": "bool", "i2": "int2", "i4": "int4", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "ui2": "uint2", "ui4": "uint4", "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
    "complex<f32>": "complex64", "complex<f64>": "complex128",
    "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2", "f8E4M3FNUZ": "float8_e4m3fnuz",
    "f8E5M2FNUZ": "float8_e5m2fnuz", "f8E4M3B11FNUZ": "float8_e4m3b11fnuz", "f8E4M3": "float8_e4m3",
    "f8E3M4": "float8_e3m4", "f8E8M0FNU": "float8_e8m0fnu", "f4E2M1FN": "float4_e2m1fn",
}


def _main_signature(text: str) -> tuple[list[dict], list[dict]]:
    """In and out avals of the module's public @main, read with the jaxlib MLIR bindings."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        module = ir.Module.parse(text)
        mains = [op for op in module.body.operations
                 if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == "main"]
        if not mains:
            raise UsageError("the StableHLO module has no @main function",
                             hint="reprobundle calls the module's public @main with the inputs in order")
        ftype = ir.FunctionType(ir.TypeAttr(mains[0].attributes["function_type"]).value)

        def aval(t) -> dict:
            try:
                tensor = ir.RankedTensorType(t)
            except (ValueError, TypeError):
                raise UsageError(f"@main has a non-tensor or unranked type {t}; only static shapes can be replayed") from None
            if not tensor.has_static_shape:
                raise UsageError(f"@main has a dynamic shape {t}; only static shapes can be replayed")
            element = str(tensor.element_type)
            if element not in _MLIR_DTYPES:
                raise UsageError(f"@main uses the element type {element}, which reprobundle cannot feed")
            return {"shape": [int(d) for d in tensor.shape], "dtype": _MLIR_DTYPES[element]}

        return [aval(t) for t in ftype.inputs], [aval(t) for t in ftype.results]


def load_stablehlo(text: str) -> ExportedFunction:
    """Wrap a raw StableHLO module (e.g. the module.mlir of an IR dump) as a jax.export artifact.

    The module's public @main is called with the input leaves in order, on one device, with no effects; the
    platform is the host's default backend. The result is a regular `Exported`, serialized by this JAX.
    """
    import jax
    from jax._src import core
    from jax._src.export import _export

    from . import worker

    try:
        in_avals, out_avals = _main_signature(text)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"not a StableHLO module this jaxlib can parse: {_first_line(e)}",
                         hint="pass MLIR text in the stablehlo dialect, e.g. the module.mlir of a JAX IR dump") from None
    try:
        artifact = worker.serialize_compat_artifact(text)
    except Exception as e:
        raise UsageError(f"cannot serialize the StableHLO module: {_first_line(e)}") from None
    shaped = lambda avals: tuple(core.ShapedArray(tuple(a["shape"]), np.dtype(_np_dtype(a["dtype"]))) for a in avals)
    values = dict(
        fun_name="main",
        in_tree=jax.tree_util.tree_structure(((0,) * len(in_avals), {})),
        in_avals=shaped(in_avals),
        out_tree=jax.tree_util.tree_structure((0,) * len(out_avals)),
        out_avals=shaped(out_avals),
        _has_named_shardings=True,  # unsharded: every named sharding is None
        _in_named_shardings=(None,) * len(in_avals),
        _out_named_shardings=(None,) * len(out_avals),
        in_shardings_hlo=(None,) * len(in_avals),
        out_shardings_hlo=(None,) * len(out_avals),
        nr_devices=1,
        platforms=(jax.default_backend(),),
        ordered_effects=(),
        unordered_effects=(),
        disabled_safety_checks=(),
        mlir_module_serialized=artifact,
        calling_convention_version=_export.maximum_supported_calling_convention_version,
        module_kept_var_idx=tuple(range(len(in_avals))),
        uses_global_constants=False,
        _get_vjp=None,
    )
    names = {f.name for f in dataclasses.fields(_export.Exported)}
    exp = _export.Exported(**{k: v for k, v in values.items() if k in names})
    captured = _from_exported(exp, None)
    return dataclasses.replace(captured, kind="stablehlo", stablehlo_text=text)


def _np_dtype(name: str):
    from .execution import dtype_of

    return dtype_of(name)


def _first_line(e: Exception) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[0] if lines else ''}"


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
        if got != aval:
            raise InputMismatchError(
                f"argument {i}: expected {aval['dtype']}{aval['shape']}, got {got['dtype']}{got['shape']}",
                hint="pass inputs with the shapes and dtypes the function was exported for",
            )


def as_bytes(leaf: np.ndarray) -> memoryview:
    """The raw C-order bytes of an array without copying when it is already contiguous."""
    arr = np.ascontiguousarray(leaf)
    return memoryview(arr.reshape(-1).view(np.uint8))

