"""jaxlib's CPU kernels as custom calls (issue #9), crash records, and ml_dtypes inputs saved by numpy.savez.

jax 0.4.30 .. 0.9 initialize jaxlib's LAPACK kernels only while lowering a linalg op, which a replay never does: the
worker initializes them itself (and registers jaxlib 0.4.30's one typed-FFI kernel under the right API), and turns a
kernel the release lacks into `incompatible`, naming it. The crossversion tests install their releases with
reprobundle's own environment manager (downloads the first time).
"""

import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import ml_dtypes
import numpy as np
import pytest
import quick
from cli_runner import cli

import reprobundle
from reprobundle.analysis.verdict import check_outputs
from reprobundle.api import environment_manager, load_npz
from reprobundle.bundle.registry import Registry
from reprobundle.capture.pack import pack_serialized_in
from reprobundle.capture.pack_options import PackOptions
from reprobundle.run.execution import Timing, build_job, read_outputs, run_worker
from reprobundle.run.replay import reference_arrays, replay
from reprobundle.worker.dtypes import np_dtype


def _linalg(a, b):
    spd = a @ a.T + 8 * jnp.eye(a.shape[0], dtype=a.dtype)
    c = jnp.linalg.cholesky(spd)  # potrf
    _, r = jnp.linalg.qr(a)  # geqrf + orgqr
    w = jnp.linalg.eigh(spd)[0]  # syevd
    s = jnp.linalg.svd(a, compute_uv=False)  # gesdd
    lu = jax.lax.linalg.lu(a)[0]  # getrf
    x = jsl.solve_triangular(c, b, lower=True)  # trsm
    # Only sign-free results, so that any release's LAPACK gives the same numbers.
    return c, jnp.abs(jnp.diag(r)), w, s, jnp.abs(jnp.diag(lu)), x


def _cholesky(a, b):
    c = jnp.linalg.cholesky(a @ a.T + 8 * jnp.eye(a.shape[0], dtype=a.dtype))  # potrf only: 0.4.30 has it
    return c, c.T @ b


def _matrices():
    rng = np.random.default_rng(0)
    return rng.standard_normal((8, 8)).astype(np.float32), rng.standard_normal((8, 3)).astype(np.float32)


@pytest.mark.crossversion
def test_linalg_kernels_replay_on_every_release_that_has_them(store_dir):
    a, b = _matrices()
    reprobundle.pack(jax.jit(_linalg), a, b, name="linalg", store=str(store_dir), **quick.PACK)
    registry = Registry.open(store_dir)
    bundle = registry.resolve("linalg")
    expected = [np.asarray(o) for o in _linalg(a, b)]
    assert check_outputs(expected, reference_arrays(registry, bundle))["ok"]
    result = reprobundle.replay("linalg", ["0.4.30", "0.7.2", "0.8.0", "installed"], store=str(store_dir),
                                warmup=1, repeat=2, rounds=1, dump=False, profile=False)
    runs = {r["requested"]: r for r in result.runs}
    for version in ("0.7.2", "0.8.0", "installed"):  # 0.7.2 and 0.8.0 died by SIGSEGV at the call
        assert runs[version]["status"] == "ok" and runs[version]["check"]["ok"], runs[version]
    # jaxlib 0.4.30 has the kernels only under their pre-FFI names (and trsm as blas_strsm): incompatible, by name.
    old = runs["0.4.30"]
    assert old["status"] == "incompatible", old
    assert "jaxlib 0.4.30 does not provide" in old["reason"], old["reason"]
    for target in ("lapack_sgeqrf_ffi", "lapack_ssyevd_ffi", "lapack_sgesdd_ffi", "lapack_sgetrf_ffi",
                   "lapack_strsm_ffi"):
        assert target in old["reason"], old["reason"]
    assert "it has only the older lapack_sgesdd" in old["reason"]


