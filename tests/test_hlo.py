"""reprobundle.analysis.hlo_parse and hlo_diff on real optimized HLO (tests/data/hlo, see its README) and on HLO
compiled at test time; the instruction kinds they share with the worker (worker/hlo_kind.py)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reprobundle.analysis import hlo_diff, hlo_parse
from reprobundle.worker import hlo_kind
from reprobundle.worker.trace import parse_hlo_instructions

DATA = Path(__file__).parent / "data" / "hlo"
HLO_FILES = sorted(DATA.glob("*.hlo"))
VERSIONS = ("0.4.30", "0.7.2", "0.8.0", "0.10.2")


def text(name: str) -> str:
    return (DATA / name).read_text()


def per_op(version: str) -> list[dict]:
    return json.loads((DATA / f"attention-{version}.per_op.json").read_text())["per_op"]


def test_fixtures_present():
    names = {p.name for p in HLO_FILES}
    for v in VERSIONS:
        assert {f"attention-{v}.hlo", f"control-{v}.hlo"} <= names
    assert any(n.startswith("async-") for n in names)


# ------------------------------------------------------------------------------------------------ parser


@pytest.mark.parametrize("path", HLO_FILES, ids=lambda p: p.name)
def test_parses_every_line_of_real_hlo(path):
    module = hlo_parse.parse_hlo(path.read_text())
    assert module.skipped == 0
    assert module.entry is not None and module.entry.is_entry
    assert module.name
    for comp in module.computations.values():
        assert comp.instructions, comp.name
        assert sum(i.is_root for i in comp.instructions) == 1, comp.name


@pytest.mark.parametrize("path", HLO_FILES, ids=lambda p: p.name)
def test_operands_and_callees_resolve(path):
    """Every operand names an instruction of the same computation; every callee is a computation."""
    module = hlo_parse.parse_hlo(path.read_text())
    for comp in module.computations.values():
        names = {i.name for i in comp.instructions}
        for instr in comp.instructions:
            assert set(instr.operands) <= names, (comp.name, instr.name, instr.operands)
            assert set(instr.called()) <= set(module.computations), (instr.name, instr.called())


@pytest.mark.parametrize("path", HLO_FILES, ids=lambda p: p.name)
def test_shapes_and_layouts(path):
    module = hlo_parse.parse_hlo(path.read_text())
    for comp in module.computations.values():
        for instr in comp.instructions:
            assert re.fullmatch(r"\(.*\)|[a-z0-9]+\[[^\]]*\](\{[^}]*\})?", instr.shape), instr.shape
            assert "{" not in hlo_parse.strip_layout(instr.shape)


def test_tuple_shapes_typed_operands_and_custom_calls_0_4_30():
    module = hlo_parse.parse_hlo(text("attention-0.4.30.hlo"))
    _, cc = module.find("custom-call.2.clone")
    assert cc.shape.startswith("(f32[2048,512]{1,0}, u8[0]{0})")
    assert cc.op_key == "custom-call(__onednn$matmul)"
    assert cc.operands == ["bitcast", "Arg_2.3"]  # printed as `f32[2048,512]{1,0} %bitcast`
    assert '"onednn_matmul_config"' in cc.attrs["backend_config"]
    assert hlo_parse.strip_layout(cc.shape) == "(f32[2048,512], u8[0])"


def test_attributes_metadata_and_backend_config():
    module = hlo_parse.parse_hlo(text("attention-0.7.2.hlo"))
    _, fusion = module.find("transpose_copy_fusion")
    assert fusion.is_fusion and fusion.fusion_kind == "kLoop"
    assert fusion.attrs["backend_config"] == '{"outer_dimension_partitions":["2"]}'
    assert fusion.op_name == "jit(attention)/transpose"
    assert fusion.source == "attention.py:21"
    _, dot = module.find("dot_general.9")
    assert dot.attrs["lhs_batch_dims"] == "{0,1}" and dot.source == "attention.py:24"


def test_stack_frame_sources_0_10_2():
    """Newer printers put file/line in FileNames/FileLocations/StackFrames tables, referenced by stack_frame_id."""
    module = hlo_parse.parse_hlo(text("attention-0.10.2.hlo"))
    assert "stack_frame_id=" in text("attention-0.10.2.hlo")
    _, fusion = module.find("ynn_fusion.1")
    assert fusion.fusion_kind == "kCustom:__ynn_fusion"
    assert fusion.source == "attention.py:26"
    _, copy = module.find("copy_bitcast_fusion")
    assert copy.source == "attention.py:27"


def test_while_and_conditional_bodies_are_walked():
    for v in VERSIONS:
        module = hlo_parse.parse_hlo(text(f"control-{v}.hlo"))
        control = [c.name for c in module.control_computations()]
        assert control[0] == module.entry_name
        whiles = [i for c in module.computations.values() for i in c.instructions if i.opcode == "while"]
        conds = [i for c in module.computations.values() for i in c.instructions if i.opcode == "conditional"]
        assert whiles and conds
        for instr in whiles + conds:
            assert set(instr.called(("condition", "body", "branch_computations"))) <= set(control)
        summary = hlo_diff.fusion_summary(module)
        inside = {n["computation"] for n in summary["fusions"] + summary["unfused"]}
        assert inside - {module.entry_name}, "nothing reported from loop or branch bodies"


def test_calls_are_walked_0_4_30():
    module = hlo_parse.parse_hlo(text("attention-0.4.30.hlo"))
    summary = hlo_diff.fusion_summary(module)
    assert any(n["computation"].startswith("parallel_fusion") for n in summary["fusions"])
    assert "call" not in summary["unfused_counts"]


@pytest.mark.parametrize("path", sorted(DATA.glob("async-*.hlo")), ids=lambda p: p.name)
def test_async_pairs(path):
    module = hlo_parse.parse_hlo(path.read_text())
    ops = [i.opcode for i in module.entry.instructions]
    assert {"all-reduce-start", "all-reduce-done", "copy-start", "copy-done", "fusion-start", "fusion-done"} <= set(ops)
    _, copy_start = module.find("cs")
    assert copy_start.shape == "(f32[8,8]{1,0}, f32[8,8]{1,0}, u32[])"
    summary = hlo_diff.fusion_summary(module)
    assert [(f["name"], f["kind"], f["label"]) for f in summary["fusions"]] == [("as", "kLoop", "tanh+multiply")]
    assert "all-reduce-start" in summary["unfused_counts"]


def test_parse_instruction_edge_cases():
    i = hlo_parse.parse_instruction(
        '  ROOT %t = (f32[], token[]) tuple(%a, %b), sharding={{replicated}, {maximal device=0}}')
    assert i.is_root and i.operands == ["a", "b"] and i.shape == "(f32[], token[])"
    i = hlo_parse.parse_instruction('%c = f32[3]{0} constant({1, 2, 3}), metadata={op_name="a, b}" source_line=3}')
    assert i.literal == "{1, 2, 3}" and i.operands == [] and i.op_name == "a, b}"
    i = hlo_parse.parse_instruction(
        '%cc = f32[2]{0} custom-call(%x), custom_call_target="foo", backend_config="{\\"a\\": \\"}\\"}"')
    assert i.op_key == "custom-call(foo)" and i.attrs["backend_config"].startswith('"{')
    i = hlo_parse.parse_instruction("%d = f32[<=8,2]{1,0} parameter(0)")
    assert i.shape == "f32[<=8,2]{1,0}" and i.literal == "0"
    i = hlo_parse.parse_instruction('%f = bf16[8,8]{1,0} fusion(%a), kind=kCustom, calls=%c, '
                                    'backend_config={"fusion_backend_config":{"kind":"__triton_gemm","cfg":{"m":"16"}}}')
    assert i.fusion_kind == "kCustom:__triton_gemm"  # the GPU spelling of a custom fusion's kind
    assert hlo_parse.parse_instruction("this is not HLO") is None
    assert hlo_parse.parse_instruction("%x = ") is None


# ------------------------------------------------------------------------------------------------ instruction kinds


@pytest.mark.parametrize("path", HLO_FILES, ids=lambda p: p.name)
def test_the_worker_and_the_parser_agree_on_every_instruction_kind(path):
    """One definition (worker/hlo_kind.py): the worker's line scan and the parser name every instruction alike."""
    worker = parse_hlo_instructions(path.read_text())
    module = hlo_parse.parse_hlo(path.read_text())
    parsed = {i.name: i for c in module.computations.values() for i in c.instructions}
    assert set(worker) == set(parsed)
    assert {n: w["kind"] for n, w in worker.items()} == {n: i.kind for n, i in parsed.items()}
    assert {n: w["op_name"] for n, w in worker.items()} == {n: i.op_name or None for n, i in parsed.items()}


