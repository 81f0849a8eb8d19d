"""Names and compact displays of a bundle's input and output trees, from the manifest's key paths (pure data)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MAX_LINES = 12
_COMPONENT = re.compile(r"\[[^\]]*\]|\.[^.\[]+|^[^.\[]+")


def input_names(manifest: dict) -> list[str]:
    """One name per input leaf: its key path (manifest 2), else `input i`."""
    return [leaf.get("path") or f"input {i}" for i, leaf in enumerate(manifest["inputs"]["leaves"])]


def output_names(manifest: dict) -> list[str]:
    """One name per output leaf: its key path (manifest 2), else `output i`."""
    function = manifest.get("function") or {}
    named = function.get("outputs")
    count = len((function.get("fields") or {}).get("out_avals") or (manifest.get("reference") or {}).get("outputs") or [])
    if named and len(named) == count:
        return [n["path"] for n in named]
    return [f"output {i}" for i in range(count)]


@dataclass(frozen=True)
class Leaf:
    name: str
    dtype: str
    shape: list
    nbytes: int | None = None  # stored size; None when synthetic or unknown
    note: str = ""  # "key<threefry2x32>", "synthetic normal", ...

    @property
    def type_text(self) -> str:
        return f"{self.dtype}{list(self.shape)}"


def components(path: str) -> list[str]:
    return _COMPONENT.findall(path) or [path]


def leaves_of(manifest: dict, which: str) -> list[Leaf]:
    if which == "inputs":
        out = []
        for name, leaf in zip(input_names(manifest), manifest["inputs"]["leaves"]):
            note = f"key<{leaf['key_impl']}>" if leaf.get("key_impl") else ""
            if "synthetic" in leaf:
                note = (note + " " if note else "") + "synthetic " + leaf["synthetic"]["distribution"]
            out.append(Leaf(name, leaf["dtype"], leaf["shape"], leaf["blob"]["size"] if "blob" in leaf else None, note))
        return out
    named = manifest["function"].get("outputs") or []
    impls = [n.get("key_impl") for n in named] if len(named) == len(manifest["reference"]["outputs"]) else []
    return [Leaf(name, o["dtype"], o["shape"], o["blob"]["size"],
                 f"key<{impls[i]}>" if i < len(impls) and impls[i] else "")
            for i, (name, o) in enumerate(zip(output_names(manifest), manifest["reference"]["outputs"]))]


def _group_depth(paths: list[list[str]], limit: int) -> int | None:
    """The deepest prefix length whose groups fit in `limit` lines; None when every leaf fits on its own line."""
    if len(paths) <= limit:
        return None
    best = 1
    for depth in range(1, max(len(p) for p in paths) + 1):
        if len({tuple(p[:depth]) for p in paths}) > limit:
            break
        best = depth
    return best


def render(leaves: list[Leaf], human_bytes, *, limit: int = MAX_LINES, indent: str = "    ") -> list[str]:
    """Lines showing a tree's leaves: one per leaf when they fit, else grouped by key-path prefix."""

    if not leaves:
        return [indent + "(none)"]
    split = [components(leaf.name) for leaf in leaves]
    depth = _group_depth(split, limit)
    if depth is None:
        width = min(max(len(leaf.name) for leaf in leaves), 48)
        return [_leaf_line(leaf, width, indent, human_bytes) for leaf in leaves]
    groups: dict[str, list[Leaf]] = {}
    for leaf, parts in zip(leaves, split):
        groups.setdefault("".join(parts[:depth]), []).append(leaf)
    lines = []
    shown = {prefix: members[0].name if len(members) == 1 else prefix for prefix, members in groups.items()}
    width = min(max(len(name) for name in shown.values()), 48)
    for prefix, members in list(groups.items())[:limit]:
        if len(members) == 1:
            lines.append(_leaf_line(members[0], width, indent, human_bytes))
        else:
            lines.append(_group_line(prefix, members, width, indent, human_bytes))
    return lines


def _leaf_line(leaf: Leaf, width: int, indent: str, human_bytes) -> str:
    return (f"{indent}{leaf.name.ljust(width)}  {leaf.type_text}" + (f"  {leaf.note}" if leaf.note else "")
            + (f"  ({human_bytes(leaf.nbytes)})" if leaf.nbytes is not None else ""))


def _group_line(prefix: str, members: list[Leaf], width: int, indent: str, human_bytes) -> str:
    """The leaves under one key-path prefix as one line: how many, their dtypes, elements and bytes."""
    dtypes = sorted({m.dtype for m in members})
    elements = sum(math.prod(m.shape) if m.shape else 1 for m in members)
    sized = [m.nbytes for m in members if m.nbytes is not None]
    return (f"{indent}{prefix.ljust(width)}  {len(members)} leaves, {'/'.join(dtypes)}, "
            f"{elements:,} elements" + (f" ({human_bytes(sum(sized))})" if sized else ""))


def summary(leaves: list[Leaf], human_bytes) -> str:
    sized = [leaf.nbytes for leaf in leaves if leaf.nbytes is not None]
    text = f"{len(leaves)} leaf" if len(leaves) == 1 else f"{len(leaves)} leaves"
    return text + (f", {human_bytes(sum(sized))}" if sized else "")
