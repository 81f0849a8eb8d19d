"""Optimized HLO text: parse it, summarize its fusions, and diff two versions of it.

Input is what `jax.jit(f).lower(*a).compile().as_text()` prints (also the unoptimized `as_text(dialect="hlo")`),
from any JAX release since 0.4.30: tuple shapes, layouts, typed operands (`f32[2]{0} %x`, older printers),
`metadata={...}` with `source_file`/`source_line` or `stack_frame_id` (newer printers, resolved through the
module's FileNames/FileLocations/StackFrames tables), `backend_config=...`, while/conditional/call, and async
pairs (`*-start`/`*-done`). Lines the parser does not understand are counted and skipped; it never raises on text.

Pure Python; no JAX.

Vocabulary. A *control computation* is the entry computation or one reached from it through control flow
(while condition/body, conditional branches, call, async-start). A *node* is a fusion or an unfused op at the top
level of a control computation. XLA renumbers names between releases, so nodes are matched across versions by
*signature*: fusion kind + multiset of the ops inside + output shape (layouts dropped); the *core* signature drops
the kind and whether it is fused at all, so `reduce` and a single-op `wrapped_reduce` fusion share one.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterable, Sequence

# Ops that cost nothing or only move tuples: left out of signatures and of the unfused-op listing.
FREE_OPCODES = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all"})
# Attributes naming computations that run as control flow (their instructions are top level).
_CONTROL_ATTRS = {"while": ("condition", "body"), "conditional": ("branch_computations", "true_computation",
                                                                   "false_computation"),
                  "call": ("to_apply",), "async-start": ("calls",)}
_CALL_ATTRS = ("calls", "to_apply", "condition", "body", "branch_computations", "true_computation",
               "false_computation", "called_computations")
_OPENERS = {"(": ")", "[": "]", "{": "}"}
# The backend kind of a kCustom fusion: CPU `"fusion_config":{"kind":"__ynn_fusion"}`, GPU
# `"fusion_backend_config":{"kind":"__triton_gemm",...}`.
_CUSTOM_KIND = re.compile(r'"fusion_(?:backend_)?config"\s*:\s*\{[^{}]*?"kind"\s*:\s*"([^"]+)"')
_TABLE_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")

# ------------------------------------------------------------------------------------------------ model


@dataclass
class Instruction:
    """One HLO instruction. `attrs` holds the raw text of each `key=value` attribute after the operands."""

    name: str
    opcode: str
    shape: str
    operands: list[str]
    attrs: dict[str, str]
    is_root: bool = False
    literal: str = ""  # what is inside the parentheses of constant(...) / parameter(...)
    source: str = ""  # "file.py:25" when metadata says where it came from
    location: str = ""  # "path/file.py:25:12", to tell apart ops of one line

    @property
    def is_fusion(self) -> bool:
        return self.opcode in ("fusion", "fusion-start")

    @property
    def fusion_kind(self) -> str:
        """`kLoop`, `kInput`, `kOutput`, `kCustom`...; kCustom carries its backend kind: `kCustom:__ynn_fusion`."""
        kind = self.attrs.get("kind", "")
        custom = _CUSTOM_KIND.search(self.attrs.get("backend_config", ""))
        return f"{kind}:{custom.group(1)}" if kind == "kCustom" and custom else kind

    @property
    def op_key(self) -> str:
        """The opcode, with the target for custom calls: `custom-call(__onednn$matmul)`."""
        if self.opcode == "custom-call":
            target = self.attrs.get("custom_call_target", "").strip('"')
            return f"custom-call({target})" if target else self.opcode
        return self.opcode

    @property
    def op_name(self) -> str:
        m = re.search(r'op_name="((?:[^"\\]|\\.)*)"', self.attrs.get("metadata", ""))
        return m.group(1) if m else ""

    def called(self, keys: Iterable[str] = _CALL_ATTRS) -> list[str]:
        """Names of the computations this instruction calls through the given attributes."""
        out = []
        for key in keys:
            out += re.findall(r"%?([^\s,{}%]+)", self.attrs.get(key, ""))
        return out


@dataclass
class Computation:
    name: str
    is_entry: bool = False
    instructions: list[Instruction] = field(default_factory=list)

    @property
    def root(self) -> Instruction | None:
        return next((i for i in self.instructions if i.is_root), self.instructions[-1] if self.instructions else None)


@dataclass
class HloModule:
    """A parsed module. `skipped` counts lines that were not understood (and ignored)."""

    name: str = ""
    computations: dict[str, Computation] = field(default_factory=dict)
    entry_name: str | None = None
    skipped: int = 0
    _index: dict[str, tuple[Computation, Instruction]] = field(default_factory=dict, repr=False)

    @property
    def entry(self) -> Computation | None:
        if self.entry_name in self.computations:
            return self.computations[self.entry_name]
        return next(reversed(self.computations.values()), None)  # the printer puts ENTRY last

    def find(self, name: str) -> tuple[Computation, Instruction] | None:
        """The computation and instruction named `name` (names are unique module-wide), or None."""
        if not self._index:
            self._index = {i.name: (c, i) for c in self.computations.values() for i in c.instructions}
        return self._index.get(name.lstrip("%"))

    def control_computations(self) -> list[Computation]:
        """The entry computation and every computation reached from it through control flow, entry first."""
        entry = self.entry
        if entry is None:
            return []
        seen, order, todo = {entry.name}, [], [entry]
        while todo:
            comp = todo.pop(0)
            order.append(comp)
            for instr in comp.instructions:
                if instr.is_fusion:
                    continue
                for callee in instr.called(_CONTROL_ATTRS.get(instr.opcode, ())):
                    if callee in self.computations and callee not in seen:
                        seen.add(callee)
                        todo.append(self.computations[callee])
        return order


# ------------------------------------------------------------------------------------------------ scanning


_SPECIAL = re.compile(r'["\\()\[\]{}]')
_SPECIAL_OR_COMMA = re.compile(r'["\\()\[\]{},]')
_CLOSERS = {")": "(", "]": "[", "}": "{"}


def _scan(s: str, i: int, stop_at_comma: bool) -> int:
    """From s[i], skip quoted strings and bracket groups; return the index of the first top-level comma (when
    `stop_at_comma`) or of the character just past the group that s[i] opens. len(s) when the text runs out."""
    pattern = _SPECIAL_OR_COMMA if stop_at_comma else _SPECIAL
    depth, in_quote = 0, False
    while True:
        m = pattern.search(s, i)
        if m is None:
            return len(s)
        ch, i = m.group(), m.end()
        if in_quote:
            if ch == "\\":
                i += 1
            elif ch == '"':
                in_quote = False
        elif ch == '"':
            in_quote = True
        elif ch in _OPENERS:
            depth += 1
        elif ch in _CLOSERS:
            depth -= 1
            if depth == 0 and not stop_at_comma:
                return i
            depth = max(depth, 0)
        elif ch == "," and depth == 0:
            return i - 1


def _balanced_end(s: str, i: int) -> int:
    """Index just past the bracket group opened at s[i]; quotes are honoured; len(s) when unbalanced."""
    return _scan(s, i, stop_at_comma=False)


def _split_top(s: str) -> list[str]:
    """Split on commas outside brackets and quotes; items are stripped, empty ones dropped."""
    items, start = [], 0
    while start <= len(s):
        end = _scan(s, start, stop_at_comma=True)
        items.append(s[start:end])
        start = end + 1
    return [x.strip() for x in items if x.strip()]


def _read_shape(s: str, i: int) -> tuple[str, int]:
    """The shape starting at s[i] (`f32[2,3]{1,0}`, `(f32[], s32[4]{0})`, `token[]`) and the index after it."""
    if i < len(s) and s[i] == "(":
        j = _balanced_end(s, i)
        return s[i:j], j
    m = re.match(r"[A-Za-z][\w]*", s[i:])
    if not m:
        return "", i
    j = i + m.end()
    for opener in "[{":
        if j < len(s) and s[j] == opener:
            j = _balanced_end(s, j)
    return s[i:j], j


def strip_layout(shape: str) -> str:
    """`f32[4,8]{1,0}` -> `f32[4,8]`, also inside tuple shapes."""
    return re.sub(r"\s+", " ", re.sub(r"\{[^{}]*\}", "", shape)).strip()


_INSTR_HEAD = re.compile(r"\s*(ROOT\s+)?%?([^\s=(){}\[\],]+)\s*=\s*")
_OPCODE = re.compile(r"\s*([A-Za-z][\w\-$.]*)\(")


def parse_instruction(line: str) -> Instruction | None:
    """One instruction line, or None when the line is not one."""
    head = _INSTR_HEAD.match(line)
    if not head:
        return None
    rest = line[head.end():]
    shape, i = _read_shape(rest, 0)
    op = _OPCODE.match(rest, i)
    if not shape or not op:
        return None
    args_start = op.end() - 1
    args_end = _balanced_end(rest, args_start)
    args = rest[args_start + 1:args_end - 1]
    opcode = op.group(1)
    attrs = {}
    for item in _split_top(rest[args_end:]):
        key, _, value = item.partition("=")
        attrs[key.strip()] = value.strip()
    literal = args if opcode in ("constant", "parameter", "iota") else ""
    operands = [] if literal else [_operand_name(a) for a in _split_top(args)]
    return Instruction(name=head.group(2), opcode=opcode, shape=shape, operands=[o for o in operands if o],
                       attrs=attrs, is_root=bool(head.group(1)), literal=literal)


def _operand_name(item: str) -> str:
    """`%x.1` or `f32[2]{0} %x.1` (older printers) -> `x.1`."""
    if "%" in item:
        return re.split(r"\s", item.rsplit("%", 1)[1])[0]
    last = item.split()[-1] if item.split() else ""
    return last if re.fullmatch(r"[\w.\-]+", last) else ""


_COMP_HEAD = re.compile(r"(ENTRY\s+)?%?([^\s(){}=]+)\s*(?:\(|\{|,|->)")


def _computation_header(line: str) -> tuple[str, bool] | None:
    """(name, is_entry) when the line opens a computation."""
    s = line.strip()
    if not s.endswith("{") or _INSTR_HEAD.match(s) or s.startswith("HloModule"):
        return None
    m = _COMP_HEAD.match(s)
    return (m.group(2), bool(m.group(1))) if m else None


# ------------------------------------------------------------------------------------------------ parsing


class _SourceTables:
    """The FileNames/FunctionNames/FileLocations/StackFrames tables newer printers put before the computations."""

    def __init__(self):
        self.tables: dict[str, dict[int, str]] = {k: {} for k in _TABLE_SECTIONS}
        self.section: str | None = None
        self._frames: dict[int, tuple[str, str, str]] = {}

    def feed(self, line: str) -> bool:
        """Consume `line` if it belongs to a table; True when consumed."""
        s = line.strip()
        if s in _TABLE_SECTIONS:
            self.section = s
            return True
        m = re.match(r"(\d+)\s+(.*)$", s)
        if self.section and m:
            self.tables[self.section][int(m.group(1))] = m.group(2)
            return True
        self.section = None
        return False

    def frame_location(self, frame_id: int) -> tuple[str, str, str]:
        """(path, line, column) of a stack frame; empty strings when unknown. Memoized."""
        if frame_id not in self._frames:
            frame = self.tables["StackFrames"].get(frame_id, "")
            loc_id = _field(frame, "file_location_id")
            loc = self.tables["FileLocations"].get(int(loc_id), "") if loc_id.isascii() and loc_id.isdigit() else ""
            file_id = _field(loc, "file_name_id")
            known = file_id.isascii() and file_id.isdigit()
            path = self.tables["FileNames"].get(int(file_id), "").strip('"') if known else ""
            self._frames[frame_id] = (path, _field(loc, "line"), _field(loc, "column"))
        return self._frames[frame_id]


_FIELDS = {key: re.compile(rf'\b{key}="?([^\s"}}]*)') for key in (
    "source_file", "source_line", "source_column", "stack_frame_id", "file_location_id", "file_name_id", "line",
    "column")}


def _field(text: str, key: str) -> str:
    """The value of `key=value` or `key="value"` in metadata-like text, or ""."""
    m = _FIELDS[key].search(text)
    return m.group(1) if m else ""


def _set_source(instr: Instruction, tables: _SourceTables) -> None:
    """Fill `source` and `location` from metadata: source_file/source_line, or stack_frame_id in the tables."""
    meta = instr.attrs.get("metadata", "")
    if not meta:
        return
    path, line, column = _field(meta, "source_file"), _field(meta, "source_line"), _field(meta, "source_column")
    frame = _field(meta, "stack_frame_id")
    if not (path and line) and frame.isascii() and frame.isdigit():  # int() refuses some unicode digits (²)
        path, line, column = tables.frame_location(int(frame))
    if path and line:
        instr.source = f"{path.rsplit('/', 1)[-1]}:{line}"
        instr.location = f"{path}:{line}:{column}"


def parse_hlo(text: str | bytes | None) -> HloModule:
    """Parse HLO module text (bytes are read as UTF-8). Unknown lines are skipped (counted in `skipped`); never
    raises on text."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    module, tables, current = HloModule(), _SourceTables(), None
    for line in (text or "").splitlines():
        s = line.strip()
        if not s or s.startswith("//"):
            continue
        if current is None:
            current = _outside_line(module, tables, line, s)
            continue
        if s == "}":
            current = None
            continue
        instr = parse_instruction(line)
        if instr is None:
            module.skipped += 1
            continue
        _set_source(instr, tables)
        current.instructions.append(instr)
    return module


