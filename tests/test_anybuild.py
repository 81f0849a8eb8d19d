"""Any JAX build: nightlies from a PEP 503 index (a real one, on 127.0.0.1, of real wheels re-labelled as nightlies),
`bisect --nightly` down to the commits, and `--jax PATH` on an environment reprobundle did not create.

The index (tests/nightly_index.py) holds five days; the good days are re-labelled wheels of the host's own JAX
release (so they compute what the pack's reference run computed), the bad days those of 0.8.0, whose XLA propagates
a NaN through a max reduction that the host's release does not (found by experiment: `nanmax` below mismatches on
0.8.0 and 0.4.30, matches on 0.10.2), so the bisection's answer is deterministic on any machine:

    2026-01-01 good (endpoint)   2026-01-02 good (the same commit as 01-01: not replayed)
    2026-01-03 jax wheel only (skipped)   2026-01-04 bad   2026-01-05 bad (endpoint)
"""

from __future__ import annotations

import importlib.metadata as md
import json
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_runner import cli
from nightly_index import CACHE, IndexServer, build_index

import reprobundle
from reprobundle.envs import local_jax as local_env
from reprobundle.envs.env_config import EnvConfig
from reprobundle.envs.manager import EnvironmentManager
from reprobundle.envs.nightly import find_nightly, list_nightlies, missing_days, nightly_date
from reprobundle.errors import EnvironmentCreationError
from reprobundle.render.listing import nightly_text

BAD_RELEASE = "0.8.0"
HOST = md.version("jax")
# (release re-labelled, jaxlib published, the commit it was built from): 01-02 rebuilt 01-01's commit
DAYS = {"2026-01-01": (HOST, True, "a"), "2026-01-02": (HOST, True, "a"), "2026-01-03": (HOST, False, "b"),
        "2026-01-04": (BAD_RELEASE, True, "c"), "2026-01-05": (BAD_RELEASE, True, "d")}


@pytest.fixture(scope="session")
def nightly_index(tmp_path_factory):
    if HOST == BAD_RELEASE:
        pytest.skip(f"the host's jax is {BAD_RELEASE}: the good and bad days would be the same release")
    root = tmp_path_factory.mktemp("nightly-index")
    made = build_index(root, DAYS, CACHE / "nightly")
    server = IndexServer(root)
    yield server, made
    server.close()


@pytest.fixture(scope="session")
def env_root(tmp_path_factory):
    return tmp_path_factory.mktemp("nightly-envs")


def test_nightly_names_and_listing(nightly_index):
    server, made = nightly_index
    assert nightly_date("nightly:2026-01-02") == nightly_date("nightly:20260102") == \
        nightly_date("0.11.0.dev20260102") == nightly_date("jax==0.11.0.dev20260102")
    assert nightly_date("0.8.0") is None and nightly_date("installed") is None
    with pytest.raises(EnvironmentCreationError, match="does not name a day"):
        nightly_date("nightly:2026-02-30")
    found, incomplete = list_nightlies(server.url)
    assert [n.date.isoformat() for n in found] == ["2026-01-01", "2026-01-02", "2026-01-04", "2026-01-05"]
    assert [n.jax_version for n in found] == [made[d]["version"] for d in ("2026-01-01", "2026-01-02",
                                                                            "2026-01-04", "2026-01-05")]
    assert found[0].pythons == (sys.version_info[1],)
    assert {d.isoformat(): why for d, why in incomplete.items()} == {
        "2026-01-03": "a jax wheel but no jaxlib wheel for this platform"}
    with pytest.raises(EnvironmentCreationError, match="no nightly of 2026-01-03") as missing:
        find_nightly("nightly:2026-01-03", found, server.url)
    assert missing.value.hint == "nearest days with wheels: 2026-01-02 and 2026-01-04"
    assert [d.isoformat() for d in missing_days(found[0].date, found[-1].date, [n.date for n in found])] == \
        ["2026-01-03"]