def test_instruction_kinds():
    assert hlo_kind.instruction_kind("dot") == "dot"
    assert hlo_kind.instruction_kind("custom-call", custom_call_target='"__onednn$matmul"') == \
        "custom-call(__onednn$matmul)"
    assert hlo_kind.instruction_kind("fusion", "kLoop", '{"fusion_config":{"kind":"__ynn_fusion"}}') == \
        "fusion(kLoop)"  # only a kCustom fusion carries its backend kind
    assert hlo_kind.instruction_kind("fusion", "kCustom", '{"fusion_config":{"kind":"__ynn_fusion"}}') == \
        "fusion(kCustom:__ynn_fusion)"
    assert hlo_kind.instruction_kind("fusion") == "fusion(?)"
    assert hlo_kind.instruction_kind("fusion-start", "kLoop") == "fusion-start(kLoop)"
    gpu = ('%f = bf16[8,8]{1,0} fusion(%a), kind=kCustom, calls=%c, '
           'backend_config={"fusion_backend_config":{"kind":"__triton_gemm","cfg":{"m":"16"}}}')
    assert parse_hlo_instructions(gpu)["f"]["kind"] == hlo_parse.parse_instruction(gpu).kind == \
        "fusion(kCustom:__triton_gemm)"
    _, start = hlo_parse.parse_hlo(text("async-0.8.0.hlo")).find("as")
    assert start.kind == "fusion-start(kLoop)" and start.fusion_kind == "kLoop"


