"""Tests for the reprobundle/worker package: the replay worker runs as a real subprocess.

All worker subprocesses are started together by one module-scoped fixture (each
one imports jax, which dominates the run time), then the tests inspect results.
"""
from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import msgpack
import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKER_PY = ROOT / "reprobundle" / "worker"


def _load_worker():
    """The worker package loaded from its folder as the replay environments load it (not as part of the host
    package), its modules' names merged into one namespace for the tests."""
    import types

    name = "_rb_worker_under_test"
    spec = importlib.util.spec_from_file_location(name, str(WORKER_PY / "__init__.py"),
                                                  submodule_search_locations=[str(WORKER_PY)])
    package = importlib.util.module_from_spec(spec)
    sys.modules[name] = package
    spec.loader.exec_module(package)
    merged = types.SimpleNamespace()
    for module in sorted(p.stem for p in WORKER_PY.glob("*.py") if not p.stem.startswith("__")):
        vars(merged).update(vars(importlib.import_module(f"{name}.{module}")))
    return merged


W = _load_worker()

jax = pytest.importorskip("jax")
jnp = pytest.importorskip("jax.numpy")
from jax import export as jexport

try:
    import flatbuffers  # noqa: F401

    HAVE_FLATBUFFERS = True
except ImportError:
    HAVE_FLATBUFFERS = False


# ---------------------------------------------------------------------------
# pure helpers (no subprocess)
# ---------------------------------------------------------------------------


def test_loading_worker_does_not_import_jax():
    code = ("import importlib.util, sys; spec = importlib.util.spec_from_file_location('w', %r, "
            "submodule_search_locations=[%r]); "
            "w = importlib.util.module_from_spec(spec); sys.modules['w'] = w; spec.loader.exec_module(w); "
            "import w.main, w.synthetic, w.protocol; "
            "a = w.synthetic.synthetic_array((3,), 'float32', {'distribution': 'normal', 'seed': 0}); "
            "assert 'jax' not in sys.modules and 'jaxlib' not in sys.modules, 'jax imported'; "
            "print(w.protocol.PROTOCOL_VERSION, a.dtype)" % (str(WORKER_PY / "__init__.py"), str(WORKER_PY)))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), check=False)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1", "float32"]


def test_package_import_of_worker_does_not_import_jax():
    # the host does `from reprobundle.worker.synthetic import synthetic_array` (this also runs the package __init__)
    code = ("import sys; sys.path.insert(0, %r); from reprobundle.worker.synthetic import synthetic_array; "
            "synthetic_array((2,), 'bfloat16', {'distribution': 'uniform', 'seed': 1}); "
            "assert 'jax' not in sys.modules, 'jax imported'" % str(ROOT))
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=str(ROOT), check=False)
    assert p.returncode == 0, p.stderr


def _sha(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


def test_synthetic_determinism_and_golden_values():
    spec = {"distribution": "normal", "seed": 42}
    a = W.synthetic_array((1000,), "float64", spec)
    b = W.synthetic_array((1000,), "float64", dict(spec))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, W.synthetic_array((1000,), "float64", {"distribution": "normal", "seed": 43}))
    # value of element i depends only on (seed, i): independent of shape and of chunking
    big = W.synthetic_array((2, 3 * W._CHUNK + 7), "float64", spec).reshape(-1)
    assert np.array_equal(big[:1000], a)
    odd = W.synthetic_array((W._CHUNK + 3,), "float64", {"distribution": "uniform", "seed": 5})
    assert np.array_equal(odd[:11], W.synthetic_array((11,), "float64", {"distribution": "uniform", "seed": 5}))
    # golden values: pin the stream so that any change to the generator is deliberate
    # (the host computes reference outputs with the same function).
    golden = {
        ("normal", "float64"): _sha(W.synthetic_array((257,), "float64", {"distribution": "normal", "seed": 7})),
        ("uniform", "float32"): _sha(W.synthetic_array((257,), "float32", {"distribution": "uniform", "seed": 7})),
        ("randint", "int32"): _sha(W.synthetic_array((257,), "int32", {"distribution": "randint", "seed": 7,
                                                                          "low": -3, "high": 9})),
    }
    assert golden == GOLDEN_SYNTH, golden
    first = W.synthetic_array((4,), "float64", {"distribution": "normal", "seed": 0})
    np.testing.assert_array_equal(first, np.array(GOLDEN_NORMAL_SEED0))


