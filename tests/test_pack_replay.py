"""End to end on the installed JAX: pack through the Python API and the CLI, replay, inspect, break things."""

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_runner import cli
from manifests import assert_schema_valid

import reprobundle
from reprobundle.bundle import manifest as mf
from reprobundle.bundle.registry import Registry, blob_key
from reprobundle.errors import InputMismatchError, UsageError
from reprobundle.run.spent import CATEGORIES

ROOT = Path(__file__).parent.parent
TIMED = dict(warmup=1, repeat=5)  # five timed calls: the manifest's samples are counted below


def _f(x, y):
    return jnp.tanh(x @ y).T, (x * 2).sum()


@pytest.fixture
def args():
    rng = np.random.default_rng(1)
    return (jnp.asarray(rng.standard_normal((8, 16), dtype=np.float32)),
            jnp.asarray(rng.standard_normal((16, 4), dtype=np.float32)))


def test_pack_and_replay_python_api(store_dir, args):
    ref = reprobundle.pack(jax.jit(_f), *args, name="tanh", store=str(store_dir), description="d",
                           labels={"team": "x"}, **TIMED)
    assert (ref.name, ref.version) == ("tanh", 1)
    registry = Registry.open(store_dir)
    bundle = registry.resolve("tanh@1")
    m = bundle.manifest
    assert_schema_valid(m)
    assert m["labels"] == {"team": "x"}
    assert m["environment"]["jax"] == jax.__version__
    assert len(m["reference"]["timing"]["samples_ns"]) == 5
    assert {"hlo_before", "hlo_after"} <= set(m["artifacts"])
    expected = [np.asarray(o) for o in jax.tree_util.tree_leaves(_f(*args))]
    for leaf, want in zip(m["reference"]["outputs"], expected):
        got = np.frombuffer(registry.get_blob(leaf["blob"]), dtype=leaf["dtype"]).reshape(leaf["shape"])
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)

    result = reprobundle.replay("tanh", store=str(store_dir), **TIMED)
    run = result.run
    assert run["status"] == "ok", run["reason"]
    assert run["check"]["ok"] and run["check"]["bit_identical"]
    timing = run["timing"]
    assert len(timing["steps"]) == 5 and timing["rounds"] == [5]  # one version: one round of 5 steps
    assert sum(timing["steps"]) == len(timing["samples_ns"]) and timing["steps"][0] > 1  # a tiny function: batches
    # where its worker's time went (run/spent.py): the timed calls are the samples, the rest the worker's phases
    spent = run["spent"]
    assert {"start", "load", "compile", "calibrate", "timed", "profile"} <= set(spent) <= set(CATEGORIES)
    assert spent["timed"] == pytest.approx(sum(timing["samples_ns"]) / 1e9, abs=1e-3)
    assert sum(v for k, v in spent.items() if k != "env") <= run["duration_s"] + 1e-3
    assert_schema_valid(run, "run")
    assert [r["run_id"] for r in registry.runs(bundle.ref.bundle_id)] == [run["run_id"]]


@pytest.mark.slow
def test_same_inputs_stored_once(store_dir, args):
    reprobundle.pack(jax.jit(_f), *args, name="a", store=str(store_dir), **TIMED)
    registry = Registry.open(store_dir)
    before = set(registry.store.list("blobs"))
    m1 = registry.resolve("a").manifest
    reprobundle.pack(jax.jit(_f), *args, name="a", store=str(store_dir), **TIMED)
    m2 = registry.resolve("a@2").manifest
    assert [l["blob"] for l in m1["inputs"]["leaves"]] == [l["blob"] for l in m2["inputs"]["leaves"]]
    new = set(registry.store.list("blobs")) - before
    input_keys = {blob_key(l["blob"]["digest"]) for l in m2["inputs"]["leaves"]}
    assert not (new & input_keys)


