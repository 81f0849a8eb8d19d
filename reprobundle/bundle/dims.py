"""Symbolic dimensions: evaluate a bundle's shape-polymorphic avals at other sizes (`replay --shape b=16`).

Dimension expressions are the strings jax.export writes (`b`, `2*b`, `b + 1`, `floordiv(b, 2)`, `mod(b, 2)`,
`max(a, b)`, `min(a, b)`, `non_negative(b - 4)`). They are parsed with `ast` and evaluated by a whitelist of
integer operations: never `eval`, so a hostile manifest cannot run code here. jax's own evaluator would need jax in
the host process and a private API; this is the small part of it a replay needs.
"""

from __future__ import annotations

import ast
import re
from typing import Callable, Sequence

from ..errors import UsageError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FUNCTIONS: dict[str, Callable[..., int]] = {
    "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "max": max, "min": min,
    "non_negative": lambda a: max(a, 0),
}
_BINARY = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
           ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}


def parse_bindings(items: Sequence[str] | dict[str, int] | None) -> dict[str, int]:
    """`["b=16", "s=128"]` (or a dict) -> {"b": 16, "s": 128}; a clear UsageError for anything else."""
    if not items:
        return {}
    pairs = items.items() if isinstance(items, dict) else (_split(item) for item in items)
    bindings = {}
    for name, value in pairs:
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise UsageError(f"--shape: {name!r} is not a dimension name", hint="write --shape NAME=SIZE, e.g. b=16")
        try:
            size = int(value)
        except (TypeError, ValueError):
            raise UsageError(f"--shape {name}={value}: the size must be an integer") from None
        if not 1 <= size <= 1 << 31:
            raise UsageError(f"--shape {name}={size}: sizes are between 1 and 2**31")
        bindings[name] = size
    return bindings


def several_sizes(items: Sequence[str] | None) -> bool:
    """Whether `--shape` gives some dimension several sizes (`seq=128,256,512`)."""
    return any("," in str(item).partition("=")[2] for item in items or ())


def parse_size_lists(items: Sequence[str] | None) -> list[dict[str, int]]:
    """`["seq=128,256,512", "b=2"]` -> one binding per combination of sizes, in the order given:
    [{"seq": 128, "b": 2}, {"seq": 256, "b": 2}, {"seq": 512, "b": 2}]; each checked as parse_bindings does."""
    import itertools

    names: list[str] = []
    choices: list[list[str]] = []
    for item in items or ():
        name, value = _split(item)
        if name in names:
            raise UsageError(f"--shape {name} is given twice", hint="give one NAME=SIZE[,SIZE...] per dimension")
        names.append(name)
        choices.append([v.strip() for v in value.split(",") if v.strip()] or [value])
    return [parse_bindings(dict(zip(names, combo))) for combo in itertools.product(*choices)]  # type: ignore[arg-type]


def _split(item: str) -> tuple[str, str]:
    name, sep, value = str(item).partition("=")
    if not sep:
        raise UsageError(f"--shape {item!r}: expected NAME=SIZE", hint="e.g. --shape b=16")
    return name.strip(), value.strip()


def evaluate(expr: str | int, env: dict[str, int]) -> int:
    """The value of one dimension under `env`; UsageError naming the first unbound symbol."""
    if isinstance(expr, int):
        return expr
    try:
        tree = ast.parse(str(expr), mode="eval")
    except SyntaxError:
        raise UsageError(f"cannot read the dimension expression {expr!r}") from None
    return _value(tree.body, env, str(expr))


def _value(node: ast.AST, env: dict[str, int], expr: str) -> int:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise UsageError(f"the dimension {expr!r} needs a size for {node.id!r}", hint=f"add --shape {node.id}=SIZE")
        return env[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_value(node.operand, env, expr)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_value(node.left, env, expr), _value(node.right, env, expr))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _FUNCTIONS
            and not node.keywords):
        return _FUNCTIONS[node.func.id](*(_value(a, env, expr) for a in node.args))
    raise UsageError(f"the dimension expression {expr!r} uses something reprobundle does not evaluate")


def symbols(manifest: dict) -> dict[str, int]:
    """The bundle's dimension variables with the sizes its packed inputs had (plain-symbol dimensions only)."""
    found: dict[str, int] = {}
    avals = manifest["function"]["fields"]["in_avals"]
    for aval, leaf in zip(avals, manifest["inputs"]["leaves"]):
        for dim, size in zip(aval["shape"], leaf["shape"]):
            if isinstance(dim, str) and _NAME.fullmatch(dim.strip()):
                found.setdefault(dim.strip(), int(size))
    return found


def resized_inputs(manifest: dict, bindings: dict[str, int], synthetic_spec) -> list[dict]:
    """Input leaves at the sizes `bindings` give (the others keep their packed size), as synthetic data.

    `synthetic_spec(dtype, seed)` makes a leaf's default spec; a leaf that already is synthetic keeps its spec.
    """
    known = symbols(manifest)
    if not known:
        raise UsageError(f"{manifest['name']} has no symbolic dimensions, so it runs at one size only",
                         hint="pack a function exported with jax.export.symbolic_shape to replay it at other sizes")
    unknown = sorted(set(bindings) - set(known))
    if unknown:
        raise UsageError(f"--shape names {', '.join(unknown)}, which {manifest['name']} does not have",
                         hint=f"its dimensions: {', '.join(f'{k} (packed at {v})' for k, v in sorted(known.items()))}")
    env = {**known, **bindings}
    leaves = []
    for i, (aval, leaf) in enumerate(zip(manifest["function"]["fields"]["in_avals"], manifest["inputs"]["leaves"])):
        shape = [evaluate(d, env) for d in aval["shape"]]
        if any(d < 0 for d in shape):
            raise UsageError(f"at {', '.join(f'{k}={v}' for k, v in sorted(bindings.items()))} input {i} would have "
                             f"the shape {shape}", hint="pick sizes for which every dimension is >= 0")
        spec = leaf.get("synthetic") or synthetic_spec(leaf["dtype"], i)
        leaves.append({k: v for k, v in leaf.items() if k not in ("blob", "synthetic", "shape")}
                      | {"shape": shape, "synthetic": spec})
    return leaves
