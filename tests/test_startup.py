"""The CLI starts at once: the commands that do little work load no heavy module (scipy, jax, gcsfs, ray, aiohttp,
the library's api, the HTML renderer; numpy only where the command needs it), and Ctrl-C or SIGTERM at any moment
of the start ends the process with one line and 130 or 143, never a traceback. No timing is asserted
(benchmarks/bench_startup.py measures the CPU time)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import reprobundle
from reprobundle.errors import EXIT_INTERRUPTED, EXIT_TERMINATED

HEAVY = ("scipy", "jax", "jaxlib", "gcsfs", "ray", "aiohttp", "jsonschema", "reprobundle.api",
         "reprobundle.render.comparison", "reprobundle.analysis.comparison")

# Runs the CLI through its entry (reprobundle.cli.run, as the script and `python -m reprobundle` do) and writes the
# modules loaded by the end of the process to the file named by argv[1].
AUDITED = ("import atexit, json, sys\n"
           "out = sys.argv.pop(1)\n"
           "atexit.register(lambda: open(out, 'w').write(json.dumps(sorted(sys.modules))))\n"
           "sys.argv[0] = 'reprobundle'\n"
           "from reprobundle.cli import run\n"
           "run()\n")


def _small(x, y):
    return jnp.tanh(x @ y)


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    """The environment of the CLI processes: a store holding small@1, empty environment and cache folders."""
    root = tmp_path_factory.mktemp("startup")
    rng = np.random.default_rng(0)
    reprobundle.pack(jax.jit(_small), rng.standard_normal((8, 16), dtype=np.float32),
                     rng.standard_normal((16, 4), dtype=np.float32), name="small", store=str(root / "store"),
                     warmup=1, repeat=3, profile=False, dump=False)
    found = {k: v for k, v in os.environ.items() if not k.startswith("REPROBUNDLE_")}
    found.update(REPROBUNDLE_STORE=str(root / "store"), REPROBUNDLE_ENV_DIR=str(root / "envs"),
                 REPROBUNDLE_CACHE_DIR=str(root / "cache"))
    return found


def _modules(env, tmp_path, *argv) -> set[str]:
    out = tmp_path / "modules.json"
    done = subprocess.run([sys.executable, "-c", AUDITED, str(out), *argv], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return set(json.loads(out.read_text()))


def _heavy(modules: set[str]) -> list[str]:
    return sorted(h for h in HEAVY if h in modules or any(m.startswith(h + ".") for m in modules))


@pytest.mark.parametrize("argv", [["--help"], ["envs"], ["cache"], ["url", "small"], ["ls"], ["show", "small"],
                                  ["push", "small", "--to", "{tmp}/copy"], ["gc"]],
                         ids=["help", "envs", "cache", "url", "ls", "show", "push", "gc"])
def test_a_light_command_loads_no_heavy_module(env, tmp_path, argv):
    """None of them loads numpy either: ls and show summarise the reference run's integer timings in pure Python
    (analysis/timing_summary.py); push and gc move and count blobs (bundle/sharing.py), as the library's face
    would, without loading it (a push 0.51 -> 0.21 CPU-s quiet: benchmarks/README.md)."""
    modules = _modules(env, tmp_path, *[a.format(tmp=tmp_path) for a in argv])
    assert _heavy(modules) == []
    assert "numpy" not in modules
    assert "reprobundle.cli.runner" in modules  # the audit saw the command run, not an early exit


@pytest.mark.parametrize("argv", [["verify", "small"], ["tag", "small", "t"],
                                  ["script", "small", "-o", "{tmp}/repro.py"], ["issue", "small"]],
                         ids=["verify", "tag", "script", "issue"])
def test_a_command_that_runs_no_jax_loads_no_scipy_jax_or_cloud_client(env, tmp_path, argv):
    """Commands that move and check bundles go through the library but never its statistics, JAX or cloud clients
    (every CLI subprocess of a push campaign paid 1.2 s of CPU for scipy)."""
    modules = _modules(env, tmp_path, *[a.format(tmp=tmp_path) for a in argv])
    assert [h for h in _heavy(modules) if not h.startswith("reprobundle.")] == []


def test_version_prints_the_package_version_and_loads_no_heavy_module(env, tmp_path):
    done = subprocess.run([sys.executable, "-m", "reprobundle", "--version"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"reprobundle {reprobundle.__version__}\n", "")
    modules = _modules(env, tmp_path, "--version")
    assert _heavy(modules) == [] and "numpy" not in modules


def test_a_command_that_needs_the_library_still_loads_it(env, tmp_path):
    """The audit can fail: `history` reads the runs with the library's statistics."""
    modules = _modules(env, tmp_path, "history", "--json")
    assert "reprobundle.api" in modules and "numpy" in modules