def _outside_line(module: HloModule, tables: _SourceTables, line: str, s: str) -> Computation | None:
    """Handle a line outside any computation; returns the computation it opens, if any."""
    if s.startswith("HloModule"):
        module.name = s.split()[1].rstrip(",") if len(s.split()) > 1 else ""
        return None
    if tables.feed(line):
        return None
    header = _computation_header(line)
    if header is None:
        module.skipped += 1
        return None
    name, is_entry = header
    comp = Computation(name=name, is_entry=is_entry)
    module.computations[name] = comp
    if is_entry:
        module.entry_name = name
    return comp


def _as_module(hlo: str | bytes | HloModule | None) -> HloModule:
    return hlo if isinstance(hlo, HloModule) else parse_hlo(hlo)


# ------------------------------------------------------------------------------------------------ nodes


@dataclass(frozen=True)
class Node:
    """A fusion or an unfused op at the top level of a control computation (or any named instruction)."""

    name: str
    kind: str  # fusion kind ("kLoop", "kCustom:__ynn_fusion"...); "" for an unfused op
    ops: tuple[tuple[str, int], ...]  # sorted multiset of the ops inside (the op itself when unfused)
    order: tuple[str, ...]  # the distinct ops in order of appearance, for labels
    shape: str  # output shape without layout
    computation: str = ""
    source: str = ""
    location: str = ""
    op_name: str = ""

    @property
    def is_fusion(self) -> bool:
        return bool(self.kind)

    @cached_property
    def core_ops(self) -> Counter:
        """The ops that count for matching: free ops (parameter, constant, bitcast, tuples) left out. Read only."""
        core = Counter({op: n for op, n in self.ops if op not in FREE_OPCODES})
        return core or Counter(dict(self.ops))

    @cached_property
    def core_size(self) -> int:
        return sum(self.core_ops.values())

    @cached_property
    def signature(self) -> tuple:
        return (self.kind, tuple(sorted(self.core_ops.items())), self.shape)

    @cached_property
    def core_signature(self) -> tuple:
        return (tuple(sorted(self.core_ops.items())), self.shape)

    @property
    def label(self) -> str:
        """`transpose+copy`, `dot×2+reduce+exponential`: the core ops in order of appearance."""
        core = self.core_ops
        parts = [op + (f"×{core[op]}" if core[op] > 1 else "") for op in self.order if op in core]
        return "+".join(parts) or "+".join(self.order)

    def describe(self) -> dict:
        return {"name": self.name, "kind": self.kind or "unfused", "ops": dict(self.ops), "label": self.label,
                "shape": self.shape, "computation": self.computation, "source": self.source}


