"""Capture from a running program: the Python context manager, and packing what a capture staged.

    with reprobundle.capture(match="train_step", store=...) as cap:
        train()                      # unmodified code: jitted functions defined before the block are seen too
    cap.refs                         # the bundles, packed when the block ends (also when it raises)

`reprobundle capture -- python train.py` (program_launch.py) runs the same hook in a child process and packs with the
same functions here, so both give the same bundles.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable, Literal, Sequence

from ..config import DEFAULT_WARMUP, REFERENCE_REPEAT
from ..errors import ReproBundleError, UsageError
from .pack_options import PackOptions  # how captured calls become bundles: pack's own options
from .staging import CaptureOptions, Staged

if TYPE_CHECKING:
    from .hook import Recorder





@dataclass
class CaptureResult:
    """What a capture saw and made. `computations`: one row per (function, signature) seen (every one while
    listing; the matching ones otherwise); `captures`: the packed bundles with the call each comes from;
    `failures`: computations that matched but could not be exported or packed, with the reason."""

    computations: list[dict]
    captures: list[dict]
    failures: list[dict]
    timed: bool
    exit_code: int | None = None
    command: list[str] = field(default_factory=list)
    interrupted: bool = False
    problems: list[str] = field(default_factory=list)
    store: str | None = None

    @property
    def refs(self) -> list:
        return [c["ref"] for c in self.captures]


def slug(text: str) -> str:
    """A bundle name from a function's qualified name: `Model.__call__` -> `model.__call__`,
    `make_model.<locals>.step` -> `step`."""
    text = text.rpartition("<locals>.")[2].replace("<lambda>", "lambda").lower()
    text = re.sub(r"[^a-z0-9._-]+", "-", text).strip("-._")
    return text[:100] or "captured"


def bundle_names(staged: Sequence[Staged], name: str | None) -> list[str]:
    """One name per capture: `name` alone for a single capture, else `name-function` (or the function's name),
    with `-s<signature>` (then `-<n>`) where two captures would share one."""
    from ..bundle import manifest as mf

    if name is not None:
        mf.check_name(name)
    if name is not None and len(staged) == 1:
        return [name]
    bases = [slug(s.function["name"]) if name is None else slug(f"{name}-{s.function['name']}") for s in staged]
    names = [b if bases.count(b) == 1 else f"{b}-s{s.signature}"[:100] for b, s in zip(bases, staged)]
    seen: dict[str, int] = {}
    unique = []
    for n in names:
        seen[n] = seen.get(n, 0) + 1
        unique.append(n if seen[n] == 1 else f"{n[:95]}-{seen[n]}")
    return [mf.check_name(n) for n in unique]


def _totals(rows: list[dict]) -> dict[tuple, int]:
    totals: dict[tuple, int] = {}
    for row in rows:
        key = (row.get("pid"), row["key"])
        totals[key] = totals.get(key, 0) + int(row.get("total_ns") or 0)
    return totals


def select(staged: list[Staged], rows: list[dict], options: CaptureOptions) -> list[Staged]:
    """With --top K, the staged captures of the K functions that took the most run time (among those that could
    be exported: export_failures names the costlier ones that could not); else all of them."""
    if options.top is None:
        return list(staged)
    totals = _totals(rows)
    have = {(s.pid, s.function["key"]) for s in staged}
    ranked = [k for k in sorted(totals, key=lambda k: -totals[k]) if k in have][:options.top]
    order = {k: i for i, k in enumerate(ranked)}
    kept = [s for s in staged if (s.pid, s.function["key"]) in order]
    return sorted(kept, key=lambda s: (order[(s.pid, s.function["key"])], s.signature))


def _description(s: Staged, options: PackOptions, command: Sequence[str] | None) -> str:
    if options.description:
        return options.description
    where = f" of `{' '.join(command)}`" if command else ""
    return f"{s.function.get('display') or s.function['name']}, call {s.call}{where}"[:500]


def pack_captures(staged: list[Staged], rows: list[dict], capture_options: CaptureOptions,
                  options: PackOptions, *, command: Sequence[str] | None = None,
                  progress: Callable[[str], None] | None = None) -> tuple[list[dict], list[dict]]:
    """Pack the selected staged captures, each with a reference run on the interpreter that ran the program.
    Returns (captures, failures); a capture that fails to pack does not stop the others."""
    from ..bundle.registry import Registry
    from .pack import pack

    chosen = select(staged, rows, capture_options)
    if not chosen:
        return [], []
    registry = Registry.open(options.store)
    names = bundle_names(chosen, options.name)
    captures, failures = [], []
    for s, name in zip(chosen, names):
        display = s.function.get("display") or s.function["name"]
        if progress:
            progress(f"packing {display} (call {s.call}) as {name}: reference run on jax {s.jax_version}")
        labels = {"capture.function": display, "capture.call": str(s.call), "capture.signature": str(s.signature),
                  **{str(k): str(v) for k, v in (options.labels or {}).items()}}
        python = None if s.python in ("", sys.executable) else s.python
        try:
            exported = s.exported if s.exported.traced_by else replace(s.exported, traced_by=s.jax_version)
            ref = pack(registry, exported, s.leaves, replace(options, name=name, labels=labels,
                                                             description=_description(s, options, command)),
                       source=s.source, python=python)
        except ReproBundleError as e:
            failures.append({"function": display, "signature": s.signature, "call": s.call, "stage": "pack",
                             "reason": e.message + (f" ({e.hint})" if e.hint else "")})
            continue
        captures.append({"ref": ref, **s.summary()})
    return captures, failures


def export_failures(rows: list[dict], options: CaptureOptions, captures: list[dict] | None = None) -> list[dict]:
    """Computations that matched but could not be exported, with the reason; with --top, only those that cost
    more than the cheapest one packed (the others were never candidates worth a line)."""
    failed = [r for r in rows if r.get("failure")]
    if options.top is not None and failed:
        totals = _totals(rows)
        packed = [totals.get((c["pid"], c["function"]["key"]), 0) for c in captures or []]
        floor = min(packed) if len(packed) >= options.top else 0
        failed = [r for r in failed if totals.get((r.get("pid"), r["key"]), 0) > floor]
    return [{"function": r.get("display") or r["name"], "signature": r["signature"], "call": r.get("capture_call"),
             "stage": "export", "reason": r["failure"]} for r in failed]


def _check_timing(warmup: int, repeat: int) -> None:
    if warmup < 0 or repeat < 1:
        raise UsageError(f"invalid timing: warmup={warmup}, repeat={repeat}", hint="use warmup >= 0 and repeat >= 1")


class Capture:
    """`reprobundle.capture(...)`: capture jitted calls made inside the `with` block, in this process.

    match: a regular expression searched in each jitted function's qualified name, module and jit name.
    call: the call to capture, counted per signature (1 = the call that compiled it); default: the first call
        after that one, or the compiling call for a signature called only once.
    top: keep the K computations with the most run time (every call is then timed with block_until_ready).
    all_signatures: capture each distinct signature of a matching function (default: the first one).
    With neither match nor top, nothing is captured and every call is timed (`cap.computations`).
    The bundles are packed when the block ends, even when it raises: `cap.refs`, `cap.captures`,
    `cap.failures`, `cap.computations`.
    """

    def __init__(self, match: str | None = None, *, call: int | None = None, top: int | None = None,
                 all_signatures: bool = False, name: str | None = None, store: str | None = None,
                 description: str = "", labels: dict[str, str] | None = None, warmup: int = DEFAULT_WARMUP,
                 repeat: int = REFERENCE_REPEAT, dump: bool = True, profile: bool = True,
                 progress: Callable[[str], None] | None = None) -> None:
        listing = match is None and top is None
        self.options = CaptureOptions(match=match, call=call, top=top, all_signatures=all_signatures,
                                      listing=listing).check()
        _check_timing(warmup, repeat)
        if name is not None:
            from ..bundle import manifest as mf

            mf.check_name(name)
        self.pack_options = PackOptions(store=None if store is None else str(store), name=name,
                                        description=description, labels=dict(labels or {}), warmup=warmup,
                                        repeat=repeat, dump=dump, profile=profile)
        self.progress = progress
        self.result: CaptureResult | None = None
        self._staged: list[Staged] = []
        self._recorder: Recorder | None = None

    def __enter__(self) -> "Capture":
        from .hook import Recorder, install

        self._staged = []
        self._recorder = Recorder(self.options, sink=self._staged.append)
        install(self._recorder)
        return self

    def __exit__(self, exc_type, exc, tb) -> Literal[False]:
        from .hook import uninstall

        uninstall()
        recorder = self._recorder
        assert recorder is not None, "__exit__ without __enter__"
        recorder.finish()
        rows = recorder.rows()
        captures: list[dict] = []
        pack_failed: list[dict] = []
        try:
            captures, pack_failed = pack_captures(self._staged, rows, self.options, self.pack_options,
                                                  progress=self.progress)
        except ReproBundleError:
            if exc_type is None:
                raise
        failures = export_failures(rows, self.options, captures) + pack_failed
        self.result = CaptureResult(computations=rows, captures=captures, failures=failures,
                                    timed=self.options.timing, problems=list(recorder.problems),
                                    store=self.pack_options.store)
        self._staged = []
        return False

    def _get(self, name: str):
        if self.result is None:
            raise UsageError("the capture has not ended yet", hint="read cap.refs after the `with` block")
        return getattr(self.result, name)

    @property
    def refs(self) -> list:
        return self._get("refs")

    @property
    def captures(self) -> list[dict]:
        return self._get("captures")

    @property
    def failures(self) -> list[dict]:
        return self._get("failures")

    @property
    def computations(self) -> list[dict]:
        if self.result is None and self._recorder is not None:
            return self._recorder.rows()  # so far, inside the block
        return self._get("computations")


def capture(match: str | None = None, **options) -> Capture:
    """See `Capture`."""
    return Capture(match, **options)
