"""Capture from running programs: unmodified scripts run under `reprobundle capture`, and the in-process
`reprobundle.capture()` block. Each bundle is checked against what the program itself computed at that call."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import quick
from cli_runner import cli

import reprobundle
from reprobundle import api
from reprobundle.bundle.registry import Registry
from reprobundle.run.replay import leaf_array, reference_arrays

ROOT = Path(__file__).parent.parent
PROGRAMS = ROOT / "tests" / "programs"


def capture_cli(store, *options, program):
    """`reprobundle capture OPTIONS --store STORE -- python PROGRAM...` in this process (the program is a child)."""
    return cli("capture", *options, *quick.PACK_ARGS, "--store", str(store), "--", sys.executable, *map(str, program))


def _bundle(store, ref):
    registry = Registry.open(store)
    bundle = registry.resolve(str(ref))
    return registry, bundle


def _inputs(registry, bundle) -> dict[str, np.ndarray]:
    leaves = bundle.manifest["inputs"]["leaves"]
    return {leaf["path"]: leaf_array(registry.get_blob(leaf["blob"]), leaf) for leaf in leaves}


def _outputs(registry, bundle) -> dict[str, np.ndarray]:
    paths = [o["path"] for o in bundle.manifest["function"]["outputs"]]
    return dict(zip(paths, reference_arrays(registry, bundle)))


# --------------------------------------------------------------------------------------- whole programs


@pytest.mark.crossversion
def test_nnx_training_loop_train_step_at_call_3_replays_on_installed_and_072(store_dir, tmp_path):
    """examples/train_nnx.py, unmodified: its nnx.jit train step (nnx.value_and_grad + optax adamw, model and
    optimizer updated in place) packed at call 3, its outputs those the program computed at step 3, on the
    installed JAX and on 0.7.2."""
    saved = tmp_path / "step3.npz"
    code, out, err = capture_cli(store_dir, "--match", "train_step", "--call", "3", "--json",
                                 program=[ROOT / "examples/train_nnx.py", "--steps", "5", "--save-step", "3",
                                          "--out", saved])
    assert code == 0, err
    data = json.loads(out)
    assert [c["function"]["name"] for c in data["captures"]] == ["train_step"], data
    capture = data["captures"][0]
    assert capture["call"] == 3 and capture["function"]["via"] == "nnx.jit" and data["exit_code"] == 0
    assert capture["replay"].startswith("reprobundle replay train_step@1")
    registry, bundle = _bundle(store_dir, capture["ref"]["name"])
    assert bundle.manifest["labels"]["capture.call"] == "3"
    assert "examples/train_nnx.py" in bundle.manifest["description"]

    program = np.load(saved)
    params = [program[k] for k in program.files if k != "loss"]  # the model's parameters after step 3
    outputs = _outputs(registry, bundle)
    loss_path = [p for p, a in outputs.items() if a.shape == ()][-1]
    np.testing.assert_allclose(outputs[loss_path], program["loss"], rtol=1e-6)
    updated_model = [a for p, a in outputs.items() if p.startswith("out[0][0]")]
    assert len(updated_model) == len(params)
    for got, want in zip(updated_model, params):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)

    runs = api.replay(capture["ref"]["name"], ["installed", "0.7.2"], store=str(store_dir), warmup=1, repeat=3,
                      rounds=1, profile=False, dump=False).runs
    for run in runs:
        assert run["status"] == "ok" and run["check"]["ok"], (run["requested"], run["reason"], run["check"])
        replayed = dict(zip(outputs, (leaf_array(registry.get_blob(o["blob"]), o) for o in run["outputs"])))
        np.testing.assert_allclose(replayed[loss_path], program["loss"], rtol=1e-4)
        for got, want in zip([a for p, a in replayed.items() if p.startswith("out[0][0]")], params):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_equinox_inference_script_default_call(store_dir, tmp_path):
    """eqx.filter_jit forward over 3 batches: without --call, the first call after the compiling one (batch 2),
    with that batch's input and prediction."""
    saved = tmp_path / "pred.npz"
    result = api.capture_program([sys.executable, str(PROGRAMS / "eqx_infer.py"), "3", str(saved)],
                                 match="predict", store=str(store_dir), **quick.PACK)
    assert result.exit_code == 0 and not result.failures, result.failures
    (capture,) = result.captures
    assert capture["call"] == 2 and capture["function"]["via"] == "eqx.filter_jit"
    registry, bundle = _bundle(store_dir, capture["ref"])
    program = np.load(saved)
    inputs = list(_inputs(registry, bundle).values())
    assert any(a.shape == program["x2"].shape and np.array_equal(a, program["x2"]) for a in inputs)
    prediction = [a for a in _outputs(registry, bundle).values() if a.shape == program["y2"].shape]
    np.testing.assert_allclose(prediction[0], program["y2"], rtol=1e-6)
    assert all(s["path"].startswith("static") for s in bundle.manifest["function"]["static"])  # eqx's static half


