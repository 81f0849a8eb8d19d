"""Turn a call `fn(*args, **kwargs)` on any pytree into the flat function that `jax.export` sees.

One definition for both sides: the host's pack (capture/export.py) and the worker's retrace (retrace.py) flatten a
call alike, so a program traced by another release takes the bundle's stored inputs leaf for leaf. Worker rules
apply: Python 3.9 syntax, jax imported lazily, nothing of the host imported.

The representation is deliberate: the exported artifact takes and returns only a flat tuple of arrays, so it
serializes whatever node types the user's trees hold (Flax NNX states and modules, Equinox modules, optax states,
namedtuples, dataclasses, `None`) without registering anything, and a bundle never needs those types to load. The
original trees stay in the manifest as data: one key path per leaf (`params['attn']['key']['bias']`), node type
names for display, and the static values (repr and type) that were baked into the export.

A call that updates its inputs in place (`nnx.jit` applying an optimizer step to a module) returns the updated
arrays as extra outputs named `updated <input path>`. Non-array results are static, dropped from the outputs and
marked in the output tree.

Which leaves are inputs: arrays (`jax.Array`, `numpy.ndarray`, NumPy scalars) are; every other leaf (Python
numbers, strings, functions, an Equinox module's non-array fields) is static and baked in, as `eqx.filter_jit`
treats them, and so are whole arguments named in `static` (argnums or argnames). Arguments a `jax.jit` object
declares static are never arrays, so they are baked in the same way. Typed PRNG keys travel as their key data
(uint32) plus the impl name, and are wrapped back inside the exported function, so every release runs them.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

_MAX_REPR = 200
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


class FlattenError(ValueError):
    """A call that cannot be flattened as asked (the host raises it as a UsageError)."""

    def __init__(self, message, hint=""):
        ValueError.__init__(self, message)
        self.message = message
        self.hint = hint


@dataclass(frozen=True)
class FlatCall:
    """A call flattened for export: `fn_flat(*dynamic)` returns the flat outputs (after `trace`)."""

    fn_flat: Callable
    dynamic: list  # the input leaves the exported function takes, key arrays as key data
    input_leaves: list[dict]  # per dynamic leaf: {"path", "key_impl"?}
    static: list[dict]  # per baked-in leaf: {"path", "type", "repr"}
    in_tree: dict  # the user's (args, kwargs) tree described as data, static leaves marked
    outputs: list[dict] = field(default_factory=list)  # per output leaf: {"path", "key_impl"?}; filled by tracing
    out_tree: dict = field(default_factory=dict)


def flatten_call(fn: Callable, args: tuple, kwargs: dict, static: Iterable[int | str] = ()) -> FlatCall:
    import jax

    names = argument_names(fn, len(args))
    static_roots = _static_roots(set(static), args, kwargs, names)
    with_path, treedef = jax.tree_util.tree_flatten_with_path((tuple(args), dict(kwargs)))
    template: list[Any] = []
    dynamic: list = []
    slots: list[tuple[int, Any]] = []  # (index into template, key impl as key_impl gives it) per dynamic leaf
    input_leaves: list[dict] = []
    static_leaves: list[dict] = []
    is_static: list[bool] = []
    for path, leaf in with_path:
        root = ("args", path[1].idx) if path[0].idx == 0 else ("kwargs", path[1].key)
        name = _input_path(path, names)
        if root in static_roots or not _is_array(leaf):
            template.append(leaf)
            static_leaves.append({"path": name, "type": _type_name(leaf), "repr": _short_repr(leaf)})
            is_static.append(True)
            continue
        impl = _key_impl(leaf)
        template.append(None)
        slots.append((len(template) - 1, jax.random.key_impl(leaf) if impl else None))
        dynamic.append(jax.random.key_data(leaf) if impl else leaf)
        input_leaves.append({"path": name, **({"key_impl": impl} if impl else {})})
        is_static.append(False)
    in_tree = describe_structure(treedef, is_static)
    call = FlatCall(fn_flat=lambda *_: None, dynamic=dynamic, input_leaves=input_leaves, static=static_leaves,
                    in_tree=in_tree)

    def fn_flat(*flat):
        leaves = list(template)
        for (slot, impl), value in zip(slots, flat):
            leaves[slot] = jax.random.wrap_key_data(value, impl=impl) if impl else value
        a, k = jax.tree_util.tree_unflatten(treedef, leaves)
        out = fn(*a, **k)
        out_with_path, out_treedef = jax.tree_util.tree_flatten_with_path(out)
        # Non-array results (an Equinox module's functions and sizes) are static, as eqx.filter_jit returns them.
        returned_arrays = [_is_array(leaf) for _, leaf in out_with_path]
        named = [("out" + jax.tree_util.keystr(path), leaf)
                 for (path, leaf), is_array in zip(out_with_path, returned_arrays) if is_array]
        named += _updated_in_place((a, k), leaves, names)
        outputs, results = [], []
        for name, leaf in named:
            impl = _key_impl(leaf)
            outputs.append({"path": name, **({"key_impl": impl} if impl else {})})
            results.append(jax.random.key_data(leaf) if impl else leaf)
        call.outputs[:] = outputs
        call.out_tree.clear()
        call.out_tree.update(describe_structure(out_treedef, [not is_array for is_array in returned_arrays]))
        return tuple(results)

    fn_flat.__name__ = fn_flat.__qualname__ = _function_name(fn)
    object.__setattr__(call, "fn_flat", fn_flat)
    return call


def _static_roots(static: set, args: tuple, kwargs: dict, names: list[str]) -> set[tuple[str, int | str]]:
    """The arguments named static (argnums or argnames) as ("args", index) or ("kwargs", name)."""
    _check_static(static, args, kwargs, names)
    roots: set[tuple[str, int | str]] = {("args", s) for s in static if isinstance(s, int)}
    roots |= {("args", names.index(s)) for s in static if isinstance(s, str) and s in names}
    roots |= {("kwargs", s) for s in static if isinstance(s, str) and s in kwargs}
    return roots


def _check_static(static: set, args: tuple, kwargs: dict, names: list[str]) -> None:
    """FlattenError when `static` holds an index or a name of no argument of this call."""
    unknown = {s for s in static if isinstance(s, str) and s not in kwargs and s not in names}
    if unknown or any(isinstance(s, int) and not 0 <= s < len(args) for s in static):
        raise FlattenError("static=%s names no argument of this call" % sorted(map(str, static)),
                           hint="static takes positional argument indexes or argument names")


def _updated_in_place(args_kwargs, passed: list, names: list[str]) -> list[tuple[str, Any]]:
    """Input leaves the call replaced in place (a Flax NNX module or optimizer updated by `nnx.jit`): they are
    outputs too, named `updated <input path>`, or the export would drop the update as dead code."""
    import jax

    before = {id(leaf) for leaf in passed}
    after = jax.tree_util.tree_flatten_with_path(args_kwargs)[0]
    return [("updated " + _input_path(path, names), leaf) for path, leaf in after
            if id(leaf) not in before and _is_array(leaf)]


def _is_array(leaf) -> bool:
    import jax

    return isinstance(leaf, (jax.Array, np.ndarray, np.generic))


def _key_impl(leaf) -> str | None:
    import jax

    dtype = getattr(leaf, "dtype", None)
    if dtype is None or not jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
        return None
    impl = jax.random.key_impl(leaf)
    # jax 0.4.30 gives a PRNGSpec whose str is a tag ("fry"); its impl has the name every release knows
    return str(getattr(getattr(impl, "_impl", None), "name", None) or impl)


def argument_names(fn: Callable, n_args: int) -> list[str]:
    """Names of the first `n_args` positional arguments: the parameter's name, `rest[j]` for the j-th of a
    `*rest`, `args[i]` where there is no signature."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        params = []
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    var = next((p.name for p in params if p.kind == p.VAR_POSITIONAL), None)
    return [positional[i] if i < len(positional) else f"{var}[{i - len(positional)}]" if var else f"args[{i}]"
            for i in range(n_args)]


