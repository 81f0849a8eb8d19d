"""`reprobundle script` and `reprobundle issue` (bundle/frozen_script.py, investigate/report/issue_facts.py, render/issue.py): a
minimized piece as a standalone script that runs with only jax and numpy, its HLO for XLA, and the Markdown issue.

The pieces are minimized from a small chain (examples/minimize_chain.py) between one release with and without an
XLA flag, so the difference is real on every machine. The scripts run in a fresh environment made by uv with only
jax, jaxlib and numpy (the newest release), and in reprobundle's own cached environment of the oldest release."""

from __future__ import annotations

import ast
import io
import json
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import jax
import jax.numpy as jnp
import minimize_chain  # examples/, on the path by conftest.py
import numpy as np
import pytest
from cli_runner import cli
from quick import PACK

import reprobundle
from reprobundle.bundle.registry import Registry

NEWEST, OLDEST = "0.10.2", "0.4.30"
EXCESS_FLAG = minimize_chain.EXCESS_PRECISION_OFF.split("XLA_FLAGS=", 1)[1]
RNG_FLAG = minimize_chain.NO_RNG_EXPANDER.split("XLA_FLAGS=", 1)[1]
# What the script may import (besides the standard library): it must not need reprobundle, msgpack or flatbuffers.
AUDIT = ("import runpy, sys\n"
         "sys.argv = sys.argv[1:]  # as `python SCRIPT ARGS` sets it\n"
         "try:\n"
         "    runpy.run_path(sys.argv[0], run_name='__main__')\n"
         "finally:\n"
         "    bad = sorted(m for m in sys.modules if m.split('.')[0] in ('reprobundle', 'msgpack', 'flatbuffers'))\n"
         "    print('FORBIDDEN' if bad else 'CLEAN', bad)\n")


@pytest.fixture(scope="module")
def pieces(tmp_path_factory):
    """A store with chain-min (outputs under the excess-precision flag, replayed fresh: stored runs) and
    chain-error (the rng spot that fails to compile without its expander pass)."""
    store = tmp_path_factory.mktemp("script") / "store"
    fn, args = minimize_chain.chain(3, ("bf16", "rng"))
    reprobundle.pack(jax.jit(fn), *args, name="chain", store=str(store), **PACK)
    result = reprobundle.api.minimize("chain", ["installed"], variants=[minimize_chain.EXCESS_PRECISION_OFF],
                                      prop="outputs", store=str(store))
    assert result.next == f"reprobundle issue chain-min@1 --store {store}"  # minimize offers the issue
    from reprobundle.render.minimize import minimize_data, minimize_text, to_markdown

    data = minimize_data(result)
    assert result.next in minimize_text(data) and result.next in to_markdown(data)
    reprobundle.api.minimize("chain", ["installed"], variants=[minimize_chain.NO_RNG_EXPANDER], prop="error",
                             store=str(store), name="chain-error", check=False)
    return store


@pytest.fixture(scope="module")
def fresh_python(tmp_path_factory):
    """An environment with only jax, jaxlib and numpy of the newest release, made by uv from its cache."""
    return _fresh(tmp_path_factory, NEWEST)


def _run(python, script: Path, flags: str | None = None, platforms: str = "cpu") -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    env.update(JAX_PLATFORMS=platforms, **({"XLA_FLAGS": flags} if flags else {}))
    done = subprocess.run([str(python), "-c", AUDIT, str(script)], env=env, capture_output=True, text=True,
                          timeout=300, cwd=script.parent)
    assert "CLEAN []" in done.stdout, done.stdout + done.stderr
    return done


def _script(store, tmp_path, ref: str) -> Path:
    out = tmp_path / f"{ref}.py"
    code, printed, err = cli("script", ref, "-o", out, store=store)
    assert code == 0, err
    assert "KiB" in printed
    return out


