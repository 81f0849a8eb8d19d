"""A bundle as a standalone Python reproducer (`reprobundle script`): one file that runs with only jax and numpy,
and the HLO files and `run_hlo_module` line for XLA's tracker (`script --hlo DIR`).

The script holds the piece's StableHLO text, its inputs and reference outputs inline, the tolerance of each output
(computed here from the reference by worker/tolerance.py, the one definition, and written as numbers), and the
program of bundle/script_runner.py, which says how it runs the module. Nothing from the bundle runs here, and no
text from the bundle reaches the script outside string literals (made by repr()) and comments (one line each,
escaped by text.clean): `tests/test_script.py` checks both with a hostile bundle.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import shlex
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..errors import ReproBundleError, UsageError
from ..text import clean
from ..units import human_ns
from ..worker.dtypes import WIDE_64, np_dtype
from ..worker.stablehlo import strip_mlir_locations
from ..worker.synthetic import synthetic_array
from ..worker.tolerance import scaled_atol, tolerance_for
from .model import commit_of_run, named_label
from .registry import Bundle, Registry, open_ref
from .script_runner import RUNNER

SCRIPT_LIMIT = 64 * 1024  # bytes: a script past this is refused (the zip carries any size)
LITERAL_ELEMENTS = 16  # an array of at most this many finite real values is written as a list
TIMED_CALLS = 10
_WIDTH = 100  # characters of a line of base64


class ScriptTooLargeError(UsageError):
    """The script would be larger than SCRIPT_LIMIT: the bundle's zip is the reproducer then."""


class NoScriptError(UsageError):
    """The bundle cannot be written as a standalone script (symbolic shapes, effects, several devices, no text)."""


@dataclass
class Difference:
    """What the script shows: `expect` outputs (bits: any bit), error or slower; the contenders seen, from the
    minimize labels and the stored runs; `show`: the environment (XLA_FLAGS...) under which it was seen;
    `measured`: analysis/slowdown.py's times of the stored replay (None: not timed together)."""

    expect: str = "outputs"
    bits: bool = False
    text: str = "outputs against the reference"
    show: dict[str, str] = field(default_factory=dict)
    seen: list[str] = field(default_factory=list)
    measured: dict | None = None
    # the run whose outputs are the reference: minimize's baseline contender where the piece came from minimize
    # (its outputs on the release the difference is measured from), else None: the packed reference
    baseline: dict | None = None
    releases: list[str] = field(default_factory=list)  # the stored runs' JAX releases, in order
    statuses: list[str] = field(default_factory=list)  # the stored runs' statuses, in order


# ------------------------------------------------------------------------------------------------ reading the bundle


def _zip_hint(bundle: Bundle) -> str:
    name, version = bundle.ref.name, bundle.ref.version
    return f"share the bundle's zip, which replays itself: reprobundle export {name}@{version} -o {name}-{version}.zip"


def module_text(registry: Registry, bundle: Bundle) -> str:
    """The bundle's StableHLO text without locations; NoScriptError where it cannot run as a script."""
    function = bundle.manifest["function"]
    fields: Any = function.get("fields") or {}
    why = None
    if not function.get("stablehlo_text"):
        why = "holds no StableHLO text"
    elif any(isinstance(d, str) for a in fields.get("in_avals", []) + fields.get("out_avals", []) for d in a["shape"]):
        why = "has symbolic shapes"
    elif fields.get("ordered_effects") or fields.get("unordered_effects"):
        why = "has effects"
    elif int(fields.get("nr_devices") or 1) > 1:
        why = "runs on several devices"
    if why:
        raise NoScriptError(f"{bundle.ref} {why}: a standalone script cannot run it", hint=_zip_hint(bundle))
    text = registry.get_blob(function["stablehlo_text"]).decode("utf-8", "replace")  # type: ignore[arg-type]
    return strip_mlir_locations(text)


