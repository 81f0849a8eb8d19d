"""Isolation: the bundle's StableHLO split into pieces, each timed standalone on two versions, the piece whose time
moved most packed as a bundle of its own: a minimal repro, and an answer that needs no profiler.

A per-op profile can be missing (jaxlib 0.4.30 traces no ops) or wrong (a release whose trace shows only launches);
a piece timed as its own program is neither. The split follows the source: consecutive top-level ops of the traced
function that come from the same line of the user's code (the outermost frame in the innermost frame's file, so a
helper's ops go with the line that called it) form a piece; a module without source locations is split before each
op that does real work (dots, convolutions, reductions, custom calls, loops). Neighbouring pieces are merged until
at most `max_pieces` remain (the two with the fewest ops first), and a piece whose boundary holds a value no bundle
can carry (a token) is merged with the next. Constants are copied into every piece that uses them.

Each piece is packed (into a scratch store) with its real inputs: the bundle's inputs, or the reference outputs of
the pieces before it, which the packing worker computes, so every intermediate value is what the function computes.
Then all pieces are replayed on both versions in one measurement (run/replay.py's replay_pieces): each round
starts a worker per piece and version, and their steps alternate, each piece's two versions back to back, with the
adaptive budget `replay` uses. A piece stops being timed once it cannot hold the function's largest move
(analysis/piece_selection.py: after the first, screening round, or from the third on), or once its verdict settles; the
measurement ends when the piece that moved most has its verdict. That piece is packed again into the user's store.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from ...analysis.verdict import MIN_ROUNDS, paired_log_ratios, timing_verdict
from ...bundle.registry import Bundle, Registry
from ...capture.export import function_ops, load_stablehlo
from ...capture.pack import pack
from ...capture.pack_options import PackOptions
from ...config import ISOLATE_WARMUP
from ...errors import UsageError
from ...logs import Status
from ...run.budget import STOP_RULED_OUT
from ...run.execution import DEFAULT_TIMEOUT_S
from ...run.replay import leaf_array, replay_pieces
from ...run.replay_options import ReplayOptions
from ...store.scratch import scratch_dir, temp_folder
from .hlo_cut import FunctionGraph, bundle_inputs, cut, graph_of, later_outputs, location_key, why_not_cut

if TYPE_CHECKING:
    from ...envs.manager import EnvironmentManager

DEFAULT_MAX_PIECES = 8
DEFAULT_OPTIONS = ReplayOptions(warmup=ISOLATE_WARMUP, dump=False, profile=False)
# Ops that do the work of a program: in a module without source locations, each starts a piece.
HEAVY_OPS = frozenset({"stablehlo.dot_general", "stablehlo.dot", "stablehlo.convolution", "stablehlo.reduce",
                       "stablehlo.reduce_window", "stablehlo.custom_call", "stablehlo.while", "stablehlo.sort",
                       "stablehlo.scatter", "stablehlo.gather", "stablehlo.fft", "stablehlo.case", "stablehlo.if",
                       "stablehlo.select_and_scatter", "stablehlo.cholesky", "stablehlo.triangular_solve"})


@dataclass
class Piece:
    index: int
    label: str  # `attention.py:25` or `dot_general at op 4`
    text: str  # a StableHLO module whose public @main is the piece
    inputs: list[str]  # value names in the original function, in @main's argument order
    outputs: list[str]  # value names in the original function, in @main's result order
    ops: list[str]  # the op names inside, in order (stablehlo.dot_general, ...)


@dataclass
class Split:
    function: str  # the function that was split (@main, or the one it only calls)
    pieces: list[Piece]
    args: list[str]  # that function's argument names (they are the bundle's inputs, in order)
    results: list[str]  # the values it returns, in order


def split_module(text: str, max_pieces: int = DEFAULT_MAX_PIECES) -> Split:
    """The module's main computation in at most `max_pieces` pieces, each a module of its own (see the module
    docstring). UsageError when the module cannot be split (one op, dynamic shapes, no tensors)."""
    fn = function_ops(text)
    module = graph_of(fn)
    work = [i for i, op in enumerate(fn.ops) if op.name != "stablehlo.constant"]
    if len(work) < 2:
        raise UsageError(f"@{fn.name} has {len(work)} op(s) that do work: nothing to split",
                         hint="the bundle is already as small as a repro gets")
    keys = [location_key(fn.ops[i].location) for i in work]
    by_source = any(k is not None for k in keys)
    groups = _merged(_groups(fn.ops, work, keys, by_source), max_pieces)
    pieces = _cut(module, groups, lambda first: keys[work.index(first)] if by_source else None)
    if len(pieces) < 2:
        raise UsageError("the function cannot be split into pieces a bundle can carry")
    return Split(function=fn.name, pieces=pieces, args=fn.args, results=fn.returned)


def _cut(module: FunctionGraph, groups: list[list[int]], key_of: Callable[[int], str | None]) -> list[Piece]:
    """A piece per group; a group whose boundary values cannot be fed (not all tensors) is merged with the next."""
    pieces: list[Piece] = []
    pending: list[int] = []
    for n, group in enumerate(groups):
        members = pending + group
        piece = _piece(len(pieces), members, module, key_of(members[0]))
        if piece is None and n + 1 < len(groups):
            pending = members  # a boundary value that cannot be fed: merged with the next group
            continue
        if piece is None:
            raise UsageError(f"no piece can start at op {members[0]} ({module.ops[members[0]].name}): "
                             f"{why_not_cut(members, module, later_outputs(members, module))}",
                             hint="a value that is not a tensor (a token, a tuple) cannot be fed to a piece; minimize "
                                  "keeps such ops whole")
        pieces.append(piece)
        pending = []
    return pieces


def _groups(ops: list, work: list[int], keys: list, by_source: bool) -> list[list[int]]:
    """The ops that do work, grouped: by source line when the module has locations (a new line starts a group),
    else a group starts at each heavy op."""
    groups: list[list[int]] = []
    last_key = object()
    for i, key in zip(work, keys):
        if by_source:
            new = key is not None and key != last_key
            last_key = key if key is not None else last_key
        else:
            new = ops[i].name in HEAVY_OPS
        if new or not groups:
            groups.append([i])
        else:
            groups[-1].append(i)
    return groups


def _merged(groups: list[list[int]], max_pieces: int) -> list[list[int]]:
    """At most `max_pieces` groups: the smallest neighbouring pair merged until they fit."""
    while len(groups) > max_pieces:
        sizes = [len(a) + len(b) for a, b in zip(groups, groups[1:])]
        k = sizes.index(min(sizes))
        groups[k:k + 2] = [groups[k] + groups[k + 1]]
    return groups


def _piece(index: int, members: list[int], module: FunctionGraph, key: str | None) -> Piece | None:
    """The ops `members` as a module of their own, or None when a value it takes or gives is not a tensor."""
    made = cut(members, module, later_outputs(members, module), f"piece_{index}")
    if made is None:
        return None
    ops = module.ops
    heavy = [ops[i].name for i in members if ops[i].name in HEAVY_OPS]
    label = key or f"{(heavy or [ops[members[0]].name])[0].split('.')[-1]} at op {members[0]}"
    return Piece(index=index, label=label, text=made.text, inputs=made.inputs, outputs=made.outputs,
                 ops=[ops[i].name for i in members])


# ------------------------------------------------------------------------------------------------ isolate


@dataclass
class PieceResult:
    piece: Piece
    ref: str  # the piece's bundle in the scratch store
    inputs: list = field(default_factory=list)  # its input arrays (the values the function computes there)
    runs: list[dict] = field(default_factory=list)
    verdict: dict | None = None
    base_ns: float | None = None
    cand_ns: float | None = None
    ruled_out: int | None = None  # the round after which it could no longer hold the largest move (None: it could)

    @property
    def delta_ns(self) -> float:
        """The change of the piece's time: its baseline median times the paired ratio, less one."""
        if self.verdict is None or self.base_ns is None or not math.isfinite(self.verdict["ratio"]):
            return 0.0
        return self.base_ns * (float(self.verdict["ratio"]) - 1.0)

    @property
    def differs(self) -> bool:
        return self.verdict is not None and self.verdict.get("verdict") in ("slower", "faster")