# Verified identical on numpy 1.26 / 2.2.6 / 2.4.6 / 2.5.5 (Python 3.9, 3.11, 3.12).
GOLDEN_SYNTH = {
    ("normal", "float64"): "dc5f8282d6b364e5",
    ("uniform", "float32"): "0f7348c3406a9228",
    ("randint", "int32"): "a83e6892bcf991cf",
}
GOLDEN_NORMAL_SEED0 = [-1.8839083333524405, 0.8645068595575147, 0.22760793546360528, -0.042112684686839194]


def test_synthetic_distributions_and_dtypes():
    n = W.synthetic_array((200_000,), "float64", {"distribution": "normal", "seed": 1, "mean": 3.0, "std": 2.0})
    assert abs(n.mean() - 3.0) < 0.03 and abs(n.std() - 2.0) < 0.03
    u = W.synthetic_array((100_000,), "float64", {"distribution": "uniform", "seed": 1, "low": -2, "high": 5})
    assert u.min() >= -2 and u.max() < 5 and abs(u.mean() - 1.5) < 0.05
    r = W.synthetic_array((100_000,), "int8", {"distribution": "randint", "seed": 1, "low": -4, "high": 4})
    assert r.dtype == np.int8 and set(np.unique(r).tolist()) == set(range(-4, 4))
    bf = W.synthetic_array((3, 5), "bfloat16", {"distribution": "normal", "seed": 2})
    assert bf.dtype.name == "bfloat16" and bf.shape == (3, 5) and np.isfinite(bf.astype(np.float32)).all()
    bits = W.synthetic_array((10_000,), "bool", {"distribution": "uniform", "seed": 3})
    assert bits.dtype == np.bool_ and 0.45 < bits.mean() < 0.55
    c = W.synthetic_array((4,), "complex64", {"distribution": "normal", "seed": 4})
    assert c.dtype == np.complex64 and np.all(c.imag != 0)
    assert not W.synthetic_array((2, 2), "float8_e4m3fn", {"distribution": "zeros"}).astype(np.float32).any()
    assert W.synthetic_array((2,), "int32", {"distribution": "ones"}).tolist() == [1, 1]
    with pytest.raises(ValueError):
        W.synthetic_array((2,), "float32", {"distribution": "cauchy"})


def test_deterministic_elementary_functions_are_accurate():
    x = np.linspace(1e-300, 1.0, 100_001)[1:]
    assert np.max(np.abs(W._det_log(x.copy()) - np.log(x))) < 4e-15
    f = np.linspace(0.0, 1.0, 10_001)[:-1]
    s, c = W._det_sincos_quarter(f.copy())
    assert np.max(np.abs(s - np.sin(f * np.pi / 2))) < 1e-15
    assert np.max(np.abs(c - np.cos(f * np.pi / 2))) < 1e-15


def test_strip_locations_and_artifact_version():
    f = jax.jit(lambda x: jnp.sin(x) * 2)
    exp = jexport.export(f)(jax.ShapeDtypeStruct((3,), jnp.float32))
    text = exp.mlir_module()
    stripped = W.strip_mlir_locations(text)
    assert "loc(" not in stripped and "#loc" not in stripped
    assert "stablehlo.sine" in stripped
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        ir.Module.parse(stripped)
    v = W.portable_artifact_version(exp.mlir_module_serialized)
    assert v and v[0].isdigit()
    compat = W.serialize_compat_artifact(exp)
    from jax._src.lib.mlir.dialects import hlo

    assert W.portable_artifact_version(compat) == str(hlo.get_minimum_version())
    assert W.portable_artifact_version(b"garbage") is None


