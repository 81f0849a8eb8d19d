"""The reproducer of a lowering change: the program the bundle carries (pack SCRIPT.py:FACTORY), as one script that
any release traces and runs itself, its outputs checked against the last good release's (a stored run of it,
retraced). The frozen module cannot show such a change (every release runs the same StableHLO): only the program,
lowered by the release under test, can. It exits 1 on the bad release and 0 on the good one.

The program's files and the bundle's inputs sit in the script as string literals (repr) and array literals (the
frozen script's `array_literal`, zlib-compressed); where the bundle's inputs would take more than half the room a
script has (SCRIPT_LIMIT), the factory's own are used, made by the program's seed, and the script checks each
one's dtype, shape and sha256 against the bundle's before it runs (exit 3 where they are not the bundle's); an output
too large to write whole is its sha256 and the elements that changed at the first bad release
(reproducer.reference_literals). Nothing of the program runs here: its imports are read with `ast`.
"""

from __future__ import annotations

import ast
import hashlib
import shlex
import sys
from typing import Any, Mapping, Sequence

import numpy as np

from ..text import clean
from .frozen_script import (
    SCRIPT_LIMIT,
    array_literal,
    checked_size,
    comment_line,
    leaf_array,
    list_literal,
    reference_literals,
    tolerances,
)
from .model import commit_of_run, release_of
from .registry import Bundle, Registry
from .script_runner import PROGRAM_RUNNER

NOT_NEEDED = {"jax", "jaxlib", "numpy", "ml_dtypes", "ml-dtypes", "opt_einsum", "opt-einsum", "scipy"}


def program_of(bundle: Bundle) -> dict | None:
    """The program map the bundle carries (manifest 3), or None."""
    found = (bundle.manifest.get("function") or {}).get("program")
    return found if isinstance(found, dict) and found.get("files") else None


def program_files(registry: Registry, program: dict) -> list[tuple[str, str]]:
    """(path, text) of each file of the program, as packed."""
    return [(str(f["path"]), registry.get_blob(f["blob"]).decode("utf-8", "replace")) for f in program["files"]]


def needed_packages(program: dict, files: Sequence[tuple[str, str]]) -> list[str]:
    """What the program needs beyond jax and numpy: the packages pack recorded (`name==version`), else the top-level
    modules its files import that are neither the standard library's nor its own files."""
    packages = program.get("packages") or {}
    if isinstance(packages, dict) and packages:
        return sorted(f"{name}=={version}" for name, version in packages.items() if name.lower() not in NOT_NEEDED)
    own = {path.rsplit("/", 1)[-1].removesuffix(".py") for path, _ in files} | {
        path.split("/", 1)[0] for path, _ in files if "/" in path}
    found = {name for _, text in files for name in imported_modules(text)}
    return sorted(found - own - NOT_NEEDED - set(sys.stdlib_module_names) - {"__future__"})


def imported_modules(text: str) -> set[str]:
    """The top-level modules a Python file imports (absolute imports; none where it does not parse)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def run_outputs(registry: Registry, run: dict) -> list[np.ndarray]:
    """A stored run's outputs as arrays."""
    return [leaf_array(registry, leaf) for leaf in run.get("outputs") or []]


