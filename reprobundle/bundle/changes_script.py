"""The reproducer of every change a report lists, the headline first (`reprobundle script` and `issue` where an
investigation found more than one change, or a slowdown only the retraced program shows): one script that runs with
only jax and numpy (and what the program imports), each change checked on its own by `--change N`, in the mode it
was found in: the frozen module compiled by the jax installed here (a compiler's change), or the program the bundle
carries traced by it (JAX's lowering). An outputs, bits or error change exits 1 on its first bad release and 0 on its
last good one (its outputs checked against that release's stored ones, any bit for a change of bits); a slowdown is
judged between two releases by `--compare A B` (its two by default: each side this script in a process of its own,
timed in lockstep by worker/lockstep_compare.py's code), exit 1 while the second is slower beyond the interval.

The data are written as the other scripts write theirs (bundle/frozen_script.py: string and array literals, one-line
comments, nothing from the bundle outside them); the program part is bundle/changes_runner.py's text over
bundle/script_runner.py's. `change_commands` is the one definition of the command lines each change's check is run
by, with the exit code each gives: the script's header and the issue's first screen print the same lines.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Mapping, Sequence

from .changes_runner import CHANGES_MAIN
from .frozen_script import (
    SCRIPT_LIMIT,
    TIMED_CALLS,
    NoScriptError,
    array_literal,
    checked_size,
    comment_line,
    leaf_array,
    list_literal,
    module_literal,
    module_text,
    reference_literals,
    signature,
    tolerances,
)
from .program_script import (
    inputs_written,
    needed_packages,
    program_files,
    program_of,
    run_outputs,
    uv_line,
    wide_dtypes,
)
from .registry import Bundle, Registry
from .script_runner import COMMON, FROZEN_CORE, FROZEN_MAIN, LOCKSTEP, PROGRAM_CORE

CHANGES_RUNNER = COMMON + FROZEN_CORE + PROGRAM_CORE + CHANGES_MAIN + LOCKSTEP + FROZEN_MAIN
WHAT = {"outputs": "outputs beyond the tolerance", "bits": "the last bits", "error": "an error where it ran",
        "time": "slower"}
MODE_WORDS = {"frozen": "the frozen module compiled by each release", "retrace": "the program traced by each release"}


@dataclass
class ChangeCheck:
    """One change the script reproduces: its number in the report (1: the headline), criterion (outputs, bits,
    error, time), mode (frozen, retrace), its last good and first bad release, and their stored runs in that mode
    (the last good one's outputs are what it is checked against; a slowdown's may be None)."""

    row: int
    criterion: str
    mode: str
    good: str
    bad: str
    good_run: dict | None = None
    bad_run: dict | None = None

    @property
    def what(self) -> str:
        return f"{WHAT.get(self.criterion, self.criterion)} from jax {self.bad} (last good {self.good}), " \
               f"{MODE_WORDS.get(self.mode, self.mode)}"


def change_commands(check: ChangeCheck, fname: str, packages: Sequence[str] = (),
                    pythons: Mapping[str, str] | None = None) -> list[tuple[str, int]]:
    """The lines that run a change's check, each with the exit code it gives: a slowdown's `--compare` of its two
    releases (exit 1), else the script on its last good release (exit 0) and on its first bad one (exit 1), each in
    a fresh environment made by uv."""
    pick = "" if check.row == 1 else f" --change {check.row}"
    name = shlex.quote(fname)
    if check.criterion == "time":
        return [(f"python {name}{pick} --compare {shlex.quote(check.good)} {shlex.quote(check.bad)}", 1)]
    pythons = pythons or {}
    return [(uv_line(release, packages, fname, pythons.get(release)) + pick, code)
            for release, code in ((check.good, 0), (check.bad, 1))]


def changes_script_text(registry: Registry, bundle: Bundle, checks: Sequence[ChangeCheck], fname: str = "repro.py",
                        pythons: Mapping[str, str] | None = None) -> str:
    """The script that reproduces `checks` (module docstring); NoScriptError where a change needs what the bundle
    lacks (a retraced change and no program), ScriptTooLargeError past SCRIPT_LIMIT."""
    program, files = _program_needed(registry, bundle, checks)
    frozen = any(c.mode == "frozen" for c in checks)
    packages = needed_packages(program, files) if program is not None and files else []
    references, index = _references(registry, checks)
    leaves = [leaf_array(registry, leaf) for leaf in bundle.manifest["inputs"]["leaves"]]
    ins, outs, kept = signature(bundle)
    changes = [_change_entry(c, index.get(c.row), references) for c in checks]
    parts = ["\n".join(_header(bundle, checks, fname, packages, pythons or {})), "",
             "import base64\nimport os\nimport sys\nimport time\nimport zlib\n\nimport numpy as np\n",
             f"BUNDLE = {str(bundle.ref)!r}", f"X64 = {wide_dtypes(bundle)!r}", f"TIMED_CALLS = {TIMED_CALLS!r}",
             f"PACKAGES = {list(packages)!r}  # what the program imports beyond jax and numpy", "",
             list_literal("CHANGES", [repr(c) for c in changes]),
             _module_part(registry, bundle, frozen, (ins, outs, kept)), _program_part(program, files), "INPUTS_PLACE",
             "REFERENCES_PLACE", CHANGES_RUNNER]
    room = SCRIPT_LIMIT - len("\n".join(parts).encode("utf-8")) - 512
    written = list_literal("INPUTS", [array_literal(a) for a in leaves]) + "INPUT_CHECKS = None\n" if frozen else \
        inputs_written(leaves, [a for _, good, _, _ in references for a in good], room)
    parts[parts.index("INPUTS_PLACE")] = written
    parts[parts.index("REFERENCES_PLACE")] = _references_literal(references, room - len(written.encode("utf-8")))
    return checked_size(bundle, "\n".join(parts))


def _program_needed(registry: Registry, bundle: Bundle, checks: Sequence[ChangeCheck]) -> tuple[dict | None, list]:
    """(the program, its files) where a change is retraced, else (the program or None, []); NoScriptError where a
    change is retraced and the bundle carries no program."""
    program = program_of(bundle)
    if not any(c.mode == "retrace" for c in checks):
        return program, []
    if program is None:
        raise NoScriptError(f"{bundle.ref} carries no program: a change in JAX's lowering needs it",
                            hint="share the bundle's zip")
    return program, program_files(registry, program)


def _change_entry(check: ChangeCheck, reference: int | None, references: list[tuple]) -> dict:
    """A change as the script's CHANGES lists it (bundle/changes_runner.py reads it)."""
    return {"row": check.row, "criterion": check.criterion, "mode": check.mode, "good": check.good,
            "bad": check.bad, "reference": reference, "what": check.what,
            "label": references[reference][0] if reference is not None else f"jax {check.good}"}


