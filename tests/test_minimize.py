"""Minimize (investigate/minimize/reduction.py): ddmin over a function's StableHLO ops, each candidate a module of its own
fed with the real values the function computes there, judged on two contenders' long-lived workers.

The reduction is tested on text first (no replays: the cuts are run by this process's jax); the end-to-end cases
use one release with and without an XLA flag that changes one spot of a program (examples/minimize_chain.py),
so the difference is real on every machine."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import jax
import loop_programs  # examples/, on the path by conftest.py
import minimize_chain
import numpy as np
import pytest

from reprobundle.capture.export import export_function, function_ops, load_stablehlo
from reprobundle.investigate.minimize.fed_values import all_values_cut
from reprobundle.investigate.minimize.hlo_cut import graph_of
from reprobundle.investigate.minimize.reduction import Search, candidate
from reprobundle.investigate.minimize.worker_outcomes import error_kind

STEPS = 36  # ~6 StableHLO ops a step: a program of more than 200 ops


def run_here(text: str, inputs):
    from jax import export

    fn = load_stablehlo(text)
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)  # a cut may carry 64-bit values from inside (the worker does this)
    try:
        return [np.asarray(o) for o in export.deserialize(bytearray(fn.serialized)).call(*inputs)]
    finally:
        jax.config.update("jax_enable_x64", before)


@pytest.fixture(scope="module")
def chain_graph():
    fn, args = minimize_chain.chain(STEPS, ("rng",))
    exported, leaves = export_function(jax.jit(fn), args)
    graph = graph_of(function_ops(exported.stablehlo_text), "minimize")
    values = dict(zip(graph.args, leaves))
    whole = all_values_cut(graph)
    assert whole is not None
    values.update(zip(whole.outputs, run_here(whole.text, [values[v] for v in whole.inputs])))
    return graph, values, fn, args


def test_ddmin_finds_the_one_minimal_set_and_tests_each_candidate_once():
    calls = []

    def holds(items):
        calls.append(tuple(items))
        return 37 in items and 80 in items

    search = Search(holds)
    found = search.ddmin(list(range(200)))
    assert found == [37, 80]
    assert search.best == [37, 80]
    assert search.tested == len(calls) == len(set(calls))
    assert search.tested < 120  # far fewer than the 2^200 subsets, and fewer than one per item


def test_ddmin_keeps_the_best_so_far_when_stopped():
    from reprobundle.investigate.minimize.reduction import OutOfTime

    search = Search(lambda items: 5 in items, deadline=0.0)  # already past: the first untested candidate stops it
    with pytest.raises(OutOfTime):
        search.ddmin(list(range(64)))
    assert search.best == list(range(64)) and search.tested == 0


def test_the_program_has_more_than_200_ops(chain_graph):
    graph, *_ = chain_graph
    assert len(graph.work) >= 200


def test_any_subset_of_ops_is_a_module_fed_with_the_values_the_function_computes(chain_graph):
    """A candidate's inputs are the real intermediate values; its outputs are what the whole function computes at
    those values (checked here for a middle slice and for scattered ops)."""
    graph, values, fn, args = chain_graph
    work = graph.work
    for members in (work[50:90], work[10:200:7], work[-5:]):
        made = candidate(members, graph, values)
        assert made is not None
        got = run_here(made.cut.text, made.inputs)
        assert len(got) == len(made.cut.outputs) > 0
        for name, value in zip(made.cut.outputs, got):
            np.testing.assert_array_equal(value, values[name])
    last = candidate(work, graph, values)
    assert last is not None
    np.testing.assert_allclose(run_here(last.cut.text, last.inputs)[-1], np.asarray(jax.jit(fn)(*args)), rtol=1e-6)


def test_ddmin_over_the_ops_reduces_to_the_op_that_has_the_property(chain_graph):
    """The property here is read off the candidate's text (it holds the rng op and compiles): the reduction logic
    alone, without contenders."""
    graph, values, *_ = chain_graph

    def holds(members):
        made = candidate(members, graph, values)
        return made is not None and "stablehlo.rng_bit_generator" in made.cut.text and bool(
            run_here(made.cut.text, made.inputs))

    search = Search(holds)
    found = search.ddmin(graph.work)
    assert [graph.ops[i].name for i in found] == ["stablehlo.rng_bit_generator"]
    assert search.tested < 60


class _Failed:
    status = "error"

    def __init__(self, phase, error_type, message):
        self.phase, self.error_type, self.message = phase, error_type, message


def test_error_kind_normalises_names_numbers_and_types():
    a = _Failed("compile", "JaxRuntimeError", "UNIMPLEMENTED: RngBitGenerator %rng.12 of tensor<4096xui32> at 3")
    b = _Failed("compile", "JaxRuntimeError", "UNIMPLEMENTED: RngBitGenerator %rng-bit.5 of tensor<8xui32> at 17\nmore")
    c = _Failed("execute", "JaxRuntimeError", "UNIMPLEMENTED: RngBitGenerator %rng.12 of tensor<4096xui32> at 3")
    assert error_kind(a) == error_kind(b) != error_kind(c)


# ------------------------------------------------------------------------------------------------ end to end


@pytest.fixture(scope="module")
def chain_store(tmp_path_factory):
    """`chain@1`: a program of more than 200 ops with three odd spots (bf16, rng, reduce), each changed by one flag;
    the rng spot is a function of its own (a call)."""
    from quick import PACK

    import reprobundle

    root = tmp_path_factory.mktemp("minimize") / "store"
    fn, args = minimize_chain.chain(STEPS, ("bf16", "rng", "reduce"), nested=("rng",))
    reprobundle.pack(jax.jit(fn), *args, name="chain", store=str(root), **PACK)
    return root


def test_outputs_reduces_to_a_few_ops_that_still_mismatch_on_a_fresh_replay(chain_store, tmp_path):
    import json

    from cli_runner import cli

    report, page = tmp_path / "min.md", tmp_path / "min.html"
    code, out, err = cli("minimize", "chain", "--jax", "installed", "--variant", minimize_chain.EXCESS_PRECISION_OFF,
                         "--outputs", "--json", "--report", report, "--html", page, store=chain_store)
    assert code == 0, err
    data = json.loads(out)
    assert data["ops_before"] >= 200 and 1 <= data["ops_after"] <= 5 and data["stopped"] == "done"
    assert {op["name"] for op in data["ops"]} <= {"stablehlo.convert", "stablehlo.multiply", "stablehlo.add"}
    assert all(op["line"] and op["line"].startswith("minimize_chain.py:") for op in data["ops"])
    assert data["packed"] == "chain-min@1" and data["candidates_tested"] > 1
    check = data["check"]  # the fresh replay: the reference was packed on A, and B mismatches it
    assert check["holds"] and check["worst"]["abs_err"] > check["worst"]["allowed"]
    assert [r["status"] for r in check["runs"]] == ["ok", "mismatch"]
    assert data["stablehlo"] and "loc(" not in data["stablehlo"]  # short: shown inline, without locations
    assert "--variant" in data["reproduce"]["command"] and "chain-min" in data["reproduce"]["command"]
    for text in (report.read_text(), page.read_text()):
        assert "chain-min@1" in text and str(data["ops_before"]) in text and "--variant" in text
    code, out, _ = cli("show", "chain-min", store=chain_store)
    assert code == 0 and "minimized-from=chain@1" in out and "minimized-property=outputs" in out
    assert "minimize_chain.py:" in out  # the kept ops' source lines


def test_error_is_chosen_by_itself_and_reduces_to_the_op_that_fails(chain_store):
    import reprobundle

    result = reprobundle.api.minimize("chain", ["installed"], variants=[minimize_chain.NO_RNG_EXPANDER],
                                      store=str(chain_store), name="chain-error", check=False)
    assert result.property == "error" and "fails" in result.why
    assert [op["name"] for op in result.ops] == ["stablehlo.rng_bit_generator"]
    assert result.levels == 2  # the call kept at the top level, then its callee reduced
    assert result.ops[0]["line"].startswith("minimize_chain.py:")  # inside the call: the call's line
    assert result.piece["kind"] == result.whole["kind"] and "RngBitGenerator" in result.whole["error"]


def test_a_property_the_whole_bundle_does_not_have_is_one_clear_error(chain_store):
    from cli_runner import cli

    code, _, err = cli("minimize", "chain", "--jax", "installed", "--variant", minimize_chain.NO_RNG_EXPANDER,
                       "--outputs", store=chain_store)
    assert code != 0 and "does not have the property outputs" in err and "--error" in err
    assert "Traceback" not in err


def test_max_time_keeps_the_best_piece_so_far_and_leaves_nothing_behind(chain_store, tmp_path, monkeypatch):
    import psutil

    import reprobundle

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp))
    before = {p.pid for p in psutil.Process().children(recursive=True)}  # the servers other tests' fixtures started
    result = reprobundle.api.minimize("chain", ["installed"], variants=[minimize_chain.EXCESS_PRECISION_OFF],
                                      prop="outputs", max_time_s=0.5, name="chain-short", store=str(chain_store),
                                      check=False)
    assert result.stopped == "max-time" and result.ops_after <= result.ops_before
    assert result.packed == "chain-short@1"
    assert [p for p in psutil.Process().children(recursive=True) if p.pid not in before] == []  # no worker left
    assert [p for p in tmp.iterdir()] == []


@pytest.fixture(scope="module")
def short_chain_store(tmp_path_factory):
    """`short@1`: a chain of 10 steps (about 60 ops) with one bfloat16 spot, which EXCESS_PRECISION_OFF changes."""
    from quick import PACK

    import reprobundle

    root = tmp_path_factory.mktemp("short") / "store"
    fn, args = minimize_chain.chain(10, ("bf16",))
    reprobundle.pack(jax.jit(fn), *args, name="short", store=str(root), **PACK)
    return root


def _flag_of(variant: str) -> str:
    return variant.partition(":")[2]


# dying_release's test of a module: its @main returns more than 40 values (the all-values module of `short`, not the
# whole bundle, which returns one, nor a cut of an eighth of its ops)
MANY_RESULTS = ("any(line.split('->')[-1].count('tensor<') > 40 for line in text.splitlines() "
                "if 'func.func public @main' in line)")


def test_intermediate_values_that_kill_the_baselines_worker_come_from_smaller_cuts(short_chain_store, tmp_path):
    """#63: a baseline release whose module worker aborts (LLVM's line, SIGABRT) while loading a module that returns
    more than 40 values. The whole bundle loads on it; the module of all the intermediate values kills the worker,
    and a fresh one; the values come from cuts of an eighth of the function each; minimize ends with the piece at
    the spot the flag changes, as it does on a release that loads everything."""
    from dying_release import dying_release

    import reprobundle

    deaths = tmp_path / "deaths"
    dying = dying_release(tmp_path / "release", f"{MANY_RESULTS} and open({str(deaths)!r}, 'a').write('x') > 0")
    result = reprobundle.api.minimize("short", [str(dying)],
                                      variants=[f"{dying}:{_flag_of(minimize_chain.EXCESS_PRECISION_OFF)}"],
                                      prop="outputs", store=str(short_chain_store), check=False)
    assert deaths.read_text() == "xx"  # the all-values module, then again in a fresh worker; no cut after it
    assert result.stopped == "done" and result.ops_before > 40 and 1 <= result.ops_after <= 5, result
    assert {op["name"] for op in result.ops} <= {"stablehlo.convert", "stablehlo.multiply", "stablehlo.add"}
    assert result.packed == "short-min@1"


def test_a_release_that_cannot_load_a_single_ops_values_ends_minimize_with_the_reason_in_words(short_chain_store,
                                                                                               tmp_path):
    """#63: a baseline release whose module worker aborts loading any cut of the function with a sine in it (the
    whole bundle loads). The all-values module, then the eighth of the function with the first sine, then the sine
    alone kill it, each in a fresh worker too; minimize ends with exit 2 and one message in words: the release, the
    phase, the worker's own last line (LLVM's), the op, and the command that still shows the change; no traceback,
    and LLVM's line is not the message."""
    from cli_runner import cli
    from dying_release import LLVM_LINE, dying_release

    dying = dying_release(tmp_path / "release", "'stablehlo.sine' in text and 'jax.result_info' not in text")
    variant = f"{dying}:{_flag_of(minimize_chain.EXCESS_PRECISION_OFF)}"
    code, out, err = cli("minimize", "short", "--jax", dying, "--variant", variant, "--outputs",
                         store=short_chain_store)
    assert code == 2 and "Traceback" not in err, err
    said = " ".join(err.split())  # the message as one line, however the terminal wrapped it
    said = said[said.index("error: "):]  # after the progress lines
    assert (f"error: {dying}'s module worker aborted (again in a fresh worker) while loading the function's "
            f"intermediate values ({LLVM_LINE}), even in pieces down to a module of one op (stablehlo.sine at "
            "minimize_chain.py:") in said, said
    assert "that release cannot load this module's text; the change still shows on the whole bundle: " \
           f"`reprobundle replay short@1 --jax {dying} --variant {variant} --store {short_chain_store}`" in said
    assert "Fatal Python error" not in said


