"""jaxlib's CPU kernels (LAPACK, BLAS) that an exported module calls as custom calls."""
from __future__ import annotations

KERNEL_PREFIXES = ("lapack_", "blas_")


def custom_call_targets(text):
    """The custom-call targets of an MLIR module's text (pretty or generic form)."""
    import re

    found = set()
    for m in re.finditer(r'custom_call\s*@(?:"([^"]+)"|([\w.$-]+))|call_target_name\s*=\s*"([^"]+)"', text):
        found.add(m.group(1) or m.group(2) or m.group(3))
    return found


def jaxlib_lapack():
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


def registered_targets():
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


def missing_kernels_message(missing, provided):
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