def value_changes(good: Sequence[np.ndarray], bad: Sequence[np.ndarray], bits: bool = False,
                  limit: int = 4) -> list[dict]:
    """Each output that differs between two runs' outputs, with the first few elements that differ (beyond the
    replay's tolerance of `good`, or any bit for `bits`): {"output", "dtype", "shape", "count", "size", "at",
    "expected", "got", "beyond" (of `count`, those outside the tolerance), "ulps" ([largest, median] distance in
    units in the last place among the finite floats that differ, else None)}, each value written with the digits
    its dtype needs to tell it from its neighbours; or for a changed dtype or shape {"output", "expected_kind",
    "got_kind"}."""
    out: list[dict] = []
    for i, (ref, got, (rtol, atol)) in enumerate(zip(good, bad, tolerances(list(good), False))):
        if ref.shape != got.shape or ref.dtype != got.dtype:
            out.append({"output": i, "expected_kind": f"{ref.dtype}{list(ref.shape)}",
                        "got_kind": f"{got.dtype}{list(got.shape)}"})
            continue
        a = ref.astype(np.complex128 if ref.dtype.kind == "c" else np.float64).ravel()
        b = got.astype(a.dtype).ravel()
        with np.errstate(invalid="ignore", over="ignore"):
            diff = np.where((a == b) | (np.isnan(a) & np.isnan(b)), 0.0, np.abs(a - b))
            beyond = (diff != 0) & ~(diff <= atol + rtol * np.where(np.isfinite(a), np.abs(a), 0.0))
        bad_at = np.flatnonzero(diff != 0 if bits else beyond)
        if bad_at.size:
            at = bad_at[:limit]
            out.append({"output": i, "dtype": ref.dtype.name, "shape": list(ref.shape), "count": int(bad_at.size),
                        "size": int(a.size), "at": [int(k) for k in at], "beyond": int(np.count_nonzero(beyond)),
                        "ulps": ulp_distances(ref.ravel()[bad_at], got.ravel()[bad_at]),
                        "expected": [_value(ref.ravel()[k]) for k in at], "got": [_value(got.ravel()[k]) for k in at]})
    if len(bad) != len(good):
        out.append({"output": min(len(good), len(bad)), "expected_kind": f"{len(good)} outputs",
                    "got_kind": f"{len(bad)} outputs"})
    return out


def ulp_distances(expected: np.ndarray, got: np.ndarray) -> list[int] | None:
    """[largest, median] of how many representable values lie between each pair of finite real floats (units in
    the last place); None for other dtypes or where no pair is finite."""
    if expected.dtype.kind != "f" or expected.dtype.itemsize not in (2, 4, 8) or not expected.size:
        return None
    finite = np.isfinite(expected.astype(np.float64)) & np.isfinite(got.astype(np.float64))
    if not finite.any():
        return None
    width = {2: np.int16, 4: np.int32, 8: np.int64}[expected.dtype.itemsize]
    x, y = (_ordered(np.ascontiguousarray(v[finite]).view(width)) for v in (expected, got))
    with np.errstate(over="ignore"):
        same_sign = (x >= 0) == (y >= 0)
        apart = np.where(same_sign, np.abs(np.where(same_sign, x - y, 0)).astype(np.float64),
                         np.abs(x.astype(np.float64)) + np.abs(y.astype(np.float64)))
    return [int(apart.max()), int(np.median(apart))]


def _ordered(bits: np.ndarray) -> np.ndarray:
    """Sign-magnitude float bits as int64 in the order of the floats they are (neighbours differ by 1; -0 and +0
    are both 0)."""
    wide = bits.astype(np.int64)
    low = np.int64(np.iinfo(bits.dtype).min)
    return np.where(wide < 0, low - wide, wide)


def ulps_text(change: dict) -> str:
    """`, up to 3 ULP` for floats whose last bits changed (value_changes' `ulps`), else nothing."""
    ulps = change.get("ulps")
    return f", up to {ulps[0]} ULP" if isinstance(ulps, list) and ulps and change.get("beyond") == 0 else ""


def _value(x: Any) -> str:
    """A value as a person reads it, with the digits its own dtype needs to tell it from its neighbours (numpy's
    shortest round-trip form: two floats whose bits differ never read alike)."""
    if np.iscomplexobj(x):
        return str(complex(x))
    if np.asarray(x).dtype.kind == "b":
        return str(bool(x))
    if np.asarray(x).dtype.kind == "f":
        return str(x)
    return f"{float(x):.7g}"