def signature(bundle: Bundle) -> tuple[list[tuple[str, list[int]]], list[tuple[str, list[int]]], list[int]]:
    """(in avals of @main, out avals, the indexes of the inputs @main keeps) from the manifest's fields."""
    fields: Any = bundle.manifest["function"].get("fields") or {}
    ins = [(str(a["dtype"]), [int(d) for d in a["shape"]]) for a in fields.get("in_avals", [])]
    kept = [int(i) for i in fields.get("module_kept_var_idx", range(len(ins)))]
    outs = [(str(a["dtype"]), [int(d) for d in a["shape"]]) for a in fields.get("out_avals", [])]
    return [ins[i] for i in kept], outs, kept


def leaf_array(registry: Registry, leaf: Any) -> np.ndarray:
    dtype = np_dtype(leaf["dtype"])
    shape = tuple(int(d) for d in leaf["shape"])
    if "synthetic" in leaf:
        return np.asarray(synthetic_array(shape, dtype, leaf["synthetic"]))
    data = registry.get_blob(leaf["blob"])
    if len(data) != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        raise NoScriptError(f"a leaf's blob does not hold {leaf['dtype']}{list(shape)}",
                            hint="fetch the bundle again: reprobundle verify REF")
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def arrays(registry: Registry, bundle: Bundle) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(the inputs @main takes, the reference outputs)."""
    m = bundle.manifest
    _, _, kept = signature(bundle)
    inputs = [leaf_array(registry, leaf) for leaf in m["inputs"]["leaves"]]
    return [inputs[i] for i in kept], [leaf_array(registry, leaf) for leaf in m["reference"]["outputs"]]


def every_run(registry: Registry, bundle: Bundle) -> list[dict]:
    """Every stored run of the bundle, oldest first. A zip holds none: those of its copy in the default local store
    count (where `replay NAME.zip` and minimize put them)."""
    try:
        found = (Registry.open(None) if registry.store.read_only else registry).runs(bundle.ref.bundle_id)
    except ReproBundleError:
        found = []
    return sorted(found, key=lambda r: (str(r.get("created", "")), str(r.get("run_id", ""))))


def stored_runs(registry: Registry, bundle: Bundle) -> list[dict]:
    """The runs of the bundle's latest stored replay (its group), oldest first."""
    runs = every_run(registry, bundle)
    if not runs:
        return []
    group = runs[-1].get("group")
    return [r for r in runs if r.get("group") == group] if group else runs[-1:]


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")  # a variable a shell line can set (a stranger's record: no others)


def settings_env(run: dict) -> dict[str, str]:
    """The environment a run's contender set: XLA_FLAGS and other variables (values quoted where shown)."""
    settings = (run.get("contender") or {}).get("settings") or {}
    env = {str(k): str(v) for k, v in (settings.get("env") or {}).items() if _ENV_NAME.fullmatch(str(k))}
    flags = " ".join(str(f) for f in settings.get("xla_flags") or [])
    if flags:
        env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " " + flags).strip()
    return env


def run_line(run: dict) -> str:
    """One stored run as a line: its contender, JAX (a commit's environment: the commit), status and why."""
    jax, commit = (run.get("environment") or {}).get("jax"), commit_of_run(run)
    reason = str(run.get("reason") or "").strip()
    ran = f"JAX at commit {commit[:10]}" if commit else f"jax {jax}"
    return f"{named_label(run)} ({ran}): {run.get('status')}" + (f": {reason}" if reason else "")


def _median(samples: Sequence[int]) -> float | None:
    return float(np.median(samples)) if samples else None


