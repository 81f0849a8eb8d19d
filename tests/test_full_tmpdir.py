"""A full TMPDIR (#29): pack, capture, replay, isolate, explain and sweep end with DiskFullError (exit 10) naming the
full folder and TMPDIR, and publish nothing. TMPDIR is a small tmpfs filled to its last byte (where it has a page
left, the worker runs and meets the full disk itself); where mount is not allowed (not root, a container without
CAP_SYS_ADMIN) the tests skip, since neither a file-size limit (EFBIG, SIGXFSZ) nor a quota is the same condition.

Each command runs in this process (cli_runner), so only the program capture runs and the workers that get so far
start Python and jax."""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from cli_runner import cli
from quick import PACK, PACK_ARGS, REPLAY_ARGS
from small_bundle import copy_of

from reprobundle.errors import DiskFullError

PROGRAM = """\
import jax, jax.numpy as jnp, numpy as np

f = jax.jit(lambda a: jnp.tanh(a) * 2)
x = np.ones((4, 4), np.float32)
for _ in range(3):
    f(x).block_until_ready()
"""
SCRIPT = """\
import jax, jax.numpy as jnp, numpy as np


def make():
    x = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    return jax.jit(lambda a, b: (jnp.tanh(a @ b), (a * 2).sum())), (x, x.T.copy())
"""
OTHER = sys.executable  # a JAX given by its interpreter: a second "version" for explain and sweep, the same jax


@contextlib.contextmanager
def _full_tmpfs(folder: Path, *, leave: int = 0):
    """A 4 MiB tmpfs at `folder`, filled to its last byte but `leave` bytes; skips where mount is not allowed."""
    folder.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs as TMPDIR needs root (a file-size limit is EFBIG, not a full disk)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(folder)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        if leave:
            (folder / "reserve").write_bytes(b"\0" * leave)
        with open(folder / "filler", "wb", buffering=0) as f:
            for chunk in (1 << 16, 1 << 12, 1 << 9, 1):
                with contextlib.suppress(OSError):
                    while True:
                        f.write(b"\0" * chunk)
        if leave:
            (folder / "reserve").unlink()
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def _published(store: Path) -> set[str]:
    """Every record a command publishes: manifests, tags, runs (and pending marks)."""
    return {str(p.relative_to(store)) for top in ("bundles", "tags", "runs") for p in (store / top).rglob("*")}


def _layer(x, w1, w2):  # tests/test_isolate.py's: a function isolate splits into pieces
    h = jnp.tanh(x @ w1)
    return (jax.nn.softmax(h * 2.0, axis=-1) @ w2).sum(axis=0), h


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    base = tmp_path_factory.mktemp("full-tmpdir")
    (base / "prog.py").write_text(PROGRAM)
    (base / "make.py").write_text(SCRIPT)
    return base


@pytest.fixture(scope="module")
def template(small_store_template, tmp_path_factory):
    """small@1 and layer@1 (for isolate), in a store the tests copy."""
    import reprobundle

    store = copy_of(small_store_template, tmp_path_factory.mktemp("full-tmpdir-store") / "store")
    rng = np.random.default_rng(0)
    reprobundle.pack(jax.jit(_layer), rng.standard_normal((32, 64), dtype=np.float32),
                     rng.standard_normal((64, 64), dtype=np.float32) / 8,
                     rng.standard_normal((64, 16), dtype=np.float32), name="layer", store=str(store), **PACK)
    return store


# command -> its arguments (the store is added by cli)
COMMANDS = {
    "pack": ["pack", "{files}/make.py", "--name", "packed", "--warmup", "0", "--repeat", "1", "--no-dump"],
    "capture": ["capture", "--top", "1", "--name", "captured", *PACK_ARGS, "--", sys.executable,
                "{files}/prog.py"],
    "replay": ["replay", "small@1", "--rounds", "1", *REPLAY_ARGS],
    "isolate": ["isolate", "layer@1", "--jax", "installed", "--jax", "installed", "--pieces", "2", "--max-time", "1",
                "--repeat", "8"],
    "explain": ["explain", "small@1", "--jax", "installed", "--jax", OTHER, "--rounds", "1", "--repeat", "2",
                "--warmup", "0", "--max-time", "30"],
    "sweep": ["sweep", "small", "--baseline", "installed", "--candidate", OTHER, "--rounds", "1", "--repeat", "2",
              "--warmup", "0"],
}


def _run_on_full_tmpdir(command, files, template, tmp_path, monkeypatch, *, leave=0):
    store = copy_of(template, tmp_path / "store")
    before = _published(store)
    with _full_tmpfs(tmp_path / "tmpdir", leave=leave) as disk:
        monkeypatch.setenv("TMPDIR", str(disk))
        code, out, err = cli(*[a.format(files=files) for a in command], store=store)
        left = {p.name for p in disk.iterdir()} - {"filler"}
    return code, out, err, disk, left, _published(store) - before


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_full_tmpdir_is_disk_full_naming_the_folder_and_tmpdir(name, files, template, tmp_path,
                                                                  monkeypatch):
    """Class: each command whose work folder is in a TMPDIR without a byte left: exit 10 with one line naming that
    folder and TMPDIR (Python's tempfile would quietly use another folder; reprobundle uses the one named), no
    traceback, no worker that "ended abnormally", nothing published, no work folder left behind."""
    code, out, err, disk, left, published = _run_on_full_tmpdir(COMMANDS[name], files, template, tmp_path,
                                                                monkeypatch)
    assert code == DiskFullError.exit_code, (name, code, out, err)
    assert f"no space left in {disk}" in err and f"TMPDIR={disk}" in err, err
    assert "Traceback" not in err and "abnormally" not in err and "unexpected" not in err, err
    assert not published, published
    assert not left, left


@pytest.mark.parametrize("leave", [24 << 10, 96 << 10])
def test_a_worker_that_fills_tmpdir_is_disk_full_not_a_crash(leave, files, template, tmp_path,
                                                              monkeypatch):
    """The report of #29: with a little room left the job is written and the worker runs, then meets the full disk
    (its XLA dump, its results, its stderr: a file on that disk, so Python cannot even flush it). pack says the disk
    is full, never "the reference run failed ... ended abnormally during phase 'execute'"."""
    argv = ["pack", "{files}/make.py", "--name", "packed", "--warmup", "0", "--repeat", "1"]  # an XLA dump
    code, out, err, disk, left, published = _run_on_full_tmpdir(argv, files, template, tmp_path,
                                                                monkeypatch, leave=leave)
    assert code == DiskFullError.exit_code, (code, out, err)
    assert f"no space left in {disk}" in err and f"TMPDIR={disk}" in err, err
    assert "abnormally" not in err and "reference run on the packing JAX failed" not in err, err
    assert not published and not left, (published, left)


def test_the_api_raises_disk_full_as_an_oserror_too(small_store_template, tmp_path, monkeypatch):
    """The Python API meets the same error: a DiskFullError, which is an OSError of ENOSPC naming the folder."""
    import reprobundle

    store = copy_of(small_store_template, tmp_path / "store")
    with _full_tmpfs(tmp_path / "tmpdir") as disk:
        monkeypatch.setenv("TMPDIR", str(disk))
        with pytest.raises(OSError) as caught:
            reprobundle.pack(jax.jit(lambda a: a * 2), np.ones(4, np.float32), name="api", store=str(store),
                             warmup=0, repeat=1, dump=False, profile=False)
    assert isinstance(caught.value, DiskFullError) and caught.value.filename == str(disk)
    assert not (store / "bundles" / "api").exists()
