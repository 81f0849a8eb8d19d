"""The program part of a standalone reproducer (`reprobundle script`): the texts below are copied verbatim into every
script bundle/frozen_script.py and bundle/program_script.py write, after the data they define. They are never
imported or run by the host.

RUNNER (COMMON + FROZEN + LOCKSTEP + FROZEN_MAIN), the frozen module's script, after MODULE, IN_AVALS, OUT_AVALS,
INPUTS, REFERENCE, REFERENCE_LABEL, TOLERANCES, BITS, EXPECT, EXPECT_TEXT, X64, TIMED_CALLS, REFERENCE_MEDIAN_NS,
STORED_TIMES, STORED_MEDIANS, COMPARE, BUNDLE. How it runs the module: the mechanism reprobundle's own worker uses on every
release from 0.4.30 (worker/serve.py and worker/rebuild.py, the way `pack --stablehlo` wraps a raw module): the
StableHLO text serialized as a portable artifact at the oldest StableHLO version this jaxlib writes, a
`jax.export.Exported` rebuilt around it from @main's signature (unsharded, one device, no effects, this backend's
platform), and its `call` jitted. JAX documents no way to run StableHLO text, so this uses `jax._src` (as the
worker does), kept to what every release from 0.4.30 has.

PROGRAM_RUNNER (COMMON + PROGRAM), a lowering change's script, after PROGRAM_FILES, PROGRAM_SCRIPT, FACTORY,
STATIC, INPUTS (None: the factory's own, checked against INPUT_CHECKS), GOOD_OUTPUTS, GOOD_LABEL, TOLERANCES, BITS,
X64, BUNDLE: the program's files written to a temporary
folder, its factory called, the bundle's inputs put in the place of its array leaves (as a retrace does), its
call run by the jax installed, its outputs checked against the last good release's.

The output check is the one reprobundle's replays apply (analysis/verdict.py, worker/tolerance.py): element i
passes when |got - reference| <= atol + rtol * |reference| (equal values and two NaNs pass), with each leaf's
(rtol, atol) computed from the reference and written into the script as numbers. BITS (a change in the last
bits): any bit of an element that differs fails, and the script says how many elements differ, by how much at most,
and whether that is within the tolerance. An output too large to write whole is a map: its sha256 (the same bytes
pass) and the elements kept (those that changed at the first bad release), which say how it differs.

Exit codes, in every script: 0 it behaves as the reference (the last good release), 1 it shows the difference, 3 it
could not run (jax does not start, a side of --compare does not install or start, a traceback of the script's own:
`_entry` catches it and says it in one line), 2 bad arguments.

Time on one release is printed, not judged: one process on one release cannot show a slowdown, so the frozen
script prints its median beside the stored medians of the compared releases (timed together on the reporter's
machine, with their ratio and interval) and the commands that run it on each. `--compare A B` judges: both sides
started, each in a process of its own (`uv run --with jax==V`, or a Python's path), then timed in lockstep (one
side's batch of calls, then the other's, the order alternating, PAIRED_STEPS pairs a round, new processes each
round: worker/lockstep_compare.py, whose text the frozen script holds, the one definition that `python NAME.zip
--compare` imports too); exit 1 when B's median paired ratio is MIN_EFFECT or more and its 95% interval
(bootstrapped over rounds, then pairs) lies above 1, 3 when a side could not run.
"""

from pathlib import Path

