"""What a JAX release says of itself, printed as one JSON object: every XLA flag with its type and default, every
JAX configuration option with its value, and the versions and revisions it records; with `--setting KIND NAME VALUE`,
what it says when one flag or option is set (a workaround's deprecation warning, or its refusal). Run by path in a release's
environment with a clean environment (no XLA_FLAGS, no JAX_* variables), so the values are the defaults; imports only
the standard library and jax (envs/release_facts.py runs it and caches what it prints).

XLA flags: `XLA_FLAGS=--help` prints them, but through a log message that absl cuts at ~15,000 bytes (0.8.0 prints
~80 of its ~250 flags), so it is no complete source. Every flag is a field of the DebugOptions message (the flag is
`--` and the field's name), and protobuf's generated code embeds each .proto file's descriptor, serialized, in the
jaxlib library that links it: the fields' names and types come from the descriptor of `xla/xla.proto` found there,
the defaults from a CompileOptions that jaxlib fills from its flags (`executable_build_options.debug_options`,
serialized; proto3 leaves a field at its zero value out). The wire format is decoded by hand (a few lines): no
protobuf package is guaranteed beside a release.

libtpu (the TPU compiler, a package beside jax on a TPU) takes its own flags through LIBTPU_INIT_ARGS, but does not
tell their defaults: `LIBTPU_INIT_ARGS=--helpfull` (or --help=SUBSTRING) prints "No flags matched" (libtpu 0.0.42.1 on
a TPU v5e, 2026-12-05), and loading it opens the chip. Its flags' names are in its library's string table
(NUL-separated, like every C string there): they are read from the file, without loading it.
"""

import glob
import importlib
import json
import mmap
import os
import re
import sys

_TYPES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 8: "bool", 9: "string", 11: "message",
          12: "bytes", 13: "uint32", 14: "enum", 17: "sint32", 18: "sint64"}


def _varint(b, i):
    result = shift = 0
    while True:
        c = b[i]
        i += 1
        result |= (c & 0x7F) << shift
        shift += 7
        if c < 0x80:
            return result, i


def _fields(b, start=0):
    """[(number, wire type, value)] of the message at b[start:], until the bytes stop being one (an embedded
    descriptor is followed by other data)."""
    out, i = [], start
    while i < len(b):
        try:
            tag, j = _varint(b, i)
            number, wire = tag >> 3, tag & 7
            if number == 0 or wire not in (0, 1, 2, 5):
                break
            if wire == 0:
                value, j = _varint(b, j)
            elif wire == 1:
                value, j = b[j:j + 8], j + 8
            elif wire == 5:
                value, j = b[j:j + 4], j + 4
            else:
                n, j = _varint(b, j)
                if j + n > len(b):
                    break
                value, j = b[j:j + n], j + n
        except IndexError:
            break
        out.append((number, wire, value))
        i = j
    return out


def _messages(data, path_pattern, wanted):
    """{message name: its DescriptorProto fields} of the first serialized file descriptor whose name matches
    `path_pattern` (its name field, with the right length byte) and that defines the message `wanted`."""
    for found in re.finditer(b"\n([\x05-\x7f])(" + path_pattern + b")", data):
        if found.group(1)[0] != len(found.group(2)):
            continue
        out = {}
        for number, _, value in _fields(data, found.start()):
            if number == 4:  # FileDescriptorProto.message_type
                message = _fields(value)
                names = [v for n, _, v in message if n == 1]
                if names:
                    out[names[0].decode("utf-8", "replace")] = message
        if wanted in out:
            return out
    return {}


def _field_map(message):
    """{number: (name, type, repeated, type name)} of a DescriptorProto."""
    out = {}
    for number, _, value in message:
        if number == 2:
            f = {n: v for n, _, v in _fields(value)}
            out[f[3]] = (f[1].decode(), _TYPES.get(f[5], str(f[5])), f.get(4) == 3, f.get(6, b"").decode())
    return out


