"""A bundle zip that replays itself: ``python NAME.zip`` with nothing but jax and numpy installed.

`reprobundle export` writes this package into the zip as ``reprobundle_worker/`` beside a ``__main__.py`` that
calls `main`. It reads the bundle's manifest from the zip, extracts (and verifies) the blobs the function and its
inputs need into a temporary folder, runs the job in this interpreter exactly as a replay's worker does (same
load routes), compares the outputs with the packed ones, and prints one summary. No reprobundle, no network.

Python 3.9+, JAX 0.4.30+ and numpy: the manifest is read by msgpack_read.py where msgpack is not installed, and
the `deserialize` route (which needs flatbuffers) gives way to the next route where it is not. `--retrace` runs the
program the bundle carries, traced by this jax, instead of the frozen module. What the release prints on stderr
while loading (MLIR's `loc("-":0:0): error: unknown attribute code: 22` from a route that gives way on 0.4.30 and
0.4.33, warnings) is kept and shown only when the replay did not run.
Where the zip holds a `reproducer.json` (an investigation's answer, exported with it: bundle/zip_expectation.py), it
judges that instead (zip_verdict.py): its first line says what it checks and against which release; the program is
retraced for a change in JAX's lowering, the frozen module run for the compiler's; the outputs are checked against
the last good release's (any bit for a bits change: how many elements and by how much is said even within the
tolerance); an error where the good release ran is the regression; a slowdown is judged by `--compare A B`
(lockstep_compare.py, the code the standalone script holds too). `--packed` checks the packed reference instead.
Exit code: 0 as the good release (outputs match), 1 the regression shown (outputs differ, an error, slower), 3 it
did not run (incompatible, error, no jax, a side of --compare that could not run), 2 bad command line.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import zipfile

from .protocol import job_inputs
from .zip_verdict import (
    ServeTimes,
    change_record,
    check_outputs,
    checks_line,
    good_label,
    read_record,
    written_outputs,
)

USAGE = """usage: python NAME.zip [--change N] [--retrace] [--packed] [--repeat N] [--warmup N] [--json]
       python NAME.zip [--change N] --compare [A B] [--rounds N]

Replays the bundle in this zip on the JAX installed in this interpreter and checks its outputs: where the zip
holds an investigation's answer, against the last good release's (its first line says what it checks), else
against the ones packed with it; --retrace runs the program the bundle carries, traced by this JAX, instead of its
frozen module; --packed checks against the packed outputs whatever the answer. --compare A B times it on two
releases (`uv run --with jax==V`) or two Pythons' paths, each side in its own process, in lockstep (a slowdown's
zip knows its two). Where the answer lists several changes, --change N judges change N of the report (default its
first, the headline). Exit 0 as the good release, 1 the regression shown, 3 it could not run.
It needs only jax and numpy. To try another JAX version, make an environment for it:

    python -m venv jax-0.8.0 && jax-0.8.0/bin/pip install jax==0.8.0
    jax-0.8.0/bin/python NAME.zip

