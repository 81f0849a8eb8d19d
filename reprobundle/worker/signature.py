"""The signature of a StableHLO module's public @main, read from its text with the jaxlib MLIR bindings: what the
host packs a raw module by, and what the stablehlo-text route derives fields from when a bundle has none."""
from __future__ import annotations

from .dtypes import MLIR_ELEMENT_DTYPES
from .stablehlo import strip_mlir_locations


class SignatureError(ValueError):
    """@main's signature cannot be read. ``str(e)`` says why; ``hint`` what to do (or None); ``cause`` is the
    parser's exception when the text does not parse (the caller words it as its errors do)."""

    def __init__(self, message, hint=None, cause=None):
        ValueError.__init__(self, message)
        self.hint = hint
        self.cause = cause


def main_function(module):
    """The ``func.func @main`` op of a parsed module (inside an MLIR context)."""
    from jax._src.lib.mlir import ir

    for op in module.body.operations:
        if "sym_name" in op.attributes and ir.StringAttr(op.attributes["sym_name"]).value == "main":
            return op
    raise SignatureError("the StableHLO module has no @main function",
                         hint="reprobundle calls the module's public @main with the inputs in order")


def main_signature(text):
    """@main's in and out avals ({"shape", "dtype"}; a dynamic dimension, ``tensor<?x4xf32>``, is None), the
    module's ``mhlo.num_partitions`` (1 when absent) and whether it declares ``jax.uses_shape_polymorphism``.

    Text an older parser rejects for its locations only is read without them (locations carry no meaning)."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    last = None
    for candidate in (text, strip_mlir_locations(text)):
        try:
            with mlir.make_ir_context():
                module = ir.Module.parse(candidate)
                ftype = ir.FunctionType(ir.TypeAttr(main_function(module).attributes["function_type"]).value)
                attributes = module.operation.attributes
                return {"in_avals": [_aval(t) for t in ftype.inputs],
                        "out_avals": [_aval(t) for t in ftype.results],
                        "num_partitions": _num_partitions(attributes),
                        "uses_shape_polymorphism": _module_flag(attributes, "jax.uses_shape_polymorphism")}
        except SignatureError:
            raise
        except Exception as e:
            last = e
    raise SignatureError("not a StableHLO module this jaxlib can parse",
                         hint="pass MLIR text in the stablehlo dialect, e.g. the module.mlir of a JAX IR dump",
                         cause=last)


def _aval(t):
    from jax._src.lib.mlir import ir

    try:
        tensor = ir.RankedTensorType(t)
    except (ValueError, TypeError):
        raise SignatureError("@main has a non-tensor or unranked type %s; only ranked tensors can be replayed" % t)
    element = str(tensor.element_type)
    if element not in MLIR_ELEMENT_DTYPES:
        raise SignatureError("@main uses the element type %s, which reprobundle cannot feed" % element)
    return {"shape": [None if tensor.is_dynamic_dim(i) else int(d) for i, d in enumerate(tensor.shape)],
            "dtype": MLIR_ELEMENT_DTYPES[element]}


def _num_partitions(attributes):
    try:
        return int(str(attributes["mhlo.num_partitions"]).split(":")[0])
    except Exception:  # absent, or printed in a form this reader does not know: one partition
        return 1


def _module_flag(attributes, name):
    try:
        return str(attributes[name]) == "true"
    except Exception:  # absent
        return False
