"""What a JAX process costs to start with each ml_dtypes: the CPU time (user + sys of the child) of
`import jax; jax.numpy.zeros(8).block_until_ready()`, the start every replay worker and every in-process pack
pays, with ml_dtypes 0.6.0 and 0.7.0, in the same run.

Each ml_dtypes release is installed (`pip install --no-deps --target`) into a folder of its own that goes first on
the child's sys.path, so both runs use this interpreter's JAX, jaxlib and numpy and differ only in ml_dtypes. The
rounds alternate the two; figures are medians. Also measured: `import numpy; import ml_dtypes` alone, to show where
the difference is.

Usage: .venv/bin/python benchmarks/bench_jax_start.py [--rounds 7] [--versions 0.6.0,0.7.0]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

PROGRAMS = {
    "import numpy, ml_dtypes": "import numpy, ml_dtypes",
    "JAX start (import, one array)": "import jax; jax.numpy.zeros(8).block_until_ready()",
}


def cpu_seconds(code: str, folder: Path) -> float:
    """The child's user + sys CPU time running `code` with `folder` first on its path."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "PYTHONPATH": str(folder), "JAX_PLATFORMS": "cpu"}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def install(version: str, root: Path) -> Path:
    folder = root / f"ml_dtypes-{version}"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
                    "--target", str(folder), f"ml_dtypes=={version}"], check=True)
    found = subprocess.run([sys.executable, "-c", "import ml_dtypes; print(ml_dtypes.__version__)"],
                           env={**os.environ, "PYTHONPATH": str(folder)}, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == version, f"{folder} gives ml_dtypes {found.stdout.strip()}, not {version}"
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--versions", default="0.6.0,0.7.0")
    args = parser.parse_args()
    versions = args.versions.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-jax-start-") as tmp:
        folders = {v: install(v, Path(tmp)) for v in versions}
        for folder in folders.values():  # bytecode caches written: a second start, as every worker's after the first
            cpu_seconds(PROGRAMS["JAX start (import, one array)"], folder)
        samples: dict[tuple[str, str], list[float]] = {(p, v): [] for p in PROGRAMS for v in versions}
        for r in range(args.rounds):
            order = versions if r % 2 == 0 else versions[::-1]
            for name, code in PROGRAMS.items():
                for v in order:
                    samples[(name, v)].append(cpu_seconds(code, folders[v]))
    base = versions[0]
    print(f"| what | {' | '.join(f'ml_dtypes {v} (CPU s)' for v in versions)} | / {base} |")
    print(f"| --- | {' | '.join('---' for _ in versions)} | --- |")
    for name in PROGRAMS:
        medians = [statistics.median(samples[(name, v)]) for v in versions]
        ratios = " / ".join(f"{m / medians[0]:.2f}x" for m in medians[1:])
        print(f"| {name} | {' | '.join(f'{m:.3f}' for m in medians)} | {ratios} |")


if __name__ == "__main__":
    main()