def _fused_ops(module: HloModule, comp_name: str, depth: int = 0) -> list[str]:
    """The op keys inside a fused computation, in order, nested fusions flattened; parameters left out."""
    comp = module.computations.get(comp_name)
    if comp is None or depth > 8:
        return []
    ops = []
    for instr in comp.instructions:
        if instr.is_fusion and instr.called(("calls",)):
            ops += _fused_ops(module, instr.called(("calls",))[0], depth + 1)
        elif instr.opcode != "parameter":
            ops.append(instr.op_key)
    return ops


def node_of(module: HloModule, instr: Instruction, computation: str = "") -> Node:
    """The node for one instruction: a fusion's contents, or the single op."""
    if instr.is_fusion:
        callee = instr.called(("calls",))
        ops = _fused_ops(module, callee[0]) if callee else []
        kind = instr.fusion_kind or "k?"
    else:
        ops, kind = [instr.op_key], ""
    ops = ops or [instr.op_key]
    return Node(name=instr.name, kind=kind, ops=tuple(sorted(Counter(ops).items())), order=tuple(dict.fromkeys(ops)),
                shape=strip_layout(instr.shape), computation=computation, source=instr.source,
                location=instr.location, op_name=instr.op_name)


def _is_control_op(instr: Instruction) -> bool:
    return not instr.is_fusion and instr.opcode in _CONTROL_ATTRS


