"""The program part of a standalone reproducer (`reprobundle script`): the text below is copied verbatim into every
script bundle/reproducer.py writes, after the data it defines (MODULE, IN_AVALS, OUT_AVALS, INPUTS, REFERENCE,
TOLERANCES, EXPECT, X64, REFERENCE_MEDIAN_NS, STORED_TIMES, STORED_MEDIANS, COMPARE, BUNDLE). It is never imported
or run by the host.

How it runs the module: the mechanism reprobundle's own worker uses on every release from 0.4.30 (worker/serve.py
and worker/rebuild.py, the way `pack --stablehlo` wraps a raw module): the StableHLO text serialized as a portable
artifact at the oldest StableHLO version this jaxlib writes, a `jax.export.Exported` rebuilt around it from @main's
signature (unsharded, one device, no effects, this backend's platform), and its `call` jitted. JAX documents no way
to run StableHLO text, so this uses `jax._src` (as the worker does), kept to what every release from 0.4.30 has.

The output check is the one reprobundle's replays apply (analysis/verdict.py, worker/tolerance.py): element i
passes when |got - reference| <= atol + rtol * |reference| (equal values and two NaNs pass), with each leaf's
(rtol, atol) computed from the bundle's reference and written into the script as numbers.

Time is printed, never judged: one process on one release cannot show a slowdown, so the script prints its median
beside the stored medians of the compared releases (timed together on the reporter's machine, with their ratio
and interval) and the commands that run it on each; its exit code says only what it can know (outputs, errors).
"""