@pytest.mark.parametrize("version", [v for v in VERSIONS if per_op(v)])
def test_per_op_fixtures_carry_the_workers_kinds(version):
    """make_fixtures.py reduces traces with the worker's per_op_from_trace: the tables name kinds as run records do."""
    kinds = parse_hlo_instructions(text(f"attention-{version}.hlo"))
    for row in per_op(version):
        assert row["kind"] == kinds[row["name"]]["kind"] and row["op_name"] == kinds[row["name"]]["op_name"]


def test_never_crashes_on_junk():
    for junk in ("", None, "}", "{", "ENTRY {", "HloModule", "\x00\x01 %a = (((", "%a = f32[ add(", "ROOT"):
        module = hlo_parse.parse_hlo(junk)
        hlo_diff.fusion_summary(module)
        hlo_diff.fusion_diff(junk, junk)
        hlo_diff.per_op_diff([], [{"name": "x", "kind": "", "time_ns": 1.0, "count": 1}], junk, junk)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_never_crashes_on_mangled_real_hlo(data):
    """Cut, drop and duplicate lines and characters of real HLO: parsing and diffing keep going."""
    path = data.draw(st.sampled_from(HLO_FILES))
    lines = path.read_text().splitlines()
    for _ in range(data.draw(st.integers(0, 6))):
        k = data.draw(st.integers(0, len(lines) - 1))
        line = lines[k]
        cut = data.draw(st.integers(0, len(line)))
        action = data.draw(st.sampled_from(["truncate", "drop", "dup", "splice"]))
        if action == "truncate":
            lines[k] = line[:cut]
        elif action == "drop":
            del lines[k]
        elif action == "dup":
            lines.insert(k, line)
        else:
            lines[k] = line[:cut] + data.draw(st.sampled_from(["{", "}", "(", ")", '"', "%", "=", ","])) + line[cut:]
    mangled = "\n".join(lines)
    hlo_diff.fusion_summary(mangled)
    hlo_diff.fusion_diff(path.read_text(), mangled)


# ------------------------------------------------------------------------------------------------ summary