COMMON = r'''

# ---------------------------------------------------------------------------------------------------- helpers

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


def _first_line(e):
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:500]


def _text(x, digits=7):
    value = complex(x) if np.iscomplexobj(x) else float(x) if np.asarray(x).dtype.kind != "b" else bool(x)
    return "%.*g" % (digits, value) if isinstance(value, float) else str(value)


def _bit_differs(got, ref):
    """Per element, whether its bytes differ (any bit; a NaN's payload too)."""
    n, size = ref.size, ref.dtype.itemsize
    a = np.ascontiguousarray(ref).reshape(-1).view(np.uint8).reshape(n, size)
    b = np.ascontiguousarray(got).reshape(-1).view(np.uint8).reshape(n, size)
    return (a != b).any(axis=1).reshape(ref.shape)


def _leaf_check(i, got, ref, rtol, atol, expected="reference", bits=False, where=None, of=""):
    """None when output i is as `ref` (what `expected` names): within the tolerance, or for `bits` the same bit for
    bit; else {"count": elements that differ, "beyond": those outside the tolerance, "largest": the largest
    |difference|}, its first differing elements and its worst ones printed. `where`: the flat positions in the whole
    output of these elements (a script that keeps some elements of a large output), said by `of`."""
    if got.shape != ref.shape or got.dtype != ref.dtype:
        print("  output %d: expected %s%s (%s), got %s%s" % (i, ref.dtype, list(ref.shape), expected, got.dtype,
                                                            list(got.shape)))
        return {"count": max(ref.size, 1), "beyond": max(ref.size, 1), "largest": float("inf")}
    a = ref.astype(np.complex128 if ref.dtype.kind == "c" else np.float64)
    b = got.astype(a.dtype)
    magnitude = np.abs(a)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        diff = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, np.abs(a - b))
        allowed = atol + rtol * np.where(np.isfinite(magnitude), magnitude, 0.0)
        beyond = (diff != 0) & ~(diff <= allowed)
        excess = np.where(diff == 0, 0.0, np.where(np.isnan(diff), np.inf, diff / allowed)).ravel()
    bad = _bit_differs(got, ref) if bits else beyond
    count = int(np.count_nonzero(bad))
    if not count:
        return None
    outside = int(np.count_nonzero(beyond))
    largest = float(np.max(np.where(bad, np.where(np.isnan(diff), np.inf, diff), 0.0)))
    shape = list(ref.shape) if where is None else list(of[1])
    said = "" if where is None else " (the %d of its %d elements kept here: %s)" % (ref.size, int(np.prod(of[1])),
                                                                                   of[0])
    if bits:
        print("  output %d (%s%s): %d of %d elements differ in their bits from %s, by at most %.3g; %s%s"
              % (i, ref.dtype, shape, count, bad.size, expected, largest,
                 "all within the tolerance (rtol %g, atol %g)" % (rtol, atol) if not outside else
                 "%d of them outside the tolerance (rtol %g, atol %g)" % (outside, rtol, atol), said))
    else:
        print("  output %d (%s%s): %d of %d elements outside the tolerance (rtol %g, atol %g)%s"
              % (i, ref.dtype, shape, count, bad.size, rtol, atol, said))
    worst = np.flatnonzero(bad.ravel())
    first = worst[:4]
    digits = (17 if ref.dtype.itemsize >= 8 else 9) if bits else 7  # enough to show the bits that differ
    print("    expected (%s): %s" % (expected, ", ".join(_text(ref.ravel()[k], digits) for k in first)))
    print("    got (here):%s %s" % (" " * max(0, len(expected) - 2),
                                    ", ".join(_text(got.ravel()[k], digits) for k in first)))
    print("    the worst:")
    for flat in worst[np.argsort(-excess[worst], kind="stable")][:5]:
        at = np.unravel_index(int(flat), ref.shape) if ref.ndim else ()
        place = at if where is None else np.unravel_index(int(where[flat]), tuple(of[1])) if of[1] else ()
        print("    [%s]  %s %s  got %s  (abs err %.3g, allowed %.3g)" % (
            ", ".join(str(int(k)) for k in place), expected, _text(ref[at], digits), _text(got[at], digits),
            float(diff[at]), float(allowed[at])))
    return {"count": count, "beyond": outside, "largest": largest}


def _output_check(i, got, spec, tolerance, expected, dtype_of, bits):
    """_leaf_check of output i against its reference `spec`: a whole array (dtype, shape, data), or for an output
    too large to write here a map of its sha256 and the elements kept (those that changed at the first bad
    release): its digest decides where it matches, the kept elements say how it differs."""
    rtol, atol = tolerance
    if not isinstance(spec, dict):
        return _leaf_check(i, got, _array(spec, dtype_of), rtol, atol, expected, bits)
    dt, shape = dtype_of(spec["dtype"]), tuple(spec["shape"])
    if got.shape != shape or got.dtype != dt:
        return _leaf_check(i, got, np.zeros(shape, dt), rtol, atol, expected, bits)
    import hashlib

    if hashlib.sha256(np.ascontiguousarray(got).tobytes()).hexdigest() == spec["sha256"]:
        return None
    at = _array(spec["at"], dtype_of)
    found = _leaf_check(i, got.reshape(-1)[at], _array(spec["values"], dtype_of), rtol, atol, expected, bits,
                        where=at, of=(spec["kept"], shape))
    if found is None and bits:
        print("  output %d (%s%s): its bits differ from %s's (sha256), not at the %d elements kept here"
              % (i, dt, list(shape), expected, at.size))
        return {"count": 0, "beyond": 0, "largest": 0.0}
    return found


def _outputs_verdict(outputs, references, dtype_of, expected, bits):
    """None when every output is as its reference; else what differs, as one phrase (each output printed)."""
    found = [_output_check(i, got, spec, tolerance, expected, dtype_of, bits)
             for i, (got, spec, tolerance) in enumerate(zip(outputs, references, TOLERANCES))]
    differ = [f for f in found if f is not None]
    if not differ:
        return None
    if not bits:
        return "%d of %d outputs outside the tolerance of %s" % (len(differ), len(found), expected)
    count, beyond = sum(f["count"] for f in differ), sum(f["beyond"] for f in differ)
    largest = max(f["largest"] for f in differ)
    return ("%d elements of %d of %d outputs differ in their bits from %s, by at most %.3g (%s)"
            % (count, len(differ), len(found), expected, largest,
               "all within the tolerance" if not beyond else "%d outside the tolerance" % beyond))


def _entry():
    """main's exit code; anything it raises is `could not run` (exit 3) in one line."""
    try:
        return main(sys.argv[1:])
    except KeyboardInterrupt:
        print("result: could not run: interrupted")
    except Exception as e:
        print("result: could not run: %s: %s" % (type(e).__name__, _first_line(e)))
    return 3


def _serve(step, samples, jax_version, code):
    """One side of --compare: `REPRO ready` with its release, outputs' exit code and one call's time, then one
    `REPRO ns` line for each `step N` line read, until `end`."""
    import json

    sys.stdout.write("REPRO ready %s\n" % json.dumps({"jax": jax_version, "exit": code, "one_ns": _median(samples)}))
    sys.stdout.flush()
    for line in sys.stdin:
        words = line.split()
        if words[:1] != ["step"]:
            break
        sys.stdout.write("REPRO ns %r\n" % step(int(words[1])))
        sys.stdout.flush()
    return code


def _median(xs):
    xs = sorted(xs)
    return None if not xs else (xs[len(xs) // 2] + xs[(len(xs) - 1) // 2]) / 2.0


'''