def test_a_candidate_release_whose_worker_dies_on_the_whole_bundle_is_said_in_words(short_chain_store, tmp_path):
    """#63: the candidate's module worker aborts loading the whole bundle, in a fresh worker too, where outputs are
    asked for (as investigate asks for the bisection's criterion): one message in words, exit 2, never a search
    nor a lowering diff of a property the bundle was not even run for."""
    from cli_runner import cli
    from dying_release import LLVM_LINE, dying_release

    dying = dying_release(tmp_path / "release", "'jax.result_info' in text")
    code, _, err = cli("minimize", "short", "--jax", "installed", "--jax", dying, "--outputs", store=short_chain_store)
    said = " ".join(err.split())
    assert code == 2 and "Traceback" not in err, err
    assert f"error: {dying}'s module worker aborted (again in a fresh worker) while loading the whole bundle " \
           f"({LLVM_LINE}): that release cannot load this module's text: the two cannot be compared on it hint: " \
           "--error keeps a piece that still kills it" in said, said


def _pids_with_cwd_under(folder: Path) -> list[int]:
    import psutil

    found = []
    for proc in psutil.process_iter():
        try:
            if Path(proc.cwd()).is_relative_to(folder):
                found.append(proc.pid)
        except (psutil.Error, OSError):
            continue
    return found


