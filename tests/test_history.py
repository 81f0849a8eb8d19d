"""`sweep` over several candidates, then `history`: a registry across releases from its stored runs only.

Real bundles replayed on real releases (0.4.30 the baseline, 0.7.2 and the installed jax the candidates, 0.8.0 in a
replay of its own). What is asserted does not depend on timing: which cells were timed together with the baseline
(and so carry a verdict and an interval) and which were not; `nanfast` (packed with XLA's fast math told to assume
no NaN, see test_sweep.py) mismatches its reference on every replay, on any machine, so its first regressed release
is never a regression against a baseline that mismatches too; the page is one offline file with a chart per bundle, checked in headless Chromium.
"""

from __future__ import annotations

import json
import shutil
import subprocess

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import quick
from chain import chain
from cli_runner import cli

import reprobundle
from reprobundle import api
from reprobundle.fleet.sweep import host_jax
from reprobundle.render import history as history_render
from reprobundle.render import sweep as sweep_render

pytestmark = pytest.mark.crossversion

BASELINE, CANDIDATES, APART = "0.4.30", ["0.7.2", "installed"], "0.8.0"
SWEEP = dict(rounds=3, repeat=4, warmup=1)


def _nan_count(x):
    return jnp.sum(x != x), jnp.where(x != x, 0.0, x)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """(store, the sweep's data): chain and nanfast swept on 0.4.30 vs 0.7.2 and installed, then chain alone on
    0.8.0."""
    store = str(tmp_path_factory.mktemp("history") / "store")
    fn, args = chain(2, rows=32, width=64, seed=2)
    reprobundle.pack(fn, *args, name="chain", store=store, **quick.PACK)
    x = np.linspace(-2, 2, 64, dtype=np.float32)
    with pytest.MonkeyPatch.context() as mp:  # the packing run only: replays run without these flags
        mp.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=true --xla_cpu_fast_math_honor_nans=false")
        reprobundle.pack(jax.jit(_nan_count), np.where(x > 1, np.nan, x).astype(np.float32), name="nanfast",
                         store=store, **quick.PACK)
    data = api.sweep([], BASELINE, CANDIDATES, store=store, **SWEEP)
    reprobundle.replay("chain", [APART], store=store, rounds=1, repeat=3, warmup=1)
    return store, data


def test_a_sweep_times_every_candidate_with_the_baseline(swept):
    _, data = swept
    assert data["candidates"] == CANDIDATES and data["counts"]["total"] == 2
    for result in data["results"]:
        assert [c["version"] for c in result["candidates"]] == CANDIDATES
        assert [r["version"] for r in result["runs"]] == [BASELINE, *CANDIDATES]
        assert len({r["run_id"] for r in result["runs"]}) == 3 and result["group"]
    chain_result = next(r for r in data["results"] if r["ref"] == "chain@1")
    for candidate in chain_result["candidates"]:
        assert candidate["verdict"] in ("slower", "faster", "same") and candidate["method"] == "paired rounds"
        assert candidate["ci95"][0] <= candidate["ratio"] <= candidate["ci95"][1]
    worst = max(chain_result["candidates"], key=lambda c: c["ratio"])
    assert chain_result["ratio"] == worst["ratio"]  # the bundle's line shows its worst candidate
    nanfast = next(r for r in data["results"] if r["ref"] == "nanfast@1")
    assert nanfast["outputs"] == "mismatch" and all(c["outputs"] == "mismatch" for c in nanfast["candidates"])
    rows = [r["ref"] for r in sweep_render.ordered(data["results"])]
    assert sorted(rows) == sorted(f"{ref} on {v}" for ref in ("chain@1", "nanfast@1") for v in CANDIDATES)


def test_history_json_from_stored_runs(swept):
    store, _ = swept
    code, out, err = cli("history", "--json", store=store)
    assert code == 0, err
    data = json.loads(out)
    here = host_jax()
    assert data["baseline"] == BASELINE and data["columns"] == [BASELINE, "0.7.2", APART, here]
    rows = {r["name"]: r for r in data["rows"]}
    assert list(rows) == ["chain", "nanfast"]
    chain_cells = rows["chain"]["cells"]
    assert chain_cells[BASELINE]["baseline"] and chain_cells[BASELINE]["ratio"] == 1.0
    for column in ("0.7.2", here):  # timed together with the baseline: a paired verdict with its interval
        cell = chain_cells[column]
        assert cell["together"] and cell["verdict"] in ("slower", "faster", "same") and len(cell["ci95"]) == 2
    apart = chain_cells[APART]  # its own replay, never timed with the baseline: a ratio of medians, no verdict
    assert not apart["together"] and apart["verdict"] is None and apart["ci95"] is None and apart["ratio"] > 0
    assert APART not in rows["nanfast"]["cells"]
    assert all(c["status"] == "mismatch" for c in rows["nanfast"]["cells"].values())
    assert rows["nanfast"]["first_regressed"] is None  # the baseline mismatches too: nothing got worse
    first = rows["chain"]["first_regressed"]
    assert first is None or (chain_cells[first]["verdict"] == "slower" and chain_cells[first]["settled"])
    assert [p["column"] for p in rows["chain"]["series"]] == data["columns"]
    code, out, _ = cli("history", "--baseline", "0.7.2", store=store)
    assert code == 0 and "baseline 0.7.2" in out and "nanfast" in out
    code, _, err = cli("history", "--baseline", "0.6.0", store=store)
    assert code == 2 and "no stored run was made on '0.6.0'" in err