reprobundle itself (reprobundle replay NAME.zip --jax A --jax B) times several versions together and diffs them.
"""


def _parse(argv):
    opts: dict = {"repeat": 20, "warmup": 3, "json": False, "retrace": False, "packed": False,
                  "serve_times": False, "compare": None, "rounds": None, "change": None}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            return None
        if a in ("--json", "--retrace", "--packed", "--serve-times"):
            opts[a[2:].replace("-", "_")] = True
        elif a in ("--repeat", "--warmup", "--rounds", "--change") and i + 1 < len(argv) and argv[i + 1].isdigit():
            opts[a[2:]] = int(argv[i + 1])
            i += 1
        elif a == "--compare":
            sides = argv[i + 1:i + 3]
            opts["compare"] = sides if len(sides) == 2 and not any(x.startswith("--") for x in sides) else []
            i += len(opts["compare"])
        else:
            raise ValueError("unknown argument %r" % a)
        i += 1
    if opts["repeat"] < 1 or opts["rounds"] == 0 or opts["change"] == 0:
        raise ValueError("--repeat, --rounds and --change must be at least 1")
    return opts


def _manifest(zf):
    try:
        import msgpack

        def unpackb(data):
            return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except ImportError:  # only jax and numpy here: the pure-Python reader
        from .msgpack_read import unpackb

    keys = [n for n in zf.namelist() if n.startswith("bundles/") and n.endswith(".msgpack") and n.count("/") == 2]
    if len(keys) != 1:
        raise ValueError("the zip holds %d bundle manifests, expected one" % len(keys))
    return unpackb(zf.read(keys[0]))


def _blob(zf, ref, folder):
    """The blob `ref` names, extracted to `folder` and checked against its digest; its path."""
    digest = ref["digest"]
    hexd = digest.split(":", 1)[1]
    if not re.fullmatch("[0-9a-f]{64}", hexd):  # the manifest's text, never a path of its own
        raise ValueError("the manifest names a blob that is no sha256 digest: %r" % digest[:80])
    path = os.path.join(folder, hexd)
    if not os.path.exists(path):
        data = zf.read("blobs/sha256/%s/%s" % (hexd[:2], hexd))
        if hashlib.sha256(data).hexdigest() != hexd:
            raise ValueError("blob %s in the zip is corrupt" % digest)
        with open(path, "wb") as f:
            f.write(data)
    return path


def _job(zf, m, folder, opts):
    fn = m["function"]
    blobs = os.path.join(folder, "blobs")
    os.makedirs(blobs)

    def path_of(ref):
        return None if not ref else _blob(zf, ref, blobs)

    inputs = job_inputs(m["inputs"]["leaves"], path_of)
    for sub in ("outputs", "artifacts"):
        os.makedirs(os.path.join(folder, sub))
    function = {k: path_of(fn.get(k)) for k in ("exported", "mlir_module", "mlir_module_compat", "stablehlo_text")}
    function["fields"] = fn.get("fields")
    job = {"protocol": 1, "function": function, "inputs": inputs, "outputs_dir": os.path.join(folder, "outputs"),
           "artifacts_dir": os.path.join(folder, "artifacts"),
           "timing": {"warmup": opts["warmup"], "repeat": opts["repeat"], "lockstep": opts["serve_times"]},
           "dump": False, "profile": False, "routes": None, "describe": False}
    if opts["retrace"]:
        job.update(mode="retrace", program=_program(zf, fn, os.path.join(folder, "program")))
    return job


def _program(zf, fn, folder):
    """The bundle's program files written under `folder` (each path checked: nothing escapes it), as a retrace
    job's `program` map."""
    program = fn.get("program")
    if not isinstance(program, dict) or not program.get("files"):
        raise ValueError("--retrace: this bundle carries no program (it was not packed from a script)")
    for item in program["files"]:
        parts = str(item["path"]).split("/")
        if str(item["path"]).startswith("/") or any(p in ("", ".", "..") for p in parts):
            raise ValueError("--retrace: the bundle's program names the file %r, outside its folder" % item["path"])
        target = os.path.join(folder, *parts)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(_blob(zf, item["blob"], _blobs_of(folder)), target)
    return {"dir": folder, "script": str(program["script"]), "factory": str(program.get("factory") or "make"),
            "static": list(program.get("static") or [])}


def _blobs_of(program_folder):
    return os.path.join(os.path.dirname(program_folder), "blobs")


def _ns(ns):
    if ns is None:
        return "-"
    for unit, scale in (("s", 1e9), ("ms", 1e6), ("us", 1e3)):
        if ns >= scale:
            return "%.3f %s" % (ns / scale, unit)
    return "%.0f ns" % ns