def test_ctrl_c_mid_search_exits_130_keeps_the_best_piece_and_leaves_nothing_behind(chain_store, tmp_path):
    import os
    import signal
    import subprocess
    import threading
    import time

    from cli_runner import cli

    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "REPROBUNDLE_STORE": str(chain_store)}
    launcher = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                "from reprobundle.cli import run; run()")
    proc = subprocess.Popen([sys.executable, "-c", launcher, "minimize", "chain", "--jax", "installed", "--variant",
                             minimize_chain.EXCESS_PRECISION_OFF, "--outputs", "--name", "chain-interrupted"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(iter(proc.stderr.readline, "")), daemon=True)
    reader.start()
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None and not any("still show it so far" in x for x in lines):
        time.sleep(0.1)
    assert proc.poll() is None, "".join(lines)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=120)
    reader.join(10)
    err = "".join(lines)
    assert proc.returncode == 130, err
    assert "kept the best piece so far" in err and err.rstrip().endswith("interrupted") and "Traceback" not in err
    code, out, _ = cli("show", "chain-interrupted", store=chain_store)
    assert code == 0 and "minimized-from=chain@1" in out
    assert list(tmp.iterdir()) == []
    deadline = time.monotonic() + 5
    while _pids_with_cwd_under(tmp) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _pids_with_cwd_under(tmp) == []


