"""The real values minimize feeds its candidates: every value a function's ops define that a bundle can carry,
computed on the baseline (A).

In one run of the function returning them all (all_values_cut), where A's worker runs that module. Where that
module kills the worker (a crash in any phase, in a fresh worker too: run/module_server retries a death while
loading once), the values are computed in smaller cuts: the function's ops in PIECES consecutive pieces, in order,
each a module of its own fed with the values the pieces before it computed; a piece that kills the worker is cut
again, down to single ops. A single op that still kills it raises WorkerDeath, the reason in words: the release
cannot take the text of a module with that op, whatever the search would try (minimize ends with it at the top
level; below, the piece above stands). A piece that cannot be cut
(a value no bundle carries at its edge) or that fails without dying leaves its values unknown: the candidates that
need them are not built (reduction.candidate), the others are.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ...errors import UsageError
from .hlo_cut import Cut, FunctionGraph, consecutive_chunks, cut, feedable, location_key
from .worker_outcomes import Runner, WorkerDeath, died_text, error_text

PIECES = 8  # a cut that kills the worker is cut again into this many: a single op is reached in a few deaths
WHAT = "the function's intermediate values"


def all_values_cut(graph: FunctionGraph) -> Cut | None:
    """The whole function returning every value its ops define that a bundle can carry (what every candidate's
    inputs are taken from)."""
    work = graph.work
    outputs = [r for i in work for r in graph.ops[i].results if feedable(graph.types[r])]
    return cut(work, graph, outputs, "all_values")


def intermediate_values(a: Runner, graph: FunctionGraph, values: dict[str, np.ndarray]) -> None:
    """Every value the function's ops define that a bundle can carry, computed on A into `values` (which holds the
    function's arguments): in one run, or in pieces where that run kills A's worker (see the module docstring).
    UsageError where A fails on the function without dying; WorkerDeath where a single op still kills it."""
    whole = all_values_cut(graph)
    if whole is None:
        return
    outcome = a.run(whole.text, [values[v] for v in whole.inputs])
    if outcome.ok:
        values.update(zip(whole.outputs, (np.asarray(x) for x in outcome.outputs)))
    elif outcome.status == "crashed":
        _in_pieces(a, graph, values, graph.work)
    else:
        raise UsageError(f"the baseline cannot compute {WHAT}: {error_text(outcome)}")


def _in_pieces(a: Runner, graph: FunctionGraph, values: dict[str, np.ndarray], members: Sequence[int]) -> None:
    """The values of the ops `members` (consecutive, in order), piece after piece; a piece that kills the worker cut
    again; WorkerDeath for a single op that does."""
    for piece in consecutive_chunks(members, PIECES):
        outputs = [r for i in piece for r in graph.ops[i].results if feedable(graph.types[r])]
        made = cut(piece, graph, outputs, "values")
        if made is None or any(v not in values for v in made.inputs):
            continue  # its values stay unknown: the candidates that need them are not built
        outcome = a.run(made.text, [values[v] for v in made.inputs])
        if outcome.ok:
            values.update(zip(made.outputs, (np.asarray(x) for x in outcome.outputs)))
        elif outcome.status == "crashed" and len(piece) > 1:
            _in_pieces(a, graph, values, piece)
        elif outcome.status == "crashed":
            op = graph.ops[piece[0]]
            at = location_key(op.location)
            raise WorkerDeath(died_text(a.contender, outcome, WHAT, f", even in pieces down to a module of one op "
                                                                f"({op.name}{f' at {at}' if at else ''})"))
