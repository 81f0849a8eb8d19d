"""Cutting a StableHLO function: any subset of its top-level ops as a module of its own.

What `isolate` (pieces in order) and `minimize` (any subset) share. The ops come from capture/export.function_ops.
A cut's inputs are the values its ops use but do not define (the function's arguments, or results of ops left out),
renamed `%piece_inK` in the order first used; constants are never inputs: each one a cut uses is copied in. A value
no bundle can carry (a token, a tuple, a dynamic shape) is never an input: such a cut is not feedable (None).
The values a cut returns are the caller's choice: isolate's are those used after it (`later_outputs`), minimize's
those nothing inside it uses (`unused_results`). `opened` replaces an op by the ops of its region (a call's callee,
one iteration of a while body: capture/export.region_ops reads them); `location_key` is an op's source line;
`bundle_inputs` the arrays a bundle's function is fed with.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from ...bundle.registry import Bundle, Registry
from ...capture.export import MLIR_ELEMENT_DTYPES, FunctionText, OpText, RegionText
from ...errors import UsageError
from ...run.replay import leaf_array
from ...worker.synthetic import synthetic_array

VALUE = re.compile(r"%[A-Za-z0-9_$.\-]+(?:#\d+)?")
_FILE_LINE = re.compile(r'"([^"]+)":(\d+):')


@dataclass
class FunctionGraph:
    """What cutting a function needs to know of it: its ops, each value's type, the constants (copied into each cut
    that uses them), which ops use each value, what it returns, the functions it calls."""

    name: str
    args: list[str]
    ops: list[OpText]
    types: dict[str, str]
    constants: dict[str, str]
    uses: dict[str, list[int]]
    returned: list[str]
    callees: list[str]

    @property
    def work(self) -> list[int]:
        """The indexes of the ops that are not constants (a cut copies constants in; they are never cut)."""
        return [i for i, op in enumerate(self.ops) if op.name != "stablehlo.constant"]


def graph_of(fn: FunctionText, what: str = "isolate") -> FunctionGraph:
    """The function's ops with their types; UsageError for dynamic shapes (`what` names the command)."""
    types: dict[str, str] = dict(zip(fn.args, fn.arg_types))
    for op in fn.ops:
        types.update(zip(op.results, op.result_types))
    if any("?" in t for t in types.values()):
        raise UsageError(f"the function has dynamic shapes: {what} needs a bundle at static shapes",
                         hint="pack it at concrete sizes")
    constants = {op.results[0]: op.asm for op in fn.ops if op.name == "stablehlo.constant" and len(op.results) == 1}
    uses: dict[str, list[int]] = {}
    for i, op in enumerate(fn.ops):
        for v in op.uses:
            uses.setdefault(v, []).append(i)
    return FunctionGraph(fn.name, list(fn.args), list(fn.ops), types, constants, uses, list(fn.returned),
                         list(fn.callees))


def feedable(t: str) -> bool:
    """A tensor type a bundle can carry as an input or output (static shape, an element type numpy has)."""
    m = re.fullmatch(r"tensor<(?:[0-9]+x)*([a-z0-9]+)>", t)
    return m is not None and m.group(1) in MLIR_ELEMENT_DTYPES


def cut_inputs(members: Sequence[int], graph: FunctionGraph) -> tuple[list[str], list[str]]:
    """The values the cut's ops use that it does not define: (its inputs, the constants it copies in)."""
    ops = graph.ops
    defined = {r for i in members for r in ops[i].results}
    used: list[str] = []
    needed_constants: list[str] = []
    for i in members:
        for name in ops[i].uses:
            if name in defined or name in used or name in needed_constants:
                continue
            (needed_constants if name in graph.constants else used).append(name)
    return used, needed_constants


def later_outputs(members: Sequence[int], graph: FunctionGraph) -> list[str]:
    """The values the cut defines that the function returns or a later op outside it uses."""
    inside = set(members)
    last = max(members)
    return [r for i in members for r in graph.ops[i].results
            if r in graph.returned or any(u not in inside and u > last for u in graph.uses.get(r, ()))]


def unused_results(members: Sequence[int], graph: FunctionGraph) -> list[str]:
    """The values the cut defines that no op inside it uses (what a cut computes), carriable ones only."""
    inside = set(members)
    return [r for i in members for r in graph.ops[i].results
            if feedable(graph.types[r]) and not any(u in inside for u in graph.uses.get(r, ()))]


@dataclass
class Cut:
    text: str  # a StableHLO module whose public @main computes the cut
    inputs: list[str]  # value names in the original function, in @main's argument order
    outputs: list[str]  # value names in the original function, in @main's result order


