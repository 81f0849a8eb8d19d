"""A msgpack reader in pure Python, for a bundle zip that replays itself where msgpack is not installed
(standalone.py: `python NAME.zip` with only jax and numpy). It reads what reprobundle writes: nil, booleans,
integers, floats, str, bin, arrays and maps (an ext type is refused). The msgpack package is used where present.
"""
from __future__ import annotations

import struct


class MsgpackError(ValueError):
    """Bytes that are not the msgpack reprobundle writes."""


_FIXED = {0xc0: None, 0xc2: False, 0xc3: True}
# format byte -> (struct format of the value, size)
_NUMBERS = {0xca: (">f", 4), 0xcb: (">d", 8), 0xcc: (">B", 1), 0xcd: (">H", 2), 0xce: (">I", 4), 0xcf: (">Q", 8),
            0xd0: (">b", 1), 0xd1: (">h", 2), 0xd2: (">i", 4), 0xd3: (">q", 8)}
# format byte -> (kind, struct format of the length, its size)
_SIZED = {0xc4: ("bin", ">B", 1), 0xc5: ("bin", ">H", 2), 0xc6: ("bin", ">I", 4),
          0xd9: ("str", ">B", 1), 0xda: ("str", ">H", 2), 0xdb: ("str", ">I", 4),
          0xdc: ("array", ">H", 2), 0xdd: ("array", ">I", 4), 0xde: ("map", ">H", 2), 0xdf: ("map", ">I", 4)}


def unpackb(data):
    """The value msgpack `data` holds (bytes for bin, str for str), as msgpack.unpackb(raw=False) gives it."""
    value, end = _read(memoryview(data), 0, 0)
    if end != len(data):
        raise MsgpackError("%d bytes after the value" % (len(data) - end))
    return value


def _take(data, at, n):
    if at + n > len(data):
        raise MsgpackError("truncated at byte %d" % at)
    return data[at:at + n], at + n


def _read(data, at, depth):
    if depth > 200:
        raise MsgpackError("nested too deep")
    head, at = _take(data, at, 1)
    b = head[0]
    if b <= 0x7f:
        return b, at
    if b >= 0xe0:
        return b - 0x100, at
    if 0xa0 <= b <= 0xbf:
        return _sized(data, at, "str", b & 0x1f, depth)
    if 0x90 <= b <= 0x9f:
        return _sized(data, at, "array", b & 0x0f, depth)
    if 0x80 <= b <= 0x8f:
        return _sized(data, at, "map", b & 0x0f, depth)
    if b in _FIXED:
        return _FIXED[b], at
    if b in _NUMBERS:
        fmt, size = _NUMBERS[b]
        raw, at = _take(data, at, size)
        return struct.unpack(fmt, raw)[0], at
    if b in _SIZED:
        kind, fmt, size = _SIZED[b]
        raw, at = _take(data, at, size)
        return _sized(data, at, kind, struct.unpack(fmt, raw)[0], depth)
    raise MsgpackError("unsupported msgpack type 0x%02x at byte %d" % (b, at - 1))


def _sized(data, at, kind, n, depth):
    if kind in ("str", "bin"):
        raw, at = _take(data, at, n)
        return (bytes(raw).decode("utf-8") if kind == "str" else bytes(raw)), at
    if kind == "array":
        items = []
        for _ in range(n):
            item, at = _read(data, at, depth + 1)
            items.append(item)
        return items, at
    out = {}
    for _ in range(n):
        key, at = _read(data, at, depth + 1)
        value, at = _read(data, at, depth + 1)
        try:
            out[key if not isinstance(key, list) else tuple(key)] = value
        except TypeError:  # a map or a list of lists as a key: no manifest has one
            raise MsgpackError("an unhashable map key at byte %d" % at) from None
    return out, at
