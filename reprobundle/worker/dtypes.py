"""Dtype names: numpy and ml_dtypes names, and MLIR element types; the one table host and worker share."""
from __future__ import annotations

# The dtypes that need jax_enable_x64 (a process-wide setting), else jax truncates them to 32 bits.
WIDE_64 = ("float64", "int64", "uint64", "complex128")


def np_dtype(name):
    """numpy dtype for a dtype name ("float32", "bfloat16", "float8_e4m3fn", "bool", ...)."""
    import numpy as np

    if not isinstance(name, str):
        return np.dtype(name)
    n = name.strip()
    if n in ("bool", "bool_"):
        return np.dtype(np.bool_)
    if n.startswith("void") and n[4:].isdigit() and int(n[4:]) % 8 == 0:
        # raw bytes (numpy's name for V<n/8>, which numpy 2 no longer parses): numpy.savez stores ml_dtypes
        # arrays (bfloat16, float8_*, int4) so; the worker reinterprets them by the function's avals
        return np.dtype("V%d" % (int(n[4:]) // 8))
    try:
        dt = np.dtype(n)
        if dt.kind != "V" or n.startswith("void"):
            return dt
    except TypeError:
        pass
    try:
        import ml_dtypes
    except ImportError:
        raise ValueError("unknown dtype %r (and ml_dtypes is not installed)" % (name,))
    t = getattr(ml_dtypes, n, None)
    if t is None:
        raise ValueError("unknown dtype %r (neither numpy nor ml_dtypes %s has it)"
                         % (name, getattr(ml_dtypes, "__version__", "?")))
    return np.dtype(t)


def dtype_name(dt):
    import numpy as np

    try:
        return np.dtype(dt).name
    except TypeError:
        return str(dt)


# MLIR element type -> dtype name. The dtype names are every dtype a bundle may hold (manifest and schema).
MLIR_ELEMENT_DTYPES = {
    "i1": "bool", "i2": "int2", "i4": "int4", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "ui2": "uint2", "ui4": "uint4", "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64",
    "complex<f32>": "complex64", "complex<f64>": "complex128",
    "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2", "f8E4M3FNUZ": "float8_e4m3fnuz",
    "f8E5M2FNUZ": "float8_e5m2fnuz", "f8E4M3B11FNUZ": "float8_e4m3b11fnuz", "f8E4M3": "float8_e4m3",
    "f8E3M4": "float8_e3m4", "f8E8M0FNU": "float8_e8m0fnu", "f4E2M1FN": "float4_e2m1fn",
    "f6E2M3FN": "float6_e2m3fn", "f6E3M2FN": "float6_e3m2fn",
}
DTYPE_NAMES = frozenset(MLIR_ELEMENT_DTYPES.values())
