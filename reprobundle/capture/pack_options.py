"""How a bundle is packed: one `PackOptions` for every pack entry point (api.pack, pack_exported, pack_stablehlo,
pack_script, capture's packs, capture/pack.py's pack and pack_serialized_in), with its defaults defined here once.
The Python API still takes them as keyword arguments (README's calls) and makes a PackOptions at its boundary."""

from __future__ import annotations

from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, Mapping

from ..config import DEFAULT_WARMUP, REFERENCE_REPEAT

if TYPE_CHECKING:
    from ..run.execution import Timing


@dataclass(frozen=True)
class PackOptions:
    """`name`: the bundle's name (capture: a prefix, None: one per function); `store`: where it is published (None:
    the default store); `description`, `labels`: shown and selected by; `synthetic_inputs`, `seed`: inputs made from
    the avals instead of the arrays given; `warmup`, `repeat`: the reference run's timing; `dump`, `profile`: keep
    its XLA dump and per-op profile; `timeout_s`: bounds its worker (None: run/execution.DEFAULT_TIMEOUT_S; kept
    out of this module's imports, which `capture` makes in the user's program)."""

    name: str | None = None
    store: str | None = None
    description: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    synthetic_inputs: bool = False
    seed: int = 0
    warmup: int = DEFAULT_WARMUP
    repeat: int = REFERENCE_REPEAT
    dump: bool = True
    profile: bool = True
    timeout_s: float | None = None

    @classmethod
    def of(cls, base: PackOptions | None = None, **settings: Any) -> PackOptions:
        """`base` (default: the defaults) with keyword settings (PackOptions' fields; `store` as text); a
        TypeError names a keyword that is none of them, as a function's signature would."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(settings) - names)
        if unknown:
            raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)}")
        if settings.get("store") is not None:
            settings["store"] = str(settings["store"])
        if "labels" in settings:
            settings["labels"] = dict(settings["labels"] or {})
        return replace(base or cls(), **settings)

    @property
    def timing(self) -> Timing:
        from ..run.execution import Timing

        return Timing(warmup=self.warmup, repeat=self.repeat)

    @property
    def worker_timeout_s(self) -> float:
        from ..run.execution import DEFAULT_TIMEOUT_S

        return DEFAULT_TIMEOUT_S if self.timeout_s is None else float(self.timeout_s)

    def checked(self) -> PackOptions:
        """These options, or a UsageError naming the invalid one (the timing, the timeout); the timeout a float."""
        from ..run.replay_options import check_timing, checked_timeout

        check_timing(self.warmup, self.repeat)
        return replace(self, timeout_s=checked_timeout(self.worker_timeout_s))
