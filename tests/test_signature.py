"""The two definitions host and worker share for a StableHLO module: @main's signature (worker/signature.py) and the
Exported rebuilt from its fields (worker/rebuild.py), in this process's JAX; the worker's routes use them on every
release (tests/test_worker.py, the cross-version replays)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import export as jexport
from jax._src.export import _export

from reprobundle.capture.export import load_stablehlo, stablehlo_signature
from reprobundle.errors import UsageError
from reprobundle.worker.describe import describe_tree, exported_fields
from reprobundle.worker.job import Worker
from reprobundle.worker.protocol import RouteFailure
from reprobundle.worker.rebuild import RebuildError, rebuild_exported
from reprobundle.worker.signature import SignatureError, main_signature


def _module(signature: str, attributes: str = "", add: bool = False) -> str:
    """A module whose @main returns its argument, or adds it to itself."""
    args, result = signature.split(" -> ")
    body = f"    %0 = stablehlo.add %a, %a : {result}\n    return %0" if add else "    return %a"
    return f"module @m {attributes}{{\n  func.func public @main({args}) -> {result} {{\n{body} : {result}\n  }}\n}}\n"


DYNAMIC = _module("%a: tensor<?x4xbf16> -> tensor<?x4xbf16>", "attributes {mhlo.num_partitions = 2 : i32} ", add=True)


def _f(x, y):
    return jnp.tanh(x @ y.astype(x.dtype)), jnp.sum(x, axis=0).astype(jnp.bfloat16)


@pytest.fixture(scope="module")
def exported():
    return jexport.export(jax.jit(_f))(jax.ShapeDtypeStruct((4, 3), jnp.float32),
                                       jax.ShapeDtypeStruct((3, 2), jnp.int8))


def test_the_signature_of_main_with_its_module_attributes(exported):
    signature = main_signature(exported.mlir_module())
    assert signature == {"in_avals": [{"shape": [4, 3], "dtype": "float32"}, {"shape": [3, 2], "dtype": "int8"}],
                         "out_avals": [{"shape": [4, 2], "dtype": "float32"}, {"shape": [3], "dtype": "bfloat16"}],
                         "num_partitions": 1, "uses_shape_polymorphism": False}
    assert main_signature(DYNAMIC) == {"in_avals": [{"shape": [None, 4], "dtype": "bfloat16"}],
                                       "out_avals": [{"shape": [None, 4], "dtype": "bfloat16"}],
                                       "num_partitions": 2, "uses_shape_polymorphism": False}
    symbolic = jexport.export(jax.jit(lambda x: x * 2))(
        jax.ShapeDtypeStruct(jexport.symbolic_shape("b, 4"), jnp.float32))
    assert main_signature(symbolic.mlir_module())["uses_shape_polymorphism"] is True
    assert stablehlo_signature(DYNAMIC) == (main_signature(DYNAMIC)["in_avals"], main_signature(DYNAMIC)["out_avals"])


@pytest.mark.parametrize("text,message,hint", [
    ("this is not mlir", "not a StableHLO module this jaxlib can parse", "stablehlo dialect"),
    (_module("%a: tensor<2xf32> -> tensor<2xf32>").replace("@main", "@other"), "no @main function", "public @main"),
    (_module("%a: tensor<*xf32> -> tensor<*xf32>"), "unranked type tensor<*xf32>", None),
    (_module("%a: tensor<2xindex> -> tensor<2xindex>"), "element type index", None),
])
def test_what_is_not_a_readable_signature_says_why_on_both_sides(text, message, hint):
    with pytest.raises(SignatureError, match=re.escape(message)) as caught:
        main_signature(text)
    assert caught.value.hint is None if hint is None else hint in caught.value.hint
    assert (caught.value.cause is not None) == ("parse" in message)
    with pytest.raises(UsageError, match=re.escape(message)) as host:
        stablehlo_signature(text)
    assert "\n" not in host.value.message and (hint or "") in host.value.hint
    if "parse" in message:  # what MLIR could not parse, said on the lines after "Unable to parse module assembly:"
        assert "custom op 'this' is unknown" in host.value.message
    with pytest.raises(RouteFailure, match=re.escape(message)):
        Worker({"function": {}})._fields_from_text(text)


def test_the_stablehlo_text_route_refuses_dynamic_dimensions_it_cannot_name():
    with pytest.raises(RouteFailure, match="dynamic dimensions"):
        Worker({"function": {}})._fields_from_text(DYNAMIC)


def test_the_rebuilt_exported_has_the_fields_it_was_rebuilt_from_and_computes_the_same(exported):
    fields = exported_fields(exported)
    rebuilt, notes = rebuild_exported(_export, fields, exported.mlir_module_serialized)
    assert notes == [] and exported_fields(rebuilt) == fields
    assert describe_tree(rebuilt.in_tree) == describe_tree(exported.in_tree)
    x, y = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), np.arange(6, dtype=np.int8).reshape(3, 2)
    for got, want in zip(rebuilt.call(x, y), exported.call(x, y)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert rebuilt.serialize()  # what the host packs: this JAX serializes it


def test_symbolic_dimensions_share_one_scope():
    b, = jexport.symbolic_shape("b")
    exp = jexport.export(jax.jit(lambda x, y: x * y[:, None]))(jax.ShapeDtypeStruct((b, 4), jnp.float32),
                                                              jax.ShapeDtypeStruct((b,), jnp.float32))
    fields = exported_fields(exp)
    rebuilt, _ = rebuild_exported(_export, fields, exp.mlir_module_serialized)
    assert exported_fields(rebuilt)["in_avals"] == [{"shape": ["b", 4], "dtype": "float32"},
                                                    {"shape": ["b"], "dtype": "float32"}]
    x, y = np.ones((3, 4), np.float32), np.full((3,), 2, np.float32)
    (got,) = rebuilt.call(x, y)  # the rebuilt out_tree is a flat tuple
    np.testing.assert_array_equal(np.asarray(got), np.asarray(exp.call(x, y)))


def test_what_is_adjusted_is_noted_and_what_cannot_be_rebuilt_is_refused(exported):
    fields, module = exported_fields(exported), exported.mlir_module_serialized
    high = _export.maximum_supported_calling_convention_version
    rebuilt, notes = rebuild_exported(_export, dict(fields, in_shardings_hlo=["{replicated}", None],
                                                    calling_convention_version=high + 50), module)
    assert rebuilt.in_shardings_hlo == (None, None) and rebuilt.calling_convention_version == high + 50
    assert [n.split(" ")[0] for n in notes] == ["ignored", "calling_convention_version"]
    refusals = [(dict(fields, ordered_effects=["Io"]), "deserialize route"),
                (dict(fields, nr_devices=2, out_shardings_hlo=["{devices=[2]0,1}", None]), "multi-device shardings"),
                (dict(fields, disabled_safety_checks=["weird"]), "unknown disabled safety check"),
                (dict(fields, in_avals=[{"shape": [4, 3], "dtype": "float99"}] + fields["in_avals"][1:]),
                 "cannot build avals")]
    for bad, message in refusals:
        with pytest.raises(RebuildError, match=message):
            rebuild_exported(_export, bad, module)


def test_a_raw_module_is_wrapped_by_the_same_rebuild():
    fn = load_stablehlo(DYNAMIC, [(5, 4)], "cuda")
    assert fn.kind == "stablehlo" and fn.fields["platforms"] == ["cuda"] and fn.fields["nr_devices"] == 1
    assert fn.fields["in_avals"] == fn.fields["out_avals"] == [{"shape": [5, 4], "dtype": "bfloat16"}]
    assert fn.fields["calling_convention_version"] == _export.maximum_supported_calling_convention_version
    assert jexport.deserialize(bytearray(fn.serialized)).in_avals[0].shape == (5, 4)
