"""Parsed HLO (hlo_parse) summarized into fusions and unfused ops, matched across two versions, and diffed: how
fusion changed (fusion_diff) and where per-op time moved (per_op_diff, median_per_op).

Pure Python; no JAX.

Vocabulary. A *node* is a fusion or an unfused op at the top level of a control computation (see hlo_parse). XLA
renumbers names between releases, so nodes are matched across versions by *signature*: fusion kind + multiset of
the ops inside + output shape (layouts dropped); the *core* signature drops the kind and whether it is fused at all,
so `reduce` and a single-op `wrapped_reduce` fusion share one.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from typing import Sequence

from .hlo_parse import HloModule, Instruction, as_module, strip_layout

# Ops that cost nothing or only move tuples: left out of signatures and of the unfused-op listing.
FREE_OPCODES = frozenset({"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all"})

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
    op_kind: str = ""  # the instruction's kind as the worker's per-op rows name it (worker.hlo_kind): `fusion(kLoop)`
    operands: tuple[str, ...] = ()  # names of the instructions it reads: its identity in the dataflow graph

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
                location=instr.location, op_name=instr.op_name, op_kind=instr.kind, operands=tuple(instr.operands))


def top_level_nodes(hlo: str | HloModule) -> list[Node]:
    """Fusions and unfused ops (free ops and control-flow ops left out) of all control computations, in order."""
    module = as_module(hlo)
    nodes = []
    for comp in module.control_computations():
        for instr in comp.instructions:
            if instr.is_fusion or (instr.opcode not in FREE_OPCODES and not instr.is_control_flow):
                nodes.append(node_of(module, instr, comp.name))
    return nodes


def fusion_summary(hlo: str | HloModule) -> dict:
    """Fusions (name, kind, ops inside, output shape, where) and unfused ops of the control computations, and counts.

    Returns {"module", "fusions": [node dicts], "unfused": [node dicts], "fusion_counts": {kind: n},
    "unfused_counts": {op: n}, "n_fusions", "n_unfused", "control_computations": [names], "skipped_lines"}.
    """
    module = as_module(hlo)
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


def _pair_by(key, how: str, base: list[Node], cand: list[Node], out: list,
             known: dict[str, str] | None = None) -> tuple[list[Node], list[Node]]:
    """Pair nodes whose key agrees. Among several candidates: the same name first, then the same inputs (operands
    that are the same instruction, or were paired already: `known` maps base names to candidate names and grows
    with every pair), then the same source location, then the first in program order. Returns the leftovers."""
    known = {} if known is None else known
    groups: dict = {}
    for n in cand:
        groups.setdefault(key(n), []).append(n)
    rest_base = []
    for b in base:
        options = groups.get(key(b), [])
        pick = _pick(b, options, known)
        if pick is None:
            rest_base.append(b)
            continue
        options.remove(pick)
        out.append((b, pick, how))
        known[b.name] = pick.name
    taken = {id(c) for _, c, _ in out}
    return rest_base, [c for c in cand if id(c) not in taken]


def _pick(b: Node, options: list[Node], known: dict[str, str]) -> Node | None:
    """The option `b` pairs with: the same name, then the same inputs, then the same source location and op, then the
    first; None when there is no option."""
    pick = next((c for c in options if c.name == b.name), None) or _same_inputs(b, options, known)
    if pick is None:
        pick = (next((c for c in options if b.location and c.location == b.location and c.op_name == b.op_name),
                     None) or (options[0] if options else None))
    return pick


def _same_inputs(b: Node, options: list[Node], known: dict[str, str]) -> Node | None:
    """The option that reads the most of what `b` reads (an operand with the same name, or `b`'s operand's pair),
    if one reads more than every other."""
    if len(options) < 2 or not b.operands:
        return None
    mapped = [known.get(o, o) for o in b.operands]

    def score(c: Node) -> int:
        return sum(1 for x, y in zip(mapped, c.operands) if x == y)

    scores = [score(c) for c in options]
    best = max(scores)
    return options[scores.index(best)] if best > 0 and scores.count(best) == 1 else None


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


def _pair_similar(base: list[Node], cand: list[Node], out: list,
                  known: dict[str, str] | None = None) -> tuple[list[Node], list[Node]]:
    """Greedy best-first pairing by `_similar`, among nodes that share at least one op."""
    scored = _similarity_scores(base, cand)
    used_b, used_c = set(), set()
    for _, i, j in scored:
        if i not in used_b and j not in used_c:
            used_b.add(i)
            used_c.add(j)
            out.append((base[i], cand[j], "similar"))
            if known is not None:
                known[base[i].name] = cand[j].name
    return ([b for i, b in enumerate(base) if i not in used_b], [c for j, c in enumerate(cand) if j not in used_c])


def _similarity_scores(base: list[Node], cand: list[Node]) -> list[tuple[float, int, int]]:
    """(score, base index, cand index) of every pair that shares an op and is alike, best first."""
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
    return scored


def match_nodes(base: list[Node], cand: list[Node]) -> Matching:
    """Match nodes across versions: equal signature ("same"), equal core signature ("wrapped", "unwrapped",
    "rekinded": same ops and shape, fused differently), then best op overlap ("similar", at least half).
    Nodes that look alike are told apart by what they read (see `_pair_by`): the fusion diff and the per-op diff
    both pair through here, so they always name the same pairs."""
    pairs: list = []
    known: dict[str, str] = {}
    b, c = _pair_by(lambda n: n.signature, "same", base, cand, pairs, known)
    core_pairs: list = []
    b, c = _pair_by(lambda n: n.core_signature, "", b, c, core_pairs, known)
    pairs += [(x, y, _refusion_how(x, y)) for x, y, _ in core_pairs]
    b, c = _pair_similar(b, c, pairs, known)
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
    entry: dict = {"base": b.name, "cand": c.name, "how": how, "label": c.label, "base_kind": b.kind or "unfused",
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
    diff: dict = {"base": _counts(base_nodes), "cand": _counts(cand_nodes), **_pair_entries(m), **_group_entries(g),
                  **_one_sided_entries(g)}
    diff["moves"] = _moves(m, g)
    diff["identical"] = not any(diff[k] for k in ("refused", "changed", "merged", "split", "appeared", "disappeared",
                                                  "unfused_only_base", "unfused_only_cand"))
    diff["summary"] = _diff_summary(diff)
    return diff


def _pair_entries(m: Matching) -> dict:
    """fusion_diff's "unchanged", "refused" and "changed": the matched pairs by how they matched."""
    return {
        "unchanged": [_pair_entry(b, c, h) for b, c, h in m.pairs if h == "same"],
        "refused": [_pair_entry(b, c, h) for b, c, h in m.pairs if h in ("wrapped", "unwrapped", "rekinded")],
        "changed": [_pair_entry(b, c, h) for b, c, h in m.pairs if h == "similar"],
    }