FROZEN_CORE = r'''

# ---------------------------------------------------------------------------------------------------- the program


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


def _run(jax, dtype_of, inputs):
    """(outputs, call times in ns, the timed step), or raises with the phase it failed in (the exception's
    `phase`)."""
    phase = "prepare"
    try:
        exported = _exported(jax, dtype_of)
        phase = "lower"
        lowered = jax.jit(lambda *args: exported.call(*args)).lower(*inputs)
        phase = "compile"
        compiled = lowered.compile()
        phase = "execute"
        out = jax.block_until_ready(compiled(*inputs))
        step = _stepper(jax, compiled, inputs)
        samples = _time_calls(step)
    except Exception as e:
        e.phase = phase
        raise
    return [np.asarray(x) for x in jax.tree_util.tree_leaves(out)], samples, step


def _stepper(jax, compiled, inputs):
    """step(n): the time (ns) of one call, averaged over n calls run back to back."""

    def step(n):
        start = time.perf_counter_ns()
        for _ in range(n):
            out = compiled(*inputs)
        jax.block_until_ready(out)
        return (time.perf_counter_ns() - start) / n

    return step


def _time_calls(step):
    """Per-call times (ns) of TIMED_CALLS steps after a warmup."""
    n = calls_a_step(min(step(1) for _ in range(3)))
    samples = []
    for _ in range(TIMED_CALLS):
        samples.append(step(n))
        if sum(samples) * n > 3e9:
            break
    return samples

'''