def test_per_op_reduction_from_trace(tmp_path):
    import gzip

    hlo = "\n".join([
        "HloModule jit_g, is_scheduled=true",
        "ENTRY %main (p: f32[4]) -> f32[4] {",
        "  %p = f32[4]{0} parameter(0)",
        '  %wrapped_sine = f32[4]{0} fusion(%p), kind=kLoop, calls=%c, metadata={op_name="jit(g)/sin"}',
        '  ROOT %ynn_fusion = (f32[4]{0}, f32[]) fusion(%wrapped_sine), kind=kCustom, calls=%d, '
        'backend_config={"fusion_config":{"kind":"__ynn_fusion"}}',
        "}",
    ])
    ev = []
    for it in range(2):
        t0 = 100.0 * it
        ev.append({"ph": "X", "name": "wrapped_sine", "dur": 3.0, "ts": t0, "tid": 1,
                   "args": {"hlo_op": "wrapped_sine", "hlo_module": "jit_g"}})
        # a nested event of the same op on the same thread is not counted twice
        ev.append({"ph": "X", "name": "wrapped_sine", "dur": 1.0, "ts": t0 + 1, "tid": 1,
                   "args": {"hlo_op": "wrapped_sine", "hlo_module": "jit_g"}})
        ev.append({"ph": "X", "name": "ynn_fusion", "dur": 1.0, "ts": t0 + 5, "tid": 2,
                   "args": {"hlo_op": "ynn_fusion", "hlo_module": "jit_g"}})
        ev.append({"ph": "X", "name": "other", "dur": 9.0, "ts": t0, "tid": 3,
                   "args": {"hlo_op": "x", "hlo_module": "jit_other"}})
        ev.append({"ph": "X", "name": "PjitFunction", "dur": 50.0, "ts": t0, "tid": 4})
    p = tmp_path / "perfetto_trace.json.gz"
    with gzip.open(str(p), "wt") as fh:
        json.dump({"traceEvents": ev}, fh)
    rows, note, module = W.per_op_from_trace(str(p), hlo, 2)
    assert module == "jit_g"
    assert [(r["name"], r["kind"], r["time_ns"], r["count"]) for r in rows] == [
        ("wrapped_sine", "fusion(kLoop)", 3000.0, 2), ("ynn_fusion", "fusion(kCustom:__ynn_fusion)", 1000.0, 1)]
    assert rows[0]["op_name"] == "jit(g)/sin"
    empty = tmp_path / "empty.json.gz"
    with gzip.open(str(empty), "wt") as fh:
        json.dump({"traceEvents": [ev[4]]}, fh)
    rows, note, _ = W.per_op_from_trace(str(empty), hlo, 2)
    assert rows == [] and "no per-HLO-op events" in note
    gpu = W.parse_hlo_instructions('%f = bf16[8,8]{1,0} fusion(%a), kind=kCustom, calls=%c, '
                                   'backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}')
    assert gpu["f"]["kind"] == "fusion(kCustom:__triton_gemm)"  # worker/hlo_kind.py, shared with the host


# ---------------------------------------------------------------------------
# subprocess runs
# ---------------------------------------------------------------------------


def _fn(x, y, z, *, scale):
    return {"lin": x * 2.0 + scale, "mm": jnp.sin(x) @ y.astype(jnp.float32)}, (jnp.cumsum(z), y * 2, x.max(axis=1))


def _expected(x, y, z, scale):
    y32 = y.astype(np.float32)
    # flat output leaves: dict keys sorted ("lin", "mm"), then the tuple
    return [x * np.float32(2.0) + scale, np.sin(x) @ y32, np.cumsum(z).astype(np.int32),
            (y32 * 2).astype(y.dtype), x.max(axis=1)]


XSPEC = {"distribution": "normal", "seed": 11}
ZSPEC = {"distribution": "randint", "seed": 12, "low": -100, "high": 100}


def _write_job(d, fn, inputs, **extra):
    d.mkdir(parents=True, exist_ok=True)
    job = {"protocol": 1, "function": fn, "inputs": inputs, "outputs_dir": str(d / "out"),
           "artifacts_dir": str(d / "art"), "timing": {"warmup": 1, "repeat": 4}, "dump": False,
           "profile": False, "routes": None}
    job.update(extra)
    (d / "job.msgpack").write_bytes(msgpack.packb(job, use_bin_type=True))
    return d


