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
Exit code: 0 outputs match, 1 outputs differ, 3 it did not run (incompatible, error), 2 bad command line.
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

from .dtypes import np_dtype
from .protocol import job_inputs
from .tolerance import scaled_atol, tolerance_for

USAGE = """usage: python NAME.zip [--retrace] [--repeat N] [--warmup N] [--json]

Replays the bundle in this zip on the JAX installed in this interpreter and checks its outputs against the ones
packed with it; --retrace runs the program the bundle carries, traced by this JAX, instead of its frozen module.
It needs only jax and numpy. To try another JAX version, make an environment for it:

    python -m venv jax-0.8.0 && jax-0.8.0/bin/pip install jax==0.8.0
    jax-0.8.0/bin/python NAME.zip

reprobundle itself (reprobundle replay NAME.zip --jax A --jax B) times several versions together and diffs them.
"""


def _parse(argv):
    opts = {"repeat": 20, "warmup": 3, "json": False, "retrace": False}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a in ("-h", "--help"):
            return None
        if a in ("--json", "--retrace"):
            opts[a[2:]] = True
        elif a in ("--repeat", "--warmup") and i + 1 < len(argv) and argv[i + 1].isdigit():
            opts[a[2:]] = int(argv[i + 1])
            i += 1
        else:
            raise ValueError("unknown argument %r" % a)
        i += 1
    if opts["repeat"] < 1:
        raise ValueError("--repeat must be at least 1")
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
           "timing": {"warmup": opts["warmup"], "repeat": opts["repeat"], "lockstep": False},
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


def _check(zf, m, outputs):
    """Each output leaf against the packed one, with the dtype's tolerance: (ok, bit_identical, max_abs_err, first
    problem or "")."""
    import numpy as np

    packed = m["reference"]["outputs"]
    if len(outputs) != len(packed):
        return False, False, None, "%d outputs, the bundle packed %d" % (len(outputs), len(packed))
    ok, exact, worst, problem = True, True, 0.0, ""
    names = [o.get("path", "output %d" % i) for i, o in enumerate(m["function"].get("outputs") or packed)]
    for i, (leaf, out) in enumerate(zip(packed, outputs)):
        dtype = np_dtype(leaf["dtype"])
        want = np.frombuffer(zf.read("blobs/sha256/%s/%s" % (leaf["blob"]["digest"][7:9], leaf["blob"]["digest"][7:])),
                             dtype=dtype).reshape(leaf["shape"])
        with open(out["path"], "rb") as f:
            got = np.frombuffer(f.read(), dtype=np_dtype(out["dtype"])).reshape(out["shape"])
        name = names[i] if i < len(names) else "output %d" % i
        if got.shape != want.shape or got.dtype != want.dtype:
            ok, exact = False, False
            problem = problem or "%s: expected %s%s, got %s%s" % (name, want.dtype, list(want.shape), got.dtype,
                                                                 list(got.shape))
            continue
        if got.tobytes() == want.tobytes():
            continue
        exact = False
        rtol, atol = tolerance_for(leaf["dtype"])
        a = want.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
        b = got.astype(a.dtype)
        magnitude = np.abs(a)
        finite = magnitude[np.isfinite(magnitude)]
        atol = max(atol, scaled_atol(leaf["dtype"], float(finite.max()) if finite.size else 0.0))
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, np.abs(a - b))
            bad = int(np.count_nonzero(~(diff <= atol + rtol * magnitude)))
        err = float(np.max(diff)) if diff.size else 0.0
        worst = max(worst, err)
        if bad:
            ok = False
            problem = problem or "%s: %d elements outside tolerance (max abs err %.3g, rtol %g, atol %g)" % (
                name, bad, err, rtol, atol)
    return ok, exact, worst, problem


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


def replay_zip(path, opts):
    """Replay the bundle zip at `path` here; a summary dict (see main)."""
    from .main import run_job

    folder = tempfile.mkdtemp(prefix="reprobundle-zip-")
    try:
        with zipfile.ZipFile(path) as zf:
            m = _manifest(zf)
            job = _job(zf, m, folder, opts)
            with _StderrKept() as kept:
                result = run_job(job)
            if result.get("status") not in ("ok", "mismatch"):
                kept.show()
            env = result.get("environment") or {}
            packed_env = m.get("environment") or {}
            summary = {
                "bundle": "%s@%s" % (m.get("name"), m.get("version")), "function": m["function"]["fields"]["fun_name"]
                if m["function"].get("fields") else "?",
                "status": result.get("status"), "reason": result.get("reason") or "", "route": result.get("route"),
                "jax": env.get("jax"), "jaxlib": env.get("jaxlib"), "python": env.get("python"),
                "platform": env.get("platform"), "cpu_model": env.get("cpu_model"),
                "notes": [str(n) for n in result.get("notes") or []],
                "median_ns": _median(result.get("samples_ns") or []), "n": len(result.get("samples_ns") or []),
                "compile_s": result.get("compile_s"),
                "packed": {"jax": packed_env.get("jax"), "cpu_model": packed_env.get("cpu_model"),
                           "median_ns": _median((m["reference"].get("timing") or {}).get("samples_ns") or [])},
            }
            if result.get("status") == "ok":
                ok, exact, err, problem = _check(zf, m, result.get("outputs") or [])
                summary.update(outputs_ok=ok, bit_identical=exact, max_abs_err=err, problem=problem)
                if not ok:
                    summary["status"] = "mismatch"
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return summary


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
    import textwrap

    return "\n".join(w for line in lines for w in textwrap.wrap(line, 100, subsequent_indent=" " * 12) or [""])


def _replayed_lines(s):
    """What a replay that ran says: its route, its outputs against the packed ones, its time."""
    if s["outputs_ok"]:
        check = "bit-identical" if s["bit_identical"] else "within tolerance, max abs err %.3g" % s["max_abs_err"]
    else:
        check = "DIFFER: %s" % s["problem"]
    return ["  loaded:   by the %s route, compiled in %.2f s" % (s["route"], s["compile_s"] or 0.0),
            "  outputs:  %s (against those packed on jax %s)" % (check, s["packed"]["jax"] or "?"),
            "  time:     median %s over %d calls; packed: median %s on jax %s (another process%s: "
            "not comparable)" % (_ns(s["median_ns"]), s["n"], _ns(s["packed"]["median_ns"]),
                                 s["packed"]["jax"] or "?",
                                 "" if s["packed"]["cpu_model"] == s["cpu_model"] else ", another CPU")]


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
        import jax  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:
        sys.stderr.write("error: %s; this zip needs jax and numpy: pip install jax\n" % e)
        return 3
    try:
        summary = replay_zip(zip_path, opts)
    except (ValueError, KeyError, zipfile.BadZipFile, OSError) as e:
        sys.stderr.write("error: cannot read the bundle in %s: %s\n" % (zip_path, e))
        return 3
    if opts["json"]:
        sys.stdout.write(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(_text(summary) + "\n")
    return {"ok": 0, "mismatch": 1}.get(summary["status"], 3)


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