def _references(registry: Registry, checks: Sequence[ChangeCheck]) -> tuple[list[tuple], dict[int, int]]:
    """([(label, the last good run's outputs, the first bad run's outputs or None, bits)], row -> its index): one
    reference a stored run, shared by the changes checked against it (which elements of an output too large to
    write whole it keeps: those that changed at the first bad release, any bit where a change of bits is checked)."""
    references: list[tuple] = []
    by_run: dict[str, int] = {}
    index: dict[int, int] = {}
    for c in checks:
        if c.good_run is None or not c.good_run.get("outputs"):
            continue
        key = str(c.good_run.get("run_id"))
        if key not in by_run:
            bad = run_outputs(registry, c.bad_run) if c.bad_run and c.bad_run.get("outputs") else None
            label = f"jax {c.good} (last good), {'the frozen module' if c.mode == 'frozen' else 'retraced'}"
            by_run[key] = len(references)
            references.append((label, run_outputs(registry, c.good_run), bad, c.criterion == "bits"))
        elif c.criterion == "bits":
            references[by_run[key]] = (*references[by_run[key]][:3], True)
        index[c.row] = by_run[key]
    return references, index


def _references_literal(references: list[tuple], room: int) -> str:
    """REFERENCES: each reference's label, outputs (whole where they fit in its share of `room`, else their sha256
    and the elements that changed at the first bad release) and tolerances."""
    share = max(0, room) // max(1, len(references))
    items = []
    for label, good, bad, bits in references:
        outputs = reference_literals(good, bad, bits, share, "those that changed at the first bad release")
        items.append("{'label': %r, 'tolerances': %r,\n     'outputs': [\n        %s,\n    ]}"
                     % (label, tolerances(good, False), ",\n        ".join(outputs)))
    return list_literal("REFERENCES", items)


