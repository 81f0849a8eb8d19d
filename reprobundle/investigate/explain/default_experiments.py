"""Experiments from what changed between two releases (analysis/release_delta.py): a default that flipped is often
the cause of a regression between them, and each release can tell its own defaults, which a hand-picked list of
flags cannot.

- each XLA flag whose default changed, set on the candidate to the baseline's default;
- each boolean XLA flag the candidate added with a default that switches new behaviour on, switched off;
- each JAX option whose default changed, set to the baseline's value. A JAX option acts while tracing and lowering,
  so its experiment retraces the bundle's program on the candidate; a bundle without a program, or an explanation
  of the frozen module (where both releases run the same StableHLO), cannot test it, and `not_tried` says why.

Flags of another platform (a GPU flag on the CPU) and flags that only name where XLA writes its logs and dumps
change nothing a replay measures: they are left out. An enum or message flag has no value a command line spells
reliably: left out, and said.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from ...analysis.release_delta import changed_defaults, flag_value
from ...run.contenders import RETRACE, ContenderSpec, Settings

_OTHER_DEVICES = re.compile(r"gpu|cuda|rocm|cudnn|cublas|nccl|triton|tpu|sycl|nvptx|amdgpu|ptx|mosaic")
_GPU_DEVICES = re.compile(r"gpu|cuda|rocm|cudnn|cublas|nccl|triton|nvptx|amdgpu|ptx")
_NOT_MEASURED = re.compile(r"^xla_(dump|log|debug_buffer|hlo_graph|hlo_dump|detailed_logging|enable_dumping)")
SCALAR_TYPES = ("bool", "int32", "int64", "uint64", "uint32", "float", "double", "string")


@dataclass(frozen=True)
class DefaultChange:
    """One default that changed between the baseline's release and the candidate's: an XLA flag ("flag") or a JAX
    option ("option"), its value on each side (`a` None: the flag is new in the candidate's release)."""

    kind: str
    name: str
    a: Any
    b: Any
    baseline: str  # the releases compared
    candidate: str
    type: str | None = None

    @property
    def restoring_value(self) -> Any:
        """What the experiment sets: the baseline's default, or false for a boolean flag the candidate added."""
        return False if self.a is None else self.a

    def setting(self) -> Settings:
        if self.kind == "option":
            return Settings(jax_config=((self.name, _option_text(self.restoring_value)),))
        return Settings(xla_flags=(f"--{self.name}={flag_value(self.restoring_value)}",))

    def sentence(self) -> str:
        """`the default of --xla_cpu_use_thunk_runtime changed from false (jaxlib 0.4.31) to true (jaxlib 0.4.33)`."""
        lib = "jaxlib" if self.kind == "flag" else "jax"
        shown = f"--{self.name}" if self.kind == "flag" else self.name
        if self.a is None:
            return f"--{self.name} is new in jaxlib {self.candidate}, on by default"
        return (f"the default of {shown} changed from {_shown(self.a, self.kind)} ({lib} {self.baseline}) to "
                f"{_shown(self.b, self.kind)} ({lib} {self.candidate})")

    def as_record(self) -> dict:
        return {"kind": self.kind, "name": self.name, "a": self.a, "b": self.b, "baseline": self.baseline,
                "candidate": self.candidate, "type": self.type}


def _option_text(value: Any) -> str:
    """A JAX option's value as the contender settings spell it (worker/settings.parse_config_value reads it back to
    the option's type)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "none" if value is None else str(value)


def _shown(value: Any, kind: str) -> str:
    return flag_value(value) if kind == "flag" else repr(value)


def default_changes(delta: dict, platform: str) -> tuple[list[DefaultChange], list[dict]]:
    """(the changes worth an experiment on `platform`, [{"name", "why"}] of those left out for a reason a user would
    ask about). `delta`: release_delta's between the baseline's release and the candidate's."""
    types = {c["name"]: c.get("type") for key in ("changed", "added") for c in delta["xla_flags"][key]}
    kept, left = [], []
    for c in changed_defaults(delta):
        change = DefaultChange(c["kind"], c["name"], c["a"], c["b"], delta["a"], delta["b"],
                               types.get(c["name"]) if c["kind"] == "flag" else type(c["b"]).__name__)
        if change.kind == "flag":
            if not _on_platform(change.name, platform) or _NOT_MEASURED.match(change.name):
                continue
            if (change.type or "string") not in SCALAR_TYPES:
                left.append({"name": f"--{change.name}", "why": f"a {change.type} flag has no value a command line "
                                                                "spells reliably"})
                continue
        kept.append(change)
    return kept, left


def _on_platform(name: str, platform: str) -> bool:
    if platform == "cpu":
        return not _OTHER_DEVICES.search(name)
    if platform == "tpu":  # XLA_FLAGS reach the TPU compiler too, but a GPU's or the CPU's flag changes nothing there
        return "_cpu_" not in name and not _GPU_DEVICES.search(name)
    return "_cpu_" not in name and "tpu" not in name


def experiment_spec(change: DefaultChange, candidate: ContenderSpec, mode: str) -> ContenderSpec:
    """The candidate with the change set back: a flag in the explanation's mode, an option retraced."""
    s, extra = candidate.settings, change.setting()
    settings = Settings(s.xla_flags + extra.xla_flags, tuple(sorted(dict(s.jax_config + extra.jax_config).items())),
                        s.env)
    return ContenderSpec(candidate.jax, RETRACE if change.kind == "option" else mode, settings)


def option_refusal(mode: str, retrace_refusal: str | None) -> str | None:
    """Why JAX options cannot be tested here, or None."""
    if retrace_refusal:
        return f"a JAX option acts while tracing, and {retrace_refusal}"
    if mode != RETRACE:
        return ("a JAX option acts while tracing, and both releases ran the same frozen module here (the difference "
                "is below JAX); `--retrace` tests them on the program as each release lowers it")
    return None


def workaround_lines(change: DefaultChange) -> dict[str, str]:
    """The forms people paste to get the baseline's behaviour back on the candidate: {"XLA_FLAGS": the shell line}
    for a flag (and "compile": the per-compile form), {"config": the jax.config.update line, "env": the environment
    variable} for an option."""
    value = change.restoring_value
    if change.kind == "flag":
        flag = f"--{change.name}={flag_value(value)}"
        return {"XLA_FLAGS": f'XLA_FLAGS="$XLA_FLAGS {flag}"',
                "compile": f"jax.jit(f).lower(*args).compile({{{json.dumps(change.name)}: {value!r}}})"}
    return {"config": f"jax.config.update({json.dumps(change.name)}, {value!r})",
            "env": f"{change.name.upper()}={shlex.quote(_option_text(value))}"}