def top_level_nodes(hlo: str | HloModule) -> list[Node]:
    """Fusions and unfused ops (free ops and control-flow ops left out) of all control computations, in order."""
    module = _as_module(hlo)
    nodes = []
    for comp in module.control_computations():
        for instr in comp.instructions:
            if instr.is_fusion or (instr.opcode not in FREE_OPCODES and not _is_control_op(instr)):
                nodes.append(node_of(module, instr, comp.name))
    return nodes


def fusion_summary(hlo: str | HloModule) -> dict:
    """Fusions (name, kind, ops inside, output shape, where) and unfused ops of the control computations, and counts.

    Returns {"module", "fusions": [node dicts], "unfused": [node dicts], "fusion_counts": {kind: n},
    "unfused_counts": {op: n}, "n_fusions", "n_unfused", "control_computations": [names], "skipped_lines"}.
    """
    module = _as_module(hlo)
    nodes = top_level_nodes(module)
    fusions = [n for n in nodes if n.is_fusion]
    unfused = [n for n in nodes if not n.is_fusion]
    return {"module": module.name, "fusions": [n.describe() for n in fusions],
            "unfused": [n.describe() for n in unfused],
            "fusion_counts": dict(sorted(Counter(n.kind for n in fusions).items())),
            "unfused_counts": dict(sorted(Counter(n.label for n in unfused).items())),
            "n_fusions": len(fusions), "n_unfused": len(unfused),
            "control_computations": [c.name for c in module.control_computations()],
            "skipped_lines": module.skipped}


