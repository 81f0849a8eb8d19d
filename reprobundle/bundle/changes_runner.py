"""The program part of a reproducer of a window's changes (bundle/changes_script.py writes it): the text below is
copied verbatim into the script after its data, like bundle/script_runner.py's; never imported or run by the host.

CHANGES_RUNNER (script_runner's COMMON, FROZEN_CORE and PROGRAM_CORE, then CHANGES_MAIN, then worker/
lockstep_compare.py's text), after BUNDLE, X64, TIMED_CALLS, CHANGES, MODULE, IN_AVALS, OUT_AVALS, KEPT, PROGRAM_FILES,
PROGRAM_SCRIPT, FACTORY, STATIC, INPUTS, INPUT_CHECKS, REFERENCES: each change of the report one entry of CHANGES
({"row", "criterion", "mode", "good", "bad", "reference", "label", "what"}), run by `--change N` (the first by
default) in its own mode: the frozen module (MODULE on the inputs @main keeps, INPUTS[KEPT]), or the program the
bundle carries traced by the jax installed (PROGRAM_FILES, its factory, the bundle's inputs in the place of its
array leaves); its outputs checked against its last good release's (REFERENCES[reference]: the outputs, their
tolerances). A slowdown is judged between two releases: `--compare A B` (its two by default), each side this script
serving its times with `--serve-times --change N`.

Exit codes: 0 as the change's last good release, 1 as its first bad one (its outputs differ, it fails where the good
one ran, or B is slower), 3 it could not run, 2 bad arguments.
"""