@pytest.mark.slow
def test_nightly_environment_is_built_cached_and_listed(nightly_index, env_root, monkeypatch):
    server, made = nightly_index
    manager = EnvironmentManager(EnvConfig.of(env_root, index_url=server.url))
    env = manager.ensure("nightly:2026-01-02")
    assert (env.jax_version, env.jaxlib_version, env.nightly) == (made["2026-01-02"]["version"],) * 2 + ("2026-01-02",)
    assert dict(env.commits) == {"jax": made["2026-01-02"]["commit"], "jaxlib": made["2026-01-02"]["commit"]}
    out = subprocess.run([str(env.python_executable), "-c", "import jax; print(jax.__version__)"],
                         capture_output=True, text=True, check=True).stdout.split()[-1]
    assert out == made["2026-01-02"]["version"]
    # cached: the same environment by its version, and by its date with the index unreachable
    assert manager.ensure(made["2026-01-02"]["version"]).path == env.path
    offline = EnvironmentManager(EnvConfig.of(env_root, index_url="http://127.0.0.1:9/simple"))
    assert offline.ensure("nightly:2026-01-02").created == env.created
    monkeypatch.setenv("REPROBUNDLE_ENV_DIR", str(env_root))
    code, out, _ = cli("envs", "--json")
    listed = [e for e in json.loads(out) if e["nightly"] == "2026-01-02"]
    assert code == 0 and listed[0]["jax"] == made["2026-01-02"]["version"] and listed[0]["index"] == server.url
    code, out, _ = cli("envs")
    assert f"{made['2026-01-02']['version']} (nightly 2026-01-02)" in out


def _nanmax_bundle(store):
    a = (np.random.default_rng(0).standard_normal((64, 64)) * 30).astype(np.float32)
    fn = jax.jit(lambda a: jnp.max(jnp.where(a > 40, jnp.nan, a), axis=0))
    return reprobundle.pack(fn, a, name="nanmax", store=str(store), warmup=1, repeat=2, dump=False, profile=False)


@pytest.mark.slow
def test_bisect_nightly_finds_the_first_bad_day_and_its_commits(nightly_index, env_root, tmp_path, monkeypatch):
    server, made = nightly_index
    monkeypatch.setenv("REPROBUNDLE_ENV_DIR", str(env_root))
    monkeypatch.setenv("REPROBUNDLE_JAX_SOURCE", server.source)
    store = tmp_path / "store"
    _nanmax_bundle(store)
    code, out, err = cli("bisect", "nanmax", "--nightly", "--good", "nightly:2026-01-01", "--bad", "nightly:2026-01-05",
                         "--index-url", server.url, "--rounds", "1", "--repeat", "2", "--json", store=store)
    assert code == 0, err
    data = json.loads(out)
    good, bad = made["2026-01-02"], made["2026-01-04"]
    assert (data["criterion"], data["last_good"], data["first_bad"]) == ("outputs", good["version"], bad["version"])
    night = data["nightly"]
    assert night["skipped_days"] == [{"date": "2026-01-03", "reason": "a jax wheel but no jaxlib wheel for this "
                                                                      "platform"}]
    assert (night["last_good"]["jaxlib"], night["first_bad"]["jaxlib"]) == (good["commit"], bad["commit"])
    assert (night["last_good"]["xla"], night["first_bad"]["xla"]) == (good["xla"], bad["xla"])
    assert night["compare"] == {"jax": f"https://github.com/jax-ml/jax/compare/{good['commit']}...{bad['commit']}",
                                "xla": f"https://github.com/openxla/xla/compare/{good['xla']}...{bad['xla']}"}
    assert good["commit"] == made["2026-01-01"]["commit"]  # 01-02 rebuilt 01-01: classed without a replay
    assert data["evidence"][good["version"]].startswith(f"the same build as {made['2026-01-01']['version']}")
    rep = data["comparison"]["reproduce"]
    assert f"--jax {good['version']} --jax {bad['version']} --index-url {server.url}" in rep["command"]
    assert rep["nightlies"][1] == (f"pip install --pre 'jax=={bad['version']}' 'jaxlib=={bad['version']}' "
                                   f"--extra-index-url {server.url}")
    assert data["classes"][bad["version"]] == "bad" and data["classes"][good["version"]] == "good"
    text = nightly_text(night)
    assert f"first bad: {bad['version']} (2026-01-04), built from jax@{bad['commit'][:12]}" in text
    assert night["compare"]["xla"] in text and "skipped 2026-01-03: a jax wheel but no jaxlib wheel" in text