@pytest.mark.crossversion
def test_cholesky_on_0_4_30_gets_its_kernel_registered_and_initialized(store_dir, tmp_path):
    """jaxlib 0.4.30 has lapack_spotrf_ffi (only), registered under the untyped API; the worker fixes both that
    and the initialization, and says so."""
    a, b = _matrices()
    reprobundle.pack(jax.jit(_cholesky), a, b, name="chol", store=str(store_dir), **quick.PACK)
    registry = Registry.open(store_dir)
    bundle = registry.resolve("chol")
    m = bundle.manifest
    python = environment_manager().ensure("0.4.30").python_executable
    job = build_job(registry, m["function"], m["inputs"]["leaves"], tmp_path, timing=Timing(warmup=1, repeat=2),
                    dump=False, profile=False)
    outcome = run_worker(python, job, timeout_s=300)
    assert outcome.status == "ok", (outcome.reason, outcome.stderr_tail[-2000:])
    assert outcome.result["environment"]["jax"] == "0.4.30"
    notes = " | ".join(outcome.result["notes"])
    assert "registered jaxlib's lapack_spotrf_ffi as a typed-FFI custom-call target" in notes, notes
    assert "initialized jaxlib's CPU LAPACK kernels" in notes and "lapack_spotrf_ffi" in notes, notes
    assert check_outputs(reference_arrays(registry, bundle), read_outputs(outcome.result))["ok"]


# ------------------------------------------------------------------------------------------- crash records

_CRASH_AT_EXECUTE = """\
import ctypes, importlib, importlib.util, os, sys
worker_path, job, result = sys.argv[-3:]
spec = importlib.util.spec_from_file_location("reprobundle_worker", os.path.join(worker_path, "__init__.py"),
                                              submodule_search_locations=[worker_path])
sys.modules["reprobundle_worker"] = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sys.modules["reprobundle_worker"])
job_module = importlib.import_module("reprobundle_worker.job")
protocol = importlib.import_module("reprobundle_worker.protocol")
main = importlib.import_module("reprobundle_worker.main").main

def route_deserialize(self):
    raise protocol.RouteFailure("load", "forced to fail by the test")

checkpoint = job_module.Worker.checkpoint

def crash_at_execute(self, phase):
    checkpoint(self, phase)
    if phase == "execute":
        ctypes.string_at(0)  # SIGSEGV right after the provisional result, as the LAPACK calls did

job_module.Worker.route_deserialize = route_deserialize
job_module.Worker.checkpoint = crash_at_execute
sys.exit(main([job, result]))
"""


class _Envs:
    def __init__(self, python: Path) -> None:
        self.python = python

    def ensure(self, version, progress=None):
        from reprobundle.envs.manager import JaxEnvironment

        return JaxEnvironment(jax_version=version, python_executable=self.python, python_version="3",
                              path=self.python.parent, created=None, size_bytes=None)


@pytest.mark.slow
def test_a_crashed_worker_keeps_its_route_attempts_and_phase(store_dir, tmp_path):
    a, b = _matrices()
    reprobundle.pack(jax.jit(_cholesky), a, b, name="chol", store=str(store_dir), **quick.PACK)
    registry = Registry.open(store_dir)
    bundle = registry.resolve("chol")
    folder = tmp_path / "segv" / "bin"
    folder.mkdir(parents=True)
    (folder / "prog.py").write_text(_CRASH_AT_EXECUTE)
    python = folder / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{folder / "prog.py"}" "$@"\n')
    python.chmod(0o755)
    run, = replay(registry, bundle, ["0.0.1-segv"], timing=Timing(warmup=1, repeat=2, rounds=1), timeout_s=120,
                  dump=False, profile=False, env_manager=_Envs(python))
    assert run["status"] == "crashed", run
    assert "SIGSEGV during phase 'execute' (loaded via route 'rebuild')" in run["reason"], run["reason"]
    assert run["route"] == "rebuild"
    assert run["attempts"] == [{"route": "deserialize", "error": "forced to fail by the test"}]
    assert run["environment"]["jax"] == jax.__version__
    assert registry.runs(bundle.ref.bundle_id)[-1]["route"] == "rebuild"  # stored as such


