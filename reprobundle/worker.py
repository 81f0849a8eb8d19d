"""reprobundle replay worker: replays one exported JAX function in *this* environment.

This file is a single self-contained script.  It is copied into / run by every
replay venv, so it imports only the standard library, numpy, msgpack (lazily)
and jax/jaxlib/ml_dtypes (lazily, inside functions).  It runs unchanged on JAX
0.4.30 .. 0.12.x and Python 3.9 .. 3.13.  Importing it does NOT import jax, so
the host may ``from reprobundle.worker import synthetic_array`` freely.

Invocation
==========

    python worker.py JOB.msgpack RESULT.msgpack

Both files are msgpack maps (packed with ``use_bin_type=True``, read with
``raw=False``).  Bulk bytes are referenced by absolute path.  Exit code is 0
whenever RESULT was written (whatever the status); 2 on bad command line.
A provisional result (status "error", reason "worker process ended abnormally
during <phase>") is written before each risky phase, so a hard crash (segfault,
OOM kill, host timeout) still leaves a result that names the phase (also in its
"phase" field, which only provisional results have).

Job (protocol 1)
----------------
::

  { "protocol": 1,
    "function": {
      "exported": path|None,            # bytes of jax.export.Exported.serialize() (flatbuffer)
      "mlir_module": path|None,         # Exported.mlir_module_serialized as the packing JAX wrote it
      "mlir_module_compat": path|None,  # same module as a portable artifact at the OLDEST StableHLO
                                        #   version the packing jaxlib can write; produce it on the
                                        #   host with serialize_compat_artifact(exported)
      "stablehlo_text": path|None,      # MLIR text of the module (e.g. exp.mlir_module(), or a raw
                                        #   `pack --stablehlo module.mlir` file)
      "fields": {...}|None },           # see exported_fields(); needed for the rebuild routes,
                                        #   optional for stablehlo-text (derived from @main then)
    "inputs": [ {"shape": [int], "dtype": str, "path": str}            # raw C-order bytes
              | {"shape": [int], "dtype": str,
                 "synthetic": {"distribution": ..., "seed": int, ...}} ],  # see synthetic_array()
              # flat leaves in the order of the exported function's flattened in_tree
    "outputs_dir": str,                 # output leaf i -> outputs_dir/out_<i>.bin (raw C-order)
    "artifacts_dir": str,               # hlo text, xla_dump/, profile/ go here
    "timing": {"warmup": int, "repeat": int,
               "lockstep": bool},      # optional (default false): the host drives the timed calls,
                                        #   see "Lockstep timing" below; "repeat" is then ignored
    "dump": bool,                       # XLA dump of the compile into artifacts_dir/xla_dump/
    "profile": bool,                    # profiler trace + per-op table
    "profile_iters": int,               # optional (default 3): iterations inside the trace
    "routes": [str]|None }              # optional: restrict/order the load routes (tests)

``fields``: ``fun_name`` str, ``in_avals``/``out_avals`` [{"shape": [int], "dtype": str}],
``platforms`` [str], ``nr_devices`` int, ``in_shardings_hlo``/``out_shardings_hlo``
[str|None], ``calling_convention_version`` int, ``ordered_effects``/``unordered_effects``
[str], ``disabled_safety_checks`` [str] ("platform", "shape_assertions",
"custom_call:<target>"), ``module_kept_var_idx`` [int], ``uses_global_constants`` bool.

Dtype strings are numpy names ("float32", "bfloat16", "int32", "bool",
"float8_e4m3fn", ...); ml_dtypes types by their ml_dtypes name.

Result (protocol 1)
-------------------
::

  { "protocol": 1, "status": "ok" | "incompatible" | "error",
    "reason": str,                 # precise and human readable, never a traceback
    "route": str|None,             # "deserialize" | "rebuild" | "rebuild-compat" | "stablehlo-text"
    "attempts": [{"route", "error", "stage", "skipped"?}],
                                   # every route considered before the one that worked, in order;
                                   # stage: how far it got: "skipped" (bundle lacks that file),
                                   # "load", "lower", "compile"; skipped ones also carry skipped=True
    "notes": [str],                # adjustments made: calling convention clamped, override flags,
                                   #   logging shim, newer-than-current artifact accepted, x64, ...
    "stablehlo": {"jaxlib": {"current", "minimum", "week_4", "week_12"},
                  "exported_flatbuffer": {...header, see exported_flatbuffer_info...},
                  "exported_module" | "mlir_module" | "mlir_module_compat": version str},
    "environment": {"python", "jax", "jaxlib", "numpy", "ml_dtypes", "platform" (backend),
                    "platform_version", "devices": [{"id", "kind", "platform"}], "os", "machine",
                    "cpu_model", "cpu_flags", "cpu_count", "env_vars", "packages", "jax_config"},
    "function": {"fun_name", "nr_devices", "platforms", "calling_convention_version"},  # when loaded
    "compile_s": float|None,       # lowered.compile() wall time
    "samples_ns": [int],           # per call: compiled(*args) + block_until_ready, after warmup
    "outputs": [{"shape", "dtype", "path"}],
    "artifacts": {"stablehlo_lowered", "hlo_before", "hlo_after", "xla_dump", "profile_dir",
                  "profile_trace"},                # only those that were produced (paths)
    "per_op": [{"name", "kind", "time_ns", "count", "total_count", "op_name"}],
                                   # name: HLO instruction (usually a fusion) of the optimized module;
                                   # kind: opcode, "fusion(kLoop)", "fusion(kCustom:__ynn_fusion)",
                                   #   "custom-call(target)"; time_ns: summed event time per iteration;
                                   # count: events per iteration; op_name: jax op metadata
    "profile": {"iterations", "traced_wall_ns", "source", "module", "note"}|None,
    "phase_s": {phase: seconds},
    "detail": str }                # only for internal worker errors: the traceback, for debugging

Sequence: load inputs -> route loop (build Exported, check inputs vs in_avals,
lower, compile; first route that compiles wins) -> one call whose outputs are
written -> ``warmup`` untimed calls -> ``repeat`` timed calls -> (profile) a
separate traced run of ``profile_iters`` calls.

Lockstep timing
---------------
With ``timing.lockstep`` the host times several workers (JAX versions) in
alternation, so that the machine's drift hits them alike.  The worker keeps its
original stdout as a private control channel (fd 1 then points at stderr, so
nothing else can write into it) and reads commands from stdin, one ASCII line each:

  worker -> host   ``ready <ns>`` after the warmup calls; <ns> is the median warmup call
  host -> worker   ``time <n>``   make n timed calls
  worker -> host   ``<ns> <ns> ...`` their n times
  host -> worker   end of stdin (or ``finish``): go on to profile, write the result, exit

Every timed call also lands in ``samples_ns``, in order.

Status: "incompatible" when no route could load+lower+compile the function;
"error" for bad jobs/inputs (e.g. input leaf shape/dtype mismatch, which names
the leaf index, expected and actual), execution failures, or internal errors.

Why plain ``deserialize(...).call(...)`` fails from a newer to an older JAX
------------------------------------------------------------------------------
* The flatbuffer: jax <= 0.8 accepts serialization versions [2, 3] only
  (0.4.30: exactly 2); 0.12 writes 12.  jax 0.10 writes "3" although its
  schema moved nr_devices to a 32-bit field, so 0.7/0.8 *misread* it as
  nr_devices=0 - the worker cross-checks the decoded Exported against
  ``fields`` and rejects such reads.  The other way, jax 0.12 refuses version-2
  flatbuffers (older than its 6-month window) unless
  ``jax_export_deserialize_expired_versions`` is set, which the worker does
  (and says so in ``notes``).
* The StableHLO artifact: jax writes it at the "4 weeks old" StableHLO version
  (1.12.1 for jax 0.7/0.8, 1.15.0 for 0.10, 1.18.0 for 0.12), but jaxlib 0.4.30
  reads up to 1.1.3 ("Failed to deserialize StableHLO").  Every jaxlib from
  0.4.30 to 0.12 can still *write* 0.9.0, hence ``mlir_module_compat``
  (re-serialization is exact or fails; VHLO versions every semantic change).
* calling_convention_version: 0.12 exports 10, jax 0.4.30 supports only 9;
  10 differs from 9 only by propagating use_shardy_partitioner to
  tf.XlaCallModule, so the rebuild routes use 9 there (noted).
* jax 0.4.30's jax.export imports absl-py, which it does not declare; the worker
  substitutes a stdlib-logging stand-in when absl is missing (noted).
* jaxlib's CPU kernels (LAPACK: cholesky, qr, eigh, svd, lu, triangular_solve...)
  are custom calls.  jax 0.4.30 .. 0.9 initialize the LAPACK ones
  (``jaxlib.cpu._lapack.initialize()``) only while lowering a linalg op, never
  in a replay, whose call then dies by SIGSEGV; jaxlib 0.4.30 also registers its
  one typed-FFI kernel (``lapack_?potrf_ffi``) under the untyped API.  The worker
  does both before compiling (noted), and a kernel the jaxlib lacks (0.4.30 has
  no ``*_ffi`` but potrf; 0.7+ none of the pre-FFI ones) makes the route fail at
  "compile", naming it (see ``prepare_kernels``).

Public helpers for the host (all importable without jax being imported):
``synthetic_array``, ``np_dtype``, ``serialize_compat_artifact``,
``exported_fields``, ``portable_artifact_version``, ``exported_flatbuffer_info``,
``strip_mlir_locations``, ``run_job``, ``main``.
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__":
    # Run by path, Python puts this file's directory first on sys.path; sibling
    # modules of the host package (e.g. a `bisect.py`) would then shadow the
    # standard library and jax's own imports.  The worker needs none of them.
    _HERE = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]

PROTOCOL_VERSION = 1
ROUTES = ("deserialize", "rebuild", "rebuild-compat", "stablehlo-text")
STATUS_OK = "ok"
STATUS_INCOMPATIBLE = "incompatible"
STATUS_ERROR = "error"
DISTRIBUTIONS = ("normal", "uniform", "randint", "zeros", "ones")

_ENV_PREFIXES = ("JAX_", "XLA_", "TF_CPP_")
_ENV_NAMES = ("XLA_FLAGS", "LIBTPU_INIT_ARGS", "CUDA_VISIBLE_DEVICES")
_MAX_MSG = 1500

# ---------------------------------------------------------------------------
# dtypes
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# synthetic inputs: counter-based splitmix64, pure numpy, version-proof
# ---------------------------------------------------------------------------

_GOLDEN = 0x9E3779B97F4A7C15
_M1 = 0xBF58476D1CE4E5B9
_M2 = 0x94D049BB133111EB
_MASK64 = (1 << 64) - 1
_CHUNK = 1 << 16  # elements per work item (even; cache-sized)


def _mix64_int(z):
    z &= _MASK64
    z = ((z ^ (z >> 30)) * _M1) & _MASK64
    z = ((z ^ (z >> 27)) * _M2) & _MASK64
    return z ^ (z >> 31)


def _hash_counters(key, start, n):
    """splitmix64 finaliser of (key + (start+i+1)*GOLDEN) for i in range(n): uint64 array."""
    import numpy as np

    z = np.arange(start + 1, start + 1 + n, dtype=np.uint64)
    t = np.empty_like(z)
    with np.errstate(over="ignore"):
        np.multiply(z, np.uint64(_GOLDEN), out=z)
        np.add(z, np.uint64(key), out=z)
        np.right_shift(z, np.uint64(30), out=t)
        np.bitwise_xor(z, t, out=z)
        np.multiply(z, np.uint64(_M1), out=z)
        np.right_shift(z, np.uint64(27), out=t)
        np.bitwise_xor(z, t, out=z)
        np.multiply(z, np.uint64(_M2), out=z)
        np.right_shift(z, np.uint64(31), out=t)
        np.bitwise_xor(z, t, out=z)
    return z


def _unit_float(z):
    """uint64 hashes -> float64 in [0, 1) (top 53 bits; exact). Consumes z."""
    import numpy as np

    np.right_shift(z, np.uint64(11), out=z)
    u = z.astype(np.float64)
    u *= 2.0 ** -53
    return u


# Deterministic elementary functions built only from IEEE-exact numpy ops
# (+ - * / sqrt frexp floor): numpy's log/cos/sin may differ by an ulp between
# numpy versions and SIMD targets (SVML vs libm), these do not.
_LN2_HI = 6.93147180369123816490e-01
_LN2_LO = 1.90821492927058770002e-10
_SQRT_HALF = 0.70710678118654752440
_HALF_PI = 1.57079632679489661923


def _det_log(x):
    """Natural log of x > 0 (float64 array) using only exactly-rounded arithmetic."""
    import numpy as np

    m, e = np.frexp(x)  # x = m * 2**e, m in [0.5, 1)
    small = m < _SQRT_HALF
    m[small] *= 2.0  # m in [sqrt(1/2), sqrt(2))
    ef = e.astype(np.float64)
    ef[small] -= 1.0
    s = m - 1.0
    m += 1.0
    s /= m  # s = (m-1)/(m+1), |s| <= 0.1716
    s2 = np.multiply(s, s, out=m)
    # log(m) = 2*atanh(s) = 2*s*(1 + s^2/3 + s^4/5 + ...), 11 terms: error < 1e-19
    p = np.full_like(s2, 1.0 / 21.0)
    for k in range(9, -1, -1):
        p *= s2
        p += 1.0 / (2 * k + 1)
    p *= s
    p *= 2.0
    p += ef * _LN2_LO
    ef *= _LN2_HI
    p += ef
    return p


def _det_sincos_quarter(f):
    """sin, cos of f*pi/2 for f in [0, 1) (float64 arrays)."""
    import numpy as np

    # center the argument: a = (f - 0.5) * pi/2 in [-pi/4, pi/4), angle = a + pi/4
    a = f - 0.5
    a *= _HALF_PI
    a2 = a * a
    # Taylor series with 8 terms each: error < 2e-17 on |a| <= pi/4
    sp = np.full_like(a2, 1.0)
    cp = np.full_like(a2, 1.0)
    t = np.empty_like(a2)
    for k in range(8, 0, -1):
        np.multiply(a2, -1.0 / ((2 * k) * (2 * k + 1)), out=t)
        sp *= t
        sp += 1.0
        np.multiply(a2, -1.0 / ((2 * k - 1) * (2 * k)), out=t)
        cp *= t
        cp += 1.0
    sp *= a  # sin(a); cp = cos(a)
    # sin(a + pi/4) = (sin a + cos a)/sqrt2, cos(a + pi/4) = (cos a - sin a)/sqrt2
    np.add(sp, cp, out=t)
    t *= _SQRT_HALF
    cp -= sp
    cp *= _SQRT_HALF
    return t, cp


def _normal_pairs(key, pair_start, npairs):
    """Box-Muller: 2*npairs standard normals (float64), interleaved cos/sin."""
    import numpy as np

    u = _unit_float(_hash_counters(key, 2 * pair_start, 2 * npairs))
    u1 = 1.0 - u[0::2]  # (0, 1]
    q4 = u[1::2] * 4.0
    del u
    r = _det_log(u1)
    r *= -2.0
    np.sqrt(r, out=r)
    q = np.floor(q4)
    q4 -= q
    s, c = _det_sincos_quarter(q4)
    qi = q.astype(np.int8)
    # rotate by q quarter turns: (c, s) -> q=1: (-s, c), q=2: (-c, -s), q=3: (s, -c)
    ns = -s
    nc = -c
    out = np.empty(2 * npairs, dtype=np.float64)
    np.multiply(r, np.choose(qi, [c, ns, nc, s]), out=out[0::2])
    np.multiply(r, np.choose(qi, [s, c, ns, nc]), out=out[1::2])
    return out


def _spec_float(spec, name, default):
    v = spec.get(name, default)
    return float(v)


def _synthetic_chunk(dist, key, start, n, spec, is_bool, is_complex):
    """float64/int64 values for flat elements [start, start+n) of the stream."""
    import numpy as np

    if is_bool:  # fair bits for every non-constant distribution
        z = _hash_counters(key, start, n)
        return (z >> np.uint64(63)).astype(np.int64)
    if dist == "normal":
        pstart = start // 2
        npairs = (start + n + 1) // 2 - pstart
        v = _normal_pairs(key, pstart, npairs)[start - 2 * pstart: start - 2 * pstart + n]
        mean = _spec_float(spec, "mean", 0.0)
        std = _spec_float(spec, "std", _spec_float(spec, "stddev", 1.0))
        if std != 1.0:
            v *= std
        if mean != 0.0:
            v += mean
        return v
    z = _hash_counters(key, start, n)
    if dist == "uniform":
        u = _unit_float(z)
        low = _spec_float(spec, "low", _spec_float(spec, "minval", 0.0))
        high = _spec_float(spec, "high", _spec_float(spec, "maxval", 1.0))
        u *= (high - low)
        u += low
        return u
    # randint
    low = int(spec.get("low", spec.get("minval", 0)))
    high = int(spec.get("high", spec.get("maxval", 10)))
    if high <= low:
        raise ValueError("randint needs high > low, got low=%d high=%d" % (low, high))
    span = high - low
    if span >= (1 << 63):
        raise ValueError("randint span too large: %d" % span)
    r = (z % np.uint64(span)).astype(np.int64)
    r += np.int64(low)
    return r


def synthetic_array(shape, dtype, spec=None):
    """Deterministic synthetic array; identical on every numpy/JAX/CPU.

    spec: {"distribution": "normal"|"uniform"|"randint"|"zeros"|"ones", "seed": int, ...}
      normal:  "mean" (0.0), "std" (1.0)                 Box-Muller
      uniform: "low" (0.0), "high" (1.0)                 low + (high-low)*u, u in [0, 1)
                                                          (rounding to a narrow dtype may give high)
      randint: "low" (0), "high" (10)                    integers in [low, high)
      bool dtypes get fair 0/1 bits for every non-constant distribution.
    Element i of the flattened (C-order) array depends only on (seed, i) through
    a splitmix64 counter hash (float64 math with exact IEEE ops only), so the
    result does not depend on the numpy version, the SIMD target, or chunking.
    Values are computed in float64 (int64 for randint) and cast with numpy
    ``astype`` to the target dtype (complex: real and imaginary parts are
    consecutive elements of the stream).  Uses threads for large arrays.
    """
    import numpy as np

    spec = dict(spec or {})
    dt = np_dtype(dtype)
    shape = tuple(int(d) for d in shape)
    dist = spec.get("distribution", "normal")
    if dist not in DISTRIBUTIONS:
        raise ValueError("unknown synthetic distribution %r (known: %s)" % (dist, ", ".join(DISTRIBUTIONS)))
    if dist == "zeros":
        return np.zeros(shape, dtype=dt)
    if dist == "ones":
        return np.ones(shape, dtype=dt)
    seed = int(spec.get("seed", 0))
    key = _mix64_int(seed & _MASK64)
    is_bool = dt == np.dtype(np.bool_)
    is_complex = dt.kind == "c"
    n = 1
    for d in shape:
        n *= d
    out = np.empty(shape, dtype=dt)
    flat = out.reshape(-1)
    if is_complex:
        real_dt = np.dtype("float32") if dt.itemsize == 8 else np.dtype("float64")
        tgt = flat.view(real_dt)
        total = 2 * n
    else:
        tgt = flat
        total = n

    def work(a):
        b = min(a + _CHUNK, total)
        v = _synthetic_chunk(dist, key, a, b - a, spec, is_bool, is_complex)
        tgt[a:b] = v.astype(tgt.dtype)

    starts = list(range(0, total, _CHUNK))
    if len(starts) <= 1:
        for a in starts:
            work(a)
    else:
        from concurrent.futures import ThreadPoolExecutor

        nthreads = max(1, min(len(starts), os.cpu_count() or 1, 32))
        with ThreadPoolExecutor(nthreads) as ex:
            for _ in ex.map(work, starts):
                pass
    return out


# ---------------------------------------------------------------------------
# artifact inspection helpers (pure python)
# ---------------------------------------------------------------------------


def portable_artifact_version(data):
    """StableHLO version recorded in a portable artifact ("1.18.0"), or None.

    A portable artifact is MLIR bytecode ("ML\\xefR", a varint bytecode version,
    then the NUL-terminated producer string "StableHLO_v<version>").
    """
    if not data or bytes(data[:4]) != b"ML\xefR":
        return None
    head = bytes(data[4:200])
    k = head.find(b"StableHLO_v")
    if k < 0:
        return None
    end = head.find(b"\x00", k)
    if end < 0:
        return None
    return head[k + len("StableHLO_v"):end].decode("ascii", "replace")


def _version_tuple(v):
    out = []
    for p in str(v).split("."):
        num = ""
        for ch in p:
            if ch.isdigit():
                num += ch
            else:
                break
        out.append(int(num) if num else 0)
    return tuple(out)


def exported_flatbuffer_info(data):
    """Header fields of a serialized Exported read straight from the flatbuffer.

    Returns {"serialization_version", "jax_version", "nr_devices",
    "nr_devices_short", "calling_convention_version", "function_name"} (None
    where absent) without needing the ``flatbuffers`` package; {} if unreadable.
    """
    import struct

    try:
        buf = bytes(data)
        table = struct.unpack_from("<I", buf, 0)[0]
        vtable = table - struct.unpack_from("<i", buf, table)[0]
        vt_size = struct.unpack_from("<H", buf, vtable)[0]

        def field(voff):
            if voff >= vt_size:
                return 0
            return struct.unpack_from("<H", buf, vtable + voff)[0]

        def scalar(voff, fmt):
            o = field(voff)
            return struct.unpack_from(fmt, buf, table + o)[0] if o else None

        def string(voff):
            o = field(voff)
            if not o:
                return None
            p = table + o
            p += struct.unpack_from("<I", buf, p)[0]
            n = struct.unpack_from("<I", buf, p)[0]
            return buf[p + 4:p + 4 + n].decode("utf-8", "replace")

        return {
            "serialization_version": scalar(4, "<H"),
            "function_name": string(6),
            "nr_devices_short": scalar(16, "<h"),
            "calling_convention_version": scalar(32, "<H"),
            "nr_devices": scalar(40, "<I"),
            "jax_version": string(56),
        }
    except Exception:
        return {}


def _skip_balanced(s, i):
    """s[i] == '('; return index after the matching ')' (honours "strings")."""
    depth = 0
    n = len(s)
    while i < n:
        ch = s[i]
        if ch == '"':
            i += 1
            while i < n and s[i] != '"':
                if s[i] == "\\":
                    i += 1
                i += 1
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return n


def strip_mlir_locations(text):
    """Remove location info (``loc(...)`` and ``#locN = ...`` lines) from MLIR text.

    Newer MLIR prints location syntax (e.g. ranges ``"f.py":4:33 to :55``) that
    older parsers reject; locations carry no semantics.
    """
    out_lines = []
    for line in text.splitlines():
        st = line.lstrip()
        if st.startswith("#loc"):
            continue
        res = []
        i = 0
        n = len(line)
        while i < n:
            ch = line[i]
            if ch == '"':
                j = i + 1
                while j < n and line[j] != '"':
                    if line[j] == "\\":
                        j += 1
                    j += 1
                res.append(line[i:j + 1])
                i = j + 1
                continue
            if line.startswith("loc(", i) and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] in "_.#")):
                j = _skip_balanced(line, i + 3)
                while res and res[-1].endswith(" "):
                    res[-1] = res[-1][:-1]
                i = j
                continue
            if line.startswith("#loc", i):
                # a reference to a location alias
                j = i + 4
                while j < n and (line[j].isalnum() or line[j] == "_"):
                    j += 1
                i = j
                continue
            res.append(ch)
            i += 1
        out_lines.append("".join(res))
    return "\n".join(out_lines) + "\n"


# ---------------------------------------------------------------------------
# host-side helpers that need the *packing* jax (imported lazily)
# ---------------------------------------------------------------------------


def _mlir_ext():
    """The jaxlib `mlir` extension module (serialize/deserialize_portable_artifact)."""
    try:
        from jax._src.lib import _jax  # jaxlib >= 0.6

        return _jax.mlir
    except ImportError:
        from jax._src.lib import xla_client

        return xla_client._xla.mlir


def _stablehlo_versions():
    from jax._src.lib.mlir.dialects import hlo

    info = {"current": str(hlo.get_current_version()), "minimum": str(hlo.get_minimum_version())}
    req = getattr(hlo, "StablehloCompatibilityRequirement", None)
    if req is not None and hasattr(hlo, "get_version_from_compatibility_requirement"):
        for name in ("WEEK_4", "WEEK_12"):
            try:
                info[name.lower()] = str(hlo.get_version_from_compatibility_requirement(getattr(req, name)))
            except Exception:
                pass
    return info


def _artifact_to_text(data):
    """Portable artifact bytes -> MLIR text (with the current jaxlib)."""
    from jax._src.interpreters import mlir

    m = _mlir_ext()
    with mlir.make_ir_context():
        mod = m.deserialize_portable_artifact(bytes(data))
        if isinstance(mod, (bytes, bytearray)):
            mod = bytes(mod).decode("utf-8")
        if isinstance(mod, str):
            return mod
        return mlir.module_to_string(mod)


def _text_to_artifact(text, target):
    """MLIR text -> portable artifact at StableHLO version `target`."""
    errors = []
    m = _mlir_ext()
    for candidate in (text, strip_mlir_locations(text)):
        try:
            return bytes(m.serialize_portable_artifact(candidate, str(target)))
        except Exception as e:
            errors.append("%s: %s" % (type(e).__name__, _first_lines(str(e))))
        try:
            from jax._src.interpreters import mlir
            from jax._src.lib.mlir import ir
            from jax._src.lib.mlir.dialects import hlo

            with mlir.make_ir_context():
                mod = ir.Module.parse(candidate)
                return bytes(hlo.serialize_portable_artifact(mod, str(target)))
        except Exception as e:
            errors.append("%s: %s" % (type(e).__name__, _first_lines(str(e))))
    raise RuntimeError("could not serialize the module at StableHLO %s: %s" % (target, " | ".join(errors)))


def serialize_compat_artifact(exported, target_version=None):
    """Host side, in-process with the PACKING jax: the module of ``exported`` re-serialized
    as a StableHLO portable artifact at the oldest version this jaxlib can write.

    Tries ``target_version`` if given, else ``get_minimum_version()`` (0.9.0 for
    jaxlib 0.4.30 .. 0.12), then progressively newer targets (12-week, 4-week
    compatibility requirement, current) if the module uses newer features.
    The chosen version is recorded in the artifact (see portable_artifact_version).
    ``exported`` may also be the bytes of a portable artifact or MLIR text.
    """
    if isinstance(exported, (bytes, bytearray)):
        text = _artifact_to_text(exported)
    elif isinstance(exported, str):
        text = exported
    else:
        text = _artifact_to_text(exported.mlir_module_serialized)
    if target_version is not None:
        return _text_to_artifact(text, target_version)
    info = _stablehlo_versions()
    targets = []
    for k in ("minimum", "week_12", "week_4", "current"):
        if k in info and info[k] not in targets:
            targets.append(info[k])
    errors = []
    for t in targets:
        try:
            return _text_to_artifact(text, t)
        except Exception as e:
            errors.append("%s: %s" % (t, e))
    raise RuntimeError("no StableHLO target version worked: " + "; ".join(errors))


def _sharding_str(s):
    if s is None:
        return None
    try:
        return str(s)
    except Exception:
        return repr(s)


class _TreeLeaf(object):
    pass


def describe_tree(treedef):
    """A version-independent description of a pytree structure: nested {"kind": leaf|none|tuple|list|dict|
    custom, "children", "keys", "type"} maps (manifest ``in_tree``/``out_tree``)."""
    import jax

    marker = _TreeLeaf()
    structure = jax.tree_util.tree_unflatten(treedef, [marker] * treedef.num_leaves)

    def walk(node):
        if node is marker:
            return {"kind": "leaf"}
        if node is None:
            return {"kind": "none"}
        if isinstance(node, tuple) and not hasattr(node, "_fields"):
            return {"kind": "tuple", "children": [walk(c) for c in node]}
        if isinstance(node, list):
            return {"kind": "list", "children": [walk(c) for c in node]}
        if isinstance(node, dict):
            keys = sorted(node)
            return {"kind": "dict", "keys": [str(k) for k in keys], "children": [walk(node[k]) for k in keys]}
        children = jax.tree_util.tree_flatten(node, is_leaf=lambda x: x is not node)[0]
        return {"kind": "custom", "type": "%s.%s" % (type(node).__module__, type(node).__qualname__),
                "children": [walk(c) for c in children]}

    return walk(structure)


def exported_fields(exported):
    """Host side: the job's ``function.fields`` dict for a jax.export.Exported."""
    def aval(a):
        return {"shape": [int(d) if isinstance(d, int) else str(d) for d in a.shape],
                "dtype": _dtype_name(a.dtype)}

    def check_str(c):
        return str(getattr(c, "_impl", c))

    return {
        "fun_name": str(exported.fun_name),
        "in_avals": [aval(a) for a in exported.in_avals],
        "out_avals": [aval(a) for a in exported.out_avals],
        "platforms": [str(p) for p in exported.platforms],
        "nr_devices": int(exported.nr_devices),
        "in_shardings_hlo": [_sharding_str(s) for s in getattr(exported, "in_shardings_hlo", ())],
        "out_shardings_hlo": [_sharding_str(s) for s in getattr(exported, "out_shardings_hlo", ())],
        "calling_convention_version": int(exported.calling_convention_version),
        "ordered_effects": [str(e) for e in exported.ordered_effects],
        "unordered_effects": [str(e) for e in exported.unordered_effects],
        "disabled_safety_checks": [check_str(c) for c in exported.disabled_safety_checks],
        "module_kept_var_idx": [int(i) for i in exported.module_kept_var_idx],
        "uses_global_constants": bool(exported.uses_global_constants),
    }


def _shape_builder(avals):
    """A function turning a fields shape into a jax shape: ints stay ints; symbolic dimensions ("b", "2*b") are
    parsed by jax.export.symbolic_shape in one scope shared by all the avals, as the exporter had them."""
    if all(isinstance(d, int) for a in avals for d in a["shape"]):
        return lambda dims: tuple(int(d) for d in dims)
    from jax import export as jexport

    scope = jexport.SymbolicScope()

    def build(dims):
        if all(isinstance(d, int) for d in dims):
            return tuple(int(d) for d in dims)
        return tuple(jexport.symbolic_shape(", ".join(str(d) for d in dims), scope=scope))

    return build


def _dtype_name(dt):
    import numpy as np

    try:
        return np.dtype(dt).name
    except TypeError:
        return str(dt)


# ---------------------------------------------------------------------------
# small utilities
# ---------------------------------------------------------------------------


def _first_lines(msg, limit=_MAX_MSG):
    msg = str(msg).strip()
    if len(msg) > limit:
        msg = msg[:limit] + " ...[truncated]"
    return msg


def _exc_msg(e):
    return "%s: %s" % (type(e).__name__, _first_lines(str(e)))


def _plain(obj):
    """Make obj msgpack-friendly."""
    import numpy as np

    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if obj is None or isinstance(obj, (str, int, float, bool, bytes)):
        return obj
    return str(obj)


def _write_msgpack(path, obj):
    import msgpack

    data = msgpack.packb(_plain(obj), use_bin_type=True)
    tmp = "%s.tmp.%d" % (path, os.getpid())
    with open(tmp, "wb") as f:
        f.write(data)
    os.replace(tmp, path)


def _read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


class _RouteFailure(Exception):
    def __init__(self, stage, message):
        Exception.__init__(self, message)
        self.stage = stage
        self.message = message


class _JobError(Exception):
    """A problem with the job or its inputs -> status "error"."""


_STAGE_RANK = {"skipped": 0, "load": 1, "lower": 2, "compile": 3}

# Custom-call target families of jaxlib's own CPU kernels, which the replaying jaxlib must provide itself:
# LAPACK (lapack_spotrf, lapack_spotrf_ffi, ...) and, in jaxlib 0.4.30, BLAS (blas_strsm).
_KERNEL_PREFIXES = ("lapack_", "blas_")


def _custom_call_targets(text):
    """The custom-call targets of an MLIR module's text (pretty or generic form)."""
    import re

    found = set()
    for m in re.finditer(r'custom_call\s*@(?:"([^"]+)"|([\w.$-]+))|call_target_name\s*=\s*"([^"]+)"', text):
        found.add(m.group(1) or m.group(2) or m.group(3))
    return found


def _jaxlib_lapack():
    """jaxlib's CPU LAPACK extension module (registrations(), initialize()), or None."""
    try:
        from jax._src.lib import lapack

        mod = getattr(lapack, "_lapack", None)
        if mod is not None:
            return mod
    except Exception:
        pass
    try:
        from jaxlib.cpu import _lapack

        return _lapack
    except Exception:
        return None


def _registered_targets():
    """The CPU's registered custom-call targets: name -> a dict for typed-FFI handlers (jaxlib >= 0.7 lists
    them), a capsule for the untyped API (all jaxlib 0.4.30 lists, under its XLA platform name "Host")."""
    try:
        from jax._src.lib import xla_client
    except Exception:
        return {}
    found = {}
    for platform in ("cpu", "Host"):
        try:
            found.update(xla_client.custom_call_targets(platform))
        except Exception:
            pass
    return found


def _missing_kernels_message(missing, provided):
    try:
        import jaxlib.version

        jl = "jaxlib %s" % jaxlib.version.__version__
    except Exception:
        jl = "this jaxlib"
    names = []
    for t in missing:
        if t.endswith("_ffi") and t[:-4] in provided:
            names.append("%s (it has only the older %s, another calling convention)" % (t, t[:-4]))
        elif t + "_ffi" in provided:
            names.append("%s (it has only the newer %s_ffi, another calling convention)" % (t, t))
        else:
            names.append(t)
    plural = "s" if len(missing) > 1 else ""
    return ("the module calls jaxlib CPU kernel%s that %s does not provide, custom-call target%s: %s"
            % (plural, jl, plural, ", ".join(names)))


# ---------------------------------------------------------------------------
# environment
# ---------------------------------------------------------------------------


def _cpu_info():
    import platform

    model, flags = "", []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                k, _, v = line.partition(":")
                k = k.strip().lower()
                if not model and k in ("model name", "hardware", "cpu model", "processor") and not v.strip().isdigit():
                    model = v.strip()
                if not flags and k in ("flags", "features"):
                    flags = sorted(v.split())
                if model and flags:
                    break
    except OSError:
        pass
    if not model and sys.platform == "darwin":
        try:
            import subprocess

            model = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True,
                                   text=True, timeout=5, check=False).stdout.strip()
        except Exception:
            pass
    return model or platform.processor(), flags