RUNNER = r'''

# ---------------------------------------------------------------------------------------------------- the program


def _array(spec, dtype_of):
    """An array from its (dtype, shape, data): data a list of values, or zlib+base64 of its bytes (little-endian)
    in byte-plane order (all first bytes, then all second bytes...: floats compress better so)."""
    dtype, shape, data = spec
    dt = dtype_of(dtype)
    if isinstance(data, list):
        return np.array(data, dtype=dt).reshape(shape)
    raw = zlib.decompress(base64.b64decode(data))
    count = 1
    for d in shape:
        count *= d
    planes = np.frombuffer(raw, np.uint8).reshape(dt.itemsize, count)
    return planes.T.copy().view(dt).reshape(shape)


def _import_export():
    """jax's export machinery; a stand-in for absl.logging where this jax imports it undeclared (up to 0.5.x)."""
    try:
        from jax._src.export import _export
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
        alog.vlog = lambda *args, **kwargs: None
        for name in ("info", "warning", "error", "debug", "exception", "log"):
            setattr(alog, name, getattr(log, name))
        absl.logging = alog
        sys.modules.setdefault("absl", absl)
        sys.modules.setdefault("absl.logging", alog)
        from jax._src.export import _export
    return _export


def _platform(jax):
    """This backend's jax.export platform: cpu, cuda, rocm or tpu."""
    device = jax.devices()[0]
    name = str(device.platform).lower()
    if name != "gpu":
        return name
    version = str(getattr(device.client, "platform_version", "")).lower()
    return "rocm" if "rocm" in version or "hip" in version else "cuda"


def _artifact(text):
    """The module text as a StableHLO portable artifact: the oldest version this jaxlib writes, else its newest."""
    try:
        from jax._src.lib import _jax  # jaxlib >= 0.6

        ext = _jax.mlir
    except ImportError:
        from jax._src.lib import xla_client

        ext = xla_client._xla.mlir
    from jax._src.lib.mlir.dialects import hlo

    problems = []
    for target in (hlo.get_minimum_version(), hlo.get_current_version()):
        try:
            return bytes(ext.serialize_portable_artifact(text, str(target)))
        except Exception as e:
            problems.append("%s: %s" % (target, _first_line(e)))
    raise RuntimeError("cannot serialize the module: " + "; ".join(problems))


def _exported(jax, dtype_of):
    """A jax.export.Exported around MODULE, rebuilt from @main's signature as reprobundle's worker rebuilds one."""
    import dataclasses

    from jax._src import core

    export = _import_export()
    ins = tuple(core.ShapedArray(tuple(shape), dtype_of(dtype)) for dtype, shape in IN_AVALS)
    outs = tuple(core.ShapedArray(tuple(shape), dtype_of(dtype)) for dtype, shape in OUT_AVALS)
    values = {
        "fun_name": "main", "in_tree": jax.tree_util.tree_structure((tuple(range(len(ins))), {})), "in_avals": ins,
        "out_tree": jax.tree_util.tree_structure(tuple(range(len(outs)))), "out_avals": outs,
        "_has_named_shardings": True, "_in_named_shardings": (None,) * len(ins),
        "_out_named_shardings": (None,) * len(outs), "in_shardings_hlo": (None,) * len(ins),
        "out_shardings_hlo": (None,) * len(outs), "nr_devices": 1, "platforms": (_platform(jax),),
        "ordered_effects": (), "unordered_effects": (), "disabled_safety_checks": (),
        "mlir_module_serialized": _artifact(MODULE),
        "calling_convention_version": export.maximum_supported_calling_convention_version,
        "module_kept_var_idx": tuple(range(len(ins))), "uses_global_constants": False, "_get_vjp": None,
    }
    kwargs = {}
    for field in dataclasses.fields(export.Exported):
        if field.name in values:
            kwargs[field.name] = values[field.name]
        elif field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING:
            raise RuntimeError("this jax's Exported has a field %r this script cannot fill" % field.name)
    return export.Exported(**kwargs)


def _first_line(e):
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:500]


def _text(x):
    value = complex(x) if np.iscomplexobj(x) else float(x) if np.asarray(x).dtype.kind != "b" else bool(x)
    return "%.7g" % value if isinstance(value, float) else str(value)


def _leaf_check(i, got, ref, rtol, atol):
    """Whether output i is within the tolerance; prints its worst elements when it is not."""
    if got.shape != ref.shape or got.dtype != ref.dtype:
        print("  output %d: expected %s%s, got %s%s" % (i, ref.dtype, list(ref.shape), got.dtype, list(got.shape)))
        return False
    a = ref.astype(np.complex128 if ref.dtype.kind == "c" else np.float64)
    b = got.astype(a.dtype)
    magnitude = np.abs(a)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, np.abs(a - b))
        allowed = atol + rtol * np.where(np.isfinite(magnitude), magnitude, 0.0)
        bad = (diff != 0) & ~(diff <= allowed)
        excess = np.where(diff == 0, 0.0, np.where(np.isnan(diff), np.inf, diff / allowed)).ravel()
    count = int(np.count_nonzero(bad))
    if not count:
        return True
    print("  output %d: %d of %d elements outside the tolerance (rtol %g, atol %g); the worst:"
          % (i, count, bad.size, rtol, atol))
    worst = np.flatnonzero(bad.ravel())
    for flat in worst[np.argsort(-excess[worst], kind="stable")][:5]:
        at = np.unravel_index(int(flat), ref.shape) if ref.ndim else ()
        print("    [%s]  reference %s  got %s  (abs err %.3g, allowed %.3g)" % (
            ", ".join(str(int(k)) for k in at), _text(ref[at]), _text(got[at]), float(diff[at]), float(allowed[at])))
    return False


def _run(jax, dtype_of, inputs):
    """(outputs, call times in ns), or raises with the phase it failed in (the exception's `phase`)."""
    phase = "prepare"
    try:
        exported = _exported(jax, dtype_of)
        phase = "lower"
        lowered = jax.jit(lambda *args: exported.call(*args)).lower(*inputs)
        phase = "compile"
        compiled = lowered.compile()
        phase = "execute"
        out = jax.block_until_ready(compiled(*inputs))
        samples = _time_calls(jax, compiled, inputs)
    except Exception as e:
        e.phase = phase
        raise
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(out)], samples


def _time_calls(jax, compiled, inputs):
    """Per-call times (ns) of TIMED_CALLS steps after a warmup; a step of a fast module is a batch of calls
    lasting ~10 ms (as reprobundle's worker batches them), so the dispatch of one call is not what is timed."""

    def step(n):
        start = time.perf_counter_ns()
        for _ in range(n):
            out = compiled(*inputs)
        jax.block_until_ready(out)
        return (time.perf_counter_ns() - start) / n

    one = min(step(1) for _ in range(3))
    n = max(1, min(10000, int(1e7 / max(one, 1.0))))
    samples = []
    for _ in range(TIMED_CALLS):
        samples.append(step(n))
        if sum(samples) * n > 3e9:
            break
    return samples


def _median(xs):
    xs = sorted(xs)
    return None if not xs else (xs[len(xs) // 2] + xs[(len(xs) - 1) // 2]) / 2.0


def _time_lines(samples, jax_version):
    """The median call here beside the stored medians of the compared releases (else the reference's): printed,
    not judged."""
    median = _median(samples)
    if median is None:
        return
    line = "time: median %.1f us a call over %d steps (jax %s, this machine)" % (median / 1e3, len(samples),
                                                                                jax_version)
    keys = {key for _, _, _, settings in STORED_MEDIANS for key in settings}
    here = {key: os.environ[key] for key in keys if os.environ.get(key)}  # the stored settings this process has
    same = [(label, ns) for jax, label, ns, settings in STORED_MEDIANS if jax == jax_version and settings == here]
    if same:
        line += "; " + "; ".join("%.2fx the stored median of %s" % (median / ns, label) for label, ns in same)
    elif REFERENCE_MEDIAN_NS and not STORED_MEDIANS:
        line += "; the reference: %.1f us (%.2fx; another process, maybe another machine)" % (
            REFERENCE_MEDIAN_NS / 1e3, median / REFERENCE_MEDIAN_NS)
    print(line)
    for stored in STORED_TIMES:
        print(stored)


def main():
    print("reproducer of %s (%s)" % (BUNDLE, EXPECT_TEXT))
    try:
        import jax
        import jax.numpy as jnp
        import jaxlib

        if X64:
            jax.config.update("jax_enable_x64", True)
        backend = "%s (%s)" % (jax.default_backend(), jax.devices()[0].device_kind)
        version = getattr(getattr(jaxlib, "version", None), "__version__", "?")
    except Exception as e:
        print("result: could not run: jax: %s: %s" % (type(e).__name__, _first_line(e)))
        return 3
    print("release: jax %s, jaxlib %s, Python %s" % (jax.__version__, version, sys.version.split()[0]))
    print("backend: %s; XLA_FLAGS=%r" % (backend, os.environ.get("XLA_FLAGS", "")))
    dtype_of = jnp.dtype  # numpy's dtypes and jax's own (bfloat16, float8_*)
    try:
        outputs, samples = _run(jax, dtype_of, [_array(spec, dtype_of) for spec in INPUTS])
    except Exception as e:
        phase = getattr(e, "phase", "prepare")
        error = "%s: %s: %s" % (phase, type(e).__name__, _first_line(e))
        if EXPECT == "error" and phase != "prepare":
            print("result: ERROR (the difference this bundle shows): " + error)
            return 1
        print("result: could not run: " + error)
        return 3
    return _verdict(outputs, samples, dtype_of, jax.__version__)


def _verdict(outputs, samples, dtype_of, jax_version):
    if len(outputs) != len(REFERENCE):
        print("result: DIFFERS: %d outputs, the reference has %d" % (len(outputs), len(REFERENCE)))
        return 1
    same = [_leaf_check(i, got, _array(spec, dtype_of), rtol, atol)
            for i, (got, spec, (rtol, atol)) in enumerate(zip(outputs, REFERENCE, TOLERANCES))]
    _time_lines(samples, jax_version)
    if not all(same):
        print("result: DIFFERS: %d of %d outputs outside the tolerance" % (same.count(False), len(same)))
        return 1
    if EXPECT == "slower":
        print("result: ran, outputs within the tolerance; time not judged (a slowdown is between two releases:"
              " compare the median above with the stored ones, or run this script on each release)")
        for command in COMPARE:
            print("  " + command)
        return 0
    print("result: as the reference (outputs within the tolerance)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
'''
