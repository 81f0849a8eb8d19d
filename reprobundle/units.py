"""Human units for sizes and durations: one definition for every layer."""

from __future__ import annotations


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def human_ns(ns: float) -> str:
    if ns != ns:  # nan
        return "-"
    if ns >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if ns >= 1e6:
        return f"{ns / 1e6:.3f} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.1f} us"
    return f"{ns:.0f} ns"


_DURATION_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration(text: str) -> float:
    """'90', '90s', '30m', '6h', '2d' -> seconds (finite, >= 0); ValueError otherwise."""
    import math
    import re

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*(s|m|min|h|d)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"not a duration: {str(text)[:40]!r}")
    seconds = float(m.group(1)) * _DURATION_UNITS[(m.group(2) or "").lower()]
    if not math.isfinite(seconds):
        raise ValueError(f"not a duration: {str(text)[:40]!r}")
    return seconds


def human_duration(seconds: float) -> str:
    """3600 -> '1 h', 90 -> '90 s', 86400 -> '1 d' (the largest unit that divides it, else seconds)."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g} {unit}"
    return f"{seconds:g} s"


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
               "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def parse_size(text: str) -> int:
    """'1048576', '512K', '100M', '2G', '2GiB' -> bytes (binary units); ValueError otherwise."""
    import re

    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([a-z]*)\s*", str(text), re.IGNORECASE)
    if not m or m.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(f"not a size: {str(text)[:40]!r}")
    return int(float(m.group(1)) * _SIZE_UNITS[m.group(2).lower()])
