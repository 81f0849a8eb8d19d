"""What `python NAME.zip` judges and how (worker/standalone.py): the zip's `reproducer.json` record where an
investigation answered (its fields: bundle/zip_expectation.py), the outputs checked against the expected ones (the
last good release's, or the packed reference), and one side of `--compare` serving its times.

Standard library and numpy only, as the rest of the worker; the record is JSON, checked by hand here (the worker
never validates with a schema)."""
from __future__ import annotations

import hashlib
import json
import os

from .dtypes import np_dtype
from .timing import Control
from .tolerance import scaled_atol, tolerance_for

RECORD_ENTRY = "reproducer.json"  # store/zip_store.py's REPRODUCER_ENTRY: the worker imports nothing of the host
RECORD_FORMAT = "reprobundle-zip-reproducer"
RECORD_VERSION = 1


def read_record(zf):
    """The zip's record (a dict), None where it has none (a zip from before 2026-12-06, or of a bundle with no
    stored answer); ValueError for one this runner cannot read."""
    if RECORD_ENTRY not in zf.namelist():
        return None
    try:
        record = json.loads(zf.read(RECORD_ENTRY).decode("utf-8"))
    except ValueError as e:
        raise ValueError("its %s is not JSON: %s" % (RECORD_ENTRY, e))
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT:
        raise ValueError("its %s is not a reproducer record" % RECORD_ENTRY)
    if record.get("format_version") != RECORD_VERSION:
        raise ValueError("its %s is version %r; this runner reads version %d: export the zip again with this "
                         "reprobundle" % (RECORD_ENTRY, record.get("format_version"), RECORD_VERSION))
    if record.get("criterion") not in ("outputs", "bits", "error", "time") or \
            record.get("mode") not in ("retrace", "frozen") or not isinstance(record.get("expected"), list):
        raise ValueError("its %s names no criterion, mode or expected outputs this runner knows" % RECORD_ENTRY)
    return record


def change_record(record, row):
    """The record of change `row` of a record that lists several (its `changes`); the record itself for row None
    (its first); ValueError where it lists no such change."""
    rows = [c for c in record.get("changes") or [] if isinstance(c, dict)]
    if row is None:
        return record
    found = [c for c in rows if c.get("row") == row] or ([record] if row == record.get("row", 1) else [])
    if not found:
        listed = ", ".join(str(c.get("row")) for c in rows) or str(record.get("row", 1))
        raise ValueError("--change %d: this zip checks change %s of its report" % (row, listed))
    chosen = found[0]
    if chosen.get("criterion") not in ("outputs", "bits", "error", "time") or \
            chosen.get("mode") not in ("retrace", "frozen") or not isinstance(chosen.get("expected"), list):
        raise ValueError("its change %d names no criterion, mode or expected outputs this runner knows" % row)
    return dict(chosen, changes=rows)


MODE_TEXT = {"retrace": "the program retraced by this JAX", "frozen": "the frozen module compiled by this JAX"}


def good_label(record):
    """What a judging zip checks against, said in a line."""
    return "jax %s, the last good release" % record.get("good")


def checks_line(record, zip_name):
    """The first line a judging zip prints: what it checks, against which release, and how (of a zip that checks
    several changes, which one: `change 2 of 2: ...`)."""
    rows = record.get("changes") or []
    which = "change %s of %d: " % (record.get("row", 1), len(rows)) if len(rows) > 1 else ""
    return which + _checks(record, zip_name)


def _checks(record, zip_name):
    good, bad, mode = record.get("good"), record.get("bad"), MODE_TEXT[record["mode"]]
    bad_said = bad if str(bad).startswith("JAX at commit") else "jax %s" % bad
    criterion = record["criterion"]
    if criterion == "time":
        a, b = (record.get("compare") or [good, bad])[:2]
        pick = " --change %s" % record["row"] if record.get("row", 1) != 1 else ""
        return ("checks: time: python %s%s --compare %s %s times jax %s (the last good release) against jax %s (the "
                "first bad), %s; run alone, it checks its outputs against jax %s's" % (zip_name, pick, a, b, a, b,
                                                                                      mode, good))
    what = {"outputs": "outputs within tolerance against jax %s's" % good,
            "bits": "every bit of the outputs against jax %s's" % good,
            "error": "that it runs, as on jax %s" % good}[criterion]
    return "checks: %s (the last good release), %s; %s showed the change" % (what, mode, bad_said)