def _env_vars():
    out = {}
    for k, v in os.environ.items():
        if k in _ENV_NAMES or k.startswith(_ENV_PREFIXES):
            out[k] = v
    return out


def _packages():
    try:
        from importlib import metadata
    except ImportError:
        return {}
    out = {}
    try:
        for d in metadata.distributions():
            try:
                name = d.metadata["Name"]
            except Exception:
                name = None
            if name:
                out[str(name)] = str(d.version)
    except Exception:
        pass
    return out


def _base_environment():
    import platform

    import numpy as np

    model, flags = _cpu_info()
    env = {
        "python": sys.version.split()[0],
        "python_full": sys.version,
        "numpy": np.__version__,
        "os": platform.platform(),
        "machine": platform.machine(),
        "cpu_model": model,
        "cpu_flags": flags,
        "cpu_count": os.cpu_count(),
        "env_vars": _env_vars(),
        "packages": _packages(),
    }
    try:
        import ml_dtypes

        env["ml_dtypes"] = ml_dtypes.__version__
    except Exception:
        env["ml_dtypes"] = None
    return env


def _jax_environment(env):
    import jax

    env["jax"] = jax.__version__
    try:
        import jaxlib.version

        env["jaxlib"] = jaxlib.version.__version__
    except Exception:
        import jaxlib

        env["jaxlib"] = getattr(jaxlib, "__version__", None)
    try:
        env["platform"] = jax.default_backend()
        devs = jax.devices()
        env["devices"] = [{"id": int(d.id), "kind": str(getattr(d, "device_kind", "")),
                           "platform": str(d.platform)} for d in devs]
        try:
            env["platform_version"] = str(devs[0].client.platform_version)
        except Exception:
            env["platform_version"] = None
    except Exception as e:
        env["platform"] = None
        env["devices"] = []
        env["backend_error"] = _exc_msg(e)
    cfg = {}
    for name in ("jax_enable_x64", "jax_default_matmul_precision", "jax_platforms",
                 "jax_export_calling_convention_version", "jax_use_shardy_partitioner",
                 "jax_default_prng_impl", "jax_threefry_partitionable", "jax_compilation_cache_dir",
                 "jax_enable_compilation_cache", "jax_export_deserialize_expired_versions",
                 "jax_export_ignore_forward_compatibility", "jax_numpy_rank_promotion"):
        try:
            cfg[name] = _plain(getattr(jax.config, name))
        except Exception:
            pass
    env["jax_config"] = cfg