def cut(members: Sequence[int], graph: FunctionGraph, outputs: Sequence[str], module_name: str = "piece"
        ) -> Cut | None:
    """The ops `members` (in the function's order) as a module returning `outputs`; None when a value it takes or
    gives cannot be carried, or it gives nothing."""
    ops, types = graph.ops, graph.types
    members = sorted(members)
    used, needed_constants = cut_inputs(members, graph)
    if not outputs or not all(feedable(types[v]) for v in [*used, *outputs]):
        return None
    rename = {v: f"%piece_in{k}" for k, v in enumerate(used)}

    def sub(line: str) -> str:
        return VALUE.sub(lambda m: rename.get(m.group(0), m.group(0)), line)

    lines = [graph.constants[c] for c in needed_constants] + [sub(ops[i].asm) for i in members]
    signature = ", ".join(f"{rename[v]}: {types[v]}" for v in used)
    results = ", ".join(types[v] for v in outputs)
    body = "\n".join("    " + line.replace("\n", "\n    ") for line in lines)
    text = (f"module @{module_name} attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32}} {{\n"
            f"  func.func public @main({signature}) -> ({results}) {{\n{body}\n"
            f"    return {', '.join(outputs)} : {results}\n  }}\n"
            + "".join("  " + c.replace("\n", "\n  ") + "\n" for c in graph.callees) + "}\n")
    return Cut(text, used, list(outputs))


def why_not_cut(members: Sequence[int], graph: FunctionGraph, outputs: Sequence[str]) -> str:
    """Why `cut` gives None for these arguments: the first value at the cut's boundary no bundle can carry, named
    with the op that makes it and its source line (or that the cut gives nothing)."""
    if not outputs:
        return "it computes nothing the rest of the function uses"
    used, _ = cut_inputs(sorted(members), graph)
    maker = {r: op for op in graph.ops for r in op.results}
    for v in [*used, *outputs]:
        if not feedable(graph.types[v]):
            op = maker.get(v)
            made_by = f" made by {op.name}" + (f" at {location_key(op.location)}" if location_key(op.location) else "") \
                if op is not None else " (an argument)"
            return f"its boundary value {v}{made_by} is a {graph.types[v]}, which a bundle cannot carry"
    return "its boundary values are all tensors"


def function_text(graph: FunctionGraph, ops: Sequence[str], returned: Sequence[str], module_name: str) -> str:
    """A module whose public @main takes the graph's arguments, runs `ops` (asm lines) and returns `returned`."""
    signature = ", ".join(f"{v}: {graph.types[v]}" for v in graph.args)
    results = ", ".join(graph.types[v] for v in graph.returned)
    body = "\n".join("    " + line.replace("\n", "\n    ") for line in ops)
    return (f"module @{module_name} attributes {{mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32}} {{\n"
            f"  func.func public @main({signature}) -> ({results}) {{\n{body}\n"
            f"    return {', '.join(returned)} : {results}\n  }}\n"
            + "".join("  " + c.replace("\n", "\n  ") + "\n" for c in graph.callees) + "}\n")


def opened(graph: FunctionGraph, index: int, region: RegionText, serial: int) -> str | None:
    """The graph's function with its op `index` replaced by the ops of its region (capture/export.region_ops): a
    call's callee inlined, or one iteration of a while's body, the region's arguments bound to the op's operands
    and the op's results to what the region yields. The region's own values are renamed `%r<serial>_...` so they
    meet no name of the function. None when the region's arguments and the op's operands do not pair up."""
    if len(region.args) != len(region.operands) or len(region.yielded) != len(region.results):
        return None
    outer = set(graph.args) | {r.partition("#")[0] for op in graph.ops for r in op.results}
    bound = dict(zip(region.args, region.operands))

    def local(token: str) -> str:
        if token in bound:
            return bound[token]
        base, hash_, part = token.partition("#")
        if region.kind == "while" and base in outer:
            return token
        return f"%r{serial}_{base[1:]}{hash_}{part}"

    inlined = [VALUE.sub(lambda m: local(m.group(0)), op.asm) for op in region.ops]
    results = {r: local(y) for r, y in zip(region.results, region.yielded)}

    def after(line: str) -> str:
        return VALUE.sub(lambda m: results.get(m.group(0), m.group(0)), line)

    lines = [op.asm for op in graph.ops[:index]] + inlined + [after(op.asm) for op in graph.ops[index + 1:]]
    return function_text(graph, lines, [results.get(v, v) for v in graph.returned], "opened")


def consecutive_chunks(items: Sequence, n: int) -> list[list]:
    """`items` in at most `n` consecutive chunks of nearly equal size (none empty)."""
    size, extra = divmod(len(items), n)
    out, at = [], 0
    for k in range(n):
        step = size + (1 if k < extra else 0)
        out.append(list(items[at:at + step]))
        at += step
    return [c for c in out if c]


def location_key(loc: str) -> str | None:
    """`file.py:23`: the outermost frame, in the innermost frame's file, of an op's location; None without one."""
    frames = [f for f in _FILE_LINE.findall(loc) if f[0] != "-"]  # "-": the parsed text itself, no source
    if not frames:
        return None
    file = frames[0][0]
    line = frames[0][1]
    for f, n in frames:
        if f != file:
            break
        line = n
    return f"{Path(file).name}:{line}"


def bundle_inputs(registry: Registry, bundle: Bundle) -> list[np.ndarray]:
    """The bundle's input arrays (a synthetic leaf made as the worker makes it)."""
    from ...worker.dtypes import np_dtype

    out = []
    for leaf in bundle.manifest["inputs"]["leaves"]:
        if "synthetic" in leaf:
            out.append(synthetic_array(tuple(leaf["shape"]), np_dtype(leaf["dtype"]), leaf["synthetic"]))
        else:
            out.append(leaf_array(registry.get_blob(leaf["blob"]), leaf))
    return out