def test_slower_keeps_a_settled_verdict_on_a_smaller_bundle(tmp_path):
    """Disabling XLA's algebraic simplifier makes the broadcast-and-sum spot do the 512 rows' work. Only the
    structure is asserted (settled, smaller), never this machine's direction or size of the change."""
    from quick import PACK

    import reprobundle

    store = tmp_path / "store"
    fn, args = minimize_chain.chain(3, ("reduce",))  # short: the spot's slowdown is most of the whole's
    reprobundle.pack(jax.jit(fn), *args, name="small-chain", store=str(store), **PACK)
    result = reprobundle.api.minimize("small-chain", ["installed"], variants=[minimize_chain.NO_ALGSIMP],
                                      prop="slower", min_ratio=2.0, store=str(store), check=False)
    assert result.ops_after < result.ops_before and result.stopped == "done"
    assert result.whole["verdict"]["settled"] and result.piece["verdict"]["settled"]  # the reduced module's
    assert result.piece["verdict"]["ci95"][0] <= result.piece["verdict"]["ratio"] <= result.piece["verdict"]["ci95"][1]
    # the piece holds its share of the time that moved, and takes an input of the program
    assert 0 < result.piece["min_moved_ns"] <= result.piece["moved_ns"]
    from reprobundle.bundle.registry import Registry

    assert Registry.open(store).resolve(result.packed).manifest["inputs"]["leaves"]


def _helper(v):
    return jax.numpy.cos(v) * 3.0 + v


def _with_regions(x):
    inner = jax.jit(_helper)

    def body(carry):
        i, v = carry
        return i + 1, inner(v) * 0.5

    _, v = jax.lax.while_loop(lambda c: c[0] < 1, body, (0, x))  # one iteration: opening it is exact
    return inner(v) + 1.0


def test_opening_a_call_or_a_while_body_computes_what_the_op_computed():
    from reprobundle.capture.export import region_ops
    from reprobundle.investigate.minimize.hlo_cut import opened

    x = np.linspace(-2, 2, 64, dtype=np.float32)
    exported, _ = export_function(jax.jit(_with_regions), (x,))
    expected = np.asarray(jax.jit(_with_regions)(x))
    text = exported.stablehlo_text
    kinds = []
    for serial in range(1, 4):  # open until no call or while is left: each step keeps the function's value
        graph = graph_of(function_ops(text), "minimize")
        found = next((i for i in graph.work if graph.ops[i].name in ("func.call", "stablehlo.while")), None)
        if found is None:
            break
        region = region_ops(text, found)
        assert region is not None
        kinds.append(region.kind)
        text = opened(graph, found, region, serial)
        np.testing.assert_allclose(run_here(text, [x])[0], expected, rtol=1e-6)
    assert "while" in kinds and "call" in kinds