FROZEN_CLI = r'''

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


USAGE = """usage: python %(name)s               run it on this jax: exit 0 as the reference, 1 the difference, 3 could not run
       python %(name)s --compare A B [--rounds N]
           time it on A and B, each in its own process, in alternating rounds (default 5); exit 1 when B is
           slower than A beyond the interval and by %(effect)d%% or more, 0 when not, 3 when a side could not run.
           A and B: a JAX release (run by `uv run --with jax==V`), or the path of a Python that has one; either
           may end in :VAR=VALUE;VAR=VALUE (environment variables of that side, XLA_FLAGS among them)."""


def main(argv):
    if argv[:1] == ["--compare"]:
        return _compare(argv[1:])
    if argv[:1] in (["-h"], ["--help"]):
        print(USAGE % {"name": os.path.basename(sys.argv[0]), "effect": round((MIN_EFFECT - 1) * 100)})
        return 0
    serving = argv == ["--serve-times"]  # one side of --compare: it times steps when asked (stdin, stdout)
    if argv and not serving:
        print("unknown arguments %r\n%s" % (argv, USAGE % {"name": os.path.basename(sys.argv[0]),
                                                           "effect": round((MIN_EFFECT - 1) * 100)}))
        return 2
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
        outputs, samples, step = _run(jax, dtype_of, [_array(spec, dtype_of) for spec in INPUTS])
    except Exception as e:
        phase = getattr(e, "phase", "prepare")
        error = "%s: %s: %s" % (phase, type(e).__name__, _first_line(e))
        if EXPECT == "error" and phase != "prepare":
            print("result: ERROR (the difference this bundle shows): " + error)
            return 1
        print("result: could not run: " + error)
        return 3
    code = _verdict(outputs, samples, dtype_of, jax.__version__)
    return _serve(step, samples, jax.__version__, code) if serving else code


def _verdict(outputs, samples, dtype_of, jax_version):
    if len(outputs) != len(REFERENCE):
        print("result: DIFFERS: %d outputs, %s has %d" % (len(outputs), REFERENCE_LABEL, len(REFERENCE)))
        return 1
    differs = _outputs_verdict(outputs, REFERENCE, dtype_of, REFERENCE_LABEL, BITS)
    _time_lines(samples, jax_version)
    if differs:
        print("result: DIFFERS: " + differs)
        return 1
    if EXPECT == "slower":
        print("result: ran, outputs within the tolerance; time not judged on one release (a slowdown is between "
              "two: python %s --compare A B times both)" % os.path.basename(sys.argv[0]))
        for command in COMPARE:
            print("  " + command)
        return 0
    print("result: as %s (%s)" % (REFERENCE_LABEL, "the same bits" if BITS else "outputs within the tolerance"))
    return 0


# ---------------------------------------------------------------------------------------------------- --compare


def _compare(argv):
    """--compare A B: worker/lockstep_compare.py's compare_sides (its text follows this program), this script's
    sides served by `--serve-times`."""
    return compare_sides(argv, os.path.abspath(sys.argv[0]), ["--serve-times"], REFERENCE_LABEL, STORED_TIMES)
'''

FROZEN_MAIN = r'''

if __name__ == "__main__":
    sys.exit(_entry())
'''