@pytest.mark.crossversion
def test_the_script_shows_the_mismatch_with_the_flag_and_not_without_on_the_oldest_and_newest(pieces, tmp_path,
                                                                                              fresh_python):
    script = _script(pieces, tmp_path, "chain-min")
    text = script.read_text()
    assert len(text.encode()) < 64 * 1024
    assert "stablehlo.add" in text or "stablehlo.multiply" in text  # the program is readable in the file
    assert "minimize_chain.py:" in text and EXCESS_FLAG in text  # source lines and the flag, in the header
    without = _run(fresh_python, script)
    assert without.returncode == 0, without.stdout + without.stderr
    assert f"jax {NEWEST}" in without.stdout and "backend: cpu" in without.stdout
    assert f"result: as jax {NEWEST} (outputs within the tolerance)" in without.stdout  # minimize's baseline
    flagged = _run(fresh_python, script, EXCESS_FLAG)
    assert flagged.returncode == 1, flagged.stdout + flagged.stderr
    assert "outside the tolerance" in flagged.stdout and "reference" in flagged.stdout
    assert "result: DIFFERS" in flagged.stdout
    oldest = reprobundle.api.environment_manager().ensure(OLDEST).python_executable
    old = _run(oldest, script)
    assert old.returncode == 0 and f"jax {OLDEST}" in old.stdout, old.stdout + old.stderr


@pytest.mark.crossversion
def test_an_error_piece_exits_1_naming_the_error(pieces, tmp_path, fresh_python):
    script = _script(pieces, tmp_path, "chain-error")
    failed = _run(fresh_python, script, RNG_FLAG)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "result: ERROR" in failed.stdout and "RngBitGenerator" in failed.stdout and "compile" in failed.stdout
    nowhere = _run(fresh_python, script, platforms="no-such-platform")  # jax cannot start: 3, as a zip says
    assert nowhere.returncode == 3 and "result: could not run" in nowhere.stdout, nowhere.stdout + nowhere.stderr


@pytest.mark.crossversion
def test_a_bits_piece_between_two_releases_reproduces_on_them(tmp_path):
    # colsum's float32 sums change in their last bits from jaxlib 0.5.0 to 0.5.1 (within the tolerance): the piece
    # minimize keeps is checked against the baseline release's outputs, bit for bit, not against the packed reference
    store = tmp_path / "store"
    reprobundle.api.pack_script(str(Path(__file__).parent / "programs" / "retrace" / "colsum.py"), name="colsum",
                                store=str(store), **PACK)
    reprobundle.api.minimize("colsum", ["0.5.0", "0.5.1"], prop="outputs", bits=True, store=str(store))
    script = _script(store, tmp_path, "colsum-min")
    manager = reprobundle.api.environment_manager()
    good, bad = (_run(manager.ensure(v).python_executable, script) for v in ("0.5.0", "0.5.1"))
    assert good.returncode == 0 and "against jax 0.5.0's, any bit" in good.stdout, good.stdout + good.stderr
    assert bad.returncode == 1 and "result: DIFFERS" in bad.stdout, bad.stdout + bad.stderr
    code, out, err = cli("issue", "colsum-min", "--json", store=store)
    assert code == 0, err
    assert json.loads(out)["title"].endswith("gives other output bits (jax 0.5.1 vs 0.5.0)")
    code, _, err = cli("issue", "colsum-min", "-o", tmp_path / "no-such-folder" / "issue.md", store=store)
    assert code == 2 and "cannot write" in err and "Traceback" not in err


def test_the_hlo_files_and_the_run_hlo_module_line(pieces, tmp_path):
    code, out, err = cli("script", "chain-min", "--hlo", tmp_path / "hlo", "--json", store=pieces)
    assert code == 0, err
    data = json.loads(out)
    before = Path(data["files"]["before"])
    assert before.name == "chain-min-1.before.hlo" and "HloModule" in before.read_text()
    assert "HloModule" in Path(data["files"]["after"]).read_text()
    assert data["command"].startswith("run_hlo_module --platform=CPU") and EXCESS_FLAG in data["command"]


def test_a_piece_over_the_size_limit_is_refused_with_the_zip_command(tmp_path):
    store = tmp_path / "store"
    x = np.random.default_rng(0).standard_normal(40_000).astype(np.float32)  # 160 KiB of noise: no compression helps
    reprobundle.pack(jax.jit(jnp.sin), x, name="wide", store=str(store), **PACK)
    code, out, err = cli("script", "wide", "-o", tmp_path / "wide.py", store=store)
    assert code == 2 and not (tmp_path / "wide.py").exists()
    assert "64 KiB" in err and "reprobundle export wide@1 -o wide-1.zip" in err and "Traceback" not in err
    # the issue offers the zip in its place, on its first screen, with the one line that runs it
    code, out, err = cli("issue", "wide", "--json", store=store)
    assert code == 0, err
    data = json.loads(out)
    first = "\n".join(data["body"].splitlines()[:30])
    assert data["script"]["kind"] == "zip" and "**Reproducer:** the attached zip: `python wide-1.zip`" in first, first