@pytest.mark.crossversion
def test_a_change_in_jax_lowering_is_named_as_such_with_the_command_that_shows_it(tmp_path):
    """jax.random's threefry became partitionable in 0.5.0: the frozen module computes the same numbers on 0.4.38 and
    0.5.0, the program retraced by each does not. minimize says the change is in the lowering."""
    from quick import PACK

    import reprobundle
    from reprobundle.errors import UsageError

    store = tmp_path / "store"
    reprobundle.api.pack_script(str(Path(__file__).parent / "programs" / "retrace" / "rng.py"), name="rng",
                                store=str(store), **PACK)
    with pytest.raises(UsageError) as caught:
        reprobundle.api.minimize("rng", ["0.4.38", "0.5.0"], prop="outputs", store=str(store))
    assert "lowering" in caught.value.message and "between 0.4.38 and 0.5.0" in caught.value.message
    assert "--mode both" in caught.value.hint


def test_a_bundle_with_symbolic_shapes_is_reduced_at_its_packed_sizes(tmp_path):
    from jax import export
    from quick import PACK

    import reprobundle
    from reprobundle.bundle.registry import Registry
    from reprobundle.investigate.minimize.reduction import packed_module

    def f(x, w):
        return jax.numpy.tanh(x @ w).sum(axis=0), x * 2

    b, = export.symbolic_shape("b")
    exp = export.export(jax.jit(f))(jax.ShapeDtypeStruct((b, 4), np.float32), jax.ShapeDtypeStruct((4, 3), np.float32))
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((8, 4), dtype=np.float32), rng.standard_normal((4, 3), dtype=np.float32)
    reprobundle.pack(exp, x, w, name="poly", store=str(tmp_path / "store"), **PACK)
    registry = Registry.open(str(tmp_path / "store"))
    text, inputs = packed_module(registry, registry.resolve("poly"))
    graph = graph_of(function_ops(text), "minimize")  # refuses dynamic shapes: none are left
    assert "tensor<8x4xf32>" in text and "?" not in "".join(graph.types.values())
    values = dict(zip(graph.args, inputs))
    whole = candidate(graph.work, graph, values)
    assert whole is not None
    np.testing.assert_allclose(run_here(whole.cut.text, whole.inputs)[-1], x * 2)


def test_bits_holds_for_any_difference_and_outputs_only_beyond_the_tolerance():
    """`--outputs --bits`: one last bit of one element, or another dtype, is the property; plain `--outputs` needs a
    difference beyond the replay's tolerance."""
    from reprobundle.investigate.minimize.reduction import OUTPUTS, Property

    ref = np.linspace(1, 2, 64, dtype=np.float32)
    last_bit = ref.copy()
    last_bit[7] = np.nextafter(last_bit[7], np.float32(3))
    far = ref.copy()
    far[7] += np.float32(0.5)
    same = ref.copy()
    for got, bits, holds in ((last_bit, True, True), (last_bit, False, False), (far, False, True), (far, True, True),
                             (same, True, False), (ref.astype(np.float64), True, True)):
        assert Property(OUTPUTS, bits=bits)._outputs([ref], [got]).holds is holds, (got.dtype, bits)


# ------------------------------------------------------------------------------------------------ control flow
# examples/loop_programs.py: a while loop, the gradient through a scan and a cond, each with a scalar input and one
# spot inside its loop body or branch that computes differently under a flag of the installed release (real on
# every machine). Reducing them cuts around ops whose regions use values of the function (a loop's bound, constants)
# and, for the loops, opens the body.

LOOP_PROGRAMS = {"while": loop_programs.while_program, "scan": loop_programs.scan_program,
                 "cond": loop_programs.cond_program}


def _spot_lines(program: str) -> set[str]:
    """`loop_programs.py:N` for the program's lines an op of the spot can be named by: the call of the spot, or the
    loop, cond or gradient holding it (an op is named by its outermost frame in the file)."""
    import inspect

    source, first = inspect.getsourcelines(LOOP_PROGRAMS[program])
    return {f"loop_programs.py:{first + k}" for k, line in enumerate(source)
            if "spot(kind" in line or re.search(r"lax\.(scan|while_loop|cond)\(|value_and_grad\(", line)}


def _packed_loop(program: str, kind: str, store: Path) -> None:
    from quick import PACK

    import reprobundle

    fn, args = LOOP_PROGRAMS[program](kind)
    reprobundle.pack(jax.jit(fn), *args, name=program, store=str(store), **PACK)