def test_fusion_summary_attention_per_version():
    s = {v: hlo_diff.fusion_summary(text(f"attention-{v}.hlo")) for v in VERSIONS}
    assert s["0.7.2"]["fusion_counts"] == {"kLoop": 7}
    assert s["0.7.2"]["unfused_counts"] == {"dot": 6, "reduce": 2, "reduce-window": 2}
    assert s["0.8.0"]["fusion_counts"] == {"kLoop": 11}
    assert s["0.8.0"]["unfused_counts"] == {"dot": 6}
    assert s["0.10.2"]["fusion_counts"]["kCustom:__ynn_fusion"] >= 1
    assert set(s["0.4.30"]["unfused_counts"]) == {"custom-call(__onednn$matmul)", "custom-call(__onednn$softmax)"}
    transposes = [f for f in s["0.7.2"]["fusions"] if f["label"] == "transpose+copy"]
    assert len(transposes) == 4
    assert {f["shape"] for f in transposes} == {"f32[4,8,512,64]", "f32[2048,512]"}
    assert transposes[0]["ops"] == {"bitcast": 1, "transpose": 1, "copy": 1}


# ------------------------------------------------------------------------------------------------ fusion diff


def test_fusion_diff_0_7_2_to_0_8_0_wraps_the_softmax_reductions():
    d = hlo_diff.fusion_diff(text("attention-0.7.2.hlo"), text("attention-0.8.0.hlo"))
    assert (d["base"]["fusions"], d["cand"]["fusions"]) == (7, 11)
    wrapped = sorted((e["base"], e["cand"], e["label"]) for e in d["refused"])
    assert wrapped == [("reduce-window", "wrapped_reduce-window", "reduce-window"),
                       ("reduce-window.1", "wrapped_reduce-window.1", "reduce-window"),
                       ("reduce_max.7", "wrapped_reduce", "reduce"),
                       ("reduce_sum.7", "wrapped_reduce.1", "reduce")]
    assert {e["how"] for e in d["refused"]} == {"wrapped"}
    assert len(d["unchanged"]) == 13  # 7 fusions and 6 dots
    for key in ("changed", "merged", "split", "appeared", "disappeared", "unfused_only_base", "unfused_only_cand"):
        assert d[key] == [], key
    assert sorted((m["op"], m["change"]) for m in d["moves"]) == [("reduce", "entered")] * 2 + [("reduce-window", "entered")] * 2
    assert "wrapped into fusions: reduce-window×2, reduce×2" in d["summary"]
    back = hlo_diff.fusion_diff(text("attention-0.8.0.hlo"), text("attention-0.7.2.hlo"))
    assert {e["how"] for e in back["refused"]} == {"unwrapped"} and len(back["refused"]) == 4


def test_fusion_diff_0_8_0_to_0_10_2_merges_softmax_into_one_ynn_fusion():
    d = hlo_diff.fusion_diff(text("attention-0.8.0.hlo"), text("attention-0.10.2.hlo"))
    (merged,) = d["merged"]
    assert merged["kind"] == "kCustom:__ynn_fusion"
    absorbed = {x["name"] for x in merged["absorbed"]}
    assert {"dot_general.9", "dot_general.10", "subtract_exponential_fusion", "broadcast_divide_fusion"} <= absorbed
    assert {e["how"] for e in d["refused"]} == {"wrapped"}  # the four projections: dot -> ynn_fusion
    assert sorted(e["label"] for e in d["refused"]) == ["dot"] * 4
    assert [e["label"] for e in d["disappeared"]] == ["reduce-window", "reduce-window"]
    assert any(m["fusion"] == merged["name"] and m["op"] == "exponential" for m in d["moves"])


def test_fusion_diff_of_same_structure_is_identical():
    for path in HLO_FILES:
        d = hlo_diff.fusion_diff(path.read_text(), path.read_text())
        assert d["identical"] and d["summary"].startswith("same fusion structure"), path.name
    assert hlo_diff.fusion_diff(text("control-0.4.30.hlo"), text("control-0.7.2.hlo"))["identical"]


def _renamed(hlo_text: str) -> str:
    """The same module with every instruction and computation renamed (as XLA renumbers between releases)."""
    module = hlo_parse.parse_hlo(hlo_text)
    names = {i.name for c in module.computations.values() for i in c.instructions} | set(module.computations)
    mapping = {n: f"n{k}_{n.split('.')[0][::-1]}" for k, n in enumerate(sorted(names))}
    return re.sub(r"%([\w.\-]+)", lambda m: "%" + mapping.get(m.group(1), m.group(1)), hlo_text)