def _start(d):
    return subprocess.Popen([sys.executable, str(WORKER_PY), str(d / "job.msgpack"), str(d / "result.msgpack")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    base = tmp_path_factory.mktemp("bundle")
    specs = (jax.ShapeDtypeStruct((16, 32), jnp.float32), jax.ShapeDtypeStruct((32, 8), jnp.bfloat16),
             jax.ShapeDtypeStruct((16,), jnp.int32))
    exp = jexport.export(jax.jit(_fn))(*specs, scale=jax.ShapeDtypeStruct((), jnp.float32))
    fn = {"exported": None, "mlir_module": str(base / "mlir.bin"), "mlir_module_compat": str(base / "compat.bin"),
          "stablehlo_text": str(base / "module.mlir"), "fields": W.exported_fields(exp)}
    if HAVE_FLATBUFFERS:
        (base / "exported.bin").write_bytes(bytes(exp.serialize()))
        fn["exported"] = str(base / "exported.bin")
    (base / "mlir.bin").write_bytes(exp.mlir_module_serialized)
    (base / "compat.bin").write_bytes(W.serialize_compat_artifact(exp))
    (base / "module.mlir").write_text(exp.mlir_module())
    y = W.synthetic_array((32, 8), "bfloat16", {"distribution": "uniform", "seed": 13, "low": -1, "high": 1})
    y.tofile(str(base / "y.bin"))
    scale = np.array(0.5, np.float32)
    scale.tofile(str(base / "s.bin"))
    inputs = [{"shape": [16, 32], "dtype": "float32", "synthetic": XSPEC},
              {"shape": [32, 8], "dtype": "bfloat16", "path": str(base / "y.bin")},
              {"shape": [16], "dtype": "int32", "synthetic": ZSPEC},
              {"shape": [], "dtype": "float32", "path": str(base / "s.bin")}]
    x = W.synthetic_array((16, 32), "float32", XSPEC)
    z = W.synthetic_array((16,), "int32", ZSPEC)
    return {"dir": base, "fn": fn, "inputs": inputs, "expected": _expected(x, y, z, scale), "exp": exp}


@pytest.fixture(scope="module")
def runs(bundle, tmp_path_factory):
    base = tmp_path_factory.mktemp("runs")
    fn, inputs = bundle["fn"], bundle["inputs"]
    jobs = {}
    jobs["default"] = _write_job(base / "default", fn, inputs, profile=True, dump=True, profile_iters=2)
    jobs["rebuild"] = _write_job(base / "rebuild", fn, inputs, routes=["rebuild"])
    jobs["compat"] = _write_job(base / "compat", fn, inputs, routes=["rebuild-compat"])
    corrupt = base / "corrupt.bin"
    corrupt.write_bytes(b"\x10\x00\x00\x00this is not a flatbuffer" * 4)
    jobs["corrupt"] = _write_job(base / "corrupt", dict(fn, exported=str(corrupt)), inputs,
                                 routes=["deserialize", "rebuild"])
    text_only = {"exported": None, "mlir_module": None, "mlir_module_compat": None,
                 "stablehlo_text": fn["stablehlo_text"], "fields": None}
    jobs["text"] = _write_job(base / "text", text_only, inputs)
    garbage = base / "garbage.bin"
    garbage.write_bytes(b"ML\xefR\x01StableHLO_v99.1.0\x00garbage-garbage")
    broken = {"exported": str(corrupt), "mlir_module": str(garbage), "mlir_module_compat": str(garbage),
              "stablehlo_text": None, "fields": fn["fields"]}
    jobs["broken"] = _write_job(base / "broken", broken, inputs)
    bad_inputs = [dict(inputs[0]), dict(inputs[1], dtype="float16"), inputs[2], inputs[3]]
    bad_inputs[0]["shape"] = [16, 31]
    jobs["mismatch"] = _write_job(base / "mismatch", fn, bad_inputs)
    # no fields: the mismatch must be detected against the loaded Exported's in_avals
    jobs["mismatch_nofields"] = _write_job(base / "mismatch_nofields", text_only,
                                           [inputs[0], inputs[1], dict(inputs[2], dtype="int16"), inputs[3]])
    (base / "junk").mkdir()
    (base / "junk" / "job.msgpack").write_bytes(b"\xc1\xc1 not msgpack")
    jobs["junk"] = base / "junk"
    procs = {k: _start(d) for k, d in jobs.items()}
    out = {}
    for k, p in procs.items():
        _so, se = p.communicate(timeout=240)
        res_path = jobs[k] / "result.msgpack"
        res = msgpack.unpackb(res_path.read_bytes(), raw=False) if res_path.exists() else None
        out[k] = {"rc": p.returncode, "result": res, "stderr": se, "dir": jobs[k]}
    return out


def _outputs(res):
    arrs = []
    for o in res["outputs"]:
        arrs.append(np.fromfile(o["path"], dtype=W.np_dtype(o["dtype"])).reshape(o["shape"]))
    return arrs


def _check_outputs(res, expected):
    got = _outputs(res)
    assert len(got) == len(expected)
    for i, (g, e) in enumerate(zip(got, expected)):
        assert g.dtype == e.dtype, (i, g.dtype, e.dtype)
        assert g.shape == e.shape, (i, g.shape, e.shape)
        if g.dtype.kind in "iub" or g.dtype.name == "bfloat16":
            np.testing.assert_array_equal(g, e, err_msg="output %d" % i)
        else:
            np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-5, err_msg="output %d" % i)


def _ok(run):
    res = run["result"]
    assert run["rc"] == 0, run["stderr"][-3000:]
    assert res is not None
    assert res["status"] == "ok", (res["reason"], res.get("detail"), run["stderr"][-3000:])
    return res


def test_default_chain_outputs_timing_artifacts(runs, bundle):
    res = _ok(runs["default"])
    assert res["protocol"] == 1
    assert res["route"] == ("deserialize" if HAVE_FLATBUFFERS else "rebuild")
    if not HAVE_FLATBUFFERS:
        assert res["attempts"][0]["route"] == "deserialize" and res["attempts"][0]["skipped"]
    _check_outputs(res, bundle["expected"])
    assert [o["dtype"] for o in res["outputs"]][3] == "bfloat16"
    assert len(res["samples_ns"]) == 4 and all(isinstance(s, int) and s > 0 for s in res["samples_ns"])
    assert res["compile_s"] > 0
    arts = res["artifacts"]
    for k in ("stablehlo_lowered", "hlo_before", "hlo_after", "profile_trace"):
        assert os.path.isfile(arts[k]), k
    assert Path(arts["hlo_after"]).read_text().startswith("HloModule")
    assert os.listdir(arts["xla_dump"]), "xla dump empty"
    env = res["environment"]
    for k in ("python", "jax", "jaxlib", "numpy", "ml_dtypes", "platform", "platform_version", "devices", "os",
              "machine", "cpu_model", "cpu_flags", "env_vars", "packages", "jax_config"):
        assert k in env, k
    assert env["jax"] == jax.__version__ and env["devices"][0]["platform"] == env["platform"]
    assert "--xla_dump_to=" not in env["env_vars"].get("XLA_FLAGS", "")  # the worker's own flag is not the user's
    assert "numpy" in {k.lower() for k in env["packages"]}


def test_per_op_profile_table(runs):
    res = _ok(runs["default"])
    assert res["profile"]["iterations"] == 2
    assert res["artifacts"]["profile_trace"].endswith(".json.gz")
    if tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 7):
        pytest.skip("older jaxlib CPU runtimes emit no per-op trace events")
    rows = res["per_op"]
    assert rows, res["profile"]
    hlo_after = Path(res["artifacts"]["hlo_after"]).read_text()
    for r in rows:
        assert set(r) >= {"name", "kind", "time_ns", "count"}
        assert r["time_ns"] >= 0 and r["count"] >= 1
        assert r["name"] in hlo_after
    assert any(r["kind"] != "unknown" for r in rows)