def _median(xs):
    xs = sorted(xs)
    if not xs:
        return None
    n = len(xs)
    return float(xs[n // 2]) if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2.0


def replay_zip(path, opts, record=None):
    """Replay the bundle zip at `path` here, judged by `record` (zip_verdict.read_record's, or None: against the
    packed reference); a summary dict (see main)."""
    from .main import run_job

    folder = tempfile.mkdtemp(prefix="reprobundle-zip-")
    try:
        with zipfile.ZipFile(path) as zf:
            m = _manifest(zf)
            job = _job(zf, m, folder, opts)
            expected = (record or {}).get("expected") or m["reference"]["outputs"]
            control = None
            if opts["serve_times"]:  # one side of --compare: its outputs judged when it is ready to be timed
                control = ServeTimes(lambda: _judged_exit(zf, expected, job["outputs_dir"]))
            with _StderrKept() as kept:
                result = run_job(job, None, control)
            if result.get("status") not in ("ok", "mismatch"):
                kept.show()
            summary = _summary(m, result, record)
            if result.get("status") == "ok":
                names = [o.get("path", "output %d" % i) for i, o in enumerate(m["function"].get("outputs") or expected)]
                found = check_outputs(zf, expected, result.get("outputs") or [], names,
                                      (record or {}).get("criterion") == "bits")
                summary.update(outputs_ok=found["ok"], bit_identical=found["bit_identical"],
                               max_abs_err=found["max_abs_err"], problem=found["problem"],
                               differing_elements=found["differing"], outside_tolerance=found["outside"])
                if not found["ok"]:
                    summary["status"] = "mismatch"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    summary["verdict"] = _verdict(summary, record)
    return summary


def _summary(m, result, record):
    """What a replay says before its outputs are checked."""
    env = result.get("environment") or {}
    packed_env = m.get("environment") or {}
    fields = m["function"].get("fields")
    samples = result.get("samples_ns") or []
    summary = {
        "bundle": "%s@%s" % (m.get("name"), m.get("version")), "function": fields["fun_name"] if fields else "?",
        "status": result.get("status"), "reason": result.get("reason") or "", "route": result.get("route"),
        "notes": [str(n) for n in result.get("notes") or []], "median_ns": _median(samples), "n": len(samples),
        "compile_s": result.get("compile_s"),
        "packed": _packed(m), "against": "the outputs packed on jax %s" % (packed_env.get("jax") or "?"),
    }
    summary.update((k, env.get(k)) for k in ("jax", "jaxlib", "python", "platform", "cpu_model"))
    summary.update((k, (record or {}).get(k)) for k in ("criterion", "mode", "good", "bad"))
    if record and record.get("expected"):
        summary["against"] = good_label(record)
    return summary


def _packed(m):
    """The packing release, its CPU and its median call."""
    env = m.get("environment") or {}
    return {"jax": env.get("jax"), "cpu_model": env.get("cpu_model"),
            "median_ns": _median((m["reference"].get("timing") or {}).get("samples_ns") or [])}


def _judged_exit(zf, expected, outputs_dir):
    """The exit code of a --compare side's outputs (0 as expected, 1 they differ), judged within the tolerance."""
    outputs = written_outputs(outputs_dir, expected)
    if outputs is None:
        return 1
    return 0 if check_outputs(zf, expected, outputs, [], False)["ok"] else 1


def _verdict(summary, record):
    """regression (exit 1), as good (exit 0) or could not run (exit 3) where the zip judges an answer; as before
    (outputs match, outputs differ, did not run) where it has none."""
    ran = summary["status"] in ("ok", "mismatch")
    if record is None:
        return {"ok": "outputs match", "mismatch": "outputs differ"}.get(summary["status"], "did not run")
    if not ran:
        missing = "No module named" in summary["reason"]  # the program needs a package this environment lacks
        failed = record["criterion"] == "error" and summary["status"] in ("error", "incompatible") and not missing
        return "regression" if failed else "could not run"
    return "regression" if summary["status"] == "mismatch" else "as the good release"


class _StderrKept:
    """What is written to stderr (fd 2: the C++ libraries' messages too) while it is open, kept in a temporary
    file instead: shown by `show` where the replay did not run, dropped where it did."""

    def __enter__(self):
        sys.stderr.flush()
        self.file = tempfile.TemporaryFile()
        self.saved = os.dup(2)
        os.dup2(self.file.fileno(), 2)
        return self

    def __exit__(self, *exc):
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)
        return False

    def show(self):
        self.file.seek(0)
        text = self.file.read().decode("utf-8", "replace")
        if text.strip():
            sys.stderr.write(text[-8000:])


def _text(s):
    lines = ["%s (%s) on jax %s, jaxlib %s, Python %s, %s (%s)" % (
        s["bundle"], s["function"], s["jax"] or "?", s["jaxlib"] or "?", s["python"] or "?", s["platform"] or "?",
        s["cpu_model"] or "?")]
    if s["status"] not in ("ok", "mismatch"):
        lines.append("  status:   %s: %s" % (s["status"], s["reason"]))
    else:
        lines += _replayed_lines(s)
    for note in s["notes"]:
        lines.append("  note:     %s" % note)
    if s["criterion"] and s.get("expected_platform") not in (None, s["platform"]):
        lines.append("  note:     the expected outputs were computed on %s, this runs on %s: its outputs may differ "
                     "for that reason alone" % (s["expected_platform"], s["platform"] or "?"))
    if s["criterion"]:
        lines.append(_result_line(s))
    import textwrap

    return "\n".join(w for line in lines for w in textwrap.wrap(line, 100, subsequent_indent=" " * 12) or [""])


def _replayed_lines(s):
    """What a replay that ran says: its route, its outputs against the expected ones, its time."""
    if s["outputs_ok"] and s["bit_identical"]:
        check = "bit-identical"
    elif s["outputs_ok"]:
        check = "within tolerance: %d elements differ in their bits, max abs err %.3g" % (
            s["differing_elements"], s["max_abs_err"])
    else:
        check = "DIFFER: %s" % s["problem"]
    against = s["against"] if s["criterion"] else "those packed on jax %s" % (s["packed"]["jax"] or "?")
    return ["  loaded:   by the %s route, compiled in %.2f s" % (s["route"], s["compile_s"] or 0.0),
            "  outputs:  %s (against %s)" % (check, against),
            "  time:     median %s over %d calls; packed: median %s on jax %s (another process%s: "
            "not comparable)" % (_ns(s["median_ns"]), s["n"], _ns(s["packed"]["median_ns"]),
                                 s["packed"]["jax"] or "?",
                                 "" if s["packed"]["cpu_model"] == s["cpu_model"] else ", another CPU")]


def _result_line(s):
    """The last line of a judging zip: the regression shown, as the good release, or could not run."""
    verdict, here = s["verdict"], "jax %s" % (s["jax"] or "?")
    reason = s["reason"].splitlines()[0][:300] if s["reason"] else ""
    if verdict == "could not run":
        return "result: could not run on %s: %s: %s" % (here, s["status"], reason)
    if verdict == "regression" and s["criterion"] == "error":
        return "result: ERROR on %s, where jax %s ran: %s" % (here, s["good"], reason)
    if verdict == "regression":
        return "result: DIFFERS on %s from %s: %s" % (here, s["against"], s["problem"])
    if s["criterion"] == "time":
        pick = " --change %s" % s["row"] if s.get("row") not in (None, 1) else ""
        return ("result: ran, its outputs as on %s; time is judged between two releases: python %s%s --compare %s"
                % (s["against"], s.get("zip") or "NAME.zip", pick, " ".join(s.get("compare") or ["A", "B"])))
    how = {"bits": "bit for bit", "error": "it runs"}.get(s["criterion"], "within the tolerance")
    return "result: as the last good release: %s gives the outputs of %s (%s)" % (here, s["against"], how)


def _compare(zip_path, opts, record):
    """--compare A B (or the record's two): each side this zip serving its times (--serve-times) in a process of
    its own, through lockstep_compare.py; the exit code."""
    from .lockstep_compare import compare_sides

    sides = opts["compare"] or list((record or {}).get("compare") or [])
    if len(sides) != 2:
        sys.stderr.write("error: --compare needs two sides, A B (this zip stores no slowdown to compare)\n" + USAGE)
        return 2
    serving = ["--serve-times"] + [f for f in ("--retrace", "--packed") if opts[f[2:]]] + \
        (["--change", str(opts["change"])] if opts["change"] else [])
    against = good_label(record) if record and record.get("expected") else "the packed outputs"
    argv = list(sides) + (["--rounds", str(opts["rounds"])] if opts["rounds"] else [])
    return compare_sides(argv, os.path.abspath(zip_path), serving, against)


def main(zip_path, argv):
    try:
        opts = _parse(list(argv))
    except ValueError as e:
        sys.stderr.write("error: %s\n%s" % (e, USAGE))
        return 2
    if opts is None:
        sys.stdout.write(USAGE)
        return 0
    try:
        with zipfile.ZipFile(zip_path) as zf:
            record = None if opts["packed"] else read_record(zf)
        if record is not None:
            record = change_record(record, opts["change"])
        elif opts["change"] not in (None, 1):
            raise ValueError("--change %d: this zip holds no answer listing changes" % opts["change"])
    except (ValueError, zipfile.BadZipFile, OSError) as e:
        sys.stderr.write("error: cannot read the bundle in %s: %s\n" % (zip_path, e))
        return 3
    if record is not None and record["mode"] == "retrace":
        opts["retrace"] = True  # a lowering change: only the program, traced by this JAX, can show it
    if record is not None and not opts["json"] and not opts["serve_times"]:
        print(checks_line(record, os.path.basename(zip_path)), flush=True)
    if opts["compare"] is not None:
        return _compare(zip_path, opts, record)
    return _replay_and_say(zip_path, opts, record)


def _replay_and_say(zip_path, opts, record):
    """The replay here, its summary printed (text or --json; nothing for a --compare side); the exit code."""
    try:
        import jax  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:
        sys.stderr.write("error: %s; this zip needs jax and numpy: pip install jax\n" % e)
        return 3
    try:
        summary = replay_zip(zip_path, opts, record)
    except (ValueError, KeyError, zipfile.BadZipFile, OSError) as e:
        sys.stderr.write("error: cannot read the bundle in %s: %s\n" % (zip_path, e))
        return 3
    if record is not None:
        summary.update(checks=checks_line(record, os.path.basename(zip_path)), compare=record.get("compare"),
                       row=record.get("row"),
                       zip=os.path.basename(zip_path), expected_platform=record.get("platform"))
    if opts["serve_times"]:
        pass  # a --compare side: what it says goes on its protocol's lines
    elif opts["json"]:
        sys.stdout.write(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(_text(summary) + "\n")
    return _exit_code(summary, record)


def _exit_code(summary, record):
    if record is None:
        return {"ok": 0, "mismatch": 1}.get(summary["status"], 3)
    return {"regression": 1, "as the good release": 0}.get(summary["verdict"], 3)


MAIN_PY = '''"""A reprobundle bundle that replays itself: `python THIS.zip` runs it on the JAX of that interpreter (needs jax
and numpy) and checks its outputs; `python THIS.zip --help` says more. Running it runs Python code
from this zip: run it as you would run the sender's program. `reprobundle replay THIS.zip` never runs it."""
import sys

from reprobundle_worker.standalone import main

sys.exit(main(sys.argv[0], sys.argv[1:]))
'''


def runner_files():
    """(name in the zip, bytes) of what makes a bundle zip replay itself: this package's modules as
    `reprobundle_worker/`, and `__main__.py` (read by the host when it writes a zip)."""
    here = os.path.dirname(os.path.abspath(__file__))
    files = [("__main__.py", MAIN_PY.encode())]
    for name in sorted(os.listdir(here)):
        if name.endswith(".py") and name != "__main__.py":
            with open(os.path.join(here, name), "rb") as f:
                files.append(("reprobundle_worker/" + name, f.read()))
    return files