def test_fusion_diff_matches_by_structure_not_names():
    original = text("attention-0.8.0.hlo")
    renamed = _renamed(original)
    assert "transpose_copy_fusion" not in renamed
    d = hlo_diff.fusion_diff(original, renamed)
    assert d["identical"] and len(d["unchanged"]) == 17  # 11 fusions and 6 dots
    assert all(e["base"] != e["cand"] for e in d["unchanged"])


def test_fusion_diff_reports_ops_entering_a_fusion():
    """A real change of contents: 0.7.2 -> 0.10.2 of the control function (multiply_add_fusion is shared)."""
    d = hlo_diff.fusion_diff(text("control-0.7.2.hlo"), text("control-0.10.2.hlo"))
    entered = Counter(m["op"] for m in d["moves"] if m["change"] == "entered")
    assert entered["dot"] == 2 and entered["exponential"] == 1 and entered["sine"] == 1
    assert d["base"]["fusions"] < d["cand"]["fusions"]


# ------------------------------------------------------------------------------------------------ per-op diff


def _check_rows_cover(rows, base, cand):
    """Every profiled op is in exactly one row (a row may also name its unprofiled HLO counterpart)."""
    base_names = [n for r in rows if r["base_name"] for n in r["base_name"].split(" + ")]
    cand_names = [n for r in rows if r["cand_name"] for n in r["cand_name"].split(" + ")]
    for names, profiled in ((base_names, base), (cand_names, cand)):
        assert len(names) == len(set(names))
        assert {r["name"] for r in profiled} <= set(names)
    deltas = [abs(r["delta_ns"]) for r in rows]
    assert deltas == sorted(deltas, reverse=True)


def test_per_op_diff_real_profiles_0_7_2_to_0_8_0():
    base, cand = per_op("0.7.2"), per_op("0.8.0")
    rows = hlo_diff.per_op_diff(base, cand, text("attention-0.7.2.hlo"), text("attention-0.8.0.hlo"))
    _check_rows_cover(rows, base, cand)
    by_base = {r["base_name"]: r for r in rows}
    assert by_base["dot_general.9"]["cand_name"] == "dot_general.9" and by_base["dot_general.9"]["match"] == "name"
    assert by_base["reduce_max.7"]["cand_name"] == "wrapped_reduce"
    assert by_base["reduce_max.7"]["match"] == "wrapped"
    assert by_base["transpose_copy_fusion"]["signature"] == "transpose+copy"
    for r in rows:
        assert r["delta_ns"] == pytest.approx((r["cand_ns"] or 0) - (r["base_ns"] or 0))
        if r["base_ns"] and r["cand_ns"] is not None:
            assert r["ratio"] == pytest.approx(r["cand_ns"] / r["base_ns"])


@pytest.mark.parametrize("pair", [("0.7.2", "0.8.0"), ("0.8.0", "0.10.2"), ("0.8.0", "0.7.2")])
def test_per_op_diff_pairs_ops_as_the_fusion_diff_does(pair):
    """Recorded HLO and profiles: every pair of ops the fusion diff names is the pair the per-op rows name, whatever
    the order of the profile's rows (0.7.2's `reduce-window` is 0.8.0's `wrapped_reduce-window`, which reads the same
    `broadcast_multiply_fusion`; the profile lists `wrapped_reduce-window.1` first)."""
    a, b = pair
    base_hlo, cand_hlo = text(f"attention-{a}.hlo"), text(f"attention-{b}.hlo")
    fusion = hlo_diff.fusion_diff(base_hlo, cand_hlo)
    fused_pairs = {e["base"]: e["cand"] for key in ("unchanged", "refused", "changed") for e in fusion[key]}
    for base, cand in ((per_op(a), per_op(b)), (per_op(a)[::-1], per_op(b)[::-1])):
        rows = hlo_diff.per_op_diff(base, cand, base_hlo, cand_hlo)
        paired = {r["base_name"]: r["cand_name"] for r in rows if r["base_name"] and r["cand_name"]
                  and " + " not in r["base_name"] + r["cand_name"]}
        assert paired and all(fused_pairs[k] == v for k, v in paired.items()), (paired, fused_pairs)
    if pair == ("0.7.2", "0.8.0"):
        assert paired["reduce-window"] == "wrapped_reduce-window"
        assert paired["reduce-window.1"] == "wrapped_reduce-window.1"
        base_mod, cand_mod = hlo_parse.parse_hlo(base_hlo), hlo_parse.parse_hlo(cand_hlo)
        for k, v in paired.items():  # paired ops read the same thing (or what was paired with it)
            ops_b, ops_c = base_mod.find(k)[1].operands, cand_mod.find(v)[1].operands
            assert [paired.get(o, o) for o in ops_b if not o.startswith("constant")] == \
                [o for o in ops_c if not o.startswith("constant")], (k, v)


