"""What JAX's lowering changed: two StableHLO modules of one program compared as text.

`same_lowering` says whether two modules are the same program once what does not change the computation is set
aside: locations (`loc(...)`, `#loc` lines), names (the module's, private functions', SSA values'), the module's
attributes and the debug attributes of @main's arguments and results (`jax.arg_info`, `jax.result_info`).

`lowering_diff` counts the ops of each module by kind, with the source line each comes from: an op's own location
when it names a file of the program, else the line that called the function it is in (jax puts a jnp function's
body in a private function called from the user's line). Constants, calls and returns are not counted: they move
with any change and say nothing of their own. No I/O; the texts come from the bundle and the runs' artifacts.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Iterable

_LOC_DEF = re.compile(r"^(#loc\d*) = (loc\(.*\))\s*$")
_LOC_REF = re.compile(r"#loc\d*")
_FILE_LINE = re.compile(r'"([^"]+\.py)":(\d+)')
_FUNC = re.compile(r"^\s*func\.func\s+(?:public\s+|private\s+)?@(\"[^\"]*\"|[\w.$-]+)")
_OP = re.compile(r'^\s*(?:%[\w#:, %-]+ = )?"?([a-z_]+\.[a-z_]+|call)"?[\s(]')
_TARGET = re.compile(r'custom_call @([\w.$-]+)|call_target_name = "([^"]+)"')
_CALLEE = re.compile(r"call @(\"[^\"]*\"|[\w.$-]+)")
_SYMBOL = re.compile(r"@(\"[^\"]*\"|[\w.$-]+)")
_VALUE = re.compile(r"%[\w.$-]+")
_DEBUG_ATTRS = re.compile(r'\s*(jax\.arg_info|jax\.result_info|mhlo\.layout_mode|mhlo\.sharding) = "[^"]*",?')
SKIPPED_OPS = frozenset({"stablehlo.constant", "func.call", "func.return", "stablehlo.return", "call", "return"})
LINES_SHOWN = 3


def strip_locations(line: str) -> str:
    """The line without its `loc(...)` parts (nested parentheses included)."""
    out, i = [], 0
    while True:
        j = line.find("loc(", i)
        if j < 0 or (j > 0 and (line[j - 1].isalnum() or line[j - 1] in "_.")):
            if j < 0:
                out.append(line[i:])
                return "".join(out).rstrip()
            out.append(line[i:j + 4])
            i = j + 4
            continue
        out.append(line[i:j].rstrip())
        depth, k = 0, j + 3
        while k < len(line):
            depth += {"(": 1, ")": -1}.get(line[k], 0)
            k += 1
            if depth == 0:
                break
        i = k


def normalized(text: str) -> str:
    """The module as the computation it is: no locations, names, module attributes or debug attributes."""
    symbols: dict[str, str] = {}
    values: dict[str, str] = {}
    lines = []
    for raw in text.splitlines():
        if raw.startswith("#loc") or not raw.strip():
            continue
        line = strip_locations(raw)
        if line.lstrip().startswith("module"):
            lines.append("module {")
            continue
        line = _DEBUG_ATTRS.sub("", line).replace("{}", "").replace(" {,", " {")
        line = _SYMBOL.sub(lambda m: "@main" if m.group(1) == "main" else
                           "@" + symbols.setdefault(m.group(1), f"f{len(symbols)}"), line)
        line = _VALUE.sub(lambda m: values.setdefault(m.group(0), f"%v{len(values)}"), line)
        lines.append(" ".join(line.split()))
    return "\n".join(lines)


def same_lowering(a: str, b: str) -> bool:
    return normalized(a) == normalized(b)


def _locations(text: str) -> dict[str, str]:
    """`#locN` -> its definition with every alias it names expanded (bounded depth)."""
    raw = {}
    for line in text.splitlines():
        m = _LOC_DEF.match(line)
        if m:
            raw[m.group(1)] = m.group(2)
    expanded: dict[str, str] = {}

    def expand(name: str, depth: int = 0) -> str:
        if name in expanded:
            return expanded[name]
        body = raw.get(name, "")
        if depth < 50:
            body = _LOC_REF.sub(lambda m: expand(m.group(0), depth + 1) if m.group(0) != name else "", body)
        expanded[name] = body
        return body

    for name in raw:
        expand(name)
    return expanded


def _source_line(location: str, program_files: frozenset[str]) -> str | None:
    """The first `file.py:line` of a location that is a file of the program (by name), else None."""
    for path, line in _FILE_LINE.findall(location):
        name = path.rsplit("/", 1)[-1]
        if name in program_files:
            return f"{name}:{line}"
    return None


_LIBRARY_PATH = re.compile(r"site-packages|dist-packages|/jax/|/jaxlib/|/flax/|/equinox/|/optax/|/reprobundle/|<frozen")


def program_files_in(text: str) -> list[str]:
    """The .py files a module's locations name outside installed packages: a captured program's own files (a
    bundle captured from a running program stores no list of them)."""
    return sorted({path.rsplit("/", 1)[-1] for path, _ in _FILE_LINE.findall(text) if not _LIBRARY_PATH.search(path)})


def op_sites(text: str, program_files: Iterable[str] = ()) -> Counter:
    """Counter of (op kind without dialect, source line or None) over the module, by the rules above."""
    files = frozenset(program_files)
    locations = _locations(text)
    functions: dict[str, list[tuple[str, str | None, str | None]]] = {}  # name -> [(op, line, callee)]
    current: list | None = None
    for raw in text.splitlines():
        m = _FUNC.match(raw)
        if m:
            current = functions.setdefault(m.group(1).strip('"'), [])
            continue
        op = _OP.match(raw)
        if current is None or not op:
            continue
        refs = _LOC_REF.findall(raw[raw.rfind("loc("):]) if "loc(" in raw else []
        where = " ".join(locations.get(r, "") for r in refs) or raw[raw.rfind("loc("):]
        callee = _CALLEE.search(raw) if "custom_call" not in op.group(1) else None
        kind = op.group(1)
        target = _TARGET.search(raw) if "custom_call" in kind else None
        if target:  # a kernel by name: jaxlib renames them between releases
            kind = f"{kind}({target.group(1) or target.group(2)})"
        current.append((kind, _source_line(where, files), callee.group(1).strip('"') if callee else None))
    sites: Counter = Counter()
    seen: set[tuple[str, str | None]] = set()

    def walk(name: str, inherited: str | None, depth: int) -> None:
        if depth > 64 or (name, inherited) in seen:
            return
        seen.add((name, inherited))
        for op, line, callee in functions.get(name, []):
            here = line or inherited
            if callee:
                walk(callee, here, depth + 1)
            elif op not in SKIPPED_OPS:
                sites[(op.split(".", 1)[1], here)] += 1

    walk("main", None, 0)
    return sites


def lowering_diff(before: str, after: str, program_files: Iterable[str] = ()) -> dict:
    """Ops added and removed from `before` to `after`, by kind, with their source lines:
    {"changed": bool, "added": [{"op", "count", "at": [line]}], "removed": [...], "text": "+2 transpose at
    model.py:41; -1 sort"}."""
    files = list(program_files)
    added, removed = _changed_kinds(op_sites(before, files), op_sites(after, files))
    changed = not same_lowering(before, after)
    text = diff_text(added, removed) or ("the same ops by kind, arranged or configured differently" if changed else "")
    return {"changed": changed, "added": added, "removed": removed, "text": text}


def _changed_kinds(old: Counter, new: Counter) -> tuple[list[dict], list[dict]]:
    """(kinds with more ops after, kinds with fewer): {"op", "count", "at": [line]} each, the biggest change first."""
    kinds = sorted({op for op, _ in old} | {op for op, _ in new})
    added: list[dict] = []
    removed: list[dict] = []
    for kind in kinds:
        count_old = sum(n for (op, _), n in old.items() if op == kind)
        count_new = sum(n for (op, _), n in new.items() if op == kind)
        if count_new == count_old:
            continue
        grew = count_new > count_old
        at = _lines_grown(new, old, kind) if grew else _lines_grown(old, new, kind)
        (added if grew else removed).append({"op": kind, "count": abs(count_new - count_old), "at": at})
    added.sort(key=lambda d: -d["count"])
    removed.sort(key=lambda d: -d["count"])
    return added, removed


def _lines_grown(side: Counter, other: Counter, kind: str) -> list[str]:
    """The source lines where `side` has more ops of `kind` than `other`."""
    return sorted({line for (op, line), n in side.items() if op == kind and line and n > other.get((op, line), 0)})


def diff_text(added: list[dict], removed: list[dict], limit: int = 6) -> str:
    parts = [f"{sign}{d['count']} {d['op']}" + (f" at {', '.join(d['at'][:LINES_SHOWN])}" if d["at"] else "")
             for sign, items in (("+", added), ("-", removed)) for d in items]
    if len(parts) > limit:
        more = len(parts) - limit
        parts = parts[:limit] + [f"{more} more kind{'s' if more > 1 else ''}"]
    return "; ".join(parts)