CHANGES_MAIN = r'''

# ---------------------------------------------------------------------------------------------------- the changes

USAGE = """usage: python %(name)s [--change N]
           run change N of the report (default 1) on the jax installed here: exit 0 as its last good release,
           1 as its first bad one, 3 could not run
       python %(name)s [--change N] --compare [A B] [--rounds R]
           a slowdown: time it on A and B (default: its last good and first bad release), each in its own
           process, in alternating rounds; exit 1 when B is slower beyond the interval, 0 when not, 3 when a side
           could not run. A and B: a JAX release (run by `uv run --with jax==V`), or the path of a Python that
           has one.
changes: %(changes)s"""


def _usage():
    said = "; ".join("%d %s" % (c["row"], c["what"]) for c in CHANGES)
    return USAGE % {"name": os.path.basename(sys.argv[0]), "changes": said}


def _parse(argv):
    """{"row", "compare" (None, or the sides given: [] for the change's own), "rounds", "serve"}; ValueError."""
    opts = {"row": CHANGES[0]["row"], "compare": None, "rounds": None, "serve": False}
    i = 0
    while i < len(argv):
        a, nxt = argv[i], argv[i + 1] if i + 1 < len(argv) else ""
        if a in ("--change", "--rounds") and nxt.isdigit() and int(nxt) > 0:
            opts["row" if a == "--change" else "rounds"] = int(nxt)
            i += 2
        elif a == "--compare":
            sides = [x for x in argv[i + 1:i + 3] if not x.startswith("--")]
            opts["compare"] = sides if len(sides) == 2 else []
            i += 1 + len(opts["compare"])
        elif a == "--serve-times":
            opts["serve"] = True
            i += 1
        else:
            raise ValueError("unknown argument %r" % a)
    if not any(c["row"] == opts["row"] for c in CHANGES):
        raise ValueError("no change %d here" % opts["row"])
    return opts


def main(argv):
    if argv[:1] in (["-h"], ["--help"]):
        print(_usage())
        return 0
    try:
        opts = _parse(argv)
    except ValueError as e:
        print("error: %s\n%s" % (e, _usage()))
        return 2
    change = next(c for c in CHANGES if c["row"] == opts["row"])
    if opts["compare"] is not None:
        return _compare_change(change, opts)
    if not opts["serve"]:
        print("reproducer of %s, change %d of %d: %s" % (BUNDLE, change["row"], len(CHANGES), change["what"]))
    try:
        import jax
        import jaxlib

        if X64:
            jax.config.update("jax_enable_x64", True)
        version = getattr(getattr(jaxlib, "version", None), "__version__", "?")
    except Exception as e:
        print("result: could not run: jax: %s: %s" % (type(e).__name__, _first_line(e)))
        return 3
    if not opts["serve"]:
        print("release: jax %s, jaxlib %s, Python %s; backend %s; XLA_FLAGS=%r" % (
            jax.__version__, version, sys.version.split()[0], jax.default_backend(), os.environ.get("XLA_FLAGS", "")))
    ran = _run_change(jax, change, opts["serve"] or change["criterion"] == "time")
    if isinstance(ran, int):
        return ran
    outputs, samples, step = ran
    code = _change_verdict(change, outputs, samples, jax)
    return _serve(step, samples, jax.__version__, code) if opts["serve"] else code


def _compare_change(change, opts):
    """--compare: a slowdown's two releases (or the sides given) timed by worker/lockstep_compare.py's
    compare_sides, each side this script serving its times for this change."""
    if change["criterion"] != "time":
        print("error: change %d is no slowdown (%s): run it on each release, without --compare\n%s"
              % (change["row"], change["what"], _usage()))
        return 2
    sides = opts["compare"] or [change["good"], change["bad"]]
    argv = list(sides) + (["--rounds", str(opts["rounds"])] if opts["rounds"] else [])
    serving = ["--serve-times", "--change", str(change["row"])]
    return compare_sides(argv, os.path.abspath(sys.argv[0]), serving, change["label"], (), PACKAGES)


def _run_change(jax, change, timed):
    """(outputs, call times in ns, the timed step) of the change's mode on this jax, or the exit code where it did
    not run (said in one line): 1 where the change is an error the good release did not have, else 3."""
    dtype_of = jax.numpy.dtype
    try:
        if change["mode"] == "frozen":
            return _run(jax, dtype_of, [_array(INPUTS[i], dtype_of) for i in KEPT])
        fn, args, kwargs = _factory(jax)
        args, kwargs, how = _stored_inputs(jax, args, kwargs)
        print("inputs: " + how)
    except ImportError as e:
        print("result: could not run: the program needs %s (%s)" % (getattr(e, "name", None) or "a module",
                                                                   _first_line(e)))
        return 3
    except Exception as e:
        return _failed(change, getattr(e, "phase", "prepare"), e)
    try:
        outputs = _outputs(jax, jax.block_until_ready(fn(*args, **kwargs)))
        step = _program_stepper(jax, fn, args, kwargs)
        return outputs, (_time_calls(step) if timed else []), step
    except Exception as e:
        return _failed(change, "call", e)


def _failed(change, phase, e):
    error = "%s: %s: %s" % (phase, type(e).__name__, _first_line(e))
    if change["criterion"] == "error" and phase != "prepare":
        print("result: ERROR (as on jax %s, the first bad release; jax %s ran): %s" % (change["bad"], change["good"],
                                                                                    error))
        return 1
    print("result: could not run: " + error)
    return 3


def _program_stepper(jax, fn, args, kwargs):
    """step(n): the time (ns) of one call of the program's function, averaged over n calls run back to back."""

    def step(n):
        start = time.perf_counter_ns()
        for _ in range(n):
            out = fn(*args, **kwargs)
        jax.block_until_ready(out)
        return (time.perf_counter_ns() - start) / n

    return step


def _change_verdict(change, outputs, samples, jax):
    """The exit code of a change's run here: its outputs against its last good release's (any bit for a change of
    bits), then, for a slowdown, its time printed (one release cannot show one: --compare times two)."""
    ref = REFERENCES[change["reference"]] if change["reference"] is not None else None
    differs = None
    if ref is not None and len(outputs) != len(ref["outputs"]):
        differs = "%d outputs, %s gave %d" % (len(outputs), ref["label"], len(ref["outputs"]))
    elif ref is not None:
        global TOLERANCES  # what _outputs_verdict checks against: this change's last good release's
        TOLERANCES = ref["tolerances"]
        differs = _outputs_verdict(outputs, ref["outputs"], jax.numpy.dtype, ref["label"],
                                   change["criterion"] == "bits")
    if change["criterion"] == "time" and samples:
        print("time: median %.1f us a call over %d steps (jax %s, this machine)" % (_median(samples) / 1e3,
                                                                                   len(samples), jax.__version__))
    if differs:
        print("result: DIFFERS from %s: %s" % (ref["label"], differs))
        return 1
    if change["criterion"] == "time":
        print("result: ran%s; time is judged between two releases: python %s --change %d --compare %s %s"
              % (", its outputs as %s" % ref["label"] if ref else "", os.path.basename(sys.argv[0]), change["row"],
                 change["good"], change["bad"]))
        return 0
    print("result: as %s (%s)" % (ref["label"], "the same bits" if change["criterion"] == "bits" else
                                  "outputs within the tolerance"))
    return 0

'''