def test_the_issue_renders_as_markdown_with_the_script_and_the_environment(pieces, tmp_path):
    from markdown_it import MarkdownIt

    code, out, err = cli("issue", "chain-min", "--tracker", "jax", "--json", store=pieces)
    assert code == 0, err
    data = json.loads(out)
    assert data["tracker"] == "jax" and "\n" not in data["title"] and EXCESS_FLAG in data["title"]
    tokens = MarkdownIt("commonmark").enable("table").parse(data["body"])
    fences = [t for t in tokens if t.type == "fence"]
    pasted = [t.content for t in fences if t.info == "python"]
    if pasted:  # the script inline, whole
        assert pasted[0].rstrip("\n") == data["script"]["text"].rstrip("\n")
        compile(pasted[0], "repro.py", "exec")  # the pasted script is the whole program
    else:  # a script under 64 KiB that the body could not hold beside the rest (GitHub's 65,536): the zip instead
        assert len(data["script"]["text"]) + len(data["body"]) > data["body_limit"], data["script"]["bytes"]
        assert "**Reproducer:** the attached zip: `python chain-min-1.zip`" in data["body"]
    cells = [t.content for t in tokens if t.type == "inline"]
    assert "jax" in cells and jax.__version__ in cells and "backend" in cells and "cpu" in cells  # the environment
    assert any(t.type == "table_open" for t in tokens)
    assert "mismatch" in data["body"] and "reprobundle replay" in data["body"]  # what was seen; the Reproduce block
    code, out, err = cli("issue", "chain-min", "--open", store=pieces)  # a minimized piece: XLA's tracker
    assert code == 0, err
    url = out.strip().splitlines()[-1]
    assert url.startswith("Open: https://github.com/openxla/xla/issues/new?title=%5Bcpu%5D") and " " not in url[6:]
    code, out, err = cli("issue", "chain-minn", store=pieces)
    assert code == 4 and "chain-minn" in err and "Traceback" not in err


HOSTILE = 'evil"""\n\'\'\'\\\nimport os; os.system("touch /tmp/pwned")  # \r\x0c\u2028x\\'


def _shape(source: str) -> list[tuple]:
    """What the template generates at the top level: each statement's kind and the names it binds or calls."""
    out = []
    for node in ast.parse(source).body:
        names = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
                       | {getattr(node, "name", "")})
        calls = sorted({ast.unparse(n.func) for n in ast.walk(node) if isinstance(n, ast.Call)})
        out.append((type(node).__name__, names, calls))
    return out


def test_a_hostile_label_and_description_stay_inside_strings_and_comments(tmp_path):
    store = tmp_path / "store"
    x = np.arange(8, dtype=np.float32)
    made = {}
    for name, text in (("benign", "add (chain.py:3)"), ("hostile", HOSTILE + " (x.py:1)")):
        labels = {"minimized-ops": text, "minimized-property": "outputs " + (HOSTILE if name == "hostile" else ""),
                  "minimized-from": text, "minimized-contenders": text}
        reprobundle.pack(jax.jit(lambda v: v * 2.0 + 1.0), x, name=name, store=str(store), labels=labels,
                         description=text, **PACK)
        code, out, err = cli("script", name, store=store)
        assert code == 0, err
        made[name] = out
        ast.parse(out)  # valid Python
    assert _shape(made["hostile"]) == _shape(made["benign"])  # no statement beyond the template's
    for tok in tokenize.generate_tokens(io.StringIO(made["hostile"]).readline):
        if "os.system" in tok.string or "pwned" in tok.string:
            assert tok.type in (tokenize.STRING, tokenize.COMMENT), tok
    assert "os.system" in made["hostile"]  # it is there, escaped: in a comment or a literal
    code, out, err = cli("issue", "hostile", "--json", store=store)
    assert code == 0, err
    body = json.loads(out)["body"]
    from markdown_it import MarkdownIt

    html = MarkdownIt("commonmark").enable("table").render(body)
    assert "<script" not in html and "\u2028" not in json.loads(out)["title"]


