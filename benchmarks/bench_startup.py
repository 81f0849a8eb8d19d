"""What the CLI costs to start: the CPU time (user + sys of the child process) of the commands that do little work,
against `python -c "import typer"` measured in the same run.

Each round runs every command once, in a rotated order, as `python -m reprobundle COMMAND` (the script's entry;
the script itself adds nothing measurable), on a temporary store holding one small packed bundle, an empty
environment folder and an empty cache. Also measured: a bare typer app of two commands running one, and its
--help (typer's own floor: typer 0.29 builds pydantic adapters for the parameters when a command runs). Figures
are medians over the rounds; CPU time, not wall time, since the project's VM is shared and its load moves wall time
far more than CPU time. A first untimed pass writes the bytecode caches (a user's second start).

Usage: .venv/bin/python benchmarks/bench_startup.py [--rounds 9] [--code DIR]
(--code: measure the reprobundle package in DIR instead, e.g. the code before a change from
`git archive COMMIT reprobundle | tar -x -C DIR`, with the same interpreter and bundle.)
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# typer's own floor: a bare app of two commands, running one (typer 0.29 builds pydantic adapters for the
# parameters when a command runs, and renders --help with rich)
BARE_APP = r"""
import typer
app = typer.Typer(add_completion=False)

@app.command()
def cache(clear: bool = typer.Option(False, "--clear"), as_json: bool = typer.Option(False, "--json")) -> None:
    typer.echo("0 blobs")

@app.command()
def other(x: int = 1) -> None:
    pass

app()
"""

PACK = r"""
import sys
import jax, jax.numpy as jnp, numpy as np
import reprobundle

def small(x, y):
    return jnp.tanh(x @ y)

rng = np.random.default_rng(0)
reprobundle.pack(jax.jit(small), rng.standard_normal((8, 16), dtype=np.float32),
                 rng.standard_normal((16, 4), dtype=np.float32), name="small", store=sys.argv[1], warmup=1, repeat=3,
                 profile=False, dump=False)
"""


def child_cpu(argv: list[str], env: dict[str, str]) -> float:
    """User + sys seconds of one child process (and whatever it waited for). It runs in the store's parent folder:
    `python -m` puts the current folder first on sys.path, which must not be a checkout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          cwd=Path(env["REPROBUNDLE_STORE"]).parent)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{argv} exited {done.returncode}: {done.stderr}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--code", default=None, help="A folder holding the reprobundle package to measure.")
    args = parser.parse_args()
    python = sys.executable
    cli = [python, "-m", "reprobundle"]
    with tempfile.TemporaryDirectory(prefix="bench-startup-") as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith("REPROBUNDLE_")}
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's second start finds the bytecode cached
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")  # the same for every variant, in no checkout
        if args.code:
            env["PYTHONPATH"] = str(Path(args.code).resolve())  # ahead of the editable install's finder
        env.update(REPROBUNDLE_STORE=str(Path(tmp) / "store"), REPROBUNDLE_ENV_DIR=str(Path(tmp) / "envs"),
                   REPROBUNDLE_CACHE_DIR=str(Path(tmp) / "cache"))
        subprocess.run([sys.executable, "-c", PACK, env["REPROBUNDLE_STORE"]], env=env, check=True)
        commands = {"import typer": [python, "-c", "import typer"], "python -c pass": [python, "-c", "pass"],
                    "bare typer app": [python, "-c", BARE_APP, "cache"],
                    "bare app --help": [python, "-c", BARE_APP, "--help"],
                    "--help": cli + ["--help"], "ls": cli + ["ls"], "show small": cli + ["show", "small"],
                    "url small": cli + ["url", "small"], "envs": cli + ["envs"], "cache": cli + ["cache"],
                    # the first (untimed) pass copies the bundle; each timed push then finds every blob there
                    "push small": cli + ["push", "small", "--to", str(Path(tmp) / "pushed")], "gc": cli + ["gc"]}
        for argv in commands.values():  # bytecode caches
            child_cpu(argv, env)
        samples: dict[str, list[float]] = {name: [] for name in commands}
        names = list(commands)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                samples[name].append(child_cpu(commands[name], env))
    typer_s = statistics.median(samples["import typer"])
    rows = {name: {"cpu_s": round(statistics.median(s), 3), "min_s": round(min(s), 3), "max_s": round(max(s), 3),
                   "vs_import_typer": round(statistics.median(s) / typer_s, 2)} for name, s in samples.items()}
    print(json.dumps({"code": args.code or str(ROOT), "rounds": args.rounds, "load": os.getloadavg(), "commands": rows},
                     indent=2))
    print(f"\n{'command':<16} {'CPU s':>7} {'range':>13} {'/ import typer':>15}")
    for name, row in rows.items():
        print(f"{name:<16} {row['cpu_s']:>7.3f} {row['min_s']:>6.3f}-{row['max_s']:<6.3f} {row['vs_import_typer']:>14.2f}x")


if __name__ == "__main__":
    main()
