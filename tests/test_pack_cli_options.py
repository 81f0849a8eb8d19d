"""`reprobundle pack`'s switches for what the reference run records: --no-profile leaves out the per-op profile and
--no-dump the XLA dump, as `capture`'s switches of the same names (the README says they are pack's)."""

from __future__ import annotations

import json
from pathlib import Path

from cli_runner import cli

from reprobundle.bundle.registry import Registry

ROOT = Path(__file__).resolve().parent.parent


def test_no_profile_and_no_dump_leave_their_records_out(store_dir):
    script = str(ROOT / "examples/chain.py")
    base = ["--repeat", "3", "--warmup", "1", "--json"]
    code, out, err = cli("pack", script, "--name", "full", *base, store=store_dir)
    assert code == 0, err
    code, out, err = cli("pack", script, "--name", "lean", "--no-profile", "--no-dump", *base, store=store_dir)
    assert code == 0, err
    assert json.loads(out)["name"] == "lean"
    registry = Registry.open(store_dir)
    full, lean = (registry.resolve(name).manifest for name in ("full", "lean"))
    assert full["reference"].get("per_op") and "xla_dump" in full["artifacts"]
    assert not lean["reference"].get("per_op") and "xla_dump" not in lean["artifacts"]
    assert lean["reference"]["timing"]["samples_ns"]  # timed all the same