def test_script_and_issue_load_no_jax(pieces, tmp_path):
    """`script` and `issue` read data only: no jax or the library's api in the process; scipy only for `issue`,
    which computes the stored replay's paired verdict and interval (analysis/verdict.py, as `history` does)."""
    out = tmp_path / "modules.json"
    audited = ("import atexit, json, sys\n"
               "out = sys.argv.pop(1)\n"
               "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
               "sys.argv[0] = 'reprobundle'\n"
               "from reprobundle.cli import run\n"
               "run()\n")
    for argv in (["script", "chain-min", "-o", str(tmp_path / "r.py")], ["issue", "chain-min"]):
        done = subprocess.run([sys.executable, "-c", audited, str(out), *argv, "--store", str(pieces)],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        modules = set(json.loads(out.read_text()))
        heavy = ("jax", "jaxlib", "ray", "gcsfs") + (("scipy",) if argv[0] == "script" else ())
        assert not {m for m in modules if m.split(".")[0] in heavy}
        assert "reprobundle.api" not in modules
    assert isinstance(Registry.open(str(pieces)).resolve("chain-min").ref.version, int)


def test_the_title_of_a_bundle_claims_only_what_its_stored_runs_showed(small_store_template, tmp_path):
    from small_bundle import copy_of

    store = copy_of(small_store_template, tmp_path / "store")
    code, out, err = cli("issue", "small", "--json", store=store)
    assert code == 0, err
    assert "(no replay of it stored yet: nothing seen to report)" in json.loads(out)["title"]
    code, _, err = cli("replay", "small", "--repeat", "2", "--no-profile", store=store)
    assert code == 0, err
    code, out, err = cli("issue", "small", "--json", store=store)
    assert "replays with outputs within tolerance" in json.loads(out)["title"], out


# ------------------------------------------------------------------------------------------------ scalars, dtypes, loops


def _train_step(w, x, flag, lr, h, i8, u8, u32, c, d):
    """A small training step as users write one: a fori_loop of tiny steps, a scan over a 3x3 carry, a cond, scalar
    parameters, and inputs of every kind of dtype (float64 and int64 need x64)."""
    v = jax.lax.fori_loop(0, 200, lambda i, v: v * lr + jnp.where(flag, 0.1, 0.2), w)

    def step(carry, row):
        carry = jnp.tanh(carry @ x.astype(jnp.float32)) + row * v
        return carry, carry.sum()

    carry, ys = jax.lax.scan(step, jnp.eye(3, dtype=jnp.float32), jnp.ones((8, 3, 3), jnp.float32))
    picked = jax.lax.cond(flag, lambda: x * 2, lambda: x)
    return (v + carry.sum(), ys, picked, ~flag, h * 2, i8 - 1, u8 + 1, u32 * 3, c * 1j, d / 3,
            i8.astype(jnp.int64).sum() + 7)


def _train_args():
    return (jnp.float32(1.5), jnp.ones((3, 3), jnp.bfloat16), jnp.bool_(True), jnp.float32(0.9), jnp.float16(0.5),
            jnp.array([-3, 4], jnp.int8), jnp.array([250, 1], jnp.uint8), jnp.uint32(4_000_000_000),
            jnp.array([1 + 2j], jnp.complex64), jnp.float64(1.0 / 3.0))


@pytest.fixture(scope="module")
def train_store(tmp_path_factory):
    """A store with train@1: _train_step packed with x64 (its float64 and int64 leaves stay 64-bit)."""
    store = tmp_path_factory.mktemp("train") / "store"
    before = jax.config.jax_enable_x64
    jax.config.update("jax_enable_x64", True)
    try:
        reprobundle.pack(jax.jit(_train_step), *_train_args(), name="train", store=str(store), **PACK)
    finally:
        jax.config.update("jax_enable_x64", before)
    return store


def test_inputs_and_references_keep_their_exact_dtype_and_shape_in_the_script(train_store):
    """Each array the script writes reads back (by the script's own `_array`) with the dtype and shape of the bundle's
    signature, bit for bit: rank 0, bool, bfloat16, float16, int8, uint8, uint32, complex64, float64, int64."""
    from reprobundle.bundle import frozen_script
    from reprobundle.bundle.script_runner import RUNNER

    registry = Registry.open(str(train_store))
    bundle = registry.resolve("train")
    ins, outs, _ = frozen_script.signature(bundle)
    inputs, reference = frozen_script.arrays(registry, bundle)
    assert [d for d, _ in ins] == ["float32", "bfloat16", "bool", "float32", "float16", "int8", "uint8", "uint32",
                                   "complex64", "float64"] and ins[0][1] == []
    namespace: dict = {}
    exec(compile(RUNNER, "script_runner", "exec"), namespace)  # the template's own functions (no bundle text)
    import base64
    import zlib

    namespace.update(np=np, base64=base64, zlib=zlib)
    for (dtype, shape), array in [*zip(ins, inputs), *zip(outs, reference)]:
        back = namespace["_array"](ast.literal_eval(frozen_script.array_literal(array)), jnp.dtype)
        assert (back.dtype.name, list(back.shape)) == (dtype, shape)
        assert back.tobytes() == np.asarray(array).tobytes()
    assert "X64 = True" in frozen_script.script_text(registry, bundle)


@pytest.mark.crossversion
def test_the_script_of_scalars_bools_and_bf16_through_loops_runs_on_the_oldest_and_newest(train_store, tmp_path,
                                                                                           fresh_python):
    script = _script(train_store, tmp_path, "train")
    assert "('float32', (), [1.5])" in script.read_text()  # a scalar stays rank 0
    oldest = reprobundle.api.environment_manager().ensure(OLDEST).python_executable
    for python, version in ((fresh_python, NEWEST), (oldest, OLDEST)):
        done = _run(python, script)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"jax {version}" in done.stdout and "result: as the reference" in done.stdout


@pytest.mark.crossversion
def test_a_slowdowns_script_prints_the_stored_medians_and_never_judges_time(train_store, tmp_path):
    """After a replay of 0.4.31 and 0.4.33 timed together (with a variant of 0.4.33), the script prints the stored
    medians, ratios and intervals (as analysis/slowdown.py computes them from the records) and the commands that run
    it on each release; on a release it exits 0 whatever its time, and a variant that works around the slowdown is
    never called the setting that showed it. Which release is faster is the machine's: not asserted."""
    from reprobundle.analysis.slowdown import measured_times
    from reprobundle.bundle.frozen_script import stored_runs
    from reprobundle.units import human_ns

    flag = "--xla_cpu_use_thunk_runtime=false"
    code, _, err = cli("replay", "train", "--jax", "0.4.31", "--jax", "0.4.33", "--variant", f"0.4.33:XLA_FLAGS={flag}",
                       "--rounds", "3", "--repeat", "3", "--no-profile", store=train_store)
    assert code == 0, err
    registry = Registry.open(str(train_store))
    measured = measured_times(stored_runs(registry, registry.resolve("train")))
    assert measured is not None and [r["jax"] for r in measured["rows"]] == ["0.4.31", "0.4.33", "0.4.33"]
    script = _script(train_store, tmp_path, "train")
    text = script.read_text()
    for row in measured["rows"]:
        assert f"jax {row['label']}: median {human_ns(row['median_ns'])}" in text
    for row in measured["rows"][1:]:
        assert f"{row['ratio']:.2f}x [{row['ci95'][0]:.2f}-{row['ci95'][1]:.2f}]" in text
    assert "--with jax==0.4.31 --with jaxlib==0.4.31 python train.py" in text
    assert "--with jax==0.4.33 --with jaxlib==0.4.33 python train.py" in text
    assert ("(a workaround)" in text) == bool(measured["workarounds"])
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "(the setting under which the difference was seen)" in line:  # the slower contender's own setting only
            assert flag not in lines[i - 1] or flag in str((measured["slower"] or {}).get("settings"))
    slow = reprobundle.api.environment_manager().ensure("0.4.33").python_executable
    done = _run(slow, script)
    assert done.returncode == 0, done.stdout + done.stderr  # time is printed, never judged on one release
    assert "x the stored median of 0.4.33" in done.stdout and "stored replay, timed together" in done.stdout
    if measured["slower"]:
        assert "time not judged" in done.stdout and "uv run --no-project" in done.stdout


# ------------------------------------------------------------------------------------------------ reproducers from
# an investigation's answer: each exits 1 on the bad release and 0 on the good one

PROGRAMS = Path(__file__).parent / "programs" / "retrace"


def _cached(version: str):
    return reprobundle.api.environment_manager().ensure(version).python_executable


@pytest.mark.crossversion
def test_a_lowering_changes_reproducer_is_the_program_and_fails_on_the_bad_release_only(tmp_path_factory, tmp_path):
    # threefry became partitionable by default in 0.5.0: the program lowers to other ops there, and the frozen
    # module computes the same bits on both, so only the program itself, traced by each release, can show it
    from shared_stores import bisected_rng_and_colsum, bisection_of

    store = bisected_rng_and_colsum(tmp_path_factory)  # rng bisected from 0.4.38 to 0.5.0, once for the suite
    result = bisection_of(store, "rng")
    assert (result["mode"], result["first_bad"], result["last_good"]) == ("retrace", "0.5.0", "0.4.38")
    script = _script(store, tmp_path, "rng")
    text = script.read_text()
    assert "# Needs: jax and numpy (the program imports nothing else)" in text
    assert "--with jax==0.4.38 --with jaxlib==0.4.38 python rng.py   # exit 0" in text
    assert "jax.random.normal(key, (64,))" in text  # the program's own source, inside a string literal
    good, bad = _run(_cached("0.4.38"), script), _run(_cached("0.5.0"), script)
    assert good.returncode == 0 and "result: as on jax 0.4.38 (last good)" in good.stdout, good.stdout + good.stderr
    assert "inputs: the bundle's" in good.stdout
    assert bad.returncode == 1 and "result: DIFFERS: jax 0.5.0 gives other outputs" in bad.stdout, bad.stdout
    assert "expected (jax 0.4.38 (last good)):" in bad.stdout and "got (here):" in bad.stdout
    assert not good.stderr.strip() and not bad.stderr.strip(), good.stderr + bad.stderr
    # the header's "what changed" line is the stored runs' own values: the first one the bad release printed
    first_got = bad.stdout.split("got (here):", 1)[1].split()[0].rstrip(",")
    assert f"jax 0.5.0 gives {first_got}" in text


@pytest.mark.crossversion
def test_a_compiler_changes_reproducer_is_the_frozen_module_against_the_last_good_releases_bits(tmp_path_factory,
                                                                                                 tmp_path):
    # colsum's float32 sums change in their last bits from jaxlib 0.5.0 to 0.5.1 (the compiler's: the same
    # StableHLO): the frozen script checks them against 0.5.0's outputs, any bit, not against the packed reference
    from shared_stores import bisected_rng_and_colsum, bisection_of

    store = bisected_rng_and_colsum(tmp_path_factory)  # colsum bisected by bits, frozen, once for the suite
    result = bisection_of(store, "colsum")
    assert (result["criterion"], result["first_bad"], result["mode"]) == ("bits", "0.5.1", "frozen")
    script = _script(store, tmp_path, "colsum")
    assert "REFERENCE_LABEL = 'jax 0.5.0 (last good)'" in script.read_text()
    good, bad = _run(_cached("0.5.0"), script), _run(_cached("0.5.1"), script)
    assert good.returncode == 0 and "result: as jax 0.5.0 (last good) (the same bits)" in good.stdout, good.stdout
    # any bit fails, and the script says how many elements differ, by how much, and that it is within the tolerance
    assert bad.returncode == 1 and "differ in their bits from jax 0.5.0 (last good), by at most " in bad.stdout, \
        bad.stdout
    said = re.search(r"result: DIFFERS: (\d+) elements of 1 of 1 outputs differ in their bits from jax 0\.5\.0 "
                     r"\(last good\), by at most ([0-9.e+-]+) \(all within the tolerance\)", bad.stdout)
    assert said and int(said[1]) > 0 and 0 < float(said[2]) < 1e-3, bad.stdout


@pytest.mark.crossversion
def test_compare_times_two_sides_in_their_own_processes_and_fails_only_on_a_real_slowdown(tmp_path, fresh_python):
    """`--compare A B`: a side that disables algsimp runs the while loop's reduce spot several times slower on every
    machine (examples/loop_programs.py: 3.4x on the 2-core VM at load 5), so B is judged slower; A against itself
    is not. Both sides are the newest release with only jax and numpy."""
    from loop_programs import while_program

    store = tmp_path / "store"
    fn, args = while_program("reduce")
    reprobundle.pack(jax.jit(fn), *args, name="loop", store=str(store), **PACK)
    script = _script(store, tmp_path, "loop")
    python = str(fresh_python)
    slow = f"{python}:XLA_FLAGS={minimize_chain.NO_ALGSIMP.split('XLA_FLAGS=', 1)[1]}"
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    env["JAX_PLATFORMS"] = "cpu"
    slower = subprocess.run([python, str(script), "--compare", python, slow, "--rounds", "1"], env=env,
                            capture_output=True, text=True, timeout=600)
    assert slower.returncode == 1 and "result: SLOWER: B is" in slower.stdout, slower.stdout + slower.stderr
    same = subprocess.run([python, str(script), "--compare", python, python], env=env,
                          capture_output=True, text=True, timeout=600)
    assert same.returncode == 0 and "result: SLOWER" not in same.stdout, same.stdout + same.stderr
    nouv = dict(env, PATH="/nonexistent")  # a release without uv: the two commands to run, exit 3
    manual = subprocess.run([python, str(script), "--compare", "0.4.31", "0.4.33"], env=nouv, capture_output=True,
                            text=True, timeout=120)
    assert manual.returncode == 3 and "pip install jax==0.4.33 numpy" in manual.stdout, manual.stdout


def _fresh(tmp_path_factory, version: str):
    """An environment with only jax, jaxlib and numpy of `version`, made by uv from its cache."""
    from uv import find_uv_bin

    venv = tmp_path_factory.mktemp(f"fresh-{version}") / "venv"
    uv = str(find_uv_bin())
    subprocess.run([uv, "venv", "-q", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([uv, "pip", "install", "-q", "--python", str(python), f"jax=={version}", f"jaxlib=={version}",
                    "numpy"], check=True, timeout=600)
    return python


@pytest.mark.crossversion
def test_the_zip_replays_itself_with_only_jax_and_numpy_on_the_oldest_and_newest_and_retraces(tmp_path,
                                                                                             tmp_path_factory,
                                                                                             fresh_python):
    """`python NAME.zip` in environments holding only jax, jaxlib and numpy (no msgpack, no flatbuffers): the frozen
    module and, with --retrace, the program traced by that release; nothing on stderr when it passes (0.4.30's
    MLIR prints `loc("-":0:0): error: unknown attribute code` from a route that gives way)."""
    store = tmp_path / "store"
    reprobundle.api.pack_script(str(PROGRAMS / "colsum.py"), name="colsum", store=str(store), **PACK)
    code, _, err = cli("export", "colsum", "-o", tmp_path / "colsum.zip", store=store)
    assert code == 0, err
    import os

    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    env["JAX_PLATFORMS"] = "cpu"
    for python, version in ((_fresh(tmp_path_factory, OLDEST), OLDEST), (fresh_python, NEWEST)):
        for extra in ([], ["--retrace"]):
            done = subprocess.run([str(python), "-I", str(tmp_path / "colsum.zip"), "--repeat", "2", "--json", *extra],
                                  env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
            assert done.returncode == 0, (version, extra, done.stdout, done.stderr)
            assert done.stderr == "", (version, extra, done.stderr)
            summary = json.loads(done.stdout)
            assert summary["jax"] == version and summary["outputs_ok"]
            assert summary["route"] == ("retrace" if extra else summary["route"]) and summary["route"]


def test_the_pure_python_msgpack_reader_reads_what_msgpack_writes(small_store_template):
    """worker/msgpack_read.py (the zip's reader where msgpack is not installed) against msgpack itself: every
    type and width reprobundle writes, a real manifest, and truncated or unknown bytes refused."""
    import msgpack

    from reprobundle.worker.msgpack_read import MsgpackError, unpackb

    values = [None, True, False, 0, 127, 128, -1, -32, -33, 255, 256, 65535, 65536, 2**32, 2**63 - 1, -2**63, 1.5,
              "x" * 40, "é" * 300, b"abc" * 30000, list(range(20)), {"a": {"b": [1.0, None]}},
              {str(i): i for i in range(70000)}]
    for value in values:
        assert unpackb(msgpack.packb(value, use_bin_type=True)) == value
    assert unpackb(msgpack.packb(1.5, use_single_float=True)) == 1.5
    manifest = next((small_store_template / "bundles").rglob("*.msgpack")).read_bytes()
    assert unpackb(manifest) == msgpack.unpackb(manifest, raw=False, strict_map_key=False)
    for bad in (msgpack.packb("abcdef")[:-2], b"\xc1", msgpack.packb(1) + b"\x00"):
        with pytest.raises(MsgpackError):
            unpackb(bad)


def test_an_issue_whose_script_is_too_large_offers_the_minimized_piece_on_its_first_screen(pieces):
    """chain's own script is over 64 KiB (8,192 float32 inputs of noise): the issue offers the piece minimize
    reduced it to (chain-min), its script inline, and `script chain` names it in its hint."""
    from markdown_it import MarkdownIt

    code, out, err = cli("issue", "chain", "--json", store=pieces)
    assert code == 0, err
    data = json.loads(out)
    assert data["script"]["kind"] == "piece" and data["script"]["piece"] == "chain-min@1"
    first = "\n".join(data["body"].splitlines()[:30])
    assert "**Reproducer:** `python chain-min-1.py`, the piece `reprobundle minimize` reduced (chain-min@1" in first
    assert "64 KiB" in first  # why not the whole program's
    tokens = MarkdownIt("commonmark").enable("table").parse(data["body"])
    lines = next(t.content for t in tokens if t.type == "fence" and t.info == "sh" and "chain-min-1.py" in t.content)
    assert f"{EXCESS_FLAG} python chain-min-1.py   # exit 1: the difference" in lines, lines  # the piece's setting
    compile(data["script"]["text"], "chain-min-1.py", "exec")
    code, _, err = cli("script", "chain", store=pieces)
    assert code == 2 and "reprobundle script chain-min@1 -o chain-min.py" in err and "Traceback" not in err


def _other_python_release() -> tuple[str, str]:
    """A release on the package index that does not take the Python here, and the Python its uv line names."""
    from reprobundle.envs.env_folders import default_root
    from reprobundle.envs.package_index import CACHE_FILE, PackageIndex, python_to_name

    index = PackageIndex(default_root() / CACHE_FILE)
    for release in ("0.11.0", "0.4.30", "0.4.14"):  # Python >= 3.12; jaxlib wheels up to 3.12; up to 3.11
        python = python_to_name(index, release)
        if python is not None:
            return release, python
    pytest.skip("every candidate release takes the Python here")


@pytest.mark.crossversion
def test_compare_exits_3_in_one_line_when_a_side_cannot_install(pieces, tmp_path, fresh_python):
    """A release that does not exist, or one whose Requires-Python (or jaxlib wheels) exclude the Python here:
    `--compare` says why in one line and exits 3 (uv's own error is not the script's 1); the uv line of such a
    release names the Python it needs."""
    import os

    from uv import find_uv_bin

    from reprobundle.bundle.program_script import uv_line

    script = _script(pieces, tmp_path, "chain-min")
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "PYTHONPATH")}
    env.update(JAX_PLATFORMS="cpu", PATH=os.path.dirname(find_uv_bin()) + os.pathsep + env.get("PATH", ""))
    release, python = _other_python_release()
    assert f"uv run --no-project --python {python} --with jax=={release} " in uv_line(release, [], "x.py", python)
    for side in ("0.0.1", release):
        done = subprocess.run([str(fresh_python), str(script), "--compare", side, str(fresh_python), "--rounds", "1"],
                              env=env, capture_output=True, text=True, timeout=300)
        said = [line for line in done.stdout.splitlines() if line.startswith("result:")]
        assert done.returncode == 3 and "Traceback" not in done.stdout + done.stderr, done.stdout + done.stderr
        assert len(said) == 1 and said[0].startswith(f"result: could not run: A ({side}) did not start: "), said
        assert (f"jax=={side}" in said[0]) if side == "0.0.1" else ("Python" in said[0]), said