@pytest.mark.parametrize("program", sorted(LOOP_PROGRAMS))
def test_outputs_reduces_a_program_with_control_flow_and_scalars(program, tmp_path):
    import reprobundle
    from reprobundle.bundle.registry import Registry

    store = tmp_path / "store"
    _packed_loop(program, "bf16", store)
    result = reprobundle.api.minimize(program, ["installed"], variants=[minimize_chain.EXCESS_PRECISION_OFF],
                                      prop="outputs", store=str(store))
    assert result.stopped == "done" and result.ops_after < result.ops_before
    assert result.check["holds"] and [r["status"] for r in result.check["runs"]] == ["ok", "mismatch"]
    assert all(op["line"] in _spot_lines(program) for op in result.ops), result.ops  # the ops around are gone
    names = {op["name"] for op in result.ops}
    if program == "cond":  # a branch is kept whole, with the scalar that picks it as an input
        assert "stablehlo.case" in names
        leaves = Registry.open(store).resolve(result.packed).manifest["inputs"]["leaves"]
        assert any(leaf["shape"] == [] for leaf in leaves)
    else:  # the loop opened: one iteration of its body still shows it, and the loop is gone
        assert result.levels >= 2 and "stablehlo.while" not in names


def test_slower_reduces_a_loop_to_what_still_settles_slower(tmp_path, program="while"):
    """`--xla_disable_hlo_passes=algsimp` makes the spot in the loop body do 512 rows' work at each step. Only the
    structure is asserted (settled, smaller), never this machine's size of the change; no fresh replay (check=False,
    as the chain's test: under a loaded suite a fresh replay may need more rounds than it gets)."""
    import reprobundle

    store = tmp_path / "store"
    _packed_loop(program, "reduce", store)
    result = reprobundle.api.minimize(program, ["installed"], variants=[minimize_chain.NO_ALGSIMP], prop="slower",
                                      min_ratio=2.0, store=str(store), check=False)
    assert result.stopped == "done" and result.ops_after < result.ops_before
    assert result.whole["verdict"]["settled"] and result.piece["verdict"]["settled"]
    assert result.piece["verdict"]["verdict"] == "slower"
    # which ops are kept is not asserted: without algsimp other ops of the program slow down too (a multiply by a
    # constant), and the smallest piece still 2x slower may be one of them on a given machine and load


@pytest.mark.crossversion
def test_the_oldest_release_runs_the_cuts_of_a_loop_the_host_printed(tmp_path):
    """The host (the newest jax) prints every cut; the oldest release the tool replays on must parse them: the
    while program reduced between 0.4.30 and 0.4.30 with the flag, and the piece replayed fresh there."""
    import reprobundle

    store = tmp_path / "store"
    _packed_loop("while", "bf16", store)
    flag = minimize_chain.EXCESS_PRECISION_OFF.replace("installed", "0.4.30")
    result = reprobundle.api.minimize("while", ["0.4.30"], variants=[flag], prop="outputs", store=str(store))
    assert result.stopped == "done" and result.ops_after < result.ops_before and result.levels >= 2
    # one of the two matches the host's reference (which one is 0.4.30's business), the other does not
    assert result.check["holds"] and sorted(r["status"] for r in result.check["runs"]) == ["mismatch", "ok"]
    _the_piece_is_reused_by_the_same_question_here(store, result)


def _the_piece_is_reused_by_the_same_question_here(store, result):
    """investigate's minimize step over stored answers (minimize/stored_piece.py): the record of `result` is found for the same
    question on the builds here; another property is not; a newer record naming a piece that is gone, or a search cut
    short, is never reused."""
    from dataclasses import replace

    from reprobundle.bundle.registry import open_ref
    from reprobundle.envs.manager import EnvironmentManager
    from reprobundle.investigate.minimize.stored_piece import minimization_asked, store_minimization, stored_minimization

    registry, bundle = open_ref("while", str(store))
    manager = EnvironmentManager()  # the environments this suite made: the builds the record is matched on
    asked = minimization_asked(["0.4.30", "0.4.30"], "outputs", False)
    stored = store_minimization(registry, bundle, result, "reprobundle minimize while", asked, manager)
    found = stored_minimization(registry, bundle, asked, manager)
    assert found is not None and found["answer_id"] == stored and found["kind"] == "minimization"
    assert (found["answer"]["packed"], found["answer"]["ops_after"], found["answer"]["holds"]) == (
        result.packed, result.ops_after, True)
    assert stored_minimization(registry, bundle, {**asked, "property": "slower"}, manager) is None
    store_minimization(registry, bundle, replace(result, stopped="max-time"), "cut", asked, manager)
    assert stored_minimization(registry, bundle, asked, manager)["answer_id"] == stored  # the cut one is skipped
    store_minimization(registry, bundle, replace(result, packed="while-min@99"), "gone", asked, manager)
    assert stored_minimization(registry, bundle, asked, manager) is None  # the newest names a piece not here


