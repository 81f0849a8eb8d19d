"""Real programs: Flax (NNX and Linen), Equinox and optax, static arguments, typed PRNG keys, symbolic shapes.

Packed with the installed JAX and replayed on it, on 0.7.2 and on the oldest release reprobundle supports (0.4.30),
all three timed together in one replay; the bundle needs none of the frameworks to replay.
"""

import collections
import dataclasses
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import quick
from cli_runner import cli
from manifests import assert_schema_valid

import reprobundle
from reprobundle import api
from reprobundle.bundle.registry import Registry
from reprobundle.errors import UsageError

ROOT = Path(__file__).parent.parent
VERSIONS = ["installed", "0.7.2", "0.4.30"]


def _replay_everywhere(ref: str, store) -> list[dict]:
    runs = api.replay(ref, VERSIONS, store=str(store), warmup=1, repeat=3, rounds=1, profile=False, dump=False).runs
    for run in runs:
        assert run["status"] == "ok", (run["requested"], run["reason"])
        assert run["check"]["ok"], (run["requested"], run["check"])
    return runs


def _manifest(store, ref):
    bundle = Registry.open(store).resolve(ref)
    assert_schema_valid(bundle.manifest)
    return bundle.manifest


# ------------------------------------------------------------------------------ frameworks, replayed everywhere

@pytest.mark.crossversion
@pytest.mark.parametrize("script,name", [
    ("flax_nnx_train.py", "nnx-jit-train"),
    ("flax_nnx_train.py:make_functional", "nnx-split-train"),
    ("equinox_mlp.py:make_train", "eqx-train"),
    ("flax_linen.py", "linen-apply"),
])
def test_framework_programs_pack_and_replay_on_old_releases(store_dir, script, name):
    ref = api.pack_script(str(ROOT / "examples" / script), name=name, store=str(store_dir), **quick.PACK)
    m = _manifest(store_dir, ref.name)
    paths = [leaf["path"] for leaf in m["inputs"]["leaves"]]
    outputs = [o["path"] for o in m["function"]["outputs"]]
    if name == "nnx-jit-train":  # nnx.jit updates model and optimizer in place: those updates are outputs
        assert "model.up.kernel.value" in paths and paths[-2:] == ["x", "y"]
        assert outputs[0] == "out" and "updated model.up.kernel.value" in outputs
        assert any(p.startswith("updated optimizer.opt_state") for p in outputs)
    if name == "eqx-train":  # the module's activation functions are static, baked in and recorded
        assert {s["path"] for s in m["function"]["static"]} == {"model.activation", "model.final_activation"}
        assert "model.layers[0].weight" in paths and "opt_state[0].mu.layers[0].weight" in paths
    if name == "linen-apply":  # static_argnames="train" and the module bound into model.apply
        assert paths == ["variables['params']['Conv_0']['bias']", "variables['params']['Conv_0']['kernel']",
                         "variables['params']['Conv_1']['bias']", "variables['params']['Conv_1']['kernel']",
                         "variables['params']['Dense_0']['bias']", "variables['params']['Dense_0']['kernel']",
                         "args[0]"]  # model.apply(variables, *args, ...)
        assert {"path": "train", "type": "builtins.bool", "repr": "False"} in m["function"]["static"]
    _replay_everywhere(ref.name, store_dir)


