"""Optimized HLO text parsed into a module of computations and instructions.

Input is what `jax.jit(f).lower(*a).compile().as_text()` prints (also the unoptimized `as_text(dialect="hlo")`),
from any JAX release since 0.4.30: tuple shapes, layouts, typed operands (`f32[2]{0} %x`, older printers),
`metadata={...}` with `source_file`/`source_line` or `stack_frame_id` (newer printers, resolved through the
module's FileNames/FileLocations/StackFrames tables), `backend_config=...`, while/conditional/call, and async
pairs (`*-start`/`*-done`). Lines the parser does not understand are counted and skipped; it never raises on text.

Pure Python; no JAX. What an instruction's kind is (fusion kind, custom-call target) is defined once, in the
worker's `hlo_kind` (the per-op tables the worker writes name instructions by the same kinds). hlo_diff summarizes
and diffs the parsed modules.

A *control computation* is the entry computation or one reached from it through control flow (while
condition/body, conditional branches, call, async-start).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Iterable

from ..worker import hlo_kind

# Attributes naming computations that run as control flow (their instructions are top level).
_CONTROL_ATTRS = {"while": ("condition", "body"), "conditional": ("branch_computations", "true_computation",
                                                                   "false_computation"),
                  "call": ("to_apply",), "async-start": ("calls",)}
_CALL_ATTRS = ("calls", "to_apply", "condition", "body", "branch_computations", "true_computation",
               "false_computation", "called_computations")
_OPENERS = {"(": ")", "[": "]", "{": "}"}
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
        return self.opcode in hlo_kind.FUSION_OPCODES

    @property
    def is_control_flow(self) -> bool:
        """while, conditional, call or async-start: its callees are control computations."""
        return not self.is_fusion and self.opcode in _CONTROL_ATTRS

    @property
    def fusion_kind(self) -> str:
        """`kLoop`, `kInput`, `kOutput`, `kCustom`...; kCustom carries its backend kind: `kCustom:__ynn_fusion`."""
        return hlo_kind.fusion_kind(self.attrs.get("kind", ""), self.attrs.get("backend_config", ""))

    @property
    def op_key(self) -> str:
        """The opcode, with the target for custom calls: `custom-call(__onednn$matmul)`."""
        return hlo_kind.op_key(self.opcode, self.attrs.get("custom_call_target", ""))

    @property
    def kind(self) -> str:
        """What the worker's per-op rows call this instruction: `dot`, `custom-call(...)`, `fusion(kLoop)`."""
        return hlo_kind.instruction_kind(self.opcode, self.attrs.get("kind", ""), self.attrs.get("backend_config", ""),
                                         self.attrs.get("custom_call_target", ""))

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
    raises on text. The module is shared by the callers that parse the same text (an investigation compares one
    release's HLO again in every comparison it is part of): read it, never change it."""
    if isinstance(text, (bytes, bytearray)):
        text = bytes(text).decode("utf-8", "replace")
    return _parsed(text or "")


@functools.lru_cache(maxsize=16)
def _parsed(text: str) -> HloModule:
    module, tables, current = HloModule(), _SourceTables(), None
    for line in text.splitlines():
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


def as_module(hlo: str | bytes | HloModule | None) -> HloModule:
    """`hlo` parsed, unless it already is a module."""
    return hlo if isinstance(hlo, HloModule) else parse_hlo(hlo)