# ------------------------------------------------------------------------------- ml_dtypes through savez

_ML_DTYPES_EXPORT = """
import sys, jax, jax.numpy as jnp, ml_dtypes, numpy as np
from jax import export
def f(x, y, n):
    return (x.astype(jnp.float32) * y.astype(jnp.float32)).sum(0) + n.astype(jnp.float32).sum(), x * 2, y
x = np.linspace(-1, 1, 32).reshape(4, 8).astype(ml_dtypes.bfloat16)
y = np.linspace(0, 2, 32).reshape(4, 8).astype(ml_dtypes.float8_e4m3fn)
n = (np.arange(8) - 4).astype(ml_dtypes.int4)
open(sys.argv[1] + "/f.jax", "wb").write(export.export(jax.jit(f))(x, y, n).serialize())
np.savez(sys.argv[1] + "/in.npz", x, y, n)  # the documented way: ml_dtypes arrays come back as raw void data
"""


def _check_ml_dtypes_bundle(store_dir, name, folder):
    m = Registry.open(store_dir).resolve(name).manifest
    assert [leaf["dtype"] for leaf in m["inputs"]["leaves"]] == ["bfloat16", "float8_e4m3fn", "int4"]
    raw = load_npz(folder / "in.npz")
    x, y, n = (leaf.view(t) for leaf, t in zip(raw, (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.int4)))
    want = (x.astype(np.float32) * y.astype(np.float32)).sum(0) + n.astype(np.float32).sum()
    registry = Registry.open(store_dir)
    outputs = reference_arrays(registry, registry.resolve(name))
    np.testing.assert_allclose(outputs[0], want, rtol=1e-6)
    assert outputs[1].dtype == ml_dtypes.bfloat16 and outputs[2].dtype == ml_dtypes.float8_e4m3fn
    np.testing.assert_array_equal(outputs[2].view(np.uint8), y.view(np.uint8))


@pytest.mark.slow
def test_pack_on_a_jax_takes_ml_dtypes_saved_by_savez(store_dir, tmp_path):
    """What `pack --exported A.jax --inputs I.npz --jax V` does, with V the installed release."""
    subprocess.run([sys.executable, "-c", _ML_DTYPES_EXPORT, str(tmp_path)], check=True, timeout=300)
    leaves = load_npz(tmp_path / "in.npz")
    assert [leaf.dtype.str for leaf in leaves] == ["|V2", "|V1", "|V1"]
    assert np_dtype("void16") == np.dtype("V2")  # the name numpy gives them, which numpy 2 cannot parse back
    pack_serialized_in(Registry.open(store_dir), (tmp_path / "f.jax").read_bytes(), leaves,
                       PackOptions(name="mixed", warmup=1, repeat=2, dump=False, profile=False), python=sys.executable)
    _check_ml_dtypes_bundle(store_dir, "mixed", tmp_path)
    code, out, err = cli("replay", "mixed", "--repeat", "2", "--warmup", "1", "--rounds", "1", "--no-profile",
                         store=store_dir)
    assert code == 0, err


@pytest.mark.crossversion
def test_cli_pack_exported_on_another_jax_takes_ml_dtypes_saved_by_savez(store_dir, tmp_path):
    python = environment_manager().ensure("0.8.0").python_executable
    subprocess.run([str(python), "-c", _ML_DTYPES_EXPORT, str(tmp_path)], check=True, timeout=300)
    code, out, err = cli("pack", "--exported", str(tmp_path / "f.jax"), "--inputs", str(tmp_path / "in.npz"),
                         "--jax", "0.8.0", "--name", "mixed", "--repeat", "2", "--warmup", "1", "--no-dump",
                         store=store_dir)
    assert code == 0, err
    assert Registry.open(store_dir).resolve("mixed").manifest["environment"]["jax"] == "0.8.0"
    _check_ml_dtypes_bundle(store_dir, "mixed", tmp_path)


