"""What changed between two releases, from what each says of itself (envs/release_facts.py): XLA flags and JAX
options added, removed, and those whose default changed, with the versions and revisions of both. Pure data.

A default that flipped between two releases is often the cause of a regression between them (a new CPU runtime, a
new fusion emitter, a PRNG detail), which a hand-picked list of flags cannot know; `changes` shows them, `bisect`
lists them for the last good and the first bad release.

On a TPU the compiler is libtpu, whose flags (set through LIBTPU_INIT_ARGS) each release's environment names but
without their defaults (worker/release_facts.py): their delta is names added and removed, and LIBTPU_NO_DEFAULTS says
once that a default changed inside libtpu cannot be seen.
"""

from __future__ import annotations

from typing import Any


def _delta(a: dict[str, Any] | None, b: dict[str, Any] | None, value) -> dict:
    """{"added", "removed", "changed", "count_a", "count_b"} between two {name: entry} maps; `value` reads an
    entry's default."""
    a, b = a or {}, b or {}
    added = [{"name": n, "default": value(b[n]), "type": _type(b[n])} for n in sorted(set(b) - set(a))]
    removed = [{"name": n, "default": value(a[n]), "type": _type(a[n])} for n in sorted(set(a) - set(b))]
    changed = [{"name": n, "a": value(a[n]), "b": value(b[n]), "type": _type(b[n])}
               for n in sorted(set(a) & set(b)) if value(a[n]) != value(b[n])]
    return {"added": added, "removed": removed, "changed": changed, "count_a": len(a), "count_b": len(b)}


def _type(entry: Any) -> str | None:
    return entry.get("type") if isinstance(entry, dict) else type(entry).__name__


LIBTPU_NO_DEFAULTS = ("libtpu does not tell its flags' defaults (its --help lists none), so a default changed inside "
                      "libtpu cannot be seen or tried here; try one by hand with LIBTPU_INIT_ARGS=--NAME=VALUE")


def release_delta(a: str, b: str, facts_a: dict, facts_b: dict) -> dict:
    """The changes from release `a` to `b`: {"a", "b", "revisions": {"a", "b"}, "xla_flags", "jax_options" (each
    added/removed/changed/counts), "libtpu" (libtpu_delta's, None without libtpu), "complete": both flag lists were
    read whole}."""
    flags = _delta(facts_a.get("xla_flags"), facts_b.get("xla_flags"), lambda e: e.get("default"))
    options = _delta(facts_a.get("jax_options"), facts_b.get("jax_options"), lambda v: v)
    return {"a": a, "b": b, "revisions": {"a": facts_a.get("revisions"), "b": facts_b.get("revisions")},
            "xla_flags": flags, "jax_options": options,
            "libtpu": libtpu_delta(facts_a.get("libtpu"), facts_b.get("libtpu")),
            "complete": facts_a.get("xla_flags") is not None and facts_b.get("xla_flags") is not None}


def libtpu_delta(a: dict | None, b: dict | None) -> dict | None:
    """The libtpu flags added and removed from one environment's libtpu to the other's (by name: libtpu tells no
    defaults): {"a", "b" (versions; None: no libtpu there), "added", "removed", "count_a", "count_b", "note"}, or
    None when neither environment has libtpu."""
    if not a and not b:
        return None
    names_a, names_b = set((a or {}).get("flags") or ()), set((b or {}).get("flags") or ())
    return {"a": (a or {}).get("version"), "b": (b or {}).get("version"), "added": sorted(names_b - names_a),
            "removed": sorted(names_a - names_b), "count_a": len(names_a), "count_b": len(names_b),
            "note": LIBTPU_NO_DEFAULTS}


def libtpu_line(delta: dict) -> str:
    """`libtpu 0.0.42.1 -> 0.0.43: 923 -> 930 flags by name, 7 added, 0 removed`, the same line for changes and
    explain."""
    lt = delta["libtpu"]
    return (f"libtpu {lt['a'] or '(none)'} -> {lt['b'] or '(none)'}: {lt['count_a']} -> {lt['count_b']} flags by name, "
            f"{len(lt['added'])} added, {len(lt['removed'])} removed")


def changed_defaults(delta: dict) -> list[dict]:
    """The flags and options whose default changed, and the boolean flags added switched on (new behaviour a
    release turned on): [{"kind": "flag" | "option", "name", "a", "b"}]."""
    out = [{"kind": "flag", "name": c["name"], "a": c["a"], "b": c["b"]} for c in delta["xla_flags"]["changed"]]
    out += [{"kind": "flag", "name": c["name"], "a": None, "b": True} for c in delta["xla_flags"]["added"]
            if c["type"] == "bool" and c["default"] is True]
    out += [{"kind": "option", "name": c["name"], "a": c["a"], "b": c["b"]} for c in delta["jax_options"]["changed"]]
    return out


def flag_value(value: Any) -> str:
    """A default as XLA_FLAGS spells it: true/false, a list comma-joined, else its text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return ",".join(flag_value(v) for v in value)
    return str(value)
