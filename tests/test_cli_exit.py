"""How the CLI ends: one line and exit 70 for a bug, "interrupted" and 130 for Ctrl-C (a real SIGINT to a real
replay leaves no temp folder and no worker behind), never a traceback unless REPROBUNDLE_DEBUG=1; the handler
itself, whatever the typer version does with a KeyboardInterrupt."""

from __future__ import annotations

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
import typer
from cli_runner import cli

import reprobundle
from reprobundle import cli as cli_module


def _boom(*_a, **_k):
    raise RuntimeError("boom\nwith a second line")


def test_an_unexpected_error_is_one_line_and_exit_70(monkeypatch):
    monkeypatch.setattr(reprobundle.api, "open_registry", _boom)
    code, out, err = cli("ls")
    assert code == 70 and out == ""
    assert err.splitlines() == ["error: unexpected RuntimeError: boom",
                                "hint: this is a bug in reprobundle; rerun with REPROBUNDLE_DEBUG=1 and report the "
                                "traceback"]
    monkeypatch.setenv("REPROBUNDLE_DEBUG", "1")
    code, out, err = cli("ls")
    assert code == 70 and "Traceback (most recent call last)" in err and "RuntimeError: boom" in err


def test_ctrl_c_in_a_command_is_interrupted_and_exit_130(monkeypatch):
    def interrupt(*_a, **_k):
        raise KeyboardInterrupt

    monkeypatch.setattr(reprobundle.api, "open_registry", interrupt)
    code, out, err = cli("ls")
    assert (code, out, err) == (130, "", "interrupted\n")


@pytest.mark.parametrize("raised, said", [(KeyboardInterrupt, "interrupted\n"),
                                          (cli_module.Interrupted, "interrupted\n"),
                                          (lambda: typer.Exit(130), "")], ids=["through", "guarded", "typer-exit"])
def test_the_handler_itself_whatever_typer_does_with_ctrl_c(monkeypatch, capsys, raised, said):
    """typer 0.29 turns a KeyboardInterrupt into Exit(130), older ones into Abort or let it through: commands are
    guarded so that main sees Interrupted, and main maps each form to 130 (with "interrupted" when it knows)."""

    class App:
        registered_commands = []

        def __call__(self, **_kw):
            raise raised()

    monkeypatch.setattr(cli_module, "app", App())
    assert cli_module.main(["ls"]) == 130
    assert capsys.readouterr().err == said


def test_every_command_is_guarded():
    cli_module._guard_commands()
    assert all(getattr(c.callback, "reprobundle_guarded", False) for c in cli_module.app.registered_commands)
    before = [c.callback for c in cli_module.app.registered_commands]
    cli_module._guard_commands()  # idempotent
    assert [c.callback for c in cli_module.app.registered_commands] == before


def _small(x, y):
    return jnp.tanh(x @ y), (x * 3).sum()


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    root = tmp_path_factory.mktemp("exit") / "store"
    rng = np.random.default_rng(0)
    reprobundle.pack(jax.jit(_small), rng.standard_normal((8, 16), dtype=np.float32),
                     rng.standard_normal((16, 4), dtype=np.float32), name="small", store=str(root), warmup=1,
                     repeat=3, profile=False)
    return root


def _pids_with_cwd_under(folder: Path) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(Path(os.readlink(proc / "cwd"))).startswith(str(folder)):
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


@pytest.mark.slow
def test_sigint_to_a_real_replay_exits_130_and_leaves_nothing_behind(packed, tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "REPROBUNDLE_STORE": str(packed)}
    # SIGINT handled as in a terminal session (a test runner started in the background may ignore it, and an ignored
    # signal stays ignored across exec; a handled one reverts to the default, which Python then handles)
    launcher = ("import signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
                "from reprobundle.cli import run; run()")
    proc = subprocess.Popen([sys.executable, "-c", launcher, "replay", "small@1", "--jax", "installed", "--jax",
                             "installed", "--repeat", "100000", "--rounds", "2", "--no-profile"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    workdirs: list[Path] = []
    while time.monotonic() < deadline and proc.poll() is None:  # until both workers time steps
        workdirs = list(tmp.glob("reprobundle-replay-*/contender-*/round-0"))
        if len(workdirs) == 2 and _pids_with_cwd_under(tmp):
            break
        time.sleep(0.2)
    assert proc.poll() is None and len(workdirs) == 2, proc.communicate()
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert err.rstrip().endswith("interrupted") and "Traceback" not in err
    assert list(tmp.iterdir()) == []  # the replay's temp folder is gone
    deadline = time.monotonic() + 2  # killed, not left to notice that the host is gone
    while _pids_with_cwd_under(tmp) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _pids_with_cwd_under(tmp) == []  # and no worker outlived it
