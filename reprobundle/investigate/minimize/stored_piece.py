"""An investigation's minimize step over stored answers: the piece minimize made of the same bundle, between the
same two releases, for the same property, on the builds here, is reused ("stored 2 min ago") as long as the reduced
bundle is still in the store; a search --max-time or Ctrl-C cut short is not (the next call searches again), and
`again` recomputes. The record (answers.MINIMIZATION) is stored beside the bundle as the step ends."""

from __future__ import annotations

from typing import Any, Sequence

from ...bundle.registry import Bundle, Registry
from ..answers import MINIMIZATION, builds_of, own_piece, reusable, reuse_key, store_minimization_answer


def minimization_asked(versions: Sequence[str], prop: str, bits: bool) -> dict:
    """What a minimization was asked: its two releases (A, then B), the property, whether any bit counts."""
    return {"versions": list(versions), "property": prop, "bits": bits}


def stored_minimization(registry: Registry, bundle: Bundle, asked: dict, manager: Any) -> dict | None:
    """The latest finished minimization record asked exactly `asked` here (answers.reusable) whose reduced bundle
    is still that piece of this bundle, its blobs intact (answers.own_piece); None: minimize again."""
    record = reusable(registry, bundle, MINIMIZATION, asked, manager)
    return record if record is not None and own_piece(registry, bundle, record) is not None else None


def store_minimization(registry: Registry, bundle: Bundle, found: Any, command: str, asked: dict,
                       manager: Any) -> str | None:
    """The minimization `found` (reduction.py's Minimization) stored as an answer of `bundle`, with what it was asked
    and the builds it ran on; its id (None for a read-only store or a piece not packed)."""
    reuse = reuse_key(registry, "minimize", asked, builds_of(manager, asked["versions"]))
    return store_minimization_answer(registry, bundle, found, command, reuse)


def minimized_text(ops_before: int, ops_after: int, prop: str, versions: Sequence[str], stopped: str) -> str:
    """The step's one line: `4 -> 1 ops still show slower between 0.4.31 and 0.4.33 (done)`."""
    return f"{ops_before} -> {ops_after} ops still show {prop} between {versions[0]} and {versions[1]} ({stopped})"