def _enums(message):
    """{enum name: {number: value name}} nested in a DescriptorProto."""
    out = {}
    for number, _, value in message:
        if number == 4:
            enum = _fields(value)
            name = next(v.decode() for n, _, v in enum if n == 1)
            values = {}
            for n, _, v in enum:
                if n == 2:
                    entry = {k: x for k, _, x in _fields(v)}
                    values[entry.get(2, 0)] = entry[1].decode()
            out[name] = values
    return out


def _library():
    import jaxlib

    folder = os.path.dirname(jaxlib.__file__)
    candidates = sorted(glob.glob(os.path.join(folder, "*.so")) + glob.glob(os.path.join(folder, "*.pyd")),
                        key=os.path.getsize, reverse=True)
    for path in candidates:
        with open(path, "rb") as f:
            data = f.read()
        if b"\n\rxla/xla.proto" in data:
            return data
    return None


def _packed(b):
    out, i = [], 0
    while i < len(b):
        value, i = _varint(b, i)
        out.append(value)
    return out


def _scalar(kind, wire, value, enum_names):
    if kind == "bool":
        return bool(value)
    if kind == "string":
        return value.decode("utf-8", "replace")
    if kind == "enum":
        return enum_names.get(value, value)
    if kind in ("float", "double"):
        import struct

        return struct.unpack("<f" if wire == 5 else "<d", value)[0]
    if kind in ("int32", "int64") and value >= 1 << 63:
        return value - (1 << 64)
    if kind == "message":
        return "(message)"
    return value


def _zero(kind, repeated, enum_names):
    if repeated:
        return []
    return {"bool": False, "string": "", "enum": enum_names.get(0, 0), "message": None,
            "float": 0.0, "double": 0.0}.get(kind, 0)


def xla_flags():
    """{flag name: {"type", "default"}} for every DebugOptions field, or None when the descriptor is not found."""
    data = _library()
    if data is None:
        return None
    xla = _messages(data, rb"xla/xla\.proto", "DebugOptions")
    options = _messages(data, rb"[a-z_/]*compile_options\.proto", "ExecutableBuildOptionsProto")
    if "DebugOptions" not in xla or "ExecutableBuildOptionsProto" not in options:
        return None
    fields = _field_map(xla["DebugOptions"])
    enums = _enums(xla["DebugOptions"])
    build = {name: number for number, (name, *_rest) in _field_map(options["ExecutableBuildOptionsProto"]).items()}
    values = _values(_default_debug_options(build["debug_options"]), fields, enums)
    out = {}
    for name, kind, repeated, type_name in sorted(fields.values()):
        default = values.get(name, _zero(kind, repeated, enums.get(type_name.rsplit(".", 1)[-1], {})))
        out[name] = {"type": ("repeated " if repeated else "") + kind, "default": default}
    return out


def _default_debug_options(debug_field):
    """The serialized DebugOptions jaxlib fills from its flags (their defaults: no XLA_FLAGS is set)."""
    from jax._src.lib import xla_client

    compile_options = xla_client.CompileOptions()
    _ = compile_options.executable_build_options.debug_options  # filled from the flags on first use
    top = _fields(compile_options.SerializeAsString())
    build_bytes = next((v for n, _, v in top if n == 3), b"")  # CompileOptionsProto.executable_build_options
    return next((v for n, _, v in _fields(build_bytes) if n == debug_field), b"")


def _values(debug, fields, enums):
    """{flag name: value} of the fields a serialized DebugOptions sets (the others are at their zero value)."""
    values: dict = {}
    for number, wire, value in _fields(debug):
        if number not in fields:
            continue
        name, kind, repeated, type_name = fields[number]
        names = enums.get(type_name.rsplit(".", 1)[-1], {})
        if repeated and wire == 2 and kind not in ("string", "bytes", "message"):  # packed: varints one after another
            values.setdefault(name, []).extend(_scalar(kind, 0, v, names) for v in _packed(value))
        elif repeated:
            values.setdefault(name, []).append(_scalar(kind, wire, value, names))
        else:
            values[name] = _scalar(kind, wire, value, names)
    return values


