"""Bundles measured together share one worker process per version and round (run/shared_worker.py, worker/shared.py):
what each bundle gets from it is what a process of its own gives (outputs, its own XLA dump, its own samples), and a
bundle that kills the process fails alone while the others go on in a new one.

Real workers of the installed jax; the crash comes from an interpreter that runs the real worker and kills itself
when asked to load one named function (the seam test_reliability uses for misbehaving environments)."""

from __future__ import annotations

import io
import logging
import sys
import zipfile
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import quick

import reprobundle
from reprobundle.bundle.registry import Registry
from reprobundle.run.replay import replay_together
from reprobundle.run.replay_options import ReplayOptions

FIXED = dict(warmup=1, repeat=4, rounds=2, profile=False)  # two rounds: the second shares a new process too


def double_sine(x):
    return jnp.sin(x) * 2.0


def shifted_cosine(x):
    return jnp.cos(x) + 1.0


def boom(x):
    return jnp.tanh(x) - 1.0


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("shared") / "store")
    x = np.linspace(-3, 3, 256, dtype=np.float32).reshape(16, 16)
    for fn, scale in ((double_sine, 1.0), (shifted_cosine, 1.0), (boom, 0.5)):  # boom's input is its own blob
        reprobundle.pack(jax.jit(fn), x * np.float32(scale), name=fn.__name__, store=root, **quick.PACK)
    return root


def _dump_text(registry: Registry, run: dict) -> str:
    data = registry.get_blob(run["artifacts"]["xla_dump"]["blob"])
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        return "\n".join(z.read(name).decode("utf-8", "replace") for name in z.namelist())


def test_bundles_measured_together_share_a_process_and_keep_their_own_results(store):
    registry = Registry.open(store)
    bundles = [registry.resolve("double_sine"), registry.resolve("shifted_cosine")]
    shared = replay_together(registry, bundles, ["installed"], ReplayOptions(**FIXED), store_runs=False)
    fresh = replay_together(registry, bundles, ["installed"], ReplayOptions(**FIXED, fresh_workers=True),
                            store_runs=False)
    for (a,), (b,) in zip(shared, fresh):
        assert a["status"] == b["status"] == "ok", (a["reason"], b["reason"])
        assert a["environment"]["conditions"]["workers"] == "shared"
        assert "workers" not in b["environment"]["conditions"]
        assert a["check"]["ok"] and b["check"]["ok"]
        assert [o["blob"] for o in a["outputs"]] == [o["blob"] for o in b["outputs"]]  # the same bits
        assert a["timing"]["rounds"] == b["timing"]["rounds"] == [2, 2]  # steps of each round, its own
    sine_dump, cosine_dump = (_dump_text(registry, run) for (run,) in shared)
    assert "double_sine" in sine_dump and "shifted_cosine" not in sine_dump  # each job took its own compile's files
    assert "shifted_cosine" in cosine_dump and "double_sine" not in cosine_dump


def _boom_interpreter(folder: Path) -> Path:
    """A `python` that runs the real worker (the launcher's arguments, then the worker's) in this interpreter, and
    kills itself with SIGSEGV when asked to load the function named boom."""
    d = folder / "boom" / "bin"
    d.mkdir(parents=True)
    (d / "prog.py").write_text(
        "import importlib.util, os, signal, sys\n"
        "args = sys.argv[1:]\n"
        "worker = args[args.index('-c') + 3]\n"  # -I -c LAUNCHER PPID WORKER ARGS...
        "sys.argv = [worker] + args[args.index('-c') + 4:]\n"
        "spec = importlib.util.spec_from_file_location('reprobundle_worker', os.path.join(worker, '__init__.py'),\n"
        "                                              submodule_search_locations=[worker])\n"
        "package = importlib.util.module_from_spec(spec)\n"
        "sys.modules['reprobundle_worker'] = package\n"
        "spec.loader.exec_module(package)\n"
        "from reprobundle_worker import job, main\n"
        "real = job.Worker.load_function\n"
        "def load_function(self):\n"
        "    if (self.job['function'].get('fields') or {}).get('fun_name') == 'boom':\n"
        "        os.kill(os.getpid(), signal.SIGSEGV)\n"
        "    return real(self)\n"
        "job.Worker.load_function = load_function\n"
        "sys.exit(main.main())\n")
    exe = d / "python"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{d / "prog.py"}" "$@"\n')
    exe.chmod(0o755)
    return exe


def test_a_bundle_that_kills_its_shared_process_fails_alone(store, tmp_path, caplog):
    from test_reliability import FakeEnvironments

    registry = Registry.open(store)
    bundles = [registry.resolve(name) for name in ("double_sine", "boom", "shifted_cosine")]
    envs = FakeEnvironments({"0.0.1-boom": _boom_interpreter(tmp_path)})
    with caplog.at_level(logging.WARNING, logger="reprobundle"):
        runs = replay_together(registry, bundles, ["0.0.1-boom"], ReplayOptions(**FIXED, dump=False),
                               env_manager=envs, store_runs=False)
    (sine_run,), (boom_run,), (cosine_run,) = runs
    assert boom_run["status"] == "crashed" and "SIGSEGV" in boom_run["reason"], boom_run["reason"]
    for run in (sine_run, cosine_run):  # double_sine was ready in the process that died: it went on in a new one
        assert run["status"] == "ok" and run["check"]["ok"], run["reason"]
        assert run["timing"]["rounds"] == [2, 2]
    retried = [r.getMessage() for r in caplog.records if "retrying it in a new process" in r.getMessage()]
    assert len(retried) == 2 and all("on 0.0.1-boom" in line for line in retried), retried


def test_a_corrupt_bundle_in_a_batch_fails_alone(store, tmp_path):
    """A batch whose measurement cannot start (one bundle's input blob corrupt) is replayed bundle by bundle, so
    only that bundle fails and says why."""
    import shutil

    from reprobundle.bundle.digest import blob_key
    from reprobundle.fleet.executor import ReplayTask
    from reprobundle.fleet.sweep import run_replay_tasks

    copy = tmp_path / "store"
    shutil.copytree(store, copy)
    registry = Registry.open(str(copy))
    leaf = registry.resolve("boom").manifest["inputs"]["leaves"][0]
    blob = registry.store.local_path(blob_key(leaf["blob"]["digest"]))
    blob.chmod(0o644)
    blob.write_bytes(b"\0" * blob.stat().st_size)
    tasks = [ReplayTask(str(copy), name, ("installed",), ReplayOptions(**FIXED, dump=False))
             for name in ("double_sine", "boom", "shifted_cosine")]
    sine, boom_result, cosine = run_replay_tasks(tasks)
    assert boom_result["status"] == "failed" and "corrupt" in boom_result["error"], boom_result
    assert sine["status"] == cosine["status"] == "done", (sine.get("error"), cosine.get("error"))
    assert [r["status"] for r in sine["runs"] + cosine["runs"]] == ["ok", "ok"]