@dataclass
class Isolation:
    bundle: str
    versions: tuple[str, str]
    function: str
    pieces: list[PieceResult]
    moved: PieceResult | None  # the piece that moved most (a verdict of slower or faster first)
    packed: str | None  # its bundle in the user's store


def _piece_verdict(base: dict, cand: dict) -> dict:
    """The paired verdict of a piece timed long enough for one; else (ruled out after its screening round) its ratio
    alone, verdict 'unknown'."""
    paired = paired_log_ratios(base, cand) or []
    if len(paired) >= MIN_ROUNDS:
        return timing_verdict(base, cand)
    return {"verdict": "unknown", "ratio": float(np.exp(np.mean(paired))) if paired else float("nan"),
            "p_value": None, "ci95": None, "rounds": len(paired), "settled": False,
            "caveat": f"timed {len(paired)} round(s): too few for a verdict"}


def isolate(registry: Registry, bundle: Bundle, versions: Sequence[str], options: ReplayOptions = DEFAULT_OPTIONS, *,
            max_pieces: int = DEFAULT_MAX_PIECES, name: str | None = None,
            env_manager: EnvironmentManager | None = None, progress: Callable[[str], None] | None = None) -> Isolation:
    """Split `bundle`, pack each piece with its real inputs, time them on versions[0] (baseline) and versions[1]
    together, and copy the piece whose median moved most into `registry` as `name` (default: NAME-piece-K).
    `options`: how the pieces are timed (their XLA dumps and profiles are never kept)."""
    timeout_s = options.timeout_s
    say = progress or (lambda _line: None)
    if len(versions) != 2:
        raise UsageError("isolate compares two versions", hint="give --jax twice: the baseline, then the candidate")
    with scratch_dir(temp_folder(), "reprobundle-isolate-") as tmp:
        scratch = Registry.open(str(Path(tmp) / "store"))
        split, results = pack_pieces(registry, bundle, scratch, max_pieces=max_pieces, timeout_s=timeout_s, say=say)
        say(Status(f"timing the {len(results)} pieces on jax {versions[0]} and {versions[1]} together; a piece stops "
                   "once it cannot hold the largest move", "isolate"))
        all_runs = replay_pieces(scratch, [scratch.resolve(r.ref) for r in results], list(versions),
                                 replace(options, dump=False, profile=False), env_manager=env_manager,
                                 progress=progress, store_runs=False)
        moved = judge(results, all_runs)
        packed_ref = None
        if moved is not None:
            target = name or f"{bundle.ref.name}-piece-{moved.piece.index + 1}"
            say(Status(f"packing piece {moved.piece.index + 1} ({moved.piece.label}) as {target}", "isolate"))
            packed_ref = pack_piece(registry, bundle, moved, versions, target, timeout_s=timeout_s)
    return Isolation(bundle=str(bundle.ref), versions=(versions[0], versions[1]), function=split.function,
                     pieces=results, moved=moved, packed=packed_ref)