def change_lines(changes: Sequence[dict], good: str, bad: str) -> list[str]:
    """The changes as lines a person reads: `output 0 (float32[3]): jax 0.4.35 gave inf, inf, inf; jax 0.4.36
    gives nan, nan, nan (3 of 3 elements)`."""
    lines = []
    for c in changes:
        if "expected_kind" in c:
            lines.append(f"output {c['output']}: jax {good} gave {c['expected_kind']}, jax {bad} gives {c['got_kind']}")
            continue
        where = "" if c["count"] == c["size"] and c["size"] <= len(c["at"]) else \
            f" at {', '.join(f'[{k}]' for k in c['at'])}"
        lines.append(f"output {c['output']} ({c['dtype']}{c['shape']}){where}: jax {good} gave "
                     f"{', '.join(c['expected'])}; jax {bad} gives {', '.join(c['got'])} ({c['count']} of {c['size']} "
                     "elements differ)")
    return lines


def uv_line(version: str, packages: Sequence[str], fname: str, python: str | None = None) -> str:
    """The command that runs the script in a fresh environment of `version` (uv), with the program's packages;
    `python`: the Python minor that release needs where the reporter's is not one it takes (`--python 3.12`)."""
    extra = "".join(f" --with {shlex.quote(p)}" for p in packages)
    py = f" --python {shlex.quote(python)}" if python else ""
    return (f"uv run --no-project{py} --with jax=={shlex.quote(version)} --with jaxlib=={shlex.quote(version)}{extra} "
            f"python {shlex.quote(fname)}")


def program_script_text(registry: Registry, bundle: Bundle, good_run: dict, bad_run: dict | None,
                        fname: str = "repro.py", bits: bool = False, pythons: Mapping[str, str] | None = None) -> str:
    """The program's reproducer: its outputs on the release that runs it against `good_run`'s (the last good
    release, retraced); `bad_run` (the first bad release's) gives the header's "got" values, and which elements of an
    output too large to write whole the script keeps; `pythons`: the Python a release needs, for its uv line
    (envs/package_index.python_to_name). The bundle's inputs are written where they fit in half the
    room the script has left, else the factory makes them from its seed and the script checks their digests."""
    program = program_of(bundle)
    if program is None:
        raise ValueError("the bundle carries no program")
    files = program_files(registry, program)
    good_label, bad_label = _release(good_run), _release(bad_run) if bad_run else "the first bad release"
    good = run_outputs(registry, good_run)
    bad = run_outputs(registry, bad_run) if bad_run else None
    leaves = [leaf_array(registry, leaf) for leaf in bundle.manifest["inputs"]["leaves"]]
    packages = needed_packages(program, files)
    changes = value_changes(good, bad, bits) if bad is not None else []
    pythons = pythons or {}
    header = _header(bundle, program, (packages, fname, pythons.get(good_label)), (good_label, bad_label),
                     change_lines(changes, good_label, bad_label), _bad_line(bad_run, packages, fname, pythons), bits)
    parts = ["\n".join(header), "",
             "import base64\nimport os\nimport sys\nimport zlib\n\nimport numpy as np\n",
             f"BUNDLE = {str(bundle.ref)!r}", f"GOOD_LABEL = {f'jax {good_label} (last good)'!r}",
             f"X64 = {wide_dtypes(bundle)!r}", f"PROGRAM_SCRIPT = {str(program['script'])!r}",
             f"FACTORY = {str(program.get('factory') or 'make')!r}",
             f"STATIC = {[s for s in program.get('static') or [] if isinstance(s, (int, str))]!r}", "",
             list_literal("PROGRAM_FILES", [repr((path, text)) for path, text in files]), "INPUTS_PLACE",
             "OUTPUTS_PLACE", f"TOLERANCES = {tolerances(good, False)!r}  # (rtol, atol) per output",
             f"BITS = {bits!r}  # any bit of an output that differs is the difference", PROGRAM_RUNNER]
    room = SCRIPT_LIMIT - len("\n".join(parts).encode("utf-8")) - 512
    written = inputs_written(leaves, good, room)
    parts[parts.index("INPUTS_PLACE")] = written
    outputs = reference_literals(good, bad, bits, room - len(written.encode("utf-8")),
                                 f"those that changed at jax {clean(bad_label, 60)}")
    parts[parts.index("OUTPUTS_PLACE")] = list_literal("GOOD_OUTPUTS", outputs)
    return checked_size(bundle, "\n".join(parts))