@pytest.mark.slow
def test_list_then_top_1_finds_the_slowest_computation(store_dir):
    """--list times every jitted computation (block_until_ready, said so); --top 1 packs only the slowest: a
    lax.scan over 16 layers created by a factory (a jitted function made at run time)."""
    code, out, err = cli("capture", "--list", "--json", "--", sys.executable, str(PROGRAMS / "small_loop.py"), "3")
    assert code == 0, err
    listing = json.loads(out)
    rows = {r["name"]: r for r in listing["computations"]}
    assert set(rows) == {"cheap", "medium", "make_heavy.<locals>.heavy"}
    assert all(r["calls"] == 3 and r["compile_ns"] > 0 and r["median_ns"] > 0 for r in rows.values())
    assert "block_until_ready" in listing["timing_note"] and not listing["captures"]
    code, out, err = cli("capture", "--list", "--", sys.executable, str(PROGRAMS / "small_loop.py"), "1")
    assert code == 0 and "MEDIAN RUN" in out and "block_until_ready" in out

    result = api.capture_program([sys.executable, str(PROGRAMS / "small_loop.py"), "3"], top=1,
                                 store=str(store_dir), **quick.PACK)
    assert [c["function"]["name"] for c in result.captures] == ["make_heavy.<locals>.heavy"]
    heavy = next(r for r in result.computations if r["name"] == "make_heavy.<locals>.heavy")
    assert heavy["total_ns"] == max(r["total_ns"] for r in result.computations)
    assert [b.ref.name for b in Registry.open(store_dir).iter_bundles()] == ["heavy"]


@pytest.mark.slow
def test_donated_buffers_are_copied_before_the_call(store_dir, tmp_path):
    """jax.jit(step, donate_argnums=0), jax.value_and_grad inside: the bundle holds the state as it was before
    call 2 donated it, and the outputs the program got from that call."""
    saved = tmp_path / "donate.npz"
    result = api.capture_program([sys.executable, str(PROGRAMS / "donate.py"), "4", str(saved)], match="step",
                                 call=2, store=str(store_dir), **quick.PACK)
    assert result.exit_code == 0 and len(result.captures) == 1, result.failures
    registry, bundle = _bundle(store_dir, result.captures[0]["ref"])
    program = np.load(saved)
    inputs = _inputs(registry, bundle)
    np.testing.assert_array_equal(inputs["state['w']"], program["w_in"])
    np.testing.assert_array_equal(inputs["state['b']"], program["b_in"])
    outputs = _outputs(registry, bundle)
    np.testing.assert_allclose(outputs["out[0]['w']"], program["w_out"], rtol=1e-6)
    np.testing.assert_allclose(outputs["out[1]"], program["loss"], rtol=1e-6)


@pytest.mark.slow
def test_crash_after_the_capture_keeps_the_bundle_and_the_exit_code(store_dir):
    code, out, err = capture_cli(store_dir, "--match", "update", program=[PROGRAMS / "crash.py"])
    assert code == 1, (out, err)  # the program's own exit code
    assert "captured 1 computation" in out and "exit code 1" in out
    registry, bundle = _bundle(store_dir, "update")
    assert bundle.manifest["labels"]["capture.call"] == "2"
    np.testing.assert_allclose(_inputs(registry, bundle)["x"], np.sin(np.arange(16.0)) * 2, rtol=1e-6)


