"""Which program a bisection replays when the user did not say (`bisect` without --retrace or --frozen): the frozen
module the bundle stored, or the program retraced by each release. The endpoints run both ways, untimed, side by
side; a user should not need to know which layer broke to find out which layer broke.

- The frozen module's outputs already differ between the endpoints: frozen (what changed is below JAX, or shows
  there too).
- They are the same bit for bit (or the frozen module does not run on an endpoint) and the retraced outputs differ:
  retraced, since the change is in JAX's lowering and never shows in the frozen module.
- Neither differs: frozen, and time decides as before; the answer says both were compared.
A bundle without a program is bisected frozen, and the sentence says why it could not be retraced.
"""

from __future__ import annotations

from typing import Callable, Sequence

from .bisection import BEYOND, BITS_ONLY, SAME

FROZEN, RETRACE = "frozen", "retrace"
Runs = Callable[[Sequence[str]], list]


def _ran(runs: Sequence[dict]) -> bool:
    return all(r["status"] in ("ok", "mismatch") for r in runs)


def _failed(good: str, bad: str, runs: Sequence[dict]) -> str:
    return ", ".join(f"jax {v} {r['status']}" for v, r in zip((good, bad), runs) if r["status"] not in ("ok", "mismatch"))


_HOW = {BEYOND: "beyond the tolerance", BITS_ONLY: "in bits, within the tolerance"}


def choose_mode(good: str, bad: str, frozen: Runs, retraced: Runs | None, apart: Callable[[dict, dict], str],
                refusal: str | None = None) -> tuple[str, str]:
    """(mode, why in one sentence). `frozen` and `retraced` replay versions untimed (their runs are the endpoints'
    first probe, reused by the bisection); `retraced` None with `refusal`: why the bundle cannot be retraced."""
    f_runs = frozen([good, bad])
    f_apart = apart(*f_runs) if _ran(f_runs) else None
    if f_apart in (BEYOND, BITS_ONLY):
        return FROZEN, (f"frozen: the frozen module's outputs differ {_HOW[f_apart]} between jax {good} and {bad}, "
                        "so the change shows below JAX's lowering")
    if retraced is None:
        return FROZEN, f"frozen: {refusal or 'the bundle cannot be retraced'}"
    r_runs = retraced([good, bad])
    r_apart = apart(*r_runs) if _ran(r_runs) else None
    frozen_said = ("the frozen module computes the same bits on both" if f_apart == SAME else
                   f"the frozen module does not run on both ({_failed(good, bad, f_runs)})")
    if r_apart in (BEYOND, BITS_ONLY) or (f_apart is None and r_apart is not None):
        lowered = (f"gives outputs that differ {_HOW[r_apart]}" if r_apart in _HOW else "runs on both")
        return RETRACE, f"retraced: {frozen_said}, and the program as each release lowers it {lowered}"
    tried = "the retraced program's outputs are the same too" if r_apart == SAME else \
        f"the retraced program does not run on both ({_failed(good, bad, r_runs)})"
    return FROZEN, f"frozen: {frozen_said} and {tried}, so time decides on the frozen module"