@pytest.mark.slow
def test_bfloat16_and_nested_pytree(store_dir):
    sys.path.insert(0, str(ROOT / "examples"))
    try:
        import mlp_train
    finally:
        sys.path.pop(0)
    fn, a = mlp_train.make()
    ref = reprobundle.pack(fn, *a, name="mlp", store=str(store_dir), **TIMED)
    bundle = Registry.open(store_dir).resolve(str(ref))
    assert bundle.manifest["function"]["in_tree"]["kind"] == "tuple"
    assert len(bundle.manifest["inputs"]["leaves"]) == len(jax.tree_util.tree_leaves(a))

    x = jnp.linspace(-1, 1, 64, dtype=jnp.bfloat16).reshape(8, 8)
    ref = reprobundle.pack(jax.jit(lambda t: (t @ t).astype(jnp.bfloat16)), x, name="bf16", store=str(store_dir), **TIMED)
    m = Registry.open(store_dir).resolve(str(ref)).manifest
    assert m["inputs"]["leaves"][0]["dtype"] == "bfloat16"
    run = reprobundle.replay("bf16", store=str(store_dir), **TIMED).run
    assert run["status"] == "ok" and run["check"]["bit_identical"]


@pytest.mark.slow
def test_synthetic_inputs(store_dir, args):
    ref = reprobundle.pack(jax.jit(_f), *args, name="syn", store=str(store_dir), synthetic_inputs=True, seed=7, **TIMED)
    m = Registry.open(store_dir).resolve(str(ref)).manifest
    assert all("synthetic" in l and "blob" not in l for l in m["inputs"]["leaves"])
    assert m["inputs"]["leaves"][0]["synthetic"]["seed"] == 7
    run = reprobundle.replay("syn", store=str(store_dir), **TIMED).run
    assert run["status"] == "ok" and run["check"]["bit_identical"]


def test_cli_pack_ls_show_verify_tag_export_replay(store_dir, tmp_path):
    code, out, err = cli("pack", str(ROOT / "examples/attention.py:make_small"), "--name", "attn", "--label", "k=v",
                         "--repeat", "5", "--warmup", "1", "--json", store=store_dir)
    assert code == 0, err
    packed = json.loads(out)
    assert packed["name"] == "attn" and packed["version"] == 1
    m = Registry.open(store_dir).resolve("attn").manifest
    assert "def attention" in Registry.open(store_dir).get_blob(m["function"]["source"]).decode()
    assert "xla_dump" in m["artifacts"]

    code, out, _ = cli("ls", "--json", store=store_dir)
    assert code == 0 and [r["ref"] for r in json.loads(out)] == ["attn@1"]
    code, out, _ = cli("show", "attn", store=store_dir)
    assert code == 0 and "attention" in out and "float32[1, 128, 512]" in out
    code, out, _ = cli("verify", "attn@1", store=store_dir)
    assert code == 0 and "intact" in out
    code, out, _ = cli("tag", "attn@1", "baseline", store=store_dir)
    assert code == 0
    code, out, _ = cli("show", "attn@baseline", "--json", store=store_dir)
    assert json.loads(out)["ref"]["version"] == 1

    zpath = tmp_path / "attn.zip"
    code, out, _ = cli("export", "attn", "-o", str(zpath), store=store_dir)
    assert code == 0 and zipfile.is_zipfile(zpath)
    code, out, err = cli("replay", str(zpath), "--repeat", "5", "--warmup", "1", "--json")
    assert code == 0, err
    assert "replaying attn@1" in err and "round 1/" in err  # progress on stderr in --json mode too, stdout the JSON
    runs = json.loads(out)["runs"]
    assert runs[0]["status"] == "ok" and runs[0]["check"]["ok"]