# ------------------------------------------------------------------------------------------------ matching


@dataclass
class Matching:
    """Pairs of nodes across two versions (with how they matched) and what is left on each side."""

    pairs: list[tuple[Node, Node, str]] = field(default_factory=list)
    base_only: list[Node] = field(default_factory=list)
    cand_only: list[Node] = field(default_factory=list)


def _pair_by(key, how: str, base: list[Node], cand: list[Node], out: list) -> tuple[list[Node], list[Node]]:
    """Pair nodes whose key agrees: same name first, then same source, then in order. Returns the leftovers."""
    groups: dict = {}
    for n in cand:
        groups.setdefault(key(n), []).append(n)
    rest_base = []
    for b in base:
        options = groups.get(key(b), [])
        pick = (next((c for c in options if c.name == b.name), None)
                or next((c for c in options if b.location and c.location == b.location and c.op_name == b.op_name), None)
                or (options[0] if options else None))
        if pick is None:
            rest_base.append(b)
            continue
        options.remove(pick)
        out.append((b, pick, how))
    taken = {id(c) for _, c, _ in out}
    return rest_base, [c for c in cand if id(c) not in taken]


def _overlap(a: Counter, b: Counter, size_a: int, size_b: int) -> float:
    """Weighted Jaccard similarity of two op multisets."""
    common = sum(min(n, b[op]) for op, n in a.items() if op in b)
    return common / (size_a + size_b - common) if size_a + size_b else 0.0


def _similar(b: Node, c: Node) -> float:
    """How alike two unmatched nodes are (0 when they should not be paired)."""
    if b.core_size + c.core_size <= 2 and b.shape != c.shape:
        return 0.0  # single ops of different shapes are different ops
    score = _overlap(b.core_ops, c.core_ops, b.core_size, c.core_size)
    return score + (0.01 if b.shape == c.shape else 0.0) if score >= 0.5 else 0.0


_MAX_SIMILARITY_CHECKS = 2_000_000


def _pair_similar(base: list[Node], cand: list[Node], out: list) -> tuple[list[Node], list[Node]]:
    """Greedy best-first pairing by `_similar`, among nodes that share at least one op."""
    by_op: dict[str, list[int]] = {}
    for j, c in enumerate(cand):
        for op in c.core_ops:
            by_op.setdefault(op, []).append(j)
    scored, checks = [], 0
    for i, b in enumerate(base):
        options = sorted({j for op in b.core_ops for j in by_op.get(op, ())})
        checks += len(options)
        if checks > _MAX_SIMILARITY_CHECKS:
            break  # pathological sizes: leave the rest unmatched rather than stall
        scored += [(score, i, j) for j in options if (score := _similar(b, cand[j])) > 0]
    scored.sort(key=lambda t: (-t[0], t[1], t[2]))
    used_b, used_c = set(), set()
    for _, i, j in scored:
        if i not in used_b and j not in used_c:
            used_b.add(i)
            used_c.add(j)
            out.append((base[i], cand[j], "similar"))
    return ([b for i, b in enumerate(base) if i not in used_b], [c for j, c in enumerate(cand) if j not in used_c])


def match_nodes(base: list[Node], cand: list[Node]) -> Matching:
    """Match nodes across versions: equal signature ("same"), equal core signature ("wrapped", "unwrapped",
    "rekinded": same ops and shape, fused differently), then best op overlap ("similar", at least half)."""
    pairs: list = []
    b, c = _pair_by(lambda n: n.signature, "same", base, cand, pairs)
    core_pairs: list = []
    b, c = _pair_by(lambda n: n.core_signature, "", b, c, core_pairs)
    pairs += [(x, y, _refusion_how(x, y)) for x, y, _ in core_pairs]
    b, c = _pair_similar(b, c, pairs)
    return Matching(pairs=pairs, base_only=b, cand_only=c)


def _refusion_how(b: Node, c: Node) -> str:
    if not b.is_fusion and c.is_fusion:
        return "wrapped"
    if b.is_fusion and not c.is_fusion:
        return "unwrapped"
    return "rekinded"