# ---------------------------------------------------------------------------
# the worker proper
# ---------------------------------------------------------------------------


class _Control:
    """The lockstep control channel: commands on stdin, replies on a private copy of the original stdout."""

    def __init__(self):
        self._out = os.fdopen(os.dup(1), "w")
        os.dup2(2, 1)  # whatever else prints (jax, XLA) goes to stderr, never into the channel
        sys.stdout = sys.stderr

    def send(self, line):
        self._out.write(line + "\n")
        self._out.flush()

    def receive(self):
        line = sys.stdin.readline()
        return line.strip() if line else None


class _Worker:
    def __init__(self, job, result_path=None, control=None):
        self.job = job
        self.result_path = result_path
        self.control = control
        self.notes = []
        self.attempts = []
        self.result = {
            "protocol": PROTOCOL_VERSION, "status": STATUS_ERROR, "reason": "", "route": None,
            "attempts": self.attempts, "notes": self.notes, "environment": {}, "stablehlo": {},
            "compile_s": None, "samples_ns": [], "outputs": [], "artifacts": {}, "per_op": [],
            "profile": None, "phase_s": {},
        }
        self.phase = "start"

    # -- bookkeeping -------------------------------------------------------
    def checkpoint(self, phase):
        import time

        self.phase = phase
        self._phase_t0 = time.perf_counter()
        if self.result_path:
            prov = dict(self.result)
            prov["status"] = STATUS_ERROR
            prov["reason"] = "worker process ended abnormally during phase %r (crash, kill or timeout)" % phase
            prov["phase"] = phase  # only provisional results name a phase: the host's crash record reports it
            try:
                _write_msgpack(self.result_path, prov)
            except Exception:
                pass

    def end_phase(self):
        import time

        t0 = getattr(self, "_phase_t0", None)
        if t0 is not None:
            self.result["phase_s"][self.phase] = round(time.perf_counter() - t0, 6)
            self._phase_t0 = None

    # -- job validation ----------------------------------------------------
    def validate(self):
        job = self.job
        if not isinstance(job, dict):
            raise _JobError("job is not a map")
        proto = job.get("protocol")
        if proto != PROTOCOL_VERSION:
            raise _JobError("unsupported job protocol %r (this worker speaks %d)" % (proto, PROTOCOL_VERSION))
        fn = job.get("function")
        if not isinstance(fn, dict):
            raise _JobError("job.function missing or not a map")
        if not isinstance(job.get("inputs"), list):
            raise _JobError("job.inputs missing or not a list")
        for k in ("outputs_dir", "artifacts_dir"):
            if not isinstance(job.get(k), str) or not job.get(k):
                raise _JobError("job.%s missing" % k)
        routes = job.get("routes")
        if routes is not None:
            bad = [r for r in routes if r not in ROUTES]
            if bad:
                raise _JobError("unknown route(s) %s; known: %s" % (bad, list(ROUTES)))
        self.fields = fn.get("fields") or None

    # -- inputs ------------------------------------------------------------
    def load_inputs(self):
        import numpy as np

        arrays = []
        for i, leaf in enumerate(self.job["inputs"]):
            if not isinstance(leaf, dict):
                raise _JobError("input leaf %d is not a map" % i)
            try:
                shape = tuple(int(d) for d in leaf["shape"])
                dt = np_dtype(leaf["dtype"])
            except Exception as e:
                raise _JobError("input leaf %d: bad shape/dtype (%s)" % (i, _exc_msg(e)))
            if leaf.get("path"):
                path = leaf["path"]
                n = 1
                for d in shape:
                    n *= d
                want = n * dt.itemsize
                try:
                    size = os.path.getsize(path)
                except OSError as e:
                    raise _JobError("input leaf %d: cannot read %s (%s)" % (i, path, e))
                if size != want:
                    raise _JobError("input leaf %d: file %s has %d bytes, expected %d for %s%s"
                                    % (i, path, size, want, dt.name, list(shape)))
                arr = np.fromfile(path, dtype=dt, count=n).reshape(shape)
            elif leaf.get("synthetic") is not None:
                try:
                    arr = synthetic_array(shape, dt, leaf["synthetic"])
                except Exception as e:
                    raise _JobError("input leaf %d: synthetic generation failed (%s)" % (i, _exc_msg(e)))
            else:
                raise _JobError("input leaf %d has neither 'path' nor 'synthetic'" % i)
            arrays.append(arr)
        self.host_inputs = arrays
        self.input_meta = [(tuple(a.shape), a.dtype) for a in arrays]

    def adopt_raw_inputs(self, avals, what):
        """Raw-byte input leaves (void dtype: ml_dtypes arrays as numpy.savez stores them) take the dtype of
        the function's aval when the item sizes agree, as the host does for the manifest."""
        if getattr(self, "host_inputs", None) is None or len(avals) != len(self.host_inputs):
            return
        import numpy as np

        for i, ((_, dt), arr) in enumerate(zip(avals, self.host_inputs)):
            if arr.dtype.type is not np.void or arr.dtype.names is not None:  # ml_dtypes types are kind "V" too
                continue
            try:
                want = np_dtype(dt)
            except Exception:
                continue
            if want.type is not np.void and want.itemsize == arr.dtype.itemsize:
                self.host_inputs[i] = arr.view(want)
                self.input_meta[i] = (tuple(arr.shape), want)
                self.notes.append("input leaf %d: raw %s data taken as %s (from %s)"
                                  % (i, arr.dtype.name, want.name, what))

    def check_inputs(self, avals, what):
        """avals: list of (shape tuple, dtype name). Returns error message or None."""
        self.adopt_raw_inputs(avals, what)
        metas = self.input_meta
        if len(avals) != len(metas):
            return ("the function (%s) takes %d input leaves but the job has %d"
                    % (what, len(avals), len(metas)))
        for i, ((shape, dt), (act_shape, act_dt)) in enumerate(zip(avals, metas)):
            exp_shape = list(shape)
            act_shape = list(act_shape)
            shape_ok = len(exp_shape) == len(act_shape) and all(
                (not isinstance(e, int)) or e == x for e, x in zip(exp_shape, act_shape))
            try:
                dt_ok = np_dtype(dt) == act_dt
            except Exception:
                dt_ok = str(dt) == act_dt.name
            if not (shape_ok and dt_ok):
                return ("input leaf %d: expected %s%s (from %s), got %s%s"
                        % (i, dt, [e if isinstance(e, int) else str(e) for e in exp_shape], what,
                           act_dt.name, act_shape))
        return None

    # -- jax import ----------------------------------------------------------
    def setup_jax(self):
        job = self.job
        adir = job["artifacts_dir"]
        os.makedirs(adir, exist_ok=True)
        os.makedirs(job["outputs_dir"], exist_ok=True)
        user_flags = os.environ.get("XLA_FLAGS", "").strip()
        if job.get("dump"):
            ddir = os.path.join(adir, "xla_dump")
            os.makedirs(ddir, exist_ok=True)
            extra = "--xla_dump_to=%s --xla_dump_hlo_as_text" % ddir
            if "jax" in sys.modules:
                self.notes.append("jax was already imported before the worker set XLA_FLAGS; dump may be missing")
            os.environ["XLA_FLAGS"] = (user_flags + " " + extra).strip()
            self.result["artifacts"]["xla_dump"] = ddir
        import jax  # noqa: F401  (first import of jax happens here)

        env = self.result["environment"]
        _jax_environment(env)
        env["env_vars"] = _env_vars()
        if job.get("dump"):  # record the user's flags, not the worker's own dump flags
            if user_flags:
                env["env_vars"]["XLA_FLAGS"] = user_flags
            else:
                env["env_vars"].pop("XLA_FLAGS", None)
        if env.get("platform") is None:
            raise _JobError("no JAX backend could be initialised: %s" % env.get("backend_error"))
        try:
            self.result["stablehlo"]["jaxlib"] = _stablehlo_versions()
        except Exception as e:
            self.result["stablehlo"]["jaxlib_error"] = _exc_msg(e)
        # 64-bit inputs need x64 mode, otherwise jax silently truncates them.
        wide64 = ("float64", "int64", "uint64", "complex128")
        wide = [m for m in self.input_meta if m[1].name in wide64]
        if self.fields:
            wide += [a for a in self.fields.get("out_avals") or [] if str(a.get("dtype")) in wide64]
        if wide:
            jax.config.update("jax_enable_x64", True)
            self.notes.append("enabled jax_enable_x64 because the function has 64-bit inputs/outputs")

    def import_export(self):
        """Import jax's export machinery (with a logging shim for jax 0.4.30 without absl)."""
        try:
            from jax._src.export import _export  # noqa: F401
        except ImportError as e:
            if "absl" not in str(e):
                raise
            import logging
            import types

            log = logging.getLogger("absl")
            absl = types.ModuleType("absl")
            absl.__path__ = []
            alog = types.ModuleType("absl.logging")
            alog.vlog_is_on = lambda level: False
            for name in ("info", "warning", "error", "debug", "log", "exception"):
                setattr(alog, name, getattr(log, name) if name != "log" else log.log)
            alog.vlog = lambda level, msg, *args: None
            absl.logging = alog
            sys.modules.setdefault("absl", absl)
            sys.modules.setdefault("absl.logging", alog)
            try:
                from jax._src.export import _export  # noqa: F401
            finally:
                if sys.modules.get("absl") is absl:
                    del sys.modules["absl"]
                if sys.modules.get("absl.logging") is alog:
                    del sys.modules["absl.logging"]
            self.notes.append("absl-py is not installed (an undeclared dependency of this jax's "
                              "jax.export); provided a stdlib-logging stand-in for absl.logging")
        from jax._src.export import _export

        return _export

    # -- routes --------------------------------------------------------------
    def _file(self, key):
        p = (self.job["function"] or {}).get(key)
        if not p:
            return None
        if not os.path.exists(p):
            raise _RouteFailure("load", "the bundle's %s file %s does not exist" % (key, p))
        return p

    def route_deserialize(self):
        import jax

        path = self._file("exported")
        if path is None:
            raise _RouteFailure("skipped", "bundle has no 'exported' (serialized Exported) file")
        data = _read_bytes(path)
        try:
            self.import_export()
        except Exception as e:
            raise _RouteFailure("load", "jax.export is unavailable: %s" % _exc_msg(e))
        info = exported_flatbuffer_info(data)
        self.result["stablehlo"]["exported_flatbuffer"] = info
        who = "written by JAX %s" % info["jax_version"] if info.get("jax_version") else "writer JAX version not recorded"
        desc = "the Exported flatbuffer (serialization version %s, %s)" % (info.get("serialization_version"), who)
        try:
            from jax._src.export import serialization  # noqa: F401
        except ImportError as e:
            raise _RouteFailure("load", "jax.export.deserialize unavailable: %s" % _exc_msg(e))
        from jax import export as jexport

        try:
            exp = jexport.deserialize(bytearray(data))
        except Exception as e:
            msg = str(e)
            flag = "jax_export_deserialize_expired_versions"
            if ("backward-compatibility window" in msg or "expired" in msg.lower()) and hasattr(jax.config, flag):
                try:
                    jax.config.update(flag, True)
                    import warnings

                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        exp = jexport.deserialize(bytearray(data))
                    self.notes.append("deserialize: %s is outside jax %s's 6-month window; loaded it "
                                      "with the documented override %s=True"
                                      % (desc, jax.__version__, flag))
                except Exception as e2:
                    raise _RouteFailure("load", "jax %s cannot deserialize %s: %s (retry with %s=True: %s)"
                                        % (jax.__version__, desc, _exc_msg(e), flag, _exc_msg(e2)))
            else:
                raise _RouteFailure("load", "jax %s cannot deserialize %s: %s"
                                    % (jax.__version__, desc, _exc_msg(e)))
        problem = self._sanity_check_exported(exp, info)
        if problem:
            raise _RouteFailure("load", "jax %s misreads %s: %s" % (jax.__version__, desc, problem))
        desc = self._module_desc(exp.mlir_module_serialized, "the Exported's mlir_module_serialized")
        self.result["stablehlo"]["exported_module"] = desc["version"]
        return exp, desc

    def _sanity_check_exported(self, exp, info):
        """A flatbuffer from a newer schema can 'deserialize' into garbage. Compare with fields."""
        if exp.nr_devices < 1:
            extra = ""
            if info.get("nr_devices") and not info.get("nr_devices_short"):
                extra = (" (the flatbuffer stores nr_devices=%d in the 32-bit field of the newer schema, "
                         "which this JAX does not know)" % info["nr_devices"])
            return "decoded nr_devices=%s%s" % (exp.nr_devices, extra)
        f = self.fields
        if not f:
            return None
        if "nr_devices" in f and int(f["nr_devices"]) != int(exp.nr_devices):
            return "decoded nr_devices=%s but the bundle fields say %s" % (exp.nr_devices, f["nr_devices"])
        for kind, avals in (("in_avals", exp.in_avals), ("out_avals", exp.out_avals)):
            want = f.get(kind)
            if want is None:
                continue
            def norm(shape):
                return [int(x) if isinstance(x, int) else str(x) for x in shape]

            got = [(norm(a.shape), _dtype_name(a.dtype)) for a in avals]
            exp_l = [(norm(a["shape"]), str(a["dtype"])) for a in want]
            if got != exp_l:
                return "decoded %s %s but the bundle fields say %s" % (kind, got, exp_l)
        return None

    def _module_desc(self, data, what):
        ver = portable_artifact_version(data)
        return {"what": what, "version": ver}

    def _build_exported(self, mlir_bytes, route):
        """Rebuild an Exported from fields + a portable artifact."""
        import dataclasses

        import jax
        from jax._src import core as jcore

        _export = self.import_export()
        f = self.fields
        if not f:
            raise _RouteFailure("load", "bundle has no 'fields' to rebuild the Exported from")
        try:
            shape_of = _shape_builder(f["in_avals"] + f["out_avals"])
            in_avals = tuple(jcore.ShapedArray(shape_of(a["shape"]), np_dtype(a["dtype"])) for a in f["in_avals"])
            out_avals = tuple(jcore.ShapedArray(shape_of(a["shape"]), np_dtype(a["dtype"])) for a in f["out_avals"])
        except Exception as e:
            raise _RouteFailure("load", "cannot build avals from fields: %s" % _exc_msg(e))
        nr_devices = int(f.get("nr_devices", 1))
        for kind in ("ordered_effects", "unordered_effects"):
            if f.get(kind):
                raise _RouteFailure("load", "the function has %s %s, which cannot be reconstructed from "
                                    "text fields (needs the deserialize route)" % (kind, f[kind]))
        in_sh = list(f.get("in_shardings_hlo") or [None] * len(in_avals))
        out_sh = list(f.get("out_shardings_hlo") or [None] * len(out_avals))
        nontrivial = [s for s in in_sh + out_sh if s is not None]
        if nontrivial:
            if nr_devices > 1:
                raise _RouteFailure("load", "multi-device shardings %s cannot be rebuilt from text fields "
                                    "(needs the deserialize route)" % nontrivial[:3])
            self.notes.append("%s: ignored shardings %s (nr_devices=1, so they are trivial)"
                              % (route, sorted(set(nontrivial))[:3]))
        in_sh = [None] * len(in_avals)
        out_sh = [None] * len(out_avals)
        checks = []
        for c in f.get("disabled_safety_checks") or []:
            s = str(c)
            if "custom_call:" in s:
                target = s.split("custom_call:", 1)[1].rstrip(")'\" ")
                checks.append(_export.DisabledSafetyCheck.custom_call(target))
            elif "shape_assertions" in s:
                checks.append(_export.DisabledSafetyCheck.shape_assertions())
            elif "platform" in s:
                checks.append(_export.DisabledSafetyCheck.platform())
            else:
                raise _RouteFailure("load", "unknown disabled safety check %r" % s)
        cc = int(f.get("calling_convention_version", _export.maximum_supported_calling_convention_version))
        cc = self._adjust_cc(cc, _export, route)
        n_in = len(in_avals)
        values = {
            "fun_name": str(f.get("fun_name", "fun")),
            "in_tree": jax.tree_util.tree_structure((tuple(range(n_in)), {})),
            "in_avals": in_avals,
            "out_tree": jax.tree_util.tree_structure(tuple(range(len(out_avals)))),
            "out_avals": out_avals,
            "_has_named_shardings": False,
            "_in_named_shardings": tuple(in_sh),
            "_out_named_shardings": tuple(out_sh),
            "in_shardings_hlo": tuple(in_sh),
            "out_shardings_hlo": tuple(out_sh),
            "nr_devices": nr_devices,
            "platforms": tuple(str(p).lower() for p in (f.get("platforms") or [jax.default_backend()])),
            "ordered_effects": (),
            "unordered_effects": (),
            "disabled_safety_checks": tuple(checks),
            "mlir_module_serialized": bytes(mlir_bytes),
            "calling_convention_version": cc,
            "module_kept_var_idx": tuple(int(i) for i in f.get("module_kept_var_idx", range(n_in))),
            "uses_global_constants": bool(f.get("uses_global_constants", False)),
            "_get_vjp": None,
        }
        kwargs = {}
        for fld in dataclasses.fields(_export.Exported):
            if fld.name in values:
                kwargs[fld.name] = values[fld.name]
            elif fld.default is dataclasses.MISSING and fld.default_factory is dataclasses.MISSING:
                raise _RouteFailure("load", "jax %s's Exported has a field %r this worker cannot fill"
                                    % (jax.__version__, fld.name))
        try:
            return _export.Exported(**kwargs)
        except Exception as e:
            raise _RouteFailure("load", "cannot construct Exported: %s" % _exc_msg(e))

    def _adjust_cc(self, cc, _export, route):
        lo = _export.minimum_supported_calling_convention_version
        hi = _export.maximum_supported_calling_convention_version
        if lo <= cc <= hi:
            return cc
        if cc == 10 and hi == 9:
            # Version 10 only adds propagation of jax_use_shardy_partitioner to
            # tf.XlaCallModule; the module and JAX-native calling convention are
            # identical to version 9.
            self.notes.append("%s: calling_convention_version 10 is above this jax's supported range "
                              "[%d..%d]; used 9 (10 differs only by propagating use_shardy_partitioner to "
                              "tf.XlaCallModule, the module calling convention is the same)" % (route, lo, hi))
            return 9
        self.notes.append("%s: calling_convention_version %d is outside this jax's supported range [%d..%d]; "
                          "kept it unchanged (no known-sound adjustment)" % (route, cc, lo, hi))
        return cc

    def route_rebuild(self, key, route):
        path = self._file(key)
        if path is None:
            raise _RouteFailure("skipped", "bundle has no '%s' file" % key)
        data = _read_bytes(path)
        desc = self._module_desc(data, "the bundle's %s" % key)
        self.result["stablehlo"][key] = desc["version"]
        return self._build_exported(data, route), desc

    def route_text(self):
        path = self._file("stablehlo_text")
        if path is None:
            raise _RouteFailure("skipped", "bundle has no 'stablehlo_text' file")
        with open(path, "r") as fh:
            text = fh.read()
        try:
            from jax._src.lib.mlir.dialects import hlo

            target = str(hlo.get_current_version())
        except Exception as e:
            raise _RouteFailure("load", "cannot query StableHLO version: %s" % _exc_msg(e))
        try:
            art = _text_to_artifact(text, target)
        except Exception as e:
            raise _RouteFailure("load", "cannot parse/serialize the StableHLO text with this jaxlib: %s"
                                % _first_lines(str(e)))
        desc = {"what": "the bundle's stablehlo_text (serialized here at %s)" % target, "version": target}
        if not self.fields:
            self.fields = self._fields_from_text(text)
            self.notes.append("stablehlo-text: no fields in the bundle; derived in/out avals from @main")
            msg = self.check_inputs([(tuple(a["shape"]), a["dtype"]) for a in self.fields["in_avals"]],
                                    "the @main signature of the StableHLO text")
            if msg:
                raise _JobError(msg)
        return self._build_exported(art, "stablehlo-text"), desc

    def _fields_from_text(self, text):
        from jax._src.interpreters import mlir
        from jax._src.lib.mlir import ir

        def conv(t):
            rt = ir.RankedTensorType(t)
            et = str(rt.element_type)
            return {"shape": [int(d) for d in rt.shape], "dtype": _mlir_elem_to_dtype(et)}

        last = None
        for candidate in (text, strip_mlir_locations(text)):
            try:
                with mlir.make_ir_context():
                    mod = ir.Module.parse(candidate)
                    main = None
                    for op in mod.body.operations:
                        try:
                            if ir.StringAttr(op.attributes["sym_name"]).value == "main":
                                main = op
                        except Exception:
                            continue
                    if main is None:
                        raise _RouteFailure("load", "the StableHLO text has no @main function")
                    ft = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value)
                    ins = [conv(t) for t in ft.inputs]
                    outs = [conv(t) for t in ft.results]
                    try:
                        poly = str(mod.operation.attributes["jax.uses_shape_polymorphism"]) == "true"
                    except Exception:
                        poly = False
                    try:
                        nparts = int(str(mod.operation.attributes["mhlo.num_partitions"]).split(":")[0])
                    except Exception:
                        nparts = 1
                break
            except _RouteFailure:
                raise
            except Exception as e:
                last = e
        else:
            raise _RouteFailure("load", "cannot derive the signature of @main: %s" % _exc_msg(last))
        import jax

        return {"fun_name": "main", "in_avals": ins, "out_avals": outs,
                "platforms": [jax.default_backend()], "nr_devices": nparts,
                "in_shardings_hlo": [None] * len(ins), "out_shardings_hlo": [None] * len(outs),
                "calling_convention_version": 9, "ordered_effects": [], "unordered_effects": [],
                "disabled_safety_checks": [], "module_kept_var_idx": list(range(len(ins))),
                "uses_global_constants": poly}

    # -- lowering / compiling ------------------------------------------------
    def lower_and_compile(self, exp, route, desc):
        import time

        import jax

        avals = [(tuple(a.shape), _dtype_name(a.dtype)) for a in exp.in_avals]
        msg = self.check_inputs(avals, "the %s route's Exported" % route)
        if msg:
            if self.fields:  # fields agreed with the inputs: the route produced something inconsistent
                raise _RouteFailure("load", "inconsistent Exported: " + msg)
            raise _JobError(msg)
        in_tree = exp.in_tree
        call = exp.call

        def replay(*flat):
            args, kwargs = jax.tree_util.tree_unflatten(in_tree, list(flat))
            return call(*args, **kwargs)

        safe = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in str(exp.fun_name))[:60]
        replay.__name__ = "replay_" + (safe or "fun")
        replay.__qualname__ = replay.__name__
        if not hasattr(self, "dev_inputs"):
            self.dev_inputs = [jax.device_put(a) for a in self.host_inputs]
            jax.block_until_ready(self.dev_inputs)
            self.host_inputs = None  # free host memory (inputs can be large)
        fn = jax.jit(replay)
        try:
            lowered = fn.lower(*self.dev_inputs)
        except Exception as e:
            raise _RouteFailure("lower", self._explain_module_failure(e, desc))
        self.prepare_kernels(lowered, exp)
        t0 = time.perf_counter()
        try:
            compiled = lowered.compile()
        except Exception as e:
            raise _RouteFailure("compile", "XLA compilation failed: %s" % _exc_msg(e))
        compile_s = time.perf_counter() - t0
        return lowered, compiled, compile_s

    def prepare_kernels(self, lowered, exp):
        """Make the jaxlib CPU kernels (LAPACK, BLAS) that the module calls usable in this process, or fail
        the route naming those this jaxlib lacks (XLA would only say so at the call, or not at all).

        jax registers jaxlib's kernels as custom-call targets when it is imported, but the LAPACK ones work
        only after ``jaxlib.cpu._lapack.initialize()`` (it takes their function pointers from scipy's
        LAPACK), which jax 0.4.30 .. 0.9 calls only while lowering a linalg op itself (``prepare_lapack_call``
        and the ``*_hlo`` builders), never in a replay: the call then dies by SIGSEGV.  jax >= 0.10 does it
        when it lowers the call of an Exported.  jaxlib 0.4.30 also registers its one typed-FFI kernel
        (``lapack_?potrf_ffi``) under the untyped custom-call API, where a typed-FFI call cannot find it.
        """
        import jax

        if jax.default_backend() != "cpu":
            return
        data = bytes(exp.mlir_module_serialized)
        if not any(p.encode() in data for p in _KERNEL_PREFIXES):  # cheap: bytecode keeps strings as they are
            return
        try:
            targets = _custom_call_targets(lowered.as_text())
        except Exception:
            import re

            targets = set(re.findall(r"(?:%s)[A-Za-z0-9_]+" % "|".join(_KERNEL_PREFIXES), data.decode("latin-1")))
        kernels = sorted(t for t in targets if t.startswith(_KERNEL_PREFIXES))
        if not kernels:
            return
        lapack = _jaxlib_lapack()
        try:
            provided = dict(lapack.registrations()) if lapack is not None else {}
        except Exception:
            provided = {}
        registered = _registered_targets()
        missing = [t for t in kernels if t not in provided and t not in registered]
        if missing:
            raise _RouteFailure("compile", _missing_kernels_message(missing, provided))
        done = self.__dict__.setdefault("_prepared_kernels", set())  # by an earlier route of this job
        new = [t for t in kernels if t not in done]
        done.update(kernels)
        if not new:
            return
        # An *_ffi kernel listed with a bare capsule is registered under the untyped API (jaxlib 0.4.30):
        # register it again as a typed-FFI handler, which is what the module's custom call looks up.
        for t in new:
            if t.endswith("_ffi") and t in provided and t in registered and not isinstance(registered[t], dict):
                try:
                    from jax._src.lib import xla_client

                    xla_client.register_custom_call_target(t, provided[t], platform="cpu", api_version=1)
                    self.notes.append("registered jaxlib's %s as a typed-FFI custom-call target (this jaxlib "
                                      "registers it only under the untyped API, where the module's typed-FFI "
                                      "call cannot find it)" % t)
                except Exception as e:
                    self.notes.append("could not register %s as a typed-FFI custom-call target: %s"
                                      % (t, _exc_msg(e)))
        init = getattr(lapack, "initialize", None)
        if init is None:
            return
        try:
            init()
        except Exception as e:
            done.difference_update(new)
            raise _RouteFailure("compile", "cannot initialize jaxlib's CPU LAPACK kernels, which the module's "
                                "custom calls %s need (calling them uninitialized would crash): %s"
                                % (", ".join(kernels), _exc_msg(e)))
        export_mod = sys.modules.get("jax._src.export._export")
        if not hasattr(export_mod, "_ensure_backends_initialized"):  # else jax's own lowering of the call did it
            self.notes.append("initialized jaxlib's CPU LAPACK kernels (jaxlib.cpu._lapack.initialize) for the "
                              "custom calls %s: this jax does so only when it lowers a linalg op itself, and "
                              "without it the call would crash" % ", ".join(new))

    def _explain_module_failure(self, e, desc):
        msg = _exc_msg(e)
        ver = desc.get("version") if desc else None
        info = self.result["stablehlo"].get("jaxlib") or {}
        cur = info.get("current")
        try:
            import jaxlib.version

            jl = jaxlib.version.__version__
        except Exception:
            jl = "?"
        if ver and cur and ("StableHLO" in msg or "deserialize" in msg.lower() or "VHLO" in msg
                            or "bytecode" in msg.lower() or "attribute code" in msg):
            if _version_tuple(ver) > _version_tuple(cur):
                return ("%s was written at StableHLO %s and jaxlib %s reads up to %s: %s"
                        % (desc["what"], ver, jl, cur, msg))
            return ("%s (StableHLO %s, within jaxlib %s's window [%s..%s]) failed to load: %s"
                    % (desc["what"], ver, jl, info.get("minimum"), cur, msg))
        return "lowering the call failed: %s" % msg

    # -- main flow -----------------------------------------------------------
    def run(self):
        res = self.result
        self.checkpoint("validate")
        self.validate()
        res["environment"] = _base_environment()
        self.end_phase()

        self.checkpoint("inputs")
        self.load_inputs()
        if self.fields and self.fields.get("in_avals") is not None:
            avals = [(tuple(a["shape"]), a["dtype"]) for a in self.fields["in_avals"]]
            msg = self.check_inputs(avals, "bundle fields in_avals")
            if msg:
                raise _JobError(msg)
        self.end_phase()

        self.checkpoint("import_jax")
        self.setup_jax()
        self.end_phase()

        routes = list(self.job.get("routes") or ROUTES)
        handlers = {
            "deserialize": self.route_deserialize,
            "rebuild": lambda: self.route_rebuild("mlir_module", "rebuild"),
            "rebuild-compat": lambda: self.route_rebuild("mlir_module_compat", "rebuild-compat"),
            "stablehlo-text": self.route_text,
        }
        loaded = None
        loaded_desc = None
        for route in routes:
            self.checkpoint("route:" + route)
            try:
                exp, desc = handlers[route]()
                lowered, compiled, compile_s = self.lower_and_compile(exp, route, desc)
                loaded = (route, exp, lowered, compiled, compile_s)
                loaded_desc = desc
                self.end_phase()
                break
            except _RouteFailure as rf:
                entry = {"route": route, "error": rf.message, "stage": rf.stage}
                if rf.stage == "skipped":
                    entry["skipped"] = True
                self.attempts.append(entry)
            self.end_phase()
        if loaded is None:
            res["status"] = STATUS_INCOMPATIBLE
            res["reason"] = self._incompatible_reason()
            return res
        route, exp, lowered, compiled, compile_s = loaded
        res["route"] = route
        ver = loaded_desc.get("version") if loaded_desc else None
        cur = (res["stablehlo"].get("jaxlib") or {}).get("current")
        if ver and cur and _version_tuple(ver) > _version_tuple(cur):
            self.notes.append("%s: %s declares StableHLO %s, newer than this jaxlib's %s, but every VHLO op and "
                              "attribute in it is known here, so it deserialized (VHLO versions ops whose "
                              "semantics change, so this is sound)" % (route, loaded_desc["what"], ver, cur))
        res["compile_s"] = compile_s
        res["function"] = {"fun_name": str(exp.fun_name), "nr_devices": int(exp.nr_devices),
                           "platforms": list(exp.platforms),
                           "calling_convention_version": int(exp.calling_convention_version)}

        if self.job.get("describe"):
            self.checkpoint("describe")
            res["description"] = self.describe(exp)
            self.end_phase()

        self.checkpoint("hlo_text")
        self.write_hlo(lowered, compiled)
        self.end_phase()

        self.checkpoint("execute")
        try:
            out = compiled(*self.dev_inputs)
            import jax

            jax.block_until_ready(out)
            self.write_outputs(out)
            del out
        except _JobError:
            raise
        except Exception as e:
            res["status"] = STATUS_ERROR
            res["reason"] = "execution failed after loading via route %r: %s" % (route, _exc_msg(e))
            return res
        self.end_phase()

        self.checkpoint("timing")
        timing = self.job.get("timing") or {}
        warmup = int(timing.get("warmup", 1))
        repeat = int(timing.get("repeat", 5))
        try:
            if self.control is not None:
                res["samples_ns"] = self.serve_timed_calls(compiled, warmup)
            else:
                res["samples_ns"] = self.time_calls(compiled, warmup, repeat)
        except Exception as e:
            res["status"] = STATUS_ERROR
            res["reason"] = "timed execution failed: %s" % _exc_msg(e)
            return res
        self.end_phase()

        if self.job.get("profile"):
            self.checkpoint("profile")
            try:
                self.profile(compiled)
            except Exception as e:
                res["profile"] = {"note": "profiling failed: %s" % _exc_msg(e)}
                self.notes.append("profiling failed: %s" % _exc_msg(e))
            self.end_phase()

        if self.job.get("dump"):
            d = res["artifacts"].get("xla_dump")
            if d and not (os.path.isdir(d) and os.listdir(d)):
                self.notes.append("XLA dump directory is empty (this backend/version ignored --xla_dump_to)")

        res["status"] = STATUS_OK
        failed = [a for a in self.attempts if not a.get("skipped")]
        reason = "replayed via route %r" % route
        if failed:
            reason += " after %s failed (%s)" % (", ".join(a["route"] for a in failed),
                                                 "; ".join("%s: %s" % (a["route"], _first_lines(a["error"], 300))
                                                           for a in failed))
        res["reason"] = reason
        return res

    def _incompatible_reason(self):
        import jax

        tried = [a for a in self.attempts if not a.get("skipped")]
        if not tried:
            return ("incompatible: no load route was possible (%s)"
                    % "; ".join("%s: %s" % (a["route"], a["error"]) for a in self.attempts))
        best = None
        for a in tried:  # furthest stage wins; ties go to the later (more targeted) route
            if best is None or _STAGE_RANK[a["stage"]] >= _STAGE_RANK[best["stage"]]:
                best = a
        others = [a for a in tried if a is not best]
        reason = "incompatible with jax %s: route %r failed at %s: %s" % (
            jax.__version__, best["route"], best["stage"], best["error"])
        if others:
            reason += " || other routes: " + "; ".join(
                "%s (%s): %s" % (a["route"], a["stage"], _first_lines(a["error"], 400)) for a in others)
        return reason

    def describe(self, exp):
        """What the host stores for a function it cannot deserialize itself (packing on another JAX)."""
        from jax._src.export import serialization

        adir = self.job["artifacts_dir"]

        def write(fname, data):
            p = os.path.join(adir, fname)
            with open(p, "wb") as fh:
                fh.write(data)
            return p

        desc = {"fields": exported_fields(exp), "in_tree": describe_tree(exp.in_tree),
                "out_tree": describe_tree(exp.out_tree),
                "serialization_version": getattr(serialization, "_SERIALIZATION_VERSION", None),
                "mlir_module": write("describe.mlir_module.bc", bytes(exp.mlir_module_serialized)),
                "stablehlo_text": write("describe.stablehlo.mlir", exp.mlir_module().encode("utf-8")),
                "mlir_module_compat": None}
        try:
            desc["mlir_module_compat"] = write("describe.mlir_module_compat.bc", serialize_compat_artifact(exp))
        except Exception as e:
            self.notes.append("describe: no compat artifact: %s" % _exc_msg(e))
        return desc

    def write_hlo(self, lowered, compiled):
        adir = self.job["artifacts_dir"]
        arts = self.result["artifacts"]

        def put(name, fname, fn):
            try:
                text = fn()
            except Exception as e:
                self.notes.append("could not produce %s: %s" % (name, _exc_msg(e)))
                return None
            p = os.path.join(adir, fname)
            with open(p, "w") as fh:
                fh.write(text)
            arts[name] = p
            return text

        put("stablehlo_lowered", "lowered.stablehlo.mlir", lambda: lowered.as_text())
        put("hlo_before", "hlo_before_optimizations.txt", lambda: lowered.as_text(dialect="hlo"))
        self.hlo_after = put("hlo_after", "hlo_after_optimizations.txt", lambda: compiled.as_text())

    def write_outputs(self, out):
        import jax
        import numpy as np

        leaves = jax.tree_util.tree_leaves(out)
        odir = self.job["outputs_dir"]
        outs = []
        for i, leaf in enumerate(leaves):
            a = np.asarray(leaf)
            a = np.ascontiguousarray(a) if a.ndim else a  # ascontiguousarray turns 0-d into 1-d
            p = os.path.join(odir, "out_%d.bin" % i)
            a.tofile(p)
            outs.append({"shape": [int(d) for d in a.shape], "dtype": a.dtype.name, "path": p})
        self.result["outputs"] = outs

    def time_calls(self, compiled, warmup, repeat):
        self.warm_up(compiled, warmup)
        return self.timed_calls(compiled, repeat)

    def warm_up(self, compiled, warmup):
        import time

        import jax

        took = []
        for _ in range(max(0, warmup)):
            t0 = time.perf_counter_ns()
            jax.block_until_ready(compiled(*self.dev_inputs))
            took.append(time.perf_counter_ns() - t0)
        took.sort()
        return took[len(took) // 2] if took else 0

    def serve_timed_calls(self, compiled, warmup):
        """Lockstep timing: timed calls only when the host asks (see the module docstring)."""
        self.control.send("ready %d" % self.warm_up(compiled, max(1, warmup)))
        samples = []
        while True:
            command = self.control.receive()
            if command is None or command == "finish":
                return samples
            verb, _, count = command.partition(" ")
            if verb != "time" or not count.isdigit():
                raise _JobError("unknown lockstep command %r" % command[:100])
            batch = self.timed_calls(compiled, int(count))
            samples.extend(batch)
            self.control.send(" ".join(str(t) for t in batch))

    def timed_calls(self, compiled, repeat):
        import time

        import jax

        args = self.dev_inputs
        samples = []
        pc = time.perf_counter_ns
        bur = jax.block_until_ready
        for _ in range(max(0, repeat)):
            t0 = pc()
            r = compiled(*args)
            bur(r)
            t1 = pc()
            samples.append(t1 - t0)
            del r
        return samples

    # -- profiling -------------------------------------------------------------
    def profile(self, compiled):
        import glob
        import time

        import jax

        iters = max(1, int(self.job.get("profile_iters", 3) or 3))
        pdir = os.path.join(self.job["artifacts_dir"], "profile")
        os.makedirs(pdir, exist_ok=True)
        args = self.dev_inputs
        jax.block_until_ready(compiled(*args))
        t0 = time.perf_counter_ns()
        try:
            ctx = jax.profiler.trace(pdir, create_perfetto_trace=True)
        except TypeError:
            ctx = jax.profiler.trace(pdir)
        with ctx:
            for _ in range(iters):
                jax.block_until_ready(compiled(*args))
        wall = time.perf_counter_ns() - t0
        arts = self.result["artifacts"]
        arts["profile_dir"] = pdir
        traces = sorted(glob.glob(os.path.join(pdir, "**", "perfetto_trace.json.gz"), recursive=True),
                        key=os.path.getmtime)
        info = {"iterations": iters, "traced_wall_ns": wall, "source": None, "module": None, "note": None}
        self.result["profile"] = info
        if not traces:
            others = sorted(glob.glob(os.path.join(pdir, "**", "*.trace.json.gz"), recursive=True),
                            key=os.path.getmtime)
            if others:
                arts["profile_trace"] = others[-1]
                traces = others
            else:
                info["note"] = "the profiler wrote no trace file; per-op table empty"
                return
        else:
            arts["profile_trace"] = traces[-1]
        per_op, note, module = _per_op_from_trace(traces[-1], getattr(self, "hlo_after", None) or "", iters)
        self.result["per_op"] = per_op
        info["source"] = "trace events with args.hlo_op (%s)" % os.path.basename(traces[-1])
        info["module"] = module
        info["note"] = note


def _mlir_elem_to_dtype(et):
    table = {"f16": "float16", "f32": "float32", "f64": "float64", "bf16": "bfloat16",
             "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
             "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64",
             "i4": "int4", "ui4": "uint4", "i2": "int2", "ui2": "uint2",
             "complex<f32>": "complex64", "complex<f64>": "complex128",
             "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2", "f8E4M3FNUZ": "float8_e4m3fnuz",
             "f8E5M2FNUZ": "float8_e5m2fnuz", "f8E4M3B11FNUZ": "float8_e4m3b11fnuz",
             "f8E4M3": "float8_e4m3", "f8E3M4": "float8_e3m4", "f8E8M0FNU": "float8_e8m0fnu",
             "f4E2M1FN": "float4_e2m1fn", "f6E2M3FN": "float6_e2m3fn", "f6E3M2FN": "float6_e3m2fn"}
    if et in table:
        return table[et]
    raise ValueError("unsupported MLIR element type %r" % et)


_HLO_INSTR = None


def _parse_hlo_instructions(hlo_text):
    """name -> {"kind", "op_name"} for every instruction in optimized HLO text."""
    import re

    global _HLO_INSTR
    if _HLO_INSTR is None:
        _HLO_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(?:.*?\s)??([a-z][a-z0-9\-]*)\(")
    out = {}
    for line in hlo_text.splitlines():
        m = _HLO_INSTR.match(line)
        if not m:
            continue
        name, opcode = m.group(1), m.group(2)
        kind = opcode
        if opcode == "fusion":
            km = re.search(r"\bkind=(k\w+)", line)
            kind = "fusion(%s" % (km.group(1) if km else "?")
            fk = re.search(r'"fusion_config"\s*:\s*\{[^}]*"kind"\s*:\s*"([^"]+)"', line)
            if fk:
                kind += ":" + fk.group(1)
            kind += ")"
        elif opcode == "custom-call":
            tm = re.search(r'custom_call_target="([^"]+)"', line)
            if tm:
                kind = "custom-call(%s)" % tm.group(1)
        om = re.search(r'op_name="([^"]*)"', line)
        out[name] = {"kind": kind, "op_name": om.group(1) if om else None}
    return out


def _per_op_from_trace(path, hlo_text, iters):
    """Reduce a chrome/perfetto trace json(.gz) to a per-HLO-op table."""
    import gzip
    import json

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as fh:
        tr = json.load(fh)
    events = tr.get("traceEvents", []) if isinstance(tr, dict) else tr
    module = None
    for line in hlo_text.splitlines():
        if line.startswith("HloModule "):
            module = line.split()[1].rstrip(",")
            break
    instrs = _parse_hlo_instructions(hlo_text)
    ops = [e for e in events if isinstance(e, dict) and e.get("ph") == "X"
           and isinstance(e.get("args"), dict) and e["args"].get("hlo_op")]
    if not ops:
        return [], ("this jax/jaxlib's profiler emitted no per-HLO-op events (no 'hlo_op' trace args) on "
                    "this backend; per-op table left empty"), module
    # On accelerators the same op can appear on host and device tracks: prefer device time.
    pnames = {}
    for e in events:
        if isinstance(e, dict) and e.get("ph") == "M" and e.get("name") == "process_name":
            pnames[e.get("pid")] = str((e.get("args") or {}).get("name", ""))
    dev = [e for e in ops if pnames.get(e.get("pid"), "").startswith("/device:")]
    if dev:
        ops = dev
    mods = {e["args"].get("hlo_module") for e in ops}
    note = None
    if module and module in mods:
        ops = [e for e in ops if e["args"].get("hlo_module") == module]
    elif module:
        note = "no op events tagged with module %r (found %s); used all op events" % (module, sorted(
            str(m) for m in mods))
    # Sum durations per op; nested/overlapping events of the same op on the same thread count once.
    by_track = {}
    for e in ops:
        key = (str(e["args"]["hlo_op"]), e.get("pid"), e.get("tid"))
        by_track.setdefault(key, []).append((float(e.get("ts") or 0.0), float(e.get("dur") or 0.0)))
    agg = {}
    for (name, _pid, _tid), spans in by_track.items():
        spans.sort()
        total, end = 0.0, None
        for ts, dur in spans:
            te = ts + dur
            if end is None or ts >= end:
                total += dur
                end = te
            elif te > end:
                total += te - end
                end = te
        rec = agg.setdefault(name, [0.0, 0])
        rec[0] += total
        rec[1] += len(spans)
    rows = []
    for name, (dur_us, cnt) in agg.items():
        meta = instrs.get(name, {})
        rows.append({"name": name, "kind": meta.get("kind", "unknown"),
                     "time_ns": dur_us * 1000.0 / iters,
                     "count": max(1, int(round(float(cnt) / iters))), "total_count": cnt,
                     "op_name": meta.get("op_name")})
    rows.sort(key=lambda r: -r["time_ns"])
    extra = ("op times are thunk/kernel durations averaged over %d traced iterations; on CPU independent "
             "thunks may run concurrently, so their sum can exceed the wall time" % iters)
    note = extra if note is None else note + "; " + extra
    return rows, note, module


# ---------------------------------------------------------------------------
# entry points
# ---------------------------------------------------------------------------


def run_job(job, result_path=None, control=None):
    """Run a job dict and return the result dict (never raises).

    Prefer the CLI (`python worker.py JOB RESULT`) in a fresh process: this
    imports jax and may set XLA_FLAGS for dumps, which only works before jax is
    first imported.
    """
    import traceback

    w = _Worker(job, result_path, control)
    try:
        res = w.run()
    except _JobError as e:
        res = w.result
        res["status"] = STATUS_ERROR
        res["reason"] = str(e)
    except _RouteFailure as e:  # should not escape, but be safe
        res = w.result
        res["status"] = STATUS_ERROR
        res["reason"] = "%s: %s" % (e.stage, e.message)
    except BaseException as e:  # the result must always be written
        res = w.result
        res["status"] = STATUS_ERROR
        res["reason"] = "internal worker error during phase %r: %s" % (w.phase, _exc_msg(e))
        res["detail"] = traceback.format_exc()[-8000:]
        if isinstance(e, KeyboardInterrupt):
            res["reason"] = "interrupted during phase %r" % w.phase
    w.end_phase()
    if not res.get("environment", {}).get("python"):
        try:
            env = _base_environment()
            env.update(res.get("environment") or {})
            res["environment"] = env
        except Exception:
            pass
    return res


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    if len(argv) != 2:
        sys.stderr.write("usage: python worker.py JOB.msgpack RESULT.msgpack\n")
        return 2
    job_path, result_path = argv
    try:
        import msgpack

        with open(job_path, "rb") as fh:
            job = msgpack.unpackb(fh.read(), raw=False, strict_map_key=False)
    except BaseException as e:
        res = {"protocol": PROTOCOL_VERSION, "status": STATUS_ERROR,
               "reason": "cannot read job file %s: %s" % (job_path, _exc_msg(e)), "route": None,
               "attempts": [], "notes": [], "environment": {}, "compile_s": None, "samples_ns": [],
               "outputs": [], "artifacts": {}, "per_op": []}
        try:
            _write_msgpack(result_path, res)
        except BaseException as e2:
            sys.stderr.write("worker: cannot write result %s: %s\n" % (result_path, e2))
            return 1
        return 0
    lockstep = isinstance(job, dict) and isinstance(job.get("timing"), dict) and bool(job["timing"].get("lockstep"))
    res = run_job(job, result_path, _Control() if lockstep else None)
    try:
        _write_msgpack(result_path, res)
    except BaseException as e:
        sys.stderr.write("worker: cannot write result %s: %s\n" % (result_path, e))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
