"""A jax.export.Exported as plain data: the fields that rebuild it and its pytree structures."""
from __future__ import annotations

from .dtypes import dtype_name


def _sharding_str(s):
    if s is None:
        return None
    try:
        return str(s)
    except Exception:
        return repr(s)


class _TreeLeaf:
    pass


def describe_tree(treedef):
    """A version-independent description of a pytree structure: nested {"kind": leaf|none|tuple|list|dict|
    custom, "children", "keys", "type"} maps (manifest ``in_tree``/``out_tree``)."""
    import jax

    marker = _TreeLeaf()
    structure = jax.tree_util.tree_unflatten(treedef, [marker] * treedef.num_leaves)

    def walk(node):
        if node is marker:
            return {"kind": "leaf"}
        if node is None:
            return {"kind": "none"}
        if isinstance(node, tuple) and not hasattr(node, "_fields"):
            return {"kind": "tuple", "children": [walk(c) for c in node]}
        if isinstance(node, list):
            return {"kind": "list", "children": [walk(c) for c in node]}
        if isinstance(node, dict):
            keys = sorted(node)
            return {"kind": "dict", "keys": [str(k) for k in keys], "children": [walk(node[k]) for k in keys]}
        children = jax.tree_util.tree_flatten(node, is_leaf=lambda x: x is not node)[0]
        return {"kind": "custom", "type": "%s.%s" % (type(node).__module__, type(node).__qualname__),
                "children": [walk(c) for c in children]}

    return walk(structure)


def exported_fields(exported):
    """Host side: the job's ``function.fields`` dict for a jax.export.Exported."""
    def aval(a):
        return {"shape": [int(d) if isinstance(d, int) else str(d) for d in a.shape],
                "dtype": dtype_name(a.dtype)}

    def check_str(c):
        return str(getattr(c, "_impl", c))

    return {
        "fun_name": str(exported.fun_name),
        "in_avals": [aval(a) for a in exported.in_avals],
        "out_avals": [aval(a) for a in exported.out_avals],
        "platforms": [str(p) for p in exported.platforms],
        "nr_devices": int(exported.nr_devices),
        "in_shardings_hlo": [_sharding_str(s) for s in getattr(exported, "in_shardings_hlo", ())],
        "out_shardings_hlo": [_sharding_str(s) for s in getattr(exported, "out_shardings_hlo", ())],
        "calling_convention_version": int(exported.calling_convention_version),
        "ordered_effects": [str(e) for e in exported.ordered_effects],
        "unordered_effects": [str(e) for e in exported.unordered_effects],
        "disabled_safety_checks": [check_str(c) for c in exported.disabled_safety_checks],
        "module_kept_var_idx": [int(i) for i in exported.module_kept_var_idx],
        "uses_global_constants": bool(exported.uses_global_constants),
    }


def shape_builder(avals):
    """A function turning a fields shape into a jax shape: ints stay ints; symbolic dimensions ("b", "2*b") are
    parsed by jax.export.symbolic_shape in one scope shared by all the avals, as the exporter had them."""
    if all(isinstance(d, int) for a in avals for d in a["shape"]):
        return lambda dims: tuple(int(d) for d in dims)
    from jax import export as jexport

    scope = jexport.SymbolicScope()

    def build(dims):
        if all(isinstance(d, int) for d in dims):
            return tuple(int(d) for d in dims)
        return tuple(jexport.symbolic_shape(", ".join(str(d) for d in dims), scope=scope))

    return build
