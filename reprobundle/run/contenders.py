"""What a replay times: contenders, each a JAX build run in one mode under one set of settings.

A contender is data (it crosses to Ray nodes and into run records as plain values):

- `jax`: which JAX. A release ("0.8.0"), "installed" (the host's interpreter), "latest", a nightly
  ("nightly:2025-10-03" or "0.8.0.dev20251003"), or a path to a Python interpreter or a virtual environment whose JAX
  is used as it is.
- `mode`: "frozen" replays the bundle's stored program (the packing release's lowering: did XLA move?);
  "retrace" runs the bundle's source in that environment and lowers it there (did my program move?).
- `settings`: XLA flags, JAX config options and environment variables applied to this contender's workers only.

The command line spells a contender as `--jax 0.8.0` (frozen, no settings), `--retrace`/`--mode` for the mode of all
of them, and `--variant "0.8.0:XLA_FLAGS=--xla_disable_hlo_passes=fusion-wrapper"` for settings (`;` separates
several; a name starting with `jax_` is a JAX config option, `XLA_FLAGS` appends flags, any other NAME=VALUE is an
environment variable).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Mapping, Sequence

from ..errors import UsageError

FROZEN = "frozen"
RETRACE = "retrace"
MODES = (FROZEN, RETRACE)
BOTH = "both"  # --mode both: per version a frozen and a retraced contender

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_VARIANT = re.compile(r"^(?P<jax>.+?):(?P<settings>[A-Za-z_][A-Za-z0-9_]*=.*)$")  # JAX:NAME=VALUE[;...]


@dataclass(frozen=True)
class Settings:
    """Settings applied to one contender's workers, never to the others'."""

    xla_flags: tuple[str, ...] = ()  # appended to the worker's XLA_FLAGS
    jax_config: tuple[tuple[str, str], ...] = ()  # jax.config.update(name, value) before the function loads
    env: tuple[tuple[str, str], ...] = ()  # other environment variables

    def __bool__(self) -> bool:
        return bool(self.xla_flags or self.jax_config or self.env)

    def describe(self) -> str:
        """`XLA_FLAGS=--a --b; jax_default_matmul_precision=highest; NAME=VALUE` (empty without settings)."""
        parts = [f"XLA_FLAGS={' '.join(self.xla_flags)}"] if self.xla_flags else []
        parts += [f"{k}={v}" for k, v in self.jax_config + self.env]
        return "; ".join(parts)

    def as_record(self) -> dict:
        return {"xla_flags": list(self.xla_flags), "jax_config": dict(self.jax_config), "env": dict(self.env)}

    @classmethod
    def from_record(cls, record: Mapping | None) -> "Settings":
        record = record or {}
        return cls(tuple(str(f) for f in record.get("xla_flags") or ()),
                   tuple(sorted((str(k), str(v)) for k, v in (record.get("jax_config") or {}).items())),
                   tuple(sorted((str(k), str(v)) for k, v in (record.get("env") or {}).items())))


@dataclass(frozen=True)
class ContenderSpec:
    """One contender of a replay: which JAX, in which mode, under which settings."""

    jax: str
    mode: str = FROZEN
    settings: Settings = field(default_factory=Settings)
    # Those of the settings' XLA flags that the worker applies to its compile (`Lowered.compile(options)`,
    # {DebugOptions field: typed value}) instead of XLA_FLAGS at start-up: explain's experiments whose flag its
    # screen saw act as a compile option, so that they share the candidate's process each round. Not recorded:
    # the compile sees the same DebugOptions, and the settings are what a user pastes.
    at_compile: tuple[tuple[str, bool | int | float | str], ...] = ()

    @property
    def label(self) -> str:
        """How reports name it: `0.8.0`, `0.8.0 retraced`, `0.8.0 [XLA_FLAGS=--xla_...]`."""
        text = self.jax + (" retraced" if self.mode == RETRACE else "")
        return f"{text} [{self.settings.describe()}]" if self.settings else text

    def as_record(self) -> dict:
        return {"jax": self.jax, "mode": self.mode, "settings": self.settings.as_record()}

    def at_start(self) -> Settings:
        """The settings the worker process starts with: all of them but the XLA flags applied at compile."""
        if not self.at_compile:
            return self.settings
        names = {name for name, _ in self.at_compile}
        kept = tuple(f for f in self.settings.xla_flags if f.lstrip("-").partition("=")[0] not in names)
        return replace(self.settings, xla_flags=kept)

    def redacted(self) -> "ContenderSpec":
        """This contender with the values of its settings that look like secrets (by name or shape) masked: what a
        run record keeps and a report shows (the worker gets the real values)."""
        from ..bundle.redaction import redact_env, redact_flags

        s = self.settings
        return ContenderSpec(self.jax, self.mode, Settings(tuple(redact_flags(s.xla_flags)), tuple(
            redact_env(dict(s.jax_config)).items()), tuple(redact_env(dict(s.env)).items())))

    @classmethod
    def from_record(cls, record: Mapping) -> "ContenderSpec":
        return cls(str(record["jax"]), str(record.get("mode") or FROZEN), Settings.from_record(record.get("settings")))


def parse_settings(text: str) -> Settings:
    """`XLA_FLAGS=--a=1 --b; jax_default_matmul_precision=highest; TF_CPP_MIN_LOG_LEVEL=0` as Settings."""
    flags: list[str] = []
    config: dict[str, str] = {}
    env: dict[str, str] = {}
    for part in (p.strip() for p in text.split(";")):
        if not part:
            continue
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq or not _NAME.match(name):
            raise UsageError(f"setting {part[:60]!r} is not NAME=VALUE",
                             hint="e.g. XLA_FLAGS=--xla_disable_hlo_passes=fusion-wrapper or "
                                  "jax_default_matmul_precision=highest; separate several with ';'")
        if name == "XLA_FLAGS":
            flags += shlex.split(value)
        elif name.startswith("jax_"):
            config[name] = value.strip()
        else:
            env[name] = value
    return Settings(tuple(flags), tuple(sorted(config.items())), tuple(sorted(env.items())))


def parse_variant(text: str, mode: str = FROZEN) -> ContenderSpec:
    """`0.8.0:XLA_FLAGS=--xla_disable_hlo_passes=fusion-wrapper` (the JAX, a colon, the settings). A JAX that
    itself holds a colon (`nightly:2025-10-03`, a Windows path) is told apart by the settings' `NAME=` shape."""
    match = _VARIANT.match(text.strip())
    if match is None:
        raise UsageError(f"variant {text[:60]!r} is not JAX:NAME=VALUE[;NAME=VALUE...]",
                         hint='e.g. --variant "0.8.0:XLA_FLAGS=--xla_disable_hlo_passes=fusion-wrapper"')
    return ContenderSpec(match["jax"].strip(), mode, parse_settings(match["settings"]))