def _group_entries(g: Groups) -> dict:
    """fusion_diff's "merged" and "split": new fusions with what they absorbed, gone ones with what they became."""
    return {
        "merged": [{**c.describe(), "absorbed": [x.describe() for x in bs]} for bs, cs in g.merged for c in cs],
        "split": [{**b.describe(), "split_into": [x.describe() for x in cs]} for bs, cs in g.split for b in bs],
    }


def _one_sided_entries(g: Groups) -> dict:
    """fusion_diff's one-sided nodes: fusions that appeared or disappeared, unfused ops on one side only."""
    return {
        "appeared": [n.describe() for n in g.cand_left if n.is_fusion],
        "disappeared": [n.describe() for n in g.base_left if n.is_fusion],
        "unfused_only_base": [n.describe() for n in g.base_left if not n.is_fusion],
        "unfused_only_cand": [n.describe() for n in g.cand_left if not n.is_fusion],
    }


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
    parts += _refusion_parts(d["refused"])
    if d["changed"]:
        parts.append(f"{len(d['changed'])} changed contents")
    parts += _group_parts(d["merged"], "absorbed", "took in", "took in others")
    parts += _group_parts(d["split"], "split_into", "split into", "split")
    parts += _one_sided_parts(d)
    return "; ".join(parts)


def _refusion_parts(refused: list[dict]) -> list[str]:
    """What was wrapped into fusions, what is no longer fused, how many changed fusion kind."""
    parts = []
    wrapped = Counter(e["label"] for e in refused if e["how"] == "wrapped")
    if wrapped:
        parts.append("wrapped into fusions: " + _counter_text(wrapped))
    unwrapped = Counter(e["label"] for e in refused if e["how"] == "unwrapped")
    if unwrapped:
        parts.append("no longer fused: " + _counter_text(unwrapped))
    if any(e["how"] == "rekinded" for e in refused):
        parts.append(f"{sum(e['how'] == 'rekinded' for e in refused)} changed fusion kind")
    return parts


def _group_parts(groups: list[dict], members: str, verb: str, more: str) -> list[str]:
    """`f.3 (kLoop) took in a, b`: the first two groups by name, then how many more."""
    parts = [f"{e['name']} ({e['kind']}) {verb} " + _names([x["name"] for x in e[members]]) for e in groups[:2]]
    if len(groups) > 2:
        parts.append(f"{len(groups) - 2} more fusions {more}")
    return parts


def _one_sided_parts(d: dict) -> list[str]:
    """New and gone fusions by name, then the unfused ops on one side only by kind."""
    parts = [f"{what}: " + _names([f"{n['name']} ({n['kind']}: {n['label']})" for n in d[key]], 3)
             for key, what in (("appeared", "new"), ("disappeared", "gone")) if d[key]]
    parts += [f"{what}: " + _counter_text(Counter(n["label"] for n in d[key]), 6)
              for key, what in (("unfused_only_base", "unfused only before"), ("unfused_only_cand", "unfused only after"))
              if d[key]]
    return parts


def _names(names: list[str], limit: int = 4) -> str:
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _counter_text(c: Counter, limit: int = 8) -> str:
    """`dot×4, reduce, ...`: the most common first, at most `limit` kinds."""
    items = [f"{k}×{v}" if v > 1 else k for k, v in c.most_common()]
    more = len(items) - limit
    return ", ".join(items[:limit]) + (f" and {more} more kind{'s' if more > 1 else ''}" if more > 0 else "")


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


