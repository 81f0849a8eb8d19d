"""Synthetic input data: counter-based splitmix64 in pure numpy, the same bits on every release."""
from __future__ import annotations

import os

from .dtypes import np_dtype

DISTRIBUTIONS = ("normal", "uniform", "randint", "zeros", "ones")


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


def synthetic_spec(dtype, seed):
    """The default synthetic spec of a leaf (host and worker share it): standard normal floats, small non-negative
    integers, fair booleans."""
    if dtype == "bool":
        return {"distribution": "randint", "seed": seed, "low": 0, "high": 2}
    if dtype.startswith(("int", "uint")):
        return {"distribution": "randint", "seed": seed, "low": 0, "high": 16}
    return {"distribution": "normal", "seed": seed}