def absorb(target: Node, pool: list[Node]) -> list[Node]:
    """The nodes of `pool` whose ops all fit, together, inside `target`'s ops (biggest first): what a new fusion
    took in from the other version, or what a vanished one was split into. A heuristic on op multisets only."""
    remaining, taken = Counter(target.core_ops), []
    for node in sorted(pool, key=lambda n: -n.core_size):
        need = node.core_ops
        if all(remaining[op] >= k for op, k in need.items()):
            remaining -= need
            taken.append(node)
    return taken


# ------------------------------------------------------------------------------------------------ fusion diff


def _counts(nodes: list[Node]) -> dict:
    fusions = [n for n in nodes if n.is_fusion]
    return {"fusions": len(fusions), "by_kind": dict(sorted(Counter(n.kind for n in fusions).items())),
            "unfused": len(nodes) - len(fusions)}


def _pair_entry(b: Node, c: Node, how: str) -> dict:
    entry = {"base": b.name, "cand": c.name, "how": how, "label": c.label, "base_kind": b.kind or "unfused",
             "cand_kind": c.kind or "unfused", "shape": c.shape}
    if how == "similar":
        entry["entered"] = dict(c.core_ops - b.core_ops)
        entry["left"] = dict(b.core_ops - c.core_ops)
        entry["base_label"], entry["base_shape"] = b.label, b.shape
    return entry


def fusion_diff(base_hlo: str | HloModule, cand_hlo: str | HloModule) -> dict:
    """How fusion changed from `base_hlo` to `cand_hlo` (optimized HLO texts of the same computation).

    Returns {
      "base"/"cand": {"fusions", "by_kind": {kind: n}, "unfused"},
      "unchanged": [{base, cand, how: "same", label, ...}],   # same signature (names may differ)
      "refused":  [{base, cand, how: "wrapped"|"unwrapped"|"rekinded", base_kind, cand_kind, label, shape}],
      "changed":  [{base, cand, how: "similar", entered: {op: n}, left: {op: n}, label, base_label, ...}],
      "merged":   [cand fusion node dict + "absorbed": [base node dicts]],   # a new fusion took these in
      "split":    [base fusion node dict + "split_into": [cand node dicts]], # a gone fusion became these
      "appeared"/"disappeared": [fusion node dicts],            # new / gone fusions accounted for by nothing else
      "unfused_only_base"/"unfused_only_cand": [node dicts],
      "moves": [{"op", "change": "entered"|"left", "fusion", "other"}],  # ops that entered or left fusions
      "identical": bool, "summary": str }
    """
    base_nodes, cand_nodes = top_level_nodes(base_hlo), top_level_nodes(cand_hlo)
    m = match_nodes(base_nodes, cand_nodes)
    g = group_leftovers(m)
    diff = {
        "base": _counts(base_nodes), "cand": _counts(cand_nodes),
        "unchanged": [_pair_entry(b, c, h) for b, c, h in m.pairs if h == "same"],
        "refused": [_pair_entry(b, c, h) for b, c, h in m.pairs if h in ("wrapped", "unwrapped", "rekinded")],
        "changed": [_pair_entry(b, c, h) for b, c, h in m.pairs if h == "similar"],
        "merged": [{**c.describe(), "absorbed": [x.describe() for x in bs]} for bs, cs in g.merged for c in cs],
        "split": [{**b.describe(), "split_into": [x.describe() for x in cs]} for bs, cs in g.split for b in bs],
        "appeared": [n.describe() for n in g.cand_left if n.is_fusion],
        "disappeared": [n.describe() for n in g.base_left if n.is_fusion],
        "unfused_only_base": [n.describe() for n in g.base_left if not n.is_fusion],
        "unfused_only_cand": [n.describe() for n in g.cand_left if not n.is_fusion],
    }
    diff["moves"] = _moves(m, g)
    diff["identical"] = not any(diff[k] for k in ("refused", "changed", "merged", "split", "appeared", "disappeared",
                                                  "unfused_only_base", "unfused_only_cand"))
    diff["summary"] = _diff_summary(diff)
    return diff


@dataclass
class Groups:
    """Leftovers of a matching, grouped: (base nodes, cand nodes) that a new fusion merged or a gone one split."""

    merged: list[tuple[list[Node], list[Node]]] = field(default_factory=list)
    split: list[tuple[list[Node], list[Node]]] = field(default_factory=list)
    base_left: list[Node] = field(default_factory=list)
    cand_left: list[Node] = field(default_factory=list)


