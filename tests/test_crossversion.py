"""Cross-version replay with real JAX releases, installed by reprobundle's own environment manager.

The first run downloads and installs each release (cached afterwards under the uv cache); these tests are the
product and run in CI.
"""

import json
from pathlib import Path

import pytest

from reprobundle.registry import Registry

from test_pack_replay import cli

ROOT = Path(__file__).parent.parent
pytestmark = pytest.mark.crossversion


def test_attention_on_072_and_080_shows_where_time_moved(store_dir, tmp_path):
    code, out, err = cli("pack", str(ROOT / "examples/attention.py"), "--name", "attention", "--repeat", "5",
                         "--warmup", "2", store=store_dir)
    assert code == 0, err
    report_path = tmp_path / "report.md"
    html_path = tmp_path / "report.html"
    code, out, err = cli("replay", "attention", "--jax", "0.7.2", "--jax", "0.8.0", "--repeat", "40", "--warmup", "3",
                         "--report", str(report_path), "--html", str(html_path), "--json", store=store_dir)
    assert code == 0, err
    data = json.loads(out)
    runs = {r["requested"]: r for r in data["runs"]}
    assert runs["0.7.2"]["jax"] == "0.7.2" and runs["0.8.0"]["jax"] == "0.8.0"
    assert all(r["status"] == "ok" and r["check"]["ok"] for r in runs.values())
    comparison = data["comparison"]
    assert comparison["baseline"] == "0.7.2"
    row = next(r for r in comparison["rows"] if r["requested"] == "0.8.0")
    assert row["verdict"] in ("slower", "faster"), row
    diff = next(d for d in comparison["diffs"] if d["label"] == "0.8.0")
    assert diff["moved_row"] is not None
    moved_name = diff["moved_row"]["cand_name"] or diff["moved_row"]["base_name"]
    assert moved_name in diff["moved"]
    assert not diff["fusion"]["identical"]
    report = report_path.read_text()
    assert moved_name in report and "0.7.2" in report and "0.8.0" in report
    assert "<svg" in html_path.read_text()