def _constant_and_input(x):
    c = jax.lax.add(np.int32(2), np.int32(3))  # staged: a stablehlo.add of two constants, no input in it
    return x * c.astype(x.dtype) + 1.0


def test_a_slower_piece_of_constants_alone_is_refused_before_anything_runs():
    """A piece whose kept ops use no input of the program (the add of two int32 constants a --slower search once
    kept, 4.9 us against 2.9 us) is never a candidate for slower: it is refused before any worker is asked (no
    worker is given here); an outputs search may still keep one."""
    from reprobundle.investigate.minimize.reduction import OUTPUTS, SLOWER, Property, _holds

    exported, leaves = export_function(jax.jit(_constant_and_input), (np.ones(4, np.float32),))
    graph = graph_of(function_ops(exported.stablehlo_text), "minimize")
    values = dict(zip(graph.args, leaves))
    values.update(zip(all_values_cut(graph).outputs, run_here(all_values_cut(graph).text, leaves)))
    alone = [i for i in graph.work if graph.ops[i].name == "stablehlo.add"
             and (made := candidate([i], graph, values)) is not None and not made.inputs]
    assert alone, [graph.ops[i].name for i in graph.work]
    assert _holds(alone, graph, values, Property(SLOWER), None, None, {}) is False
    with pytest.raises(AttributeError):  # an outputs search judges it (and would need the workers)
        _holds(alone, graph, values, Property(OUTPUTS), None, None, {})


def test_a_slower_piece_must_hold_the_stated_share_of_the_time_that_moved():
    from types import SimpleNamespace

    from reprobundle.investigate.minimize.reduction import MIN_SHARE, SLOWER, Judgement, Property, could_not_shrink

    prop = Property(SLOWER, min_ratio=1.1)
    prop.hold_share_of(Judgement(True, {"base_ns": 2_000_000.0, "cand_ns": 3_000_000.0}))
    assert prop.min_moved_ns == MIN_SHARE * 1_000_000.0
    whole = SimpleNamespace(ops_before=14, ops_after=14, property=SLOWER, check={}, levels=1)
    assert could_not_shrink(whole) == ("could not shrink below 14 ops: no smaller piece showed slower holding 50% of "
                                       "the time that moved")
    noisy = SimpleNamespace(ops_before=14, ops_after=1, property=SLOWER, levels=1,
                            check={"holds": False, "why": "B is slower by 2 us a call, under 50%"})
    assert could_not_shrink(noisy) == "could not shrink below 14 ops: the 1-op piece did not show slower again on " \
                                      "a fresh replay"
    assert could_not_shrink(SimpleNamespace(ops_before=14, ops_after=3, property=SLOWER, check={"holds": True},
                                            levels=1)) is None
    # a loop opened: its body's 20 ops are one iteration, a piece of the 4 top-level ops however many they are
    assert could_not_shrink(SimpleNamespace(ops_before=4, ops_after=20, property=SLOWER, check={"holds": True},
                                            levels=2)) is None


def test_the_readme_attention_examples_intermediate_values_come_back_within_a_calls_limit(tmp_path):
    """examples/attention.py (batch 4, sequence 512): the function returning its 28 intermediate values (308 MB)
    on a module worker under minimize's own limits. The answer used to be read 64 KiB at a time into a growing
    bytes object, quadratic in its size: past the limit of 100 calls + 60 s ("timeout in execute"), where minimize
    of the README's example failed. Asserted: it comes back, every value of the right shape."""
    import attention
    from quick import PACK

    import reprobundle
    from reprobundle.bundle.registry import Registry
    from reprobundle.investigate.minimize.fed_values import intermediate_values
    from reprobundle.investigate.minimize.reduction import module_limits, packed_module
    from reprobundle.run.contenders import ContenderSpec
    from reprobundle.run.module_server import ModuleWorker

    fn, args = attention.make()
    reprobundle.pack(fn, *args, name="attention", store=str(tmp_path / "store"), **PACK)
    registry = Registry.open(tmp_path / "store")
    bundle = registry.resolve("attention")
    text, inputs = packed_module(registry, bundle)
    graph = graph_of(function_ops(text), "minimize")
    values = dict(zip(graph.args, inputs))
    with ModuleWorker(ContenderSpec("installed"), platform="cpu", limits=module_limits(bundle)) as worker:
        intermediate_values(worker, graph, values)
    whole = all_values_cut(graph)
    assert whole is not None and len(whole.outputs) >= 20
    assert all(v in values for v in whole.outputs)
    assert sum(values[v].nbytes for v in whole.outputs) > 200 << 20


