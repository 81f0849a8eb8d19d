"""StableHLO portable artifacts: their versions, re-serialization at an older version, text round trips."""
from __future__ import annotations

from .protocol import first_lines


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


def version_tuple(v):
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
        if not line.lstrip().startswith("#loc"):
            out_lines.append(_strip_line_locations(line))
    return "\n".join(out_lines) + "\n"


def _strip_line_locations(line):
    """One line without its ``loc(...)`` and ``#locN`` references (strings kept as they are)."""
    res = []
    i = 0
    n = len(line)
    while i < n:
        ch = line[i]
        if ch == '"':
            j = _string_end(line, i)
            res.append(line[i:j + 1])
            i = j + 1
        elif line.startswith("loc(", i) and (i == 0 or not (line[i - 1].isalnum() or line[i - 1] in "_.#")):
            while res and res[-1].endswith(" "):
                res[-1] = res[-1][:-1]
            i = _skip_balanced(line, i + 3)
        elif line.startswith("#loc", i):  # a reference to a location alias
            i = _alias_end(line, i + 4)
        else:
            res.append(ch)
            i += 1
    return "".join(res)


def _string_end(line, i):
    """line[i] == '"': the index of the closing quote (len(line) when there is none)."""
    j = i + 1
    n = len(line)
    while j < n and line[j] != '"':
        if line[j] == "\\":
            j += 1
        j += 1
    return j


def _alias_end(line, j):
    while j < len(line) and (line[j].isalnum() or line[j] == "_"):
        j += 1
    return j


def _mlir_ext():
    """The jaxlib `mlir` extension module (serialize/deserialize_portable_artifact)."""
    try:
        from jax._src.lib import _jax  # jaxlib >= 0.6

        return _jax.mlir
    except ImportError:
        from jax._src.lib import xla_client

        return xla_client._xla.mlir


def stablehlo_versions():
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


def artifact_to_text(data):
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


def text_to_artifact(text, target):
    """MLIR text -> portable artifact at StableHLO version `target`."""
    errors = []
    m = _mlir_ext()
    for candidate in (text, strip_mlir_locations(text)):
        try:
            return bytes(m.serialize_portable_artifact(candidate, str(target)))
        except Exception as e:
            errors.append("%s: %s" % (type(e).__name__, first_lines(str(e))))
        try:
            from jax._src.interpreters import mlir
            from jax._src.lib.mlir import ir
            from jax._src.lib.mlir.dialects import hlo

            with mlir.make_ir_context():
                mod = ir.Module.parse(candidate)
                return bytes(hlo.serialize_portable_artifact(mod, str(target)))
        except Exception as e:
            errors.append("%s: %s" % (type(e).__name__, first_lines(str(e))))
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
        text = artifact_to_text(exported)
    elif isinstance(exported, str):
        text = exported
    else:
        text = artifact_to_text(exported.mlir_module_serialized)
    if target_version is not None:
        return text_to_artifact(text, target_version)
    info = stablehlo_versions()
    targets = []
    for k in ("minimum", "week_12", "week_4", "current"):
        if k in info and info[k] not in targets:
            targets.append(info[k])
    errors = []
    for t in targets:
        try:
            return text_to_artifact(text, t)
        except Exception as e:
            errors.append("%s: %s" % (t, e))
    raise RuntimeError("no StableHLO target version worked: " + "; ".join(errors))