def difference(bundle: Bundle, runs: list[dict], measured: dict | None = None) -> Difference:
    """What the bundle shows, from minimize's labels, else from its stored runs and the times they measured
    (`measured`, analysis/slowdown.py's: a contender settled slower, where no output differed, is a slowdown)."""
    prop = str((bundle.manifest.get("labels") or {}).get("minimized-property") or "")
    failed = [r for r in runs if r.get("status") in ("error", "crashed", "timeout")]
    slower = (measured or {}).get("slower")
    expect = _expect(prop, runs, failed, bool(slower))
    diff = Difference(expect=expect, bits="--bits" in prop, seen=[run_line(r) for r in runs],
                      show=_shown_under(runs, failed, bool(prop)), releases=_releases(runs),
                      statuses=[str(r.get("status")) for r in runs], measured=measured)
    if expect == "slower" and slower:
        diff.show = dict(slower["settings"])  # the slower contender's setting, never a workaround's
    diff.text = EXPECT_TEXT.get(expect, expect) + (", any bit" if diff.bits else "")
    diff.baseline = _baseline_run(expect, prop, runs)
    if diff.baseline is not None:
        diff.text = f"outputs against jax {diff.releases[0]}'s" + (", any bit" if diff.bits else "")
    return diff


def _expect(prop: str, runs: list[dict], failed: list[dict], slower: bool) -> str:
    """What minimize kept the piece for, else an error where some runs failed, a slowdown where a contender was
    settled slower and no output differed, else outputs."""
    if prop:
        return prop.split()[0]
    if 0 < len(failed) < len(runs):
        return "error"
    mismatched = any(r.get("status") == "mismatch" for r in runs)
    return "slower" if slower and not failed and not mismatched else "outputs"


def _releases(runs: list[dict]) -> list[str]:
    return [str((r.get("environment") or {}).get("jax") or r.get("requested")) for r in runs]


def _baseline_run(expect: str, prop: str, runs: list[dict]) -> dict | None:
    """minimize's baseline contender's run, whose outputs the difference is measured from (a piece minimize made
    for outputs, with its stored check of both contenders); None: the packed reference is."""
    if expect == "outputs" and prop and len(runs) >= 2 and runs[0].get("status") in ("ok", "mismatch") \
            and runs[0].get("outputs"):
        return runs[0]
    return None


EXPECT_TEXT = {"outputs": "outputs against the reference", "error": "an error where the reference ran",
               "slower": "time beside the stored replay's"}


def _shown_under(runs: list[dict], failed: list[dict], minimized: bool) -> dict[str, str]:
    """The settings of the run that showed the difference: the last mismatch or failure, else for a piece minimize
    kept (its contender last) the last run; none where no run differed (a variant there may be a workaround)."""
    worse = [r for r in runs if r.get("status") == "mismatch"] or failed or (runs[1:] if minimized else [])
    return settings_env(worse[-1]) if worse else {}


# ------------------------------------------------------------------------------------------------ stored times

_PYPI_VERSION = re.compile(r"\d+(\.\d+)*")  # a release pip can install by `jax==V` (not a nightly or local build)


def stored_times_lines(measured: dict | None) -> list[str]:
    """The stored replay's medians as lines: the machine and conditions, then each contender with its ratio, 95%
    interval and verdict against the baseline (workarounds named); [] when nothing was timed together. Unsafe
    text from the records: the caller escapes or repr()s each line."""
    if not measured:
        return []
    rows, slower, workarounds = measured["rows"], measured["slower"], measured["workarounds"]
    rounds = max(int(r["rounds"] or 0) for r in rows)
    busy = f"; other processes used {measured['busy']:.1f} CPUs" if measured.get("busy") else ""
    lines = [f"stored replay, timed together on the reporter's machine ({measured['machine']}; Python "
             f"{measured['python'] or 'not recorded'}; {rounds} rounds{busy}):"]
    for row in rows:
        role = " (a workaround)" if any(row is w for w in workarounds) else \
            " (the slowdown)" if row is slower else ""
        lines.append(f"  jax {row['label']}: median {human_ns(row['median_ns'])}" + (
            "  (the baseline)" if row["verdict"] is None else
            f"  {row['ratio']:.2f}x [{row['ci95'][0]:.2f}-{row['ci95'][1]:.2f}] "
            f"{row['verdict'] if row['settled'] else 'not settled'}{role}"))
    return lines