@pytest.mark.crossversion
def test_static_arguments_and_typed_keys_replay_on_old_releases(store_dir):
    @jax.jit
    def sample(key, x):
        k1, k2 = jax.random.split(key)
        return x + jax.random.normal(k1, x.shape), k2

    ref = reprobundle.pack(sample, jax.random.key(7), jnp.ones((4, 3)), name="keys", store=str(store_dir), **quick.PACK)
    m = _manifest(store_dir, ref.name)
    assert m["inputs"]["leaves"][0] == {**m["inputs"]["leaves"][0], "path": "key", "key_impl": "threefry2x32",
                                        "dtype": "uint32", "shape": [2]}
    assert m["function"]["outputs"][1] == {"path": "out[1]", "key_impl": "threefry2x32"}
    runs = _replay_everywhere(ref.name, store_dir)
    assert all(r["check"]["leaves"][1]["bit_identical"] for r in runs)  # threefry's split: the same bits everywhere

    scaled = jax.jit(lambda x, n, mode: x * n if mode == "mul" else x + n, static_argnums=(1,), static_argnames="mode")
    ref = reprobundle.pack(scaled, jnp.arange(3.0), 4, kwargs={"mode": "mul"}, name="static", store=str(store_dir),
                           **quick.PACK)
    m = _manifest(store_dir, ref.name)
    assert [leaf["path"] for leaf in m["inputs"]["leaves"]] == ["x"]
    assert m["function"]["static"] == [{"path": "n", "type": "builtins.int", "repr": "4"},
                                       {"path": "mode", "type": "builtins.str", "repr": "'mul'"}]
    runs = _replay_everywhere(ref.name, store_dir)
    store = Registry.open(store_dir)
    out = np.frombuffer(store.get_blob(runs[1]["outputs"][0]["blob"]), np.float32)
    np.testing.assert_array_equal(out, [0.0, 4.0, 8.0])


# ------------------------------------------------------------------------------ trees, no replay on other releases

Pair = collections.namedtuple("Pair", "left right")


@jax.tree_util.register_dataclass
@dataclasses.dataclass
class Params:
    w: jax.Array
    b: jax.Array | None


@pytest.mark.slow
def test_any_pytree_packs_without_registering_anything(store_dir):
    def f(p: Params, pair: Pair, extra):
        return {"y": pair.left @ p.w + pair.right, "none": None, "n": extra["scale"] * p.w.sum()}

    p = Params(w=jnp.ones((3, 2)), b=None)
    ref = reprobundle.pack(f, p, Pair(jnp.ones((4, 3)), jnp.zeros(2)), {"scale": np.float32(2), "label": "x"},
                           name="trees", store=str(store_dir), **quick.PACK)
    m = _manifest(store_dir, ref.name)
    assert [leaf["path"] for leaf in m["inputs"]["leaves"]] == ["p.w", "pair.left", "pair.right", "extra['scale']"]
    assert m["function"]["static"] == [{"path": "extra['label']", "type": "builtins.str", "repr": "'x'"}]
    assert [o["path"] for o in m["function"]["outputs"]] == ["out['n']", "out['y']"]
    assert m["function"]["in_tree"]["children"][0]["children"][0]["type"].endswith("Params")
    assert m["function"]["in_tree"]["children"][0]["children"][2]["children"][0]["kind"] == "static"
    run = api.replay(ref.name, store=str(store_dir), warmup=1, repeat=2, profile=False, dump=False).run
    assert run["status"] == "ok" and run["check"]["ok"]


def test_static_by_index_or_name_bakes_an_array_in(store_dir):
    table = np.arange(6, dtype=np.float32).reshape(2, 3)
    ref = reprobundle.pack(lambda x, table: x @ table, jnp.ones((4, 2)), table, static=["table"], name="baked",
                           store=str(store_dir), **quick.PACK)
    m = _manifest(store_dir, ref.name)
    assert [leaf["path"] for leaf in m["inputs"]["leaves"]] == ["x"]
    assert m["function"]["static"][0]["path"] == "table" and m["function"]["static"][0]["type"] == "numpy.ndarray"
    with pytest.raises(UsageError, match="names no argument"):
        reprobundle.pack(lambda x: x, jnp.ones(2), static=[3], name="bad", store=str(store_dir), **quick.PACK)