def _input_path(path: tuple, names: list[str]) -> str:
    import jax

    root = names[path[1].idx] if path[0].idx == 0 else path[1].key
    return str(root) + jax.tree_util.keystr(tuple(path[2:]))


def _function_name(fn: Callable) -> str:
    name = getattr(fn, "__name__", None) or type(fn).__name__
    return "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in str(name))[:80] or "fn"


def _type_name(obj) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _short_repr(obj) -> str:
    try:
        text = repr(obj)
    except Exception as e:  # a repr that raises must not stop a pack
        text = f"<{type(obj).__name__}: repr failed: {type(e).__name__}>"
    text = _ADDRESS.sub("", " ".join(text.split()))  # "<function f at 0x7f..>": addresses change every run
    return text if len(text) <= _MAX_REPR else text[:_MAX_REPR - 3] + "..."


class _Marker:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index


def describe_structure(treedef, is_static: list[bool]) -> dict:
    """A pytree structure as plain data: nested {"kind": leaf|static|none|tuple|list|dict|custom, "children",
    "keys", "type"} maps. Node types are recorded by name only, for display; nothing is imported by it."""
    import jax

    markers = [_Marker(i) for i in range(treedef.num_leaves)]
    structure = jax.tree_util.tree_unflatten(treedef, markers)

    def walk(node):
        if isinstance(node, _Marker):
            return {"kind": "static" if is_static[node.index] else "leaf"}
        if node is None:
            return {"kind": "none"}
        if type(node) is tuple:
            return {"kind": "tuple", "children": [walk(c) for c in node]}
        if type(node) is list:
            return {"kind": "list", "children": [walk(c) for c in node]}
        if type(node) is dict:
            keys = sorted(node, key=str)
            return {"kind": "dict", "keys": [str(k) for k in keys], "children": [walk(node[k]) for k in keys]}
        children = jax.tree_util.tree_flatten(node, is_leaf=lambda x: x is not node)[0]
        return {"kind": "custom", "type": _type_name(node), "children": [walk(c) for c in children]}

    return walk(structure)
