"""Which XLA passes changed a module, on two releases, read from their per-pass dumps.

With `--xla_dump_hlo_pass_re=.*` (and `--xla_dump_hlo_as_text`) XLA writes the module after each pass that reported a
change, named `module_NNNN.NAME.SEQ.PIPELINE.after_PASS.before_NEXT.txt`: SEQ orders the files, PIPELINE names the
pass pipeline, PASS the pass that ran and NEXT the pass that runs after it (so passes that changed nothing are seen
too, as a NEXT). Each pipeline opens with an `after_pipeline-start` file, the module as the pipeline received it.

A pass changed the module when its file differs from the file before it once names, ids and metadata are left out
(`canonical`): XLA's own "changed" also counts renames. The first point where the two releases' pipelines diverge is
the first state of either side (in its pipeline order) that the other side never reaches.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from .hlo_parse import parse_hlo

_DUMP_NAME = re.compile(r"^module_(?P<module>\d+)\.(?P<name>.+?)\.(?P<seq>\d{4})\.(?P<pipeline>[^.]+)"
                        r"\.after_(?P<after>[^.]+)(?:\.before_(?P<before>[^.]+))?\.txt$")
_BEFORE_OPTIMIZATIONS = re.compile(r"^module_(?P<module>\d+)\.(?P<name>.+)\.before_optimizations\.txt$")
_METADATA = re.compile(r',\s*metadata=\{(?:"(?:[^"\\]|\\.)*"|[^{}"])*\}')
_PARAM_NAME = re.compile(r"([\w.\-]+):\s")
_IDENT = re.compile(r"%[^\s,(){}\[\]=:]+")
_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
PIPELINE_START = "pipeline-start"
MAX_FILES = 4000  # a side with more pass dumps than this is read up to here (the report says so)


def canonical(text: str) -> str:
    """The module without what a rename changes: the module's name, instruction and computation names (renamed in
    order of first appearance), parameter names of computation headers, metadata, blank lines and the source
    tables after the module."""
    lines = []
    names: dict[str, str] = {}

    def rename(match: re.Match) -> str:
        return names.setdefault(match.group(0), f"%{len(names)}")

    for line in text.splitlines():
        stripped = line.strip()
        if not stripped:
            continue
        if stripped in _TABLES:
            break
        if stripped.startswith("HloModule "):
            line = "HloModule," + stripped.partition(",")[2]
        line = _METADATA.sub("", line)
        if not line.startswith(" ") and "(" in line and line.rstrip().endswith("{"):  # a computation header
            line = _PARAM_NAME.sub(": ", line)
        lines.append(_IDENT.sub(rename, line.rstrip()))
    return "\n".join(lines)


def digest(text: str) -> str:
    return hashlib.sha256(canonical(text).encode()).hexdigest()


def same_hlo(a: str | None, b: str | None) -> bool | None:
    """Whether two HLO texts are the same module up to names, ids and metadata (None when one is missing)."""
    if not a or not b:
        return None
    return canonical(a) == canonical(b)


def _opcodes(text: str) -> Counter:
    module = parse_hlo(text)
    return Counter(i.opcode for c in module.computations.values() for i in c.instructions)


@dataclass
class State:
    """The module after one pass (or at a pipeline's start), in pipeline order."""

    seq: int
    pipeline: str
    after: str
    before: str | None
    digest: str
    changed: bool = False  # differs from the state before it, up to names
    effect: dict = field(default_factory=dict)  # {opcode: +n/-n} of the change


@dataclass
class Pipeline:
    """One release's pass dumps of one module."""

    module: str
    states: list[State]
    seen: list[str]  # every pass name the dump shows (as after_ or before_), in order of first appearance
    input_digest: str | None  # before_optimizations
    truncated: bool = False


def read_pipeline(files: Mapping[str, bytes]) -> Pipeline | None:
    """The pipeline of the module with the most pass dumps in `files` ({file name: bytes}); None without any."""
    parsed, inputs = _dump_files(files)
    if not parsed:
        return None
    module = max(parsed, key=lambda k: (len(parsed[k]), int(k)))
    entries = sorted(parsed[module], key=lambda e: int(e[0]["seq"]))
    truncated = len(entries) > MAX_FILES
    states, seen = _states(entries[:MAX_FILES], files)
    input_name = inputs.get(module)
    input_digest = digest(files[input_name].decode("utf-8", "replace")) if input_name else None
    name = entries[0][0]["name"]
    return Pipeline(name, states, seen, input_digest, truncated)


def _dump_files(files: Mapping[str, bytes]) -> tuple[dict[str, list[tuple[re.Match, str]]], dict[str, str]]:
    """({module id: [(parsed name, file name)]} of the pass dumps, {module id: file name} of the modules' inputs)."""
    parsed: dict[str, list[tuple[re.Match, str]]] = {}
    inputs: dict[str, str] = {}
    for name in files:
        base = name.rsplit("/", 1)[-1]
        m = _DUMP_NAME.match(base)
        if m:
            parsed.setdefault(m["module"], []).append((m, name))
            continue
        b = _BEFORE_OPTIMIZATIONS.match(base)
        if b:
            inputs[b["module"]] = name
    return parsed, inputs


def _states(entries: list[tuple[re.Match, str]], files: Mapping[str, bytes]) -> tuple[list[State], list[str]]:
    """(the module's states in pipeline order, every pass name the dumps show in order of first appearance)."""
    states: list[State] = []
    seen: dict[str, None] = {}
    previous_text = None
    for m, name in entries:
        text = files[name].decode("utf-8", "replace")
        state = State(int(m["seq"]), m["pipeline"], m["after"], m["before"], digest(text))
        for p in (m["after"], m["before"]):
            if p and p != PIPELINE_START and p != "pipeline-end":
                seen.setdefault(p, None)
        if m["after"] != PIPELINE_START and states:
            _compare_with_previous(state, states[-1], text, previous_text)
        states.append(state)
        previous_text = text
    return states, list(seen)


def _compare_with_previous(state: State, previous: State, text: str, previous_text: str | None) -> None:
    """Mark `state` changed when it differs from the state before it, with the ops the change added and removed."""
    state.changed = state.digest != previous.digest
    if state.changed and previous_text is not None:
        delta = _opcodes(text)
        delta.subtract(_opcodes(previous_text))
        state.effect = {k: v for k, v in sorted(delta.items()) if v}


def _effects(p: Pipeline) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for s in p.states:
        if s.changed:
            out.setdefault(s.after, []).append(s.effect)
    return out


def _first_unshared(ours: Pipeline, theirs: Pipeline) -> State | None:
    """Our first state (in pipeline order) that the other pipeline never reaches."""
    reached = {s.digest for s in theirs.states}
    return next((s for s in ours.states if s.digest not in reached), None)


def _last_shared_before(ours: Pipeline, state: State | None, theirs: Pipeline) -> State | None:
    reached = {s.digest for s in theirs.states}
    last = None
    for s in ours.states:
        if state is not None and s.seq >= state.seq:
            break
        if s.digest in reached:
            last = s
    return last


def pass_diff(baseline: Pipeline | None, candidate: Pipeline | None) -> dict:
    """The passes that changed the module on each side, in pipeline order, and where the two diverge.

    Returns {"passes": [{name, baseline: bool, candidate: bool, baseline_runs: bool|None, candidate_runs:
    bool|None, effect_differs: bool, baseline_changes: n, candidate_changes: n}], "divergence": {...} | None,
    "same_input": bool|None, "identical": bool, "summary": str, "note": str}. `X_runs`: the dump shows the pass in
    that pipeline (None: unknown, no dump). `effect_differs`: the pass changed both, but added or removed other
    ops."""
    if baseline is None or candidate is None:
        missing = [w for w, p in (("baseline", baseline), ("candidate", candidate)) if p is None]
        return {"passes": [], "divergence": None, "same_input": None, "identical": False,
                "summary": "", "note": f"no per-pass dump from the {' and '.join(missing)}"}
    passes = _pass_rows(baseline, candidate)
    divergence = _divergence(baseline, candidate)
    same_input = None if baseline.input_digest is None or candidate.input_digest is None else \
        baseline.input_digest == candidate.input_digest
    identical = divergence is None
    return {"passes": passes, "divergence": divergence, "same_input": same_input, "identical": identical,
            "summary": _summary(passes, divergence, same_input),
            "note": "truncated: more pass dumps than " + str(MAX_FILES) if baseline.truncated or candidate.truncated
            else ""}


def _pass_rows(baseline: Pipeline, candidate: Pipeline) -> list[dict]:
    """pass_diff's "passes": one row per pass that changed the module on either side, the candidate's order first."""
    b_effects, c_effects = _effects(baseline), _effects(candidate)
    order = list(dict.fromkeys([s.after for s in candidate.states if s.changed]
                               + [s.after for s in baseline.states if s.changed]))
    b_seen, c_seen = set(baseline.seen), set(candidate.seen)
    passes = []
    for name in order:
        on_b, on_c = name in b_effects, name in c_effects
        passes.append({"name": name, "baseline": on_b, "candidate": on_c,
                       "baseline_runs": name in b_seen, "candidate_runs": name in c_seen,
                       "baseline_changes": len(b_effects.get(name, [])),
                       "candidate_changes": len(c_effects.get(name, [])),
                       "effect_differs": on_b and on_c and _total(b_effects[name]) != _total(c_effects[name])})
    return passes


def _total(effects: Iterable[dict]) -> dict:
    total: Counter = Counter()
    for e in effects:
        total.update(e)
    return {k: v for k, v in sorted(total.items()) if v}


def _divergence(baseline: Pipeline, candidate: Pipeline) -> dict | None:
    c_first = _first_unshared(candidate, baseline)
    b_first = _first_unshared(baseline, candidate)
    if c_first is None and b_first is None and baseline.states[-1].digest == candidate.states[-1].digest:
        return None

    def where(state: State | None, p: Pipeline, other: Pipeline) -> dict | None:
        if state is None:
            return None
        last = _last_shared_before(p, state, other)
        return {"pass": state.after, "pipeline": state.pipeline, "step": state.seq, "effect": state.effect,
                "after_shared": last.after if last else None}

    return {"candidate": where(c_first, candidate, baseline), "baseline": where(b_first, baseline, candidate)}


def _summary(passes: list[dict], divergence: dict | None, same_input: bool | None) -> str:
    only_c = [p["name"] for p in passes if p["candidate"] and not p["baseline"]]
    only_b = [p["name"] for p in passes if p["baseline"] and not p["candidate"]]
    differ = [p["name"] for p in passes if p["effect_differs"]]
    parts = []
    if same_input is False:
        parts.append("the two compiles start from different modules")
    if only_c:
        parts.append("only the candidate's " + _list(only_c) + " changed the module")
    if only_b:
        parts.append("only the baseline's " + _list(only_b) + " changed the module")
    if differ:
        parts.append("different effect on both: " + _list(differ))
    if divergence is None:
        parts.append("the pipelines reach the same module")
    else:
        c = divergence.get("candidate")
        if c:
            parts.append(f"the candidate's module first differs after {c['pass']} ({c['pipeline']})")
    return "; ".join(parts)


def _list(names: list[str], limit: int = 5) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")