@pytest.mark.slow
def test_show_prints_the_train_state_tree(store_dir):
    ref = api.pack_script(str(ROOT / "examples/flax_nnx_train.py"), name="nnx-train", store=str(store_dir), **quick.PACK)
    code, out, err = cli("show", ref.name, store=store_dir)
    assert code == 0, err
    lines = out.splitlines()
    inputs_at = next(i for i, line in enumerate(lines) if line.startswith("  inputs:"))
    assert lines[inputs_at].split()[1:3] == ["40", "leaves,"]
    grouped = lines[inputs_at + 1:inputs_at + 9]
    # 40 leaves grouped by key-path prefix into at most 12 lines, each naming its part of the model or optimizer
    assert [line.split()[0] for line in grouped][:5] == ["model.attn", "model.down", "model.norm1", "model.norm2",
                                                         "model.up"]
    attn = next(line for line in grouped if line.split()[0] == "model.attn")
    assert "4 leaves, float32, 16,384 elements (64.0 KiB)" in attn
    assert any(line.split()[:1] == ["x"] and "float32[8, 32, 64]" in line for line in grouped)
    assert "updated optimizer.opt_state" in out and max(len(line) for line in lines) <= 160


@pytest.mark.slow
def test_mismatch_names_the_output_leaf(store_dir, monkeypatch):
    from reprobundle.analysis.comparison import build_comparison
    from reprobundle.analysis.verdict import check_outputs
    from reprobundle.run.replay import _mismatch_reason

    ref = reprobundle.pack(lambda s: {"params": {"attn": {"bias": s["w"] * 2}}, "step": s["n"] + 1},
                           {"w": jnp.ones(3), "n": jnp.int32(0)}, name="named", store=str(store_dir), **quick.PACK)
    m = _manifest(store_dir, ref.name)
    names = [o["path"] for o in m["function"]["outputs"]]
    assert names == ["out['params']['attn']['bias']", "out['step']"]
    check = check_outputs([np.ones(3, np.float32), np.int32(1)], [np.array([1, 1, 2], np.float32), np.int32(1)])
    assert _mismatch_reason(check, names).startswith("out['params']['attn']['bias']: 1 elements outside tolerance")
    run = {"requested": "x", "status": "mismatch", "reason": "", "environment": {}, "check": check, "timing": {}}
    row = build_comparison(m, [run], hlo_texts={}, outputs={})["rows"][1]
    assert row["err_ref"]["worst"] == "out['params']['attn']['bias']"


# ------------------------------------------------------------------------------ refusals: one typed line each

@pytest.mark.parametrize("fn,args,match", [
    (jax.jit(lambda x: jax.pure_callback(np.sin, jax.ShapeDtypeStruct((3,), jnp.float32), x)), (jnp.ones(3),),
     "host callback"),
    (jax.jit(lambda x: (jax.debug.print("{}", x), x)[1]), (jnp.ones(3),), "host callback"),
    (jax.jit(lambda n: jnp.arange(n)), (3,), "jax.export could not export"),
    ("not a function", (jnp.ones(3),), "is not callable"),
])
def test_refusals_are_one_typed_line(store_dir, fn, args, match):
    with pytest.raises(UsageError, match=match) as e:
        reprobundle.pack(fn, *args, name="refused", store=str(store_dir), **quick.PACK)
    assert "\n" not in e.value.message and e.value.hint


@pytest.mark.slow
def test_multi_device_sharding_is_refused_with_what_to_do(tmp_path):
    import os
    import subprocess
    import sys

    script = """
import jax, jax.numpy as jnp, reprobundle
from jax.sharding import NamedSharding, PartitionSpec as P
x = jax.device_put(jnp.ones((4, 4)), NamedSharding(jax.make_mesh((2,), ("d",)), P("d")))
try:
    reprobundle.pack(jax.jit(lambda x: x * 2), x, name="sharded", store=%r)
except reprobundle.errors.UsageError as e:
    print("REFUSED", e.message, "|", e.hint)
""" % str(tmp_path / "store")
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300).stdout
    assert "REFUSED" in out and "sharded over 2 devices" in out and "one device" in out, out