def _venv_with(path, *packages):
    from uv import find_uv_bin

    uv = find_uv_bin()
    if not path.exists():
        subprocess.run([uv, "venv", "-q", "--python", sys.executable, str(path)], check=True)
    subprocess.run([uv, "pip", "install", "-q", "--python", str(path / "bin" / "python"), *packages], check=True)


@pytest.mark.slow
def test_jax_path_replays_that_environment_as_it_is(tmp_path):
    venv = tmp_path / "myjax"
    _venv_with(venv, "jax==0.7.2", "jaxlib==0.7.2")
    store = tmp_path / "store"
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    reprobundle.pack(jax.jit(lambda a: jnp.tanh(a) @ a.T), a, name="small", store=str(store), warmup=1, repeat=2,
                     dump=False, profile=False)
    # without msgpack the worker cannot run there: said, and nothing installed
    code, out, _ = cli("replay", "small", "--jax", str(venv), "--rounds", "1", "--repeat", "2", "--json", store=store)
    run = json.loads(out)["runs"][0]
    assert code == 9 and run["status"] == "error"
    assert "msgpack is not installed" in run["reason"]
    assert subprocess.run([str(venv / "bin" / "python"), "-c", "import msgpack"]).returncode != 0
    _venv_with(venv, "msgpack")
    code, out, err = cli("replay", "small", "--jax", str(venv), "--jax", str(venv / "bin" / "python"), "--rounds", "1",
                         "--repeat", "2", "--json", store=store)
    assert code == 0, err
    runs = json.loads(out)["runs"]
    assert [r["jax"] for r in runs] == ["0.7.2", "0.7.2"]
    assert runs[0]["requested"] == str(venv)
    from reprobundle.api import open_registry

    registry = open_registry(str(store))
    stored = {r["run_id"]: r for r in registry.runs(registry.resolve("small").ref.bundle_id)}[runs[0]["run_id"]]
    assert stored["environment"]["jax_build"] == {"origin": "local", "commits": {}, "path": str(venv),
                                                  "source_build": None}
    assert stored["contender"]["jax"] == str(venv)
    env = local_env.inspect_interpreter(str(venv))
    assert (env["jax"], env["jaxlib"], env["source_build"]) == ("0.7.2", "0.7.2", None)
    code, out, _ = cli("compare", "small", "--jax", str(venv), "--json", store=store)
    assert code == 0
    with pytest.raises(EnvironmentCreationError, match="no such interpreter"):
        local_env.interpreter_of(str(tmp_path / "nowhere" / "python"))


def test_source_built_jaxlib_is_said():
    assert "local version label" in local_env.source_build({"jaxlib": "0.8.1.dev20251003+g1234abc"})
    assert "editable" in local_env.source_build({"jaxlib": "0.8.1", "jaxlib_origin": {
        "url": "file:///src/jax/build", "dir_info": {"editable": True}}})
    assert "not from an index" in local_env.source_build({"jaxlib": "0.8.1", "jaxlib_origin": {
        "url": "file:///src/jax/dist/jaxlib-0.8.1-cp312-cp312-manylinux_2_27_x86_64.whl", "archive_info": {}}})
    assert local_env.source_build({"jaxlib": "0.8.1", "jaxlib_origin": None}) is None