def contenders_from(versions: Iterable[str], variants: Iterable[str] = (), mode: str = FROZEN) -> list[ContenderSpec]:
    """The contenders of `--jax` (each), `--variant` (each) and `--mode` (frozen, retrace or both: per JAX a frozen
    then a retraced contender), in the order given, without repeats."""
    if mode not in (*MODES, BOTH):
        raise UsageError(f"mode {mode!r} is not one of frozen, retrace, both")
    modes = MODES if mode == BOTH else (mode,)
    specs = [ContenderSpec(v, m) for v in versions for m in modes]
    specs += [parse_variant(text, m) for text in variants for m in modes]
    return list(dict.fromkeys(specs))


# The A/A control (analysis/resolution.py): a release timed beside itself in the same rounds, as a contender of its
# own. Its one setting is an environment variable nothing reads: the same build, the same program, another process.
CONTROL_SETTING = "REPROBUNDLE_AA_CONTROL=1"


def control_of(version: str) -> str:
    """The A/A control of `version` as a variant's text (`0.6.0:REPROBUNDLE_AA_CONTROL=1`), which a probe's list of
    versions may carry (split_variants)."""
    return f"{version}:{CONTROL_SETTING}"


def is_control(spec: ContenderSpec) -> bool:
    name, _, value = CONTROL_SETTING.partition("=")
    return (name, value) in spec.settings.env


def split_variants(versions: Sequence[str]) -> tuple[list[str], list[str]]:
    """(plain versions, variants) of a list that may hold variants' text (`JAX:NAME=VALUE`, as control_of writes),
    each in its order: a replay lists the plain versions first, then the variants."""
    variants = [v for v in versions if _VARIANT.match(v.strip())]
    return [v for v in versions if v not in variants], variants


def task_contenders(versions: Sequence[str], mode: str = FROZEN) -> list[ContenderSpec]:
    """The contenders of a replay task's versions, which may hold variants' text (a probe's A/A control)."""
    plain, variants = split_variants(versions)
    return contenders_from(plain, variants, mode)


def as_specs(versions: Sequence[str | ContenderSpec]) -> list[ContenderSpec]:
    """Plain version strings (the API's older spelling) as frozen contenders."""
    return [v if isinstance(v, ContenderSpec) else ContenderSpec(v) for v in versions]


_UNKNOWN_FLAG = re.compile(r"Unknown flags? in XLA_FLAGS:\s*(?P<flags>[^\n]*)")


def unknown_flag_reason(stderr_tail: str) -> str | None:
    """The error of a worker that XLA aborted because its XLA_FLAGS hold a flag this release does not define (XLA
    checks the flags when jax initialises its backend, and aborts the process): None for any other crash."""
    match = _UNKNOWN_FLAG.search(stderr_tail or "")
    if match is None:
        return None
    flags = match["flags"].strip()
    return (f"this release's XLA does not define the flag {flags} (XLA aborted while reading XLA_FLAGS): a flag "
            "that a contender's settings give exists only in the XLA releases that define it; see "
            "xla/debug_options_flags.cc of the release, or drop the flag for this version")


def settings_of(run: Mapping) -> Settings:
    """The settings a run record's contender ran under (empty for a plain version)."""
    return Settings.from_record((run.get("contender") or {}).get("settings"))


def variant_args(runs: Sequence[Mapping], concrete: Callable[[list], list[str]]) -> list[str]:
    """`--variant JAX:SETTINGS` for each run under settings (`concrete`: runs -> the versions a reader asks for)."""
    return [a for run in runs if settings_of(run) for a in (
        "--variant", f"{concrete([{**run, 'contender': {}}])[0]}:{settings_of(run).describe()}")]


def concrete_versions(runs: Sequence[Mapping]) -> list[str]:
    """The versions of runs as a reader would ask for them: `installed` and a local interpreter or environment
    (`--jax PATH`, which only this machine has) become the JAX version they were. Runs under settings are variants
    (variant_args), not versions."""
    from ..envs.local_jax import is_path_request

    out = []
    for run in runs:
        if settings_of(run):
            continue
        v = run["requested"]
        if v == "installed" or is_path_request(v):
            v = str((run.get("environment") or {}).get("jax") or v)
        if (run.get("contender") or {}).get("mode", "frozen") == mode_of(runs[:1]):
            out.append(v)  # a version replayed in both modes is one --jax; one replayed twice stays twice
    return out


def mode_of(runs: Sequence[Mapping]) -> str:
    """The --mode that replays `runs` again: frozen, retrace or both."""
    modes = {str((run.get("contender") or {}).get("mode") or "frozen") for run in runs}
    return "both" if len(modes) > 1 else modes.pop() if modes else "frozen"