def _module_part(registry: Registry, bundle: Bundle, frozen: bool, avals: tuple) -> str:
    """MODULE, IN_AVALS, OUT_AVALS, KEPT of the frozen module where a change is checked on it, else None."""
    if not frozen:
        return "MODULE = IN_AVALS = OUT_AVALS = KEPT = None  # no change here is checked on the frozen module\n"
    ins, outs, kept = avals
    return (f"IN_AVALS = {ins!r}\nOUT_AVALS = {outs!r}\nKEPT = {kept!r}  # the inputs @main keeps, of INPUTS\n" +
            module_literal(module_text(registry, bundle)))


def _program_part(program: dict | None, files: list[tuple[str, str]]) -> str:
    """The program's files, script, factory and static arguments where a change is checked on it, else None."""
    if not files or program is None:
        return "PROGRAM_FILES = PROGRAM_SCRIPT = FACTORY = STATIC = None  # no change here is retraced\n"
    static = [s for s in program.get("static") or [] if isinstance(s, (int, str))]
    return (f"PROGRAM_SCRIPT = {str(program['script'])!r}\nFACTORY = {str(program.get('factory') or 'make')!r}\n"
            f"STATIC = {static!r}\n" + list_literal("PROGRAM_FILES", [repr((p, t)) for p, t in files]))


def _header(bundle: Bundle, checks: Sequence[ChangeCheck], fname: str, packages: Sequence[str],
            pythons: Mapping[str, str]) -> list[str]:
    """The comment block: what it is, what it needs, each change with the lines that check it and their exit
    codes."""
    needs = "jax and numpy" + (f", and what the program imports: {', '.join(packages)}" if packages else "")
    lines = ["#!/usr/bin/env python3",
             comment_line(f"A reproducer written by `reprobundle script`: the {len(checks)} change"
                          f"{'s' if len(checks) != 1 else ''} the report of {bundle.ref} lists, the headline first, "
                          "each checked on its own (--change N) as it was found.", 300),
             comment_line(f"Needs: {needs}", 400),
             "# Exit code: 0 as the change's last good release, 1 as its first bad one (a slowdown: --compare A B,",
             "# while B is slower beyond the interval), 3 it could not run, 2 bad arguments."]
    for c in checks:
        lines.append(comment_line(f"Change {c.row}: {c.what}:", 300))
        lines += [comment_line(f"  {line}   # exit {code}", 400)
                  for line, code in change_commands(c, fname, packages, pythons)]
    if any(c.mode == "retrace" for c in checks):
        lines += ["# Running a retraced change runs the program below (the reporter's code), as running their program",
                  "# would: it is written to a temporary folder and imported from there."]
    if any(c.mode == "frozen" for c in checks):
        lines += ["# The frozen module runs by reprobundle's worker mechanism (worker/serve.py, worker/rebuild.py), not",
                  "# documented JAX API: the StableHLO text serialized as a portable artifact, a jax.export.Exported",
                  "# rebuilt around it from @main's signature, and its call jitted."]
    return lines