def pack_pieces(registry: Registry, bundle: Bundle, scratch: Registry, *, max_pieces: int = DEFAULT_MAX_PIECES,
                timeout_s: float = DEFAULT_TIMEOUT_S, say: Callable[[str], None] = lambda _line: None,
                ) -> tuple[Split, list[PieceResult]]:
    """`bundle` split, each piece packed into `scratch` with its real inputs (the reference outputs of the pieces
    before it, computed by the packing worker)."""
    text_ref = bundle.manifest["function"].get("stablehlo_text")
    if not text_ref:
        raise UsageError(f"{bundle.ref} holds no StableHLO text to split")
    split = split_module(registry.get_blob(text_ref).decode("utf-8", "replace"), max_pieces)
    say(Status(f"split @{split.function} of {bundle.ref} into {len(split.pieces)} pieces: "
               + ", ".join(p.label for p in split.pieces), "isolate"))
    values = dict(zip(split.args, bundle_inputs(registry, bundle)))
    results: list[PieceResult] = []
    for piece in split.pieces:
        say(Status(f"piece {piece.index + 1}/{len(split.pieces)} ({piece.label}): packing with its inputs",
                   "isolate"))
        leaves = [values[v] for v in piece.inputs]
        options = PackOptions(name=f"piece-{piece.index + 1}", description=f"{bundle.ref}: {piece.label}", warmup=1,
                              repeat=3, dump=False, profile=False, timeout_s=timeout_s)
        ref = pack(scratch, _piece_function(piece), leaves, options, parent=str(bundle.ref), source=piece.text)
        packed = scratch.load(ref.name, ref.version)
        for v, leaf in zip(piece.outputs, packed.manifest["reference"]["outputs"]):
            values[v] = leaf_array(scratch.get_blob(leaf["blob"]), leaf)
        results.append(PieceResult(piece, f"{ref.name}@{ref.version}", leaves))
    return split, results