def test_per_op_diff_real_profiles_0_8_0_to_0_10_2_sums_a_merge():
    base, cand = per_op("0.8.0"), per_op("0.10.2")
    rows = hlo_diff.per_op_diff(base, cand, text("attention-0.8.0.hlo"), text("attention-0.10.2.hlo"))
    _check_rows_cover(rows, base, cand)
    (merged,) = [r for r in rows if r["match"] == "merged"]
    parts = merged["base_name"].split(" + ")
    assert "dot_general.9" in parts and merged["cand_name"] == "ynn_fusion.1"
    times = {r["name"]: r["time_ns"] for r in base}
    assert merged["base_ns"] == pytest.approx(sum(times[p] for p in parts))
    assert merged["kind"] == "fusion(kCustom:__ynn_fusion)"  # the worker's kind of ynn_fusion.1


def test_per_op_diff_kind_without_a_profiled_kind_is_the_workers():
    """A row without a kind (an older record) gets the kind the worker would have written, from the HLO."""
    base = [dict(r, kind="") for r in per_op("0.7.2")]
    h = text("attention-0.7.2.hlo")
    rows = {r["base_name"]: r for r in hlo_diff.per_op_diff(base, base, h, h)}
    assert rows["dot_general.9"]["kind"] == "dot" and rows["transpose_copy_fusion"]["kind"] == "fusion(kLoop)"
    rows = hlo_diff.per_op_diff([{"name": "x", "kind": "", "time_ns": 1.0, "count": 1}], [], None, None)
    assert rows[0]["kind"] == "unknown"


def test_per_op_diff_names_the_slowed_fusion():
    """Same HLO and profile, one fusion made 20x slower in the candidate: it heads the list."""
    base = per_op("0.8.0")
    cand = [dict(r, time_ns=r["time_ns"] * (20 if r["name"] == "subtract_exponential_fusion" else 1)) for r in base]
    h = text("attention-0.8.0.hlo")
    rows = hlo_diff.per_op_diff(base, cand, h, h)
    assert rows[0]["cand_name"] == "subtract_exponential_fusion" and rows[0]["ratio"] == pytest.approx(20)
    assert rows[0]["signature"] == "broadcast×2+multiply+subtract+exponential"
    assert all(r["delta_ns"] == 0 for r in rows[1:])


def test_per_op_diff_renamed_and_one_sided_rows():
    h = text("attention-0.8.0.hlo")
    renamed = _renamed(h)
    base = per_op("0.8.0")
    m = hlo_diff.match_nodes(hlo_diff.top_level_nodes(h), hlo_diff.top_level_nodes(renamed))
    old_to_new = {b.name: c.name for b, c, _ in m.pairs}
    cand = [dict(r, name=old_to_new[r["name"]]) for r in base if r["name"] in old_to_new]
    cand.append({"name": "not-in-hlo", "kind": "", "time_ns": 5.0, "count": 1})
    rows = hlo_diff.per_op_diff(base + [{"name": "gone-op", "kind": "", "time_ns": 7.0, "count": 1}], cand, h, renamed)
    matched = [r for r in rows if r["base_name"] and r["cand_name"]]
    assert all(r["delta_ns"] == 0 for r in matched) and len(matched) == len(base)
    one_sided = {(r["base_name"], r["cand_name"], r["match"]) for r in rows if not (r["base_name"] and r["cand_name"])}
    assert one_sided == {("gone-op", None, "base only"), (None, "not-in-hlo", "cand only")}