def compare_commands(measured: dict | None, fname: str) -> list[str]:
    """The commands that run the script on the compared releases (the baseline's and the slower one's, else every
    one stored), each in a fresh environment made by uv, then each workaround's; unsafe text (variables of the
    records) quoted by shlex."""
    if not measured:
        return []
    rows = measured["rows"]
    picked = [rows[0], measured["slower"]] if measured["slower"] else rows
    out: list[str] = []
    for row in [*picked, *measured["workarounds"]]:
        if not _PYPI_VERSION.fullmatch(row["jax"]):
            continue
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in (row["settings"] or {}).items())
        minor = ".".join(row["python"].split(".")[:2])  # uv finds or fetches a Python of that minor version
        python = f"--python {minor} " if _PYPI_VERSION.fullmatch(minor) else ""
        jaxlib = row["jaxlib"] if _PYPI_VERSION.fullmatch(row["jaxlib"]) else row["jax"]
        line = (f"{env} " if env else "") + (f"uv run --no-project {python}--with jax=={row['jax']} "
                                             f"--with jaxlib=={jaxlib} python {shlex.quote(fname)}")
        if line not in out:
            out.append(line)
    return out


def tolerances(reference: Sequence[np.ndarray], bits: bool) -> list[tuple[float, float]]:
    """Each output's (rtol, atol): the replay's rule (worker/tolerance.py: the dtype's floor, atol scaled to the
    leaf's largest finite |reference|); zero for `bits`."""
    out = []
    for ref in reference:
        if bits:
            out.append((0.0, 0.0))
            continue
        dtype = ref.dtype.name
        rtol, atol = tolerance_for(dtype)
        magnitude = np.abs(ref.astype(np.complex128 if ref.dtype.kind == "c" else np.float64))
        finite = magnitude[np.isfinite(magnitude)]
        out.append((rtol, max(atol, scaled_atol(dtype, float(finite.max()) if finite.size else 0.0))))
    return out


# ------------------------------------------------------------------------------------------------ source lines

_LINE = re.compile(r"\(([^():;]+\.py):(\d+)\)")


def source_lines(registry: Registry, bundle: Bundle) -> list[str]:
    """The kept ops and their source lines (minimize's `minimized-ops` label), with the line's code where the
    parent bundle stored its program; each an unsafe string for the caller to escape."""
    ops = str((bundle.manifest.get("labels") or {}).get("minimized-ops") or "")
    if not ops:
        return []
    files = _parent_files(registry, bundle)
    out = []
    for part in ops.split("; ")[:40]:
        m = _LINE.search(part)
        code = files.get(m.group(1), [])[int(m.group(2)) - 1:int(m.group(2))] if m else []
        out.append(part + (f":  {code[0].strip()}" if code else ""))
    return out


def _parent_files(registry: Registry, bundle: Bundle) -> dict[str, list[str]]:
    """The parent bundle's program files by name (their lines); none when it has no program or is not here."""
    parent = (bundle.manifest.get("labels") or {}).get("minimized-from-id") or bundle.manifest.get("parent")
    try:
        program: Any = registry.resolve(str(parent)).manifest["function"].get("program") or {}
        return {Path(f["path"]).name: registry.get_blob(f["blob"]).decode("utf-8", "replace").splitlines()
                for f in program.get("files", [])[:20] if f["blob"]["size"] < 1 << 20}
    except Exception:  # a parent that is missing or unreadable only loses the code beside the line
        return {}


# ------------------------------------------------------------------------------------------------ writing the script


def comment_line(text: object, limit: int = 160) -> str:
    """Text from the bundle as one comment line: every control character escaped (no newline can end it)."""
    return "# " + clean(text, limit)


def _bytes_literal(data: bytes) -> str:
    """zlib+base64 of `data` as a parenthesised run of string literals (base64's alphabet only)."""
    text = base64.b64encode(zlib.compress(data, 9)).decode("ascii")
    chunks = [text[i:i + _WIDTH] for i in range(0, len(text), _WIDTH)] or [""]
    return "(\n" + "".join(f'        "{c}"\n' for c in chunks) + "    )"


