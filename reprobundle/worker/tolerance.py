"""Output tolerances by dtype: the one definition, used by the host's output check (analysis/verdict.py) and by a
zip that replays itself (standalone.py). Why they scale with the leaf's magnitude: see analysis/verdict.py."""
from __future__ import annotations

import math
import re

# (rtol, atol) by dtype; integers and booleans must match exactly.
TOLERANCES = {
    "float64": (1e-10, 1e-12),
    "complex128": (1e-10, 1e-12),
    "float32": (1e-4, 1e-5),
    "complex64": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}
FP8_TOLERANCE = (0.25, 0.1)
# Every element may also differ by this many ulps of the leaf's largest finite |reference| (reassociation errs in
# proportion to the terms summed); see analysis/verdict.py for the reasoning.
SCALED_ULPS = {"float64": 4096, "complex128": 4096, "float32": 4096, "complex64": 4096, "float16": 16, "bfloat16": 4}
MANTISSA_BITS = {"float64": 52, "complex128": 52, "float32": 23, "complex64": 23, "float16": 10, "bfloat16": 7}
NARROW_ULPS = 1


def tolerance_for(dtype_name):
    if dtype_name in TOLERANCES:
        return TOLERANCES[dtype_name]
    if dtype_name.startswith(("float8", "float4", "float6")):
        return FP8_TOLERANCE
    return (0.0, 0.0)


def scaled_atol(dtype_name, scale):
    bits = MANTISSA_BITS.get(dtype_name)
    if bits is None:
        m = re.match(r"float\d+_e\d+m(\d+)", dtype_name)
        bits = int(m.group(1)) if m else None
    if bits is None or not scale > 0 or not math.isfinite(scale):
        return 0.0
    return SCALED_ULPS.get(dtype_name, NARROW_ULPS) * 2.0 ** (math.floor(math.log2(scale)) - bits)