# ------------------------------------------------------------------------------------------------ the stored answer
# minimize without a property keeps what the bundle's latest stored bisection found between its last good and first
# bad release: a change in the last bits is kept as bits (never the tolerance's outputs, nor a timing), a change in
# JAX's lowering is said at once (the frozen module minimize reduces does not hold it)


def _bisected(criterion: str, layer: str):
    from reprobundle.investigate.search.bisection import BisectResult

    return BisectResult("0.4.31", "0.4.33", criterion, first_bad="0.4.33", last_good="0.4.31",
                        classes={"0.4.31": "good", "0.4.33": "bad"}, evidence={"0.4.33": "differs"}, why="differs",
                        mode="frozen", layer={"layer": layer, "last_good": "0.4.31", "first_bad": "0.4.33",
                                              "text": layer, "next": [{"what": "lowering diff", "command":
                                                                       "reprobundle replay small --retrace"}]})


def test_without_a_property_the_stored_bisections_criterion_and_layer_decide(small_store_template, tmp_path):
    from small_bundle import copy_of

    import reprobundle
    from reprobundle.bundle.registry import Registry
    from reprobundle.investigate.minimize.kept_property import PropertyNotShown, stored_property
    from reprobundle.investigate.search.bisection_answer import store_bisection
    from reprobundle.run.contenders import ContenderSpec, parse_variant

    store = copy_of(small_store_template, tmp_path / "store")
    registry = Registry.open(store)
    bundle = registry.resolve("small@1")
    pair = [ContenderSpec("0.4.31"), ContenderSpec("0.4.33")]
    assert stored_property(registry, bundle, pair) is None  # no answer: chosen from the whole bundle as before
    store_bisection(registry, bundle, _bisected("bits", "compiler"), "reprobundle bisect small")
    stated = stored_property(registry, bundle, pair)
    assert stated is not None and (stated.prop, stated.bits, stated.layer) == ("outputs", True, "compiler")
    assert "found bits from 0.4.31 to 0.4.33 (the layer at its boundary: compiler)" in stated.why
    assert stored_property(registry, bundle, pair[::-1]) is None  # other contenders: the answer says nothing of them
    assert stored_property(registry, bundle, [pair[0], parse_variant("0.4.33:XLA_FLAGS=--xla_a=1")]) is None
    store_bisection(registry, bundle, _bisected("time", "both"), "reprobundle bisect small")
    assert stored_property(registry, bundle, pair).prop == "slower"
    store_bisection(registry, bundle, _bisected("outputs vs good", "lowering"), "reprobundle bisect small")
    with pytest.raises(PropertyNotShown) as caught:  # said before any worker starts: no release is installed here
        reprobundle.api.minimize("small", store=str(store))
    assert "in JAX's lowering" in caught.value.message and "reprobundle replay small --retrace" in caught.value.hint


@pytest.mark.crossversion
def test_a_transformer_trained_in_a_scan_is_reduced_to_a_piece_whose_bits_differ(tmp_path):
    """tests/programs/retrace/transformer_scan.py: attention, an MLP with exact GELU and layernorm, trained by SGD in
    a `lax.scan`. Its outputs change in their last bits at 0.4.33 (the CPU thunk runtime: the compiler's change, the
    same StableHLO on both). The bisection finds that; minimize, told nothing, keeps the bisection's criterion (once
    it kept the tolerance's outputs, saw none, and said the frozen module does not show it) and ends with a piece
    whose bits differ between the two releases on a fresh replay of it."""
    from quick import PACK

    import reprobundle
    from reprobundle.investigate.minimize.reduction import could_not_shrink

    store = tmp_path / "store"
    reprobundle.api.pack_script(str(Path(__file__).parent / "programs" / "retrace" / "transformer_scan.py"),
                                name="block", store=str(store), **PACK)
    bisected, _ = reprobundle.api.bisect("block", "0.4.31", "0.4.33", store=str(store), by="bits", mode="frozen",
                                         warmup=1, repeat=2, rounds=1)
    assert (bisected.criterion, bisected.first_bad, bisected.layer["layer"]) == ("bits", "0.4.33", "compiler")
    found = reprobundle.api.minimize("block", store=str(store))
    assert found.contenders == ("0.4.31", "0.4.33") and (found.property, found.bits) == ("outputs", True)
    assert "the stored bisection" in found.why and "compiler" in found.why
    assert found.stopped == "done" and could_not_shrink(found) is None, found.check
    assert found.piece["check"]["ok"] and not found.piece["check"]["bit_identical"]  # within the tolerance: bits
    assert found.check["holds"] and not found.check["check"]["bit_identical"]  # the packed piece, replayed fresh
