"""Reading the header of a serialized jax.export flatbuffer without jax (which release wrote it, how)."""
from __future__ import annotations


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