_OLD_EXPORT = '''\
import sys, types, logging
try:
    import absl.logging  # noqa: F401
except ImportError:  # jax.export imports absl-py, which these releases do not declare
    absl = types.ModuleType("absl")
    absl.logging = types.SimpleNamespace(vlog_is_on=lambda level: False, **{n: getattr(logging, n) for n in
                                         ("info", "warning", "error", "debug")})
    sys.modules["absl"], sys.modules["absl.logging"] = absl, absl.logging
import jax, numpy as np, jax.scipy.linalg as jsl
from jax import export
shape = sys.argv[1]
rng = np.random.default_rng(0)
if shape == "batched":
    c = np.tril(rng.standard_normal((2, 6, 6))).astype(np.float32) + 6 * np.eye(6, dtype=np.float32)
    b = np.ones((2, 6, 3), np.float32)
    f = lambda c, b: jsl.solve_triangular(c, b, lower=True)
elif shape == "right":
    c = np.tril(rng.standard_normal((6, 6))).astype(np.float32) + 6 * np.eye(6, dtype=np.float32)
    b = np.ones((3, 6), np.float32)
    f = lambda c, b: jax.lax.linalg.triangular_solve(c, b, left_side=False, lower=True)
else:
    c = np.tril(rng.standard_normal((6, 6))).astype(np.float32) + 6 * np.eye(6, dtype=np.float32)
    b = np.ones((6, 3), np.float32)
    f = lambda c, b: jsl.solve_triangular(c, b, lower=True) * 2
exp = export.export(jax.jit(f))(c, b)
open(sys.argv[2], "wb").write(exp.serialize())
np.savez(sys.argv[3], c, b)
'''


@pytest.mark.crossversion
@pytest.mark.parametrize("shape", ["plain", "batched", "right"])
def test_a_kernel_whose_signature_changed_is_incompatible_naming_it(store_dir, tmp_path, shape):
    """Class: a bundle lowered by jax 0.5.3 calls lapack_strsm_ffi with 3 operands (alpha); the installed release's
    kernel of that name takes 2 (its own lowering says so). Plain, batched and right-side solves: the replay is
    `incompatible`, naming the kernel and both operand counts and pointing to --retrace, never a plain `error` at
    the call; the reason is said once for all the routes that failed alike. 0.5.3 itself replays it."""
    old = environment_manager().ensure("0.5.3")
    script = tmp_path / "export_old.py"
    script.write_text(_OLD_EXPORT)
    done = subprocess.run([str(old.python_executable), str(script), shape, str(tmp_path / "f.bin"),
                           str(tmp_path / "in.npz")], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    registry = Registry.open(store_dir)
    pack_serialized_in(registry, (tmp_path / "f.bin").read_bytes(), load_npz(tmp_path / "in.npz"),
                       PackOptions(name="trsm", warmup=1, repeat=2, dump=False, profile=False),
                       python=str(old.python_executable))
    if tuple(int(p) for p in jax.__version__.split(".")[:2]) < (0, 9):
        pytest.skip(f"the installed jax {jax.__version__} still takes alpha")
    result = reprobundle.replay("trsm", ["0.5.3", "installed"], store=str(store_dir), warmup=1, repeat=2, rounds=1,
                                dump=False, profile=False)
    runs = {r["requested"]: r for r in result.runs}
    assert runs["0.5.3"]["status"] == "ok", runs["0.5.3"]["reason"]
    new = runs["installed"]
    assert new["status"] == "incompatible", new
    reason = new["reason"]
    assert "lapack_strsm_ffi" in reason and "signature changed" in reason and "--retrace" in reason, reason
    assert "passes 3 operands" in reason and "takes 2" in reason, reason
    assert reason.count("signature changed") == 1 and "routes '" in reason, reason  # said once for all routes
    assert all(reason.count(f"'{route}'") == 1 for route in ("deserialize", "rebuild", "rebuild-compat")), reason
    assert "Wrong number of arguments" not in reason