def jax_options():
    """{option: value} of jax.config (its defaults here: no JAX_* variables are set)."""
    import jax

    out = {}
    for name, value in sorted(jax.config.values.items()):
        out[name] = value if isinstance(value, (bool, int, float, str)) or value is None else repr(value)
    return out


def revisions():
    import jax
    import jaxlib

    out = {"jax": jax.__version__, "jaxlib": getattr(jaxlib, "__version__", None),
           "python": sys.version.split()[0]}
    for module, key in (("jax.version", "jax_git"), ("jaxlib.version", "jaxlib_git")):
        try:
            mod = importlib.import_module(module)
            found = getattr(mod, "_git_hash", None) or getattr(mod, "__git_hash__", None)
            out[key] = found.decode("ascii", "replace") if isinstance(found, bytes) else found
        except Exception:  # noqa: BLE001 - an old release without the module: left out
            out[key] = None
    try:
        from jax._src.lib import version_str
        out["jaxlib_version_str"] = version_str
    except Exception:  # noqa: BLE001
        pass
    return out


# a libtpu flag's name as its library stores it: a C string between NULs (lookarounds: neighbours share a NUL)
_LIBTPU_FLAG = re.compile(rb"(?<=\x00)(xla_tpu_[a-z0-9_]{2,120})(?=\x00)")


def libtpu_facts():
    """{"version", "flags": [names], "source"} of the libtpu this jax would load (the `libtpu` package on its path),
    or None where there is none (a CPU or GPU environment). The names only: libtpu tells no defaults."""
    import importlib.util

    spec = importlib.util.find_spec("libtpu")
    if spec is None or not spec.origin:
        return None
    path = os.path.join(os.path.dirname(spec.origin), "libtpu.so")
    version = None
    for dist in ("libtpu", "libtpu-nightly"):
        try:
            version = importlib.import_module("importlib.metadata").version(dist)
            break
        except Exception:  # noqa: BLE001 - not this distribution's name
            continue
    try:
        with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
            names = sorted({m.decode("ascii") for m in _LIBTPU_FLAG.findall(data)})
    except (OSError, ValueError):
        return {"version": version, "flags": None, "source": path}
    return {"version": version, "flags": names, "source": path}


def setting(kind, name, value):
    """What the release does when a workaround's setting is applied as a user pastes it: a JAX option ("option")
    through jax.config.update, then one compile; an XLA flag ("flag", in XLA_FLAGS, set by the caller) by that
    compile, XLA's own words going to stderr (the caller reads them there, and its abort on a flag it does not
    know). {"accepted", "warnings": [each warning raised meanwhile], "error": the refusal, as raised}."""
    import warnings

    import jax

    out = {"accepted": True, "warnings": [], "error": None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if kind == "option":
                jax.config.update(name, value)
            jax.jit(lambda x: x + 1)(jax.numpy.ones(2)).block_until_ready()
        except Exception as e:  # noqa: BLE001 - the refusal is the answer
            out.update(accepted=False, error=f"{type(e).__name__}: {e}")
    out["warnings"] = [f"{w.category.__name__}: {w.message}" for w in caught]
    return out


def main():
    if sys.argv[1:2] == ["--setting"]:  # --setting KIND NAME VALUE_AS_JSON
        kind, name, value = sys.argv[2:5]
        print(json.dumps(setting(kind, name, json.loads(value)), sort_keys=True))
        return
    flags = xla_flags()
    print(json.dumps({"probe": 1, "revisions": revisions(), "xla_flags": flags, "jax_options": jax_options(),
                      "libtpu": libtpu_facts()}, sort_keys=True))


if __name__ == "__main__":
    main()