def group_leftovers(m: Matching) -> Groups:
    """Set each unmatched new fusion against the unmatched base nodes it absorbed, then each unmatched gone fusion
    against the unmatched candidate nodes it was split into; what remains is one-sided."""
    g = Groups(base_left=list(m.base_only), cand_left=list(m.cand_only))
    for c in [n for n in m.cand_only if n.is_fusion]:
        taken = absorb(c, g.base_left)
        if taken:
            g.base_left = [n for n in g.base_left if n not in taken]
            g.cand_left.remove(c)
            g.merged.append((taken, [c]))
    for b in [n for n in g.base_left if n.is_fusion]:
        taken = absorb(b, g.cand_left)
        if taken:
            g.cand_left = [n for n in g.cand_left if n not in taken]
            g.base_left.remove(b)
            g.split.append(([b], taken))
    return g


def _moves(m: Matching, g: Groups) -> list[dict]:
    """Ops that entered a fusion of the candidate or left a fusion of the baseline."""
    def entered(ops, fusion, other):
        return [{"op": op, "change": "entered", "fusion": fusion, "other": other} for op in ops]

    def left(ops, fusion, other):
        return [{"op": op, "change": "left", "fusion": fusion, "other": other} for op in ops]

    moves = []
    for b, c, how in m.pairs:
        if how == "wrapped":
            moves += entered(c.core_ops, c.name, b.name)
        elif how == "unwrapped":
            moves += left(b.core_ops, b.name, c.name)
        elif how == "similar":
            moves += entered(c.core_ops - b.core_ops, c.name, b.name) + left(b.core_ops - c.core_ops, b.name, c.name)
    for bs, (c,) in g.merged:
        moves += [mv for x in bs for mv in entered(x.core_ops, c.name, x.name)]
    for (b,), cs in g.split:
        moves += [mv for x in cs for mv in left(x.core_ops, b.name, x.name)]
    return moves


def _diff_summary(d: dict) -> str:
    if d["identical"]:
        return f"same fusion structure ({d['base']['fusions']} fusions, {d['base']['unfused']} unfused ops)"
    parts = [f"fusions {d['base']['fusions']} -> {d['cand']['fusions']}"]
    wrapped = Counter(e["label"] for e in d["refused"] if e["how"] == "wrapped")
    if wrapped:
        parts.append("wrapped into fusions: " + _counter_text(wrapped))
    unwrapped = Counter(e["label"] for e in d["refused"] if e["how"] == "unwrapped")
    if unwrapped:
        parts.append("no longer fused: " + _counter_text(unwrapped))
    if any(e["how"] == "rekinded" for e in d["refused"]):
        parts.append(f"{sum(e['how'] == 'rekinded' for e in d['refused'])} changed fusion kind")
    if d["changed"]:
        parts.append(f"{len(d['changed'])} changed contents")
    for e in d["merged"][:2]:
        parts.append(f"{e['name']} ({e['kind']}) took in " + _names([x["name"] for x in e["absorbed"]]))
    if len(d["merged"]) > 2:
        parts.append(f"{len(d['merged']) - 2} more fusions took in others")
    for e in d["split"][:2]:
        parts.append(f"{e['name']} ({e['kind']}) split into " + _names([x["name"] for x in e["split_into"]]))
    if len(d["split"]) > 2:
        parts.append(f"{len(d['split']) - 2} more fusions split")
    for key, what in (("appeared", "new"), ("disappeared", "gone")):
        if d[key]:
            parts.append(f"{what}: " + _names([f"{n['name']} ({n['kind']}: {n['label']})" for n in d[key]], 3))
    for key, what in (("unfused_only_base", "unfused only before"), ("unfused_only_cand", "unfused only after")):
        if d[key]:
            parts.append(f"{what}: " + _counter_text(Counter(n["label"] for n in d[key]), 6))
    return "; ".join(parts)


def _names(names: list[str], limit: int = 4) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _counter_text(c: Counter, limit: int = 8) -> str:
    """`dot×4, reduce, ...`: the most common first, at most `limit` kinds."""
    items = [f"{k}×{v}" if v > 1 else k for k, v in c.most_common()]
    return ", ".join(items[:limit]) + (f" and {len(items) - limit} more kinds" if len(items) > limit else "")


# ------------------------------------------------------------------------------------------------ per-op diff


def _aggregate(rows: list[dict] | None) -> dict[str, dict]:
    """Per-op rows by name (times and counts of repeated names summed)."""
    out: dict[str, dict] = {}
    for r in rows or []:
        name = str(r.get("name", ""))
        agg = out.setdefault(name, {"name": name, "kind": str(r.get("kind", "")), "time_ns": 0.0, "count": 0})
        agg["time_ns"] += float(r.get("time_ns") or 0.0)
        agg["count"] += int(r.get("count") or 0)
    return out