def array_literal(a: np.ndarray) -> str:
    """(dtype, shape, data) of script_runner's `_array`: a list when short, finite and real, else compressed bytes
    in byte-plane order (little-endian)."""
    a = np.require(a, requirements="C")  # not ascontiguousarray: it makes a scalar (rank 0) an array of shape (1,)
    head = f"({a.dtype.name!r}, {tuple(int(d) for d in a.shape)!r}, "
    values = a.ravel()
    if a.size <= LITERAL_ELEMENTS and a.dtype.kind in "biuf" and np.all(np.isfinite(values.astype(np.float64))):
        items = [bool(v) if a.dtype.kind == "b" else int(v) if a.dtype.kind in "iu" else float(v) for v in values]
        return head + repr(items) + ")"
    little = a.astype(a.dtype.newbyteorder("<")) if a.dtype.byteorder == ">" else a
    planes = np.frombuffer(little.tobytes(), np.uint8).reshape(-1, a.dtype.itemsize).T.tobytes()
    return head + _bytes_literal(planes) + ")"


WHOLE_OUTPUT_BYTES = 2048  # an output whose literal is at most this stays whole where the outputs do not fit


def reference_literals(good: Sequence[np.ndarray], bad: Sequence[np.ndarray] | None, bits: bool, room: int,
                       kept_why: str = "those that changed at the first bad release") -> list[str]:
    """Each output's reference as the script's literal: whole (array_literal) while all fit in `room` bytes, or
    where `bad` (the first bad release's outputs) is None; else the small ones whole and each larger one as a map of
    its sha256 and the elements kept: those that differ in `bad` (beyond the tolerance first, then in any bit), else
    its first ones, as many as the room left gives each (script_runner's `_output_check`)."""
    whole = [array_literal(a) for a in good]
    if bad is None or sum(len(x) for x in whole) <= room:  # nothing says which elements matter: all, or no script
        return whole
    large = [i for i, x in enumerate(whole) if len(x) > WHOLE_OUTPUT_BYTES]
    share = max(0, room - sum(len(x) for i, x in enumerate(whole) if i not in large)) // max(1, len(large))
    return [_partial_literal(good[i], bad[i] if i < len(bad) else None, bits, share, kept_why) if i in large else x
            for i, x in enumerate(whole)]


def _partial_literal(good: np.ndarray, bad: np.ndarray | None, bits: bool, room: int, kept_why: str) -> str:
    """One output as script_runner's map: its sha256 and the elements kept (_kept_elements), in `room` bytes."""
    ref = np.require(good, requirements="C")
    per_element = (4 if ref.size < 2**31 else 8) + ref.dtype.itemsize
    count = max(16, int(room / (1.45 * per_element)) - 8)  # base64 of zlib: ~4/3 of the bytes, and the frame
    at = _kept_elements(ref, bad, bits, count)
    why = kept_why if bad is not None and at.size and _changed_any(ref, bad) else "its first ones"
    index = at.astype(np.int32 if ref.size < 2**31 else np.int64)
    digest = hashlib.sha256(ref.tobytes()).hexdigest()
    return (f"{{'dtype': {ref.dtype.name!r}, 'shape': {[int(d) for d in ref.shape]!r}, 'sha256': {digest!r}, "
            f"'kept': {why!r},\n     'at': {array_literal(index)},\n     'values': {array_literal(ref.reshape(-1)[at])}}}")


def _changed_any(ref: np.ndarray, got: np.ndarray) -> bool:
    return got.shape == ref.shape and got.dtype == ref.dtype and ref.tobytes() != np.require(got, requirements="C") \
        .tobytes()


