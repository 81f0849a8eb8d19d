"""Golden bundles of every format version: read, verify and replay them forever (never regenerate them)."""

from pathlib import Path

import numpy as np
import pytest
from manifests import assert_schema_valid

from reprobundle import api
from reprobundle.bundle import manifest as mf
from reprobundle.bundle.registry import open_ref

GOLDEN = sorted((Path(__file__).parent / "golden").glob("v*.zip"))


def test_there_is_a_golden_bundle_for_every_format_version():
    versions = {int(p.name.split("-")[0][1:]) for p in GOLDEN}
    assert versions == set(range(1, mf.MANIFEST_VERSION + 1))


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.name)
def test_golden_reads_verifies_and_replays(path):
    registry, bundle = open_ref(str(path))
    assert registry.verify(bundle) == []
    if bundle.manifest["format_version"] == mf.MANIFEST_VERSION:
        assert_schema_valid(bundle.manifest)
    assert bundle.manifest["name"] == "golden"
    assert [o["shape"] for o in bundle.manifest["reference"]["outputs"]] == [[4, 8], [], [4]]
    run = api.replay(str(path), warmup=1, repeat=3).run
    assert run["status"] == "ok", run["reason"]
    assert run["check"]["ok"]
    assert np.isfinite(run["check"]["max_abs_err"])
