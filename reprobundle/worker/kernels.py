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


# ------------------------------------------------------------------------------------ kernel signatures
# A kernel keeps its name across releases while what it takes changes (jaxlib 0.5's lapack_strsm_ffi takes the
# scalar alpha as a third operand; 0.9.2's does not: "Wrong number of arguments: expected 2 but got 3" at the
# call). A release's own lowering of the op is what its kernel takes: the worker lowers a small call of the same
# op (the float32 or complex64 variant: every dtype of a kernel takes the same operands) and compares the operands
# the module passes with those.

_KERNEL_RE = r"^(lapack|blas)_([sdcz])([a-z]+?)(_ffi)?$"


def _probe(family):
    """(function, arguments) whose lowering on this release calls the kernel family, or None."""
    import jax
    import numpy as np

    lin = jax.lax.linalg
    complex_only = family in ("ungqr", "heevd", "hetrd")
    dt = np.complex64 if complex_only else np.float32
    a = np.eye(4, dtype=dt) * 2
    probes = {
        "trsm": (lambda a, b: lin.triangular_solve(a, b, left_side=True, lower=True), (a, np.ones((4, 2), dt))),
        "potrf": (lambda a: lin.cholesky(a), (a,)),
        "getrf": (lambda a: lin.lu(a), (a,)),
        "geqrf": (lambda a: lin.qr(a), (a,)),
        "orgqr": (lambda a: lin.qr(a), (a,)),
        "ungqr": (lambda a: lin.qr(a), (a,)),
        "syevd": (lambda a: lin.eigh(a), (a,)),
        "heevd": (lambda a: lin.eigh(a), (a,)),
        "gesdd": (lambda a: lin.svd(a, full_matrices=False), (a,)),
        "geev": (lambda a: lin.eig(a, compute_left_eigenvectors=False), (a,)),
        "gehrd": (lambda a: lin.hessenberg(a), (a,)),
        "sytrd": (lambda a: lin.tridiagonal(a), (a,)),
        "hetrd": (lambda a: lin.tridiagonal(a), (a,)),
    }
    return probes.get(family)


def operand_counts(text, target):
    """How many operands each custom call of `target` in an MLIR module's (pretty) text passes."""
    import re

    counts = set()
    for m in re.finditer(r'custom_call\s*@"?%s"?\s*\(([^)]*)\)' % re.escape(target), text):
        inner = m.group(1).strip()
        counts.add(len(inner.split(",")) if inner else 0)
    return counts


def signature_mismatches(module_text, kernels):
    """[(kernel, operand counts the module passes, counts this release's kernel takes)] for each kernel of `kernels`
    (present in this jaxlib) whose calls in the module pass another number of operands than the release's own
    lowering of that op does. Kernels without a probe, or whose probe calls another kernel name, are not judged."""
    import re

    import jax

    found = []
    for kernel in kernels:
        m = re.match(_KERNEL_RE, kernel)
        probe = _probe(m.group(3)) if m else None
        if m is None or probe is None:
            continue
        dtype_letter = "c" if m.group(2) in "cz" else "s"
        probe_target = "%s_%s%s%s" % (m.group(1), dtype_letter, m.group(3), m.group(4) or "")
        takes = set()
        for text in _probe_texts(jax, *probe):
            takes |= operand_counts(text, probe_target)
        passes = operand_counts(module_text, kernel)
        if takes and passes and not passes <= takes:
            found.append((kernel, sorted(passes), sorted(takes)))
    return found


def _probe_texts(jax, fn, args):
    """The probe lowered as this release's jit does and as its jax.export does: within its forward-compatibility
    window an export still calls a kernel the older way (jax 0.5's export passes trsm's alpha, its jit does not), and
    the kernel takes both."""
    texts = []
    try:
        texts.append(jax.jit(fn).lower(*args).as_text())
    except Exception:
        pass
    try:
        from jax import export as jexport

        texts.append(jexport.export(jax.jit(fn))(*args).mlir_module())
    except Exception:
        pass
    return texts


def signature_message(mismatches):
    try:
        import jaxlib.version

        jl = "jaxlib %s" % jaxlib.version.__version__
    except Exception:
        jl = "this jaxlib"
    parts = ["%s (the module passes %s operand%s; %s's takes %s)"
             % (k, "/".join(str(p) for p in passes), "" if passes == [1] else "s", jl,
                " or ".join(str(t) for t in takes))
             for k, passes, takes in mismatches]
    return ("the module calls jaxlib CPU kernel%s whose signature changed: %s; the bundle was lowered by a jax whose "
            "kernel took other arguments (`reprobundle replay --retrace` lowers the program again on this release)"
            % ("s" if len(parts) > 1 else "", "; ".join(parts)))