def wide_dtypes(bundle: Bundle) -> bool:
    """Whether the program runs with x64 (a 64-bit input or output)."""
    fields: Any = bundle.manifest["function"].get("fields") or {}
    return any(str(a["dtype"]) in ("float64", "int64", "uint64", "complex128")
               for a in fields.get("in_avals", []) + fields.get("out_avals", []))


def inputs_written(leaves: Sequence[np.ndarray], good: Sequence[np.ndarray], room: int) -> str:
    """INPUTS and INPUT_CHECKS: the bundle's inputs where they fit (with the outputs whole, or in half the room),
    else None and each one's (dtype, shape, sha256): the factory makes them from its seed, the script checks them."""
    inputs = [array_literal(a) for a in leaves]
    size = sum(len(x) for x in inputs)
    if size + sum(a.nbytes for a in good) * 1.4 <= room or size <= room // 2:
        return list_literal("INPUTS", inputs) + "INPUT_CHECKS = None\n"
    checks = [(a.dtype.name, [int(d) for d in a.shape],
               hashlib.sha256(np.require(a, requirements="C").tobytes()).hexdigest()) for a in leaves]
    return ("INPUTS = None  # too large to write here: the factory makes them from its seed\n" +
            list_literal("INPUT_CHECKS", [repr(c) for c in checks]))


def _release(run: dict) -> str:
    return release_of(run) or str(run.get("requested") or "the release its run did not record")


def _bad_line(bad_run: dict | None, packages: list[str], fname: str, pythons: Mapping[str, str]) -> str:
    """How to run the script on the bad side: a release through uv; JAX at a commit (no package of it) in the
    environment `envs --add-commit` makes over the jaxlib its run had."""
    commit = commit_of_run(bad_run) if bad_run else None
    if bad_run is None or commit is None and not release_of(bad_run):  # no release to name: no line to run
        return "(no stored run of the first bad release names it: run it there, where it exits 1)"
    if commit is None:
        bad = _release(bad_run)
        return f"{uv_line(bad, packages, fname, pythons.get(bad))}   # exit 1"
    over = str((bad_run or {}).get("environment", {}).get("jaxlib") or "RELEASE")
    return (f"reprobundle envs --add-commit {commit[:12]} --over {over} --jax-repo JAX_CLONE, then "
            f"PATH_IT_PRINTS/bin/python {shlex.quote(fname)}   # exit 1 (JAX at commit {commit[:10]})")


def _header(bundle: Bundle, program: dict, how: tuple[list[str], str, str | None], releases: tuple[str, str],
            changes: list[str], bad_line: str, bits: bool) -> list[str]:
    """The comment block: what it is, what it needs, its exit codes and the uv lines (`how`: the program's packages,
    the script's file name, the Python the good release needs), what changed."""
    packages, fname, python = how
    good, bad = releases
    needs = "jax and numpy" + (f", and what the program imports: {', '.join(packages)}" if packages else
                               " (the program imports nothing else)")
    same = "the same bits as" if bits else "within the tolerance of"
    lines = ["#!/usr/bin/env python3",
             "# A reproducer written by `reprobundle script`: the reporter's own program, traced and run by the jax",
             "# installed here, its outputs checked against those of jax " + clean(good, 40) + " (the last good release).",
             comment_line(f"Program: {program['script']}:{program.get('factory') or 'make'} (bundle {bundle.ref})"),
             comment_line(f"Needs: {needs}", 400),
             comment_line(f"Exit code: 0 the outputs are {same} jax {good}'s, 1 they differ (as on jax {bad})"
                          + (", any bit: it says how many elements and by how much" if bits else "")
                          + ", 3 it could not run.", 300),
             comment_line(f"  {uv_line(good, packages, fname, python)}   # exit 0", 400),
             comment_line(f"  {bad_line}", 400)]
    if changes:
        lines.append("# What changed (the stored runs of both releases, retraced):")
        lines += [comment_line("  " + line, 400) for line in changes[:6]]
    lines += ["# Running it runs the program below (the reporter's code), as running their program would: it is",
              "# written to a temporary folder and imported from there."]
    return lines