@pytest.mark.parametrize("name,route", [("rebuild", "rebuild"), ("compat", "rebuild-compat"),
                                        ("text", "stablehlo-text")])
def test_forced_and_fallback_routes(runs, bundle, name, route):
    res = _ok(runs[name])
    assert res["route"] == route
    _check_outputs(res, bundle["expected"])
    if name == "text":
        assert any("derived" in n for n in res["notes"])


def test_corrupted_exported_falls_back(runs, bundle):
    res = _ok(runs["corrupt"])
    assert res["route"] == "rebuild"
    assert res["attempts"][0]["route"] == "deserialize"
    assert res["attempts"][0]["error"]
    assert "deserialize" in res["reason"]
    _check_outputs(res, bundle["expected"])


def test_all_routes_fail_is_incompatible(runs):
    run = runs["broken"]
    res = run["result"]
    assert run["rc"] == 0
    assert res["status"] == "incompatible", res["reason"]
    assert res["route"] is None
    routes = [a["route"] for a in res["attempts"]]
    assert routes == ["deserialize", "rebuild", "rebuild-compat", "stablehlo-text"]
    assert res["attempts"][-1].get("skipped")
    # the precise reason names the artifact version and this jaxlib's window
    assert "99.1.0" in res["reason"], res["reason"]
    assert "Traceback" not in res["reason"]