# ------------------------------------------------------------------------------ symbolic shapes

@pytest.mark.crossversion
def test_symbolic_shapes_replay_at_other_sizes(store_dir):
    from jax import export

    def f(x, w):
        return jnp.tanh(x @ w).sum(axis=0), x * 2

    b, = export.symbolic_shape("b")
    exp = export.export(jax.jit(f))(jax.ShapeDtypeStruct((b, 4), jnp.float32), jax.ShapeDtypeStruct((4, 3), jnp.float32))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 4), dtype=np.float32), rng.standard_normal((4, 3), dtype=np.float32)
    ref = reprobundle.pack(exp, x, w, name="poly", store=str(store_dir), **quick.PACK)
    m = _manifest(store_dir, ref.name)
    assert m["function"]["fields"]["in_avals"][0]["shape"] == ["b", 4]
    _replay_everywhere(ref.name, store_dir)  # at the packed size b=8: outputs checked on every release
    for size in (3, 32):
        runs = api.replay(ref.name, ["installed", "0.7.2"], store=str(store_dir), warmup=1, repeat=2, rounds=1,
                          profile=False, dump=False, shapes=[f"b={size}"]).runs
        for run in runs:
            assert run["status"] == "ok", run["reason"]
            assert run["labels"] == {"shape": f"b={size}"} and "not compared" in run["reason"]
            assert [o["shape"] for o in run["outputs"]] == [[3], [size, 4]]
    with pytest.raises(UsageError, match="does not have"):
        api.replay(ref.name, store=str(store_dir), shapes=["c=3"])


@pytest.mark.slow
def test_stablehlo_with_dynamic_dimensions_packs_at_the_inputs_sizes(store_dir, tmp_path):
    module = tmp_path / "dyn.mlir"
    module.write_text("""
module @m {
  func.func public @main(%arg0: tensor<?x4xf32>, %arg1: tensor<4x3xf32>) -> (tensor<?x3xf32>) {
    %0 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0] : (tensor<?x4xf32>, tensor<4x3xf32>) -> tensor<?x3xf32>
    return %0 : tensor<?x3xf32>
  }
}""")
    x, w = np.ones((5, 4), np.float32), np.full((4, 3), 2, np.float32)
    np.savez(tmp_path / "in.npz", x, w)
    code, out, err = cli("pack", "--stablehlo", str(module), "--inputs", str(tmp_path / "in.npz"), "--name", "dyn",
                         "--repeat", "2", "--warmup", "1", store=store_dir)
    assert code == 0, err
    m = _manifest(store_dir, "dyn")
    assert m["reference"]["outputs"][0]["shape"] == [5, 3]
    code, out, err = cli("pack", "--stablehlo", str(module), "--synthetic-inputs", "--name", "dyn", store=store_dir)
    assert code == 2 and "dynamic dimensions" in err and "Traceback" not in err


def test_dimension_expressions_are_evaluated_without_eval():
    from reprobundle.bundle.dims import evaluate, parse_bindings

    env = {"b": 8, "s": 3}
    assert [evaluate(e, env) for e in ("b", "2*b", "b + 1", "floordiv(b, 3)", "mod(b, 3)", "max(b, s)",
                                       "non_negative(s - b)", 7)] == [8, 16, 9, 2, 2, 8, 0, 7]
    for hostile in ("__import__('os').system('true')", "b.__class__", "[b]", "b ** 1000000", "lambda: 1"):
        with pytest.raises(UsageError):
            evaluate(hostile, env)
    with pytest.raises(UsageError, match="needs a size for 'c'"):
        evaluate("c * 2", env)
    assert parse_bindings(["b=16", "s = 4"]) == {"b": 16, "s": 4}
    for bad in (["b"], ["b=x"], ["1b=2"], ["b=0"]):
        with pytest.raises(UsageError):
            parse_bindings(bad)