PROGRAM_CORE = r'''

# ---------------------------------------------------------------------------------------------------- the program


def _factory(jax):
    """(fn, args, kwargs) from the program's factory: its files written to a temporary folder, the script imported
    from there (as the reporter ran it)."""
    import importlib.util
    import tempfile

    folder = tempfile.mkdtemp(prefix="repro-program-")
    for path, text in PROGRAM_FILES:
        target = os.path.join(folder, *path.split("/"))
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as f:
            f.write(text)
    sys.path.insert(0, os.path.dirname(os.path.join(folder, *PROGRAM_SCRIPT.split("/"))))
    spec = importlib.util.spec_from_file_location("repro_program", os.path.join(folder, *PROGRAM_SCRIPT.split("/")))
    module = importlib.util.module_from_spec(spec)
    sys.modules["repro_program"] = module
    spec.loader.exec_module(module)
    made = getattr(module, FACTORY)()
    fn, args, kwargs = (made[0], made[1], {}) if len(made) == 2 else made
    return fn, (tuple(args) if isinstance(args, (tuple, list)) else (args,)), dict(kwargs or {})


def _is_key(jax, leaf):
    try:
        return jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key)
    except Exception:
        return False


def _static(path):
    """Whether a leaf's path lies under an argument the bundle was packed with as static (baked in)."""
    top, arg = path[0], path[1] if len(path) > 1 else None
    name = getattr(arg, "idx", None) if getattr(top, "idx", 0) == 0 else getattr(arg, "key", None)
    return name in STATIC


def _leaf_bytes(jax, leaf):
    return np.asarray(jax.random.key_data(leaf)) if _is_key(jax, leaf) else np.asarray(leaf)


def _regenerated(jax, args, kwargs):
    """The factory's own inputs (the bundle's are too large to write here), checked against the bundle's: the same
    array leaves, dtypes and shapes, and the same bytes (sha256). None where they are not: `(why)`."""
    with_path, _ = jax.tree_util.tree_flatten_with_path((args, kwargs))
    arrays = (jax.Array, np.ndarray, np.generic)
    dynamic = [leaf for path, leaf in with_path if isinstance(leaf, arrays) and not _static(path)]
    if len(dynamic) != len(INPUT_CHECKS):
        return None, "the factory made %d array leaves, the bundle stored %d" % (len(dynamic), len(INPUT_CHECKS))
    import hashlib

    for i, (leaf, (dtype, shape, digest)) in enumerate(zip(dynamic, INPUT_CHECKS)):
        mine = _leaf_bytes(jax, leaf)
        if (mine.dtype.name, list(mine.shape)) != (dtype, list(shape)):
            return None, "input %d is %s%s here, the bundle stored %s%s" % (i, mine.dtype, list(mine.shape), dtype,
                                                                            list(shape))
        if hashlib.sha256(np.ascontiguousarray(mine).tobytes()).hexdigest() != digest:
            return None, "input %d's values are not the bundle's (its sha256 differs)" % i
    return (args, kwargs), "the factory's own, made from its seed: the bundle's bytes (sha256 of each of %d)" % len(
        dynamic)


def _stored_inputs(jax, args, kwargs):
    """The call with the bundle's stored inputs in the place of the factory's array leaves (as reprobundle's
    retrace puts them), and what was done; the factory's own where the leaves do not line up. Where the bundle's
    are too large to write here (INPUTS None), the factory's own, checked to be the bundle's (ValueError if not:
    the outputs of the last good release would not apply)."""
    if INPUTS is None:
        made, how = _regenerated(jax, args, kwargs)
        if made is None:
            raise ValueError("the factory's inputs are not those the last good release ran: " + how)
        return made[0], made[1], how
    with_path, tree = jax.tree_util.tree_flatten_with_path((args, kwargs))
    leaves = [leaf for _, leaf in with_path]
    arrays = (jax.Array, np.ndarray, np.generic)
    dynamic = [i for i, (path, leaf) in enumerate(with_path) if isinstance(leaf, arrays) and not _static(path)]
    if len(dynamic) != len(INPUTS):
        return args, kwargs, "the factory's own (%d array leaves, the bundle stored %d)" % (len(dynamic), len(INPUTS))
    replaced = 0
    for i, spec in zip(dynamic, INPUTS):
        stored = _array(spec, jax.numpy.dtype)
        leaf = leaves[i]
        mine = _leaf_bytes(jax, leaf)
        if mine.shape != stored.shape or mine.dtype != stored.dtype:
            return args, kwargs, "the factory's own (leaf %d is %s%s, the bundle stored %s%s)" % (
                i, mine.dtype, list(mine.shape), stored.dtype, list(stored.shape))
        if mine.tobytes() == stored.tobytes():
            continue
        leaves[i] = (jax.random.wrap_key_data(stored, impl=jax.random.key_impl(leaf)) if _is_key(jax, leaf)
                     else jax.numpy.asarray(stored) if isinstance(leaf, jax.Array) else stored)
        replaced += 1
    args, kwargs = jax.tree_util.tree_unflatten(tree, leaves)
    return args, kwargs, ("the bundle's, the same as the factory's" if not replaced else
                          "the bundle's (%d of the factory's %d array leaves replaced)" % (replaced, len(dynamic)))


def _outputs(jax, out):
    """The program's array outputs, flat (key arrays as their key data, as reprobundle stores them)."""
    found = []
    for leaf in jax.tree_util.tree_leaves(out):
        if _is_key(jax, leaf):
            found.append(np.asarray(jax.random.key_data(leaf)))
        elif isinstance(leaf, (jax.Array, np.ndarray, np.generic)):
            found.append(np.asarray(leaf))
    return found

'''