def test_mismatched_inputs_clean_error(runs):
    run = runs["mismatch"]
    res = run["result"]
    assert run["rc"] == 0
    assert res["status"] == "error"
    assert "input leaf 0" in res["reason"] and "[16, 32]" in res["reason"] and "[16, 31]" in res["reason"]
    run = runs["mismatch_nofields"]
    res = run["result"]
    assert run["rc"] == 0 and res["status"] == "error", res["reason"]
    assert "input leaf 2" in res["reason"] and "int32" in res["reason"] and "int16" in res["reason"]


def test_unreadable_job_still_writes_result(runs):
    run = runs["junk"]
    assert run["rc"] == 0
    assert run["result"]["status"] == "error"
    assert "cannot read job file" in run["result"]["reason"]


def test_every_job_and_result_follows_its_schema(runs):
    """The jobs these tests write by hand and every result (ok, incompatible, error, an unreadable job's) against
    the protocol's JSON Schemas (tests/test_worker_protocol.py checks the host's own jobs)."""
    import jsonschema

    schemas = {kind: jsonschema.Draft202012Validator(json.loads(
        (ROOT / "reprobundle" / "schemas" / ("worker-%s-v1.schema.json" % kind)).read_text())) for kind in ("job", "result")}
    for name, run in runs.items():
        schemas["result"].validate(run["result"])
        if name != "junk":
            schemas["job"].validate(msgpack.unpackb((run["dir"] / "job.msgpack").read_bytes(), raw=False))


def test_flatbuffer_info():
    if not HAVE_FLATBUFFERS:
        pytest.skip("flatbuffers not installed: Exported.serialize unavailable")
    exp = jexport.export(jax.jit(lambda x: x + 1))(jax.ShapeDtypeStruct((2,), jnp.float32))
    info = W.exported_flatbuffer_info(exp.serialize())
    assert info["function_name"] == "<lambda>"
    assert info["serialization_version"] >= 2
    assert (info["nr_devices"] or info["nr_devices_short"]) == 1


def test_lockstep_protocol(bundle, tmp_path):
    """The host's side of lockstep timing, spoken by hand: ready after the warmup, `time n` answered with n times,
    stray prints kept out of the channel, end of stdin finishes the run; the user's XLA_FLAGS recorded as they
    were, without the dump flag the worker adds."""
    d = _write_job(tmp_path / "lockstep", bundle["fn"], bundle["inputs"], dump=True,
                   timing={"warmup": 2, "repeat": 999, "lockstep": True})
    user_flags = "--xla_cpu_enable_fast_math=false"
    p = subprocess.Popen([sys.executable, str(WORKER_PY), str(d / "job.msgpack"), str(d / "result.msgpack")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env={**os.environ, "XLA_FLAGS": user_flags})
    verb, call_ns = p.stdout.readline().split()
    assert verb == "ready" and int(call_ns) > 0
    sent = []
    for n in (3, 1, 5):
        p.stdin.write(f"time {n}\n")
        p.stdin.flush()
        times = [int(t) for t in p.stdout.readline().split()]
        assert len(times) == n and all(t > 0 for t in times)
        sent += times
    p.stdin.close()
    assert p.stdout.read() == ""  # nothing else ever reaches the channel
    assert p.wait(timeout=120) == 0, p.stderr.read()[-3000:]
    res = msgpack.unpackb((d / "result.msgpack").read_bytes(), raw=False)
    assert res["status"] == "ok", res["reason"]
    assert res["samples_ns"] == sent  # "repeat" is ignored in lockstep: the host decides
    _check_outputs(res, bundle["expected"])
    assert res["environment"]["env_vars"]["XLA_FLAGS"] == user_flags
    assert os.listdir(res["artifacts"]["xla_dump"])


def test_lockstep_unknown_command_is_a_clean_error(bundle, tmp_path):
    d = _write_job(tmp_path / "bad-command", bundle["fn"], bundle["inputs"],
                   timing={"warmup": 0, "repeat": 1, "lockstep": True})
    p = subprocess.Popen([sys.executable, str(WORKER_PY), str(d / "job.msgpack"), str(d / "result.msgpack")],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("ready ")
    p.stdin.write("rm -rf /\n")
    p.stdin.flush()
    p.wait(timeout=120)
    res = msgpack.unpackb((d / "result.msgpack").read_bytes(), raw=False)
    assert res["status"] == "error" and "timed execution failed" in res["reason"] and "rm -rf" in res["reason"]

