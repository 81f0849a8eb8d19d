"""Isolation (investigate/minimize/pieces.py): a bundle's StableHLO split into pieces that compute, one after the other, what
the whole function computes; the pieces timed on two versions and the one that moved packed as a bundle."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_runner import cli

import reprobundle
from reprobundle.analysis.verdict import check_leaf
from reprobundle.bundle.registry import Registry
from reprobundle.capture.export import export_function, load_stablehlo
from reprobundle.errors import UsageError
from reprobundle.investigate.minimize.pieces import split_module


def layer(x, w1, w2):
    h = jnp.tanh(x @ w1)
    s = jax.nn.softmax(h * 2.0, axis=-1)
    return (s @ w2).sum(axis=0), h


def helper(t):
    return t.reshape(8, 4, 32).transpose(1, 0, 2)


def with_helper(x, w):
    y = helper(x @ w)
    return jnp.exp(y).sum()


def args(seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((32, 64), dtype=np.float32), rng.standard_normal((64, 64), dtype=np.float32) / 8,
            rng.standard_normal((64, 16), dtype=np.float32))


def run_piece(text: str, inputs):
    from jax import export

    fn = load_stablehlo(text)
    return export.deserialize(bytearray(fn.serialized)).call(*inputs)


def evaluate(split, inputs):
    values = dict(zip(split.args, inputs))
    for piece in split.pieces:
        outs = run_piece(piece.text, [values[v] for v in piece.inputs])
        values.update(zip(piece.outputs, [np.asarray(o) for o in outs]))
    return [values[v] for v in split.results]


def test_pieces_follow_the_source_lines_and_compose_to_the_function():
    exported, _ = export_function(jax.jit(layer), args(), {}, ())
    split = split_module(exported.stablehlo_text)
    lines = [p.label for p in split.pieces]
    assert len(split.pieces) == 3 and all(label.startswith("test_isolate.py:") for label in lines)
    assert len(set(lines)) == 3  # the three lines of `layer`, in order
    assert [int(label.split(":")[1]) for label in lines] == sorted(int(label.split(":")[1]) for label in lines)
    assert any("dot_general" in op for op in split.pieces[0].ops) and "stablehlo.exponential" in split.pieces[1].ops
    got = evaluate(split, args())
    want = [np.asarray(x) for x in jax.jit(layer)(*args())]
    assert len(got) == len(want) == 2
    for g, w in zip(got, want):
        assert check_leaf(w, g)["ok"]


def test_a_helper_goes_with_the_line_that_called_it_and_constants_are_copied():
    x, w, _ = args()
    exported, _ = export_function(jax.jit(with_helper), (x, w[:, :32]), {}, ())
    split = split_module(exported.stablehlo_text)
    assert len(split.pieces) == 2
    assert {"stablehlo.reshape", "stablehlo.transpose"} <= set(split.pieces[0].ops)  # helper's ops, line `y = ...`
    assert "stablehlo.constant" in split.pieces[1].text  # the reduction's init value, copied in
    assert check_leaf(np.asarray(jax.jit(with_helper)(x, w[:, :32])), evaluate(split, [x, w[:, :32]])[0])["ok"]


def test_without_source_locations_each_op_that_works_starts_a_piece():
    exported, _ = export_function(jax.jit(layer), args(), {}, ())
    import re

    bare = re.sub(r"loc\([^()]*(?:\([^()]*(?:\([^()]*\))*[^()]*\))*[^()]*\)", "", exported.stablehlo_text)
    bare = "\n".join(line for line in bare.splitlines() if not line.startswith("#loc"))
    split = split_module(bare)
    heavy = [p for p in split.pieces if p.ops[0] in ("stablehlo.dot_general", "stablehlo.reduce")]
    assert len(heavy) == len(split.pieces) >= 3 and all(":" not in p.label.split(" at ")[0] for p in split.pieces)
    assert split_module(bare, max_pieces=2).pieces.__len__() == 2
    got = evaluate(split, args())
    assert check_leaf(np.asarray(jax.jit(layer)(*args())[0]), got[0])["ok"]


@pytest.mark.parametrize("program", ["while", "scan", "cond"])
def test_a_program_with_control_flow_and_scalars_splits_into_pieces_that_compose(program):
    """A loop or cond goes whole into the piece of its line; its body's uses of the function's values (the loop
    bound, `y`, the scalar `lr`) become inputs of that piece, so every piece parses and the pieces compose."""
    import loop_programs  # examples/, on the path by conftest.py

    fn, inputs = getattr(loop_programs, f"{program}_program")("bf16")
    exported, _ = export_function(jax.jit(fn), inputs, {}, ())
    split = split_module(exported.stablehlo_text)
    holder = {"while": "stablehlo.while", "scan": "stablehlo.while", "cond": "stablehlo.case"}[program]
    assert len(split.pieces) >= 2 and any(holder in piece.ops for piece in split.pieces)
    got = evaluate(split, [np.asarray(x) for x in inputs])
    want = jax.tree_util.tree_leaves(jax.jit(fn)(*inputs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert check_leaf(np.asarray(w), g)["ok"]


def test_what_cannot_be_split_says_why():
    exported, _ = export_function(jax.jit(lambda x: x @ x), (np.ones((4, 4), np.float32),), {}, ())
    with pytest.raises(UsageError, match="nothing to split"):
        split_module(exported.stablehlo_text)
    from reprobundle.investigate.minimize.pieces import Piece, _piece_function

    broken = Piece(1, "model.py:3", "module { %0 = stablehlo.sine %x }", ["%x"], ["%0"], ["stablehlo.sine"])
    with pytest.raises(UsageError, match=r"piece 2 \(model.py:3: stablehlo.sine\) of the split does not parse: "
                                         r"not a StableHLO module .*: MLIRError: .+") as caught:
        _piece_function(broken)
    assert "reprobundle export" in caught.value.hint and "stablehlo dialect" not in caught.value.hint


@pytest.mark.slow
def test_isolate_times_the_pieces_and_packs_the_one_that_moved(store_dir):
    """The whole flow on the installed JAX twice (deterministic: what is produced, not what is measured)."""
    reprobundle.pack(jax.jit(layer), *args(), name="layer", store=str(store_dir), warmup=1, repeat=3, dump=False,
                     profile=False)
    code, out, err = cli("isolate", "layer", "--jax", "installed", "--jax", "installed", "--pieces", "2",
                         "--max-time", "1", "--repeat", "24", "--json", store=store_dir)
    assert code == 0, err
    data = json.loads(out)
    assert len(data["pieces"]) == 2 and all(p["statuses"] == ["ok", "ok"] for p in data["pieces"])
    # timed together: --max-time 1 s is past once the first round (always run) ends, so no second round starts; a
    # piece that could not hold the largest move after it is said so
    for p in data["pieces"]:
        assert p["rounds"] == 1 and p["ruled_out_after"] in (None, 1) and not p["settled"], p
    moved = data["moved"]
    rank = sorted(data["pieces"], key=lambda p: (p["verdict"] in ("slower", "faster"), abs(p["delta_ns"])))
    assert moved["index"] == rank[-1]["index"]
    assert data["packed"] == f"layer-piece-{moved['index']}@1" and "packed as" in data["summary"]
    registry = Registry.open(store_dir)
    piece = registry.resolve(data["packed"]).manifest
    assert piece["parent"] == "layer@1" and piece["labels"]["piece"] == moved["label"]
    assert piece["function"]["kind"] == "stablehlo" and piece["reference"]["outputs"]


def test_the_report_names_the_moved_piece_and_says_which_were_ruled_out():
    from reprobundle.investigate.minimize.pieces import Isolation, Piece, PieceResult
    from reprobundle.render.isolate import isolation_data, isolation_text

    def result(i, label, base_ns, verdict, ruled_out=None):
        piece = Piece(index=i, label=label, text="", inputs=["%a"], outputs=["%b"], ops=["stablehlo.add"])
        runs = [{"status": "ok"}, {"status": "ok"}]
        return PieceResult(piece, f"piece-{i + 1}@1", runs=runs, verdict=verdict, base_ns=base_ns,
                           cand_ns=base_ns * verdict["ratio"], ruled_out=ruled_out)

    moved = result(1, "model.py:12", 30e6, {"verdict": "slower", "ratio": 2.0, "ci95": [1.8, 2.2], "settled": True,
                                            "rounds": 3})
    pieces = [result(0, "model.py:11", 40e6, {"verdict": "unknown", "ratio": 1.01, "ci95": None, "settled": False,
                                              "rounds": 1}, ruled_out=1),
              moved,
              result(2, "model.py:13", 20e6, {"verdict": "same", "ratio": 0.99, "ci95": [0.9, 1.1], "settled": False,
                                              "rounds": 3}, ruled_out=3)]
    iso = Isolation("model@1", ("0.7.2", "0.8.0"), "main", pieces, moved, "model-piece-2@1")
    text = isolation_text(iso)
    rows = {line.split()[0]: line for line in text.splitlines() if line[:1].isdigit()}
    assert rows["1"].endswith("ruled out after 1 round") and rows["3"].endswith("ruled out after 3 rounds")
    assert rows["2"].endswith("slower") and "ruled out: " in text
    assert "2 *" in text and "piece 2 (model.py:12) moved most" in text and "+30.000 ms" in text
    assert "packed as model-piece-2@1" in text and "3 paired rounds" in text
    data = isolation_data(iso)
    assert [p["ruled_out_after"] for p in data["pieces"]] == [1, None, 3] and data["moved"]["index"] == 2