PROGRAM_CLI = r'''


def main(argv):
    if argv:
        print("usage: python %s   (exit 0: outputs as %s; 1: they differ; 3: could not run)"
              % (os.path.basename(sys.argv[0]), GOOD_LABEL))
        return 0 if argv[0] in ("-h", "--help") else 2
    print("reproducer of %s: the program as this jax traces it, against the outputs of %s" % (BUNDLE, GOOD_LABEL))
    try:
        import jax
        import jaxlib

        if X64:
            jax.config.update("jax_enable_x64", True)
        version = getattr(getattr(jaxlib, "version", None), "__version__", "?")
    except Exception as e:
        print("result: could not run: jax: %s: %s" % (type(e).__name__, _first_line(e)))
        return 3
    print("release: jax %s, jaxlib %s, Python %s; backend %s; XLA_FLAGS=%r" % (
        jax.__version__, version, sys.version.split()[0], jax.default_backend(), os.environ.get("XLA_FLAGS", "")))
    try:
        fn, args, kwargs = _factory(jax)
    except ImportError as e:
        print("result: could not run: the program needs %s (%s)" % (getattr(e, "name", None) or "a module",
                                                                   _first_line(e)))
        return 3
    try:
        args, kwargs, how = _stored_inputs(jax, args, kwargs)
    except ValueError as e:
        print("result: could not run: %s" % _first_line(e))
        return 3
    try:
        print("inputs: " + how)
        outputs = _outputs(jax, jax.block_until_ready(fn(*args, **kwargs)))
    except Exception as e:
        print("result: ERROR on jax %s, where %s ran: %s: %s" % (jax.__version__, GOOD_LABEL, type(e).__name__,
                                                                 _first_line(e)))
        return 1
    return _verdict(outputs, jax.numpy.dtype, jax.__version__)


def _verdict(outputs, dtype_of, jax_version):
    if len(outputs) < len(GOOD_OUTPUTS):
        print("result: DIFFERS: %d outputs, %s gave %d" % (len(outputs), GOOD_LABEL, len(GOOD_OUTPUTS)))
        return 1
    differs = _outputs_verdict(outputs, GOOD_OUTPUTS, dtype_of, GOOD_LABEL, BITS)
    if differs:
        print("result: DIFFERS: jax %s gives other outputs than %s: %s" % (jax_version, GOOD_LABEL, differs))
        return 1
    print("result: as on %s: %s" % (GOOD_LABEL, "the same bits" if BITS else "outputs within the tolerance"))
    return 0


if __name__ == "__main__":
    sys.exit(_entry())
'''

# `--compare A B`: worker/lockstep_compare.py's text, the one definition `python NAME.zip --compare` imports too
_LOCKSTEP_TEXT = (Path(__file__).resolve().parent.parent / "worker" / "lockstep_compare.py").read_text(encoding="utf-8")
LOCKSTEP = "\n\n# " + "-" * 100 + " worker/lockstep_compare.py (its code; its docstring says how it works)\n\n" + \
    _LOCKSTEP_TEXT[_LOCKSTEP_TEXT.index("\nimport "):].lstrip("\n")  # the room a pasted script has is for its data
FROZEN = FROZEN_CORE + FROZEN_CLI
RUNNER = COMMON + FROZEN + LOCKSTEP + FROZEN_MAIN  # the frozen module's script (--compare: worker/lockstep_compare.py)
PROGRAM = PROGRAM_CORE + PROGRAM_CLI
PROGRAM_RUNNER = COMMON + PROGRAM  # the program's script (a lowering change: bundle/program_script.py)