def _profiled_nodes(rows: dict[str, dict], module: HloModule) -> list[Node]:
    """The nodes of the whole module (what the fusion diff pairs) and, after them, a node per profiled name the
    module's top level lacks: the instruction when the name is elsewhere in the HLO, else an opaque node keyed by
    name (matched by name only)."""
    nodes = top_level_nodes(module)
    names = {n.name for n in nodes}
    for name in rows:
        if name in names:
            continue
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


# A per-op table explains a step when its ops' times add up to about the step's median: each op's time is its share of
# the traced calls' wall time (worker/trace.py), so the sum is at most a traced call, which runs a little slower than
# an untimed one. Below COVERAGE_MIN most of the step happened where the profile saw no op (a profiler that traces
# only launches: run records made before the reduction followed asynchronous thunks covered 40-70% on jax 0.7/0.8),
# so the op whose time moved most may be no part of the change. Above 1 the traced calls ran slower than the timed
# steps, or (records made before the reduction shared concurrent time) concurrent events were summed: the table
# then still sees the whole step, so it may name an op.
COVERAGE_MIN = 0.75


def per_op_coverage(per_op: Sequence[dict] | None, median_ns: float | None) -> float | None:
    """Sum of the per-op times over the median step time; None without a table or a median."""
    if not per_op or not median_ns or not median_ns > 0:
        return None
    total = 0.0
    for row in per_op:
        value = row.get("time_ns") if isinstance(row, dict) else None
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value == value:
            total += float(value)
    return total / float(median_ns)


def coverage_explains(coverage: float | None) -> bool:
    return coverage is not None and coverage >= COVERAGE_MIN


def per_op_diff(base_per_op: list[dict] | None, cand_per_op: list[dict] | None, base_hlo: str | HloModule | None,
                cand_hlo: str | HloModule | None) -> list[dict]:
    """Per-op time moves between two versions, biggest |delta_ns| first.

    Per-op rows are {"name": HLO instruction name, "kind", "time_ns" (per iteration), "count"}. Ops are paired by
    their identity in the HLO, exactly as the fusion diff pairs them (`match_nodes` over every node of both modules:
    same signature and name, same inputs, then similar contents); a new (vanished) fusion is set against the nodes
    of the other side it absorbed (was split into), summed; a profiled name the HLO lacks is paired by name.
    Returns the rows where at least one side was profiled: {"base_name", "cand_name", "kind", "signature",
    "match", "source", "base_ns", "cand_ns", "delta_ns", "ratio"}. A side with no node has None for its name; a
    side with no profiled time has None for its time (its delta counts it as 0); ratio is cand/base or None; kind
    is the profiled row's, else the instruction kind in the HLO (worker.hlo_kind: `fusion(kLoop)`, `dot`), else
    "unknown". `match`: "name" (same op, same name), "signature" (same op, renamed), "wrapped" / "unwrapped" /
    "rekinded" / "similar" (see match_nodes), "merged", "split", "base only", "cand only".
    """
    base_rows, cand_rows = _aggregate(base_per_op), _aggregate(cand_per_op)
    base_nodes = _profiled_nodes(base_rows, as_module(base_hlo))
    cand_nodes = _profiled_nodes(cand_rows, as_module(cand_hlo))
    m = match_nodes(base_nodes, cand_nodes)
    out = []
    for b, c, how in m.pairs:
        if b.name in base_rows or c.name in cand_rows:
            match = ("name" if b.name == c.name else "signature") if how == "same" else how
            out.append(_time_row([b], [c], match, base_rows, cand_rows))
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
    return [r for r in rows if r["base_ns"] is not None or r["cand_ns"] is not None]


def _time_row(base: list[Node], cand: list[Node], how: str, base_rows: dict, cand_rows: dict) -> dict:
    base_ns, cand_ns = _summed_time(base, base_rows), _summed_time(cand, cand_rows)
    main = (cand or base)[0]
    kind_row = cand_rows.get(main.name) if cand else base_rows.get(main.name)
    return {
        "base_name": _joined_names(base),
        "cand_name": _joined_names(cand),
        "kind": (kind_row or {}).get("kind") or main.op_kind or "unknown",
        "signature": main.label if not main.label.startswith("?") else "",
        "match": how,
        "source": main.source,
        "base_ns": base_ns, "cand_ns": cand_ns,
        "delta_ns": (cand_ns or 0.0) - (base_ns or 0.0),
        "ratio": (cand_ns / base_ns) if base_ns and cand_ns is not None else None,
    }


def _summed_time(nodes: list[Node], rows: dict) -> float | None:
    """The profiled time of `nodes` together; None when none of them was profiled."""
    times = [rows[n.name]["time_ns"] for n in nodes if n.name in rows]
    return sum(times) if times else None


def _joined_names(nodes: list[Node]) -> str | None:
    return " + ".join(n.name for n in nodes) or None