def _piece_function(piece: Piece):
    """The piece's module loaded; a piece that does not parse is this tool's fault, never the user's input."""
    try:
        return load_stablehlo(piece.text)
    except UsageError as e:
        raise UsageError(f"piece {piece.index + 1} ({piece.label}: {', '.join(sorted(set(piece.ops)))}) of the "
                         f"split does not parse: {e.message}",
                         hint="a cut reprobundle made is wrong: please report it with the bundle "
                              "(reprobundle export NAME -o NAME.zip)") from None


def judge(results: Sequence[PieceResult], all_runs: Sequence[Sequence[dict]]) -> PieceResult | None:
    """Each piece's runs (baseline, candidate) and verdict filled in; the piece that moved most among those whose
    verdict says they moved, else the biggest change of any (None: no piece ran on both)."""
    for r, runs in zip(results, all_runs):
        r.runs = list(runs)
        base, cand = runs
        if base["status"] in ("ok", "mismatch") and cand["status"] in ("ok", "mismatch"):
            r.verdict = _piece_verdict(base["timing"], cand["timing"])
            r.base_ns = float(np.median(base["timing"]["samples_ns"]))
            r.cand_ns = float(np.median(cand["timing"]["samples_ns"]))
            schedule = (cand["environment"].get("conditions") or {}).get("schedule") or {}
            r.ruled_out = schedule.get("rounds") if schedule.get("stopped") == STOP_RULED_OUT else None
    timed = [r for r in results if r.verdict is not None]
    return max(timed, key=lambda r: (r.differs, abs(r.delta_ns))) if timed else None


def pack_piece(registry: Registry, bundle: Bundle, piece: PieceResult, versions: Sequence[str], name: str, *,
               timeout_s: float = DEFAULT_TIMEOUT_S) -> str:
    """The piece packed where the user keeps bundles, with a full reference run; its ref."""
    options = PackOptions(name=name, description=f"piece {piece.piece.index + 1} of {bundle.ref} "
                                                 f"({piece.piece.label}), isolated between jax {versions[0]} and "
                                                 f"{versions[1]}",
                          labels={"isolated-from": str(bundle.ref), "piece": piece.piece.label}, timeout_s=timeout_s)
    made = pack(registry, _piece_function(piece.piece), piece.inputs, options, parent=str(bundle.ref),
                source=piece.piece.text)
    return f"{made.name}@{made.version}"
