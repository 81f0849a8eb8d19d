"""A machine with no network and JAX on PYTHONPATH (the borrowed TPU machine, many clusters and containers): the
installed release's worker sees what `python -c "import jax"` sees there, and the release list comes from a
`file://` simple index or a folder of wheels made here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from packaging.utils import canonicalize_name

import reprobundle
from reprobundle.envs.manager import EnvironmentManager
from reprobundle.envs.package_index import PackageIndex
from reprobundle.errors import EnvironmentCreationError

ROOT = Path(__file__).resolve().parent.parent
WHEEL_TAG = "cp311-cp311-manylinux2014_x86_64"


def _loop(x, w):
    def body(i, carry):
        return jnp.where(i % 2 == 0, jnp.tanh(carry @ w), carry * 0.5)

    return jax.lax.fori_loop(0, 4, body, x)


def test_the_installed_releases_worker_sees_a_jax_on_pythonpath(tmp_path):
    """A host interpreter with no jax of its own, its jax and reprobundle on PYTHONPATH: replay --jax installed runs
    (the worker keeps PYTHONPATH and runs without -I), outputs checked."""
    store = tmp_path / "store"
    rng = np.random.default_rng(0)
    reprobundle.pack(jax.jit(_loop), rng.standard_normal((8, 16), dtype=np.float32),
                     rng.standard_normal((16, 16), dtype=np.float32) / 4, name="loop", store=str(store), warmup=1,
                     repeat=2, dump=False, profile=False)
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True)
    site = sysconfig.get_paths()["purelib"]  # this environment's packages: jax, msgpack, reprobundle's needs
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{site}", "REPROBUNDLE_STORE": str(store)}
    env.pop("VIRTUAL_ENV", None)
    bare_python = bare / "bin" / "python"
    assert subprocess.run([str(bare_python), "-I", "-c", "import jax"], capture_output=True).returncode != 0
    done = subprocess.run([str(bare_python), "-m", "reprobundle", "replay", "loop", "--jax", "installed", "--repeat", "2",
                           "--rounds", "1", "--json"], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    assert '"status": "ok"' in done.stdout


def _page(folder: Path, project: str, names: list[str]) -> None:
    """A PEP 503 project page (the folder named by the project's normalized name) linking to `names`."""
    page = folder / canonicalize_name(project)
    page.mkdir(parents=True, exist_ok=True)
    links = "".join(f'<a href="{name}">{name}</a>\n' for name in names)
    (page / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")


def test_releases_listed_from_a_file_index_and_a_find_links_folder(tmp_path, monkeypatch):
    """A `file://` simple index (project pages in a folder) and a find-links folder of wheels, read with no
    network; a missing index folder is said with its path."""
    simple = tmp_path / "simple"
    _page(simple, "jax", ["jax-0.4.30-py3-none-any.whl", "jax-0.4.31-py3-none-any.whl"])
    _page(simple, "jaxlib", [f"jaxlib-0.4.30-{WHEEL_TAG}.whl"])
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for name in ("jax-0.5.0-py3-none-any.whl", f"jaxlib-0.5.0-{WHEEL_TAG}.whl"):
        (wheels / name).write_bytes(b"")
    url = simple.as_uri()
    monkeypatch.delenv("UV_FIND_LINKS", raising=False)
    monkeypatch.setenv("REPROBUNDLE_INDEX_URL", url)
    # 0.4.31 with 0.4.30's jaxlib, as the index rule has it for a jax-only release
    assert EnvironmentManager(tmp_path / "envs-a").available_versions() == ["0.4.30", "0.4.31"]
    monkeypatch.setenv("REPROBUNDLE_FIND_LINKS", str(wheels))
    assert EnvironmentManager(tmp_path / "envs-b").available_versions() == ["0.4.30", "0.4.31", "0.5.0"]
    index = PackageIndex(tmp_path / "c" / ".index-cache.json", url=(tmp_path / "nowhere").as_uri())
    assert index.load() is None and "nowhere" in (index.error or "")
    monkeypatch.setenv("REPROBUNDLE_INDEX_URL", (tmp_path / "nowhere").as_uri())
    monkeypatch.delenv("REPROBUNDLE_FIND_LINKS")
    with pytest.raises(EnvironmentCreationError, match="nowhere"):
        EnvironmentManager(tmp_path / "envs-c").available_versions()


@pytest.mark.crossversion
def test_an_environment_built_from_a_file_index_and_a_find_links_folder(tmp_path, monkeypatch):
    """`envs --add 0.8.0` with no index but a `file://` one in a folder (jax, jaxlib and their needs, real wheels)
    and a find-links folder (msgpack, flatbuffers): uv is told both, the release list comes from them, the
    environment imports its jax, a second --add finds it there, and a release the index lacks is an error that names
    the index."""
    import importlib.metadata as md
    import json

    from cli_runner import cli
    from nightly_index import release_wheel

    simple, links = tmp_path / "simple", tmp_path / "links"
    links.mkdir()
    pinned = {"jax": "0.8.0", "jaxlib": "0.8.0"} | {p: md.version(p) for p in ("numpy", "scipy", "ml_dtypes",
                                                                             "opt_einsum")}
    for project, version in pinned.items():
        wheel = release_wheel(project, version)
        _page(simple, project, [wheel.name])
        shutil.copy(wheel, simple / canonicalize_name(project) / wheel.name)
    for project in ("msgpack", "flatbuffers"):
        shutil.copy(release_wheel(project, md.version(project)), links)
    for var in ("REPROBUNDLE_INDEX_URL", "REPROBUNDLE_FIND_LINKS"):  # set by the command: undone after the test
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    for var in ("UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "PIP_INDEX_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("REPROBUNDLE_ENV_DIR", str(tmp_path / "envs"))
    options = ["--index-url", simple.as_uri(), "--find-links", str(links), "--platform", "cpu", "--json"]
    code, out, err = cli("envs", "--add", "0.8.0", *options)
    assert code == 0, err
    (added,) = json.loads(out)
    assert added["built"] and added["jax"] == "0.8.0" and added["build"] == "cpu" and added["seconds"] > 0
    assert EnvironmentManager(tmp_path / "envs").available_versions() == ["0.8.0"]
    python = Path(added["path"]) / "bin" / "python"
    done = subprocess.run([str(python), "-I", "-c", "import jax, msgpack; print(jax.__version__)"],
                          capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "0.8.0", done.stderr
    code, out, _ = cli("envs", "--add", "0.8.0", *options[:-1])
    assert code == 0 and f"jax 0.8.0 (cpu, Python {added['python']}) was already there: {added['path']}" in out
    code, _, err = cli("envs", "--add", "0.7.2", *options)
    assert code == 7 and simple.as_uri() in err, err


def test_index_options_of_the_commands_that_make_environments(tmp_path, monkeypatch):
    """--index-url (a folder or file:// simple index) and --find-links on the commands that build environments or
    list releases set what REPROBUNDLE_INDEX_URL and REPROBUNDLE_FIND_LINKS would; a folder that is not there is one
    clear error before anything runs."""
    from cli_runner import cli

    from reprobundle.envs.package_index import find_links, index_url

    for var in ("REPROBUNDLE_INDEX_URL", "REPROBUNDLE_FIND_LINKS"):  # set by the commands: undone after the test
        monkeypatch.setenv(var, "")
        monkeypatch.delenv(var)
    store = ["--store", str(tmp_path / "store")]
    for command in (["explain", "x", *store], ["investigate", "x", "--good", "0.4.30", "--bad", "0.4.31", *store],
                    ["changes", "0.4.30", "0.4.31"], ["replay", "x", *store],
                    ["bisect", "x", "--good", "0.4.30", "--bad", "0.4.31", *store], ["sweep", *store]):
        code, _, err = cli(*command, "--find-links", str(tmp_path / "nowhere"))
        assert code == 2 and f"no such folder: {tmp_path / 'nowhere'}" in err, (command, err)
    simple, wheels = tmp_path / "simple", tmp_path / "wheels"
    _page(simple, "jax", ["jax-0.4.30-py3-none-any.whl"])
    wheels.mkdir()
    cli("changes", "0.4.30", "0.4.30", "--index-url", str(simple), "--find-links", str(wheels))
    assert index_url() == simple.resolve().as_uri() and find_links() == [str(wheels.resolve())]