@pytest.mark.slow
def test_ctrl_c_stops_both_and_keeps_what_was_captured(store_dir, tmp_path):
    """SIGINT to the process group, as a terminal's Ctrl-C: the program stops, the capture is packed, 130."""
    program = tmp_path / "forever.py"
    program.write_text("import time, jax, jax.numpy as jnp\nstep = jax.jit(lambda x: x * 2.0)\nx = jnp.ones(3)\n"
                       "while True:\n    x = step(x)\n    time.sleep(0.02)\n")
    # SIGINT handled as a terminal session does (a test runner started in the background may ignore it, and an
    # ignored signal stays ignored across exec; a handled one reverts to the default, which Python then handles)
    launcher = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler); " \
               "from reprobundle.cli import run; run()"
    cmd = [sys.executable, "-c", launcher, "capture", "--match", "lambda", *quick.PACK_ARGS, "--store", str(store_dir),
           "--", sys.executable, str(program)]
    proc = subprocess.Popen(cmd, start_new_session=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    err_lines = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        err_lines.append(line)
        if "captured" in line or not line:
            break
    os.killpg(proc.pid, signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (out, err, err_lines)
    assert "interrupted, exit code 130" in out and "captured 1 computation" in out
    assert Registry.open(store_dir).resolve("lambda").manifest["labels"]["capture.call"] == "2"


# -------------------------------------------------------------------------------------------- in process


@pytest.mark.slow
def test_python_api_sees_functions_jitted_before_the_block(store_dir):
    @jax.jit
    def train_step(w, x):
        return w - 0.1 * jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)

    @jax.jit
    def other(x):
        return x * 2

    w, x = jnp.ones((8, 8)), jnp.ones((4, 8))
    w = train_step(w, x)  # compiled before the capture starts
    other(x)
    with reprobundle.capture(match="train_step", call=2, store=str(store_dir), **quick.PACK) as cap:
        expected_inputs = None
        for i in range(1, 4):
            if i == 2:
                expected_inputs = np.array(w)
            w = train_step(w, x)
            other(x)
    assert [r.name for r in cap.refs] == ["train_step"]
    # `other` does not match: not recorded; names are qualified names
    assert [r["name"].rpartition(".")[2] for r in cap.computations] == ["train_step"]
    registry, bundle = _bundle(store_dir, cap.refs[0])
    np.testing.assert_array_equal(_inputs(registry, bundle)["w"], expected_inputs)
    assert train_step(w, x).shape == (8, 8)  # jax's own functions are back


@pytest.mark.slow
def test_python_api_all_signatures_dynamic_functions_and_a_raising_block(store_dir):
    """Functions made by jax.jit inside a loop are one computation per source function and signature; with
    all_signatures each signature is captured once; the bundles are packed although the block raised."""
    with pytest.raises(ValueError, match="boom"):
        with reprobundle.capture(match="scale", call=1, all_signatures=True, store=str(store_dir), **quick.PACK) as cap:
            for n in (4, 4, 6, 4, 6):
                def scale(v):
                    return v * 3.0

                jax.jit(scale)(jnp.ones(n))
            raise ValueError("boom")
    rows = sorted(cap.computations, key=lambda r: r["signature"])
    assert [(r["signature"], r["calls"] >= 1) for r in rows] == [(1, True), (2, True)]
    assert sorted(r.name for r in cap.refs) == ["scale-s1", "scale-s2"]
    shapes = [_inputs(*_bundle(store_dir, r))["v"].shape for r in sorted(cap.refs, key=lambda r: r.name)]
    assert shapes == [(4,), (6,)]


def test_unexportable_computation_is_listed_with_its_reason_and_the_program_goes_on(store_dir):
    @jax.jit
    def noisy(x):
        jax.debug.print("x = {}", x)
        return x + 1

    with reprobundle.capture() as listing:
        noisy(jnp.ones(2))
    (row,) = listing.computations
    assert "callback" in row["note"]

    with reprobundle.capture(match="noisy", call=1, store=str(store_dir), **quick.PACK) as cap:
        y = noisy(jnp.ones(2))
        y = noisy(y)
    np.testing.assert_array_equal(y, [3.0, 3.0])  # the program's results are untouched
    assert cap.refs == [] and len(cap.failures) == 1
    assert "callback" in cap.failures[0]["reason"], cap.failures