def test_history_page_is_one_offline_file(swept, tmp_path):
    store, _ = swept
    page = tmp_path / "site" / "history.html"
    code, out, err = cli("history", "--html", page, store=store)
    assert code == 0, err
    assert "chain@1" in out and "nanfast@1" in out and "* the first release worse than the baseline" in out
    text = page.read_text()
    assert text.count("<svg class='chart'") == 2
    assert "<script" not in text and "<link" not in text and "src=" not in text and "url(" not in text
    reports = sorted(p.name for p in (tmp_path / "site" / "history-reports").iterdir())
    assert reports == sorted(f"{name}-1-{column}.html" for name in ("chain", "nanfast")
                             for column in ("0.7.2", host_jax()))
    for name in reports:
        assert f"href='history-reports/{name}'" in text
    browser = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if browser is None:
        pytest.skip("no headless Chromium here to render the page (.ci/run installs it)")
    shot = tmp_path / "page.png"
    subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1000,1200",
                    f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 10_000
    dom = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert dom.count("<tr>") == 3 and dom.count("median time per call by release") == 2


def test_cells_read_in_words_not_only_colour():
    together = {"status": "ok", "together": True, "verdict": "slower", "settled": True, "ratio": 1.25}
    assert history_render.cell_text(together) == "1.25x ▲" and history_render.cell_style(together) == "slower"
    unsettled = {**together, "verdict": "same", "settled": False, "ratio": 1.01}
    assert history_render.cell_text(unsettled) == "1.01x ?"
    apart = {"status": "ok", "together": False, "verdict": None, "ratio": 0.5}
    assert history_render.cell_text(apart) == "(0.50x)" and history_render.cell_style(apart) == "apart"
    failed = {"status": "incompatible", "together": False, "verdict": None, "ratio": None}
    assert history_render.cell_text(failed) == "incompatible" and history_render.cell_style(failed) == "failed"


def _timed(ms: float, group: str, jitter: list[float]) -> dict:
    samples = [int(ms * 1e6 * (1 + j)) for j in jitter for _ in range(2)]  # two calls a step, one step a round
    return {"samples_ns": samples, "steps": [2] * len(jitter), "rounds": [1] * len(jitter), "group": group}


def _run(version: str, status: str, created: str, timing: dict | None = None) -> dict:
    return {"requested": version, "status": status, "created": created, "run_id": f"{version}-{created}",
            "group": (timing or {}).get("group", "g0"), "environment": {"jax": version}, "timing": timing or {}, "reason": ""}


def test_first_regressed_is_what_an_experiment_showed():
    from reprobundle.analysis.history import build_history

    jitter = [0.0, 0.004, -0.003, 0.002, -0.001, 0.003, -0.002, 0.001]
    runs = [_run("0.4.30", "ok", "1", _timed(10, "g1", jitter)),
            _run("0.5.0", "ok", "2", _timed(10.1, "g1", jitter[::-1])),
            _run("0.6.0", "ok", "3", _timed(15, "g1", jitter)),  # 1.5x, every round: settled slower
            _run("0.7.0", "mismatch", "4", _timed(10, "g2", jitter)),  # not timed with the baseline
            _run("0.8.0", "ok", "5", _timed(10, "g3", jitter))]
    identity = {"ref": "b@1", "name": "b", "version": 1, "bundle_id": "sha256:" + "0" * 64}
    data = build_history([(identity, runs)])
    row = data["rows"][0]
    assert data["columns"] == ["0.4.30", "0.5.0", "0.6.0", "0.7.0", "0.8.0"]
    assert row["cells"]["0.6.0"]["verdict"] == "slower" and row["cells"]["0.6.0"]["settled"]
    assert row["first_regressed"] == "0.6.0"
    assert not row["cells"]["0.8.0"]["together"] and row["cells"]["0.8.0"]["verdict"] is None
    later = build_history([(identity, runs)], baseline="0.6.0")["rows"][0]
    assert later["first_regressed"] == "0.7.0"  # outputs mismatch where the baseline's matched
    failed_base = [_run("0.4.30", "incompatible", "1"), *runs[1:]]
    assert build_history([(identity, failed_base)])["rows"][0]["first_regressed"] is None