def check_outputs(zf, expected, outputs, names, bits):
    """Each output leaf against the expected one (a manifest's or a record's leaf: dtype, shape, blob), with the
    dtype's tolerance; `bits`: any bit that differs counts. A dict: ok, bit_identical, max_abs_err, differing
    (elements whose bits differ), outside (elements beyond the tolerance), problem (the first, or "")."""
    import numpy as np

    found = {"ok": True, "bit_identical": True, "max_abs_err": 0.0, "differing": 0, "outside": 0, "problem": ""}
    if len(outputs) != len(expected):
        found.update(ok=False, bit_identical=False, max_abs_err=None,
                     problem="%d outputs, %d expected" % (len(outputs), len(expected)))
        return found
    for i, (leaf, out) in enumerate(zip(expected, outputs)):
        want = expected_array(zf, leaf)
        with open(out["path"], "rb") as f:
            got = np.frombuffer(f.read(), dtype=np_dtype(out["dtype"])).reshape(out["shape"])
        name = names[i] if i < len(names) else "output %d" % i
        _leaf(found, name, want, got, leaf["dtype"], bits)
    return found


def expected_array(zf, leaf):
    """An expected leaf's array, read from the zip's blob and checked against its digest."""
    import numpy as np

    digest = str(leaf["blob"]["digest"])
    hexd = digest.split(":", 1)[-1]
    data = zf.read("blobs/sha256/%s/%s" % (hexd[:2], hexd))
    if hashlib.sha256(data).hexdigest() != hexd:
        raise ValueError("blob %s in the zip is corrupt" % digest)
    return np.frombuffer(data, dtype=np_dtype(leaf["dtype"])).reshape(leaf["shape"])


def _leaf(found, name, want, got, dtype, bits):
    """One leaf's comparison, added to `found` (check_outputs)."""
    import numpy as np

    if got.shape != want.shape or got.dtype != want.dtype:
        found.update(ok=False, bit_identical=False)
        found["problem"] = found["problem"] or "%s: expected %s%s, got %s%s" % (
            name, want.dtype, list(want.shape), got.dtype, list(got.shape))
        return
    if got.tobytes() == want.tobytes():
        return
    found["bit_identical"] = False
    width = max(want.dtype.itemsize, 1)
    differing = int(np.count_nonzero((np.frombuffer(got.tobytes(), np.uint8) != np.frombuffer(
        want.tobytes(), np.uint8)).reshape(-1, width).any(axis=1)))
    rtol, atol = tolerance_for(dtype)
    a = want.astype(np.complex128 if want.dtype.kind == "c" else np.float64)
    b = got.astype(a.dtype)
    magnitude = np.abs(a)
    finite = magnitude[np.isfinite(magnitude)]
    atol = max(atol, scaled_atol(dtype, float(finite.max()) if finite.size else 0.0))
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, np.abs(a - b))
        outside = int(np.count_nonzero(~(diff <= atol + rtol * magnitude)))
    err = float(np.max(diff)) if diff.size else 0.0
    found["max_abs_err"] = max(found["max_abs_err"] or 0.0, err)
    found["differing"] += differing
    found["outside"] += outside
    if outside or bits:
        found["ok"] = False
        found["problem"] = found["problem"] or (
            "%s: %d elements outside tolerance (max abs err %.3g, rtol %g, atol %g)" % (name, outside, err, rtol, atol)
            if outside else "%s: %d of %d elements differ in their bits (max abs err %.3g, within the tolerance)"
            % (name, differing, want.size, err))


class ServeTimes(Control):
    """One side of `--compare` (worker/lockstep_compare.py's protocol) over the worker's lockstep timing: `ready`
    becomes `REPRO ready {...}` with the outputs' exit code (`judge()`), `step N` a batch of N timed calls whose
    mean is `REPRO ns X`, and anything else (`end`) finishes."""

    def __init__(self, judge):
        super().__init__()
        self.judge = judge

    def send(self, line):
        if line.startswith("ready"):
            import jax

            one = float(line.split()[1]) if len(line.split()) > 1 else 0.0
            super().send("REPRO ready " + json.dumps({"jax": jax.__version__, "exit": self.judge(), "one_ns": one}))
            return
        samples = [float(x) for x in line.split()]
        super().send("REPRO ns %r" % (sum(samples) / max(len(samples), 1)))

    def receive(self):
        words = (super().receive() or "").split()
        if len(words) == 2 and words[0] == "step" and words[1].isdigit():
            return "time " + words[1]
        return None


def written_outputs(folder, expected):
    """The outputs a job wrote to `folder` (job.py's out_N.bin), as result entries, read by the expected leaves'
    dtypes and shapes; None where one is missing or of another size."""
    import numpy as np

    found = []
    for i, leaf in enumerate(expected):
        path = os.path.join(folder, "out_%d.bin" % i)
        size = int(np.prod(leaf["shape"], dtype=np.int64)) * np_dtype(leaf["dtype"]).itemsize
        if not os.path.exists(path) or os.path.getsize(path) != size:
            return None
        found.append({"path": path, "dtype": leaf["dtype"], "shape": leaf["shape"]})
    return found
