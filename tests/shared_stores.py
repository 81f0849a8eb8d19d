"""Stores that several test modules start from, built once per run of the suite (pytest-xdist hands whole modules to
its processes, so a module-scoped fixture alone would build the same store once in each module that needs it).

The first process to ask for a store builds it under a file lock in the run's own temporary folder (shared by the
xdist processes of one run, never by two runs), into a folder renamed into place only once it is whole; every caller
gets a copy of its own to change as it likes. Only the building is shared: each module still asserts what it needs
on what the store holds."""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

import quick

PROGRAMS = Path(__file__).parent / "programs" / "retrace"


def shared_store(tmp_path_factory, key: str, build: Callable[[Path], None]) -> Path:
    """A copy, the caller's own, of the store `build(folder)` makes in `folder`: built once per run for `key`."""
    base = tmp_path_factory.getbasetemp()
    root = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # the run's folder, shared by its workers
    template = root / f"shared-{key}"
    from filelock import FileLock

    with FileLock(str(template) + ".lock"):
        if not template.exists():
            building = root / f"shared-{key}.building-{os.getpid()}"
            shutil.rmtree(building, ignore_errors=True)
            build(building / "store")
            building.rename(template)
    copy = tmp_path_factory.mktemp(key) / "store"
    shutil.copytree(template / "store", copy)
    return copy


def _bisected_rng_and_colsum(store: Path) -> None:
    from reprobundle import api

    untimed = dict(store=str(store), warmup=1, repeat=2, rounds=1)
    for name, program in (("rng", "rng.py"), ("colsum", "colsum.py")):
        api.pack_script(str(PROGRAMS / program), name=name, store=str(store), **quick.PACK)
    api.bisect("rng", "0.4.38", "0.5.0", **untimed)
    api.bisect("colsum", "0.5.0", "0.5.1", by="bits", mode="frozen", **untimed)


def bisected_rng_and_colsum(tmp_path_factory) -> Path:
    """A store (the caller's copy) with rng@1 (tests/programs/retrace/rng.py: its draw changes when 0.5.0 retraces
    it) bisected from 0.4.38 to 0.5.0 with no flag, and colsum@1 (colsum.py: its sums' last bits change with jaxlib
    0.5.1) bisected from 0.5.0 to 0.5.1 by bits, frozen; each with warmup 1, repeat 2 and one round, as the modules
    that share it bisected them each on its own before. Read each answer with `bisection_of`."""
    return shared_store(tmp_path_factory, "rng-colsum", _bisected_rng_and_colsum)


def bisection_of(store: Path, ref: str) -> dict:
    """The answer of the last bisection stored for `ref` (its criterion, mode, last good and first bad release)."""
    from reprobundle import api

    registry = api.open_registry(str(store))
    answers = [a for a in registry.answers(registry.resolve(ref).ref.bundle_id) if a["kind"] == "bisection"]
    return answers[-1]["answer"]
