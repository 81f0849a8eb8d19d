"""Retrace: the bundle's program traced and lowered by the release under test, next to its frozen snapshot.

The cross-version tests use real releases installed by reprobundle's own environment manager; the program is run
directly in each environment too, so that what a retrace reports is checked against the program itself.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import numpy as np
import pytest
import quick

from reprobundle import api
from reprobundle.analysis.lowering_diff import lowering_diff, same_lowering
from reprobundle.bundle.registry import Registry
from reprobundle.capture.source import collect_program
from reprobundle.run.contenders import ContenderSpec
from reprobundle.run.execution import Timing
from reprobundle.run.replay import replay

PROGRAMS = Path(__file__).parent / "programs" / "retrace"


def _pack(script: Path, name: str, store: Path) -> None:
    api.pack_script(str(script), name=name, store=str(store), **quick.PACK)


def _replay(store: Path, name: str, specs: list[ContenderSpec], manager=None) -> dict[str, dict]:
    registry = Registry.open(str(store))
    runs = replay(registry, registry.resolve(name), specs, timing=Timing(warmup=1, repeat=2, rounds=1),
                  dump=False, profile=False, env_manager=manager)
    return {r["contender"]["label"]: r for r in runs}


def _output(store: Path, run: dict) -> bytes:
    return Registry.open(str(store)).get_blob(run["outputs"][0]["blob"])


def test_the_program_travels_without_secrets_and_names_its_packages(tmp_path):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("")
    (tmp_path / "lib" / "layers.py").write_text("import msgpack\nfrom . import keys\nSCALE = 2\n")
    (tmp_path / "lib" / "keys.py").write_text('TOKEN = "ghp_' + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8" + '"\n')
    (tmp_path / "unused.py").write_text("X = 1\n")
    (tmp_path / ".env").write_text("API_KEY=abc\n")
    script = tmp_path / "train.py"
    script.write_text("import os\nimport jax\nfrom lib.layers import SCALE\n\ndef make():\n    pass\n")
    program = collect_program(script, "make")
    assert list(program.files) == ["train.py", "lib/__init__.py", "lib/layers.py"]
    assert program.skipped == [{"path": "lib/keys.py", "reason": "it holds a key or token-shaped string"}]
    # os is the standard library's and jax comes with every environment: only msgpack is the program's own
    assert set(program.packages) == {"msgpack"}


def test_lowering_diff_names_added_ops_and_their_source_lines(tmp_path):
    import jax
    import jax.numpy as jnp

    model = tmp_path / "model.py"
    model.write_text(textwrap.dedent("""\
        def plain(x, y):
            return x @ y


        def transposed(x, y):
            return (y.T @ x.T).T
        """))
    import importlib.util

    spec = importlib.util.spec_from_file_location("model_for_diff", model)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = jnp.ones((4, 8), jnp.float32)
    y = jnp.ones((8, 3), jnp.float32)
    before = jax.export.export(jax.jit(module.plain))(x, y).mlir_module()
    after = jax.export.export(jax.jit(module.transposed))(x, y).mlir_module()
    diff = lowering_diff(before, after, ["model.py"])
    assert diff["changed"]
    assert diff["added"] == [{"op": "transpose", "count": 3, "at": ["model.py:6"]}], diff
    assert diff["text"] == "+3 transpose at model.py:6"
    assert same_lowering(before, before.replace("model.py", "elsewhere.py")) and not lowering_diff(
        before, before, ["model.py"])["changed"]


@pytest.mark.slow
def test_what_cannot_retrace_says_why(store_dir, tmp_path):
    _pack(PROGRAMS / "failing.py", "failing", store_dir)
    import jax
    import jax.numpy as jnp

    exported = jax.export.export(jax.jit(lambda x: x + 1))(jnp.ones(3, jnp.float32))
    api.pack_exported(exported.serialize(), [np.ones(3, np.float32)], name="exported", store=str(store_dir),
                      **quick.PACK)
    failing = _replay(store_dir, "failing", [ContenderSpec("installed", "retrace")])["installed retraced"]
    assert failing["status"] == "error"
    first, *tail = failing["reason"].splitlines()
    assert first == (f"retrace: failing.py:make() failed on jax {jax.__version__}: RuntimeError: this factory "
                     "refuses to run here")
    assert any("failing.py" in line for line in tail) and "raise RuntimeError" in failing["reason"]
    refused = _replay(store_dir, "exported", [ContenderSpec("installed", "retrace")])["installed retraced"]
    assert refused["status"] == "error"
    assert refused["reason"].startswith("cannot retrace exported: it was packed from a serialized jax.export "
                                        "artifact"), refused["reason"]
    assert "pack it from a script" in refused["reason"]


@pytest.mark.crossversion
def test_jax_random_is_the_same_frozen_and_other_numbers_retraced_on_0430(store_dir):
    script = PROGRAMS / "rng.py"
    _pack(script, "rng", store_dir)
    manifest = Registry.open(str(store_dir)).resolve("rng").manifest
    assert [f["path"] for f in manifest["function"]["program"]["files"]] == ["rng.py"]
    runs = _replay(store_dir, "rng", [ContenderSpec("0.4.30"), ContenderSpec("0.4.30", "retrace"),
                                      ContenderSpec("0.7.2", "retrace")])
    frozen, old, new = runs["0.4.30"], runs["0.4.30 retraced"], runs["0.7.2 retraced"]
    assert frozen["status"] == "ok" and "lowering_changed" not in frozen
    assert old["status"] == "mismatch" and old["lowering_changed"] is True, old["reason"]
    assert new["status"] == "ok" and new["lowering_changed"] is False, new["reason"]
    assert old["route"] == new["route"] == "retrace"
    # The cross-check: the script run directly in each environment computes what its retrace computed.
    from reprobundle.envs.manager import EnvironmentManager

    manager = EnvironmentManager()
    for version, run in (("0.4.30", old), ("0.7.2", new)):
        python = manager.ensure(version).python_executable
        direct = subprocess.run([str(python), str(script)], capture_output=True, text=True, check=True, timeout=300)
        assert bytes.fromhex(direct.stdout.strip()) == _output(store_dir, run), version
    assert _output(store_dir, old) != _output(store_dir, frozen)


@pytest.mark.crossversion
def test_lapack_program_retraces_where_its_frozen_module_cannot_load(store_dir):
    _pack(PROGRAMS / "lapack.py", "lapack", store_dir)
    runs = _replay(store_dir, "lapack", [ContenderSpec("0.4.30"), ContenderSpec("0.4.30", "retrace"),
                                         ContenderSpec("0.5.3", "retrace")])
    assert runs["0.4.30"]["status"] == "incompatible", runs["0.4.30"]["reason"]
    assert "lapack_" in runs["0.4.30"]["reason"]
    for label in ("0.4.30 retraced", "0.5.3 retraced"):
        assert runs[label]["status"] == "ok", runs[label]["reason"]
        assert runs[label]["lowering_changed"] is True
    # 0.4.30 calls the kernels by their pre-FFI names, at the program's lines
    diff = runs["0.4.30 retraced"]["lowering_diff"]
    assert "+1 custom_call(lapack_spotrf) at lapack.py:10" in diff and "-1 custom_call(lapack_spotrf_ffi)" in diff


@pytest.mark.crossversion
def test_flax_nnx_train_step_retraces_with_a_flax_resolved_for_the_older_release(store_dir):
    from packaging.version import Version

    api.pack_script(str(Path(__file__).parent.parent / "examples" / "flax_nnx_train.py"), name="nnx",
                    store=str(store_dir), **quick.PACK)
    program = Registry.open(str(store_dir)).resolve("nnx").manifest["function"]["program"]
    assert {"flax", "optax"} <= set(program["packages"])
    run = _replay(store_dir, "nnx", [ContenderSpec("0.7.2", "retrace")])["0.7.2 retraced"]
    assert run["status"] == "ok", run["reason"]
    assert run["environment"]["jax"] == "0.7.2"
    flax = run["packages"]["flax"]
    # the installed flax needs a newer jax: uv resolved an older one, recorded beside the packed version
    assert flax["packed"] == program["packages"]["flax"]
    assert Version(flax["version"]) < Version(flax["packed"]), flax
    # a pinned flax that needs a newer jax: that version's error says what to do
    pinned = _replay_pinned(store_dir, "nnx", "0.7.2", ["flax==" + flax["packed"]])
    assert pinned["status"] == "error"
    assert "installs beside jax 0.7.2" in pinned["reason"] and "--retrace-package flax==" in pinned["reason"]



@pytest.mark.crossversion
def test_capture_on_another_release_says_it_was_traced_there(store_dir):
    import sys

    result = api.capture_program([sys.executable, str(Path(__file__).parent / "programs" / "small_loop.py"), "1"],
                                 match="medium", name="loop", store=str(store_dir), warmup=1, repeat=3, dump=False,
                                 profile=False, jax="0.7.2")
    assert result.exit_code == 0 and len(result.captures) == 1, result.failures
    manifest = Registry.open(str(store_dir)).resolve("loop").manifest
    assert manifest["function"]["traced_by"] == {"jax": "0.7.2"}
    assert manifest["environment"]["jax"] == "0.7.2"  # the reference ran where it was traced


def _replay_pinned(store: Path, name: str, version: str, packages: list[str]) -> dict:
    registry = Registry.open(str(store))
    return replay(registry, registry.resolve(name), [ContenderSpec(version, "retrace")],
                  timing=Timing(warmup=1, repeat=2, rounds=1), dump=False, profile=False,
                  retrace_packages=packages)[0]


def test_the_change_splits_between_compiler_and_lowering():
    from reprobundle.analysis.layers import layer_headlines, layer_split

    rng = np.random.default_rng(0)
    schedule = {"steps": [1] * 48, "rounds": [6] * 8, "group": "g"}

    def row(label: str, jax: str, mode: str, scale: float) -> dict:
        samples = [int(1e6 * scale * (1 + 0.01 * x)) for x in rng.standard_normal(48)]
        return {"label": label, "contender_jax": jax, "mode": mode, "status": "ok", "samples_ns": samples,
                "schedule": schedule}

    base = row("0.7.2", "0.7.2", "frozen", 1.0)
    rows = [base, row("0.8.0", "0.8.0", "frozen", 1.0), row("0.8.0 retraced", "0.8.0", "retrace", 1.25)]
    (split,) = layer_split(rows, base)
    assert split["layer"] == "lowering", split
    assert split["text"].startswith("compiler: 1.00x (frozen replay on 0.8.0 vs 0.7.2), lowering: 1.2")
    assert split["text"].endswith("x (retraced vs frozen on 0.8.0)")
    (headline,) = layer_headlines([split])
    assert headline["text"].startswith("jax 0.8.0: JAX's lowering moved, XLA (the compiler) did not")




@pytest.mark.crossversion
def test_compare_two_captures_of_one_program_shows_the_lowering_diff_and_times_them_together(store_dir):
    import sys

    from cli_runner import cli

    script = PROGRAMS / "rng_capture.py"
    for name, jax in (("rng-old", "0.4.30"), ("rng-new", None)):
        result = api.capture_program([sys.executable, str(script)], match="lambda", name=name, store=str(store_dir),
                                     warmup=1, repeat=3, dump=False, profile=False, jax=jax)
        assert result.exit_code == 0 and len(result.captures) == 1, result.failures
    import jax as host_jax

    apart = api.compare_bundles("rng-old", "rng-new", store=str(store_dir))
    assert [b["traced_by"] for b in apart["bundles"]] == ["0.4.30", host_jax.__version__]
    # threefry became partitionable in 0.5.0: the two releases lowered jax.random.normal to other ops
    assert apart["lowering"]["changed"] and apart["lowering"]["text"]
    assert apart["same_inputs"] and apart["group"] is None
    assert [r["label"] for r in apart["rows"]][0].startswith("reference runs")
    assert all(r["verdict"] is None for r in apart["rows"])  # measured apart: a ratio, never a verdict

    together = api.compare_bundles("rng-old", "rng-new", store=str(store_dir), replay=True, rounds=3,
                                   warmup=1, repeat=6, dump=False, profile=False)
    assert together["group"] is not None
    first = together["rows"][0]
    assert first["label"] == "each on the release that traced it"
    assert (first["a"]["jax"], first["b"]["jax"]) == ("0.4.30", host_jax.__version__)
    assert first["together"] and first["verdict"]["method"] == "paired rounds"
    assert {r["label"] for r in together["rows"]} >= {"jax 0.4.30", f"jax {host_jax.__version__}"}
    # the runs are stored: the same comparison comes back from them without timing again
    again = api.compare_bundles("rng-old", "rng-new", store=str(store_dir))
    assert again["group"] == together["group"] and again["rows"][0]["verdict"] == first["verdict"]

    code, out, err = cli("compare", "rng-old", "rng-new", store=store_dir)
    assert code == 0 and "lowering, A -> B:" in out and "each on the release that traced it" in out, err
    code, out, err = cli("compare", "rng-old", "rng-new", "rng-old", store=store_dir)
    assert code == 2 and "compare takes one bundle or two" in err


def test_pack_from_python_with_a_script_stores_the_program_read_not_run(store_dir, tmp_path):
    from reprobundle.errors import ScriptError

    fn, args = _rng_call()
    ref = api.pack(fn, *args, name="rng-api", store=str(store_dir), script=f"{PROGRAMS / 'rng.py'}:make", **quick.PACK)
    program = Registry.open(str(store_dir)).resolve(str(ref)).manifest["function"]["program"]
    assert (program["script"], program["factory"]) == ("rng.py", "make")
    assert [f["path"] for f in program["files"]] == ["rng.py"]
    (tmp_path / "noisy.py").write_text("raise SystemExit('never run at pack')\n")
    with pytest.raises(ScriptError, match="defines no make"):
        api.pack(fn, *args, name="rng-api", store=str(store_dir), script=str(tmp_path / "noisy.py"), **quick.PACK)


@pytest.mark.slow
def test_compare_two_bundles_of_one_release_times_them_together_with_the_same_lowering(store_dir):
    for name in ("rng-a", "rng-b"):
        _pack(PROGRAMS / "rng.py", name, store_dir)
    data = api.compare_bundles("rng-a", "rng-b", store=str(store_dir), replay=True, rounds=3, warmup=1, repeat=6,
                               dump=False, profile=False)
    assert data["lowering"]["changed"] is False and data["same_inputs"]
    assert [r["label"] for r in data["rows"]] == [f"jax {data['bundles'][0]['traced_by']}"]  # one release traced both
    assert data["rows"][0]["together"] and data["rows"][0]["verdict"]["rounds"] == 3
    with pytest.raises(api.UsageError, match="the same bundle"):
        api.compare_bundles("rng-a", "rng-a@1", store=str(store_dir))


def _rng_call():
    import jax
    import jax.numpy as jnp

    return jax.jit(lambda key, s: jax.random.normal(key, (64,)) * s), (jax.random.key(0), jnp.float32(2.0))


COUNTED = '''import os

import jax
import jax.numpy as jnp


def make():
    with open(os.environ["REPROBUNDLE_TEST_FACTORY_CALLS"], "a") as fh:
        fh.write("called\\n")
    return jax.jit(lambda x: jnp.sin(x) * 2), (jnp.arange(8.0),)
'''


@pytest.mark.slow
def test_a_retraced_contender_traces_once_per_replay_and_later_rounds_reuse_it(store_dir, tmp_path, monkeypatch):
    calls = tmp_path / "calls.txt"
    monkeypatch.setenv("REPROBUNDLE_TEST_FACTORY_CALLS", str(calls))
    (tmp_path / "counted.py").write_text(COUNTED)
    _pack(tmp_path / "counted.py", "counted", store_dir)
    calls.unlink()  # pack ran the factory once, on the host
    registry = Registry.open(str(store_dir))
    runs = replay(registry, registry.resolve("counted"), [ContenderSpec("installed", "retrace")],
                  timing=Timing(warmup=1, repeat=6, rounds=3), dump=False, profile=False)
    assert runs[0]["status"] == "ok", runs[0].get("reason")
    assert len(runs[0]["timing"]["rounds"]) == 3
    assert calls.read_text().splitlines() == ["called"]  # the first round's worker; the others loaded its export