def test_per_op_diff_without_hlo_matches_by_name():
    base = [{"name": "a", "kind": "dot", "time_ns": 10.0, "count": 1}, {"name": "b", "kind": "", "time_ns": 4.0, "count": 1}]
    cand = [{"name": "a", "kind": "dot", "time_ns": 30.0, "count": 1}, {"name": "a", "kind": "dot", "time_ns": 1.0, "count": 1}]
    rows = hlo_diff.per_op_diff(base, cand, None, "")
    assert [(r["base_name"], r["cand_name"], r["delta_ns"]) for r in rows] == [("a", "a", 21.0), ("b", None, -4.0)]


# ------------------------------------------------------------------------------------------------ live JAX


def _compiled_text(fn, *args) -> str:
    jax = pytest.importorskip("jax")
    return jax.jit(fn).lower(*args).compile().as_text()


def test_installed_jax_hlo_parses_and_summarizes():
    jax = pytest.importorskip("jax")
    import jax.numpy as jnp
    from jax import lax

    x = jnp.ones((32, 32), jnp.float32)

    def f(p, x):
        y = lax.fori_loop(0, 2, lambda i, c: jnp.tanh(c @ c) + 1.0, x)
        z = lax.cond(p > 0, jnp.sin, jnp.cos, y)
        return jax.nn.softmax(z, axis=-1), z.sum()

    t = _compiled_text(f, jnp.float32(1), x)
    module = hlo_parse.parse_hlo(t)
    assert module.skipped == 0 and module.entry is not None
    for comp in module.computations.values():
        names = {i.name for i in comp.instructions}
        for instr in comp.instructions:
            assert set(instr.operands) <= names
    summary = hlo_diff.fusion_summary(module)
    assert summary["n_fusions"] >= 1
    assert len(summary["control_computations"]) >= 4  # entry, while cond and body, two branches
    assert hlo_diff.fusion_diff(t, t)["identical"]


def test_installed_jax_attention_against_fixtures():
    jax = pytest.importorskip("jax")
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1] / "examples"))
    import attention

    _, args = attention.make()
    live = _compiled_text(attention.attention, *args)
    fixture = DATA / f"attention-{jax.__version__}.hlo"
    if fixture.exists():
        assert hlo_diff.fusion_diff(fixture.read_text(), live)["identical"]
    d = hlo_diff.fusion_diff(text("attention-0.7.2.hlo"), live)
    assert d["base"]["fusions"] == 7 and d["cand"]["fusions"] == hlo_diff.fusion_summary(live)["n_fusions"]


def test_median_per_op_over_profiles():
    from reprobundle.analysis.hlo_diff import median_per_op

    tables = [[{"name": "dot.1", "kind": "dot", "time_ns": 100.0, "count": 1},
               {"name": "fusion.2", "kind": "fusion(kLoop)", "time_ns": 50.0, "count": 2}],
              [{"name": "dot.1", "kind": "dot", "time_ns": 400.0, "count": 1},  # a noisy profile
               {"name": "fusion.2", "kind": "fusion(kLoop)", "time_ns": 52.0, "count": 2}],
              [{"name": "dot.1", "kind": "dot", "time_ns": 110.0, "count": 1}]]  # fusion.2 missing here
    merged = median_per_op(tables)
    assert merged == [{"name": "dot.1", "kind": "dot", "time_ns": 110.0, "count": 1},
                      {"name": "fusion.2", "kind": "fusion(kLoop)", "time_ns": 51.0, "count": 2}]


def test_one_text_is_parsed_once_and_its_module_shared():
    """A comparison parses a release's HLO again in every comparison it is part of: the same text (or its bytes)
    gives the one module parsed the first time; another text its own."""
    first, second = (p.read_text() for p in HLO_FILES[:2])
    module = hlo_parse.parse_hlo(first)
    assert hlo_parse.parse_hlo(first) is module and hlo_parse.parse_hlo(first.encode()) is module
    assert hlo_parse.parse_hlo(second) is not module and hlo_parse.parse_hlo(second).computations