def _kept_elements(ref: np.ndarray, got: np.ndarray | None, bits: bool, count: int) -> np.ndarray:
    """Flat positions of at most `count` elements of `ref` to keep: where `got` differs beyond the tolerance, then in
    any bit (the same dtype and shape), else the first ones."""
    n = ref.size
    if got is None or got.shape != ref.shape or got.dtype != ref.dtype:
        return np.arange(min(n, count), dtype=np.int64)
    a = ref.reshape(-1).view(np.uint8).reshape(n, ref.dtype.itemsize)
    b = np.require(got, requirements="C").reshape(-1).view(np.uint8).reshape(n, ref.dtype.itemsize)
    changed = np.flatnonzero((a != b).any(axis=1))
    if not changed.size:
        return np.arange(min(n, count), dtype=np.int64)
    (rtol, atol), = tolerances([ref], False)
    x = ref.reshape(-1)[changed].astype(np.complex128 if ref.dtype.kind == "c" else np.float64)
    y = got.reshape(-1)[changed].astype(x.dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        beyond = ~(np.abs(x - y) <= atol + rtol * np.where(np.isfinite(x), np.abs(x), 0.0))
    order = np.concatenate([changed[beyond], changed[~beyond]]) if not bits else changed
    return np.sort(order[:count])


def list_literal(name: str, items: Sequence[str]) -> str:
    return f"{name} = [\n" + "".join(f"    {item},\n" for item in items) + "]\n"


def module_literal(text: str) -> str:
    """The module text as one string literal per line: readable, and repr() makes each one safe."""
    lines = text.rstrip("\n").split("\n")
    return "MODULE = \"\\n\".join([\n" + "".join(f"    {line!r},\n" for line in lines) + "])\n"


def _header(bundle: Bundle, diff: Difference, sources: list[str], fname: str) -> list[str]:
    """The comment block at the top: what it is, how to run it, what was seen. Bundle text: comments only."""
    env = " ".join(f"{k}={shlex.quote(v)}" for k, v in diff.show.items())
    lines = ["#!/usr/bin/env python3", "# A reproducer written by `reprobundle script`: it runs with only jax and numpy.",
             comment_line(f"Bundle: {bundle.ref} ({bundle.ref.bundle_id})"), *_exit_lines(diff.expect),
             comment_line(f"  python {fname}          # as the reference ran")]
    if env:
        lines.append(comment_line(f"  {env} python {fname}", 400))
        lines.append("#       (the setting under which the difference was seen)")
    stored = stored_times_lines(diff.measured)
    if stored:
        lines += [comment_line(line, 300) for line in stored]
        lines.append("# To compare, run it on each release (one release alone cannot show a slowdown):")
        lines += [comment_line("  " + c, 400) for c in compare_commands(diff.measured, fname)]
    lines += ["# How it runs the StableHLO below: reprobundle's worker mechanism (worker/serve.py, worker/rebuild.py),",
              "# not documented JAX API: the text serialized as a portable artifact, a jax.export.Exported rebuilt",
              "# around it from @main's signature, and its call jitted; the same on every release from 0.4.30.",
              "# The output check is the replay's (analysis/verdict.py) with the tolerances written below."]
    if sources:
        lines.append("# Ops kept by minimize, with their source lines:")
        lines += [comment_line("  " + s) for s in sources]
    if diff.seen:
        lines.append("# Seen in the stored replay of this bundle:")
        lines += [comment_line("  " + s, 300) for s in diff.seen]
    return lines


def _exit_lines(expect: str) -> list[str]:
    if expect != "slower":
        return ["# Exit code: 0 it behaves as the reference did, 1 it shows the difference, 3 it could not run."]
    return ["# Exit code: 0 it ran and its outputs are the reference's (on one release its time is printed beside the",
            "# stored medians, not judged), 1 its outputs differ, 3 it could not run. `--compare A B` times two",
            "# releases, each in its own process, and exits 1 when B is slower beyond the interval."]


@dataclass
class Reference:
    """Which outputs a script checks against: the packed reference by default; a stored run's (the last good
    release's, from an investigation's answer), named by `label`, judged bit for bit where `bits`."""

    run: dict | None = None
    label: str = "the reference"
    bits: bool | None = None
    bad: dict | None = None  # the first bad release's run: which elements of a large output the script keeps


def _reference(diff: Difference, given: Reference | None) -> Reference:
    """The outputs the script checks against: `given` (its bits setting applied to `diff`), else minimize's baseline
    run, else the packed reference."""
    if given is not None and given.run is not None:
        diff.bits = diff.bits if given.bits is None else given.bits
        diff.text = f"outputs against {given.label}" + (", any bit" if diff.bits else "")
        return given
    if diff.baseline is not None:  # minimize's baseline: the outputs the difference is measured from
        return Reference(diff.baseline, f"jax {diff.releases[0]}")
    return Reference()


def script_text(registry: Registry, bundle: Bundle, fname: str = "repro.py", measured: dict | None = None,
                reference_of: Reference | None = None, notes: Sequence[str] = ()) -> str:
    """The standalone script for the bundle; `measured`: analysis/slowdown.py's times of its stored runs (the
    medians and commands a slowdown's script prints); `reference_of`: the run whose outputs it checks against (a
    compiler change's last good release); `notes`: header lines (what this script cannot show). ScriptTooLargeError
    past SCRIPT_LIMIT, NoScriptError where a script cannot run it."""
    text = module_text(registry, bundle)
    ins, outs, _ = signature(bundle)
    inputs, reference = arrays(registry, bundle)
    diff = difference(bundle, stored_runs(registry, bundle), measured)
    chosen = _reference(diff, reference_of)
    if chosen.run is not None:
        reference = [leaf_array(registry, leaf) for leaf in chosen.run["outputs"]]
    bad = [leaf_array(registry, leaf) for leaf in chosen.bad["outputs"]] if chosen.bad and \
        chosen.bad.get("outputs") else None
    samples = (bundle.manifest["reference"].get("timing") or {}).get("samples_ns") or []
    wide = any(d in WIDE_64 for d, _ in ins + outs)
    header = _header(bundle, diff, source_lines(registry, bundle), fname)
    parts = ["\n".join(header[:2] + [comment_line(n, 300) for n in notes] + header[2:]), "",
             "import base64\nimport os\nimport sys\nimport time\nimport zlib\n\nimport numpy as np\n",
             f"BUNDLE = {str(bundle.ref)!r}", f"EXPECT = {diff.expect!r}", f"EXPECT_TEXT = {diff.text!r}",
             f"REFERENCE_LABEL = {chosen.label!r}",
             f"X64 = {wide!r}", f"TIMED_CALLS = {TIMED_CALLS!r}", f"REFERENCE_MEDIAN_NS = {_median(samples)!r}",
             f"IN_AVALS = {ins!r}", f"OUT_AVALS = {outs!r}", "",
             list_literal("STORED_TIMES", [repr(line) for line in stored_times_lines(diff.measured)]),
             list_literal("STORED_MEDIANS", [repr((r["jax"], r["label"], r["median_ns"], r["settings"]))
                                              for r in (diff.measured or {}).get("rows", [])]),
             list_literal("COMPARE", [repr(c) for c in compare_commands(diff.measured, fname)]),
             module_literal(text),
             list_literal("INPUTS", [array_literal(a) for a in inputs]), "REFERENCE_PLACE",
             f"TOLERANCES = {tolerances(reference, False)!r}  # (rtol, atol) per output",
             f"BITS = {diff.bits!r}  # any bit of an output that differs is the difference", RUNNER]
    room = SCRIPT_LIMIT - len("\n".join(parts).encode("utf-8")) - 256
    references = reference_literals(reference, bad, diff.bits, room)
    parts[parts.index("REFERENCE_PLACE")] = list_literal("REFERENCE", references)
    return checked_size(bundle, "\n".join(parts))


def checked_size(bundle: Bundle, script: str) -> str:
    """`script`, or ScriptTooLargeError past SCRIPT_LIMIT."""
    size = len(script.encode("utf-8"))
    if size > SCRIPT_LIMIT:
        raise ScriptTooLargeError(f"the script of {bundle.ref} would be {size // 1024} KiB, over the "
                                  f"{SCRIPT_LIMIT // 1024} KiB a pasted reproducer may take (its inputs and reference "
                                  "outputs are inline)", hint=_zip_hint(bundle))
    return script


# ------------------------------------------------------------------------------------------------ HLO for XLA

HLO_ARTIFACTS = (("before", "hlo_before"), ("after", "hlo_after"))  # (file suffix, artifact): before/after passes


def hlo_texts(registry: Registry, bundle: Bundle) -> dict[str, str]:
    """The bundle's HLO before and after XLA's optimization passes (the reference run's artifacts), as stored."""
    artifacts = bundle.manifest.get("artifacts") or {}
    return {suffix: registry.get_blob(artifacts[name]["blob"]).decode("utf-8", "replace")  # type: ignore[literal-required]
            for suffix, name in HLO_ARTIFACTS if name in artifacts}


def write_text(path: Path, text: str) -> None:
    """`text` written to `path` atomically (a temporary file beside it, renamed over it: a reader sees the old text or
    the new one, never part of it; a signal's watchdog removes the temporary file), or one UsageError saying why it
    cannot be (no such folder, a folder, no right)."""
    from ..errors import space_for
    from ..store.base import make_temp_file, unlink_quietly
    from ..store.watchdog import track, untrack

    tmp = None
    try:
        with space_for(path.parent, len(text), f"writing {path.name}"):
            fd, tmp = make_temp_file(path.parent, f".{path.name}.part-")
            track(tmp)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
            os.replace(tmp, path)
    except OSError as e:
        if isinstance(e, ReproBundleError):  # a full disk: said as such
            raise
        raise UsageError(f"cannot write {path}: {e.strerror or e}",
                         hint="give the path of a file in a folder that exists") from None
    finally:
        if tmp is not None:
            unlink_quietly(tmp)
            untrack(tmp)


def file_stem(bundle: Bundle) -> str:
    """NAME-V with nothing but letters, digits, `.`, `_` and `-` (a file name from a stranger's bundle)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"{bundle.ref.name}-{bundle.ref.version}").lstrip(".") or "bundle"


def run_hlo_module_line(bundle: Bundle, diff: Difference, path: str) -> str:
    """The `run_hlo_module` command that compiles the HLO before optimization with the setting that shows the
    difference and compares its result with XLA's interpreter on generated inputs."""
    backend = str((bundle.manifest.get("environment") or {}).get("backend") or "cpu")
    platform = {"cpu": "CPU", "gpu": "CUDA", "cuda": "CUDA", "rocm": "ROCM"}.get(backend.lower(), backend.upper())
    env = {k: v for k, v in diff.show.items() if k != "XLA_FLAGS"}
    flags = shlex.split(diff.show.get("XLA_FLAGS", ""))
    words = [f"{k}={shlex.quote(v)}" for k, v in env.items()] + [
        "run_hlo_module", f"--platform={platform}", "--reference_platform=interpreter", "--input_format=hlo"]
    return " ".join(words + [shlex.quote(f) for f in flags] + [shlex.quote(path)])


def write_hlo(ref: str, folder: str | Path, *, store: str | None = None) -> dict:
    """NAME-V.before.hlo and NAME-V.after.hlo in `folder`, and the run_hlo_module line: {"bundle", "files",
    "command"}; NoScriptError when the bundle stores neither."""
    registry, bundle = open_ref(ref, store)
    texts = hlo_texts(registry, bundle)
    if not texts:
        raise NoScriptError(f"{bundle.ref} stores no HLO (its reference run kept none)", hint=_zip_hint(bundle))
    out = Path(folder)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UsageError(f"cannot make the folder {out}: {e.strerror or e}", hint="--hlo names a folder to write "
                         "the HLO files into (made if missing)") from None
    files = {}
    for suffix, text in texts.items():
        path = out / f"{file_stem(bundle)}.{suffix}.hlo"
        write_text(path, text)
        files[suffix] = str(path)
    diff = difference(bundle, stored_runs(registry, bundle))
    source = files.get("before") or files["after"]
    return {"bundle": str(bundle.ref), "files": files, "command": run_hlo_module_line(bundle, diff, source)}
