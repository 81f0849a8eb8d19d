"""What minimize asks of a contender's module worker (run/module_server.ModuleWorker) and says of its outcomes.

A failure is one line (error_text) and has a kind that tells it apart from another (error_kind). A worker that died
on a module minimize cannot do without (the whole bundle on the baseline, the function's intermediate values) is
said in words, with the release, the phase and the worker's own last line on stderr (died_text), never as a bare
LLVM or XLA line: WorkerDeath, a UsageError, ends minimize with it and is a line of investigate's minimize step.
"""

from __future__ import annotations

import re
from typing import Any, Protocol, Sequence

import numpy as np

from ...errors import UsageError
from ...run.contenders import ContenderSpec


class Outcome(Protocol):
    """What a module did on one contender (run/module_server.ModuleOutcome)."""

    status: str
    outputs: list
    samples_ns: list
    phase: str | None
    error_type: str | None
    message: str
    first_death: str  # how the first worker died, where the call was made again in a fresh one

    @property
    def ok(self) -> bool: ...

    @property
    def death_words(self) -> str: ...  # a dead worker: "aborted", "crashed (SIGSEGV)", ...

    @property
    def last_line(self) -> str: ...  # a dead worker's own last line on stderr


class Runner(Protocol):
    """One contender's long-lived worker (run/module_server.ModuleWorker)."""

    contender: ContenderSpec

    def run(self, text: str, inputs: Sequence[np.ndarray]) -> Any: ...

    def prepare(self, text: str, inputs: Sequence[np.ndarray]) -> Any: ...

    def time_prepared(self, repeat: int, *, warmup: int = 0) -> Any: ...


class WorkerDeath(UsageError):
    """A contender's module worker died on a module minimize cannot do without, in a fresh worker too: the message
    says which release, in which phase, on what, and the worker's own last line on stderr."""


_NUMBER = re.compile(r"\b0x[0-9a-fA-F]+\b|\d+")
_NAMES = re.compile(r"%[A-Za-z0-9_$.\-#]+|@[A-Za-z0-9_$.\-]+|'[^']*'|\"[^\"]*\"")
_TYPES = re.compile(r"tensor<[^>]*>")
# A phase (worker/serve.py) as what the worker was doing, and what the release cannot do with the module's text.
_DOING = {"load": ("loading", "load"), "compile": ("compiling", "compile"), "execute": ("running", "run")}


def error_kind(outcome: Any) -> str:
    """How a failure is told apart from another: the phase, the error's class and its first line with numbers,
    value and function names, quoted text and tensor types normalised (a piece's error names other values and
    shapes than the whole module's); a crash or time-out is its status and phase."""
    if outcome.status in ("crashed", "timeout"):
        return f"{outcome.status} in {outcome.phase or 'start'}"
    line = (outcome.message or "").strip().splitlines()[0] if (outcome.message or "").strip() else ""
    line = _TYPES.sub("tensor<...>", _NAMES.sub("_", line))
    line = _NUMBER.sub("N", line)
    return f"{outcome.phase or '?'}: {outcome.error_type or 'error'}: {' '.join(line.split())}"


def error_text(outcome: Any) -> str:
    """A failure as one line: `compile: XlaRuntimeError: UNIMPLEMENTED: ...`."""
    if outcome.status in ("crashed", "timeout"):
        return f"{outcome.status} in {outcome.phase or 'start'} ({outcome.error_type or ''}) {outcome.message}".strip()
    return f"{outcome.phase or '?'}: {outcome.error_type or 'error'}: {outcome.message}"


def died_text(contender: ContenderSpec, outcome: Outcome, what: str, also: str = "") -> str:
    """`jax 0.4.34's module worker aborted while loading the function's intermediate values (LLVM ERROR: ...){also}:
    that release cannot load this module's text`: a worker that died on `what`, from its outcome (ModuleOutcome's
    death_words and last_line; "again in a fresh worker" where the call was made twice)."""
    doing, verb = _DOING.get(outcome.phase or "", ("starting on", "take"))
    release = f"jax {contender.label}" if contender.jax[:1].isdigit() else contender.label
    again = " (again in a fresh worker)" if outcome.first_death else ""
    return (f"{release}'s module worker {outcome.death_words}{again} while {doing} {what} "
            f"({outcome.last_line or 'it wrote nothing to stderr'}){also}: that release cannot {verb} this module's "
            "text")