def test_importing_the_cli_loads_nothing_of_the_library_and_sets_no_handler():
    probe = ("import signal, sys\n"
             "before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)\n"
             "import reprobundle.cli.runner\n"
             "after = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)\n"
             "print(before == after, *sorted(m for m in sys.modules if m.split('.')[0] in "
             "('numpy', 'scipy', 'jax', 'rich', 'msgpack') or m == 'reprobundle.api'))\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True"]


# Sets SIGINT's disposition (argv[1]: "default" as in a terminal, since a test runner may run with it ignored, or
# "ignore" as for a background job), then becomes the command argv[2:] (the disposition survives exec).
LAUNCH = ("import os, signal, sys\n"
          "signal.signal(signal.SIGINT, signal.SIG_DFL if sys.argv[1] == 'default' else signal.SIG_IGN)\n"
          "os.execv(sys.argv[2], sys.argv[2:])\n")


def _start(env, command: list[str], point: str, sigint: str = "default") -> subprocess.Popen:
    """`command` stopped at the named moment of its start."""
    proc = subprocess.Popen([sys.executable, "-c", LAUNCH, sigint, *command],
                            env={**env, "REPROBUNDLE_START_PAUSE": point}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line != f"paused at {point}\n":
        proc.kill()
        pytest.fail(f"no pause at {point}: {line!r} {proc.communicate()}")
    return proc


@pytest.mark.parametrize("point", ["entry", "loading", "main"])
@pytest.mark.parametrize("sig, code, said", [(signal.SIGINT, 130, "interrupted\n"),
                                             (signal.SIGTERM, 143, "terminated\n")], ids=["sigint", "sigterm"])
def test_a_signal_at_any_moment_of_the_start_is_one_line_and_its_exit_code(env, point, sig, code, said):
    """entry: the handlers are set and nothing is loaded; loading: typer is loaded, the commands are not; main: main
    has taken over (the command unwinds as it would later)."""
    proc = _start(env, [sys.executable, "-m", "reprobundle", "ls"], point)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (code, "", said)


def test_the_cli_package_gives_the_app_with_its_commands_and_main():
    probe = ("from reprobundle.cli import app\n"
             "print(*sorted(c.name or c.callback.__name__ for c in app.registered_commands))\n"
             "from reprobundle.cli import main, runner\n"
             "print(main is runner.main)\n")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    commands, same = done.stdout.splitlines()
    assert {"ls", "show", "url", "envs", "cache", "replay"} <= set(commands.split()) and same == "True"


def test_the_codes_are_the_cli_codes():
    assert (EXIT_INTERRUPTED, EXIT_TERMINATED) == (128 + signal.SIGINT, 128 + signal.SIGTERM)


def test_the_script_has_the_same_entry(env):
    """The installed `reprobundle` script (where there is one) starts through the same entry."""
    script = os.path.join(os.path.dirname(sys.executable), "reprobundle")
    if not os.path.exists(script):
        pytest.skip("no reprobundle script beside this interpreter")
    proc = _start(env, [script, "envs"], "loading")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (130, "", "interrupted\n")


def test_a_sigint_the_process_was_started_ignoring_stays_ignored(env):
    """A background job's SIGINT (ignored by its shell) is not turned back on by the entry."""
    proc = _start(env, [sys.executable, "-m", "reprobundle", "ls"], "entry", sigint="ignore")
    proc.send_signal(signal.SIGINT)  # dropped by the kernel: the process goes on waiting
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (143, "", "terminated\n")


def test_after_the_start_the_command_runs_to_its_end(env):
    done = subprocess.run([sys.executable, "-m", "reprobundle", "ls", "--json"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [row["ref"] for row in json.loads(done.stdout)] == ["small@1"]
