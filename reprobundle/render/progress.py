"""Progress of long commands (pack, replay, bisect, capture) on stderr: the phase, the time elapsed and an estimate
of the time left. On a terminal it is a live rich display (one line that updates, phase changes kept above it, and
every line of a phase that is news of its own: investigate's "report written in 74 s"); elsewhere (a pipe, a CI log)
plain lines, each with the elapsed time and the ETA.

The work reports through a plain callable taking a line; a `logs.Status` line also says its phase and how many
units (rounds) of how many are done, which is what the ETA is computed from.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

from ..text import cut

_TAGGED = ("environment", "fetch")  # phases of lines that do not say it themselves (lower layers' plain lines)
# phases whose every line is said whole and stays above the live line: investigate's "report written in 74 s", and
# what a Ctrl-C keeps ("investigate: interrupted: kept ...")
_KEPT = ("report", "interrupted")


def clock(seconds: float) -> str:
    """`0:42`, `12:03`, `1:02:03`."""
    s = int(max(0.0, seconds))
    h, m, s = s // 3600, s // 60 % 60, s % 60
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Progress:
    """A progress sink: call it with lines; `close()` ends the live display (idempotent)."""

    def __init__(self, stream: TextIO | None = None, *, live: bool | None = None, width: int = 100) -> None:
        self.stream = stream or sys.stderr
        self.live = is_terminal(self.stream) if live is None else live
        self.width = width
        self.started = time.monotonic()
        self._done_at: dict[int, float] = {}  # units done -> when that count was first reported
        self._total: int | None = None
        self._phase = ""
        self._rich: Any = None  # a rich.progress.Progress while live
        self._task: Any = None

    # -- estimate --------------------------------------------------------------------------------------------------
    def _note(self, done: int | None, total: int | None) -> None:
        if total:
            if total != self._total:
                self._total, self._done_at = total, {}
            if done is not None:
                self._done_at.setdefault(done, time.monotonic())

    def eta(self) -> float | None:
        """Seconds left at the pace of the units done so far: from the second unit on, the first (which includes
        compiling) no longer counts; None before a unit is done."""
        if not self._total or not self._done_at:
            return None
        done = max(self._done_at)
        if done >= self._total:
            return 0.0
        if done >= 2 and 1 in self._done_at:
            per_unit = (self._done_at[done] - self._done_at[1]) / (done - 1)
        elif done >= 1 and 0 in self._done_at:
            per_unit = (self._done_at[done] - self._done_at[0]) / done
        else:
            return None
        into_unit = time.monotonic() - self._done_at[done]
        return max(0.0, (self._total - done) * per_unit - min(into_unit, per_unit))

    # -- output ----------------------------------------------------------------------------------------------------
    def __call__(self, line: str) -> None:
        phase = getattr(line, "phase", "") or ""
        self._note(getattr(line, "done", None), getattr(line, "total", None))
        if self.live:
            self._show_live(str(line), phase)
        else:
            self._show_plain(str(line), phase)

    def _tail(self) -> str:
        eta = self.eta()
        return f", ETA {clock(eta)}" if eta is not None and self._total else ""

    def _show_plain(self, line: str, phase: str) -> None:
        head = f"[{clock(time.monotonic() - self.started)}{self._tail()}]"
        text = f"{head} {phase}: {line}" if phase in _TAGGED and not line.startswith(phase) else f"{head} {line}"
        if len(text) > self.width and phase not in _KEPT:  # news of its own is said whole
            text = text[: self.width - 1] + "…"
        print(text, file=self.stream, flush=True)

    def _show_live(self, line: str, phase: str) -> None:
        try:
            from rich.console import Console
            from rich.progress import BarColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress
        except ImportError:  # pragma: no cover - rich ships with typer
            self.live = False
            self._show_plain(line, phase)
            return
        if self._rich is None:
            console = Console(file=self.stream, width=min(self.width, 200) if self.width else None)
            self._rich = RichProgress(SpinnerColumn(), TextColumn("{task.description}"), BarColumn(bar_width=20),
                                      TextColumn("{task.fields[count]}"), TimeElapsedColumn(),
                                      TextColumn("{task.fields[eta]}"), console=console, transient=True,
                                      redirect_stdout=False, redirect_stderr=False)
            self._rich.start()
            self._task = self._rich.add_task("", total=None, count="", eta="")
        if phase and (phase != self._phase or phase in _KEPT):
            self._rich.console.print(f"[dim]{clock(time.monotonic() - self.started)}[/dim] {_escape(line)}",
                                     highlight=False)
        self._phase = phase or self._phase
        done = max(self._done_at) if self._done_at else None
        eta = self.eta()
        self._rich.update(self._task, description=_escape(cut(line, 60)), total=self._total,
                          completed=done or 0, count=f"{done or 0}/{self._total}" if self._total else "",
                          eta=f"ETA {clock(eta)}" if eta is not None else "")

    def close(self) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)


def is_terminal(stream) -> bool:
    """Whether `stream` is a terminal (a closed or odd stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False