def _row_nodes(rows: dict[str, dict], module: HloModule) -> list[Node]:
    """A node per profiled name: from the HLO when the name is there, else an opaque node keyed by name."""
    nodes = []
    for name, row in rows.items():
        found = module.find(name)
        if found:
            nodes.append(node_of(module, found[1], found[0].name))
        else:
            nodes.append(Node(name=name, kind="", ops=((f"?{name}", 1),), order=(f"?{name}",), shape="?"))
    return nodes


def median_per_op(tables: Sequence[Sequence[dict]]) -> list[dict]:
    """One per-op table from several profiles of the same compiled module: per op (by name), the median time over
    the profiles that saw it; kind and count from the first that did. Ordered by time, biggest first."""
    times: dict[str, list[float]] = {}
    first: dict[str, dict] = {}
    for table in tables:
        for row in table:
            name = str(row["name"])
            times.setdefault(name, []).append(float(row["time_ns"]))
            first.setdefault(name, row)
    merged = [{"name": name, "kind": str(first[name].get("kind", "")), "time_ns": float(statistics.median(t)),
               "count": int(first[name].get("count", 0))} for name, t in times.items()]
    return sorted(merged, key=lambda r: -r["time_ns"])


def per_op_diff(base_per_op: list[dict] | None, cand_per_op: list[dict] | None, base_hlo: str | HloModule | None,
                cand_hlo: str | HloModule | None) -> list[dict]:
    """Per-op time moves between two versions, biggest |delta_ns| first.

    Per-op rows are {"name": HLO instruction name, "kind", "time_ns" (per iteration), "count"}. Rows are matched
    by name when the signatures agree, else by signature (see `match_nodes`); a new (vanished) fusion is set
    against the profiled nodes of the other side it absorbed (was split into), summed. Returns rows
    {"base_name", "cand_name", "kind", "signature", "match", "source", "base_ns", "cand_ns", "delta_ns", "ratio"}:
    a side that has no row has None for its name and time (its delta counts it as 0); ratio is cand/base or None.
    """
    base_rows, cand_rows = _aggregate(base_per_op), _aggregate(cand_per_op)
    base_mod, cand_mod = _as_module(base_hlo), _as_module(cand_hlo)
    base_nodes, cand_nodes = _row_nodes(base_rows, base_mod), _row_nodes(cand_rows, cand_mod)
    pairs = []
    by_name = {n.name: n for n in cand_nodes}
    for b in base_nodes:
        c = by_name.get(b.name)
        if c is not None and c.signature == b.signature:
            pairs.append((b, c, "name"))
    paired_b, paired_c = {b.name for b, _, _ in pairs}, {c.name for _, c, _ in pairs}
    m = match_nodes([n for n in base_nodes if n.name not in paired_b], [n for n in cand_nodes if n.name not in paired_c])
    out = [_time_row([b], [c], how if how != "same" else "signature", base_rows, cand_rows) for b, c, how in pairs + m.pairs]
    out += _group_rows(m, base_rows, cand_rows)
    out.sort(key=lambda r: (-abs(r["delta_ns"]), r["base_name"] or "", r["cand_name"] or ""))
    return out


def _group_rows(m: Matching, base_rows: dict, cand_rows: dict) -> list[dict]:
    """Rows for what `match_nodes` left: merged and split groups summed, then one-sided rows."""
    g = group_leftovers(m)
    rows = [_time_row(bs, cs, "merged", base_rows, cand_rows) for bs, cs in g.merged]
    rows += [_time_row(bs, cs, "split", base_rows, cand_rows) for bs, cs in g.split]
    rows += [_time_row([b], [], "base only", base_rows, cand_rows) for b in g.base_left]
    rows += [_time_row([], [c], "cand only", base_rows, cand_rows) for c in g.cand_left]
    return rows


def _time_row(base: list[Node], cand: list[Node], how: str, base_rows: dict, cand_rows: dict) -> dict:
    base_ns = sum(base_rows[n.name]["time_ns"] for n in base) if base else None
    cand_ns = sum(cand_rows[n.name]["time_ns"] for n in cand) if cand else None
    main = (cand or base)[0]
    kind_row = cand_rows.get(main.name) if cand else base_rows.get(main.name)
    return {
        "base_name": " + ".join(n.name for n in base) or None,
        "cand_name": " + ".join(n.name for n in cand) or None,
        "kind": (kind_row or {}).get("kind") or main.kind or "unfused",
        "signature": main.label if not main.label.startswith("?") else "",
        "match": how,
        "source": main.source,
        "base_ns": base_ns, "cand_ns": cand_ns,
        "delta_ns": (cand_ns or 0.0) - (base_ns or 0.0),
        "ratio": (cand_ns / base_ns) if base_ns and cand_ns is not None else None,
    }