@pytest.mark.slow
def test_cli_as_real_subprocess(store_dir):
    env = {**os.environ, "REPROBUNDLE_STORE": str(store_dir)}
    exe = Path(sys.executable).with_name("reprobundle")
    done = subprocess.run([str(exe), "pack", str(ROOT / "examples/attention.py:make_small"), "--name", "sub",
                           "--repeat", "3", "--warmup", "1"], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "packed sub@1" in done.stdout
    done = subprocess.run([str(exe), "replay", "sub", "--repeat", "3", "--warmup", "1"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "reference" in done.stdout and " ok " in done.stdout
    done = subprocess.run([str(exe), "show", "nosuch"], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 4
    assert done.stderr.startswith("error: no bundle named 'nosuch'") and "Traceback" not in done.stderr


def test_pack_exported_with_npz(store_dir, tmp_path, args):
    from jax import export

    exp = export.export(jax.jit(_f))(*args)
    (tmp_path / "f.jax").write_bytes(exp.serialize())
    np.savez(tmp_path / "in.npz", *[np.asarray(a) for a in args])
    code, out, err = cli("pack", "--exported", str(tmp_path / "f.jax"), "--inputs", str(tmp_path / "in.npz"),
                         "--name", "ex", "--repeat", "3", store=store_dir)
    assert code == 0, err
    np.savez(tmp_path / "bad.npz", np.zeros((8, 15), np.float32), np.asarray(args[1]))
    code, out, err = cli("pack", "--exported", str(tmp_path / "f.jax"), "--inputs", str(tmp_path / "bad.npz"),
                         "--name", "ex", store=store_dir)
    assert code == 2 and "argument 0: expected float32[8, 16], got float32[8, 15]" in err
    assert Registry.open(store_dir).versions("ex") == [1]


@pytest.mark.parametrize("argv,code,message", [
    (["show", "Bad Name!"], 2, "invalid ref"),
    (["show", "ghost@3"], 4, "no bundle ghost@3"),
    (["pack", "examples/attention.py:nope", "--name", "x"], 2, "has no function nope()"),
    (["pack", "examples/missing.py", "--name", "x"], 2, "does not exist"),
    (["pack", "README.md", "--name", "x"], 2, "README.md is not a Python script"),
    (["pack", "examples/attention.py", "--name", "Bad/Name"], 2, "invalid bundle name"),
    (["replay", "/nonexistent/b.zip"], 4, "does not exist"),
    (["ls", "--store", "ftp://x/y"], 2, "unsupported store URL"),
    (["no-such-command"], 2, "No such command"),
    (["pack", "examples/attention.py"], 2, "Missing option '--name'"),
])
def test_cli_errors_are_one_clear_line(store_dir, argv, code, message, monkeypatch):
    monkeypatch.chdir(ROOT)
    got, out, err = cli(*argv, store=store_dir if "--store" not in argv else None)
    assert got == code, err
    err = "".join(line for line in err.splitlines(True) if not re.match(r"\[\d+:\d\d", line))  # progress lines
    assert err.startswith("error: ") and message in err and "Traceback" not in err


def test_corrupted_blob_detected_by_verify_and_replay(store_dir, args):
    reprobundle.pack(jax.jit(_f), *args, name="c", store=str(store_dir), **TIMED)
    registry = Registry.open(store_dir)
    digest = registry.resolve("c").manifest["inputs"]["leaves"][0]["blob"]["digest"]
    path = store_dir / blob_key(digest)
    raw = bytearray(path.read_bytes())
    raw[0] ^= 1
    path.write_bytes(bytes(raw))
    code, out, err = cli("verify", "c", store=store_dir)
    assert code == 6 and digest in out
    code, out, err = cli("replay", "c", store=store_dir)
    assert code == 6 and digest in err


def test_truncated_zip_and_future_manifest(store_dir, tmp_path, args):
    reprobundle.pack(jax.jit(_f), *args, name="z", store=str(store_dir), **TIMED)
    zpath = tmp_path / "z.zip"
    assert cli("export", "z", "-o", str(zpath), store=store_dir)[0] == 0
    zpath.write_bytes(zpath.read_bytes()[:-200])
    code, _, err = cli("replay", str(zpath))
    assert code in (3, 6) and "truncated or corrupt" in err

    registry = Registry.open(store_dir)
    key = "bundles/z/1.msgpack"
    m = mf.decode_manifest(registry.store.get(key))
    registry.store.put(key, mf.encode({**m, "format_version": 99}))
    code, _, err = cli("show", "z", store=store_dir)
    assert code == 6 and "format_version 99" in err and "upgrade reprobundle" in err


def test_input_mismatch_python_api(store_dir, args):
    from reprobundle.capture.export import check_inputs
    with pytest.raises(InputMismatchError, match="takes 2 array arguments, 1 were given"):
        check_inputs({"in_avals": [{"shape": [1], "dtype": "float32"}] * 2}, [np.zeros(1, np.float32)])
    with pytest.raises(UsageError):
        reprobundle.pack(jax.jit(_f), *args, name="x", store=str(store_dir), repeat=0)


@pytest.mark.slow
def test_pack_raw_stablehlo_module(store_dir, tmp_path, args):
    (tmp_path / "module.mlir").write_text(jax.jit(_f).lower(*args).as_text())
    np.savez(tmp_path / "in.npz", *[np.asarray(a) for a in args])
    code, out, err = cli("pack", "--stablehlo", str(tmp_path / "module.mlir"), "--inputs", str(tmp_path / "in.npz"),
                         "--name", "raw", "--repeat", "3", "--warmup", "1", "--json", store=store_dir)
    assert code == 0, err
    m = Registry.open(store_dir).resolve("raw").manifest
    assert m["function"]["kind"] == "stablehlo"
    assert [a["shape"] for a in m["function"]["fields"]["out_avals"]] == [[4, 8], []]
    run = reprobundle.replay("raw", store=str(store_dir), **TIMED).run
    assert run["status"] == "ok" and run["check"]["bit_identical"]
    (tmp_path / "bad.mlir").write_text("this is not mlir")
    code, out, err = cli("pack", "--stablehlo", str(tmp_path / "bad.mlir"), "--inputs", str(tmp_path / "in.npz"),
                         "--name", "raw", store=store_dir)
    assert code == 2 and "not a StableHLO module" in err


PACK_FROM_A_PROGRAM = """\
import sys, warnings
warnings.simplefilter("always")
import jax, jax.numpy as jnp, numpy as np
import reprobundle
jnp.ones(4).block_until_ready()  # JAX's threads are up before pack starts its workers
ref = reprobundle.pack(jax.jit(lambda x: jnp.tanh(x).sum()), np.ones((4, 4), np.float32), name="f",
                       store=sys.argv[1], warmup=1, repeat=2, profile=False, dump=False)
print(ref)
"""


def test_packing_from_a_program_that_runs_jax_forks_without_a_warning(tmp_path):
    """On the CPU a worker runs under a memory limit (run/replay_options.py's default); it is set by its launcher, never by a preexec_fn in a fork of the host: JAX warns
    ("os.fork() was called ... deadlock") at every fork of a process whose backend is up."""
    done = subprocess.run([sys.executable, "-c", PACK_FROM_A_PROGRAM, str(tmp_path / "store")], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "f@1"
    assert "os.fork() was called" not in done.stderr, done.stderr


def test_max_time_starts_no_round_that_would_end_past_it(small_store_template, tmp_path):
    """--max-time counts from the replay's start (its environments in it) and no round begins past it, a verdict
    settled or not; the first round always runs, and every run records when each round ended."""
    from small_bundle import copy_of

    store = copy_of(small_store_template, tmp_path / "store")
    code, out, err = cli("replay", "small", "--jax", "installed", "--jax", "installed", "--repeat", "16",
                         "--warmup", "0", "--no-profile", "--max-time", "1", "--json", store=store)
    assert code == 0, err
    from reprobundle.bundle.registry import Registry

    registry = Registry.open(store)
    ids = {r["run_id"] for r in json.loads(out)["runs"]}
    stored = [r for r in registry.runs(registry.resolve("small").ref.bundle_id) if r["run_id"] in ids]
    assert len(stored) == 2
    for run in stored:
        schedule = run["environment"]["conditions"]["schedule"]
        assert schedule["max_time_s"] == 1 and len(schedule["round_ends_s"]) == schedule["rounds"] >= 1
        assert all(end < 1 for end in schedule["round_ends_s"][:-1]), schedule  # each round began within it
        assert schedule["stopped"] in ("time limit", "settled"), schedule
